//! `sim plan --replicas N --router R`: several engines behind one
//! endpoint; where requests go decides what their prefix caches find.

mod common;
use common::*;

/// `sim plan` of four replicas behind `router`, with `args`; its run directory.
fn four_replicas(name: &str, router: &str, args: &[&str]) -> std::path::PathBuf {
    let out = run_dir(&format!("{name}-{router}"));
    let o = tokenscope()
        .args([
            "sim",
            "plan",
            "--quiet",
            "--replicas",
            "4",
            "--router",
            router,
        ])
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    out
}

fn plan(router: &str) -> serde_json::Value {
    let out = four_replicas(
        "fleet",
        router,
        &[
            "--rate",
            "40",
            "--requests",
            "600",
            "--seed",
            "3",
            "--input-tokens",
            "2100",
            "--output-tokens",
            "50",
            // 300 system prompts of 2,048 tokens, more than a replica's cache
            // (at 30 % of the GPU's memory) holds at once.
            "--shared-prefix",
            "2048",
            "--prefix-groups",
            "300",
            "--prefix-zipf",
            "0.8",
            "--gpu-memory-utilization",
            "0.3",
        ],
    );
    let r = results(&out);
    let served: Vec<u64> = records(&out)
        .iter()
        .map(|rec| {
            rec["replica"]
                .as_u64()
                .expect("each record names its replica")
        })
        .collect();
    let per = r["simulated"]["engine_summary"]["replicas"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(per.len(), 4);
    for (i, p) in per.iter().enumerate() {
        let n = served.iter().filter(|&&s| s == i as u64).count() as u64;
        assert_eq!(p["requests"].as_u64(), Some(n), "replica {i}");
    }
    r
}

#[test]
fn prefix_affinity_finds_more_of_the_prompts_cached_than_round_robin() {
    let rr = plan("round-robin");
    let pa = plan("prefix-affinity");
    let kv = plan("kv-aware");
    let hit = |r: &serde_json::Value| stat(r, "tokens.prefix_cache.hit_rate");
    eprintln!(
        "hit rate: round-robin {}, prefix-affinity {}, kv-aware {}",
        hit(&rr),
        hit(&pa),
        hit(&kv)
    );
    // Round-robin spreads each prompt over all four caches; affinity keeps
    // a prompt's requests on one, so it is computed once, not four times.
    assert!(hit(&pa) > hit(&rr) + 0.15, "{} vs {}", hit(&pa), hit(&rr));
    assert!(hit(&kv) > hit(&rr) + 0.15, "{} vs {}", hit(&kv), hit(&rr));
    assert!(stat(&pa, "latency.ttft_ms.p50") < stat(&rr, "latency.ttft_ms.p50"));
    assert_eq!(rr["simulated"]["router"], "round-robin");
    // Round-robin is even, request for request.
    let per = rr["simulated"]["engine_summary"]["replicas"]
        .as_array()
        .unwrap();
    assert!(per.iter().all(|p| p["requests"] == 150), "{per:?}");
}

#[test]
fn prefix_affinity_keeps_a_conversation_on_the_replica_that_holds_it() {
    let hit = |router: &str| {
        let out = four_replicas(
            "fleet-sessions",
            router,
            &[
                "--multi-turn",
                "--turns",
                "6",
                "--think-time",
                "1s",
                "--rate",
                "4",
                "--requests",
                "600",
                "--input-tokens",
                "400",
                "--output-tokens",
                "100",
            ],
        );
        // Every turn of a session on one replica, under affinity.
        if router == "prefix-affinity" {
            let mut home = std::collections::HashMap::new();
            for rec in records(&out) {
                let s = rec["session"].as_u64().unwrap();
                let r = rec["replica"].as_u64().unwrap();
                assert_eq!(*home.entry(s).or_insert(r), r, "session {s} moved");
            }
        }
        stat(&results(&out), "tokens.prefix_cache.hit_rate")
    };
    let (rr, pa) = (hit("round-robin"), hit("prefix-affinity"));
    // Round-robin sends a session's next turn where its history is not
    // (3 times in 4); affinity sends it home.
    assert!(pa > rr + 0.25, "prefix-affinity {pa} vs round-robin {rr}");
}

/// A Mooncake-style trace (`hash_ids` of 512-token blocks): 800 requests at
/// 20/s, each one of 40 documents of four blocks (a long shared context)
/// followed by a block of its own.
fn document_trace() -> std::path::PathBuf {
    let mut next = 10_000u64;
    let text: String = (0..800u64)
        .map(|i| {
            // A hash, so a document's requests do not line up with round-robin's turns.
            let doc = (i.wrapping_mul(2_654_435_761) >> 11) % 40;
            let mut ids: Vec<u64> = (0..4).map(|b| doc * 4 + b).collect();
            ids.push(next);
            next += 1;
            format!(
                "{{\"timestamp\": {}, \"input_length\": 2560, \"output_length\": 32, \"hash_ids\": {ids:?}}}\n",
                i * 50
            )
        })
        .collect();
    write_file("fleet-mooncake", &text)
}

#[test]
fn on_a_mooncake_trace_cache_aware_routing_finds_the_shared_documents() {
    let trace = document_trace();
    let trace = trace.to_str().unwrap();
    let hit = |router: &str| {
        let out = four_replicas(
            "fleet-mooncake",
            router,
            &["--dataset", trace, "--replay-trace", "--seed", "1"],
        );
        let r = results(&out);
        assert_eq!(r["counts"]["requests"], 800);
        stat(&r, "tokens.prefix_cache.hit_rate")
    };
    let (rr, pa, kv) = (hit("round-robin"), hit("prefix-affinity"), hit("kv-aware"));
    eprintln!(
        "Mooncake trace hit rate: round-robin {rr:.3}, prefix-affinity {pa:.3}, kv-aware {kv:.3}"
    );
    // Each document's four blocks (80 % of a prompt) are computed once per
    // replica that sees it: round-robin shows every document to every
    // replica, affinity and the cache-aware router to one.
    assert!(pa > rr + 0.05, "{pa} vs {rr}");
    assert!(kv > rr + 0.05, "{kv} vs {rr}");
    assert!(
        kv <= 0.8 + 1e-9,
        "at most the shared four blocks of five: {kv}"
    );
}
