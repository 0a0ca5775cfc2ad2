//! `--class`: traffic of several kinds in one run. Each request draws its
//! class; its priority goes in the body as vLLM's field; figures and SLO
//! verdicts come per class; and the built-in engine under vLLM's priority
//! policy serves the high class first when it is overloaded.

mod common;

use common::*;
use serde_json::Value;

/// A closed loop of 16 users on an engine of 4 sequences (a queue of
/// 12), half the requests in each of two classes given by `classes`.
fn overloaded(policy: &str, name: &str, classes: [&str; 2], extra: &[&str]) -> Value {
    let port = free_port();
    let _server = SimServe::start(
        port,
        &["--max-num-seqs", "4", "--scheduling-policy", policy],
    );
    let url = format!("http://127.0.0.1:{port}");
    let load = [
        "--requests",
        "64",
        "--concurrency",
        "16",
        "--input-tokens",
        "64",
        "--output-tokens",
        "24",
        "--ignore-eos",
        "--seed",
        "11",
        "--class",
        classes[0],
        "--class",
        classes[1],
    ];
    let (_, r, recs) = bench_ok(&url, name, &[&load, extra]);
    for rec in recs.iter().filter(|r| r["warmup"] != true) {
        assert!(rec["class"] == "hi" || rec["class"] == "lo", "{rec}");
    }
    r
}

const PRIORITIES: [&str; 2] = ["hi:0.5:priority=0", "lo:0.5:priority=10"];

fn ttft_p50(r: &Value, class: &str) -> f64 {
    r["classes"][class]["ttft_ms"]["p50"]
        .as_f64()
        .unwrap_or_else(|| panic!("{class}: {}", r["classes"]))
}

#[test]
fn the_high_class_waits_less_under_the_priority_policy_and_each_class_is_judged_apart() {
    let r = overloaded(
        "priority",
        "classes-priority",
        PRIORITIES,
        &["--slo", "ttft_p50=100s"],
    );
    let c = &r["classes"];
    let n = c["hi"]["requests"].as_u64().unwrap() + c["lo"]["requests"].as_u64().unwrap();
    assert_eq!(n, 64, "every request in one class: {c}");
    assert!(
        c["hi"]["requests"].as_u64().unwrap() >= 16,
        "about half: {c}"
    );
    let (hi, lo) = (ttft_p50(&r, "hi"), ttft_p50(&r, "lo"));
    assert!(
        hi < 0.7 * lo,
        "priority 0 served first: hi {hi} ms, lo {lo} ms"
    );
    // Each class under the run's SLO here; both met so no trade-off is claimed.
    assert_eq!(c["hi"]["slo"]["verdict"], "met", "{c}");
    assert!(!has_rule(&r, "class_slo_tradeoff"));
    assert_eq!(r["config"]["classes"][0]["priority"], 0);

    // First come, first served: the same mix waits alike (the control).
    // (vLLM refuses a priority it does not heed: the control sends none.)
    let f = overloaded("fcfs", "classes-fcfs", ["hi:0.5", "lo:0.5"], &[]);
    let (hi_f, lo_f) = (ttft_p50(&f, "hi"), ttft_p50(&f, "lo"));
    assert!(
        hi_f > 0.5 * lo_f && hi_f < 2.0 * lo_f,
        "no priority, no gap: hi {hi_f} ms, lo {lo_f} ms"
    );
}

#[test]
fn a_class_that_meets_its_slo_at_the_others_expense_is_found() {
    // The high class's SLO is one it meets; the low class's one it cannot.
    let classes = [
        "hi:0.5:priority=0:slo=ttft_p50=60s",
        "lo:0.5:priority=10:slo=ttft_p50=1ms",
    ];
    let r = overloaded("priority", "classes-tradeoff", classes, &[]);
    let c = &r["classes"];
    assert_eq!(c["hi"]["slo"]["verdict"], "met", "{c}");
    assert_eq!(c["lo"]["slo"]["verdict"], "not_met", "{c}");
    let f = r["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "class_slo_tradeoff")
        .unwrap_or_else(|| panic!("{:?}", rules(&r)));
    assert_eq!(f["evidence"]["met"], serde_json::json!(["hi"]));
    assert_eq!(f["evidence"]["not_met"], serde_json::json!(["lo"]));
}

#[test]
fn a_priority_the_engine_would_not_heed_is_refused_as_vllm_does() {
    let port = free_port();
    let _server = SimServe::start(port, &[]);
    let url = format!("http://127.0.0.1:{port}");
    let out = run_dir("classes-refused");
    let o = bench(
        &url,
        &out,
        &["--requests", "4", "--class", "hi:1:priority=1"],
    );
    assert_eq!(o.status.code(), Some(4), "every request refused");
    let r = results(&out);
    assert_eq!(r["counts"]["errors"]["http_400"], 4, "{}", r["counts"]);
    let recs = records(&out);
    assert!(recs[0]["error"]
        .as_str()
        .unwrap()
        .contains("Priority scheduling is not enabled"));
}

#[test]
fn the_priority_goes_in_the_body_and_bad_classes_are_refused() {
    let server = Server::start(tokenscope_sim::exact::ExactConfig {
        keep_bodies: 64,
        ..exact(2, 1)
    });
    let (_, _, recs) = bench_ok(
        &server.url,
        "classes-body",
        &[
            &EXACT_CHAT,
            &[
                "--requests",
                "12",
                "--class",
                "a:1:priority=-3",
                "--class",
                "b:1",
            ],
        ],
    );
    let bodies = server.stats.bodies.lock().unwrap().clone();
    let with: Vec<&Value> = bodies
        .iter()
        .filter(|b| b.get("priority").is_some())
        .collect();
    let a = recs.iter().filter(|r| r["class"] == "a").count();
    assert!(a > 0 && a < 12, "both classes drawn: {a} of 12 in a");
    assert_eq!(
        with.len(),
        a,
        "every class-a request and no other carried its priority"
    );
    assert!(with.iter().all(|b| b["priority"] == -3));
    for (flags, says) in [
        (vec!["--class", "a:0"], "share is a number above 0"),
        (vec!["--class", "a:1", "--class", "a:2"], "named twice"),
        (vec!["--class", "a:1:priority=x"], "a whole number"),
        (
            vec!["--class", "a:1:header=X-A=1\r\nX-B: 2"],
            "printable value",
        ),
        (vec!["--class", "a:1:slo=ttft_p99=soon"], "slo="),
        (vec!["--class", "a:1:header=Host=x"], "sets itself"),
        (
            vec!["--api", "tgi", "--class", "a:1:priority=1"],
            "no such field",
        ),
    ] {
        let why = refused(&server.url, &[&EXACT_CHAT[..], &flags].concat());
        assert!(why.contains(says), "{flags:?}: {why}");
    }
}

/// Each request's head (lower-cased) and body, as a server received them.
type Heads = std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>;

/// A server that keeps each chat request's head and body, and answers a
/// short stream.
fn head_logging_server() -> (String, Heads) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(200) {
            let Ok(mut s) = stream else { continue };
            let mut reader = BufReader::new(s.try_clone().unwrap());
            let (mut head, mut length) = (String::new(), 0usize);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&lower);
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            if head.starts_with("get") {
                let _ = s.write_all(
                    http("200 OK", "application/json", r#"{"data":[{"id":"m"}]}"#).as_bytes(),
                );
                continue;
            }
            kept.lock()
                .unwrap()
                .push((head, serde_json::from_slice(&body).unwrap_or(Value::Null)));
            let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n\
                       data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                       data: [DONE]\n\n";
            let _ = s.write_all(http("200 OK", "text/event-stream", sse).as_bytes());
        }
    });
    (url, log)
}

#[test]
fn a_classs_headers_reach_the_server_with_its_requests_only() {
    let (url, log) = head_logging_server();
    let (_, _, recs) = bench_ok(
        &url,
        "classes-headers",
        &[&[
            "--model",
            "m",
            "--api",
            "openai-chat",
            "--no-metrics",
            "--requests",
            "16",
            "--concurrency",
            "2",
            "--class",
            "gold:1:header=x-llm-d-fairness-id=tenant-a:header=x-gateway-inference-objective=critical",
            "--class",
            "bronze:1",
        ]],
    );
    let seen = log.lock().unwrap().clone();
    let measured: Vec<&(String, Value)> =
        seen.iter().filter(|(h, _)| h.starts_with("post")).collect();
    let gold = recs.iter().filter(|r| r["class"] == "gold").count();
    let with: Vec<&&(String, Value)> = measured
        .iter()
        .filter(|(h, _)| h.contains("x-llm-d-fairness-id: tenant-a\r\n"))
        .collect();
    assert!(gold > 0 && gold < 16, "both classes drawn: {gold}");
    // The probe's request carries no class; every gold request both headers.
    assert_eq!(with.len(), gold, "{measured:?}");
    assert!(with
        .iter()
        .all(|(h, _)| h.contains("x-gateway-inference-objective: critical\r\n")));
    // The ids tie each head to its record: the gold records' own.
    let gold_ids: std::collections::BTreeSet<&str> = recs
        .iter()
        .filter(|r| r["class"] == "gold")
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    for (h, _) in &with {
        let id = h
            .lines()
            .find_map(|l| l.strip_prefix("x-request-id: "))
            .unwrap()
            .trim();
        assert!(gold_ids.contains(id), "{id} is not a gold record's");
    }
}
