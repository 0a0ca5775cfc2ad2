//! Multi-turn sessions and prefix caching: each turn carries the
//! conversation so far with the server's own answers; the prefix-cache hits
//! the server reports per request are picked up, and agree with the
//! engine's own count and with an independent count from the workload.

mod common;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};

/// Records by (session, turn).
fn by_turn(recs: &[Value]) -> BTreeMap<(u64, u64), Value> {
    recs.iter()
        .map(|r| {
            let key = (r["session"].as_u64().unwrap(), r["turn"].as_u64().unwrap());
            (key, r.clone())
        })
        .collect()
}

#[test]
fn synthetic_sessions_grow_by_each_answer_and_hit_the_engines_prefix_cache() {
    let engine = Engine::start(default_engine());
    let out = run_dir("sessions-engine");
    let o = bench(
        &engine.url,
        &out,
        &[
            "--multi-turn",
            "--turns",
            "3",
            "--concurrency",
            "2",
            "--requests",
            "12",
            "--input-tokens",
            "40",
            "--output-tokens",
            "10",
            "--seed",
            "4242",
        ],
    );
    assert_ok(&o);
    let recs = records(&out);
    assert_eq!(recs.len(), 12);
    let turns = by_turn(&recs);
    assert_eq!(turns.len(), 12, "4 sessions of 3 turns, each turn once");
    for (&(s, k), r) in &turns {
        let input = r["input_tokens"].as_u64().unwrap();
        let cached = r["cached_tokens"].as_u64().unwrap();
        if k == 0 {
            assert_eq!((input, cached), (40, 0), "session {s}: a fresh start");
            continue;
        }
        let prev = &turns[&(s, k - 1)];
        let context =
            prev["input_tokens"].as_u64().unwrap() + prev["output_tokens"].as_u64().unwrap();
        // The prompt is the last one, its answer, and a new 40-token message.
        assert_eq!(input, context + 40, "session {s} turn {k}");
        // The engine finds every full 16-token block of what it computed:
        // the last prompt and its answer but for the answer's last token,
        // whose KV is never computed.
        assert_eq!(cached, (context - 1) / 16 * 16, "session {s} turn {k}");
    }
    let r = results(&out);
    let cache = &r["tokens"]["prefix_cache"];
    let (cached, prompt): (u64, u64) = recs.iter().fold((0, 0), |(c, p), r| {
        (
            c + r["cached_tokens"].as_u64().unwrap(),
            p + r["input_tokens"].as_u64().unwrap(),
        )
    });
    assert_eq!(cache["cached_tokens"].as_u64(), Some(cached));
    assert_eq!(cache["prompt_tokens"].as_u64(), Some(prompt));
    // The engine's own counters (vllm:prefix_cache_*) say the same.
    let server = stat(&r, "server.metrics.prefix_cache_hit_rate");
    assert!(
        (stat(cache, "hit_rate") - server).abs() < 1e-9,
        "per request {} vs server metrics {server}",
        cache["hit_rate"]
    );
    let by = r["latency"]["ttft_ms_by_turn"].as_object().unwrap();
    assert_eq!(by.keys().collect::<Vec<_>>(), ["0", "1", "2"]);
    assert_eq!(stat(&by["1"], "count"), 4.0);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("TTFT turn 2"), "{stdout}");
    assert!(stdout.contains("prefix cache"), "{stdout}");

    // `sim plan` of the same sessions on the virtual clock: the same turns,
    // the same prompt lengths, the same cache hits.
    let planned = run_dir("sessions-plan");
    let o = tokenscope()
        .args(["sim", "plan", "--quiet", "--multi-turn", "--turns", "3"])
        .args([
            "--concurrency",
            "2",
            "--requests",
            "12",
            "--input-tokens",
            "40",
        ])
        .args(["--output-tokens", "10", "--seed", "4242", "--out"])
        .arg(&planned)
        .output()
        .unwrap();
    assert_ok(&o);
    let shape = |t: &BTreeMap<(u64, u64), Value>| -> Vec<(u64, u64, u64, u64)> {
        t.iter()
            .map(|(&(s, k), r)| {
                let n = |f: &str| r[f].as_u64().unwrap();
                (s, k, n("input_tokens"), n("cached_tokens"))
            })
            .collect()
    };
    assert_eq!(shape(&by_turn(&records(&planned))), shape(&turns));
}

#[test]
fn sharegpt_conversations_are_replayed_turn_by_turn_with_the_servers_answers() {
    let (url, bodies) = logging_server();
    let text = r#"[
      {"id": "a", "conversations": [
        {"from": "human", "value": "hello there"}, {"from": "gpt", "value": "one two three"},
        {"from": "human", "value": "and then?"}, {"from": "gpt", "value": "four"},
        {"from": "human", "value": "bye"}]},
      {"id": "b", "conversations": [{"from": "gpt", "value": "no question"}]},
      {"id": "c", "conversations": [
        {"from": "human", "value": "solo"}, {"from": "gpt", "value": "five six"}]}
    ]"#;
    let file = write_file("sessions-sharegpt", text);
    let out = run_dir("sessions-sharegpt-run");
    let o = bench_chat(
        &url,
        &out,
        &[
            "--multi-turn",
            "--think-time",
            "150ms",
            "--dataset",
            file.to_str().unwrap(),
        ],
    );
    assert_ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("4 entries in 2 sessions"), "{stderr}");
    // Every turn once, and nothing more.
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 4);
    let messages = |b: &Value| -> Vec<String> {
        b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                format!(
                    "{}:{}",
                    m["role"].as_str().unwrap(),
                    m["content"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(messages(&bodies[0]), ["user:hello there"]);
    // The server's answer ("ok"), not the dataset's, is carried forward.
    assert_eq!(
        messages(&bodies[1]),
        ["user:hello there", "assistant:ok", "user:and then?"]
    );
    assert_eq!(
        messages(&bodies[2]),
        [
            "user:hello there",
            "assistant:ok",
            "user:and then?",
            "assistant:ok",
            "user:bye"
        ]
    );
    assert_eq!(messages(&bodies[3]), ["user:solo"]);
    // Each turn asks for its reply's length; the last turn has none to copy.
    let max: Vec<Option<u64>> = bodies.iter().map(|b| b["max_tokens"].as_u64()).collect();
    assert_eq!(max[0], Some(3));
    assert_eq!(max[1], Some(1));
    assert_eq!(max[3], Some(2));
    // The user thinks 150 ms between an answer and the next turn.
    let turns = by_turn(&records(&out));
    for k in 1..3 {
        let gap = turns[&(0, k)]["sent_at_us"].as_u64().unwrap()
            - turns[&(0, k - 1)]["done_at_us"].as_u64().unwrap();
        assert!((149_000..2_000_000).contains(&gap), "think time {gap} µs");
    }
}

#[test]
fn jsonl_lines_group_into_sessions_and_a_trace_has_none() {
    let (url, bodies) = logging_server();
    let text = "{\"session_id\": \"x\", \"prompt\": \"x1\"}\n\
                {\"session_id\": 7, \"prompt\": \"y1\"}\n\
                {\"session_id\": \"x\", \"prompt\": \"x2\"}\n";
    let file = write_file("sessions-jsonl", text);
    let out = run_dir("sessions-jsonl-run");
    let o = bench_chat(
        &url,
        &out,
        &["--multi-turn", "--dataset", file.to_str().unwrap()],
    );
    assert_ok(&o);
    let bodies = bodies.lock().unwrap().clone();
    let last: Vec<&str> = bodies
        .iter()
        .map(|b| {
            b["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(
        last,
        ["x1", "x2", "y1"],
        "one user at a time, session by session"
    );
    assert_eq!(bodies[1]["messages"].as_array().unwrap().len(), 3);

    let trace = write_file(
        "sessions-trace",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,10,2\n",
    );
    let o = bench_chat(
        &url,
        &run_dir("sessions-trace-run"),
        &["--multi-turn", "--dataset", trace.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("--multi-turn needs conversations"),
        "{stderr}"
    );
}

/// A small Mooncake trace whose requests share block prefixes: (hash_ids, input_length).
fn mooncake_requests() -> Vec<(Vec<u64>, u64)> {
    let mut reqs = Vec::new();
    let mut next = 100u64;
    let mut roots: Vec<Vec<u64>> = Vec::new();
    for i in 0..24u64 {
        let blocks = 1 + (i * 7 % 4) as usize;
        let mut ids: Vec<u64> = match roots.get((i % 3) as usize) {
            Some(root) if i % 2 == 0 => root[..root.len().min(blocks)].to_vec(),
            _ => Vec::new(),
        };
        while ids.len() < blocks {
            ids.push(next);
            next += 1;
        }
        roots.push(ids.clone());
        // Some end mid-block, some on a block's edge.
        let input = (blocks as u64 - 1) * 512 + [512, 300, 17, 511][(i % 4) as usize];
        reqs.push((ids, input));
    }
    reqs
}

fn mooncake_file(name: &str) -> std::path::PathBuf {
    let text: String = mooncake_requests()
        .iter()
        .enumerate()
        .map(|(i, (ids, input))| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": {input}, \"output_length\": 3, \"hash_ids\": {ids:?}}}\n",
                i * 10
            )
        })
        .collect();
    write_file(name, &text)
}

/// Prompt tokens a cache of `block`-token blocks finds, one request after
/// another, never short of room: the leading blocks an earlier prompt
/// held whole at the same place after the same Mooncake blocks, short of
/// each prompt's last token. Counted from the file alone.
fn expected_hits(block: u64) -> (u64, u64) {
    let mut seen: HashSet<(Vec<u64>, u64)> = HashSet::new();
    let (mut hits, mut queries) = (0, 0);
    for (ids, input) in mooncake_requests() {
        queries += input;
        let whole = |j: u64| (j + 1) * block <= input;
        let key = |j: u64| (ids[..=((j * block) / 512) as usize].to_vec(), j);
        let mut j = 0;
        while (j + 1) * block < input && seen.contains(&key(j)) {
            j += 1;
        }
        hits += j * block;
        let mut j = 0;
        while whole(j) {
            seen.insert(key(j));
            j += 1;
        }
    }
    (hits, queries)
}

#[test]
fn a_mooncake_traces_shared_blocks_hit_the_engine_as_the_trace_says() {
    let file = mooncake_file("sessions-mooncake");
    let engine = Engine::start(default_engine());
    let out = run_dir("sessions-mooncake-run");
    let o = bench(
        &engine.url,
        &out,
        &[
            "--concurrency",
            "1",
            "--dataset",
            file.to_str().unwrap(),
            "--seed",
            "77",
        ],
    );
    assert_ok(&o);
    let r = results(&out);
    let (hits, queries) = expected_hits(16);
    assert!(
        hits > 0 && hits < queries,
        "the trace reuses some of its prompts"
    );
    let cache = &r["tokens"]["prefix_cache"];
    assert_eq!(cache["prompt_tokens"].as_u64(), Some(queries));
    assert_eq!(cache["cached_tokens"].as_u64(), Some(hits), "{cache}");
    let server = stat(&r, "server.metrics.prefix_cache_hit_rate");
    assert!(
        (server - hits as f64 / queries as f64).abs() < 1e-9,
        "server {server}"
    );
}

#[test]
fn sim_plan_finds_a_mooncake_traces_reuse_per_512_token_block() {
    let file = mooncake_file("sessions-mooncake-plan");
    let out = run_dir("sessions-mooncake-plan-run");
    let o = tokenscope()
        .args(["sim", "plan", "--concurrency", "1", "--quiet", "--dataset"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let r = results(&out);
    let summary = &r["simulated"]["engine_summary"];
    // Whole 512-token blocks are found where they recur; a partial last
    // block only when the same partial block recurs (docs/simulator.md).
    let (whole_hits, queries) = expected_hits(512);
    let (fine_hits, _) = expected_hits(16);
    let hits = summary["prefix_cache_hits_tokens"].as_u64().unwrap();
    assert_eq!(
        summary["prefix_cache_queries_tokens"].as_u64(),
        Some(queries)
    );
    assert!(
        (whole_hits..=fine_hits).contains(&hits),
        "{hits} outside {whole_hits}..={fine_hits}"
    );
    assert_eq!(
        r["tokens"]["prefix_cache"]["cached_tokens"].as_u64(),
        Some(hits),
        "the records carry the engine's count"
    );
}

#[test]
fn prompts_left_in_the_cache_by_an_earlier_run_are_called_out() {
    let engine = Engine::start(default_engine());
    let run = |name: &str, seed: &str| {
        let out = run_dir(name);
        let args = [
            "--concurrency",
            "2",
            "--requests",
            "6",
            "--output-tokens",
            "4",
            "--seed",
            seed,
        ];
        assert_ok(&bench(&engine.url, &out, &args));
        results(&out)
    };
    let first = run("stale-first", "31");
    assert!(
        !has_rule(&first, "stale_prefix_cache"),
        "new prompts: {:?}",
        rules(&first)
    );
    assert_eq!(stat(&first, "tokens.prefix_cache.hit_rate"), 0.0);
    // The same seed again: the same prompts, found in the cache.
    let again = run("stale-again", "31");
    assert!(stat(&again, "tokens.prefix_cache.hit_rate") > 0.9);
    assert!(
        has_rule(&again, "stale_prefix_cache"),
        "{:?}",
        rules(&again)
    );
    let fresh = run("stale-fresh", "32");
    assert!(
        !has_rule(&fresh, "stale_prefix_cache"),
        "{:?}",
        rules(&fresh)
    );
}

#[test]
fn prefix_groups_are_found_in_the_cache_after_each_groups_first_request() {
    // 60 requests over 3 equally likely groups (all three turn up): every
    // request but each group's first finds its 512-token prefix cached.
    let args = [
        "--concurrency",
        "1",
        "--requests",
        "60",
        "--input-tokens",
        "600",
        "--output-tokens",
        "4",
        "--shared-prefix",
        "512",
        "--prefix-groups",
        "3",
        "--prefix-zipf",
        "0",
        "--seed",
        "5",
    ];
    let want = (60 - 3) * 512;
    let planned = run_dir("groups-plan");
    let o = tokenscope()
        .args(["sim", "plan", "--quiet"])
        .args(args)
        .arg("--out")
        .arg(&planned)
        .output()
        .unwrap();
    assert_ok(&o);
    let r = results(&planned);
    assert_eq!(
        r["tokens"]["prefix_cache"]["cached_tokens"].as_u64(),
        Some(want),
        "sim plan"
    );
    let engine = Engine::start(default_engine());
    let out = run_dir("groups-engine");
    assert_ok(&bench(&engine.url, &out, &args));
    let r = results(&out);
    assert_eq!(
        r["tokens"]["prefix_cache"]["cached_tokens"].as_u64(),
        Some(want),
        "sim serve"
    );
    assert_eq!(r["config"]["prefix_groups"]["groups"], 3);
}
