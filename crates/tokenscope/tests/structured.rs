//! Structured outputs (`--response-format`): every API asks for JSON in its
//! own field, every answer is checked, and a server that breaks a share of
//! its JSON answers (the exact server's `bad_json` fault, counted on its
//! side) reads exactly that share invalid, with a finding and the reason.

mod common;

use common::*;
use serde_json::Value;
use tokenscope_sim::exact::ExactConfig;
use tokenscope_sim::faults::Faults;

const APIS: [&str; 6] = [
    "openai-chat",
    "openai-completions",
    "openai-responses",
    "anthropic-messages",
    "tgi",
    "sglang",
];

fn schema_file() -> String {
    let schema = r#"{"type": "object", "required": ["answer"], "additionalProperties": false,
        "properties": {"answer": {"type": "string"}}}"#;
    write_file("answer-schema.json", schema)
        .display()
        .to_string()
}

#[test]
fn a_server_breaking_a_quarter_of_its_json_reads_exactly_that_in_every_api() {
    let schema = format!("schema:{}", schema_file());
    for api in APIS {
        for format in ["json", schema.as_str()] {
            let server = Server::start(ExactConfig {
                faults: Faults {
                    bad_json: 0.25,
                    ..Faults::default()
                },
                seed: 11,
                ..exact(2, 1)
            });
            let args = [
                "--api",
                api,
                "--no-metrics",
                "--requests",
                "40",
                "--concurrency",
                "4",
                "--output-tokens",
                "12",
                "--response-format",
                format,
            ];
            let (_, r, recs) = bench_ok(&server.url, &format!("structured-{api}"), &[&args]);
            let broken = server.stats.snapshot(false)["broken_json"]
                .as_u64()
                .unwrap();
            assert!(broken > 0, "{api}: the fault drew none");
            let s = &r["structured_output"];
            assert_eq!(s["checked"], 40, "{api} {format}: {s}");
            assert_eq!(s["valid"], 40 - broken, "{api} {format}: {s}");
            let invalid: Vec<&Value> = recs.iter().filter(|q| q["format_valid"] == false).collect();
            assert_eq!(invalid.len() as u64, broken, "{api} {format}");
            assert!(invalid
                .iter()
                .all(|q| q["format_error"].as_str().unwrap().starts_with("not JSON")));
            assert!(
                has_rule(&r, "invalid_structured_output"),
                "{api}: {:?}",
                rules(&r)
            );
            assert_eq!(
                r["config"]["response_format"]
                    .as_str()
                    .unwrap()
                    .split(':')
                    .next(),
                format.split(':').next()
            );
        }
    }
}

#[test]
fn whole_answers_and_the_built_in_engine_are_checked_too() {
    let server = Server::start(exact(2, 1));
    let args = [
        "--no-metrics",
        "--requests",
        "10",
        "--no-stream",
        "--response-format",
        "json",
    ];
    let (_, r, _) = bench_ok(&server.url, "structured-whole", &[&args]);
    assert_eq!(
        r["structured_output"]["valid"], 10,
        "{}",
        r["structured_output"]
    );
    assert!(!has_rule(&r, "invalid_structured_output"));
    let args = [
        "--requests",
        "8",
        "--output-tokens",
        "8",
        "--response-format",
        "json",
    ];
    let r = bench_builtin("structured-engine", &args);
    assert_eq!(
        r["structured_output"]["valid"], 8,
        "{}",
        r["structured_output"]
    );
    let (lo, hi) = (
        r["structured_output"]["valid_share_ci95"][0]
            .as_f64()
            .unwrap(),
        r["structured_output"]["valid_share_ci95"][1]
            .as_f64()
            .unwrap(),
    );
    assert!(
        lo > 0.6 && hi == 1.0,
        "Wilson interval of 8 of 8: {lo}..{hi}"
    );
}

#[test]
fn an_api_without_a_field_for_it_and_a_bad_schema_are_refused() {
    let server = Server::start(exact(2, 1));
    let bad = write_file("not-a-schema.json", r#"{"type": 7}"#);
    let bad = format!("schema:{}", bad.display());
    let cases = [
        vec!["--api", "triton", "--response-format", "json"],
        vec!["--response-format", &bad],
        vec!["--response-format", "yaml"],
    ];
    for args in cases {
        let err = refused(&server.url, &args);
        assert!(err.contains("--response-format"), "{args:?}: {err}");
    }
}
