//! Faults around the load: a metrics endpoint that never answers does not
//! delay, shape or extend the load; credentials go only to the target.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Accepts connections and never answers (held open for a minute at most).
fn silent_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        let start = Instant::now();
        for s in listener.incoming().take(64) {
            held.push(s);
            if start.elapsed() > Duration::from_secs(60) {
                break;
            }
        }
        std::thread::sleep(Duration::from_secs(60));
    });
    url
}

/// A metrics endpoint that records the headers of every request it gets.
fn logging_endpoint() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(200) {
            let Ok(mut stream) = stream else { continue };
            let reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            for line in reader.lines() {
                let Ok(line) = line else { break };
                if line.is_empty() {
                    break;
                }
                head.push_str(&line);
                head.push('\n');
            }
            log.lock().unwrap().push(head);
            let body = "# TYPE up gauge\nup 1\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, seen)
}

#[test]
fn a_silent_metrics_endpoint_neither_delays_shapes_nor_extends_the_load() {
    let server = Server::start(exact(20, 1));
    let silent = silent_endpoint();
    let out = run_dir("silent-metrics");
    let start = Instant::now();
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &server.url,
            "--rate",
            "25",
            "--arrival",
            "constant",
        ])
        .args([
            "--duration",
            "4s",
            "--output-tokens",
            "4",
            "--scrape-interval",
            "200ms",
        ])
        .args(["--metrics-url", &silent, "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let took = start.elapsed();
    assert_ok(&o);
    let recs = records(&out);
    let sent: Vec<f64> = recs
        .iter()
        .map(|r| r["sent_at_us"].as_f64().unwrap() / 1e6)
        .collect();
    let scheduled: Vec<f64> = recs
        .iter()
        .map(|r| r["scheduled_at_us"].as_f64().unwrap() / 1e6)
        .collect();
    let first = scheduled.iter().copied().fold(f64::INFINITY, f64::min);
    let last_scheduled = scheduled.iter().copied().fold(0.0, f64::max);
    let last_sent = sent.iter().copied().fold(0.0, f64::max);
    // The whole 4 s schedule ran, from the start of the run's clock (before,
    // a 5 s baseline scrape used the clock up and the load never came).
    assert!(
        first < 0.2,
        "the load started late: first scheduled at {first} s"
    );
    assert!(
        (last_scheduled - 4.0).abs() <= 0.2,
        "schedule of {last_scheduled} s, not 4 s"
    );
    assert!((95..=105).contains(&recs.len()), "{} requests", recs.len());
    // Kept on time: no burst of requests held back behind a scrape (that
    // would be seconds late). Bounds a loaded 2-core machine keeps.
    let r = results(&out);
    let lag = stat(&r, "latency.client_lag_ms.p99");
    assert!(lag < 500.0, "the schedule was not kept: lag p99 {lag} ms");
    assert!(last_sent < 4.5, "last sent at {last_sent} s");
    // Baseline (≤ 2 s) + 4 s of load + the last scrape (≤ 1 s), with room
    // for start-up on a loaded machine; the old scraper's 5 s scrapes after
    // the load ran past this.
    assert!(took < Duration::from_secs(12), "the run took {took:?}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("metrics endpoint {silent}")),
        "{stdout}"
    );
}

#[test]
fn credentials_go_only_to_the_target() {
    let server = Server::start(exact(5, 1));
    let (exporter, seen) = logging_endpoint();
    let out = run_dir("credentials");
    let o = tokenscope()
        .env("TS_TEST_KEY", "sk-test-key-123")
        .args([
            "bench",
            "--url",
            &server.url,
            "--api-key-env",
            "TS_TEST_KEY",
        ])
        .args(["--header", "X-Tenant: tenant-secret-456"])
        .args([
            "--metrics-url",
            &exporter,
            "--metrics-header",
            "X-Exporter-Token: exp-789",
        ])
        .args([
            "--requests",
            "4",
            "--output-tokens",
            "2",
            "--scrape-interval",
            "100ms",
        ])
        .args(["--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let heads = seen.lock().unwrap().clone();
    assert!(heads.len() >= 2, "the exporter was scraped: {heads:?}");
    for h in &heads {
        let lower = h.to_ascii_lowercase();
        assert!(
            !lower.contains("sk-test-key-123"),
            "the API key reached the exporter:\n{h}"
        );
        assert!(
            !lower.contains("tenant-secret-456"),
            "--header reached the exporter:\n{h}"
        );
        assert!(!lower.contains("authorization"), "{h}");
        assert!(
            lower.contains("x-exporter-token: exp-789"),
            "its own header: {h}"
        );
    }
    // Nothing secret is written down either.
    for file in ["results.json", "requests.jsonl", "timeseries.jsonl"] {
        let text = std::fs::read_to_string(out.join(file)).unwrap();
        for secret in ["sk-test-key-123", "tenant-secret-456", "exp-789"] {
            assert!(!text.contains(secret), "{secret} in {file}");
        }
    }
}

/// A small tmpfs of its own (the tests run as root), unmounted when dropped.
struct Tmpfs {
    dir: std::path::PathBuf,
}

impl Tmpfs {
    fn mount(name: &str, size: &str) -> Tmpfs {
        let dir = run_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        let o = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output()
            .expect("mount(8)");
        assert!(
            o.status.success(),
            "mounting a tmpfs needs root (the test command runs as root): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Tmpfs { dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.dir).status();
    }
}

#[test]
fn a_full_disk_stops_the_run_and_loses_no_completed_request() {
    let server = Server::start(exact(1, 0));
    let disk = Tmpfs::mount("disk-full", "1m");
    let out = disk.dir.join("run");
    let o = tokenscope()
        .args(["bench", "--url", &server.url, "--no-metrics", "--quiet"])
        .args([
            "--requests",
            "20000",
            "--concurrency",
            "16",
            "--output-tokens",
            "64",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "exit 8: output failed\n{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    // Every line on disk is a whole record.
    let text = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    assert!(text.ends_with('\n'), "no torn last line");
    let lines = text.lines().count();
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
        assert!(v["id"].is_u64());
    }
    assert!(lines > 100, "the disk held {lines} records");
    assert!(
        stderr.contains(&format!("the first {lines} of")),
        "{stderr}"
    );
    // The results, from the reserved space, say what was kept.
    let r = results(&out);
    assert!(
        r["output_error"]
            .as_str()
            .unwrap()
            .contains("No space left"),
        "{}",
        r["output_error"]
    );
    assert!(stat(&r, "counts.requests") >= lines as f64);
    // It stopped: far fewer than the 20,000 asked for were sent.
    assert!(stat(&r, "counts.requests") < 10_000.0);
}

#[test]
fn a_full_disk_at_the_start_is_refused_before_any_load() {
    let server = Server::start(exact(1, 0));
    let disk = Tmpfs::mount("disk-full-start", "1m");
    std::fs::write(disk.dir.join("ballast"), vec![0u8; 800 * 1024]).unwrap();
    let out = disk.dir.join("run");
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &server.url,
            "--no-metrics",
            "--quiet",
            "--requests",
            "5",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "{stderr}");
    assert!(stderr.contains("KiB free"), "{stderr}");
    assert!(!out.join("requests.jsonl").exists(), "no load was sent");
}

/// `bench` in the background against `url`, many requests, output kept.
fn spawn_bench(url: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Child {
    tokenscope()
        .args(["bench", "--url", url, "--quiet", "--requests", "100000"])
        .args(["--concurrency", "8", "--output-tokens", "16", "--out"])
        .arg(out)
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (bounded) until `requests.jsonl` holds `n` lines.
fn wait_for_records(out: &std::path::Path, n: usize) {
    let start = Instant::now();
    while std::fs::read_to_string(out.join("requests.jsonl")).map_or(0, |t| t.lines().count()) < n {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no {n} records in 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for a signalled run: exit 130 and a partial results.json.
fn ended_partial(child: std::process::Child, out: &std::path::Path) -> serde_json::Value {
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    let r = results(out);
    assert_eq!(r["partial"], true);
    r
}

fn signal(child: &std::process::Child, sig: libc::c_int) {
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

#[test]
fn sigterm_ends_a_run_like_ctrl_c() {
    let server = Server::start(exact(20, 5));
    let out = run_dir("sigterm");
    let child = spawn_bench(&server.url, &out, &["--no-metrics"]);
    wait_for_records(&out, 20);
    signal(&child, libc::SIGTERM);
    let r = ended_partial(child, &out);
    assert!(stat(&r, "counts.requests") >= 20.0);
}

#[test]
fn sigkill_keeps_every_completed_record_and_report_rebuilds_the_run() {
    let server = Server::start(exact(20, 5));
    let out = run_dir("sigkill");
    let child = spawn_bench(&server.url, &out, &["--no-metrics"]);
    wait_for_records(&out, 30);
    signal(&child, libc::SIGKILL);
    let _ = child.wait_with_output().unwrap();
    assert!(!out.join("results.json").exists());
    let text = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    let whole: Vec<&str> = text
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .collect();
    assert!(whole.len() >= 30);
    for (i, line) in whole.iter().enumerate() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
    }
    let o = tokenscope()
        .args(["report", "--format", "terminal"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("PARTIAL"), "{stdout}");
    assert!(
        stdout.contains(&format!("{} requests", whole.len())),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("rebuilt from requests.jsonl"));
}

#[test]
fn ctrl_c_during_the_first_scrape_leaves_a_complete_run_directory() {
    let server = Server::start(exact(20, 5));
    let silent = silent_endpoint();
    let out = run_dir("ctrlc-scrape");
    let child = spawn_bench(&server.url, &out, &["--metrics-url", &silent]);
    // The baseline scrape waits up to 2 s on the silent endpoint: interrupt
    // it there (timeseries.jsonl appears as the scraper starts).
    let start = Instant::now();
    while !out.join("timeseries.jsonl").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the scraper never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&child, libc::SIGINT);
    ended_partial(child, &out);
    assert!(out.join("requests.jsonl").exists() && out.join("report.html").exists());
}

#[test]
fn a_panicking_request_is_recorded_as_internal_and_the_run_exits_1() {
    let server = Server::start(exact(5, 1));
    let out = run_dir("panic");
    let o = tokenscope()
        .env("TOKENSCOPE_FAULT_PANIC_REQUEST", "3")
        .args(["bench", "--url", &server.url, "--no-metrics", "--quiet"])
        .args([
            "--requests",
            "10",
            "--concurrency",
            "2",
            "--output-tokens",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("tokenscope itself failed"), "{stderr}");
    let recs = records(&out);
    assert_eq!(recs.len(), 10, "no request lost");
    let bad: Vec<_> = recs
        .iter()
        .filter(|r| r["error_kind"] == "internal")
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0]["id"], 3);
    assert_eq!(stat(&results(&out), "counts.errors.internal"), 1.0);
    // Absurd flags are usage errors, never panics.
    for (flag, value) in [
        ("--rate", "1e-300"),
        ("--input-tokens", "normal:inf,1"),
        ("--input-tokens", "1e15"),
        ("--timeout", "1e19"),
        ("--duration", "99999999999h"),
        ("--idle-timeout", "0s"),
    ] {
        let o = tokenscope().args(["bench", flag, value]).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{flag} {value}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains(flag), "{flag}");
    }
}

#[test]
fn a_closed_stdout_ends_quietly_with_the_runs_own_exit_code() {
    let server = Server::start(exact(5, 1));
    let out = run_dir("broken-pipe");
    // `… --slo ttft_max=1ms | true`: the summary meets a closed pipe; the
    // run's exit code (5: not met) survives it, and nothing panics.
    let script = format!(
        "{} bench --url {} --quiet --no-metrics --requests 4 --output-tokens 2 --slo ttft_max=1ms --out {} | true; echo \"${{PIPESTATUS[0]}}\"",
        env!("CARGO_BIN_EXE_tokenscope"),
        server.url,
        out.display()
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "5", "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let script = format!(
        "{} report --format md {} | true; echo \"${{PIPESTATUS[0]}}\"",
        env!("CARGO_BIN_EXE_tokenscope"),
        out.display()
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "0");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
}

/// 128 KB of one repeated word, streamed in 32 chunks, no usage: the
/// tokenizer's worst case (one pre-token). It must not stall other streams.
fn one_word_server() -> String {
    raw_server(|line| {
        if line.starts_with("GET /v1/models") {
            return http("200 OK", "application/json", r#"{"data":[{"id":"m"}]}"#);
        }
        let chunk = format!(
            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
            "ab".repeat(2048)
        );
        let body = chunk.repeat(32)
            + "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        http("200 OK", "text/event-stream", &body)
    })
}

#[test]
fn counting_a_huge_one_word_answer_neither_stalls_nor_times_out() {
    let url = one_word_server();
    let out = run_dir("one-word");
    let start = Instant::now();
    let o = bench_chat(
        &url,
        &out,
        &["--quiet", "--requests", "6", "--idle-timeout", "3s"],
    );
    assert_ok(&o);
    let took = start.elapsed();
    let r = results(&out);
    assert_eq!(r["counts"]["succeeded"], 6, "{}", r["counts"]);
    assert_eq!(r["tokens"]["output_sources"]["tokenizer"], 6);
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(stat(&r, "client.cpu_cores") < 2.5, "the CPU figure is sane");
}

/// `bench` of model `m` on the chat API against a raw server: 2 requests.
fn bench_raw(url: &str, name: &str) -> (std::process::Output, serde_json::Value) {
    let out = run_dir(name);
    let o = bench_chat(url, &out, &["--quiet", "--requests", "2"]);
    let first = records(&out).into_iter().next().unwrap_or_default();
    (o, first)
}

#[test]
fn misleading_answers_get_their_own_classification_or_are_tolerated() {
    // A complete JSON body where a stream was asked for.
    let url = raw_server(|_| {
        http(
            "200 OK",
            "application/json",
            r#"{"choices":[{"message":{"content":"hello"},"finish_reason":"stop"}],"usage":{"completion_tokens":1}}"#,
        )
    });
    let (o, rec) = bench_raw(&url, "not-streamed");
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(rec["error_kind"], "not_streamed", "{rec}");
    assert!(rec["error"]
        .as_str()
        .unwrap()
        .contains("ignored stream=true"));

    // A redirect (to a GET-only path): reported, not followed.
    let url = raw_server(|_| {
        "HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into()
    });
    let (_, rec) = bench_raw(&url, "redirected");
    assert_eq!(rec["error_kind"], "http_302", "{rec}");
    assert!(
        rec["error"]
            .as_str()
            .unwrap()
            .contains("redirected to /elsewhere"),
        "{rec}"
    );

    // A stream whose choices are always empty: no text at all.
    let url = raw_server(|_| {
        http(
            "200 OK",
            "text/event-stream",
            "data: {\"choices\":[]}\n\ndata: {\"choices\":[]}\n\ndata: [DONE]\n\n",
        )
    });
    let (_, rec) = bench_raw(&url, "empty-choices");
    assert_eq!(rec["error_kind"], "empty_answer", "{rec}");

    // Float usage counts and `choices: null` are tolerated, as servers send them.
    let url = raw_server(|_| {
        http(
            "200 OK",
            "text/event-stream",
            "data: {\"choices\":null}\n\n\
             data: {\"choices\":[{\"delta\":{\"content\":\"hi there\"},\"finish_reason\":\"stop\"}]}\n\n\
             data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7.0,\"completion_tokens\":2.0}}\n\n\
             data: [DONE]\n\n",
        )
    });
    let (o, rec) = bench_raw(&url, "float-usage");
    assert_ok(&o);
    assert!(rec["error_kind"].is_null(), "{rec}");
    assert_eq!(rec["output_tokens"], 2);
    assert_eq!(rec["output_token_source"], "server_usage");
}

#[test]
fn the_model_probe_is_bounded_by_the_runs_timeout() {
    // /v1/models never answers: the probe gives up with --timeout, not 60 s.
    let silent = silent_endpoint().replace("/metrics", "");
    let start = Instant::now();
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &silent,
            "--timeout",
            "2s",
            "--requests",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn a_concurrency_over_the_open_file_limit_is_refused_with_the_fix() {
    use std::os::unix::process::CommandExt;
    let server = Server::start(exact(1, 0));
    let out = run_dir("nofile");
    let mut cmd = tokenscope();
    cmd.args(["bench", "--url", &server.url, "--no-metrics", "--quiet"])
        .args(["--concurrency", "1000", "--requests", "1000", "--out"])
        .arg(&out);
    // SAFETY: setrlimit is async-signal-safe; the child may then open 256 files.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &lim) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        })
    };
    let o = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--concurrency 1000 needs about 1064 open files"),
        "{stderr}"
    );
    assert!(stderr.contains("lower --concurrency to 192"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(!out.join("requests.jsonl").exists(), "no load was sent");

    // Under the limit, the soft limit is raised to the hard one and recorded.
    let o = bench(
        &server.url,
        &out,
        &["--no-metrics", "--concurrency", "4", "--requests", "8"],
    );
    assert_ok(&o);
    let r = results(&out);
    let hard = rlimit_hard();
    assert_eq!(stat(&r, "client.open_file_limit") as u64, hard);
    assert_eq!(stat(&r, "client.connections.opened"), 4.0);
}

fn rlimit_hard() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_max
}
