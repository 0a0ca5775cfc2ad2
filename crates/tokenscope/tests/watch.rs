//! `tokenscope watch`: no load of its own — it reads the built-in engine's
//! /metrics while a separate `bench` loads it, and reports the server's own
//! numbers (`--once --json`, plain lines without a terminal); an unreachable
//! server is a one-line error with exit 3.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

#[test]
fn once_json_reports_the_engines_own_numbers_under_load() {
    let engine = Engine::start(default_engine());
    let mut bench = background_load(&engine.url, 16, 200, 256, &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let o = tokenscope()
        .args(["watch", &engine.url, "--once", "--json", "--interval", "1s"])
        .output()
        .unwrap();
    assert_ok(&o);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let _ = bench.kill();
    let _ = bench.wait();
    assert_eq!(doc["server_kind"], "tokenscope-sim");
    // 16 streams of an 8B model on an H100 decode hundreds of tokens/s or more.
    let tps = doc["generation_tokens_per_s"].as_f64().unwrap();
    assert!(tps > 300.0, "{tps}");
    let running = doc["server"]["running"]["last"].as_f64().unwrap();
    assert!((1.0..=16.0).contains(&running), "{running}");
    assert!(doc["server"]["kv_usage"]["last"].as_f64().unwrap() > 0.0);
    assert_eq!(doc["server"]["waiting"]["last"].as_f64(), Some(0.0));
    assert!(doc["server"]["itl"]["p50_ms"].as_f64().is_some());
    assert!(doc["diagnosis"].is_array());
}

#[test]
fn without_a_terminal_it_prints_one_line_per_sample_until_its_duration() {
    let engine = Engine::start(default_engine());
    let mut bench = background_load(&engine.url, 16, 300, 256, &[]);
    let o = tokenscope()
        .args([
            "watch",
            &engine.url,
            "--interval",
            "500ms",
            "--duration",
            "2500ms",
        ])
        .output()
        .unwrap();
    let _ = bench.kill();
    let _ = bench.wait();
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("tok/s")).collect();
    assert!(lines.len() >= 4, "{text}");
    assert!(
        lines.iter().all(|l| l.starts_with("tokenscope-sim")),
        "{text}"
    );
    assert!(!text.contains('\x1b'));
}

#[test]
fn an_unreachable_server_is_exit_3_with_one_line() {
    let port = free_port();
    let o = tokenscope()
        .args([
            "watch",
            &format!("http://127.0.0.1:{port}"),
            "--once",
            "--interval",
            "100ms",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}/metrics")), "{err}");
}

/// `watch --serve-metrics`: what watch reads of the server, as gauges a
/// Prometheus scrape gets while it watches, labelled by the target.
#[test]
fn watch_serves_the_servers_figures_for_prometheus() {
    let engine = Engine::start(default_engine());
    let mut bench = background_load(&engine.url, 8, 300, 256, &[]);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut watch = tokenscope()
        .args([
            "watch",
            &engine.url,
            "--interval",
            "300ms",
            "--duration",
            "4s",
        ])
        .args(["--serve-metrics", &addr])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = String::new();
    while watch.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        let url = format!("http://{addr}/metrics");
        if let Ok(text) = std::panic::catch_unwind(|| http_get(&url)) {
            if text.contains("figure=\"generation_tokens_per_second\"") {
                seen = text;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let _ = watch.wait();
    let _ = bench.kill();
    let _ = bench.wait();
    for figure in [
        "running",
        "waiting",
        "kv_usage",
        "generation_tokens_per_second",
    ] {
        assert!(
            seen.contains(&format!("figure=\"{figure}\"")),
            "{figure}: {seen}"
        );
    }
    assert!(
        seen.contains(&format!("target=\"{}\"", engine.url)),
        "{seen}"
    );
}

/// A vLLM `/metrics` whose speculative-decoding counters grow by 250
/// drafts, 1,000 draft tokens and 600 accepted tokens (240 at position 0,
/// 180 at 1, 120 at 2, 60 at 3) between scrapes.
fn speculating_vllm() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for (k, stream) in listener.incoming().take(50).enumerate() {
            let Ok(mut s) = stream else { continue };
            let _ = read_request(&s);
            let k = k as f64 + 1.0;
            let mut body = format!(
                "vllm:num_requests_running 4\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.2\n\
                 vllm:spec_decode_num_drafts_total {}\nvllm:spec_decode_num_draft_tokens_total {}\n\
                 vllm:spec_decode_num_accepted_tokens_total {}\n",
                250.0 * k,
                1000.0 * k,
                600.0 * k
            );
            for (pos, n) in [240.0, 180.0, 120.0, 60.0].iter().enumerate() {
                body += &format!(
                    "vllm:spec_decode_num_accepted_tokens_per_pos_total{{position=\"{pos}\"}} {}\n",
                    n * k
                );
            }
            let _ =
                std::io::Write::write_all(&mut s, http("200 OK", "text/plain", &body).as_bytes());
        }
    });
    url
}

/// `watch --once --json` reads speculative decoding from vLLM's counters:
/// 600 of 1,000 draft tokens accepted is acceptance 0.6, 3.4 tokens a
/// step, and each position's share of the drafts.
#[test]
fn watch_reads_speculative_decodings_acceptance() {
    let url = speculating_vllm();
    let o = tokenscope()
        .args(["watch", &url, "--once", "--json", "--interval", "200ms"])
        .output()
        .unwrap();
    assert_ok(&o);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &doc["server"]["spec_decode"];
    assert_eq!(s["draft_tokens"], 1000.0, "{s}");
    assert!((stat(s, "acceptance_rate") - 0.6).abs() < 1e-9, "{s}");
    assert!((stat(s, "mean_accepted_length") - 3.4).abs() < 1e-9, "{s}");
    let by: Vec<f64> = s["acceptance_by_position"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(by, [0.96, 0.72, 0.48, 0.24]);
    let text = tokenscope()
        .args(["watch", &url, "--once", "--interval", "200ms"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("spec accept 60 %"));
}
