//! Reasoning models against ground truth: the built-in exact server thinks
//! for 40 tokens (10 ms apart, after 50 ms), then answers, and shows its
//! thinking in a `reasoning_content` field, in `<think>` tags, or not at all
//! (hidden); or thinks past its whole length (a spent budget). The answer's
//! start is checked against the server's own send of the first answer
//! token, on the host's shared clock.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;
use tokenscope_sim::exact::{ExactConfig, ReasoningAs};

const REASONING: u64 = 40;

fn thinking(how: ReasoningAs, reasoning_tokens: u64) -> Server {
    Server::start(ExactConfig {
        ttft: Duration::from_millis(50),
        itl: Duration::from_millis(10),
        reasoning_tokens,
        reasoning_as: how,
        ..ExactConfig::default()
    })
}

/// A run of 6 requests of 60 tokens at 2 streams; its results and records.
fn run(server: &Server, name: &str) -> (Value, Vec<Value>) {
    let out = run_dir(name);
    let args = exact_chat(&[
        "--concurrency",
        "2",
        "--requests",
        "6",
        "--output-tokens",
        "60",
    ]);
    let output = bench(&server.url, &out, &args);
    assert_ok(&output);
    (results(&out), records(&out))
}

/// What every mode that answers shares: the answer start agrees with the
/// server's send, the counts are exact, TPOT is the server's 10 ms.
fn check_answering(r: &Value, recs: &[Value], mode: &str) {
    let delays = read_delays_ms(r, recs, "first_answer_at_us", "answer_sent_mono_us");
    read_within_a_millisecond(delays, mode);
    for q in recs {
        assert_eq!(q["reasoning_tokens"], REASONING, "{mode}: {q}");
        assert_eq!(q["output_tokens"], 60, "{mode}: reasoning counts as output");
    }
    let reasoning = &r["tokens"]["reasoning"];
    assert_eq!(reasoning["tokens"], 6 * REASONING, "{mode}");
    assert_eq!(reasoning["answer_tokens"], 6 * 20, "{mode}");
    // Answer start ≈ 50 ms + 40 × 10 ms; TPOT stays the server's 10 ms.
    let answer_p50 = stat(r, "latency.answer_start_ms.p50");
    assert!((440.0..700.0).contains(&answer_p50), "{mode}: {answer_p50}");
    let tpot = stat(r, "latency.tpot_ms.p50");
    assert!((9.0..15.0).contains(&tpot), "{mode}: TPOT {tpot}");
    // The answer's own pace is the server's too.
    let answer_tpot = stat(r, "latency.answer_tpot_ms.p50");
    assert!(
        (9.0..15.0).contains(&answer_tpot),
        "{mode}: answer TPOT {answer_tpot}"
    );
    // Streamed thinking: 40 tokens 10 ms apart between the first chunk and
    // the answer's; hidden thinking is inside TTFT, not told apart.
    match mode {
        "hidden" => assert!(r["latency"].get("reasoning_ms").is_none(), "{mode}"),
        _ => {
            let thinking = stat(r, "latency.reasoning_ms.p50");
            assert!(
                (390.0..600.0).contains(&thinking),
                "{mode}: thinking {thinking}"
            );
        }
    }
    assert!(!has_rule(r, "multi_token_chunks"), "{mode}: {:?}", rules(r));
}

#[test]
fn reasoning_streamed_in_a_field_is_told_from_the_answer() {
    let server = thinking(ReasoningAs::Field, REASONING);
    let (r, recs) = run(&server, "reasoning-field");
    check_answering(&r, &recs, "field");
    // TTFT is the first reasoning token, as vLLM's is.
    let ttft = stat(&r, "latency.ttft_ms.p50");
    assert!((45.0..200.0).contains(&ttft), "{ttft}");
    assert!(!has_rule(&r, "reasoning_hidden"));
}

#[test]
fn reasoning_in_think_tags_is_told_from_the_answer() {
    let server = thinking(ReasoningAs::Tags, REASONING);
    let (r, recs) = run(&server, "reasoning-tags");
    check_answering(&r, &recs, "tags");
    assert!(stat(&r, "latency.ttft_ms.p50") < 200.0);
}

#[test]
fn hidden_reasoning_is_named_and_per_token_figures_are_over_the_streamed_tokens() {
    let server = thinking(ReasoningAs::Hidden, REASONING);
    let (r, recs) = run(&server, "reasoning-hidden");
    check_answering(&r, &recs, "hidden");
    assert!(recs.iter().all(|q| q["reasoning_hidden"] == true));
    assert!(has_rule(&r, "reasoning_hidden"), "{:?}", rules(&r));
    // Nothing streamed before the answer: TTFT holds the thinking.
    assert!(stat(&r, "latency.ttft_ms.p50") > 440.0);
    // 20 streamed chunks, one token each — not 60 tokens over 20 chunks.
    let chunk_tokens = &r["tokens"]["tokens_per_chunk"];
    assert_eq!(
        chunk_tokens.as_object().map(|o| o.len()),
        Some(1),
        "{chunk_tokens}"
    );
}

#[test]
fn a_spent_thinking_budget_is_named() {
    // 100 tokens of thinking, 60 allowed: the answer never starts.
    let server = thinking(ReasoningAs::Field, 100);
    let (r, recs) = run(&server, "reasoning-budget");
    assert!(recs.iter().all(|q| q["first_answer_at_us"].is_null()));
    assert!(recs.iter().all(|q| q["reasoning_tokens"] == 60));
    assert!(has_rule(&r, "thinking_budget_exhausted"), "{:?}", rules(&r));
    assert_eq!(r["tokens"]["reasoning"]["budget_spent_requests"], 6);
    assert!(
        r["latency"]["answer_start_ms"].is_null(),
        "no answer, no answer start"
    );
}

#[test]
fn a_hidden_budget_spent_whole_is_named_not_failed() {
    // Hidden thinking past the whole length: the stream carries no text at
    // all, only a length finish and usage saying every token was reasoning.
    let server = thinking(ReasoningAs::Hidden, 100);
    let (r, recs) = run(&server, "reasoning-hidden-budget");
    assert_eq!(r["counts"]["failed"], 0, "{}", r["counts"]);
    assert!(recs
        .iter()
        .all(|q| q["reasoning_tokens"] == 60 && q["output_tokens"] == 60));
    assert!(recs.iter().all(|q| q["first_answer_at_us"].is_null()));
    assert!(has_rule(&r, "thinking_budget_exhausted"), "{:?}", rules(&r));
    assert!(has_rule(&r, "reasoning_hidden"), "{:?}", rules(&r));
    assert_eq!(r["tokens"]["reasoning"]["budget_spent_requests"], 6);
    // The server still took its 50 ms + 59 × 10 ms before saying so.
    assert!(stat(&r, "latency.e2e_ms.p50") > 600.0);
}

#[test]
fn a_whole_response_that_reasoned_has_no_answer_start_and_is_no_spent_budget() {
    let server = thinking(ReasoningAs::Field, REASONING);
    let out = run_dir("reasoning-whole");
    let args = exact_chat(&["--requests", "3", "--output-tokens", "60", "--no-stream"]);
    assert_ok(&bench(&server.url, &out, &args));
    let r = results(&out);
    assert_eq!(r["counts"]["failed"], 0);
    assert_eq!(r["tokens"]["reasoning"]["tokens"], 3 * REASONING);
    assert_eq!(r["tokens"]["reasoning"]["budget_spent_requests"], 0);
    assert!(
        !has_rule(&r, "thinking_budget_exhausted"),
        "{:?}",
        rules(&r)
    );
    assert!(r["latency"].get("answer_start_ms").is_none());
}

#[test]
fn a_model_that_does_not_reason_reports_no_reasoning() {
    let server = thinking(ReasoningAs::Field, 0);
    let (r, recs) = run(&server, "reasoning-none");
    assert!(recs.iter().all(|q| q.get("reasoning_tokens").is_none()));
    assert!(r["tokens"].get("reasoning").is_none());
    assert!(r["latency"].get("answer_start_ms").is_none());
}

#[test]
fn an_slo_on_the_answer_start_judges_what_the_user_waits_for() {
    let server = thinking(ReasoningAs::Field, REASONING);
    let out = run_dir("reasoning-slo");
    // TTFT (~50 ms) meets 300 ms; the answer start (~450 ms) does not.
    let slo = "ttft_p50=300ms,answer_start_p50=300ms";
    let args = exact_chat(&[
        "--concurrency",
        "6",
        "--requests",
        "30",
        "--output-tokens",
        "60",
        "--slo",
        slo,
    ]);
    let output = bench(&server.url, &out, &args);
    assert_eq!(output.status.code(), Some(5), "the SLO is not met: exit 5");
    let r = results(&out);
    let judged: Vec<(String, bool)> = r["slo"]["objectives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metric"].as_str().unwrap().to_string(),
                o["met"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        judged,
        [
            ("ttft".to_string(), true),
            ("answer_start".to_string(), false)
        ],
        "{}",
        r["slo"]
    );
    assert_eq!(
        r["slo"]["good_requests"], 0,
        "no request answered within 300 ms"
    );
}

#[test]
fn a_sweep_of_a_reasoning_model_recommends_for_chat_by_the_answer_start_and_says_so() {
    let server = thinking(ReasoningAs::Field, REASONING);
    let out = run_dir("reasoning-sweep");
    // The chat limit of 300 ms: every TTFT (~50 ms) is under it, every
    // answer start (~450 ms) over it.
    let output = tokenscope()
        .args([
            "sweep",
            "--url",
            &server.url,
            "--quiet",
            "--no-history",
            "--out",
        ])
        .arg(&out)
        .args(exact_chat(&[
            "--concurrency",
            "1,2",
            "--requests",
            "4",
            "--output-tokens",
            "60",
        ]))
        .args(["--objectives", "chat_ttft_p99=300ms"])
        .args(["--gpu-price", "3.6", "--gpus", "1"])
        .output()
        .unwrap();
    assert_ok(&output);
    let doc = sweep_doc(&out);
    let rec = |profile: &str| {
        doc["analysis"]["recommendations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["profile"] == profile)
            .unwrap_or_else(|| panic!("a {profile} recommendation"))
            .clone()
    };
    let chat = rec("chat");
    let objective = chat["objective"].as_str().unwrap();
    assert!(objective.contains("answer start p99"), "{chat}");
    assert_eq!(chat["judged_by"], "answer start p99, TPOT p99", "{chat}");
    // The fifth profile judges by the whole answer and what it costs.
    let agent = rec("agent");
    assert_eq!(agent["judged_by"], "cost per answer, E2E p99", "{agent}");
    assert!(
        agent["why"].as_str().unwrap().contains("per answer"),
        "{agent}"
    );
    assert!(
        agent["why"]
            .as_str()
            .unwrap()
            .contains("67 % of output thinking"),
        "{agent}"
    );
    for p in doc["points"].as_array().unwrap() {
        let c = &p["results"]["efficiency"]["cost"];
        // 20 of every 60 tokens answered: an answer token costs 3× an output token.
        let (out_1k, answer_1k) = (
            c["usd_per_1k_output_tokens"].as_f64().unwrap(),
            c["usd_per_1k_answer_tokens"].as_f64().unwrap(),
        );
        assert!((answer_1k / out_1k - 3.0).abs() < 1e-9, "{c}");
        // Each answer is 60 output tokens.
        let per_answer = c["usd_per_answer"].as_f64().unwrap();
        assert!((per_answer / (out_1k * 0.06) - 1.0).abs() < 1e-9, "{c}");
    }
    for p in doc["analysis"]["series"].as_array().unwrap() {
        let share = p["reasoning_share"].as_f64().unwrap();
        assert!((share - 40.0 / 60.0).abs() < 1e-9, "{p}");
    }
    assert!(
        chat["load"].is_null(),
        "no load starts its answers within 300 ms: {chat}"
    );
    assert!(
        chat["why"].as_str().unwrap().contains("answer start p99"),
        "{chat}"
    );
}

#[test]
fn the_answer_start_reaches_the_reports_and_the_peers_dialects() {
    let server = thinking(ReasoningAs::Field, REASONING);
    let out = run_dir("reasoning-reports");
    let args = exact_chat(&[
        "--concurrency",
        "2",
        "--requests",
        "4",
        "--output-tokens",
        "60",
    ]);
    assert_ok(&bench(&server.url, &out, &args));
    let report = |format: &str| {
        let o = tokenscope()
            .args(["report", "--format", format])
            .arg(&out)
            .output()
            .unwrap();
        assert_ok(&o);
        String::from_utf8(o.stdout).unwrap()
    };
    assert!(report("md").contains("| answer start |"));
    let text = report("terminal");
    assert!(
        text.contains(
            "reasoning             160 of 240 output tokens (67 %) in 4 requests; 80 answer tokens"
        ),
        "{text}"
    );
    report("aiperf");
    let aiperf: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("profile_export_aiperf.json")).unwrap(),
    )
    .unwrap();
    let ttfo = aiperf["time_to_first_output_token"]["p50"]
        .as_f64()
        .expect("TTFO");
    assert!((440.0..700.0).contains(&ttfo), "{ttfo}");
    report("guidellm");
    let guidellm: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("benchmarks.json")).unwrap())
            .unwrap();
    let m = &guidellm["benchmarks"][0]["metrics"];
    assert!(
        m["time_to_first_output_token_ms"]["successful"]["median"].is_number(),
        "{m}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("answer start"));
}

#[test]
fn sim_plan_decodes_the_thinking_before_the_answer() {
    let out = run_dir("reasoning-plan");
    let args = [
        "--seed",
        "3",
        "--concurrency",
        "8",
        "--requests",
        "64",
        "--output-tokens",
        "100",
        "--reasoning-tokens",
        "200",
        "--slo",
        "answer_start_p50=1s",
        "--no-history",
    ];
    let output = sim_plan(&out, &args);
    assert_eq!(
        output.status.code(),
        Some(5),
        "thinking 200 tokens takes over 1 s to answer"
    );
    let r = results(&out);
    assert_eq!(r["config"]["reasoning_tokens"], "200");
    assert_eq!(r["tokens"]["reasoning"]["tokens"], 64 * 200);
    assert_eq!(r["tokens"]["reasoning"]["answer_tokens"], 64 * 100);
    for q in records(&out) {
        assert_eq!(
            (q["output_tokens"].as_u64(), q["reasoning_tokens"].as_u64()),
            (Some(300), Some(200))
        );
        // The thinking is 200 decode steps: the answer starts that long after the first token.
        let thought_ms = (q["first_answer_at_us"].as_f64().unwrap()
            - q["first_token_at_us"].as_f64().unwrap())
            / 1e3;
        let times = chunk_times(&q);
        let tpot_ms = (times[times.len() - 1] - times[0]) as f64 / 1e3 / 299.0;
        let per_token = thought_ms / 200.0;
        assert!(
            (per_token / tpot_ms - 1.0).abs() < 0.15,
            "thinking {per_token:.2} ms a token against TPOT {tpot_ms:.2} ms"
        );
    }
}

/// `sim serve --reasoning-tokens`: the simulated engine thinks within each
/// request's max_tokens, decoding its thoughts like any token, and shows
/// them in each of the three manners.
#[test]
fn the_simulated_engine_thinks_before_it_answers_in_each_manner() {
    for how in ["field", "tags", "hidden"] {
        let port = free_port();
        let server = SimServe::start(port, &["--reasoning-tokens", "30", "--reasoning-as", how]);
        let url = format!("http://127.0.0.1:{port}");
        let out = run_dir(&format!("reasoning-sim-serve-{how}"));
        let args = [
            "--api",
            "openai-chat",
            "--no-metrics",
            "--requests",
            "8",
            "--concurrency",
            "4",
            "--output-tokens",
            "50",
        ];
        let o = bench(&url, &out, &args);
        drop(server);
        assert_ok(&o);
        let (r, recs) = (results(&out), records(&out));
        for q in &recs {
            assert_eq!(q["reasoning_tokens"], 30, "{how}: {q}");
            assert_eq!(
                q["output_tokens"], 50,
                "{how}: thinking is within max_tokens"
            );
        }
        assert_eq!(r["tokens"]["reasoning"]["answer_tokens"], 8 * 20, "{how}");
        let (ttft, answer, tpot) = (
            stat(&r, "latency.ttft_ms.p50"),
            stat(&r, "latency.answer_start_ms.p50"),
            stat(&r, "latency.tpot_ms.p50"),
        );
        if how == "hidden" {
            assert!(has_rule(&r, "reasoning_hidden"), "{:?}", rules(&r));
            assert_eq!(ttft, answer, "the first streamed token is the answer's");
        } else {
            // The thinking is 30 decode steps between the first token and
            // the answer's (on a loaded machine, generous bounds).
            let ratio = (answer - ttft) / (30.0 * tpot);
            assert!((0.7..1.5).contains(&ratio), "{how}: {ttft} {answer} {tpot}");
            assert!(!has_rule(&r, "reasoning_hidden"), "{how}");
        }
    }
}
