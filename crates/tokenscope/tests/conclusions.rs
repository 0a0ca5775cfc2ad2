//! Conclusions a user can act on: no knee on a curve that never bent, no
//! recommendation that breaks `--slo`, no verdict on a handful of requests
//! (see failures.rs for the bench side), no bench-only text from `sim`, no
//! exit 0 for a run that measured nothing, no impossible usage summed, and
//! `compare` that says when two runs are unlike.

mod common;
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

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

/// A server on 127.0.0.1 that streams two words and claims `usage`.
fn lying_server(usage: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = std::io::Read::read_exact(&mut reader, &mut body);
            let events = format!(
                "data: {{\"choices\":[{{\"delta\":{{\"content\":\"hello\"}}}}]}}\n\n\
                 data: {{\"choices\":[{{\"delta\":{{\"content\":\" world\"}},\"finish_reason\":\"length\"}}]}}\n\n\
                 data: {{\"choices\":[],\"usage\":{usage}}}\n\ndata: [DONE]\n\n"
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{events}",
                events.len()
            );
        }
    });
    url
}

#[test]
fn usage_counts_that_cannot_be_true_are_flagged_not_summed() {
    let url = lying_server(r#"{"prompt_tokens":5,"completion_tokens":18446744073709551615}"#);
    let out = run_dir("implausible-usage");
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &url,
            "--api",
            "openai-chat",
            "--model",
            "m",
        ])
        .args([
            "--no-metrics",
            "--quiet",
            "--requests",
            "4",
            "--concurrency",
            "1",
        ])
        .args(["--output-tokens", "2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
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
