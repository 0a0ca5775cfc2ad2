//! The surfaces a hostile or broken server reaches, driven end to end
//! (docs/reliability.md's checklist): an endless line or an endless
//! stream keeps the client's memory bounded; a huge answer settled off the
//! runtime moves no other stream's stamps; answers interleaved with their
//! reasoning are judged on the answer; counts that cannot be true are
//! flagged and never split into timings; pooling answers with more items
//! than inputs are malformed; a page no API recognises is refused.

mod common;
use common::*;
use serde_json::Value;
use std::io::Write;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server whose answer to the `n`-th request (from 0; `/v1/models`
/// answered apart) is written by `answer` to the socket, as it likes:
/// paced, endless (bounded by `--timeout` there and 40 s here), or whole.
fn scripted(answer: impl Fn(usize, &mut std::net::TcpStream) + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = Arc::new(answer);
    let served = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64) {
            let Ok(mut s) = stream else { continue };
            let (answer, served) = (answer.clone(), served.clone());
            std::thread::spawn(move || {
                let Some((first, _)) = read_request(&s) else {
                    return;
                };
                if first.starts_with("GET /v1/models") {
                    let models = r#"{"data":[{"id":"m"}]}"#;
                    let _ = s.write_all(http("200 OK", "application/json", models).as_bytes());
                    return;
                }
                answer(served.fetch_add(1, Ordering::SeqCst), &mut s);
            });
        }
    });
    url
}

/// The head of a stream that runs until the connection closes.
const STREAM_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

/// A chat chunk carrying `content`.
fn delta(content: &str) -> String {
    format!("data: {{\"choices\":[{{\"delta\":{{\"content\":{content:?}}}}}]}}\n\n")
}

/// Writes `bytes` again and again for at most `limit`, until the client hangs up.
fn endless(s: &mut std::net::TcpStream, first: &[u8], bytes: &[u8], limit: Duration) {
    let started = Instant::now();
    if s.write_all(first).is_err() {
        return;
    }
    while started.elapsed() < limit && s.write_all(bytes).is_ok() {}
}

/// One `bench` on the chat API; its results and first record.
fn one(url: &str, name: &str, args: &[&str]) -> (std::process::Output, Value, Value) {
    let out = run_dir(name);
    let o = bench_chat(url, &out, args);
    let first = records(&out).into_iter().next().unwrap_or_default();
    (o, results(&out), first)
}

#[test]
fn an_endless_line_or_stream_fails_too_large_within_bounded_memory() {
    let line = scripted(|_, s| {
        let first = format!("{STREAM_HEAD}data: {{\"choices\":[{{\"delta\":{{\"content\":\"");
        endless(
            s,
            first.as_bytes(),
            &[b'x'; 64 << 10],
            Duration::from_secs(40),
        );
    });
    let stream = scripted(|_, s| {
        let events = delta("tok").repeat(1024);
        endless(
            s,
            STREAM_HEAD.as_bytes(),
            events.as_bytes(),
            Duration::from_secs(40),
        );
    });
    for (url, name, limit) in [
        (line, "endless-line", "8388608"),
        (stream, "endless-stream", "67108864"),
    ] {
        let started = Instant::now();
        let (_, r, rec) = one(
            &url,
            name,
            &["--quiet", "--requests", "1", "--timeout", "60s"],
        );
        assert_eq!(rec["error_kind"], "too_large", "{name}: {rec}");
        let why = rec["error"].as_str().unwrap();
        assert!(why.contains(limit), "{name}: {why}");
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "{name}: {:?}",
            started.elapsed()
        );
        let peak = stat(&r, "client.peak_rss_mb");
        assert!(peak < 200.0, "{name}: peak {peak} MB");
    }
}

/// A stream that never stalls is still cut at --timeout: the read loop
/// reads first and polls its watchdog only when a read would wait, so the
/// deadline is checked between reads too.
#[test]
fn a_stream_that_never_stalls_is_cut_at_its_timeout() {
    let flowing = scripted(|_, s| {
        let started = Instant::now();
        if s.write_all(STREAM_HEAD.as_bytes()).is_err() {
            return;
        }
        while started.elapsed() < Duration::from_secs(40) {
            if s.write_all(delta("tok").as_bytes()).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let started = Instant::now();
    let (_, _, rec) = one(
        &flowing,
        "never-stalls",
        &["--quiet", "--requests", "1", "--timeout", "2s"],
    );
    assert_eq!(rec["error_kind"], "timeout", "{rec}");
    assert!(
        rec["error"].as_str().unwrap().contains("--timeout"),
        "{rec}"
    );
    assert!(rec["output_tokens"].as_u64().unwrap_or(0) > 10, "{rec}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_huge_answer_counted_off_the_runtime_moves_no_other_streams_stamps() {
    // Requests 0-2 stream a token every 25 ms; request 3 sends 8 MiB of one
    // word with a usage no text can hold, so the tokenizer counts it.
    let url = scripted(|n, s| {
        let _ = s.write_all(STREAM_HEAD.as_bytes());
        if n < 3 {
            for _ in 0..60 {
                std::thread::sleep(Duration::from_millis(25));
                let _ = s.write_all(delta("tok").as_bytes());
            }
            let _ = s.write_all(b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
        let word = delta(&"ab".repeat(32 << 10)).repeat(128);
        let end = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1000000000000}}\n\ndata: [DONE]\n\n";
        let _ = s.write_all((word + end).as_bytes());
    });
    let out = run_dir("huge-beside-paced");
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &url,
            "--api",
            "openai-chat",
            "--model",
            "m",
            "--no-metrics",
        ])
        .args(["--quiet", "--concurrency", "4", "--requests", "4", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let recs = records(&out);
    let huge = recs
        .iter()
        .find(|r| !r["implausible_usage"].is_null())
        .expect("the huge one");
    assert_eq!(huge["output_token_source"], "tokenizer", "{huge}");
    for paced in recs.iter().filter(|r| r["implausible_usage"].is_null()) {
        // The kernel stamps each read, so a stalled reader shows as tokens
        // read together: many stamps equal to the one before. The server
        // sent one every 25 ms, each its own read.
        let at = chunk_times(paced);
        // Generous, for a loaded 2-core machine (a busy neighbour may make a
        // few events arrive together); a stall behind the tokenizer puts
        // most of the stream in one read.
        let together = at.windows(2).filter(|w| w[1] == w[0]).count();
        let worst = at.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(
            together <= 30,
            "{together} of 60 tokens read with the one before (worst gap {worst} µs)"
        );
        assert!(worst < 2_000_000, "a {worst} µs gap in a 25 ms stream");
    }
}

#[test]
fn reasoning_after_the_answer_is_not_judged_as_the_answer() {
    let url = scripted(|_, s| {
        let body = [
            delta("{\"a\": 1}"),
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"I thought after\"}}]}\n\n"
                .into(),
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
                .into(),
        ]
        .concat();
        let _ = s.write_all((STREAM_HEAD.to_string() + &body).as_bytes());
    });
    let args = [
        "--quiet",
        "--requests",
        "2",
        "--response-format",
        "json",
        "--keep-text",
    ];
    let (o, _, rec) = one(&url, "reasoning-after", &args);
    assert_ok(&o);
    assert_eq!(rec["format_valid"], true, "{rec}");
    assert!(rec["reasoning_tokens"].as_u64().unwrap() >= 1, "{rec}");
}

#[test]
fn think_tags_split_oddly_leave_the_answer_its_tokens() {
    // Forty words of thought in tags split mid-word, a two-word answer,
    // and the server's total of 12 (it counts its own way: more bytes than
    // tokens, so plausible). The tokenizer alone counts the thought past
    // the whole total, which left the answer no token at all.
    let url = scripted(|_, s| {
        let thought = "and so on ".repeat(14);
        let (a, b) = thought.split_at(13);
        let pieces = [
            "<th",
            &format!("ink>{a}"),
            &format!("{b}</thi"),
            "nk",
            ">Hel",
            "lo w",
            "orld",
        ];
        let body: String = pieces.iter().map(|p| delta(p)).collect::<String>()
            + "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":12}}\n\ndata: [DONE]\n\n";
        let _ = s.write_all((STREAM_HEAD.to_string() + &body).as_bytes());
    });
    let (o, _, rec) = one(&url, "think-split", &["--quiet", "--requests", "1"]);
    assert_ok(&o);
    let out = rec["output_tokens"].as_u64().unwrap();
    let thought = rec["reasoning_tokens"].as_u64().unwrap();
    assert_eq!(out, 12, "{rec}");
    assert!(
        thought >= 1 && thought < out,
        "reasoning {thought} of {out}: {rec}"
    );
}

#[test]
fn a_running_count_that_jumps_is_flagged_and_never_split_into_itl() {
    let url = scripted(|_, s| {
        let counted = |c: &str, n: u64| {
            format!("data: {{\"choices\":[{{\"delta\":{{\"content\":{c:?}}}}}],\"usage\":{{\"completion_tokens\":{n}}}}}\n\n")
        };
        let body = [counted("a", 1), counted("b", 2), counted("c", 3), counted("d", 1 << 32)].concat()
            + "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4294967296}}\n\ndata: [DONE]\n\n";
        let _ = s.write_all((STREAM_HEAD.to_string() + &body).as_bytes());
    });
    let (o, r, rec) = one(&url, "jumping-count", &["--quiet", "--requests", "1"]);
    assert_ok(&o);
    assert!(!rec["implausible_usage"].is_null(), "{rec}");
    assert!(rec["output_tokens"].as_u64().unwrap() <= 8, "{rec}");
    assert_eq!(rec["chunks"]["tokens"], 1, "one token a chunk: {rec}");
    assert_eq!(
        r["tokens"]["tokens_per_chunk"],
        serde_json::json!({"1": 4}),
        "{}",
        r["tokens"]
    );
}

#[test]
fn two_calls_at_one_index_with_their_own_ids_stay_two() {
    let url = scripted(|_, s| {
        let call = |id: &str, name: &str, args: &str| {
            format!("data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":{id:?},\"type\":\"function\",\"function\":{{\"name\":{name:?},\"arguments\":{args:?}}}}}]}}}}]}}\n\n")
        };
        let body = call("c1", "get_weather", "{\"city\":\"Oslo\"}")
            + &call("c2", "get_time", "{}")
            + "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
        let _ = s.write_all((STREAM_HEAD.to_string() + &body).as_bytes());
    });
    let tools = write_file(
        "hostile-tools.json",
        r#"[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}},{"name":"get_time","parameters":{"type":"object"}}]"#,
    );
    let tools = tools.to_str().unwrap();
    let (o, _, rec) = one(
        &url,
        "two-calls",
        &["--quiet", "--requests", "1", "--tools", tools],
    );
    assert_ok(&o);
    let names: Vec<_> = rec["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, ["get_weather", "get_time"], "{rec}");
}

/// `bench` of a pooling API against `url`: its first record and stderr.
fn pooled(url: &str, name: &str, api: &str) -> (Value, String) {
    let out = run_dir(name);
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            url,
            "--api",
            api,
            "--model",
            "m",
            "--no-metrics",
        ])
        .args(["--quiet", "--requests", "1", "--batch-size", "3", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let first = records(&out).into_iter().next().unwrap_or_default();
    (first, String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn pooling_answers_beyond_their_inputs_are_malformed() {
    let six = scripted(|_, s| {
        let data: Vec<String> = (0..6)
            .map(|i| format!("{{\"embedding\":[0.1],\"index\":{i}}}"))
            .collect();
        let body = format!(
            "{{\"data\":[{}],\"usage\":{{\"prompt_tokens\":3}}}}",
            data.join(",")
        );
        let _ = s.write_all(http("200 OK", "application/json", &body).as_bytes());
    });
    let (rec, _) = pooled(&six, "six-vectors", "openai-embeddings");
    assert_eq!(rec["error_kind"], "malformed", "{rec}");
    assert!(
        rec["error"]
            .as_str()
            .unwrap()
            .contains("6 items for the 3 inputs"),
        "{rec}"
    );
    let far = scripted(|_, s| {
        let body = r#"{"results":[{"index":1000,"relevance_score":0.9},{"index":1001,"relevance_score":0.5},{"index":1,"relevance_score":0.1}]}"#;
        let _ = s.write_all(http("200 OK", "application/json", body).as_bytes());
    });
    let (rec, _) = pooled(&far, "far-indices", "rerank");
    assert_eq!(rec["error_kind"], "malformed", "{rec}");
    assert!(
        rec["error"].as_str().unwrap().contains("index 1001"),
        "{rec}"
    );
    // An event stream from an embeddings server names no flag never given.
    let streamed = scripted(|_, s| {
        let _ = s.write_all((STREAM_HEAD.to_string() + "data: {}\n\n").as_bytes());
    });
    let (rec, _) = pooled(&streamed, "streamed-embeddings", "openai-embeddings");
    let why = rec["error"].as_str().unwrap();
    assert!(
        !why.contains("--no-stream") && why.contains("never streamed"),
        "{why}"
    );
}

#[test]
fn api_auto_refuses_a_page_no_api_recognises_with_exit_3() {
    let url = scripted(|_, s| {
        let page = "<!doctype html><html><body>Welcome to nginx!</body></html>";
        let _ = s.write_all(http("200 OK", "text/html", page).as_bytes());
    });
    let out = run_dir("html-page");
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &url,
            "--model",
            "m",
            "--no-metrics",
            "--requests",
            "1",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("not an answer of the openai-chat API (`text/html`"),
        "{err}"
    );
    assert!(err.contains("Welcome to nginx"), "{err}");
}
