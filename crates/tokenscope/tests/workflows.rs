//! Agent workflows end to end (`--workflow`, `--replay-trace FILE`):
//! against the exact server, whose timings are known and whose own log
//! says when each request arrived and what it carried.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use tokenscope_sim::exact::ExactConfig;

const FAN_OUT: &str = r#"
[[step]]
name = "plan"
input_tokens = 20
output_tokens = 3

[[step]]
name = "research"
after = ["plan"]
fan_out = 4
input_tokens = 10
output_tokens = "uniform:2..12"

[[step]]
name = "search"
after = ["research"]
each = true
tool = "30ms"

[[step]]
name = "join"
after = ["search"]
input_tokens = 10
output_tokens = 4
"#;

fn step<'a>(recs: &'a [Value], name: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| r["workflow"]["step"] == name)
        .collect()
}

fn us(r: &Value, field: &str) -> f64 {
    r[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} in {r}"))
}

/// The exact server's time for an answer of `n` tokens: TTFT, then n − 1 gaps.
fn nominal_ms(n: u64) -> f64 {
    40.0 + (n.saturating_sub(1) * 10) as f64
}

#[test]
fn a_fan_out_and_join_runs_in_parallel_and_its_makespan_is_the_critical_path() {
    let server = Server::start(ExactConfig {
        keep_bodies: 16,
        ..exact(40, 10)
    });
    let file = write_file("wf-fan-out", FAN_OUT);
    let flags = [
        "--workflow",
        file.to_str().unwrap(),
        "--workflows",
        "1",
        "--concurrency",
        "1",
    ];
    let (_, r, recs) = bench_ok(&server.url, "wf-fan-out", &[&EXACT_CHAT, &flags]);
    assert_eq!(recs.len(), 6, "plan, four branches, join");
    let (plan, research, join) = (
        step(&recs, "plan")[0],
        step(&recs, "research"),
        step(&recs, "join")[0],
    );
    assert_eq!(research.len(), 4);

    // The critical path by hand: the plan, the slowest branch, its tool's
    // 30 ms, the join — each call from its send to its end, the rest the
    // client's gaps between them.
    let slowest = research
        .iter()
        .max_by(|a, b| us(a, "done_at_us").total_cmp(&us(b, "done_at_us")))
        .unwrap();
    let took = |r: &Value| us(r, "done_at_us") - us(r, "sent_at_us");
    let by_hand_llm = took(plan) + took(slowest) + took(join);
    let by_hand_makespan = us(join, "done_at_us") - us(plan, "scheduled_at_us");
    let end = &join["workflow_end"];
    assert_eq!(end["complete"], true, "{end}");
    assert_eq!(
        end["path"],
        serde_json::json!(["plan", "research", "search", "join"])
    );
    let within_a_ms = |got: f64, want: f64, what: &str| {
        assert!(
            (got - want).abs() <= 1000.0,
            "{what}: {got} µs against {want} µs by hand"
        );
    };
    within_a_ms(us(end, "makespan_us"), by_hand_makespan, "makespan");
    within_a_ms(
        us(end, "path_llm_us"),
        by_hand_llm,
        "model calls on the path",
    );
    within_a_ms(us(end, "path_tool_us"), 30_000.0, "the tool's wait");
    // The join waited from its median branch's end (the second of four)
    // to its last's; the tools add their 30 ms to each alike.
    let mut ends: Vec<f64> = research.iter().map(|r| us(r, "done_at_us")).collect();
    ends.sort_by(f64::total_cmp);
    within_a_ms(
        us(end, "path_join_wait_us"),
        ends[3] - ends[1],
        "the join's wait for its slowest branch",
    );
    within_a_ms(
        us(end, "path_llm_us") + us(end, "path_tool_us") + us(end, "path_other_us"),
        us(end, "makespan_us"),
        "the path's parts",
    );
    // And the known timings: each call took what the server's timing says
    // (the client's and the loopback's share on top, generously bounded
    // for a loaded machine; docs/performance.md holds the tight figure).
    let tokens = |r: &Value| r["output_tokens"].as_u64().unwrap();
    let nominal =
        nominal_ms(tokens(plan)) + nominal_ms(tokens(slowest)) + 30.0 + nominal_ms(tokens(join));
    let makespan_ms = us(end, "makespan_us") / 1e3;
    assert!(
        makespan_ms >= nominal && makespan_ms < nominal + 250.0,
        "{makespan_ms} ms against {nominal} ms nominal"
    );

    // The branches ran in parallel: each arrived at the server before any
    // of them was done, by the server's own clock.
    let server_us = |r: &Value, k: &str| r["server_timings"][k].as_f64().unwrap();
    let first_done = research
        .iter()
        .map(|r| server_us(r, "last_sent_mono_us"))
        .fold(f64::MAX, f64::min);
    for r in &research {
        assert!(
            server_us(r, "arrived_mono_us") < first_done,
            "a branch arrived after another ended: {r}"
        );
    }
    let places: BTreeSet<u64> = research
        .iter()
        .map(|r| r["workflow"]["branch"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(places, (0..4).collect());

    // The join's prompt carries the branches' answers, after the
    // conversation they share (the plan's).
    let bodies = server.stats.bodies.lock().unwrap().clone();
    let messages = bodies[5]["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        3,
        "the plan's exchange, then the join's message: {messages:?}"
    );
    assert_eq!(messages[1]["role"], "assistant");
    let said = messages[2]["content"].as_str().unwrap();
    let carried: BTreeSet<String> = said
        .split("\n\n")
        .skip(1)
        .map(tokenscope_load::grading::answer_hash)
        .collect();
    let answers: BTreeSet<String> = research
        .iter()
        .map(|r| r["answer_hash"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(carried, answers, "the join's message: {said:?}");

    // The figures: the workflow, each step apart.
    let w = &r["workflows"];
    assert_eq!(
        (w["workflows"].as_u64(), w["complete"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(w["peak_in_flight_max"], 4);
    assert_eq!(r["steps"]["research"]["requests"], 4);
    assert_eq!(r["steps"]["join"]["requests"], 1);
}

#[test]
fn siblings_that_queue_in_the_server_are_found_and_ones_that_do_not_are_not() {
    let flow = r#"
[[step]]
name = "plan"
input_tokens = 5
output_tokens = 2
[[step]]
name = "research"
after = ["plan"]
fan_out = 4
input_tokens = 5
output_tokens = 3
[[step]]
name = "join"
after = ["research"]
output_tokens = 2
"#;
    let file = write_file("wf-queue", flow);
    let flags = [
        "--workflow",
        file.to_str().unwrap(),
        "--workflows",
        "5",
        "--concurrency",
        "1",
    ];
    // One request at a time in the server: the siblings wait in turn.
    let one_slot = Server::start(ExactConfig {
        slots: Some(1),
        ..exact(20, 5)
    });
    let (_, r, _) = bench_ok(&one_slot.url, "wf-queue", &[&EXACT_CHAT, &flags]);
    let f = r["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "fan_out_queued");
    let f = f.unwrap_or_else(|| panic!("no fan_out_queued in {:?}", rules(&r)));
    let by_place: Vec<f64> = f["evidence"]["ttft_ms_by_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(by_place.len(), 4);
    // Each sibling waits for those answered before it: 30 ms of service each.
    assert!(by_place[3] - by_place[0] > 60.0, "{by_place:?}");

    let free = Server::start(exact(20, 5));
    let (_, r, _) = bench_ok(&free.url, "wf-no-queue", &[&EXACT_CHAT, &flags]);
    assert!(!has_rule(&r, "fan_out_queued"), "{:?}", rules(&r));
    assert_eq!(r["workflows"]["complete"], 5);
}

#[test]
fn a_failed_call_ends_its_workflow_incomplete_and_the_run_says_so() {
    let server = Server::start(ExactConfig {
        faults: tokenscope_sim::faults::Faults {
            http_500: 1.0,
            ..Default::default()
        },
        ..exact(5, 1)
    });
    let file = write_file("wf-fail", FAN_OUT);
    let flags = [
        "--workflow",
        file.to_str().unwrap(),
        "--workflows",
        "2",
        "--concurrency",
        "1",
    ];
    let out = run_dir("wf-fail");
    let o = bench(&server.url, &out, &[&EXACT_CHAT[..], &flags].concat());
    assert_eq!(o.status.code(), Some(4), "every request failed: {o:?}");
    let (r, recs) = (results(&out), records(&out));
    // The plan failed: nothing after it was sent.
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(r["workflows"]["workflows"], 2);
    assert_eq!(r["workflows"]["complete"], 0);
    assert!(r["workflows"].get("makespan_ms").is_none());
}

#[test]
fn bad_workflow_files_are_refused_saying_where_and_why() {
    let cases = [
        (
            "[[step]]\nname = \"a\"\nafter = [\"b\"]\n",
            "step `a`: `after` names `b`",
        ),
        ("[[step]]\nname = \"a\"\nfan_out = 1000000\n", "above 256"),
        ("not toml at all [", "not a workflow in TOML"),
        ("{\"step\": 3}", "not a workflow in JSON"),
    ];
    for (text, want) in cases {
        let file = write_file("wf-bad", text);
        let err = refused(
            "http://127.0.0.1:9",
            &["--workflow", file.to_str().unwrap()],
        );
        assert!(
            err.contains(want) && err.contains("wf-bad"),
            "{text:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    let huge = write_file("wf-huge", &"# x\n".repeat(400_000));
    let err = refused(
        "http://127.0.0.1:9",
        &["--workflow", huge.to_str().unwrap()],
    );
    assert!(err.contains("more than a workflow holds"), "{err}");
    // An endless file (a device) is refused as too big, not read whole.
    let err = refused("http://127.0.0.1:9", &["--workflow", "/dev/zero"]);
    assert!(err.contains("over 1048576 bytes"), "{err}");
    let err = refused("http://127.0.0.1:9", &["--replay-trace"]);
    assert!(err.contains("give --dataset"), "{err}");
}

/// The traces `scripts/peers/otel_trace.py` writes with the OpenTelemetry
/// Python SDK (its docstring draws them).
fn sdk_trace(name: &str, hex: bool) -> std::path::PathBuf {
    let python = std::env::var("PEER_CHECK_PYTHON").expect(
        "PEER_CHECK_PYTHON is not set: run the tests with scripts/test.sh, which installs the OpenTelemetry SDK (scripts/peers/venv.sh)",
    );
    let out = run_dir(name).with_extension("json");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/peers/otel_trace.py"
    );
    let mut cmd = std::process::Command::new(python);
    cmd.arg(script).arg(&out);
    if hex {
        cmd.arg("--hex");
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

#[test]
fn an_sdk_written_trace_is_replayed_with_its_graph_lengths_and_gaps() {
    for hex in [false, true] {
        let trace = sdk_trace("otel-trace", hex);
        let server = Server::start(exact(10, 1));
        let flags = [
            "--replay-trace",
            trace.to_str().unwrap(),
            "--trace-format",
            "otlp-json",
            "--replay-speed",
            "2",
        ];
        let (_, r, recs) = bench_ok(&server.url, "wf-replay", &[&EXACT_CHAT, &flags]);
        assert_eq!(recs.len(), 7, "5 calls, then 2");
        let of = |w: u64| -> Vec<&Value> {
            let mut v: Vec<&Value> = recs.iter().filter(|r| r["workflow"]["id"] == w).collect();
            v.sort_by_key(|r| {
                r["workflow"]["step"].as_str().unwrap()[5..]
                    .parse::<u32>()
                    .unwrap()
            });
            v
        };
        let (a, b) = (of(0), of(1));
        assert_eq!((a.len(), b.len()), (5, 2));
        // The lengths: each call's answer and whole prompt, as its span said.
        let outs: Vec<u64> = a
            .iter()
            .chain(&b)
            .map(|r| r["requested_output_tokens"].as_u64().unwrap())
            .collect();
        assert_eq!(
            outs,
            [10, 21, 20, 22, 30, 8, 12],
            "sorted by start then end: the call ending first is second"
        );
        let ins: Vec<u64> = a
            .iter()
            .chain(&b)
            .map(|r| {
                r["requested_input_tokens"]
                    .as_u64()
                    .or(r["input_tokens"].as_u64())
                    .unwrap()
            })
            .collect();
        assert_eq!(ins, [50, 71, 70, 72, 200, 40, 90]);
        // The gaps: the branches 50 ms (51 for the one that started later)
        // after the plan's end; the join 20 ms after the last branch; the
        // second trace's call 200 ms after its first (its tool).
        let gap = |from: &Value, to: &Value| (us(to, "sent_at_us") - us(from, "done_at_us")) / 1e3;
        let near = |got: f64, want: f64, what: &str| {
            assert!(
                got >= want - 1.0 && got < want + 150.0,
                "{what}: {got:.1} ms, the trace's {want} ms (hex ids: {hex})"
            );
        };
        near(gap(a[0], a[1]), 50.0, "plan → first branch");
        near(gap(a[0], a[2]), 50.0, "plan → second branch");
        near(gap(a[0], a[3]), 51.0, "plan → third branch");
        let last = a[1..4]
            .iter()
            .copied()
            .max_by(|x, y| us(x, "done_at_us").total_cmp(&us(y, "done_at_us")))
            .unwrap();
        let join_after = a[1..4]
            .iter()
            .map(|x| {
                us(x, "done_at_us")
                    + if x["workflow"]["step"] == a[1]["workflow"]["step"] {
                        70_000.0
                    } else {
                        20_000.0
                    }
            })
            .fold(0.0, f64::max);
        assert!(
            us(a[4], "sent_at_us") >= join_after - 1000.0,
            "the join waited for all three and their gaps"
        );
        assert!(us(a[4], "sent_at_us") >= us(last, "done_at_us"));
        near(gap(b[0], b[1]), 200.0, "second trace's tool");
        // The branches overlapped, as in the trace.
        assert!(
            us(a[1], "sent_at_us") < us(a[2], "done_at_us")
                && us(a[2], "sent_at_us") < us(a[1], "done_at_us")
        );
        // The traces' starts, at twice the speed: 2 s apart become 1 s.
        let start_gap = (us(b[0], "scheduled_at_us") - us(a[0], "scheduled_at_us")) / 1e3;
        assert!((start_gap - 1000.0).abs() < 1.0, "{start_gap} ms");
        assert_eq!(r["workflows"]["complete"], 2);
    }
}

#[test]
fn a_first_k_join_goes_on_without_the_straggler_and_a_loop_runs_its_passes() {
    let flow = r#"
[[step]]
name = "a"
output_tokens = 2
[[step]]
name = "quick"
after = ["a"]
output_tokens = 2
[[step]]
name = "medium"
after = ["a"]
output_tokens = 10
[[step]]
name = "slow"
after = ["a"]
output_tokens = 30
[[step]]
name = "join"
after = ["quick", "medium", "slow"]
join = "first:2"
output_tokens = 2
[[step]]
name = "critic"
after = ["join"]
output_tokens = 2
loop = { to = "join", times = 2 }
"#;
    let server = Server::start(exact(40, 10));
    let file = write_file("wf-first-k", flow);
    let flags = [
        "--workflow",
        file.to_str().unwrap(),
        "--workflows",
        "1",
        "--concurrency",
        "1",
    ];
    let (_, r, recs) = bench_ok(&server.url, "wf-first-k", &[&EXACT_CHAT, &flags]);
    // a, three branches, then the join and the critic three times each.
    assert_eq!(recs.len(), 10, "{recs:?}");
    let one = |name: &str| step(&recs, name)[0];
    let joins = step(&recs, "join");
    assert_eq!((joins.len(), step(&recs, "critic").len()), (3, 3));
    let first_join = joins
        .iter()
        .find(|j| j["workflow"].get("pass").is_none())
        .unwrap();
    // The join left after the second branch, while the third still ran.
    assert!(us(first_join, "sent_at_us") >= us(one("medium"), "done_at_us"));
    assert!(us(first_join, "sent_at_us") < us(one("slow"), "done_at_us"));
    // Each later pass of the join waited for the critic before it.
    let mut passes: Vec<(&Value, &Value)> = Vec::new();
    for p in 1..3u64 {
        let j = joins.iter().find(|j| j["workflow"]["pass"] == p).unwrap();
        let c = step(&recs, "critic")
            .into_iter()
            .find(|c| c["workflow"]["pass"].as_u64().unwrap_or(0) == p - 1)
            .unwrap();
        assert!(us(j, "sent_at_us") >= us(c, "done_at_us"), "pass {p}");
        passes.push((j, c));
    }
    let last = recs
        .iter()
        .find(|r| r.get("workflow_end").is_some())
        .unwrap();
    let end = &last["workflow_end"];
    assert_eq!(end["complete"], true);
    assert_eq!(
        end["path"],
        serde_json::json!(["a", "medium", "join", "critic", "join", "critic", "join", "critic"])
    );
    assert_eq!(r["workflows"]["complete"], 1);
}

#[test]
fn workflows_arrive_per_the_open_loops_schedule() {
    let server = Server::start(exact(5, 1));
    let file = write_file("wf-open", FAN_OUT);
    let flags = [
        "--workflow",
        file.to_str().unwrap(),
        "--workflows",
        "3",
        "--rate",
        "10",
        "--arrival",
        "constant",
    ];
    let (_, r, recs) = bench_ok(&server.url, "wf-open", &[&EXACT_CHAT, &flags]);
    let mut starts: Vec<f64> = step(&recs, "plan")
        .iter()
        .map(|p| us(p, "scheduled_at_us") / 1e3)
        .collect();
    starts.sort_by(f64::total_cmp);
    assert_eq!(starts, [0.0, 100.0, 200.0], "a workflow every 100 ms");
    assert_eq!(r["workflows"]["complete"], 3);
    assert_eq!(recs.len(), 18);
}

#[test]
fn hostile_trace_files_are_refused_in_one_line() {
    let cases = [
        ("{\"resourceSpans\": 5}", "not OTLP JSON traces"),
        ("{\"resourceSpans\": []}", "no spans"),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"00","spanId":"01","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}"#,
            "neither 16 bytes of hex nor of base64",
        ),
        (
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"0000000000000001","startTimeUnixNano":"9","endTimeUnixNano":"2"}]}]}]}"#,
            "end is before its start",
        ),
    ];
    for (text, want) in cases {
        let file = write_file("trace-bad", text);
        let err = refused(
            "http://127.0.0.1:9",
            &["--replay-trace", file.to_str().unwrap()],
        );
        assert!(
            err.contains(want) && err.contains("trace-bad"),
            "{text}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[test]
fn a_join_held_by_one_slow_branch_is_found() {
    let mut flow = String::from("[[step]]\nname = \"a\"\noutput_tokens = 2\n");
    for (name, tokens) in [("q1", 2), ("q2", 2), ("q3", 2), ("slow", 40)] {
        flow +=
            &format!("[[step]]\nname = \"{name}\"\nafter = [\"a\"]\noutput_tokens = {tokens}\n");
    }
    flow += "[[step]]\nname = \"join\"\nafter = [\"q1\", \"q2\", \"q3\", \"slow\"]\noutput_tokens = 2\n";
    let server = Server::start(exact(40, 10));
    let file = write_file("wf-slow-branch", &flow);
    let flags = [
        "--workflow",
        file.to_str().unwrap(),
        "--workflows",
        "5",
        "--concurrency",
        "5",
    ];
    let (_, r, _) = bench_ok(&server.url, "wf-slow-branch", &[&EXACT_CHAT, &flags]);
    let f = r["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "join_slow_branch");
    let f = f.unwrap_or_else(|| panic!("no join_slow_branch in {:?}", rules(&r)));
    let e = &f["evidence"];
    assert_eq!(e["step"], "join");
    // The slow branch: 40 + 39 × 10 ms; the median one 40 + 10 ms.
    let (slowest, median) = (
        e["slowest_ms"].as_f64().unwrap(),
        e["median_ms"].as_f64().unwrap(),
    );
    assert!((430.0..700.0).contains(&slowest), "{slowest}");
    assert!(
        (50.0..300.0).contains(&median) && slowest > 2.0 * median,
        "{median}"
    );
}

#[test]
fn a_first_k_join_in_a_loop_waits_for_its_own_pass() {
    let flow = r#"
[[step]]
name = "plan"
output_tokens = 2
[[step]]
name = "quick"
after = ["plan"]
output_tokens = 2
[[step]]
name = "slow"
after = ["plan"]
output_tokens = 30
[[step]]
name = "pick"
after = ["quick", "slow"]
join = "first:1"
output_tokens = 2
loop = { to = "plan", times = 1 }
"#;
    let server = Server::start(exact(20, 10));
    let file = write_file("wf-loop-first", flow);
    let flags = [
        "--workflow",
        file.to_str().unwrap(),
        "--workflows",
        "1",
        "--concurrency",
        "1",
    ];
    let (_, r, recs) = bench_ok(&server.url, "wf-loop-first", &[&EXACT_CHAT, &flags]);
    assert_eq!(recs.len(), 8, "two passes of four");
    let of = |name: &str, pass: u64| {
        *step(&recs, name)
            .iter()
            .find(|x| x["workflow"]["pass"].as_u64().unwrap_or(0) == pass)
            .unwrap()
    };
    // Pass 1's pick waited for pass 1's quick branch, not for pass 0's
    // straggler (the slow branch, still running when pass 1 began).
    assert!(
        us(of("slow", 0), "done_at_us") > us(of("plan", 1), "sent_at_us"),
        "the straggler overlaps pass 1"
    );
    assert!(us(of("pick", 1), "sent_at_us") >= us(of("quick", 1), "done_at_us"));
    assert_eq!(r["workflows"]["complete"], 1);
}

/// An OTLP JSON document of one trace of (start ms, end ms) chat spans,
/// each 1 token in and out.
fn trace_of(spans: &[(u64, u64)]) -> String {
    let ms = 1_000_000u64;
    let spans: Vec<String> = spans
        .iter()
        .enumerate()
        .map(|(i, (a, b))| {
            format!(
                r#"{{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"{:016x}","name":"chat","startTimeUnixNano":"{}","endTimeUnixNano":"{}","attributes":[{{"key":"gen_ai.operation.name","value":{{"stringValue":"chat"}}}},{{"key":"gen_ai.usage.input_tokens","value":{{"intValue":"4"}}}},{{"key":"gen_ai.usage.output_tokens","value":{{"intValue":"1"}}}}]}}"#,
                i + 1,
                a * ms,
                b * ms
            )
        })
        .collect();
    format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
        spans.join(",")
    )
}

#[test]
fn a_replayed_gap_sets_the_critical_path_and_calls_count_in_flight_from_their_send() {
    // A 0–100 ms and B 0–140 ms; C at 150: A's 50 ms gap makes C ready, not B.
    // D 500–1500 and E 1400–1600: apart in the replay (each answers in 10 ms).
    let file = write_file(
        "trace-gaps",
        &trace_of(&[(0, 100), (0, 140), (150, 160), (500, 1500), (1400, 1600)]),
    );
    let server = Server::start(exact(10, 1));
    let flags = ["--replay-trace", file.to_str().unwrap()];
    let (_, _, recs) = bench_ok(&server.url, "trace-gaps", &[&EXACT_CHAT, &flags]);
    let end = &recs
        .iter()
        .find(|r| r.get("workflow_end").is_some())
        .unwrap()["workflow_end"];
    assert_eq!(
        end["peak_in_flight"], 2,
        "A and B together; D and E never: {end}"
    );
    let c = step(&recs, "call 3")[0];
    assert!(us(c, "sent_at_us") >= us(step(&recs, "call 1")[0], "done_at_us") + 49_000.0);
    let path: Vec<&str> = end["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(&path[..2], ["call 1", "call 3"], "{end}");
}

#[test]
fn a_long_gap_in_a_trace_stops_at_the_deadline() {
    // The second call an hour after the first.
    let file = write_file("trace-hour", &trace_of(&[(0, 10), (3_600_000, 3_600_010)]));
    let server = Server::start(exact(5, 1));
    let started = std::time::Instant::now();
    let flags = ["--replay-trace", file.to_str().unwrap(), "--duration", "2s"];
    let (_, r, recs) = bench_ok(&server.url, "trace-hour", &[&EXACT_CHAT, &flags]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(recs.len(), 1, "the first call only");
    assert_eq!(
        (
            r["workflows"]["workflows"].as_u64(),
            r["workflows"]["complete"].as_u64()
        ),
        (Some(1), Some(0))
    );
}

#[test]
fn steps_may_send_dataset_entries() {
    let data = write_file(
        "wf-dataset",
        "{\"prompt\": \"alpha one\", \"max_tokens\": 5}\n{\"prompt\": \"beta two\", \"max_tokens\": 6}\n{\"prompt\": \"gamma three\", \"max_tokens\": 7}\n",
    );
    let flow = "[[step]]\nname = \"ask\"\ndataset = true\n\
                [[step]]\nname = \"fan\"\nafter = [\"ask\"]\nfan_out = 2\ndataset = true\noutput_tokens = 3\n\
                [[step]]\nname = \"join\"\nafter = [\"fan\"]\noutput_tokens = 2\n";
    let file = write_file("wf-dataset-flow", flow);
    let server = Server::start(ExactConfig {
        keep_bodies: 32,
        ..exact(5, 1)
    });
    let flags = [
        "--workflow",
        file.to_str().unwrap(),
        "--dataset",
        data.to_str().unwrap(),
        "--workflows",
        "3",
        "--concurrency",
        "1",
    ];
    let (_, r, recs) = bench_ok(&server.url, "wf-dataset", &[&EXACT_CHAT, &flags]);
    assert_eq!(r["workflows"]["complete"], 3);
    let entries = [("alpha one", 5), ("beta two", 6), ("gamma three", 7)];
    let bodies = server.stats.bodies.lock().unwrap().clone();
    let last_message = |b: &Value| {
        b["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // Each workflow: ask, its two branches, the join.
    for w in 0..3 {
        let (ask, fans) = (&bodies[w * 4], [&bodies[w * 4 + 1], &bodies[w * 4 + 2]]);
        let (text, tokens) = entries
            .iter()
            .find(|(t, _)| last_message(ask) == *t)
            .unwrap_or_else(|| panic!("{ask}"));
        assert_eq!(ask["max_tokens"], *tokens, "the entry's own length: {text}");
        for f in fans {
            assert!(entries.iter().any(|(t, _)| last_message(f) == *t), "{f}");
            assert_eq!(f["max_tokens"], 3, "the step's output_tokens wins");
        }
    }
    assert_eq!(step(&recs, "fan").len(), 6);
    // Either without the other is refused.
    let err = refused(
        "http://127.0.0.1:9",
        &["--workflow", file.to_str().unwrap()],
    );
    assert!(err.contains("step `ask` takes --dataset entries"), "{err}");
    let plain = write_file("wf-no-dataset", FAN_OUT);
    let err = refused(
        "http://127.0.0.1:9",
        &[
            "--workflow",
            plain.to_str().unwrap(),
            "--dataset",
            data.to_str().unwrap(),
        ],
    );
    assert!(err.contains("no step takes its entries"), "{err}");
}
