//! The pooling APIs — OpenAI embeddings and rerank — against the built-in
//! servers: every request carries its batch and gets every vector or score
//! back, the prompt tokens are the server's exact count, no TTFT is
//! pretended, latency is the server's own, and the rates are items/s and
//! input tokens/s.

mod common;

use common::*;
use serde_json::Value;
use tokenscope_sim::exact::ExactConfig;
use tokenscope_sim::faults::Faults;

/// 12 requests of `batch` inputs of 32 tokens at 3 streams over `api`.
fn run(server: &Server, api: &str, batch: &str, more: &[&str]) -> (Value, Vec<Value>) {
    let fixed = [
        "--api",
        api,
        "--no-metrics",
        "--batch-size",
        batch,
        "--concurrency",
        "3",
        "--requests",
        "12",
        "--input-tokens",
        "32",
    ];
    let (_, r, recs) = bench_ok(
        &server.url,
        &format!("pooling-{api}-{batch}"),
        &[&fixed, more],
    );
    (r, recs)
}

#[test]
fn embeddings_and_rerank_carry_their_batch_and_are_counted_exactly() {
    let server = Server::start(exact(40, 10));
    // (API, batch, items back, prompt tokens the server reads per request).
    // Rerank reads the query once per document.
    let cases = [
        ("openai-embeddings", 4, 4, 4 * 32),
        ("rerank", 3, 3, 3 * (32 + 32)),
    ];
    for (api, batch, items, prompt) in cases {
        let (r, recs) = run(&server, api, &batch.to_string(), &[]);
        assert_eq!(r["counts"]["failed"], 0, "{api}: {}", r["counts"]);
        assert_eq!(r["target"]["api"], api);
        for q in &recs {
            assert_eq!(q["items"], items, "{api}: {q}");
            assert_eq!(q["input_tokens"], prompt, "{api}: {q}");
            assert_eq!(q["input_token_source"], "server_usage", "{api}");
            // The client's own count of what it sent: the prompt and its inputs.
            let sent = (batch + usize::from(api == "rerank")) * 32;
            assert_eq!(q["requested_input_tokens"], sent, "{api}: {q}");
            assert_eq!(q["output_tokens"], 0, "{api}: {q}");
            assert!(
                q.get("first_token_at_us").is_none_or(Value::is_null),
                "{api}: no TTFT"
            );
        }
        assert!(
            r["latency"].get("ttft_ms").is_none_or(Value::is_null),
            "{api}"
        );
        // The server answers 40 ms after the request arrives, and the
        // answer's end is read within a millisecond of its send (the
        // server's own stamp: no bound a loaded machine could break).
        let e2e = stat(&r, "latency.e2e_ms.p50");
        assert!(e2e >= 40.0, "{api}: E2E p50 {e2e}");
        read_within_a_millisecond(
            read_delays_ms(&r, &recs, "done_at_us", "last_sent_mono_us"),
            api,
        );
        let t = &r["throughput"];
        let rps = t["requests_per_s"].as_f64().unwrap();
        let items_per_s = t["items_per_s"].as_f64().unwrap();
        assert!(
            (items_per_s / (rps * items as f64) - 1.0).abs() < 1e-9,
            "{t}"
        );
        let input = t["input_tokens_per_s"].as_f64().unwrap();
        assert!((input / (rps * prompt as f64) - 1.0).abs() < 1e-9, "{t}");
        assert_eq!(r["tokens"]["items_total"], 12 * items, "{api}");
    }
}

#[test]
fn the_summary_shows_items_and_input_tokens_per_second() {
    let server = Server::start(exact(5, 1));
    let out = run_dir("pooling-summary");
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &server.url,
            "--api",
            "rerank",
            "--no-metrics",
        ])
        .args(["--requests", "4", "--batch-size", "2", "--no-history"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("items/s"), "{text}");
    assert!(text.contains("input tokens/s"), "{text}");
}

#[test]
fn the_built_in_engine_embeds_and_reranks() {
    for (api, items) in [("openai-embeddings", 8), ("rerank", 8)] {
        let args = [
            "--api",
            api,
            "--requests",
            "6",
            "--concurrency",
            "3",
            "--batch-size",
            "8",
            "--input-tokens",
            "256",
        ];
        let r = bench_builtin(&format!("pooling-{api}-engine"), &args);
        assert_eq!(r["counts"]["succeeded"], 6, "{api}: {}", r["counts"]);
        assert_eq!(r["tokens"]["items_total"], 6 * items, "{api}");
        assert_eq!(r["tokens"]["output_total"], 0, "{api}");
        // Prefill of 8 × 256 tokens on the modelled H100: milliseconds, not zero.
        let e2e = stat(&r, "latency.e2e_ms.p50");
        assert!(e2e > 1.0, "{api}: E2E {e2e}");
    }
}

#[test]
fn a_batch_for_a_generating_api_and_sessions_for_a_pooling_one_are_refused() {
    let server = Server::start(exact(5, 1));
    let cases: [&[&str]; 2] = [
        &["--api", "openai-chat", "--batch-size", "4"],
        &["--api", "openai-embeddings", "--multi-turn"],
    ];
    for args in cases {
        let err = refused(&server.url, args);
        assert!(
            err.contains("--batch-size") || err.contains("--multi-turn"),
            "{err}"
        );
    }
}

#[test]
fn refused_and_broken_pooling_answers_are_classified_and_none_is_lost() {
    let faulty = Server::start(ExactConfig {
        faults: Faults {
            http_503: 0.3,
            malformed: 0.3,
            ..Faults::default()
        },
        seed: 3,
        ..exact(5, 1)
    });
    for api in ["openai-embeddings", "rerank"] {
        let out = run_dir(&format!("pooling-{api}-faults"));
        let args = [
            "--api",
            api,
            "--no-metrics",
            "--requests",
            "30",
            "--concurrency",
            "3",
        ];
        let o = bench(&faulty.url, &out, &args);
        assert!(o.status.code().is_some(), "{api}: no crash");
        let r = results(&out);
        assert_eq!(records(&out).len(), 30, "{api}: every request recorded");
        let errors = &r["counts"]["errors"];
        assert!(
            errors["http_503"].as_u64().unwrap_or(0) > 0,
            "{api}: {errors}"
        );
        assert!(
            errors["malformed"].as_u64().unwrap_or(0) > 0,
            "{api}: {errors}"
        );
        assert!(r["counts"]["succeeded"].as_u64().unwrap() > 0, "{api}");
    }
}
