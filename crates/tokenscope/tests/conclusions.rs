//! Conclusions a user can act on: no knee on a curve that never bent, no
//! recommendation that breaks `--slo`, no verdict on a handful of requests
//! (see failures.rs for the bench side), no bench-only text from `sim`, no
//! exit 0 for a run that measured nothing, no impossible usage summed, and
//! `compare` that says when two runs are unlike.

mod common;
use common::*;
use serde_json::Value;

fn plan_sweep(name: &str, args: &[&str]) -> (std::path::PathBuf, String) {
    let out = run_dir(name);
    let o = tokenscope()
        .args(["sim", "plan"])
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    (out, String::from_utf8_lossy(&o.stdout).into_owned())
}

fn recommendations(doc: &Value) -> Vec<Value> {
    doc["analysis"]["recommendations"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn no_knee_on_a_curve_that_never_bent() {
    // The default 8B on one H100: tokens/s nearly doubles at every step.
    let (out, stdout) = plan_sweep("no-knee", &["--sweep", "concurrency:1,2,4,8,16"]);
    let doc = sweep_doc(&out);
    let a = &doc["analysis"];
    assert!(a["knee"].is_null(), "{}", a["knee"]);
    assert_eq!(a["flattening"]["saturated"], false);
    assert!(
        stdout.contains("not saturated up to load 16: test higher loads"),
        "{stdout}"
    );
    assert!(!stdout.contains("knee: load"), "{stdout}");
    for r in recommendations(&doc) {
        assert_eq!(r["load"], 16.0);
        assert_eq!(r["lower_bound"], true, "{r}");
    }
    assert!(stdout.contains("load ≥ 16"), "{stdout}");
    // The page says so at the top, before any chart.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let (verdict, chart) = (
        html.find("not saturated up to load 16").unwrap(),
        html.find("<svg").unwrap(),
    );
    assert!(verdict < chart, "the conclusion comes first");
}

#[test]
fn every_recommendation_keeps_the_slo() {
    // 1,000 requests a point, so a p99 can be judged at every load.
    let (out, stdout) = plan_sweep(
        "slo-recs",
        &[
            "--sweep",
            "concurrency:1,4,16,64",
            "--requests",
            "1000",
            "--slo",
            "ttft_p99=100ms",
        ],
    );
    let doc = sweep_doc(&out);
    let slo = &doc["analysis"]["slo"];
    let highest = slo["highest_met_load"].as_f64().expect("met somewhere");
    assert!(highest < 64.0, "the SLO must bind inside the series: {slo}");
    let series = doc["analysis"]["series"].as_array().unwrap();
    for r in recommendations(&doc) {
        let Some(i) = r["point"].as_u64() else {
            assert!(!r["why"].as_str().unwrap().is_empty());
            continue;
        };
        let p = &series[i as usize];
        assert!(r["load"].as_f64().unwrap() <= highest, "{r} past {highest}");
        assert!(p["ttft_p99_ms"].as_f64().unwrap() <= 100.0, "{r}");
        assert_eq!(p["slo"]["verdict"], "met", "{p}");
    }
    let chat = &recommendations(&doc)[0];
    assert!(
        chat["objective"]
            .as_str()
            .unwrap()
            .contains("--slo ttft_p99 ≤ 100 ms"),
        "the SLO is chat's objective: {chat}"
    );
    assert!(
        stdout.contains(&format!("met up to load {highest}")),
        "{stdout}"
    );
    // Re-judged from the points' requests against a stricter SLO: the same rule.
    let o = tokenscope()
        .args(["report", "--format", "terminal", "--slo", "ttft_p99=5ms"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("not met even at the lightest load"), "{text}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("re-judged against --slo ttft_p99 ≤ 5 ms"));
}

#[test]
fn sim_prints_no_bench_only_text_and_prices_its_gpu() {
    let out = run_dir("sim-text");
    let o = tokenscope()
        .args(["sim", "plan", "--requests", "20", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!stdout.contains("--gpu local"), "{stdout}");
    assert!(!stdout.contains("--gpu-price"), "{stdout}");
    assert!(
        stdout.contains("the simulated GPU's default price for h100-sxm"),
        "{stdout}"
    );
    // No heading without lines under it.
    let lines: Vec<&str> = stdout.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("Server (") {
            assert!(
                lines.get(i + 1).is_some_and(|n| n.starts_with("  ")),
                "{stdout}"
            );
        }
    }
    let r = results(&out);
    assert_eq!(r["efficiency"]["cost"]["usd_per_gpu_hour"], 4.76);
    assert!(r["config"]["gpu_price_source"]
        .as_str()
        .unwrap()
        .contains("RunPod"));
}

#[test]
fn a_simulated_ttft_that_hangs_on_its_users_phase_is_marked() {
    // 32 users of fixed lengths started together: their waves come back
    // whole, so TTFT depends on the start; the plan simulates the other
    // start too and marks the figure with both.
    let plan = |name: &str, output: &str| {
        let out = run_dir(name);
        let o = tokenscope()
            .args([
                "sim",
                "plan",
                "--no-history",
                "--concurrency",
                "32",
                "--requests",
                "320",
            ])
            .args(["--input-tokens", "3000", "--output-tokens", output, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert_ok(&o);
        (
            results(&out),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (r, stdout) = plan("phase-fixed", "100");
    assert!(has_rule(&r, "ttft_depends_on_phase"), "{stdout}");
    let p = &r["simulated"]["phase"];
    assert_eq!(p["simulated_start"], "together");
    assert_eq!(p["together_ttft_ms"]["p50"], r["latency"]["ttft_ms"]["p50"]);
    let (together, staggered) = (
        stat(p, "together_ttft_ms.p50"),
        stat(p, "staggered_ttft_ms.p50"),
    );
    assert!(together > 2.0 * staggered, "{p}");
    assert!(stdout.contains("TTFT §"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "p50 {together:.1} ms started together, {staggered:.1} ms staggered"
        )),
        "{stdout}"
    );
    // A sweep marks the points whose TTFT hangs on the start, and only those.
    let (_, stdout) = plan_sweep(
        "phase-sweep",
        &[
            "--sweep",
            "concurrency:1,32",
            "--requests",
            "320",
            "--input-tokens",
            "3000",
            "--output-tokens",
            "100",
        ],
    );
    let row = |load: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(load))
            .unwrap_or_default()
            .to_string()
    };
    assert!(!row("concurrency 1 ").contains('§'), "{stdout}");
    assert_eq!(row("concurrency 32").matches('§').count(), 2, "{stdout}");
    assert!(
        stdout.contains("§ TTFT hangs on how the closed loop's users line up"),
        "{stdout}"
    );
    // A recommendation judged by TTFT at that point says what it rests on.
    assert!(
        stdout.contains(
            "§ cost's concurrency 32 is judged by a TTFT that hangs on how the users line up"
        ),
        "{stdout}"
    );
    // Answers of varied lengths: nothing hangs on the start, nothing marked.
    let (r, stdout) = plan("phase-varied", "uniform:80..120");
    assert!(!has_rule(&r, "ttft_depends_on_phase"), "{stdout}");
    assert!(r["simulated"]["phase"].is_null());
    assert!(!stdout.contains('§'), "{stdout}");
}

#[test]
fn a_run_that_measures_nothing_is_an_error() {
    let o = tokenscope()
        .args(["bench", "--builtin", "exact", "--duration", "0s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--duration"));
    // A warm-up that swallows the whole run.
    let out = run_dir("nothing-measured");
    let o = tokenscope()
        .args([
            "bench",
            "--builtin",
            "exact",
            "--quiet",
            "--duration",
            "300ms",
        ])
        .args(["--warmup", "500", "--concurrency", "2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no request was measured"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Streams two words and claims `completion_tokens` of 2^64 − 1.
fn lying_server() -> String {
    raw_server(|_| {
        http(
            "200 OK",
            "text/event-stream",
            "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n\
             data: {\"choices\":[{\"delta\":{\"content\":\" world\"},\"finish_reason\":\"length\"}]}\n\n\
             data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":18446744073709551615}}\n\n\
             data: [DONE]\n\n",
        )
    })
}

#[test]
fn usage_counts_that_cannot_be_true_are_flagged_not_summed() {
    let url = lying_server();
    let out = run_dir("implausible-usage");
    let o = bench_chat(
        &url,
        &out,
        &["--quiet", "--requests", "4", "--output-tokens", "2"],
    );
    assert_ok(&o);
    let r = results(&out);
    assert_eq!(r["counts"]["implausible_usage"], 4);
    // Counted from the stream instead: two words, a token each.
    assert_eq!(r["tokens"]["output_total"], 8, "{}", r["tokens"]);
    assert!(has_rule(&r, "implausible_usage"));
    let rec = &records(&out)[0];
    assert!(rec["implausible_usage"]
        .as_str()
        .unwrap()
        .contains("18446744073709551615"));
}

#[test]
fn compare_says_when_runs_are_unlike_and_compares_sweeps_point_by_point() {
    let server = Server::start(exact(10, 1));
    let (a, b) = (run_dir("unlike-a"), run_dir("unlike-b"));
    assert_ok(&bench(
        &server.url,
        &a,
        &["--requests", "30", "--output-tokens", "4"],
    ));
    assert_ok(&bench(
        &server.url,
        &b,
        &["--requests", "30", "--output-tokens", "40"],
    ));
    let o = tokenscope()
        .args(["compare", "--fail-on-regression", "1%"])
        .args([&a, &b])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_ok(&o);
    assert!(
        stdout.starts_with("A ") && stdout.contains("UNLIKE RUNS"),
        "{stdout}"
    );
    assert!(
        stdout.contains("workload (output_tokens) differs"),
        "{stdout}"
    );
    assert!(!stdout.contains("REGRESSION"), "{stdout}");
    // Made to judge them anyway: E2E of 40 tokens is a regression of 4.
    let o = tokenscope()
        .args(["compare", "--fail-on-regression", "1%", "--allow-unlike"])
        .args([&a, &b])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    let (sa, _) = plan_sweep(
        "cmp-sweep-a",
        &["--sweep", "concurrency:1,2,4", "--requests", "40"],
    );
    let (sb, _) = plan_sweep(
        "cmp-sweep-b",
        &["--sweep", "concurrency:2,4,8", "--requests", "40"],
    );
    let o = tokenscope()
        .args(["compare", "--json"])
        .args([&sa, &sb])
        .output()
        .unwrap();
    assert_ok(&o);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let points = doc["points"].as_array().unwrap();
    let loads: Vec<&str> = points.iter().map(|p| p["load"].as_str().unwrap()).collect();
    assert_eq!(loads, ["concurrency 2", "concurrency 4"]);
    assert!(points
        .iter()
        .all(|p| !p["metrics"].as_array().unwrap().is_empty()));
}

#[test]
fn messages_point_the_right_way() {
    // A model the server does not serve: its own words, and what it serves.
    let url = raw_server(|line| {
        if line.starts_with("GET /v1/models") {
            http(
                "200 OK",
                "application/json",
                r#"{"data":[{"id":"llama-3-8b"},{"id":"qwen-7b"}]}"#,
            )
        } else {
            http(
                "404 Not Found",
                "application/json",
                r#"{"error":{"message":"The model `gpt-9` does not exist.","type":"NotFoundError"}}"#,
            )
        }
    });
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &url,
            "--model",
            "gpt-9",
            "--no-metrics",
            "--requests",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("The model `gpt-9` does not exist."),
        "{stderr}"
    );
    assert!(
        stderr.contains("the server serves llama-3-8b, qwen-7b"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");

    // No scheme: say what to add.
    let o = tokenscope()
        .args(["bench", "--url", "localhost:8000"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("add http://"));

    // A full endpoint URL is accepted and names its API.
    let server = Server::start(exact(5, 1));
    let out = run_dir("endpoint-url");
    let endpoint = format!("{}/v1/completions", server.url);
    let o = bench(
        &endpoint,
        &out,
        &["--requests", "2", "--output-tokens", "2"],
    );
    assert_ok(&o);
    assert_eq!(results(&out)["target"]["api"], "openai-completions");

    // Requests that all fail: the top message is in the summary.
    let url = raw_server(|line| {
        if line.starts_with("GET /v1/models") {
            http("200 OK", "application/json", r#"{"data":[{"id":"m"}]}"#)
        } else {
            http(
                "503 Service Unavailable",
                "application/json",
                r#"{"error":{"message":"engine overloaded, retry later"}}"#,
            )
        }
    });
    let out = run_dir("top-errors");
    let o = bench_chat(&url, &out, &["--requests", "3"]);
    assert_eq!(o.status.code(), Some(4));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("×3"), "{stdout}");
    let top = &results(&out)["counts"]["top_errors"][0];
    assert_eq!(top["count"], 3, "{top}");
}

#[test]
fn repeat_runs_each_point_k_times_and_reports_the_spread() {
    let out = run_dir("repeat");
    let o = tokenscope()
        .args([
            "sweep",
            "--builtin",
            "exact",
            "--concurrency",
            "1,2",
            "--repeat",
            "3",
        ])
        .args([
            "--requests",
            "6",
            "--output-tokens",
            "4",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let doc = sweep_doc(&out);
    assert_eq!(doc["points"].as_array().unwrap().len(), 6, "every run kept");
    let series = doc["analysis"]["series"].as_array().unwrap();
    assert_eq!(series.len(), 2, "one point a load");
    for p in series {
        let s = &p["spread"];
        assert_eq!(s["runs"], 3, "{p}");
        let (lo, hi) = (
            s["output_tps"][0].as_f64().unwrap(),
            s["output_tps"][1].as_f64().unwrap(),
        );
        let mid = p["output_tps"].as_f64().unwrap();
        assert!(lo <= mid && mid <= hi, "{p}");
    }
    assert!(stdout.contains("3 runs, tokens/s"), "{stdout}");
    assert!(stdout.contains("concurrency 2 (run 3 of 3)"), "{stdout}");
    // The reports read it: one Markdown row per run, each with its load's point.
    let o = tokenscope()
        .args(["report", "--format", "md"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).matches("(run ").count(),
        6
    );
}

/// An open loop past the server's capacity is named for what it is — a
/// growing queue — with the rate the server kept up with; the same model
/// under its capacity, and a closed loop however loaded, are not.
#[test]
fn a_queue_that_grows_is_named_with_the_rate_the_server_kept_up_with() {
    let run = |name: &str, load: &[&str]| {
        let out = run_dir(name);
        let mut args = vec![
            "--duration",
            "40s",
            "--input-tokens",
            "512",
            "--output-tokens",
            "256",
        ];
        args.extend(load);
        let o = tokenscope()
            .args(["sim", "plan", "--quiet"])
            .args(&args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_ok(&o);
        results(&out)
    };
    let growing = |r: &Value| {
        r["diagnosis"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["rule"] == "queue_growing")
            .cloned()
    };
    let over = run("queue-over", &["--rate", "80"]);
    let f = growing(&over).expect("80 requests/s outrun one H100's 8B at 512/256");
    let kept_up = over["throughput"]["requests_per_s"].as_f64().unwrap();
    let estimate = f["evidence"]["capacity_estimate_requests_per_s"]
        .as_f64()
        .unwrap();
    assert!(
        (estimate / kept_up - 1.0).abs() < 0.1,
        "estimate {estimate} against the {kept_up} requests/s it served"
    );
    assert!(f["message"]
        .as_str()
        .unwrap()
        .contains("not a steady state"));
    for (name, load) in [
        ("queue-under", ["--rate", "20"]),
        ("queue-closed", ["--concurrency", "400"]),
    ] {
        let r = run(name, &load);
        assert!(growing(&r).is_none(), "{name}: {}", r["diagnosis"]);
    }
}
