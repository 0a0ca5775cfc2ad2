//! Each request names itself to the server (`X-Request-Id`, and with
//! `--trace-context` a W3C `traceparent`), its record keeps the same, and
//! with `--otlp-endpoint` a client span per request reaches a collector
//! under the ids the request sent: checked against the exact server's own
//! log of what it received, and an OTLP receiver decoding with the
//! protocol's own definitions.

mod common;

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use tokenscope_load::request_ids::TraceParent;

type Spans = std::sync::Arc<std::sync::Mutex<Vec<Span>>>;

/// An OTLP/HTTP collector keeping every span pushed to `/v1/traces`
/// (metrics pushes answered and left).
fn span_receiver() -> (String, Spans) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let spans: Spans = Default::default();
    let got = spans.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(500) {
            let Ok(mut s) = stream else { continue };
            let Some((first, body)) = read_request(&s) else {
                continue;
            };
            if first.starts_with("POST /v1/traces") {
                let decoded = <ExportTraceServiceRequest as prost::Message>::decode(&body[..])
                    .expect("a protobuf ExportTraceServiceRequest");
                let mut kept = got.lock().unwrap();
                for rs in decoded.resource_spans {
                    for ss in rs.scope_spans {
                        kept.extend(ss.spans);
                    }
                }
            }
            let _ = s.write_all(http("200 OK", "application/x-protobuf", "").as_bytes());
        }
    });
    (url, spans)
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a AnyValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_request_names_itself_and_the_server_and_the_collector_see_the_same_ids() {
    let server = Server::start(exact(20, 2));
    let (collector, spans) = span_receiver();
    let before = std::time::SystemTime::now();
    let (_, r, recs) = bench_ok(
        &server.url,
        "request-ids",
        &[
            &EXACT_CHAT,
            &[
                "--requests",
                "24",
                "--concurrency",
                "4",
                "--output-tokens",
                "8",
                "--trace-context",
                "--otlp-endpoint",
                &collector,
            ],
        ],
    );
    assert_eq!(r["counts"]["succeeded"], 24);
    let seen = server.stats.ids.kept();
    let by_id: HashMap<String, Option<String>> = seen
        .iter()
        .map(|s| {
            (
                s.request_id.clone().expect("every request sent an id"),
                s.traceparent.clone(),
            )
        })
        .collect();
    let measured: Vec<&Value> = recs.iter().filter(|r| r["warmup"] != true).collect();
    assert_eq!(measured.len(), 24);
    let mut trace_ids = std::collections::HashSet::new();
    for rec in &measured {
        let id = rec["request_id"].as_str().expect("the record keeps its id");
        assert!(
            id.starts_with("ts-") && id.ends_with(&format!("-{}", rec["id"])),
            "{id}"
        );
        let sent = rec["traceparent"].as_str().expect("and its traceparent");
        assert_eq!(
            by_id.get(id).cloned().flatten().as_deref(),
            Some(sent),
            "the server received {id} with the same traceparent"
        );
        let p = TraceParent::parse(sent).expect("a W3C traceparent");
        assert!(p.sampled);
        trace_ids.insert(p.trace_id);
    }
    assert_eq!(trace_ids.len(), 24, "a trace a request");

    // A client span per request, under the ids its request sent.
    let spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 24, "every request sampled by default");
    let by_trace: HashMap<String, &Span> = spans.iter().map(|s| (hex(&s.trace_id), s)).collect();
    for rec in &measured {
        let p = rec["traceparent"].as_str().unwrap();
        let parts: Vec<&str> = p.split('-').collect();
        let span = by_trace.get(parts[1]).expect("a span for each traceparent");
        assert_eq!(hex(&span.span_id), parts[2]);
        assert_eq!(span.name, "chat tokenscope-exact");
        assert_eq!(span.kind, 3, "SPAN_KIND_CLIENT");
        assert_eq!(
            attr(span, "gen_ai.usage.output_tokens"),
            Some(&AnyValue::IntValue(rec["output_tokens"].as_i64().unwrap()))
        );
        assert_eq!(
            attr(span, "tokenscope.request_id"),
            Some(&AnyValue::StringValue(
                rec["request_id"].as_str().unwrap().into()
            ))
        );
        // On the wall clock, within the run, its length the record's.
        let unix_ns = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        };
        assert!(
            (unix_ns(before)..unix_ns(std::time::SystemTime::now()))
                .contains(&span.start_time_unix_nano),
            "the span starts during the run"
        );
        let span_us = (span.end_time_unix_nano - span.start_time_unix_nano) as f64 / 1e3;
        let rec_us =
            (rec["done_at_us"].as_u64().unwrap() - rec["sent_at_us"].as_u64().unwrap()) as f64;
        assert!((span_us - rec_us).abs() <= 1.0, "{span_us} vs {rec_us}");
        let first = span
            .events
            .iter()
            .find(|e| e.name == "gen_ai.first_token")
            .expect("the first token");
        let ttft_us = (first.time_unix_nano - span.start_time_unix_nano) as f64 / 1e3;
        let rec_ttft = (rec["first_token_at_us"].as_u64().unwrap()
            - rec["sent_at_us"].as_u64().unwrap()) as f64;
        assert!((ttft_us - rec_ttft).abs() <= 1.0, "{ttft_us} vs {rec_ttft}");
    }
}

#[test]
fn a_users_own_id_header_or_none_is_sent_instead() {
    let server = Server::start(exact(2, 1));
    let (_, _, recs) = bench_ok(
        &server.url,
        "request-ids-none",
        &[
            &EXACT_CHAT,
            &["--requests", "3", "--request-id-header", "none"],
        ],
    );
    assert!(recs
        .iter()
        .all(|r| r.get("request_id").is_none() && r.get("traceparent").is_none()));
    assert!(server
        .stats
        .ids
        .kept()
        .iter()
        .all(|s| s.request_id.is_none()));

    let server = Server::start(exact(2, 1));
    let (_, _, recs) = bench_ok(
        &server.url,
        "request-ids-own",
        &[
            &EXACT_CHAT,
            &["--requests", "3", "--header", "X-Request-Id: mine"],
        ],
    );
    assert!(
        recs.iter().all(|r| r.get("request_id").is_none()),
        "the user's id, not ours"
    );
    let seen = server.stats.ids.kept();
    assert!(!seen.is_empty() && seen.iter().all(|s| s.request_id.as_deref() == Some("mine")));
}

#[test]
fn a_sample_of_the_spans_is_sent_and_bad_flags_are_refused() {
    let server = Server::start(exact(2, 1));
    let (collector, spans) = span_receiver();
    let (_, _, recs) = bench_ok(
        &server.url,
        "request-ids-sample",
        &[
            &EXACT_CHAT,
            &[
                "--requests",
                "60",
                "--concurrency",
                "6",
                "--otlp-endpoint",
                &collector,
                "--otlp-span-sample",
                "0.25",
            ],
        ],
    );
    let spans = spans.lock().unwrap().clone();
    let n = spans.len();
    assert!((3..=30).contains(&n), "about a quarter of 60: {n}");
    // Without --trace-context the spans still carry the ids the record
    // would have sent: the trace id's first half is the run's number.
    assert!(recs.iter().all(|r| r.get("traceparent").is_none()));
    let run = recs[0]["request_id"].as_str().unwrap()[3..19].to_string();
    for s in &spans {
        assert_eq!(hex(&s.trace_id)[..16], run, "the run's prefix");
        let id = attr(s, "tokenscope.request_id");
        assert!(
            matches!(id, Some(AnyValue::StringValue(v)) if v.starts_with(&format!("ts-{run}-")))
        );
    }

    for (flags, says) in [
        (
            vec!["--request-id-header", "bad name"],
            "not a valid header name",
        ),
        (vec!["--request-id-header", "Content-Length"], "sets itself"),
        (vec!["--otlp-span-sample", "0.5"], "--otlp-endpoint"),
        (
            vec!["--otlp-endpoint", &collector, "--otlp-span-sample", "1.5"],
            "not a probability",
        ),
        (
            vec!["--otlp-endpoint", &collector, "--otlp-span-sample", "NaN"],
            "not a probability",
        ),
    ] {
        let why = refused(&server.url, &[&EXACT_CHAT[..], &flags].concat());
        assert!(why.contains(says), "{flags:?}: {why}");
    }
}
