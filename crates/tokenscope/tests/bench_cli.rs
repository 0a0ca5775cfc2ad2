//! The command contract: outputs, files, APIs.

mod common;
use common::*;

#[test]
fn json_flag_prints_only_the_results_document() {
    let server = Server::start(exact(5, 1));
    let out = run_dir("json");
    let o = bench(
        &server.url,
        &out,
        &["--requests", "5", "--output-tokens", "8", "--json"],
    );
    assert_ok(&o);
    let doc: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    assert_eq!(doc["schema"], "tokenscope.run/v1");
    assert_eq!(doc, results(&out));
    for field in [
        "latency.ttft_ms.p99",
        "latency.tpot_ms.p50",
        "latency.itl_ms.mean",
        "latency.e2e_ms.max",
        "throughput.output_tokens_per_s",
        "throughput.total_tokens_per_s",
        "throughput.requests_per_s",
        "throughput.concurrency.mean",
        "counts.requests",
    ] {
        stat(&doc, field);
    }
    assert!(doc["server"].get("kind").is_some() && doc["efficiency"].is_object());
}

#[test]
fn auto_detects_chat_and_completions_work_too() {
    let server = Server::start(exact(5, 1));
    let out = run_dir("auto");
    assert_ok(&bench(
        &server.url,
        &out,
        &["--requests", "3", "--output-tokens", "5"],
    ));
    let r = results(&out);
    assert_eq!(r["target"]["api"], "openai-chat");
    assert_eq!(
        r["target"]["model"], "tokenscope-exact",
        "the model comes from /v1/models"
    );
    let out = run_dir("completions");
    assert_ok(&bench(
        &server.url,
        &out,
        &[
            "--requests",
            "3",
            "--output-tokens",
            "5",
            "--api",
            "openai-completions",
        ],
    ));
    let r = results(&out);
    assert_eq!(r["target"]["api"], "openai-completions");
    assert_eq!(stat(&r, "tokens.output_total"), 15.0);
    assert_eq!(r["tokens"]["output_sources"]["server_usage"], 3);
}

#[test]
fn warmup_is_recorded_but_excluded() {
    let server = Server::start(exact(5, 1));
    let out = run_dir("warmup");
    assert_ok(&bench(
        &server.url,
        &out,
        &["--requests", "6", "--warmup", "2", "--output-tokens", "4"],
    ));
    let r = results(&out);
    assert_eq!(stat(&r, "counts.requests"), 6.0);
    assert_eq!(stat(&r, "counts.warmup"), 2.0);
    let recs = records(&out);
    assert_eq!(recs.len(), 8);
    assert_eq!(recs.iter().filter(|r| r["warmup"] == true).count(), 2);
}

#[test]
fn duration_bounds_the_run() {
    let server = Server::start(exact(5, 5));
    let out = run_dir("duration");
    let started = std::time::Instant::now();
    assert_ok(&bench(
        &server.url,
        &out,
        &[
            "--duration",
            "1s",
            "--concurrency",
            "2",
            "--output-tokens",
            "4",
        ],
    ));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let r = results(&out);
    assert!(stat(&r, "counts.requests") > 5.0);
    assert!(stat(&r, "window.duration_s") < 1.5);
}

#[test]
fn builtin_server_is_the_default_target() {
    let out = run_dir("builtin");
    let o = tokenscope()
        .args([
            "bench",
            "--requests",
            "4",
            "--output-tokens",
            "8",
            "--concurrency",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    for section in [
        "Latency",
        "Throughput",
        "Efficiency",
        "TTFT",
        "TPOT",
        "output tokens/s",
    ] {
        assert!(text.contains(section), "summary lacks {section}:\n{text}");
    }
    let r = results(&out);
    let builtin = r["target"]["builtin"].as_str().unwrap();
    assert!(
        builtin.contains("simulated engine")
            && builtin.contains("llama-3.1-8b")
            && builtin.contains("h100-sxm")
    );
    assert_eq!(r["target"]["model"], "llama-3.1-8b");
    // An 8B model on an H100 decodes a small batch in ~8-9 ms per token.
    let tpot = stat(&r, "latency.tpot_ms.p50");
    assert!((6.0..12.0).contains(&tpot), "TPOT {tpot} ms");

    let out = run_dir("builtin-exact");
    let o = tokenscope()
        .args([
            "bench",
            "--builtin",
            "exact",
            "--requests",
            "2",
            "--output-tokens",
            "8",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let r = results(&out);
    assert!(r["target"]["builtin"].as_str().unwrap().contains("exact"));
    // The exact server sends the first token 100 ms in by its own clock
    // (`server_timings.ttft_ms`). The client cannot see it sooner, and on a
    // loaded machine sees it later by its own delay, so this smoke test
    // holds a generous bound against the server's own send time; the
    // tight figure is `timing_accuracy.rs`'s and `scripts/bench-client.sh`'s
    // (docs/performance.md).
    for rec in records(&out) {
        let client = (rec["first_token_at_us"].as_f64().unwrap()
            - rec["sent_at_us"].as_f64().unwrap())
            / 1e3;
        let server = rec["server_timings"]["ttft_ms"].as_f64().unwrap();
        // Never before the server's send; after it by at most half a
        // second, a lag no loaded machine's scheduler comes near.
        assert!(
            (99.0..600.0).contains(&server),
            "the server sent at {server} ms"
        );
        assert!(
            (-0.5..500.0).contains(&(client - server)),
            "client TTFT {client} ms against the server's {server} ms"
        );
    }
}

#[test]
fn local_gpu_without_nvml_is_a_note_not_an_error() {
    let server = Server::start(exact(5, 1));
    let out = run_dir("gpu-local");
    let o = bench(
        &server.url,
        &out,
        &[
            "--requests",
            "3",
            "--output-tokens",
            "4",
            "--gpu",
            "local",
            "--gpu-type",
            "h100-sxm",
        ],
    );
    assert_ok(&o);
    let r = results(&out);
    // This machine has no NVIDIA driver; on one with a GPU, efficiency.gpu is filled instead.
    assert!(
        has_rule(&r, "gpu_unavailable") || r["efficiency"]["gpu"].is_object(),
        "{:?}",
        rules(&r)
    );
    assert_eq!(
        stat(&r, "efficiency.cost.usd_per_gpu_hour"),
        4.76,
        "--gpu-type's default price"
    );
    // The exact server has no /metrics: the kind stays unknown and a note says why.
    assert!(r["server"]["kind"].is_null());
    assert!(has_rule(&r, "metrics_unavailable"), "{:?}", rules(&r));
}

#[test]
fn sweep_runs_one_bench_per_level_and_bench_refuses_a_series() {
    let server = Server::start(exact(5, 2));
    let out = run_dir("sweep");
    let o = tokenscope()
        .args([
            "sweep",
            "--url",
            &server.url,
            "--quiet",
            "--rate",
            "20,40",
            "--requests",
            "10",
            "--output-tokens",
            "4",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let doc = sweep_doc(&out);
    let rates: Vec<f64> = doc["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["results"]["config"]["load"]["rate"].as_f64().unwrap())
        .collect();
    assert_eq!(rates, vec![20.0, 40.0]);
    assert!(results(&out.join("point-01"))["counts"]["succeeded"] == 10);
    let o = tokenscope()
        .args(["bench", "--url", &server.url, "--concurrency", "1,2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("sweep"));
    let o = tokenscope()
        .args(["sweep", "--url", &server.url])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "a sweep needs a series");
}

#[test]
fn auto_sweep_sizes_its_points_unless_told() {
    let server = Server::start(exact(2, 1));
    let requests = |extra: &[&str]| {
        let out = run_dir("sweep-auto-sized");
        let o = tokenscope()
            .args(["sweep", "--auto", "--auto-max-concurrency", "64", "--quiet"])
            .args(["--url", &server.url, "--output-tokens", "2", "--out"])
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        assert_ok(&o);
        let doc = sweep_doc(&out);
        doc["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let r = &p["results"];
                let c = r["config"]["load"]["concurrency"].as_u64().unwrap();
                (c, r["counts"]["requests"].as_u64().unwrap())
            })
            .collect::<Vec<_>>()
    };
    // Two rounds of the concurrency, at least 32, from the baseline to the probe.
    let sized = requests(&[]);
    assert_eq!(sized.first(), Some(&(1, 32)), "{sized:?}");
    assert_eq!(sized.last(), Some(&(64, 128)), "{sized:?}");
    assert!(
        sized.iter().all(|&(c, n)| n == (2 * c).max(32)),
        "{sized:?}"
    );
    // --requests wins (still at least two rounds).
    let told = requests(&["--requests", "40"]);
    assert!(told.iter().all(|&(c, n)| n == (2 * c).max(40)), "{told:?}");
}

#[test]
fn cost_per_token_from_gpu_price() {
    let server = Server::start(exact(5, 1));
    let out = run_dir("cost");
    assert_ok(&bench(
        &server.url,
        &out,
        &[
            "--requests",
            "4",
            "--output-tokens",
            "8",
            "--gpu-price",
            "3.6",
            "--gpus",
            "2",
        ],
    ));
    let r = results(&out);
    let window = stat(&r, "window.duration_s");
    let expected = 3.6 * 2.0 * window / 3600.0 / 32.0 * 1000.0;
    let got = stat(&r, "efficiency.cost.usd_per_1k_output_tokens");
    assert!(
        (got - expected).abs() / expected < 1e-9,
        "{got} vs {expected}"
    );
}

#[test]
fn calibrating_on_a_short_run_warns() {
    let out = run_dir("calib-short");
    let o = tokenscope()
        .args(["bench", "--quiet", "--concurrency", "1", "--requests", "8"])
        .args(["--output-tokens", "16", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let o = tokenscope()
        .args(["sim", "calibrate"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("warning") && stderr.contains("has 8 measured requests"),
        "{stderr}"
    );
    assert!(out.join("profile.json").exists(), "it still fits");
}

/// A run none of whose requests was served has no latency to fit: refused,
/// naming the commonest error (before, it "fitted" the defaults to zeros).
/// One with some failures is fitted and warned of. A sweep's directory
/// stands for its points: the profile lists each.
#[test]
fn calibration_refuses_a_run_with_nothing_served_and_takes_a_sweep_whole() {
    let calibrate = |dir: &std::path::Path, gpu: &str| {
        tokenscope()
            .args(["sim", "calibrate", "--gpu", gpu])
            .arg(dir)
            .output()
            .unwrap()
    };
    // On an L4 the cache holds ~28K tokens: longer prompts are refused.
    let (none, some) = (run_dir("calib-none"), run_dir("calib-some"));
    let long = [
        "--rate",
        "5",
        "--requests",
        "30",
        "--gpu",
        "l4",
        "--no-history",
    ];
    let o = sim_plan(&none, &[&long[..], &["--input-tokens", "40000"]].concat());
    assert_eq!(o.status.code(), Some(4), "every request failed");
    let o = calibrate(&none, "l4");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("none of its 30 requests succeeded") && err.contains("maximum context length"),
        "{err}"
    );
    let o = sim_plan(
        &some,
        &[&long[..], &["--input-tokens", "uniform:10000..40000"]].concat(),
    );
    assert!(matches!(o.status.code(), Some(0) | Some(4)));
    let o = calibrate(&some, "l4");
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("requests failed") && err.contains("fit to a run without errors"),
        "{err}"
    );

    let sweep = run_dir("calib-sweep");
    let o = sim_plan(
        &sweep,
        &[
            "--sweep",
            "concurrency:1,8",
            "--requests",
            "24",
            "--no-history",
        ],
    );
    assert_ok(&o);
    let o = calibrate(&sweep, "h100-sxm");
    assert_ok(&o);
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sweep.join("profile.json")).unwrap())
            .unwrap();
    let runs: Vec<&str> = profile["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_dir"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "{profile}");
    assert!(
        runs[0].ends_with("point-00") && runs[1].ends_with("point-01"),
        "{runs:?}"
    );
}

#[test]
fn a_scenario_file_runs_the_command_line_wins_and_the_run_repeats_from_its_config() {
    let server = Server::start(exact(20, 2));
    let dir = run_dir("scenario");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("scenario.toml");
    std::fs::write(
        &file,
        format!(
            "url = \"{}\"\nconcurrency = 2\nrequests = 5\ninput_tokens = \"uniform:10..40\"\noutput-tokens = 6\nseed = 9\nheader = [\"X-Token: secret\"]\n",
            server.url
        ),
    )
    .unwrap();
    let first = dir.join("first");
    let o = tokenscope()
        .args(["bench", "--quiet", "--no-metrics", "--config"])
        .arg(&file)
        .args(["--requests", "7", "--out"])
        .arg(&first)
        .output()
        .unwrap();
    assert_ok(&o);
    assert_eq!(
        results(&first)["counts"]["requests"],
        7,
        "the command line wins"
    );
    let stored = std::fs::read_to_string(first.join("config.toml")).unwrap();
    assert!(
        stored.contains("requests = 7") && stored.contains("seed = 9"),
        "{stored}"
    );
    assert!(
        !stored.contains("secret"),
        "a header's value is never stored: {stored}"
    );
    assert!(!stored.contains("out ="), "{stored}");

    // The stored config repeats the run: the same requests, the same lengths.
    let again = dir.join("again");
    let o = tokenscope()
        .args(["bench", "--config"])
        .arg(first.join("config.toml"))
        .arg("--out")
        .arg(&again)
        .output()
        .unwrap();
    assert_ok(&o);
    let lengths = |d: &std::path::Path| {
        let mut v: Vec<(u64, u64)> = records(d)
            .iter()
            .map(|r| {
                (
                    r["id"].as_u64().unwrap(),
                    r["input_tokens"].as_u64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(lengths(&first), lengths(&again));
    assert_eq!(
        results(&again)["config"]["load"],
        results(&first)["config"]["load"]
    );

    // A file's flag that the command line contradicts gives way to it.
    let open = dir.join("open");
    let o = tokenscope()
        .args(["bench", "--quiet", "--no-metrics", "--config"])
        .arg(&file)
        .args(["--rate", "50", "--out"])
        .arg(&open)
        .output()
        .unwrap();
    assert_ok(&o);
    assert_eq!(results(&open)["config"]["load"]["mode"], "open");

    // A key that is no flag is refused, naming it.
    std::fs::write(&file, "concurrency = 2\nconcurency = 3\n").unwrap();
    let o = tokenscope()
        .args(["bench", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("`concurency` is not a flag of `bench`"),
        "{stderr}"
    );
}
