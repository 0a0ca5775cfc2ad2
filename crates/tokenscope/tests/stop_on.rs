//! `--stop-on`: a run stops early when its server fails past a share, or
//! when its queue grows, and says which rule stopped it, when and why.

mod common;
use common::*;
use serde_json::Value;
use std::io::Write;
use std::net::TcpListener;

/// A chat server that answers every other request 503 and the rest with a
/// two-token stream (a thread a connection, 400 connections at most).
fn half_failing() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().take(400).enumerate() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let Some((first, _)) = read_request(&s) else {
                    return;
                };
                let answer = if first.starts_with("GET /v1/models") {
                    http("200 OK", "application/json", r#"{"data":[{"id":"m"}]}"#)
                } else if i % 2 == 0 {
                    http(
                        "503 Service Unavailable",
                        "application/json",
                        r#"{"error":"busy"}"#,
                    )
                } else {
                    let chunk = |c: &str| {
                        format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{c}\"}}}}]}}\n\n")
                    };
                    let body = format!("{}{}data: [DONE]\n\n", chunk(" a"), chunk(" b"));
                    http("200 OK", "text/event-stream", &body)
                };
                let _ = s.write_all(answer.as_bytes());
            });
        }
    });
    url
}

fn stopped(r: &Value) -> (&str, f64, &str) {
    let s = &r["stopped"];
    (
        s["rule"].as_str().unwrap_or_default(),
        s["at_s"].as_f64().unwrap_or(f64::NAN),
        s["why"].as_str().unwrap_or_default(),
    )
}

#[test]
fn half_the_requests_failing_stops_the_run_at_errors_over_a_fifth() {
    let out = run_dir("stop-on-errors");
    let o = bench_chat(
        &half_failing(),
        &out,
        &["--quiet", "--requests", "300", "--stop-on", "errors>20%"],
    );
    let r = results(&out);
    let (rule, _, why) = stopped(&r);
    assert_eq!(rule, "errors", "{}", r["stopped"]);
    assert!(why.contains("of the last 50 requests failed"), "{why}");
    let n = r["counts"]["requests"].as_u64().unwrap();
    assert!((50..120).contains(&n), "stopped after {n} of 300 requests");
    let finding = r["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "stopped_early")
        .expect("the finding says the run was stopped");
    assert!(finding["message"]
        .as_str()
        .unwrap()
        .contains("--stop-on errors"));
    assert!(o.status.code().is_some(), "{o:?}");
}

#[test]
fn a_bad_rule_is_refused_with_what_a_rule_looks_like() {
    let o = tokenscope()
        .args(["bench", "--stop-on", "errors>150%", "--requests", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("errors>5%"), "{err}");
}

/// The built-in engine (an 8B on one H100) sent more than twice what it
/// takes on of 512-in / 64-out requests: the queue grows from the first
/// second, and the point stops once the requests waiting for a first
/// token have risen through a full window (3 s in, 8 s long: about 11 s;
/// the requests that finished would show it only ~20 s later, after their
/// wait), not at its 90 s. The sweep's higher load is skipped; a closed
/// loop is refused the rule.
#[test]
fn an_overloaded_point_stops_on_saturation_and_the_loads_above_it_are_skipped() {
    let out = run_dir("stop-on-saturation");
    let o = tokenscope()
        .args(["sweep", "--rate", "150,300", "--duration", "90s"])
        .args(["--input-tokens", "512", "--output-tokens", "64"])
        .args(["--stop-on", "saturation", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let r = results(&out.join("point-00"));
    let (rule, at_s, why) = stopped(&r);
    assert_eq!(rule, "saturation", "{}", r["stopped"]);
    // 10.2 s at the soonest; a loaded machine's timer may look late.
    assert!((10.0..25.0).contains(&at_s), "stopped {at_s} s in: {why}");
    assert!(why.contains("waiting for a first token rose"), "{why}");
    assert!(r["window"]["duration_s"].as_f64().unwrap() < 75.0);
    assert!(r["counts"]["errors"]["cancelled"].as_u64().unwrap_or(0) > 0);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("skipped, at or above 150"), "{said}");
    assert!(!out.join("point-01").join("results.json").exists());
    let skipped = &sweep_doc(&out)["skipped"];
    assert_eq!(skipped[0]["load"], 300.0, "{skipped}");
    assert!(skipped[0]["why"]
        .as_str()
        .unwrap()
        .contains("--stop-on saturation"));
    // A point whose requests the rule cancelled before one ended still reports.
    assert!(out.join("report.html").exists(), "{said}");
    assert!(!said.contains("no report.html"), "{said}");

    // Half its capacity, past the time the rule first looks: not stopped.
    let steady = run_dir("stop-on-steady");
    let o = tokenscope()
        .args(["bench", "--rate", "30", "--duration", "15s"])
        .args(["--input-tokens", "512", "--output-tokens", "64"])
        .args(["--stop-on", "saturation", "--quiet", "--out"])
        .arg(&steady)
        .output()
        .unwrap();
    assert_ok(&o);
    let r = results(&steady);
    assert!(r["stopped"].is_null(), "{}", r["stopped"]);
    let rules: Vec<&str> = r["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["rule"].as_str())
        .collect();
    assert!(!rules.contains(&"waiting_grew"), "{rules:?}");
    assert!(!rules.contains(&"queue_growing"), "{rules:?}");

    let closed = tokenscope()
        .args(["bench", "--concurrency", "4", "--requests", "8"])
        .args(["--stop-on", "saturation", "--out"])
        .arg(run_dir("stop-on-closed"))
        .output()
        .unwrap();
    assert_eq!(closed.status.code(), Some(2));
    let err = String::from_utf8_lossy(&closed.stderr);
    assert!(err.contains("needs an open loop"), "{err}");
}
