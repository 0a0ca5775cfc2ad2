//! Agents and correctness under load (issue 31): tool calls timed and
//! checked in every API that has tools, graded answers, agent loops, and
//! answers that change with load — each against the exact server's own
//! count of what it broke, so the figures must match it exactly.

mod common;

use common::*;
use serde_json::Value;
use tokenscope_sim::exact::ExactConfig;
use tokenscope_sim::faults::Faults;

const TOOL_APIS: [&str; 3] = ["openai-chat", "openai-responses", "anthropic-messages"];

/// Two tools: one with a string to carry the words, one with integers only.
fn tools_file() -> String {
    let tools = r#"[
      {"type": "function", "function": {"name": "get_weather", "description": "The weather now",
        "parameters": {"type": "object", "required": ["city", "unit"], "additionalProperties": false,
          "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}}}},
      {"name": "add", "parameters": {"type": "object", "required": ["a", "b"],
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}
    ]"#;
    write_file("tools.json", tools).display().to_string()
}

fn stat_of(server: &Server, key: &str) -> u64 {
    server.stats.snapshot(false)[key].as_u64().unwrap()
}

#[test]
fn a_server_breaking_a_fifth_of_its_tool_arguments_reads_exactly_that_in_every_api() {
    let tools = tools_file();
    for api in TOOL_APIS {
        for stream in [true, false] {
            let server = Server::start(ExactConfig {
                faults: Faults {
                    bad_tool_args: 0.2,
                    ..Faults::default()
                },
                seed: 5,
                ..exact(5, 1)
            });
            let mut args = vec![
                "--api",
                api,
                "--no-metrics",
                "--requests",
                "50",
                "--concurrency",
                "5",
                "--output-tokens",
                "8",
                "--tools",
                &tools,
                "--tool-choice",
                "required",
            ];
            if !stream {
                args.push("--no-stream");
            }
            let (_, r, recs) = bench_ok(&server.url, &format!("tools-{api}"), &[&args]);
            let broken = stat_of(&server, "broken_tool_args");
            assert_eq!(stat_of(&server, "tool_calls"), 50, "{api}");
            assert!(
                (4..=18).contains(&broken),
                "{api}: the 20 % draw gave {broken}"
            );
            let t = &r["tool_calls"];
            assert_eq!(
                (t["requests"].as_u64(), t["calls"].as_u64()),
                (Some(50), Some(50)),
                "{t}"
            );
            assert_eq!(
                t["valid"].as_u64().unwrap(),
                50 - broken,
                "{api} stream={stream}: {t}"
            );
            assert!(has_rule(&r, "invalid_tool_calls"), "{api}: {:?}", rules(&r));
            assert!(!has_rule(&r, "tool_calls_missing"), "{api}");
            for q in &recs {
                let call = &q["tool_calls"][0];
                assert!(["get_weather", "add"].contains(&call["name"].as_str().unwrap()));
                if call["valid"] == false {
                    // Anthropic's whole answer holds broken arguments as a string.
                    let why = call["error"].as_str().unwrap();
                    assert!(why.starts_with("arguments not JSON") || why.contains("not an object"));
                }
                // A call is output: it starts the stream's timing.
                if stream {
                    assert_eq!(q["first_tool_call_at_us"], q["first_token_at_us"], "{q}");
                    assert_eq!(q["output_tokens"], 8, "the call's tokens are counted");
                }
            }
            let ttfc = &t["time_to_first_call_ms"];
            assert_eq!(ttfc.is_object(), stream, "{api}: {ttfc}");
        }
    }
}

#[test]
fn a_named_tool_is_called_none_forbids_calls_and_a_required_call_that_never_comes_is_found() {
    let tools = tools_file();
    let server = Server::start(exact(2, 1));
    let base = [
        "--no-metrics",
        "--requests",
        "12",
        "--output-tokens",
        "6",
        "--tools",
        &tools,
    ];
    let (_, r, recs) = bench_ok(
        &server.url,
        "tools-named",
        &[&base, &["--tool-choice", "add"]],
    );
    assert_eq!(r["tool_calls"]["valid"], 12);
    assert!(recs.iter().all(|q| q["tool_calls"][0]["name"] == "add"));
    let args: Value =
        serde_json::from_str(recs[0]["tool_calls"][0]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["a"].is_i64() && args["b"].is_i64(), "{args}");
    let (_, r, _) = bench_ok(
        &server.url,
        "tools-none",
        &[&base, &["--tool-choice", "none"]],
    );
    assert_eq!(r["tool_calls"]["calls"], 0, "{}", r["tool_calls"]);
    assert!(!has_rule(&r, "tool_calls_missing"), "none requires nothing");
    // A dataset whose entries bring their own tools, one of which the
    // server never calls: `required` is then missed by every answer.
    let entry = r#"{"prompt": "hi", "tools": [{"name": "f", "parameters": {"type": "object"}}]}"#;
    let data = write_file("tools-dataset.jsonl", &format!("{entry}\n{entry}\n"));
    let data = data.display().to_string();
    let (_, r, recs) = bench_ok(
        &server.url,
        "tools-dataset",
        &[&[
            "--no-metrics",
            "--dataset",
            &data,
            "--output-tokens",
            "4",
            "--tool-choice",
            "none",
        ]],
    );
    assert_eq!(
        recs[0]["tools_offered"], 1,
        "the entry's own tools are sent"
    );
    assert_eq!(r["tool_calls"]["calls"], 0);
}

#[test]
fn tools_are_refused_where_they_cannot_go() {
    let tools = tools_file();
    let server = Server::start(exact(2, 1));
    let why = refused(
        &server.url,
        &["--api", "openai-completions", "--tools", &tools],
    );
    assert!(why.contains("has no tools"), "{why}");
    let why = refused(&server.url, &["--tool-choice", "required"]);
    assert!(why.contains("needs tools"), "{why}");
    let why = refused(
        &server.url,
        &["--tools", &tools, "--tool-choice", "get_time"],
    );
    assert!(why.contains("no tool of that name"), "{why}");
    let empty = write_file("no-tools.json", "[]").display().to_string();
    let why = refused(&server.url, &["--tools", &empty]);
    assert!(why.contains("empty"), "{why}");
    let why = refused(&server.url, &["--grade", "number"]);
    assert!(why.contains("expected"), "{why}");
}

#[test]
fn a_server_answering_a_quarter_wrong_reads_exactly_that_accuracy() {
    let server = Server::start(ExactConfig {
        faults: Faults {
            wrong_answers: 0.25,
            ..Faults::default()
        },
        seed: 3,
        ..exact(2, 1)
    });
    let args = [
        "--no-metrics",
        "--dataset",
        "builtin:arithmetic",
        "--grade",
        "number",
        "--requests",
        "120",
        "--concurrency",
        "6",
    ];
    let (_, r, recs) = bench_ok(&server.url, "graded", &[&args]);
    let wrong = stat_of(&server, "wrong_answers");
    assert_eq!(stat_of(&server, "graded"), 120);
    assert!((15..=45).contains(&wrong), "the 25 % draw gave {wrong}");
    let a = &r["accuracy"];
    assert_eq!(
        (a["graded"].as_u64(), a["rule"].as_str()),
        (Some(120), Some("number"))
    );
    assert_eq!(a["correct"].as_u64().unwrap(), 120 - wrong, "{a}");
    let ci = |i: usize| a["share_ci95"][i].as_f64().unwrap();
    let (lo, hi) = (ci(0), ci(1));
    let share = stat(a, "share");
    assert!(lo < share && share < hi, "{a}");
    assert!(recs
        .iter()
        .all(|q| q["correct"].is_boolean() && q["answer_hash"].is_string()));
    // The same questions graded by their exact text fail: the answer has words around the number.
    let exact_args = [
        "--no-metrics",
        "--dataset",
        "builtin:arithmetic",
        "--grade",
        "exact",
        "--requests",
        "10",
    ];
    let (_, r, _) = bench_ok(&server.url, "graded-exact", &[&exact_args]);
    assert_eq!(r["accuracy"]["correct"], 0, "{}", r["accuracy"]);
}

#[test]
fn an_agent_loop_carries_each_tool_result_and_its_session_time_adds_up() {
    let tools = tools_file();
    let server = Server::start(ExactConfig {
        keep_bodies: 64,
        ..exact(10, 1)
    });
    let args = [
        "--no-metrics",
        "--multi-turn",
        "--turns",
        "2",
        "--tools",
        &tools,
        "--tool-latency",
        "40ms",
        "--tool-result-tokens",
        "16",
        "--requests",
        "16",
        "--concurrency",
        "2",
        "--output-tokens",
        "6",
    ];
    let (_, r, recs) = bench_ok(&server.url, "agent-loop", &[&args]);
    // Each user turn: a call, then a turn carrying its result, answered in text.
    assert_eq!(stat_of(&server, "tool_calls"), 8);
    assert_eq!(stat_of(&server, "after_tool_results"), 8);
    let bodies = server.stats.bodies.lock().unwrap().clone();
    let with_result: Vec<&Value> = bodies
        .iter()
        .filter(|b| b["messages"].as_array().unwrap().last().unwrap()["role"] == "tool")
        .collect();
    assert_eq!(with_result.len(), 8);
    for b in with_result {
        let m = b["messages"].as_array().unwrap();
        let (call, result) = (&m[m.len() - 2], &m[m.len() - 1]);
        let id = call["tool_calls"][0]["id"].as_str().unwrap();
        assert_eq!(
            result["tool_call_id"], id,
            "the result answers the call: {b}"
        );
        assert_eq!(
            result["content"]
                .as_str()
                .unwrap()
                .split_whitespace()
                .count(),
            16
        );
    }
    let s = &r["sessions"];
    assert_eq!(
        (s["sessions"].as_u64(), stat(s, "requests_per_session")),
        (Some(4), 4.0),
        "{s}"
    );
    assert_eq!(stat(s, "tool_rounds_per_session"), 2.0);
    // Each session's time is its turns' server time, its tools' 2 × 40 ms
    // and the client's lateness sending each later turn — exactly, from its
    // own records, however loaded the machine (no think time is asked).
    let session = |q: &Value| q["session"].as_u64().unwrap();
    let us = |q: &Value, k: &str| q[k].as_u64().unwrap();
    for end in recs.iter().filter_map(|q| q.get("session_end")) {
        let s = session(
            recs.iter()
                .find(|q| q.get("session_end") == Some(end))
                .unwrap(),
        );
        let mut turns: Vec<&Value> = recs.iter().filter(|q| session(q) == s).collect();
        turns.sort_by_key(|q| us(q, "sent_at_us"));
        let server: u64 = turns
            .iter()
            .map(|q| us(q, "done_at_us") - us(q, "sent_at_us"))
            .sum();
        let lag: u64 = turns[1..]
            .iter()
            .map(|q| us(q, "sent_at_us") - us(q, "scheduled_at_us"))
            .sum();
        for w in turns.windows(2) {
            // A later turn is due when the last answer ended, after the tools.
            let wait = w[1]["tool_wait_us"].as_u64().unwrap_or(0);
            assert_eq!(
                us(w[1], "scheduled_at_us"),
                us(w[0], "done_at_us") + wait,
                "{s}"
            );
        }
        assert_eq!(
            stat(end, "tool_us"),
            80_000.0,
            "two tool runs of 40 ms: {end}"
        );
        assert_eq!(stat(end, "server_us"), server as f64, "{end}");
        let e2e = us(turns.last().unwrap(), "done_at_us") - us(turns[0], "sent_at_us");
        assert_eq!(stat(end, "e2e_us"), e2e as f64, "{end}");
        assert_eq!(
            e2e,
            server + 80_000 + lag,
            "the session is its parts: {end}"
        );
    }
    let waited: Vec<&Value> = recs
        .iter()
        .filter(|q| q["tool_wait_us"] == 40_000)
        .collect();
    assert_eq!(waited.len(), 8);
    assert!(waited
        .iter()
        .all(|q| q["tool_calls"].as_array().is_none_or(Vec::is_empty)));
    assert_eq!(recs.iter().map(session).max(), Some(3));
}

#[test]
fn answers_that_change_above_four_in_flight_are_found_by_a_consistency_sweep() {
    let server = Server::start(ExactConfig {
        faults: Faults {
            diverge_above: Some(4),
            diverge: 0.5,
            ..Faults::default()
        },
        ..exact(20, 2)
    });
    let out = run_dir("consistency");
    let o = tokenscope()
        .args([
            "sweep",
            "--url",
            &server.url,
            "--quiet",
            "--no-metrics",
            "--no-history",
        ])
        .args([
            "--concurrency",
            "1,8",
            "--requests",
            "48",
            "--output-tokens",
            "12",
        ])
        .args(["--consistency", "--keep-text", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let answers = &sweep_doc(&out)["analysis"]["answers"];
    let points = answers["points"].as_array().unwrap();
    let (low, high) = (&points[0]["consistency"], &points[1]["consistency"]);
    assert_eq!(
        (low["compared"].as_u64(), low["identical"].as_u64()),
        (Some(48), Some(48))
    );
    let differ = 48 - high["identical"].as_u64().unwrap();
    assert_eq!(differ, stat_of(&server, "diverged"), "{high}");
    // How many of the prompts drawn to diverge (half) arrive above four in
    // flight depends on the client's pace: a full run on two busy cores
    // read 10 of 48, an idle one about 24. The server's own count is the
    // truth; the share must be the one it implies.
    assert!(differ > 0, "some answers changed: {high}");
    let share = stat(high, "share");
    assert!((share - (48 - differ) as f64 / 48.0).abs() < 1e-9, "{high}");
    assert_eq!(
        high["texts_compared"].as_u64(),
        Some(differ),
        "texts were kept"
    );
    assert!(stat(high, "first_divergence_token.max") < 12.0, "{high}");
    let rules: Vec<&str> = answers["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["answers_change_with_load"]);
    assert!(out.join("point-00/answers.jsonl.gz").exists());
    // compare: the same between the two points' runs.
    let o = tokenscope()
        .args(["compare", "--json"])
        .arg(out.join("point-00"))
        .arg(out.join("point-01"))
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        doc["answers"]["identical"], high["identical"],
        "{}",
        doc["answers"]
    );
    // --consistency compares at temperature 0 only.
    let o = tokenscope()
        .args(["sweep", "--url", &server.url, "--quiet", "--no-metrics"])
        .args([
            "--concurrency",
            "1,2",
            "--requests",
            "2",
            "--consistency",
            "--temperature",
            "0.7",
        ])
        .arg("--out")
        .arg(run_dir("consistency-refused"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_built_in_engine_answers_tool_calls_and_graded_questions_too() {
    let tools = tools_file();
    let args = ["--requests", "8", "--output-tokens", "8", "--tools", &tools];
    let r = bench_builtin("engine-tools", &args);
    assert_eq!(r["tool_calls"]["calls"], 8, "{}", r["tool_calls"]);
    assert_eq!(r["tool_calls"]["valid"], 8);
    let args = [
        "--requests",
        "8",
        "--dataset",
        "builtin:arithmetic",
        "--grade",
        "number",
    ];
    let r = bench_builtin("engine-graded", &args);
    assert_eq!(r["accuracy"]["correct"], 8, "{}", r["accuracy"]);
}
