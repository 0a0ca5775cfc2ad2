//! `report --format vllm|aiperf|guidellm`: a run against the exact server
//! (TTFT 100 ms, 20 ms between tokens) in each peer's dialect, its fields
//! under the peer's names and units.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

fn export(dir: &Path, format: &str, file: &str) -> Value {
    let o = tokenscope()
        .args(["report", "--format", format])
        .arg(dir)
        .output()
        .unwrap();
    assert_ok(&o);
    serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap()
}

#[test]
fn a_run_in_vllm_aiperf_and_guidellm_dialects() {
    let server = Server::start(exact(100, 20));
    let out = run_dir("exports");
    let load = exact_chat(&[
        "--concurrency",
        "4",
        "--requests",
        "24",
        "--output-tokens",
        "11",
    ]);
    assert_ok(&bench(&server.url, &out, &load));
    let r = results(&out);
    let ttft50 = stat(&r, "latency.ttft_ms.p50");

    let v = export(&out, "vllm", "vllm-result.json");
    assert_eq!(v["backend"], "openai-chat");
    assert_eq!(v["request_rate"], "inf", "a closed loop, as vLLM writes it");
    assert_eq!(v["max_concurrency"], 4);
    assert_eq!(v["completed"], 24);
    assert_eq!(v["median_ttft_ms"].as_f64(), Some(ttft50));
    assert!(
        (v["median_tpot_ms"].as_f64().unwrap() - 20.0).abs() < 1.0,
        "{}",
        v["median_tpot_ms"]
    );
    let ttfts = v["ttfts"].as_array().unwrap();
    assert_eq!(ttfts.len(), 24);
    assert!(
        ttfts
            .iter()
            .all(|t| (0.099..0.2).contains(&t.as_f64().unwrap())),
        "seconds"
    );
    assert_eq!(v["output_lens"][0], 11);
    assert_eq!(v["total_output_tokens"], 24 * 11);

    let a = export(&out, "aiperf", "profile_export_aiperf.json");
    assert_eq!(a["time_to_first_token"]["unit"], "ms");
    assert_eq!(a["time_to_first_token"]["p50"].as_f64(), Some(ttft50));
    // AIPerf's inter-token latency is per request: tokenscope's TPOT.
    assert!((a["inter_token_latency"]["avg"].as_f64().unwrap() - 20.0).abs() < 1.0);
    assert_eq!(a["output_sequence_length"]["avg"], 11.0);
    assert_eq!(a["request_count"]["avg"], 24.0);
    assert_eq!(a["request_throughput"]["unit"], "requests/sec");

    let g = export(&out, "guidellm", "benchmarks.json");
    let m = &g["benchmarks"][0]["metrics"];
    assert_eq!(
        m["time_to_first_token_ms"]["successful"]["median"].as_f64(),
        Some(ttft50)
    );
    // Request latency in seconds; time per output token includes the first.
    let e2e = m["request_latency"]["successful"]["mean"].as_f64().unwrap();
    assert!((e2e - 0.3).abs() < 0.02, "{e2e} s = 100 ms + 10 × 20 ms");
    let tpot = m["time_per_output_token_ms"]["successful"]["mean"]
        .as_f64()
        .unwrap();
    assert!((tpot - e2e * 1e3 / 11.0).abs() < 0.5, "{tpot}");
    assert_eq!(g["benchmarks"][0]["request_totals"]["successful"], 24);
}
