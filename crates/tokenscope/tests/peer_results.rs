//! The peers' results read back by `report`, `compare` and `history
//! import`: files made by GuideLLM 0.8.1, AIPerf 0.13.0 and `vllm bench
//! serve` 0.34.0 themselves against the exact server (TTFT 50 ms, 10 ms a
//! token, a tenth of requests answered 500; tests/fixtures/peers, made by
//! scripts/peers/refresh.py), each figure checked against the peer's own
//! summary; and the hostile files a folder of results can hold.

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A fixture copied into a fresh directory (its conversion is written beside it).
fn fixture(dir: &Path, name: &str, as_name: &str) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/peers")
        .join(name);
    std::fs::create_dir_all(dir).unwrap();
    let to = dir.join(as_name);
    std::fs::copy(from, &to).unwrap();
    to
}

fn peer_doc(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `report --format json`-free: the terminal report must succeed, then the
/// converted run's results.json is read.
fn read_as_run(path: &Path) -> Value {
    let o = tokenscope()
        .args(["report", "--format", "terminal"])
        .arg(path)
        .output()
        .unwrap();
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains("Latency (ms)"), "{text}");
    let dir = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".tokenscope"))
        .expect("the converted run directory");
    results(&dir)
}

fn within(ours: f64, theirs: f64, pct: f64, what: &str) {
    assert!(
        (ours - theirs).abs() <= theirs.abs() * pct / 100.0,
        "{what}: ours {ours}, the peer's {theirs}"
    );
}

#[test]
fn each_peers_own_file_reads_as_a_run_with_the_peers_figures() {
    let root = run_dir("peer-reads");
    // vLLM with --save-detailed: every figure recomputed; the median within the histograms' resolution.
    let v = fixture(
        &root.join("v"),
        "vllm-0.34.0-result-detailed.json",
        "result.json",
    );
    let (r, doc) = (read_as_run(&v), peer_doc(&v));
    assert_eq!(r["counts"]["succeeded"], doc["completed"]);
    assert_eq!(r["counts"]["failed"], doc["failed"]);
    within(
        stat(&r, "latency.ttft_ms.p50"),
        doc["median_ttft_ms"].as_f64().unwrap(),
        1.0,
        "vLLM TTFT p50",
    );
    within(
        stat(&r, "latency.e2e_ms.mean"),
        doc["mean_e2el_ms"].as_f64().unwrap(),
        1.0,
        "vLLM E2E mean",
    );
    assert_eq!(r["tokens"]["output_total"], doc["total_output_tokens"]);

    // vLLM without --save-detailed: E2E and the rates, TTFT said to be unmeasured.
    let v = fixture(&root.join("vs"), "vllm-0.34.0-result.json", "result.json");
    let (r, doc) = (read_as_run(&v), peer_doc(&v));
    assert!(
        r["latency"]["ttft_ms"].is_null(),
        "no per-request TTFT to recompute"
    );
    within(
        stat(&r, "throughput.output_tokens_per_s"),
        doc["output_throughput"].as_f64().unwrap(),
        1.0,
        "over vLLM's duration",
    );
    assert!(r["config"]["not_measured"]["ttft"].is_string());
    // No send times: the mean in flight by Little's law, the peak a bound.
    let busy: f64 = doc["latencies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .sum();
    within(
        stat(&r, "throughput.concurrency.mean"),
        busy / doc["duration"].as_f64().unwrap(),
        0.5,
        "summed latency over the duration",
    );
    assert!(r["throughput"]["concurrency"]["max_resolution_ms"].is_number());

    // An older vLLM's --save-detailed, without start_times, and Python's
    // bare NaN in its summary: the requests' own times read, the rates over
    // vLLM's duration.
    let v = fixture(
        &root.join("vo"),
        "vllm-0.34.0-result-detailed.json",
        "result.json",
    );
    let mut old = peer_doc(&v);
    old.as_object_mut().unwrap().remove("start_times");
    let text = old.to_string().replace(
        &format!("\"std_itl_ms\":{}", old["std_itl_ms"]),
        "\"std_itl_ms\":NaN",
    );
    assert!(text.contains(":NaN"));
    std::fs::write(&v, text).unwrap();
    let r = read_as_run(&v);
    within(
        stat(&r, "latency.ttft_ms.p50"),
        old["median_ttft_ms"].as_f64().unwrap(),
        1.0,
        "an older vLLM's TTFT p50",
    );
    within(
        stat(&r, "throughput.output_tokens_per_s"),
        old["output_throughput"].as_f64().unwrap(),
        1.0,
        "over vLLM's duration",
    );
    assert!(r["diagnosis"].to_string().contains("no start_times"));

    // GuideLLM: its TTFT median is a nearest rank, tokenscope's a histogram's.
    let g = fixture(
        &root.join("g"),
        "guidellm-0.8.1-benchmarks.json",
        "benchmarks.json",
    );
    let (r, doc) = (read_as_run(&g), peer_doc(&g));
    let m = &doc["benchmarks"][0]["metrics"];
    assert_eq!(r["counts"]["succeeded"], m["request_totals"]["successful"]);
    within(
        stat(&r, "latency.ttft_ms.p50"),
        m["time_to_first_token_ms"]["successful"]["median"]
            .as_f64()
            .unwrap(),
        2.0,
        "GuideLLM TTFT median",
    );
    within(
        stat(&r, "latency.tpot_ms.mean"),
        m["inter_token_latency_ms"]["successful"]["mean"]
            .as_f64()
            .unwrap(),
        1.0,
        "GuideLLM's ITL is tokenscope's TPOT",
    );

    // AIPerf: the directory holding its two files.
    let a = root.join("a");
    fixture(
        &a,
        "aiperf-0.13.0-profile_export_aiperf.json",
        "profile_export_aiperf.json",
    );
    fixture(
        &a,
        "aiperf-0.13.0-profile_export.jsonl",
        "profile_export.jsonl",
    );
    let o = tokenscope()
        .args(["report", "--format", "terminal"])
        .arg(&a)
        .output()
        .unwrap();
    assert_ok(&o);
    let r = results(&a.join("profile_export_aiperf.tokenscope"));
    let doc = peer_doc(&a.join("profile_export_aiperf.json"));
    within(
        stat(&r, "latency.ttft_ms.p50"),
        doc["time_to_first_token"]["p50"].as_f64().unwrap(),
        2.0,
        "AIPerf TTFT p50",
    );
    within(
        stat(&r, "latency.tpot_ms.mean"),
        doc["inter_token_latency"]["avg"].as_f64().unwrap(),
        2.0,
        "AIPerf's ITL is a TPOT",
    );
    assert_eq!(r["target"]["model"], "tokenscope-exact");
}

#[test]
fn compare_sets_a_peers_run_beside_a_tokenscope_run_and_names_what_it_cannot_judge() {
    let server = Server::start(exact(50, 10));
    let root = run_dir("peer-compare");
    let ours = root.join("ours");
    assert_ok(&bench(
        &server.url,
        &ours,
        &exact_chat(&[
            "--concurrency",
            "2",
            "--requests",
            "12",
            "--output-tokens",
            "16",
        ]),
    ));
    let detailed = fixture(&root, "vllm-0.34.0-result-detailed.json", "detailed.json");
    let o = tokenscope()
        .arg("compare")
        .arg(&ours)
        .arg(&detailed)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(
        o.status.code(),
        Some(0),
        "unlike runs are never a regression: {text}"
    );
    assert!(text.contains("source differs"), "{text}");
    assert!(
        text.contains("ttft_p50"),
        "TTFT judged from vLLM's requests: {text}"
    );

    let summary_only = fixture(&root, "vllm-0.34.0-result.json", "summary.json");
    let o = tokenscope()
        .args(["compare", "--json"])
        .arg(&ours)
        .arg(&summary_only)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let metrics: Vec<&str> = doc["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["metric"].as_str().unwrap())
        .collect();
    assert!(
        metrics
            .iter()
            .all(|m| !m.starts_with("ttft") && !m.ends_with("_per_s")),
        "{metrics:?}"
    );
    assert!(metrics.contains(&"e2e_p50"), "{metrics:?}");
    let unlike = doc["unlike"].to_string();
    assert!(
        unlike.contains("not compared: ttft (B: vLLM's result saved without --save-detailed"),
        "{unlike}"
    );
}

#[test]
fn history_import_takes_each_peers_file() {
    let root = run_dir("peer-history");
    let db = root.join("h.db");
    let files = [
        fixture(
            &root.join("v"),
            "vllm-0.34.0-result-detailed.json",
            "result.json",
        ),
        fixture(
            &root.join("g"),
            "guidellm-0.8.1-benchmarks.json",
            "benchmarks.json",
        ),
        fixture(
            &root.join("a"),
            "aiperf-0.13.0-profile_export.jsonl",
            "profile_export.jsonl",
        ),
    ];
    let o = tokenscope()
        .args(["history", "import"])
        .args(&files)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("imported 3, already there 0, failed 0"),
        "{text}"
    );
    let o = tokenscope()
        .args(["history", "list", "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 3, "{list}");
}

/// `report` on FILE fails with exit 2 and a one-line message holding `says`.
fn refused(file: &Path, says: &str) {
    let o = tokenscope()
        .args(["report", "--format", "terminal"])
        .arg(file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{}: {err}", file.display());
    assert!(
        err.contains(says),
        "{}: wanted {says:?} in {err}",
        file.display()
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn hostile_peer_files_are_refused_in_one_line_and_nothing_is_written() {
    let root = run_dir("peer-hostile");
    std::fs::create_dir_all(&root).unwrap();
    let put = |name: &str, text: &str| {
        let p = root.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // The wrong shape with the right markers.
    refused(
        &put(
            "g1.json",
            r#"{"benchmarks": 5, "x": "generative_benchmark"}"#,
        ),
        "not a GuideLLM report (invalid type: integer `5`, expected a sequence",
    );
    // Lists of different lengths, a negative count, a NaN-like string, truncated JSON.
    let v = r#"{"num_prompts": 2, "endpoint_type": "openai-chat", "ttfts": [0.1, 0.1], "itls": [[], []], "latencies": [0.2], "input_lens": [1, 1], "output_lens": [1, 1], "errors": ["", ""]}"#;
    refused(
        &put("v1.json", v),
        "latencies holds 1 entries where ttfts holds 2",
    );
    let v = v
        .replace("[0.2]", "[0.2, 0.2]")
        .replace("[1, 1], \"errors", "[1, -3], \"errors");
    refused(
        &put("v2.json", &v),
        "request 1: output_lens: -3 is not a count",
    );
    refused(
        &put("v3.json", &v.replace("[0.1, 0.1]", "[0.1, \"NaN\"]")),
        "not a vLLM result (invalid type: string \"NaN\"",
    );
    // Python's bare NaN is no value: a TTFT it stands for is missing, said so.
    refused(
        &put("v3b.json", &v.replace("[0.1, 0.1]", "[0.1, NaN]")),
        "not a vLLM result (invalid type: null",
    );
    refused(
        &put("v4.json", r#"{"num_prompts": 2, "endpoint_type": "openai-"#),
        "truncated JSON",
    );
    refused(
        &put(
            "v5.json",
            r#"{"num_prompts": 2, "endpoint_type": "openai-chat"}"#,
        ),
        "no per-request data",
    );
    // AIPerf: a record whose end comes before its start, and a line that is not JSON.
    let a = root.join("a");
    std::fs::create_dir_all(&a).unwrap();
    let line = r#"{"metadata":{"request_start_ns":2000,"request_end_ns":1000,"benchmark_phase":"profiling"},"metrics":{},"error":null}"#;
    std::fs::write(a.join("profile_export.jsonl"), format!("{line}\n")).unwrap();
    refused(&a, "request_end_ns before request_start_ns");
    std::fs::write(a.join("profile_export.jsonl"), "{\"metadata\": \n").unwrap();
    refused(
        &a.join("profile_export.jsonl"),
        "profile_export.jsonl:1: truncated JSON",
    );
    // GuideLLM: our own export keeps no samples; two benchmarks need a #K.
    let g = fixture(
        &root.join("g"),
        "guidellm-0.8.1-benchmarks.json",
        "benchmarks.json",
    );
    let mut doc = peer_doc(&g);
    doc["benchmarks"] = Value::Array(vec![
        doc["benchmarks"][0].clone(),
        doc["benchmarks"][0].clone(),
    ]);
    std::fs::write(&g, doc.to_string()).unwrap();
    refused(&g, "holds 2 benchmarks (one per strategy): name one as");
    refused(
        &PathBuf::from(format!("{}#3", g.display())),
        "#3: it holds benchmarks 1 to 2",
    );
    let o = tokenscope()
        .args(["report", "--format", "terminal"])
        .arg(format!("{}#2", g.display()))
        .output()
        .unwrap();
    assert_ok(&o);
    doc["benchmarks"][0]["requests"] =
        serde_json::json!({"successful": [], "errored": [], "incomplete": [], "total": null});
    std::fs::write(
        &g,
        serde_json::json!({"benchmarks": [doc["benchmarks"][0].clone()]}).to_string(),
    )
    .unwrap();
    refused(&g, "kept no per-request samples");
    // A count past any u64, and an endless AIPerf line (sparse: cheap).
    let g2 = fixture(
        &root.join("g2"),
        "guidellm-0.8.1-benchmarks.json",
        "benchmarks.json",
    );
    let mut doc = peer_doc(&g2);
    doc["benchmarks"][0]["requests"]["successful"][0]["output_tokens"] = serde_json::json!(1e300);
    std::fs::write(&g2, doc.to_string()).unwrap();
    refused(&g2, "is not a count");
    let endless = root.join("e").join("profile_export.jsonl");
    std::fs::create_dir_all(endless.parent().unwrap()).unwrap();
    let f = std::fs::File::create(&endless).unwrap();
    std::io::Write::write_all(&mut &f, b"{\"metadata\": \"").unwrap();
    f.set_len(200 << 20).unwrap();
    refused(&endless, "profile_export.jsonl:1: a line past 64 MiB");
    // A JSON file that is none of the peers' results says what it reads.
    refused(
        &put("other.json", r#"{"results": []}"#),
        "not a result tokenscope reads",
    );
    // A file past the size a peer's result may have: refused unread (sparse, so cheap).
    let huge = root.join("huge.json");
    let f = std::fs::File::create(&huge).unwrap();
    std::io::Write::write_all(&mut &f, br#"{"endpoint_type": "openai-chat", "#).unwrap();
    f.set_len(3 << 30).unwrap();
    refused(&huge, "larger than 256 MiB");
    // Nothing was converted for a refused file.
    for name in ["g1", "v1", "v2", "v3", "v3b", "v4", "v5", "other", "huge"] {
        assert!(!root.join(format!("{name}.tokenscope")).exists(), "{name}");
    }
}
