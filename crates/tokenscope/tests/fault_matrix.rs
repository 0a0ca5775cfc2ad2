//! The fault matrix: one misbehaving server on 127.0.0.1 with every fault
//! mode the client must survive, each run through `bench` with exact expected
//! counts, error kinds and exit code, and no record lost. The mode is the
//! first path segment of the URL (`--url http://127.0.0.1:P/<mode>`), so one
//! server serves the whole table; `/mix` cycles through the modes per request
//! so one run sees them all at once, interleaved on concurrent connections.
//!
//! The stops that are not per-request faults (disk full, SIGTERM, SIGKILL,
//! Ctrl-C, a silent metrics endpoint) are in `faults.rs` and `failures.rs`;
//! docs/reliability.md lists the whole matrix.

mod common;
use common::*;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a request under a fault mode must end as.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// A success, its output tokens counted from the given source.
    Ok(&'static str),
    /// A failure of this kind, its message containing this text.
    Fails(&'static str, &'static str),
}

/// Every fault mode: its name (the URL's first path segment), whether it may
/// join `/mix` (a connection closed before any answer is retried once by the
/// client, as a stale keep-alive connection must be, which would shift the
/// cycle), and what it must yield.
const MODES: &[(&str, bool, Expect)] = &[
    ("ok", true, Expect::Ok("server_usage")),
    ("one-byte-writes", true, Expect::Ok("server_usage")),
    ("crlf", true, Expect::Ok("server_usage")),
    ("cr-only", true, Expect::Ok("server_usage")),
    ("comments-and-fields", true, Expect::Ok("server_usage")),
    ("multi-line-data", true, Expect::Ok("server_usage")),
    ("chunked-odd-sizes", true, Expect::Ok("server_usage")),
    ("no-usage", true, Expect::Ok("tokenizer")),
    ("float-usage-null-choices", true, Expect::Ok("server_usage")),
    ("finish-without-done", true, Expect::Ok("server_usage")),
    ("data-after-done", true, Expect::Ok("server_usage")),
    ("slow-head", true, Expect::Ok("server_usage")),
    ("slow-tokens", true, Expect::Ok("server_usage")),
    ("huge-event", true, Expect::Ok("server_usage")),
    (
        "http-400",
        true,
        Expect::Fails("http_400", "context length"),
    ),
    (
        "http-401",
        true,
        Expect::Fails("http_401", "invalid api key"),
    ),
    (
        "http-404",
        true,
        Expect::Fails("http_404", "model `m` does not exist"),
    ),
    ("http-429", true, Expect::Fails("http_429", "rate limited")),
    ("http-500", true, Expect::Fails("http_500", "HTTP 500")),
    ("http-503", true, Expect::Fails("http_503", "overloaded")),
    ("redirect", true, Expect::Fails("http_302", "not followed")),
    (
        "not-streamed",
        true,
        Expect::Fails("not_streamed", "stream=true"),
    ),
    ("html-200", true, Expect::Fails("not_streamed", "text/html")),
    (
        "empty-choices",
        true,
        Expect::Fails("empty_answer", "without any generated text"),
    ),
    (
        "done-only",
        true,
        Expect::Fails("empty_answer", "without any generated text"),
    ),
    ("empty-200", true, Expect::Fails("stream", "without [DONE]")),
    (
        "cut-mid-stream",
        true,
        Expect::Fails("stream", "without [DONE]"),
    ),
    (
        "cut-chunked",
        true,
        Expect::Fails("stream", "chunk size line"),
    ),
    (
        "short-content-length",
        true,
        Expect::Fails("stream", "end of file before message length"),
    ),
    (
        "malformed-json",
        true,
        Expect::Fails("malformed", "malformed stream chunk"),
    ),
    // Decoded with replacement characters, as the event-stream rules say.
    ("bad-utf8", true, Expect::Ok("server_usage")),
    (
        "error-object",
        true,
        Expect::Fails("server_error", "out of memory"),
    ),
    (
        "stall-head",
        true,
        Expect::Fails("timeout", "no response head"),
    ),
    (
        "stall-mid-stream",
        true,
        Expect::Fails("timeout", "--idle-timeout"),
    ),
    (
        "garbage-response",
        false,
        Expect::Fails("stream", "invalid HTTP version"),
    ),
    (
        "close-at-once",
        false,
        Expect::Fails("stream", "connection closed before message completed"),
    ),
    (
        "reset-at-once",
        false,
        Expect::Fails("stream", "reset by peer"),
    ),
];

const EVENT_STREAM: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

/// `n` content chunks, a finish chunk, a usage chunk and `[DONE]`.
fn events(n: usize, usage: bool) -> Vec<String> {
    let mut ev: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"tok{i} "}}}}]}}"#))
        .collect();
    ev.push(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#.into());
    if usage {
        ev.push(format!(
            r#"{{"choices":[],"usage":{{"prompt_tokens":5,"completion_tokens":{n}}}}}"#
        ));
    }
    ev.push("[DONE]".into());
    ev
}

fn sse(events: &[String], eol: &str) -> String {
    events
        .iter()
        .map(|e| format!("data: {e}{eol}{eol}"))
        .collect()
}

fn error_json(status: &str, message: &str) -> String {
    http(
        status,
        "application/json",
        &format!(r#"{{"error":{{"message":"{message}","type":"x"}}}}"#),
    )
}

/// Acts out `mode` on one accepted connection whose request has been read.
fn act(mode: &str, s: &mut TcpStream) -> std::io::Result<()> {
    let normal = sse(&events(4, true), "\n");
    let whole = |s: &mut TcpStream, text: &str| s.write_all(text.as_bytes());
    match mode {
        "ok" => whole(s, &format!("{EVENT_STREAM}{normal}")),
        "one-byte-writes" => {
            s.set_nodelay(true)?;
            for b in format!("{EVENT_STREAM}{normal}").bytes() {
                s.write_all(&[b])?;
            }
            Ok(())
        }
        "crlf" => whole(s, &format!("{EVENT_STREAM}{}", sse(&events(4, true), "\r\n"))),
        "cr-only" => whole(s, &format!("{EVENT_STREAM}{}", sse(&events(4, true), "\r"))),
        "comments-and-fields" => {
            let body: String = events(4, true)
                .iter()
                .enumerate()
                .map(|(i, e)| format!(": keep-alive\n\nevent: message\nid: {i}\nretry: 10\ndata: {e}\n\n"))
                .collect();
            whole(s, &format!("{EVENT_STREAM}{body}"))
        }
        "multi-line-data" => {
            // A JSON value split over two `data:` lines is joined with "\n".
            let body: String = events(4, true)
                .iter()
                .map(|e| match e.split_once(':') {
                    Some((a, b)) if e.starts_with('{') => format!("data: {a}:\ndata: {b}\n\n"),
                    _ => format!("data: {e}\n\n"),
                })
                .collect();
            whole(s, &format!("{EVENT_STREAM}{body}"))
        }
        "chunked-odd-sizes" => {
            s.set_nodelay(true)?;
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
            s.write_all(head.as_bytes())?;
            for piece in normal.as_bytes().chunks(7) {
                write!(s, "{:x}\r\n", piece.len())?;
                s.write_all(piece)?;
                s.write_all(b"\r\n")?;
            }
            s.write_all(b"0\r\n\r\n")
        }
        "no-usage" => whole(s, &format!("{EVENT_STREAM}{}", sse(&events(4, false), "\n"))),
        "float-usage-null-choices" => whole(
            s,
            &format!(
                "{EVENT_STREAM}data: {{\"choices\":null}}\n\n{}",
                normal.replace(r#""completion_tokens":4"#, r#""completion_tokens":4.0"#)
            ),
        ),
        "finish-without-done" => whole(s, &format!("{EVENT_STREAM}{}", normal.replace("data: [DONE]\n\n", ""))),
        "data-after-done" => whole(s, &format!("{EVENT_STREAM}{normal}data: {{not json\n\ndata: [DONE]\n\n")),
        "slow-head" => {
            std::thread::sleep(Duration::from_millis(300));
            whole(s, &format!("{EVENT_STREAM}{normal}"))
        }
        "slow-tokens" => {
            s.set_nodelay(true)?;
            s.write_all(EVENT_STREAM.as_bytes())?;
            for e in events(4, true) {
                std::thread::sleep(Duration::from_millis(150));
                write!(s, "data: {e}\n\n")?;
            }
            Ok(())
        }
        "huge-event" => {
            // One content event of 2 MiB: eight huge tokens in one chunk.
            let big = format!(
                r#"{{"choices":[{{"index":0,"delta":{{"content":"{}"}}}}]}}"#,
                "word ".repeat(400_000)
            );
            let ev = [big, events(0, false)[0].clone(), r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":8}}"#.into(), "[DONE]".into()];
            whole(s, &format!("{EVENT_STREAM}{}", sse(&ev, "\n")))
        }
        "http-400" => whole(s, &error_json("400 Bad Request", "prompt exceeds the model's context length")),
        "http-401" => whole(s, &error_json("401 Unauthorized", "invalid api key")),
        "http-404" => whole(s, &error_json("404 Not Found", "model `m` does not exist")),
        "http-429" => whole(s, &format!("HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-type: application/json\r\ncontent-length: 42\r\nconnection: close\r\n\r\n{:<42}", r#"{"error":{"message":"rate limited"}}"#)),
        "http-500" => whole(s, &http("500 Internal Server Error", "text/plain", "")),
        "http-503" => whole(s, &http("503 Service Unavailable", "text/plain", "overloaded, try later\nsecond line")),
        "redirect" => whole(s, "HTTP/1.1 302 Found\r\nlocation: /v2/chat\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
        "not-streamed" => whole(s, &http("200 OK", "application/json", r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}"#)),
        "html-200" => whole(s, &http("200 OK", "text/html", "<html><body>proxy login</body></html>")),
        "empty-choices" => whole(s, &format!("{EVENT_STREAM}data: {{\"choices\":[]}}\n\ndata: {{\"choices\":[]}}\n\ndata: [DONE]\n\n")),
        "done-only" => whole(s, &format!("{EVENT_STREAM}data: [DONE]\n\n")),
        "empty-200" => whole(s, EVENT_STREAM),
        "cut-mid-stream" => whole(s, &format!("{EVENT_STREAM}{}", sse(&events(4, true)[..2], "\n"))),
        "cut-chunked" => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            let part = sse(&events(4, true)[..2], "\n");
            whole(s, &format!("{head}{:x}\r\n{part}\r\n", part.len()))
        }
        "short-content-length" => {
            let part = sse(&events(4, true)[..2], "\n");
            whole(s, &format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{part}", part.len() + 500))
        }
        "malformed-json" => whole(s, &format!("{EVENT_STREAM}{}data: {{\"choices\":[{{\"delta\":\n\n", sse(&events(4, true)[..1], "\n"))),
        "bad-utf8" => {
            s.write_all(EVENT_STREAM.as_bytes())?;
            s.write_all(b"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}\n\n")?;
            s.write_all(normal.as_bytes())
        }
        "error-object" => whole(s, &format!("{EVENT_STREAM}{}data: {{\"error\":{{\"message\":\"CUDA out of memory\",\"code\":500}}}}\n\n", sse(&events(4, true)[..2], "\n"))),
        "stall-head" => {
            std::thread::sleep(Duration::from_secs(4));
            Ok(())
        }
        "stall-mid-stream" => {
            whole(s, &format!("{EVENT_STREAM}{}", sse(&events(4, true)[..2], "\n")))?;
            std::thread::sleep(Duration::from_secs(4));
            Ok(())
        }
        "garbage-response" => whole(s, "hello there, this is not HTTP\r\n\r\n"),
        "close-at-once" => s.shutdown(Shutdown::Both),
        "reset-at-once" => {
            // SO_LINGER 0: close sends RST instead of FIN.
            use std::os::fd::AsRawFd;
            let linger = libc::linger { l_onoff: 1, l_linger: 0 };
            // SAFETY: setsockopt on our own open socket with a valid struct.
            let rc = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&linger as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0, "SO_LINGER");
            Ok(())
        }
        other => panic!("unknown fault mode {other}"),
    }
}

/// Reads one request: its path (the body is read and dropped).
fn request_path(s: &TcpStream) -> Option<String> {
    let (first, _) = read_request(s)?;
    first.split(' ').nth(1).map(str::to_owned)
}

/// The fault server: a thread per connection, bounded to 4,000 connections.
fn fault_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mixed = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4000) {
            let Ok(mut s) = stream else { continue };
            let mixed = mixed.clone();
            std::thread::spawn(move || {
                let Some(path) = request_path(&s) else { return };
                let mode = path.trim_start_matches('/').split('/').next().unwrap_or("");
                if path.contains("/v1/models") {
                    let _ = s.write_all(
                        http("200 OK", "application/json", r#"{"data":[{"id":"m"}]}"#).as_bytes(),
                    );
                    return;
                }
                let mode = if mode == "mix" {
                    let joins: Vec<_> = MODES.iter().filter(|m| m.1).collect();
                    joins[mixed.fetch_add(1, Ordering::SeqCst) % joins.len()].0
                } else {
                    mode
                };
                let _ = act(mode, &mut s);
            });
        }
    });
    url
}

/// `bench` of `requests` requests against a fault mode, with timeouts short
/// enough for the stalls: 1 s idle, 3 s whole.
fn bench_mode(
    url: &str,
    mode: &str,
    requests: usize,
    concurrency: usize,
) -> (std::process::Output, std::path::PathBuf) {
    let out = run_dir(&format!("matrix-{mode}"));
    let o = tokenscope()
        .args(["bench", "--url", &format!("{url}/{mode}"), "--quiet"])
        .args(["--api", "openai-chat", "--model", "m", "--no-metrics"])
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--requests", &requests.to_string(), "--output-tokens", "8"])
        .args(["--idle-timeout", "1s", "--timeout", "3s", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    (o, out)
}

/// Checks one record against what its mode must yield.
fn check_record(mode: &str, expect: Expect, rec: &serde_json::Value) -> Result<(), String> {
    let kind = rec["error_kind"].as_str();
    let msg = rec["error"].as_str().unwrap_or("");
    if msg.contains('\n') {
        return Err(format!("{mode}: a message of more than one line: {msg:?}"));
    }
    match expect {
        Expect::Ok(source) => {
            if kind.is_some()
                || rec["output_token_source"] != source
                || rec["output_tokens"].as_u64().unwrap_or(0) == 0
            {
                return Err(format!(
                    "{mode}: wanted a success counted by {source}, got {rec}"
                ));
            }
        }
        Expect::Fails(want, text) => {
            if kind != Some(want) || !msg.contains(text) {
                return Err(format!(
                    "{mode}: wanted {want} containing {text:?}, got {kind:?}: {msg}"
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn every_fault_mode_yields_its_classification_and_keeps_every_record() {
    let url = fault_server();
    let problems = std::sync::Mutex::new(Vec::new());
    // Four runs at a time: the stalls take seconds each.
    std::thread::scope(|scope| {
        for lane in 0..4 {
            let (url, problems) = (&url, &problems);
            scope.spawn(move || {
                for &(mode, _, expect) in MODES.iter().skip(lane).step_by(4) {
                    let (o, out) = bench_mode(url, mode, 3, 1);
                    let want_exit = if matches!(expect, Expect::Ok(_)) {
                        0
                    } else {
                        4
                    };
                    let mut p = problems.lock().unwrap();
                    if o.status.code() != Some(want_exit) {
                        p.push(format!(
                            "{mode}: exit {:?}, wanted {want_exit}: {}",
                            o.status.code(),
                            String::from_utf8_lossy(&o.stderr)
                        ));
                    }
                    if !out.join("results.json").exists() {
                        p.push(format!("{mode}: no results.json"));
                        continue;
                    }
                    let recs = records(&out);
                    let r = results(&out);
                    if recs.len() != 3 || r["counts"]["requests"] != 3 {
                        p.push(format!(
                            "{mode}: {} records, counts {}",
                            recs.len(),
                            r["counts"]
                        ));
                    }
                    p.extend(
                        recs.iter()
                            .filter_map(|rec| check_record(mode, expect, rec).err()),
                    );
                }
            });
        }
    });
    let problems = problems.into_inner().unwrap();
    assert!(
        problems.is_empty(),
        "{} of {} modes wrong:\n{}",
        problems.len(),
        MODES.len(),
        problems.join("\n")
    );
}

#[test]
fn all_faults_interleaved_in_one_run_are_counted_exactly() {
    let url = fault_server();
    let joins: Vec<_> = MODES.iter().filter(|m| m.1).collect();
    let rounds = 3;
    let start = Instant::now();
    let (o, out) = bench_mode(&url, "mix", joins.len() * rounds, 8);
    assert_ok(&o);
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "took {:?}",
        start.elapsed()
    );
    let r = results(&out);
    let recs = records(&out);
    assert_eq!(recs.len(), joins.len() * rounds, "no record lost");
    assert_eq!(stat(&r, "counts.requests") as usize, joins.len() * rounds);
    let mut want = std::collections::BTreeMap::<&str, u64>::new();
    let mut ok = 0;
    for m in &joins {
        match m.2 {
            Expect::Ok(_) => ok += rounds as u64,
            Expect::Fails(kind, _) => *want.entry(kind).or_default() += rounds as u64,
        }
    }
    assert_eq!(r["counts"]["succeeded"], ok, "{}", r["counts"]);
    for (kind, n) in &want {
        assert_eq!(
            r["counts"]["errors"][kind], *n,
            "{kind}: {}",
            r["counts"]["errors"]
        );
    }
    let kinds = r["counts"]["errors"].as_object().unwrap();
    assert_eq!(kinds.len(), want.len(), "no other kind: {kinds:?}");
}

#[test]
fn a_server_killed_mid_run_leaves_every_request_classified() {
    // Three answers, a fourth cut mid-stream, then the listener is gone.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut answered = 0;
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let Some(path) = request_path(&s) else {
                continue;
            };
            if path.contains("/v1/models") {
                let _ = s.write_all(
                    http("200 OK", "application/json", r#"{"data":[{"id":"m"}]}"#).as_bytes(),
                );
                continue;
            }
            answered += 1;
            let _ = act(
                if answered <= 3 {
                    "ok"
                } else {
                    "cut-mid-stream"
                },
                &mut s,
            );
            if answered == 4 {
                return; // the listener is dropped: connections are refused
            }
        }
    });
    let (o, out) = bench_mode(&url, "any", 7, 1);
    assert_ok(&o);
    let r = results(&out);
    assert_eq!(r["counts"]["succeeded"], 3, "{}", r["counts"]);
    assert_eq!(r["counts"]["errors"]["stream"], 1, "{}", r["counts"]);
    assert_eq!(r["counts"]["errors"]["connect"], 3, "{}", r["counts"]);
    assert_eq!(records(&out).len(), 7);
}
