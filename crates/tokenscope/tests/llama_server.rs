//! End to end against a real inference server: llama.cpp's `llama-server`,
//! built from source by `scripts/llama-fixture.sh` and serving generated
//! random-weight models. The README's test command installs the fixture and
//! sets LLAMA_SERVER / LLAMA_MODEL_*; without them these tests fail, saying so.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One llama-server at a time: they share 2 cores with the client, and the
/// agreement test needs them quiet.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn fixture(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the README's test command (scripts/test.sh), which builds the llama.cpp fixture")
    })
}

/// A llama-server child process on 127.0.0.1, killed when dropped.
struct Llama {
    child: Option<Child>,
    url: String,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Llama {
    fn start(model_var: &str, parallel: u32, threads: u32) -> Llama {
        Self::start_with(model_var, parallel, threads, &[])
    }

    fn start_with(model_var: &str, parallel: u32, threads: u32, extra: &[&str]) -> Llama {
        let guard = serial();
        let port = free_port();
        let log =
            std::fs::File::create(run_dir(&format!("llama-{port}.log")).with_extension("txt"))
                .unwrap();
        let child = Command::new(fixture("LLAMA_SERVER"))
            .args([
                "-m",
                &fixture(model_var),
                "--alias",
                "random-llama",
                "--host",
                "127.0.0.1",
            ])
            .args([
                "--port",
                &port.to_string(),
                "--parallel",
                &parallel.to_string(),
            ])
            .args([
                "-c",
                &(parallel * 2048).to_string(),
                "--threads",
                &threads.to_string(),
            ])
            .args([
                "--threads-batch",
                &threads.to_string(),
                "--metrics",
                "--no-warmup",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting llama-server");
        let llama = Llama {
            child: Some(child),
            url: format!("http://127.0.0.1:{port}"),
            _serial: guard,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_status(port, "/health") != Some(200) {
            assert!(
                Instant::now() < deadline,
                "llama-server did not become healthy within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        llama
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        self.kill();
    }
}

fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

#[test]
fn chat_and_completions_closed_loop_and_poisson() {
    let llama = Llama::start("LLAMA_MODEL_TINY", 4, 1);
    let cases: [(&str, &[&str]); 2] = [
        (
            "llama-chat-closed",
            &[
                "--api",
                "openai-chat",
                "--concurrency",
                "4",
                "--requests",
                "16",
            ],
        ),
        (
            "llama-completions-poisson",
            &[
                "--api",
                "openai-completions",
                "--rate",
                "20",
                "--requests",
                "30",
            ],
        ),
    ];
    for (name, load) in cases {
        let out = run_dir(name);
        let mut args = load.to_vec();
        args.extend([
            "--output-tokens",
            "32",
            "--input-tokens",
            "64",
            "--ignore-eos",
        ]);
        let o = bench(&llama.url, &out, &args);
        assert_ok(&o);
        let r = results(&out);
        let n = stat(&r, "counts.requests");
        assert_eq!(stat(&r, "counts.succeeded"), n, "{name}: {}", r["counts"]);
        assert_eq!(r["target"]["model"], "random-llama");
        assert_eq!(
            stat(&r, "tokens.output_total"),
            32.0 * n,
            "{name}: exact lengths with --ignore-eos"
        );
        assert_eq!(
            r["tokens"]["output_sources"]["server_usage"].as_f64(),
            Some(n)
        );
        assert_eq!(
            r["tokens"]["input_sources"]["server_usage"].as_f64(),
            Some(n)
        );
        assert_eq!(
            r["tokens"]["multi_token_chunks"], false,
            "llama.cpp sends one token per chunk"
        );
        assert_eq!(stat(&r, "counts.short_outputs"), 0.0);
        for rec in records(&out) {
            assert_eq!(rec["output_tokens"], 32);
            assert_eq!(chunk_times(&rec).len(), 32, "one chunk per token");
            assert!(
                rec["server_timings"]["predicted_n"].as_u64().is_some(),
                "llama.cpp timings kept"
            );
        }
        assert!(stat(&r, "latency.ttft_ms.p50") > 0.0 && stat(&r, "latency.tpot_ms.p50") > 0.0);
        // Detected as llama.cpp, and its counters read: it generated what we received.
        assert_eq!(r["server"]["kind"], "llama.cpp", "{name}");
        assert_eq!(
            stat(&r, "server.metrics.generation_tokens"),
            stat(&r, "tokens.output_total"),
            "{name}"
        );
        assert!(
            r["server"]["metrics"]["kv_usage"].is_null(),
            "this build exposes no KV usage: null, not 0"
        );
    }
}

#[test]
fn exact_lengths_with_ignore_eos_across_a_length_distribution() {
    let llama = Llama::start("LLAMA_MODEL_TINY", 2, 1);
    let out = run_dir("llama-lengths");
    let o = bench(
        &llama.url,
        &out,
        &[
            "--concurrency",
            "2",
            "--requests",
            "12",
            "--output-tokens",
            "uniform:5..120",
            "--ignore-eos",
        ],
    );
    assert_ok(&o);
    let recs = records(&out);
    assert_eq!(recs.len(), 12);
    let mut lengths = std::collections::BTreeSet::new();
    for rec in &recs {
        assert_eq!(
            rec["output_tokens"], rec["requested_output_tokens"],
            "{rec}"
        );
        lengths.insert(rec["output_tokens"].as_u64().unwrap());
    }
    assert!(
        lengths.len() > 5,
        "lengths follow the distribution: {lengths:?}"
    );
}

#[test]
fn server_killed_mid_run_failures_are_classified_and_nothing_is_lost() {
    let mut llama = Llama::start("LLAMA_MODEL_TINY", 2, 1);
    let out = run_dir("llama-killed");
    let child = tokenscope()
        .args([
            "bench",
            "--url",
            &llama.url,
            "--quiet",
            "--concurrency",
            "2",
            "--requests",
            "300",
        ])
        .args([
            "--output-tokens",
            "400",
            "--ignore-eos",
            "--model",
            "random-llama",
            "--api",
            "openai-chat",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the server once a request has finished (a fixed 1.5 s raced the
    // ~1.45 s a 400-token answer takes here), and well before the last.
    let start = std::time::Instant::now();
    while std::fs::read_to_string(out.join("requests.jsonl")).map_or(0, |t| t.lines().count()) < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no request finished in 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Both streams of a wave end together: killing at once can fall between
    // waves (nothing mid-stream, every failure `connect`). 400 ms into the
    // next wave's ~1.45 s answers, both are streaming.
    std::thread::sleep(Duration::from_millis(400));
    llama.kill();
    let o = child.wait_with_output().unwrap();
    // The run completed (some requests succeeded); failures are in the results.
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = results(&out);
    let recs = records(&out);
    assert_eq!(recs.len(), 300, "every request is in requests.jsonl");
    assert_eq!(stat(&r, "counts.requests"), 300.0);
    let ok = stat(&r, "counts.succeeded");
    assert!(ok >= 1.0, "some requests finished before the kill");
    let errors = &r["counts"]["errors"];
    assert!(
        errors["stream"].as_u64().unwrap_or(0) >= 1,
        "streams cut mid-way: {errors}"
    );
    assert!(
        errors["connect"].as_u64().unwrap_or(0) >= 1,
        "later requests cannot connect: {errors}"
    );
    assert_eq!(stat(&r, "counts.failed") + ok, 300.0);
    for rec in recs.iter().filter(|r| r["error_kind"] == "stream") {
        assert!(
            chunk_times(rec).len() < 400,
            "a cut stream keeps its partial chunks"
        );
    }
}

/// At concurrency 1 the server's own clock and ours must agree: TPOT against
/// llama.cpp's predicted_per_token_ms, TTFT against its prompt_ms.
///
/// The host-RAM prompt cache is off (`--cache-ram 0`): with it on (the
/// default), llama.cpp saves and restores slot prompts before prefill, which
/// adds 12-20 ms to TTFT that prompt_ms does not include (docs/llama-server.md).
/// The server computes on one thread: with two, its spinning compute threads
/// hold both cores and its HTTP thread waits for one, which added a second
/// mode of ~6 ms to the TTFT excess.
#[test]
fn agrees_with_the_servers_own_timings() {
    let llama = Llama::start_with("LLAMA_MODEL_50M", 1, 1, &["--cache-ram", "0"]);
    let out = run_dir("llama-agreement");
    let o = bench(
        &llama.url,
        &out,
        &[
            "--concurrency",
            "1",
            "--requests",
            "10",
            "--warmup",
            "1",
            "--input-tokens",
            "128",
        ],
    );
    assert_ok(&o);
    let recs: Vec<_> = records(&out)
        .into_iter()
        .filter(|r| r["warmup"] != true)
        .collect();
    assert_eq!(recs.len(), 10);
    let (mut tpot_ratio, mut ttft_excess, mut tpot_client, mut tpot_server, mut prompt_ms) =
        (vec![], vec![], vec![], vec![], vec![]);
    for rec in &recs {
        let t = &rec["server_timings"];
        let first = rec["first_token_at_us"].as_f64().unwrap();
        let last = *chunk_times(rec).last().unwrap() as f64;
        let n = rec["output_tokens"].as_f64().unwrap();
        let client_tpot = (last - first) / (n - 1.0) / 1e3;
        let server_tpot = t["predicted_per_token_ms"].as_f64().unwrap();
        let ttft = (first - rec["sent_at_us"].as_f64().unwrap()) / 1e3;
        let prompt = t["prompt_ms"].as_f64().unwrap();
        tpot_ratio.push(client_tpot / server_tpot);
        ttft_excess.push(ttft - prompt);
        tpot_client.push(client_tpot);
        tpot_server.push(server_tpot);
        prompt_ms.push(prompt);
    }
    let ratio = median(tpot_ratio);
    let excess = median(ttft_excess.clone());
    eprintln!(
        "agreement: TPOT client p50 {:.3} ms vs server {:.3} ms (ratio {ratio:.4}); TTFT − prompt_ms p50 {excess:.2} ms (prompt_ms p50 {:.2}); excess per request {:?}",
        median(tpot_client),
        median(tpot_server),
        median(prompt_ms),
        ttft_excess.iter().map(|e| (e * 100.0).round() / 100.0).collect::<Vec<_>>()
    );
    assert!((ratio - 1.0).abs() <= 0.05, "TPOT median ratio {ratio}");
    assert!(
        excess >= 0.0,
        "TTFT is shorter than the server's prompt time: {excess} ms"
    );
    // What lies between is HTTP, tokenisation and the slot's scheduling: a
    // few ms; a loaded 2-core machine (the client, the server and others
    // on it) read 5.8 ms once. A client that stamped late by a timer tick
    // per token or more would be far past this.
    assert!(excess <= 10.0, "TTFT exceeds prompt_ms by {excess} ms");
}

/// `sim calibrate` against the real server at one load (concurrency 1), then
/// `sim plan --replay` predicts another load (concurrency 2). The fit must
/// reproduce its own run closely; the prediction at the other load is only
/// held to the right order of magnitude (within 3× either way) and
/// its error is reported in docs/simulator.md: llama.cpp on two CPU cores
/// decodes a batch of 2 about 2.5× slower per step than a batch of 1 and
/// prefills two prompts faster than twice one, which a GPU roofline with
/// per-step and per-sequence costs cannot learn from one load.
#[test]
fn calibrated_at_one_load_predicts_another() {
    let llama = Llama::start_with("LLAMA_MODEL_50M", 4, 2, &["--cache-ram", "0"]);
    let shape = [
        "--input-tokens",
        "128",
        "--output-tokens",
        "64",
        "--ignore-eos",
    ];
    // The fit is tested on a quiet run. On this shared 2-core machine a run
    // now and then has its TTFTs spread by stalls (p90/p50 1.4–1.5, against
    // ≤ 1.1 for a quiet one), and the fit, which matches p50 and p90, then
    // misses its own p50 by 15–20 %: noise no model of the server should fit.
    // Up to three tries for a quiet run, each one's spread printed; 20
    // requests, so that one stall is not the p90 by itself.
    let one = run_dir("calib-c1");
    for attempt in 1..=3 {
        let _ = std::fs::remove_dir_all(&one);
        assert_ok(&bench(
            &llama.url,
            &one,
            &[
                &["--concurrency", "1", "--requests", "20", "--warmup", "1"][..],
                &shape[..],
            ]
            .concat(),
        ));
        let r = results(&one);
        let spread = stat(&r, "latency.ttft_ms.p90") / stat(&r, "latency.ttft_ms.p50");
        eprintln!("calibration run {attempt}: TTFT p90/p50 {spread:.2}");
        if spread <= 1.25 {
            break;
        }
    }
    // Its /metrics, sampled during the run, show one busy slot and nobody waiting.
    let r = results(&one);
    assert_eq!(r["server"]["kind"], "llama.cpp");
    assert_eq!(stat(&r, "server.metrics.running.max"), 1.0);
    assert_eq!(stat(&r, "server.metrics.waiting.max"), 0.0);
    let two = run_dir("calib-c2");
    assert_ok(&bench(
        &llama.url,
        &two,
        &[
            &["--concurrency", "2", "--requests", "16", "--warmup", "2"][..],
            &shape[..],
        ]
        .concat(),
    ));
    drop(llama);

    let catalogue = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/llama-cpu-catalogue.json"
    );
    let engine = [
        "--catalogue",
        catalogue,
        "--model",
        "random-50m",
        "--gpu",
        "cpu-2core",
        "--max-num-seqs",
        "4",
    ];
    let profile = one.join("profile.json");
    let o = tokenscope()
        .args(["sim", "calibrate"])
        .arg(&one)
        .args(engine)
        .output()
        .unwrap();
    assert_ok(&o);
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    let fit = &p["runs"][0];
    for key in ["ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms"] {
        let (m, f) = (
            fit["measured"][key].as_f64().unwrap(),
            fit["predicted"][key].as_f64().unwrap(),
        );
        assert!(
            (f - m).abs() / m < 0.15,
            "the fit reproduces its own run: {key} {f} vs {m}"
        );
    }
    let predicted = run_dir("calib-predicted");
    let o = tokenscope()
        .args(["sim", "plan", "--quiet", "--replay"])
        .arg(&two)
        .arg("--profile")
        .arg(&profile)
        .args(engine)
        .arg("--out")
        .arg(&predicted)
        .output()
        .unwrap();
    assert_ok(&o);
    let (m, p) = (results(&two), results(&predicted));
    let err = |k: &str| (stat(&p, k) - stat(&m, k)) / stat(&m, k);
    eprintln!(
        "calibration at c=1 → c=2: TTFT p50 {:.1} vs measured {:.1} ms ({:+.0} %), TPOT p50 {:.2} vs {:.2} ms ({:+.0} %)",
        stat(&p, "latency.ttft_ms.p50"),
        stat(&m, "latency.ttft_ms.p50"),
        err("latency.ttft_ms.p50") * 100.0,
        stat(&p, "latency.tpot_ms.p50"),
        stat(&m, "latency.tpot_ms.p50"),
        err("latency.tpot_ms.p50") * 100.0
    );
    let ratio = |k: &str| stat(&p, k) / stat(&m, k);
    assert!(
        (0.33..3.0).contains(&ratio("latency.ttft_ms.p50")),
        "TTFT prediction off by {:.0} %",
        err("latency.ttft_ms.p50") * 100.0
    );
    // TPOT's bound is wider below: the model's error here is systematic.
    // Fitted at one load it predicts about concurrency 1's TPOT at 2, where
    // this CPU decodes a batch of two 2.5–3.7× slower per step (−46 to
    // −71 % in the runs docs/simulator.md lists). The test prints the
    // figure each run, and the table keeps it.
    assert!(
        (0.2..3.0).contains(&ratio("latency.tpot_ms.p50")),
        "TPOT prediction off by {:.0} %",
        err("latency.tpot_ms.p50") * 100.0
    );
}

/// A small sweep against the real server completes and reports every point.
#[test]
fn a_small_sweep_completes_and_reports() {
    let llama = Llama::start("LLAMA_MODEL_TINY", 4, 1);
    let out = run_dir("llama-sweep");
    let o = tokenscope()
        .args([
            "sweep",
            "--url",
            &llama.url,
            "--quiet",
            "--concurrency",
            "1,2,4",
            "--requests",
            "8",
        ])
        .args([
            "--output-tokens",
            "32",
            "--ignore-eos",
            "--scrape-interval",
            "100ms",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let table = String::from_utf8_lossy(&o.stdout);
    for level in ["concurrency 1", "concurrency 2", "concurrency 4"] {
        assert!(table.contains(level), "{table}");
    }
    let doc = sweep_doc(&out);
    let points = doc["points"].as_array().unwrap();
    assert_eq!(
        doc["analysis"]["recommendations"].as_array().unwrap().len(),
        5
    );
    assert_eq!(points.len(), 3);
    for (p, c) in points.iter().zip([1, 2, 4]) {
        let r = &p["results"];
        assert_eq!(r["config"]["load"]["concurrency"], c);
        assert_eq!(stat(r, "counts.succeeded"), 8.0);
        assert_eq!(r["server"]["kind"], "llama.cpp");
        assert_eq!(stat(r, "throughput.concurrency.max"), c as f64);
    }
    for i in 0..3 {
        assert!(out.join(format!("point-{i:02}/requests.jsonl")).exists());
        assert!(out.join(format!("point-{i:02}/report.html")).exists());
    }
    // The sweep's report: the page with its recommendations.
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("Recommendations") && page.contains("<svg"));
}

/// `watch` reads llama.cpp's own counters while a bench loads it.
#[test]
fn watch_shows_the_servers_own_numbers() {
    let llama = Llama::start("LLAMA_MODEL_TINY", 2, 1);
    let mut bench = background_load(&llama.url, 2, 40, 64, &["--ignore-eos"]);
    std::thread::sleep(Duration::from_secs(2));
    let o = tokenscope()
        .args(["watch", &llama.url, "--once", "--json", "--interval", "1s"])
        .output()
        .unwrap();
    let _ = bench.kill();
    let _ = bench.wait();
    assert_ok(&o);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["server_kind"], "llama.cpp");
    assert!(
        doc["generation_tokens_per_s"].as_f64().unwrap() > 0.0,
        "{doc}"
    );
    assert!(
        doc["server"]["running"]["max"].as_f64().unwrap() >= 1.0,
        "{doc}"
    );
}

/// `sweep --auto` on a server with two slots: the baseline, the probe, then
/// powers of two until it is past saturation — it stops there rather than
/// walking on to the probe's concurrency.
#[test]
fn auto_sweep_stops_past_saturation() {
    let llama = Llama::start("LLAMA_MODEL_TINY", 2, 1);
    let out = run_dir("llama-auto");
    let o = tokenscope()
        .args([
            "sweep",
            "--auto",
            "--auto-max-concurrency",
            "64",
            "--url",
            &llama.url,
        ])
        .args([
            "--requests",
            "4",
            "--output-tokens",
            "32",
            "--ignore-eos",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("auto: stopping after concurrency"),
        "{stderr}"
    );
    let doc = sweep_doc(&out);
    let loads: Vec<f64> = doc["analysis"]["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["load"].as_f64().unwrap())
        .collect();
    assert_eq!(loads.first(), Some(&1.0));
    assert_eq!(loads.last(), Some(&64.0), "the probe");
    // It stopped well short of the probe: two slots saturate by 8 streams.
    let climbed = loads[loads.len() - 2];
    assert!(climbed <= 8.0, "{loads:?}\n{stderr}");
    assert!(
        doc["analysis"]["saturation"].is_object(),
        "{}",
        doc["analysis"]
    );
}

#[test]
fn multi_turn_sessions_reuse_llamas_prompt_cache_and_the_run_says_so() {
    // One slot: each turn finds the last turn's prompt and answer in its KV.
    let llama = Llama::start("LLAMA_MODEL_TINY", 1, 1);
    let out = run_dir("llama-sessions");
    let o = bench(
        &llama.url,
        &out,
        &[
            "--multi-turn",
            "--turns",
            "3",
            "--concurrency",
            "1",
            "--requests",
            "6",
            "--input-tokens",
            "40",
            "--output-tokens",
            "8",
            "--ignore-eos",
        ],
    );
    assert_ok(&o);
    let recs = records(&out);
    assert_eq!(recs.len(), 6);
    let find = |s: u64, k: u64| {
        recs.iter()
            .find(|r| r["session"] == s && r["turn"] == k)
            .unwrap_or_else(|| panic!("session {s} turn {k} missing"))
    };
    for s in 0..2 {
        for k in 1..3 {
            let (prev, this) = (find(s, k - 1), find(s, k));
            let prev_prompt = prev["input_tokens"].as_u64().unwrap();
            let cached = this["cached_tokens"]
                .as_u64()
                .expect("llama.cpp says cached_tokens");
            assert!(
                this["input_tokens"].as_u64().unwrap() > prev_prompt + 40,
                "the prompt grew by the answer and a new message: {this}"
            );
            assert!(
                cached as f64 >= 0.8 * prev_prompt as f64,
                "turn {k} found {cached} of the last prompt's {prev_prompt} tokens cached"
            );
        }
    }
    let r = results(&out);
    let client = stat(&r, "tokens.prefix_cache.hit_rate");
    assert!(client > 0.3, "per-request hit rate {client}");
    let server = stat(&r, "server.metrics.prefix_cache_hit_rate");
    assert!(server > 0.2, "llama.cpp's own counters: {server}");
}

#[test]
fn a_dataset_is_sent_to_llama_as_written() {
    let llama = Llama::start("LLAMA_MODEL_TINY", 2, 1);
    let file = run_dir("llama-dataset").with_extension("jsonl");
    let lengths = [3u64, 9, 5, 12, 7];
    let text: String = lengths
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!("{{\"prompt\": \"question {i} about rivers\", \"max_tokens\": {n}}}\n")
        })
        .collect();
    std::fs::write(&file, text).unwrap();
    let out = run_dir("llama-dataset-run");
    let o = bench(
        &llama.url,
        &out,
        &[
            "--concurrency",
            "2",
            "--ignore-eos",
            "--dataset",
            file.to_str().unwrap(),
        ],
    );
    assert_ok(&o);
    let recs = records(&out);
    assert_eq!(recs.len(), lengths.len(), "every entry once");
    for rec in &recs {
        let want = lengths[rec["id"].as_u64().unwrap() as usize];
        assert_eq!(rec["requested_output_tokens"].as_u64(), Some(want), "{rec}");
        assert_eq!(rec["output_tokens"].as_u64(), Some(want), "{rec}");
    }
}

/// `bench --cold-start` with llama-server as the command: tokenscope starts
/// it, times it to its first /health 200 (it answers 503 while it loads),
/// reports the first wave apart from the steady state, and stops it.
#[test]
fn cold_start_times_llama_to_ready_and_stops_it() {
    let _guard = serial();
    let port = free_port();
    let command = format!(
        "{} -m {} --alias random-llama --host 127.0.0.1 --port {port} --parallel 2 -c 4096 --threads 1 --threads-batch 1 --metrics",
        fixture("LLAMA_SERVER"),
        fixture("LLAMA_MODEL_TINY")
    );
    let out = run_dir("llama-cold");
    let o = bench(
        &format!("http://127.0.0.1:{port}"),
        &out,
        &[
            "--cold-start",
            &command,
            "--concurrency",
            "2",
            "--requests",
            "8",
            "--output-tokens",
            "8",
            "--ignore-eos",
        ],
    );
    assert_ok(&o);
    let r = results(&out);
    let c = &r["cold_start"];
    assert!(stat(c, "ready_s") > 0.0);
    assert_eq!(stat(c, "first_wave.count"), 2.0);
    assert_eq!(stat(c, "steady.count"), 6.0);
    assert_eq!(r["counts"]["succeeded"], 8);
    assert_eq!(
        http_status(port, "/health"),
        None,
        "llama-server is stopped after the run"
    );
    let log = std::fs::read_to_string(out.join("server.log")).unwrap();
    assert!(
        !log.is_empty(),
        "llama-server's output is kept in server.log"
    );
}

/// The simulator keeps closed-loop users with identical fixed lengths in
/// step (a wave finishes in one engine step and comes back whole:
/// docs/simulator.md, tests/physics.rs). A real engine does the same:
/// llama.cpp with four slots, four users started at once with 64-token
/// prompts and 32-token answers (`--ignore-eos`), ends its waves within
/// a few tokens' time, mostly; ramped over 2 s the users stay apart.
#[test]
fn fixed_lengths_started_together_stay_in_step_on_a_real_engine() {
    let llama = Llama::start_with("LLAMA_MODEL_50M", 4, 2, &["--cache-ram", "0"]);
    let run = |name: &str, ramp: &[&str]| {
        let out = run_dir(name);
        assert_ok(&bench(
            &llama.url,
            &out,
            &[
                &["--concurrency", "4", "--requests", "40"][..],
                &[
                    "--input-tokens",
                    "64",
                    "--output-tokens",
                    "32",
                    "--ignore-eos",
                ],
                ramp,
            ]
            .concat(),
        ));
        let mut done: Vec<f64> = records(&out)
            .iter()
            .map(|r| r["done_at_us"].as_f64().unwrap() / 1e3)
            .collect();
        done.sort_by(f64::total_cmp);
        // Each wave of four: its first and last ends, ms apart, sorted.
        let mut spreads: Vec<f64> = done.chunks_exact(4).map(|w| w[3] - w[0]).collect();
        spreads.sort_by(f64::total_cmp);
        let r = results(&out);
        (
            spreads,
            stat(&r, "latency.tpot_ms.p50"),
            stat(&r, "latency.ttft_ms.p50"),
            r,
        )
    };
    let (together, tpot, ttft_together, r_together) = run("lockstep-together", &[]);
    let (ramped, _, ttft_ramped, r_ramped) = run("lockstep-ramped", &["--ramp-up", "2s"]);
    eprintln!(
        "wave spreads: together {together:.1?} ms, ramped {ramped:.1?} ms; TPOT {tpot:.1} ms; TTFT p50 {ttft_together:.0} vs {ttft_ramped:.0} ms; ended with the one before: together {}, ramped {} of 40; waves called: {}",
        r_together["counts"]["finished_together"],
        r_ramped["counts"]["finished_together"],
        has_rule(&r_together, "waves")
    );
    // Whether the run is called waves (`waves`) is printed, not held: here
    // together read 21 of 40 ended with the one before (called: the bar is
    // 53 % for four users of 32 tokens) and ramped 17 (not called), since
    // llama.cpp ends a wave's four over about one token's time on two busy
    // cores and ramped users drift into pairs; the exact server's waves are
    // held in tests/load_patterns.rs.
    // Measured 2026-12-04: together every wave 8–24 ms first to last in
    // most runs here, against a TPOT of 11–21 ms; ramped 490–1,040 ms. Now
    // and then llama.cpp starts part of a wave a batch late (a request that
    // lands during a step waits for the next) and the wave ends in groups
    // for the rest of the run: two full runs here read a median of 134–137
    // ms, and CI's slower machine (TPOT 24 ms, six waves) read [32, 117,
    // 118, 297, 319, 351] against ramped [293, 804, 818, 822, 835, 1448].
    // With a busy loop beside it (TPOT 44–54 ms) one run in three read eight
    // waves within 30 ms and two at 760–960 ms. So the test holds what
    // survives all of that: the tightest wave ends within a few steps, and
    // the median wave started together is tighter than the median ramped
    // one (over three loaded runs here, 26–816 ms against 678–2,531 ms;
    // CI's run above, 297 against 822). It breaks only when the CPU is
    // starved outright: with two busy loops on the two cores, TPOT 62 ms,
    // the waves end at random (together 569 ms, ramped 397 ms).
    assert_eq!((together.len(), ramped.len()), (10, 10), "ten waves each");
    let tightest = together[0];
    assert!(
        tightest < 5.0 * tpot,
        "together, a wave ends within a few steps: {together:?} ms, TPOT {tpot}"
    );
    assert!(
        median(ramped.clone()) > median(together.clone()),
        "ramped, the users stay apart, together closer: {ramped:?} vs {together:?} ms"
    );
    // TTFT is printed, not held: on this CPU server a ramped user's prefill
    // shares steps with three decoding slots on two cores, and TTFT together
    // read 0.8–2.4× the ramped one over nine runs (docs/simulator.md).
}

/// The thinking prefix every answer is forced to by grammar: a random-weight
/// model then thinks as a reasoning model does.
const THINK_GRAMMAR: &str = r#"root ::= "<think>" [a-z ]{20,30} "</think>" [a-z ]{10,20}"#;

/// One streamed chat answer read raw (no tokenscope), with llama.cpp's
/// running count on every chunk: per chunk, whether it carried reasoning
/// or answer text, and `timings.predicted_n`; then usage's completion tokens.
fn raw_thinking_stream(url: &str, prompt: &str) -> (Vec<(&'static str, u64)>, u64) {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 60,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
        "timings_per_token": true,
        "grammar": THINK_GRAMMAR,
    })
    .to_string();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    let (_, mut rest) = text.split_once("\r\n\r\n").unwrap();
    // De-chunk the body (Transfer-Encoding: chunked).
    let mut sse = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        sse.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    let (mut chunks, mut completion) = (Vec::new(), 0);
    for line in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            completion = n;
        }
        let delta = &v["choices"][0]["delta"];
        let kind = match (
            delta["reasoning_content"].as_str(),
            delta["content"].as_str(),
        ) {
            (Some(r), _) if !r.is_empty() => "reasoning",
            (_, Some(c)) if !c.is_empty() => "answer",
            _ => continue,
        };
        chunks.push((kind, v["timings"]["predicted_n"].as_u64().unwrap()));
    }
    (chunks, completion)
}

/// llama.cpp's reasoning parser (`--reasoning-format deepseek`, with a
/// ChatML template that shows thinking in `<think>` tags) splits a
/// grammar-forced `<think>…</think>` prefix into `reasoning_content`;
/// tokenscope's answer start is the first content chunk's arrival, and its
/// counts are the server's own: everything generated before the answer
/// (the tags included) is thinking.
#[test]
fn llamas_reasoning_parser_splits_a_forced_think_prefix_and_tokenscope_agrees() {
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/chatml-think.jinja"
    );
    let llama = Llama::start_with(
        "LLAMA_MODEL_50M",
        1,
        1,
        &[
            "--reasoning-format",
            "deepseek",
            "--chat-template-file",
            template,
        ],
    );
    let prompt = "think about rivers";
    // The server's account, greedy (temperature 0): the same every time.
    let (chunks, completion) = raw_thinking_stream(&llama.url, prompt);
    let thought = chunks.iter().take_while(|c| c.0 == "reasoning").count();
    assert!(thought > 0 && thought < chunks.len(), "{chunks:?}");
    let before_answer = chunks[thought].1 - 1;
    // The tags' tokens: generated, never streamed (docs/llama-server.md).
    eprintln!(
        "llama thinking: {before_answer} of {completion} tokens before the answer; \
         {} before the first thought, {} between the last thought and the answer",
        chunks[0].1 - 1,
        chunks[thought].1 - chunks[thought - 1].1 - 1
    );
    let file = run_dir("llama-think").with_extension("jsonl");
    let line = format!("{{\"prompt\": \"{prompt}\", \"max_tokens\": 60}}\n");
    std::fs::write(&file, line.repeat(4)).unwrap();
    let out = run_dir("llama-think-run");
    let body = serde_json::json!({"grammar": THINK_GRAMMAR, "timings_per_token": true}).to_string();
    let o = bench(
        &llama.url,
        &out,
        &[
            "--api",
            "openai-chat",
            "--temperature",
            "0",
            "--extra-body",
            &body,
            "--dataset",
            file.to_str().unwrap(),
        ],
    );
    assert_ok(&o);
    for rec in records(&out) {
        assert_eq!(rec["output_tokens"], completion, "{rec}");
        assert_eq!(rec["reasoning_tokens"], before_answer, "{rec}");
        assert_eq!(rec["reasoning_token_source"], "server_chunks", "{rec}");
        // The answer starts at the first chunk past the thinking.
        let times = chunk_times(&rec);
        assert_eq!(times.len(), chunks.len(), "{rec}");
        assert_eq!(rec["first_answer_at_us"], times[thought], "{rec}");
    }
    let r = results(&out);
    assert_eq!(r["tokens"]["reasoning"]["tokens"], 4 * before_answer);
    assert_eq!(
        r["tokens"]["reasoning"]["answer_tokens"],
        4 * (completion - before_answer)
    );
    assert!(stat(&r, "latency.answer_start_ms.p50") > stat(&r, "latency.ttft_ms.p50"));
    // The tags' tokens come inside the chunks after them, and the finding says why.
    let chunky = r["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "multi_token_chunks")
        .expect("the tags' tokens make multi-token chunks");
    assert!(
        chunky["message"]
            .as_str()
            .unwrap()
            .contains("thinking tags"),
        "{chunky}"
    );
}

/// llama.cpp's own `/v1/responses` and `/v1/messages`: every request
/// succeeds, the counts are the server's, and where the server says its
/// timings (Responses' final event) tokenscope's TPOT agrees with them.
#[test]
fn responses_and_anthropic_messages_run_on_llama_and_agree_with_it() {
    let llama = Llama::start("LLAMA_MODEL_50M", 1, 1);
    for api in ["openai-responses", "anthropic-messages"] {
        let out = run_dir(&format!("llama-{api}"));
        let o = bench(
            &llama.url,
            &out,
            &[
                "--api",
                api,
                "--requests",
                "6",
                "--input-tokens",
                "64",
                "--output-tokens",
                "24",
                "--ignore-eos",
            ],
        );
        assert_ok(&o);
        let r = results(&out);
        assert_eq!(r["counts"]["failed"], 0, "{api}: {}", r["counts"]);
        assert_eq!(r["target"]["api"], api);
        for rec in records(&out) {
            assert_eq!(rec["output_tokens"], 24, "{api}: {rec}");
            assert_eq!(rec["output_token_source"], "server_usage", "{api}: {rec}");
            assert!(rec["input_tokens"].as_u64().unwrap() > 0, "{api}: {rec}");
            // One token per chunk: the stream carried every counted token.
            let chunks = chunk_times(&rec).len();
            assert!((22..=24).contains(&chunks), "{api}: {chunks} chunks {rec}");
            // llama.cpp says its timings on Responses' final event, not on Anthropic's.
            let said = rec["server_timings"]["predicted_per_token_ms"].as_f64();
            assert_eq!(said.is_some(), api == "openai-responses", "{api}: {rec}");
            if let Some(per_token) = said {
                let tpot = (rec["done_at_us"].as_f64().unwrap()
                    - rec["first_token_at_us"].as_f64().unwrap())
                    / 23.0
                    / 1e3;
                assert!(
                    (tpot / per_token - 1.0).abs() < 0.25,
                    "{api}: TPOT {tpot} ms, llama {per_token} ms"
                );
            }
        }
    }
}

/// POSTs `body` to llama-server's `path`; its JSON answer.
fn post_json(url: &str, path: &str, body: &serde_json::Value) -> serde_json::Value {
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.to_string();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (_, json) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    serde_json::from_str(json).expect("a JSON body")
}

/// llama.cpp's `/v1/embeddings` (`--embeddings`) and `/v1/rerank`
/// (`--reranking`) on the random-weight model: every request gets every
/// vector or score, and the prompt tokens tokenscope records are llama's
/// own count — for embeddings exactly what its `/tokenize` makes of the
/// texts sent (a dataset, so the test knows them). llama.cpp's pooling
/// answers carry no timings to compare the latency with.
#[test]
fn embeddings_and_rerank_run_on_llama_and_agree_with_its_counts() {
    let texts: Vec<String> = (0..6)
        .map(|i| format!("the river {i} runs past the old stone church and the north station"))
        .collect();
    let lines: String = texts
        .iter()
        .map(|t| format!("{}\n", serde_json::json!({"prompt": t})))
        .collect();
    let dataset = run_dir("llama-pooling-dataset").with_extension("jsonl");
    std::fs::write(&dataset, lines).unwrap();
    // The random model has no pooling of its own: embeddings take the mean.
    let servers: [(&str, &[&str]); 2] = [
        ("openai-embeddings", &["--embeddings", "--pooling", "mean"]),
        ("rerank", &["--reranking"]),
    ];
    for (api, flags) in servers {
        let llama = Llama::start_with("LLAMA_MODEL_TINY", 2, 1, flags);
        let out = run_dir(&format!("llama-{api}"));
        let o = bench(
            &llama.url,
            &out,
            &[
                "--api",
                api,
                "--dataset",
                dataset.to_str().unwrap(),
                "--batch-size",
                "2",
                "--concurrency",
                "2",
            ],
        );
        assert_ok(&o);
        let r = results(&out);
        assert_eq!(r["counts"]["failed"], 0, "{api}: {}", r["counts"]);
        let recs = records(&out);
        assert!(!recs.is_empty(), "{api}");
        let tokens = |t: &str| {
            let v = post_json(
                &llama.url,
                "/tokenize",
                &serde_json::json!({"content": t, "add_special": true}),
            );
            v["tokens"].as_array().unwrap().len() as u64
        };
        for q in &recs {
            assert_eq!(q["input_token_source"], "server_usage", "{api}: {q}");
            let counted = q["input_tokens"].as_u64().unwrap();
            assert!(
                q.get("first_token_at_us").is_none_or(|v| v.is_null()),
                "{api}"
            );
            let id = q["id"].as_u64().unwrap() as usize;
            match api {
                "openai-embeddings" => {
                    // Request k embeds entries 2k and 2k + 1.
                    let want = tokens(&texts[2 * id % 6]) + tokens(&texts[(2 * id + 1) % 6]);
                    assert_eq!(q["items"], 2, "{q}");
                    assert_eq!(counted, want, "{q}");
                }
                _ => {
                    // Request k: query 3k, documents 3k + 1 and 3k + 2, each
                    // document read with the query, with llama's separators.
                    let (query, docs) = (
                        tokens(&texts[3 * id % 6]),
                        [1, 2].map(|d| tokens(&texts[(3 * id + d) % 6])),
                    );
                    let bare: u64 = docs.iter().map(|d| query + d).sum();
                    assert_eq!(q["items"], 2, "{q}");
                    assert!(
                        (bare - 4..=bare + 8).contains(&counted),
                        "{counted} vs {bare}: {q}"
                    );
                }
            }
        }
        assert!(
            r["throughput"]["items_per_s"].as_f64().unwrap() > 0.0,
            "{api}"
        );
    }
}

/// llama.cpp with a generated random-weight LLaVA-style projector
/// (scripts/make_mmproj.py, loaded with `--mmproj`): two 640×480 images a
/// request run there in each API's own form, and llama.cpp's own count of
/// each request's prompt is the same request's count without images plus
/// 16 tokens an image (the projector's 56-pixel input in 14-pixel patches).
#[test]
fn images_run_on_llama_with_a_generated_projector_and_cost_its_tokens() {
    let mmproj = fixture("LLAMA_MMPROJ_TINY");
    let llama = Llama::start_with("LLAMA_MODEL_TINY", 2, 1, &["--mmproj", &mmproj]);
    let prompts = |api: &str, media: &[&str]| {
        let name = format!("llama-media-{api}-{}", media.len());
        let fixed = [
            "--api",
            api,
            "--input-tokens",
            "16",
            "--output-tokens",
            "8",
            "--requests",
            "4",
            "--concurrency",
            "2",
            "--seed",
            "5",
        ];
        let (_, r, recs) = bench_ok(&llama.url, &name, &[&fixed, media]);
        assert_eq!(r["counts"]["failed"], 0, "{api}: {}", r["counts"]);
        let mut by_id: Vec<(u64, u64)> = recs
            .iter()
            .map(|q| {
                (
                    q["id"].as_u64().unwrap(),
                    q["input_tokens"].as_u64().unwrap(),
                )
            })
            .collect();
        by_id.sort_unstable();
        (r, by_id)
    };
    for api in ["openai-chat", "openai-responses", "anthropic-messages"] {
        let (_, text) = prompts(api, &[]);
        let (r, with) = prompts(api, &["--images", "2", "--image-size", "640x480"]);
        for ((id, plain), (_, counted)) in text.iter().zip(&with) {
            assert_eq!(*counted, plain + 2 * 16, "{api}: request {id}");
        }
        assert_eq!(r["media"]["images_per_request"], 2.0, "{api}");
    }
}

/// llama.cpp's grammar holds even a random-weight model to a JSON Schema:
/// every answer of its native completions (`json_schema`, given with
/// `--extra-body`) is valid against it. (Its chat endpoint builds the
/// grammar around the test model's ChatML generation prompt and fails to
/// start the sampler; docs/llama-server.md says so.)
#[test]
fn llamas_grammar_makes_every_answer_valid_against_the_schema() {
    let schema = r#"{"type": "object", "additionalProperties": false, "required": ["ok", "n"],
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}}}"#;
    let file = write_file("llama-ok-schema.json", schema);
    let llama = Llama::start("LLAMA_MODEL_TINY", 2, 1);
    let extra = format!(r#"{{"json_schema": {schema}}}"#);
    let format = format!("schema:{}", file.display());
    let args = [
        "--api",
        "openai-completions",
        "--requests",
        "12",
        "--concurrency",
        "2",
        "--input-tokens",
        "16",
        "--output-tokens",
        "48",
        "--response-format",
        &format,
        "--extra-body",
        &extra,
    ];
    let (_, r, recs) = bench_ok(&llama.url, "llama-structured", &[&args]);
    assert_eq!(r["counts"]["failed"], 0, "{}", r["counts"]);
    assert_eq!(
        r["structured_output"]["valid"], 12,
        "{}",
        r["structured_output"]
    );
    // The grammar ended each answer, before its length.
    assert!(
        recs.iter().all(|q| q["finish_reason"] == "stop"),
        "{recs:?}"
    );
}

/// llama.cpp's tool calls (`--jinja`, a template with bare JSON calls): its
/// required-call grammar lets text come before the call, which a
/// random-weight model would write to the end, so a bias on `{` (found by
/// llama's own /tokenize) opens the call at once; the grammar then holds
/// it to the tool's schema. Every answer is one call, timed from its first
/// piece, and tokenscope's check agrees with llama's own end: a call that
/// finished (`tool_calls`) is valid, one cut at the length is not. The
/// space prefix of the test model's SentencePiece vocabulary is turned off:
/// llama.cpp feeds the generation prompt to the call grammar as tokens, and
/// would see a space before `assistant` the grammar does not have.
#[test]
fn llamas_tool_calls_are_timed_and_checked_against_its_own_finish() {
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/json-tools.jinja"
    );
    let llama = Llama::start_with(
        "LLAMA_MODEL_TINY",
        2,
        1,
        &[
            "--jinja",
            "--chat-template-file",
            template,
            "--override-kv",
            "tokenizer.ggml.add_space_prefix=bool:false",
        ],
    );
    let ids = post_json(
        &llama.url,
        "/tokenize",
        &serde_json::json!({"content": "{ {", "with_pieces": true}),
    );
    let bias: serde_json::Map<String, serde_json::Value> = ids["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].to_string(), serde_json::json!(100)))
        .collect();
    assert_eq!(bias.len(), 2, "`{{` and ` {{` are tokens: {ids}");
    let extra = serde_json::json!({"parallel_tool_calls": false, "logit_bias": bias}).to_string();
    let tools = r#"[{"type": "function", "function": {"name": "add",
        "parameters": {"type": "object", "required": ["a", "b"],
          "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]"#;
    let tools = write_file("llama-add-tool.json", tools)
        .display()
        .to_string();
    let args = [
        "--api",
        "openai-chat",
        "--requests",
        "12",
        "--concurrency",
        "2",
        "--input-tokens",
        "16",
        "--output-tokens",
        "96",
        "--tools",
        &tools,
        "--tool-choice",
        "required",
        "--extra-body",
        &extra,
    ];
    let (_, r, recs) = bench_ok(&llama.url, "llama-tools", &[&args]);
    assert_eq!(r["counts"]["failed"], 0, "{}", r["counts"]);
    assert_eq!(r["tool_calls"]["calls"], 12, "{}", r["tool_calls"]);
    let finished = recs
        .iter()
        .filter(|q| q["finish_reason"] == "tool_calls")
        .count();
    assert!(finished > 0, "no call finished within 96 tokens: {recs:?}");
    assert_eq!(
        r["tool_calls"]["valid"], finished as u64,
        "{}",
        r["tool_calls"]
    );
    for q in &recs {
        let call = &q["tool_calls"][0];
        assert_eq!(call["name"], "add");
        assert_eq!(call["valid"], q["finish_reason"] == "tool_calls", "{q}");
        assert_eq!(q["first_tool_call_at_us"], q["first_token_at_us"], "{q}");
        assert!(
            q.get("implausible_usage").is_none(),
            "the call's framing is not streamed: {q}"
        );
    }
}

/// The same prompts at temperature 0 on llama.cpp at one and four slots
/// in use: tokenscope compares every answer with its first run's and says
/// where they part. What llama.cpp does is reported, not assumed; the
/// comparison is checked against the kept texts themselves.
#[test]
fn a_consistency_sweep_reports_what_llama_does_across_slots() {
    let llama = Llama::start("LLAMA_MODEL_TINY", 4, 2);
    let out = run_dir("llama-consistency");
    let o = tokenscope()
        .args([
            "sweep",
            "--url",
            &llama.url,
            "--quiet",
            "--api",
            "openai-completions",
        ])
        .args([
            "--concurrency",
            "1,4",
            "--requests",
            "16",
            "--input-tokens",
            "64",
        ])
        .args([
            "--output-tokens",
            "24",
            "--ignore-eos",
            "--consistency",
            "--keep-text",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let doc = sweep_doc(&out);
    let points = doc["analysis"]["answers"]["points"]
        .as_array()
        .unwrap()
        .clone();
    let texts = |p: &str| tokenscope_load::recorder::read_texts(&out.join(p));
    let (base, high) = (texts("point-00"), texts("point-01"));
    assert_eq!((base.len(), high.len()), (16, 16));
    let differ = base
        .iter()
        .filter(|(id, t)| high.get(id) != Some(t))
        .count() as u64;
    let c = &points[1]["consistency"];
    eprintln!("llama.cpp at 4 slots against 1: {c}");
    assert_eq!(points[0]["consistency"]["identical"], 16);
    assert_eq!(c["compared"], 16);
    assert_eq!(16 - c["identical"].as_u64().unwrap(), differ, "{c}");
    assert_eq!(c["texts_compared"].as_u64(), Some(differ));
    let found = doc["analysis"]["answers"]["findings"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(found, usize::from(differ > 0));
}

/// `tune --serve 'llama-server … -np {slots}'`: a command line for three
/// settings, each started in its own process group and killed with it.
fn llama_tune_serve(marker: &str, save: Option<&std::path::Path>) -> String {
    format!(
        "{} -m {} --alias {marker} --host 127.0.0.1 --port {{port}} --parallel {{slots}} -c 4096 --threads 1 --threads-batch 1 --metrics --no-warmup{}",
        fixture("LLAMA_SERVER"),
        fixture("LLAMA_MODEL_TINY"),
        save.map_or(String::new(), |d| format!(" --slot-save-path {}", d.display()))
    )
}

/// Whether a process other than this one has `marker` on its command line.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        e.file_name() != std::process::id().to_string().as_str()
            && std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
    })
}

fn tune_flags(marker: &str) -> Vec<String> {
    [
        "--model",
        marker,
        "--api",
        "openai-chat",
        "--slo",
        "ttft_p50=2s",
        "--input-tokens",
        "32",
        "--output-tokens",
        "8",
        "--ignore-eos",
        "--requests",
        "30",
        "--precision",
        "25%",
        "--min-point-time",
        "1s",
        "--auto-max-concurrency",
        "8",
        "--ready-timeout",
        "60s",
        "--no-history",
        "--between-points",
        "reset-prefix-cache",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Three llama.cpp servers (1, 2, 4 slots) started, searched and stopped
/// in turn; each slot's cache erased before every point after the first
/// (the server was started with --slot-save-path, which llama.cpp asks
/// for); nothing left running.
#[test]
fn tune_starts_three_llama_servers_finds_each_capacity_and_stops_them() {
    let _guard = serial();
    let marker = format!("llama-tune-{}", std::process::id());
    let out = run_dir("llama-tune");
    let save = run_dir("llama-tune-slots");
    std::fs::create_dir_all(&save).unwrap();
    let o = tokenscope()
        .args(["tune", "--serve", &llama_tune_serve(&marker, Some(&save))])
        .args(["--param", "slots=1,2,4", "--out"])
        .arg(&out)
        .args(tune_flags(&marker))
        .output()
        .unwrap();
    assert_ok(&o);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tune.json")).unwrap()).unwrap();
    let settings = doc["settings"].as_array().unwrap();
    assert_eq!(settings.len(), 3);
    for (s, slots) in settings.iter().zip([1, 2, 4]) {
        assert!(s["error"].is_null(), "{}", s["error"]);
        assert!(s["capacity"].as_f64().unwrap() > 0.0, "{}", s["name"]);
        assert!(s["ready_s"].as_f64().unwrap() > 0.0);
        let points = s["find"]["points"].as_array().unwrap();
        assert!(!points.is_empty());
        for p in points {
            let between = p["between"].as_str().unwrap_or_default();
            assert!(
                between.starts_with(&format!("erased {slots} llama.cpp slots")),
                "{}: {between}",
                s["name"]
            );
        }
    }
    assert!(doc["recommendations"][0]["setting"].is_string());
    assert!(!running(&marker), "a llama-server was left running");
}

/// Ctrl-C mid-tune: the point in flight ends partial, the server is
/// stopped, the settings left are not run, tune.json says interrupted,
/// and no llama-server is left. Without --slot-save-path llama.cpp refuses
/// to erase its slots, and the refusal is said in its own words.
#[test]
fn ctrl_c_mid_tune_stops_the_server_it_started() {
    use std::io::BufRead;
    let _guard = serial();
    let marker = format!("llama-tune-int-{}", std::process::id());
    let out = run_dir("llama-tune-int");
    let mut child = tokenscope()
        .args(["tune", "--serve", &llama_tune_serve(&marker, None)])
        .args(["--param", "slots=1,2", "--out"])
        .arg(&out)
        .args(tune_flags(&marker))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut said = String::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !said.contains("warning: between points") {
        assert!(
            Instant::now() < deadline,
            "no point after the probe: {said}"
        );
        if let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) {
            said.push_str(&line);
            said.push('\n');
        }
    }
    assert!(
        said.contains("--slot-save-path"),
        "llama.cpp's refusal: {said}"
    );
    assert!(running(&marker), "the server runs during the point");
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let waited = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "tune did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(130), "{said}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tune.json")).unwrap()).unwrap();
    assert_eq!(doc["interrupted"], true);
    let settings = doc["settings"].as_array().unwrap();
    assert_eq!(settings[0]["interrupted"], true);
    assert_eq!(settings[1]["measured"], false, "slots=2 is not run");
    assert!(settings[1]["notes"][0]
        .as_str()
        .unwrap()
        .contains("interrupted"));
    assert!(!running(&marker), "a llama-server was left running");
}
