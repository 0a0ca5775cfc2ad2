//! Bad input, failing servers and interruptions: classified, counted, nothing lost.

mod common;
use common::*;
use std::time::Duration;
use tokenscope_sim::faults::Faults;

#[test]
fn injected_failures_are_each_counted_under_their_kind() {
    let mut config = exact(5, 2);
    config.faults = Faults {
        http_429: 0.1,
        http_500: 0.1,
        http_503: 0.1,
        disconnect: 0.1,
        malformed: 0.1,
        stall: 0.05,
        ..Faults::default()
    };
    config.stall = Duration::from_secs(3);
    config.seed = 11;
    let server = Server::start(config);
    let out = run_dir("faults");
    let o = bench(
        &server.url,
        &out,
        &[
            "--concurrency",
            "8",
            "--requests",
            "200",
            "--output-tokens",
            "20",
            "--idle-timeout",
            "1s",
        ],
    );
    assert_ok(&o); // some requests succeeded: the run itself succeeded
    let r = results(&out);
    let errors = &r["counts"]["errors"];
    for kind in [
        "http_429",
        "http_500",
        "http_503",
        "stream",
        "malformed",
        "timeout",
    ] {
        assert!(
            errors[kind].as_u64().unwrap_or(0) > 0,
            "no `{kind}` among {errors}"
        );
    }
    let failed: u64 = errors
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(stat(&r, "counts.failed") as u64, failed);
    assert_eq!(stat(&r, "counts.requests"), 200.0);
    // Every request is in requests.jsonl, failures with a one-line message.
    let recs = records(&out);
    assert_eq!(recs.len(), 200);
    for rec in recs.iter().filter(|r| !r["error_kind"].is_null()) {
        let msg = rec["error"].as_str().unwrap();
        assert!(!msg.is_empty() && !msg.contains('\n'), "{msg:?}");
    }
    assert!(recs
        .iter()
        .any(|r| r["error_kind"] == "http_429" && r["status"] == 429));
}

#[test]
fn ctrl_c_cancels_in_flight_requests_and_keeps_every_finished_one() {
    let server = Server::start(exact(10, 10));
    let out = run_dir("sigint");
    let child = tokenscope()
        .args([
            "bench",
            "--url",
            &server.url,
            "--quiet",
            "--concurrency",
            "4",
            "--requests",
            "100000",
        ])
        .args(["--output-tokens", "20", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = results(&out);
    assert_eq!(r["partial"], true);
    let recs = records(&out);
    assert_eq!(
        recs.len() as f64,
        stat(&r, "counts.requests"),
        "every sent request is recorded"
    );
    let cancelled = recs
        .iter()
        .filter(|r| r["error_kind"] == "cancelled")
        .count();
    assert_eq!(
        cancelled, 4,
        "the 4 in-flight requests are recorded as cancelled"
    );
    let succeeded = recs.iter().filter(|r| r["error_kind"].is_null()).count();
    assert!(succeeded > 10, "only {succeeded} finished before SIGINT");
    // Nothing sent is missing: ids are handed out in order, so they are 0..n.
    let mut ids: Vec<u64> = recs.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    assert!(
        ids.iter().enumerate().all(|(i, &id)| i as u64 == id),
        "gaps in the recorded ids"
    );
    // Every stream the server finished is among the successes, except those
    // whose [DONE] was on the wire when the client stopped reading.
    let served = server
        .stats
        .completed_streams
        .load(std::sync::atomic::Ordering::Relaxed) as usize;
    assert!(
        served >= succeeded && served <= succeeded + 4,
        "served {served}, recorded {succeeded}"
    );
}

#[test]
fn unreachable_target_exits_3_with_one_line() {
    let port = free_port();
    let out = run_dir("unreachable");
    let o = bench(
        &format!("http://127.0.0.1:{port}"),
        &out,
        &["--requests", "1"],
    );
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}

#[test]
fn every_request_failing_exits_4() {
    let mut config = exact(1, 1);
    config.faults.http_500 = 1.0;
    let server = Server::start(config);
    let out = run_dir("allfail");
    let o = bench(
        &server.url,
        &out,
        &[
            "--requests",
            "5",
            "--model",
            "m",
            "--api",
            "openai-completions",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(stat(&results(&out), "counts.errors.http_500"), 5.0);
}

#[test]
fn slo_not_met_exits_5_and_goodput_is_reported() {
    let server = Server::start(exact(100, 1));
    let out = run_dir("slo");
    let o = bench(
        &server.url,
        &out,
        &[
            "--requests",
            "4",
            "--output-tokens",
            "4",
            "--slo",
            "ttft_p99=20ms",
        ],
    );
    // Four requests decide it: even the most favourable reading of their
    // p99 (the third of four) is 100 ms.
    assert_eq!(o.status.code(), Some(5));
    let r = results(&out);
    assert_eq!(r["slo"]["met"], false);
    assert_eq!(r["slo"]["verdict"], "not_met");
    assert_eq!(stat(&r, "throughput.goodput_requests_per_s"), 0.0);
    let out = run_dir("slo-met");
    let o = bench(
        &server.url,
        &out,
        &[
            "--requests",
            "4",
            "--output-tokens",
            "4",
            "--slo",
            "ttft_max=2s",
        ],
    );
    assert_ok(&o);
    assert!(stat(&results(&out), "throughput.goodput_requests_per_s") > 0.0);
}

#[test]
fn a_p99_of_a_handful_of_requests_is_not_judged() {
    let server = Server::start(exact(100, 1));
    let out = run_dir("slo-few");
    let o = tokenscope()
        .args(["bench", "--url", &server.url, "--out"])
        .arg(&out)
        .args([
            "--requests",
            "32",
            "--concurrency",
            "8",
            "--output-tokens",
            "4",
        ])
        .args(["--slo", "ttft_p99=2s"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(7), "{stdout}{stderr}");
    assert!(
        stderr.contains("needs ≈ 1,000 requests"),
        "warned before: {stderr}"
    );
    assert!(
        stdout.contains("not enough requests to judge ttft p99 (n = 32; need ≈ 1,000)"),
        "{stdout}"
    );
    let r = results(&out);
    assert_eq!(r["slo"]["verdict"], "not_enough_data");
    let o = &r["slo"]["objectives"][0];
    assert_eq!(
        (o["n"].as_u64(), o["needed"].as_u64()),
        (Some(32), Some(1000))
    );
    assert!(o["ci_high_ms"].is_null(), "no upper bound from 32: {o}");
    // Markdown says what was run and the verdict first.
    let o = tokenscope()
        .args(["report", "--format", "md"])
        .arg(&out)
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("**Run:** closed loop, concurrency 8 · 32 requests"),
        "{md}"
    );
    assert!(md.contains("no --ignore-eos"), "{md}");
    assert!(
        md.find("**SLO not enough data to judge**").unwrap() < md.find("| latency").unwrap(),
        "{md}"
    );
    // The same run re-judged on its median: 32 requests suffice.
    let o = tokenscope()
        .args(["report", "--format", "terminal", "--slo", "ttft_p50=2s"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("SLO met"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("re-judged against --slo ttft_p50 ≤ 2000 ms")
    );
}

#[test]
fn slo_limits_carry_units() {
    for (flag, value, fix) in [
        ("--slo", "ttft_p99=500", "ttft_p99=500ms"),
        ("--objectives", "chat_ttft_p99=300", "chat_ttft_p99=300ms"),
    ] {
        let cmd = if flag == "--slo" { "bench" } else { "sweep" };
        let o = tokenscope().args([cmd, flag, value]).output().unwrap();
        assert_eq!(o.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(fix), "{flag} {value}: {stderr}");
    }
    // Microseconds are allowed, and echoed back in ms so a typo shows.
    let server = Server::start(exact(100, 1));
    let out = run_dir("slo-us");
    let o = bench(
        &server.url,
        &out,
        &[
            "--requests",
            "2",
            "--output-tokens",
            "2",
            "--slo",
            "ttft_max=500us",
        ],
    );
    assert_eq!(o.status.code(), Some(5));
    let o = tokenscope()
        .args(["report", "--format", "terminal"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("ttft_max ≤ 0.5 ms"));
}

#[test]
fn a_used_run_directory_is_refused_unless_forced() {
    let server = Server::start(exact(10, 1));
    let out = run_dir("reuse");
    let args = ["--requests", "2", "--output-tokens", "2"];
    assert_ok(&bench(&server.url, &out, &args));
    let first = std::fs::read_to_string(out.join("results.json")).unwrap();
    let o = bench(&server.url, &out, &args);
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("already holds a run") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("results.json")).unwrap(),
        first,
        "untouched"
    );
    // --force clears it: no file of the old run is left beside the new one.
    std::fs::write(out.join("timeseries.jsonl"), "{\"old\": true}\n").unwrap();
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &server.url,
            "--quiet",
            "--no-metrics",
            "--force",
            "--out",
        ])
        .arg(&out)
        .args(args)
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(
        !out.join("timeseries.jsonl").exists(),
        "the old time series is gone"
    );
    // A directory that is not a run is never cleared.
    let other = run_dir("reuse-foreign");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let o = tokenscope()
        .args(["bench", "--url", &server.url, "--force", "--out"])
        .arg(&other)
        .args(args)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(other.join("notes.txt").exists());
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    for (args, needle) in [
        (vec!["bench", "--concurrency", "0"], "--concurrency"),
        (
            vec!["bench", "--input-tokens", "gauss:1,2"],
            "--input-tokens",
        ),
        (vec!["bench", "--slo", "ttft_p42=1s"], "--slo"),
        (
            vec!["bench", "--rate", "5", "--concurrency", "3"],
            "--concurrency",
        ),
        (vec!["bench", "--url", "ftp://x"], "--url"),
        (
            vec!["bench", "--api-key-env", "TOKENSCOPE_SURELY_UNSET"],
            "--api-key-env",
        ),
    ] {
        let o = tokenscope().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn api_key_is_sent_but_never_written() {
    let server = Server::start(exact(1, 1));
    let out = run_dir("secret");
    let secret = "sk-tokenscope-test-secret-4242";
    let o = tokenscope()
        .env("MY_KEY", secret)
        .args([
            "bench",
            "--url",
            &server.url,
            "--requests",
            "3",
            "--api-key-env",
            "MY_KEY",
        ])
        .args(["--header", "X-Api-Key: also-secret-777", "--json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let mut everything = String::from_utf8_lossy(&o.stdout).to_string();
    everything += &String::from_utf8_lossy(&o.stderr);
    for f in std::fs::read_dir(&out).unwrap() {
        everything += &std::fs::read_to_string(f.unwrap().path()).unwrap();
    }
    assert!(
        everything.contains("MY_KEY"),
        "the variable's name is recorded"
    );
    assert!(!everything.contains(secret));
    assert!(!everything.contains("also-secret-777"));
}

/// The measured requests, and the probes, go direct: with a proxy set in the
/// environment an unreachable server's error says it was not used, and why.
#[test]
fn a_proxy_in_the_environment_is_not_used_and_the_error_says_so() {
    let port = free_port();
    let o = tokenscope()
        .env("HTTPS_PROXY", "http://proxy.example:3128")
        .args([
            "bench",
            "--url",
            &format!("http://127.0.0.1:{port}"),
            "--model",
            "m",
            "--requests",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("HTTPS_PROXY is set, but tokenscope connects directly"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
