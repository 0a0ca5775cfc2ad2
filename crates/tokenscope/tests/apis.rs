//! The APIs past OpenAI's chat — OpenAI Responses, Anthropic Messages,
//! TGI's, SGLang's and Triton's native ones — against the built-in exact server
//! speaking each: every request succeeds,
//! counts are exact, the first token and the answer's start are read
//! within a millisecond of the server's own sends (the host's shared
//! clock), thinking is told apart, and broken streams are classified.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;
use tokenscope_sim::exact::{ExactConfig, ReasoningAs};
use tokenscope_sim::faults::Faults;

const APIS: [&str; 5] = [
    "openai-responses",
    "anthropic-messages",
    "tgi",
    "sglang",
    "triton",
];

/// `--api NAME`, and for Triton the per-response token counts asked for
/// (`return_num_output_tokens`), as its users ask them for a count.
fn api_args(api: &str) -> Vec<&str> {
    let mut args = vec!["--api", api];
    if api == "triton" {
        args.extend(["--extra-body", r#"{"return_num_output_tokens": true}"#]);
    }
    args
}

/// The APIs whose usage counts the thinking (the others show it only as
/// `<think>` text, or not at all).
fn counts_thinking(api: &str) -> bool {
    matches!(api, "openai-responses")
}

fn server(reasoning_tokens: u64, how: ReasoningAs) -> Server {
    Server::start(ExactConfig {
        reasoning_tokens,
        reasoning_as: how,
        ..exact(50, 10)
    })
}

/// 6 requests of 60 tokens at 2 streams over `api`; results and records.
fn run(server: &Server, api: &str, name: &str, more: &[&str]) -> (Value, Vec<Value>) {
    let fixed = [
        "--no-metrics",
        "--concurrency",
        "2",
        "--requests",
        "6",
        "--output-tokens",
        "60",
    ];
    let (_, r, recs) = bench_ok(&server.url, name, &[&api_args(api), &fixed, more]);
    (r, recs)
}

#[test]
fn every_api_is_timed_and_counted_exactly() {
    let plain = server(0, ReasoningAs::Field);
    for api in APIS {
        let (r, recs) = run(&plain, api, &format!("api-{api}"), &[]);
        assert_eq!(r["counts"]["failed"], 0, "{api}: {}", r["counts"]);
        assert_eq!(r["target"]["api"], api);
        for q in &recs {
            assert_eq!(q["output_tokens"], 60, "{api}: {q}");
            assert_eq!(q["output_token_source"], "server_usage", "{api}");
            if q["input_token_source"] == "server_usage" {
                assert_eq!(q["input_tokens"], q["requested_input_tokens"], "{api}: {q}");
            }
        }
        read_within_a_millisecond(
            read_delays_ms(&r, &recs, "first_token_at_us", "first_sent_mono_us"),
            api,
        );
        read_within_a_millisecond(
            read_delays_ms(&r, &recs, "done_at_us", "last_sent_mono_us"),
            api,
        );
        let tpot = stat(&r, "latency.tpot_ms.p50");
        assert!((9.0..15.0).contains(&tpot), "{api}: TPOT {tpot}");
        assert!(
            !has_rule(&r, "multi_token_chunks"),
            "{api}: {:?}",
            rules(&r)
        );
    }
}

#[test]
fn thinking_is_told_apart_in_every_api() {
    for (how, hidden) in [(ReasoningAs::Field, false), (ReasoningAs::Hidden, true)] {
        let thinking = server(40, how);
        // Without a thinking count in usage, thinking never streamed
        // cannot be told from the answer (docs/apis.md).
        let apis = APIS.iter().filter(|&&a| !hidden || counts_thinking(a));
        for &api in apis {
            let name = format!("api-{api}-thinking-{hidden}");
            let (r, recs) = run(&thinking, api, &name, &[]);
            assert_eq!(r["counts"]["failed"], 0, "{api}");
            for q in &recs {
                let n = q["reasoning_tokens"].as_u64().unwrap_or(0);
                match q["reasoning_token_source"].as_str() {
                    // TGI: the tokenizer's count of the thinking text, its
                    // `<think>` tags included.
                    Some("tokenizer") => assert!((40..=48).contains(&n), "{api}: {q}"),
                    _ => assert_eq!(n, 40, "{api}: {q}"),
                }
                let said = q["reasoning_hidden"].as_bool().unwrap_or(false);
                assert_eq!(said, hidden, "{api}: {q}");
            }
            read_within_a_millisecond(
                read_delays_ms(&r, &recs, "first_answer_at_us", "answer_sent_mono_us"),
                &name,
            );
            assert_eq!(has_rule(&r, "reasoning_hidden"), hidden, "{name}");
            let tpot = stat(&r, "latency.tpot_ms.p50");
            assert!((9.0..15.0).contains(&tpot), "{name}: TPOT {tpot}");
        }
    }
}

#[test]
fn whole_answers_are_counted_in_every_api() {
    let thinking = server(40, ReasoningAs::Field);
    for api in APIS {
        let (r, recs) = run(
            &thinking,
            api,
            &format!("api-{api}-whole"),
            &["--no-stream"],
        );
        assert_eq!(r["counts"]["failed"], 0, "{api}");
        for q in &recs {
            assert_eq!(q["output_tokens"], 60, "{api}: {q}");
            let n = q["reasoning_tokens"].as_u64().unwrap_or(0);
            assert!((40..=48).contains(&n), "{api}: {q}");
        }
        assert!(
            r["latency"].get("ttft_ms").is_none_or(Value::is_null),
            "{api}"
        );
    }
}

#[test]
fn broken_streams_are_classified_and_no_record_is_lost() {
    let faulty = Server::start(ExactConfig {
        faults: Faults {
            malformed: 0.3,
            disconnect: 0.3,
            ..Faults::default()
        },
        seed: 5,
        stall: Duration::from_millis(10),
        ..exact(5, 2)
    });
    for api in APIS {
        let out = run_dir(&format!("api-{api}-faults"));
        let args = [
            "--api",
            api,
            "--no-metrics",
            "--concurrency",
            "4",
            "--requests",
            "40",
            "--output-tokens",
            "20",
        ];
        let o = bench(&faulty.url, &out, &args);
        assert!(o.status.code().is_some(), "{api}: no crash");
        let r = results(&out);
        assert_eq!(records(&out).len(), 40, "{api}: every request recorded");
        let errors = &r["counts"]["errors"];
        assert!(
            errors["malformed"].as_u64().unwrap_or(0) > 0,
            "{api}: {errors}"
        );
        assert!(
            errors["stream"].as_u64().unwrap_or(0) > 0,
            "{api}: {errors}"
        );
        assert!(r["counts"]["succeeded"].as_u64().unwrap() > 0, "{api}");
    }
}

/// bench's built-in default target, the simulated engine, speaks them too.
#[test]
fn the_built_in_engine_answers_every_api() {
    for api in APIS {
        let fixed = [
            "--requests",
            "8",
            "--concurrency",
            "4",
            "--output-tokens",
            "16",
        ];
        let r = bench_builtin(
            &format!("api-{api}-engine"),
            &[&api_args(api)[..], &fixed].concat(),
        );
        assert_eq!(r["target"]["api"], api);
        assert_eq!(r["counts"]["succeeded"], 8, "{api}");
        assert_eq!(r["tokens"]["output_total"], 8 * 16, "{api}");
        assert_eq!(r["tokens"]["output_sources"]["server_usage"], 8, "{api}");
    }
}

/// Triton without per-response counts: the stream's clean end is the
/// answer's end, and the tokenizer counts the exact server's one-token
/// words exactly; a stream cut short is still a failure.
#[test]
fn triton_without_counts_ends_with_its_stream_and_is_counted_by_the_tokenizer() {
    let plain = server(0, ReasoningAs::Field);
    let out = run_dir("api-triton-no-counts");
    let args = [
        "--api",
        "triton",
        "--no-metrics",
        "--requests",
        "4",
        "--output-tokens",
        "30",
    ];
    assert_ok(&bench(&plain.url, &out, &args));
    let r = results(&out);
    assert_eq!(r["counts"]["failed"], 0, "{}", r["counts"]);
    for q in records(&out) {
        assert_eq!(q["output_tokens"], 30, "{q}");
        assert_eq!(q["output_token_source"], "tokenizer", "{q}");
    }
}
