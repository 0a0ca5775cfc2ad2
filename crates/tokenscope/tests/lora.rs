//! LoRA adapters (`--lora`): each request names its adapter as its model,
//! the server sees each adapter's share (its own count, by the model each
//! request named), and every figure is reported per adapter — in
//! results.json, the summary and `compare`.

mod common;

use common::*;
use serde_json::Value;

fn lora_run(server: &Server, name: &str, more: &[&str]) -> (std::path::PathBuf, Value) {
    let fixed = [
        "--no-metrics",
        "--concurrency",
        "3",
        "--output-tokens",
        "10",
    ];
    let (out, r, _) = bench_ok(&server.url, name, &[&fixed, more]);
    (out, r)
}

/// The server's own count of requests per model name.
fn served(server: &Server) -> Value {
    server.stats.snapshot(false)["models"].clone()
}

#[test]
fn round_robin_sends_each_adapter_its_share_and_reports_them_apart() {
    let server = Server::start(exact(5, 1));
    let (out, r) = lora_run(&server, "lora-rr", &["--lora", "a,b,c", "--requests", "30"]);
    // (The API probe before the run names the base model.)
    let seen = served(&server);
    for name in ["a", "b", "c"] {
        assert_eq!(seen[name], 10, "{seen}");
    }
    for q in records(&out) {
        let id = q["id"].as_u64().unwrap();
        assert_eq!(q["adapter"], ["a", "b", "c"][(id % 3) as usize], "{q}");
    }
    let adapters = r["adapters"].as_object().unwrap();
    assert_eq!(adapters.len(), 3);
    let mut rate = 0.0;
    for (name, a) in adapters {
        assert_eq!(a["requests"], 10, "{name}");
        assert_eq!(a["output_tokens"], 100, "{name}");
        // Its TTFT summary is its own ten requests', none under the
        // server's 5 ms (no upper bound: a loaded machine delays reads).
        assert_eq!(a["ttft_ms"]["count"], 10, "{name}");
        let ttft = a["ttft_ms"]["p50"].as_f64().unwrap();
        assert!(ttft >= 5.0, "{name}: {ttft}");
        rate += a["output_tokens_per_s"].as_f64().unwrap();
    }
    let total = r["throughput"]["output_tokens_per_s"].as_f64().unwrap();
    assert!((rate / total - 1.0).abs() < 1e-9, "{rate} vs {total}");
    assert_eq!(r["config"]["lora"]["assignment"], "round-robin");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("Adapters (--lora, round-robin)"),
        "the report shows them"
    );
}

#[test]
fn weights_set_the_shares_and_the_summary_shows_each_adapter() {
    let server = Server::start(exact(2, 1));
    let out = run_dir("lora-weights");
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &server.url,
            "--no-metrics",
            "--no-history",
        ])
        .args(["--lora", "big,small", "--lora-assignment", "weights:3,1"])
        .args([
            "--requests",
            "200",
            "--concurrency",
            "8",
            "--output-tokens",
            "2",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let seen = served(&server);
    let big = seen["big"].as_u64().unwrap();
    assert_eq!(big + seen["small"].as_u64().unwrap(), 200, "{seen}");
    // 150 expected; ±4.5 standard deviations of a binomial(200, 0.75).
    assert!((122..=178).contains(&big), "{seen}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Adapters (--lora, weights:3,1)"), "{text}");
    assert!(text.contains("big") && text.contains("small"), "{text}");
}

#[test]
fn compare_judges_each_adapter_apart() {
    let server = Server::start(exact(5, 1));
    let args = ["--lora", "x,y", "--requests", "40", "--seed", "3"];
    let (a, _) = lora_run(&server, "lora-compare-a", &args);
    let (b, _) = lora_run(&server, "lora-compare-b", &args);
    let o = tokenscope()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .arg("--json")
        .output()
        .unwrap();
    assert_ok(&o);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let adapters = doc["adapters"].as_object().unwrap();
    assert_eq!(
        adapters.keys().collect::<Vec<_>>(),
        ["adapter x", "adapter y"]
    );
    for (name, changes) in adapters {
        let metrics: Vec<_> = changes
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["metric"].as_str().unwrap())
            .collect();
        assert!(metrics.contains(&"ttft_p50"), "{name}: {metrics:?}");
    }
}

#[test]
fn bad_adapter_flags_are_refused_with_the_reason() {
    let server = Server::start(exact(2, 1));
    let cases: [(&[&str], &str); 2] = [
        (
            &["--lora", "a,b", "--lora-assignment", "weights:1"],
            "1 weights for 2 adapters",
        ),
        (&["--lora", "a", "--lora-assignment", "weights:x"], "`x`"),
    ];
    for (args, said) in cases {
        let err = refused(&server.url, args);
        assert!(err.contains(said), "{err}");
    }
}
