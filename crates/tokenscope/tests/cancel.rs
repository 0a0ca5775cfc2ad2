//! `--cancel SHARE --cancel-after WHEN`: users who leave. The client closes
//! the connection part-way; the record keeps when and what it had; the
//! figures count it apart; and the server's own abort counter says whether
//! it stopped generating for nobody (the built-in engine does).

mod common;

use common::*;
use serde_json::Value;

fn abandoned(recs: &[Value]) -> Vec<&Value> {
    recs.iter()
        .filter(|r| r["warmup"] != true && r["error_kind"] == "abandoned")
        .collect()
}

#[test]
fn a_quarter_leave_after_ten_tokens_and_the_engine_aborts_them() {
    let port = free_port();
    let _server = SimServe::start(port, &[]);
    let url = format!("http://127.0.0.1:{port}");
    let (_, r, recs) = bench_ok(
        &url,
        "cancel-tokens",
        &[&[
            "--requests",
            "48",
            "--concurrency",
            "8",
            "--input-tokens",
            "128",
            "--output-tokens",
            "64",
            "--ignore-eos",
            "--seed",
            "5",
            "--cancel",
            "0.25",
            "--cancel-after",
            "tokens:10",
        ]],
    );
    let left = abandoned(&recs);
    let c = &r["counts"];
    assert_eq!(c["abandoned"].as_u64().unwrap() as usize, left.len());
    assert!(
        (4..=20).contains(&left.len()),
        "about a quarter of 48: {}",
        left.len()
    );
    assert_eq!(c["failed"], 0, "a user who leaves is not a failure: {c}");
    assert_eq!(
        c["succeeded"].as_u64().unwrap() + c["abandoned"].as_u64().unwrap(),
        c["requests"].as_u64().unwrap()
    );
    for rec in &left {
        assert_eq!(rec["output_tokens"], 10, "what it had when it left: {rec}");
        assert!(rec["error"].as_str().unwrap().contains("after 10 chunks"));
        let (sent, done) = (
            rec["sent_at_us"].as_u64().unwrap(),
            rec["done_at_us"].as_u64().unwrap(),
        );
        let last_chunk = *chunk_times(rec).last().unwrap();
        assert!(
            sent < last_chunk && last_chunk <= done,
            "left after its 10th chunk"
        );
    }
    // The rest ran to their end: every output token.
    for rec in recs
        .iter()
        .filter(|r| r["warmup"] != true && r["error_kind"].is_null())
    {
        assert_eq!(rec["output_tokens"], 64);
    }
    // The engine's own abort counter holds every leaver.
    let finding = r["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "abandoned_aborted" || f["rule"] == "generating_for_nobody")
        .unwrap_or_else(|| panic!("no abandonment finding: {:?}", rules(&r)));
    assert_eq!(finding["rule"], "abandoned_aborted", "{finding}");
    let aborted = finding["evidence"]["server_aborted"].as_f64().unwrap();
    assert!(
        aborted >= left.len() as f64 - 1.0,
        "the engine aborted {aborted} of {}",
        left.len()
    );
}

#[test]
fn a_user_who_leaves_at_a_time_leaves_then_with_what_had_come() {
    let server = Server::start(exact(40, 10));
    let (_, r, recs) = bench_ok(
        &server.url,
        "cancel-time",
        &[
            &EXACT_CHAT,
            &[
                "--requests",
                "8",
                "--concurrency",
                "2",
                "--output-tokens",
                "50",
                "--cancel",
                "1",
                "--cancel-after",
                "100ms",
            ],
        ],
    );
    let left = abandoned(&recs);
    assert_eq!(left.len(), 8, "every request leaves: {}", r["counts"]);
    for rec in left {
        let (sent, done) = (
            rec["sent_at_us"].as_u64().unwrap(),
            rec["done_at_us"].as_u64().unwrap(),
        );
        let after_ms = (done - sent) as f64 / 1e3;
        // Generous above: a loaded machine wakes late; never before its time.
        assert!(
            (99.0..400.0).contains(&after_ms),
            "left {after_ms} ms after its send"
        );
        // The first token at 40 ms, one every 10 ms: some had come, not all.
        let n = rec["output_tokens"].as_u64().unwrap();
        assert!((1..50).contains(&n), "{n} tokens before leaving");
    }
    assert!(
        r["latency"]["ttft_ms"].is_null(),
        "no leaver in a latency figure"
    );
}

#[test]
fn cancel_flags_that_cannot_hold_are_refused() {
    let server = Server::start(exact(2, 1));
    for (flags, says) in [
        (
            vec!["--cancel", "1.5", "--cancel-after", "1s"],
            "not a probability",
        ),
        (vec!["--cancel", "0.5"], "--cancel-after"),
        (vec!["--cancel-after", "1s"], "--cancel"),
        (
            vec!["--cancel", "0.5", "--cancel-after", "tokens:0"],
            "1 or more",
        ),
        (
            vec!["--cancel", "0.5", "--cancel-after", "uniform:2s..1s"],
            "below the second",
        ),
        (
            vec![
                "--cancel",
                "0.5",
                "--cancel-after",
                "tokens:99999999999999999999",
            ],
            "1 or more",
        ),
        (
            vec!["--cancel", "0.5", "--cancel-after", "300000000000y"],
            "at most 24h",
        ),
        (
            vec!["--cancel", "0.5", "--cancel-after", "1s", "--no-stream"],
            "nothing to leave",
        ),
    ] {
        let why = refused(&server.url, &[&EXACT_CHAT[..], &flags].concat());
        assert!(why.contains(says), "{flags:?}: {why}");
    }
}

#[test]
fn leavers_count_in_ttft_and_itl_only_when_asked() {
    let server = Server::start(exact(30, 5));
    let run = |name: &str, extra: &[&str]| {
        let flags = [
            "--requests",
            "24",
            "--concurrency",
            "4",
            "--output-tokens",
            "12",
            "--seed",
            "3",
            "--cancel",
            "0.5",
            "--cancel-after",
            "tokens:4",
        ];
        bench_ok(&server.url, name, &[&EXACT_CHAT, &flags, extra]).1
    };
    let count = |r: &Value, m: &str| r["latency"][m]["count"].as_u64().unwrap();
    let apart = run("leavers-apart", &[]);
    let (ok, left) = (
        apart["counts"]["succeeded"].as_u64().unwrap(),
        apart["counts"]["abandoned"].as_u64().unwrap(),
    );
    assert!(left > 0 && ok > 0, "{}", apart["counts"]);
    assert_eq!(count(&apart, "ttft_ms"), ok);
    let with = run("leavers-in", &["--abandoned-in-latency"]);
    assert_eq!(
        with["counts"]["abandoned"].as_u64().unwrap(),
        left,
        "the same leavers (the seed's)"
    );
    // Their TTFT counts (each got its first token); TPOT and E2E do not.
    assert_eq!(count(&with, "ttft_ms"), ok + left);
    assert_eq!(count(&with, "tpot_ms"), ok);
    assert_eq!(count(&with, "e2e_ms"), ok);
    // Three gaps each (four tokens had come) joined the ITL samples.
    assert_eq!(count(&with, "itl_ms"), count(&apart, "itl_ms") + 3 * left);
    assert!((with["latency"]["ttft_ms"]["p50"].as_f64().unwrap() - 30.0).abs() < 20.0);
    assert_eq!(with["config"]["cancel"]["in_latency"], true);
}
