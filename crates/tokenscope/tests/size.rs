//! `sim size`: the cheapest deployments meeting an SLO, each one checked by
//! re-running the `sim plan` command it lists.

mod common;
use common::*;
use serde_json::Value;

fn size(args: &[&str]) -> (Option<i32>, Value, String) {
    let o = tokenscope()
        .args(["sim", "size", "--json"])
        .args(args)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (
        o.status.code(),
        doc,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const SEVENTY_B: [&str; 10] = [
    "--model",
    "llama-3.1-70b",
    "--rate",
    "20",
    "--input-tokens",
    "1024",
    "--output-tokens",
    "256",
    "--slo",
    "ttft_p99=1s,tpot_p99=50ms",
];

#[test]
fn seventy_b_at_twenty_per_second_every_option_meets_the_slo_when_re_run() {
    let (code, doc, err) = size(&SEVENTY_B);
    assert_eq!(code, Some(0), "{err}");
    // Measured 1.3 s on this 2-core machine (docs/simulator.md); the bound
    // here only has to hold on a loaded one.
    assert!(doc["seconds"].as_f64().unwrap() < 60.0, "{doc:#}");
    let options = doc["report"]["options"].as_array().unwrap();
    assert_eq!(options.len(), 5, "{doc:#}");
    let costs: Vec<f64> = options
        .iter()
        .map(|o| o["usd_per_hour"].as_f64().unwrap())
        .collect();
    assert!(
        costs.windows(2).all(|w| w[0] <= w[1]),
        "cheapest first: {costs:?}"
    );
    // Shapes that do not fit are said so, with the memory they needed.
    let rejected = doc["report"]["rejected"].as_array().unwrap();
    assert!(rejected
        .iter()
        .any(|r| r["candidate"].as_str().unwrap().starts_with("1 × a10g")
            && r["why"].as_str().unwrap().contains("does not fit")));
    rerun_every_option(&doc, "size-rerun");
}

/// Runs a listed `sim plan` command's flags (its words after `tokenscope
/// sim plan`) into `out`.
fn plan(flags: &[&str], out: &std::path::Path) -> std::process::Output {
    sim_plan(out, &[flags, &["--no-history"]].concat())
}

/// Re-runs each listed option's `sim plan` command: it meets the SLO with
/// the figures `sim size` printed.
fn rerun_every_option(doc: &Value, name: &str) {
    let options = doc["report"]["options"].as_array().unwrap();
    let commands = doc["commands"].as_array().unwrap();
    let dir = run_dir(name);
    for (i, (o, cmd)) in options.iter().zip(commands).enumerate() {
        assert!(o["margin_pct"].as_f64().unwrap() >= 0.0, "{o}");
        // It holds the target: its capacity within the SLO is at least the rate.
        assert!(o["slo_capacity_rps"].as_f64().unwrap() >= 20.0, "{o}");
        assert_eq!(
            o["usd_per_hour"].as_f64().unwrap(),
            o["candidate"]["usd_per_gpu_hour"].as_f64().unwrap() * o["gpus"].as_f64().unwrap()
        );
        let words: Vec<&str> = cmd.as_str().unwrap().split_whitespace().collect();
        assert_eq!(&words[..3], ["tokenscope", "sim", "plan"]);
        let out = dir.join(format!("option-{i}"));
        let run = plan(&words[3..], &out);
        // Exit 0: the SLO is met (5 would be not met, 7 not judged).
        assert_eq!(
            run.status.code(),
            Some(0),
            "{cmd}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let r = results(&out);
        assert_eq!(r["slo"]["met"], true);
        for objective in o["objectives"].as_array().unwrap() {
            let key = format!("{}_ms", objective["metric"].as_str().unwrap());
            let stat = objective["stat"].as_str().unwrap();
            let planned = stat_of(&r, &key, stat);
            let sized = objective["value_ms"].as_f64().unwrap();
            assert!(
                (planned - sized).abs() < 1e-6,
                "{cmd}: {key} {stat} {planned} vs {sized}"
            );
        }
    }
}

#[test]
fn disaggregated_shapes_are_sized_and_re_run_as_listed() {
    let (code, doc, err) = size(
        &[
            &SEVENTY_B[..],
            &["--gpu", "h100-sxm", "--disaggregate", "--top", "8"],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0), "{err}");
    let options = doc["report"]["options"].as_array().unwrap();
    let split: Vec<&Value> = options
        .iter()
        .filter(|o| o["prefill_replicas"].is_u64())
        .collect();
    assert!(!split.is_empty(), "{doc:#}");
    for o in &split {
        assert!(o["candidate"]["disaggregated"] == true);
        let p = o["prefill_replicas"].as_u64().unwrap();
        assert!(p >= 1 && p < o["replicas"].as_u64().unwrap(), "{o}");
    }
    assert!(doc["commands"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c.as_str().unwrap().contains("--disaggregate ")));
    rerun_every_option(&doc, "size-rerun-split");
    fewer_replicas_miss_at_every_split(&doc);
}

/// A disaggregated option of n replicas is the fewest: every split of n − 1
/// replicas, re-run as `sim plan --disaggregate P:D`, misses the SLO (exit
/// 5). This checks the search's claim without its assumption (that more
/// prefill replicas never hurt TTFT, nor more decode ones the rest).
fn fewer_replicas_miss_at_every_split(doc: &Value) {
    let options = doc["report"]["options"].as_array().unwrap();
    let commands = doc["commands"].as_array().unwrap();
    let dir = run_dir("size-fewer");
    let mut checked = 0;
    for (i, (o, cmd)) in options.iter().zip(commands).enumerate() {
        let n = o["replicas"].as_u64().unwrap();
        if !o["prefill_replicas"].is_u64() || n <= 2 {
            continue;
        }
        let words: Vec<&str> = cmd.as_str().unwrap().split_whitespace().collect();
        let flags = &words[3..];
        let at = flags.iter().position(|w| *w == "--disaggregate").unwrap() + 1;
        for p in 1..n - 1 {
            let split = format!("{p}:{}", n - 1 - p);
            let mut args = flags.to_vec();
            args[at] = &split;
            let run = plan(&args, &dir.join(format!("option-{i}-{split}")));
            assert_eq!(
                run.status.code(),
                Some(5),
                "{split} instead of {cmd}: {}",
                String::from_utf8_lossy(&run.stderr)
            );
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "no option of more than two replicas to check: {doc:#}"
    );
}

/// `--engine all` sizes every shape under each engine's scheduling rules:
/// the list mixes engines, each option names its engine, and its re-run
/// under that engine meets the SLO with the same figures.
#[test]
fn every_engine_is_searched_and_each_option_re_runs_under_its_own() {
    let (code, doc, err) = size(
        &[
            &SEVENTY_B[..],
            &["--gpu", "h100-sxm,mi300x", "--engine", "all", "--top", "8"],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0), "{err}");
    let options = doc["report"]["options"].as_array().unwrap();
    let engines: std::collections::BTreeSet<&str> = options
        .iter()
        .map(|o| o["candidate"]["engine"].as_str().unwrap())
        .collect();
    assert!(
        engines.len() >= 2,
        "options from several engines: {engines:?}"
    );
    for (o, cmd) in options.iter().zip(doc["commands"].as_array().unwrap()) {
        let engine = o["candidate"]["engine"].as_str().unwrap();
        assert!(
            cmd.as_str()
                .unwrap()
                .contains(&format!("--engine {engine} ")),
            "{cmd}"
        );
    }
    rerun_every_option(&doc, "size-rerun-engines");
}

fn stat_of(r: &Value, key: &str, stat: &str) -> f64 {
    r["latency"][key][stat]
        .as_f64()
        .unwrap_or_else(|| panic!("{key}.{stat}"))
}

#[test]
fn no_option_is_said_plainly_with_each_shapes_reason() {
    let (code, doc, err) = size(&[&SEVENTY_B[..], &["--gpu", "l4,a10g"]].concat());
    assert_eq!(code, Some(5), "{err}");
    assert_eq!(doc["report"]["options"], serde_json::json!([]));
    let why: Vec<&str> = doc["report"]["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["why"].as_str().unwrap())
        .collect();
    assert!(why.iter().any(|w| w.contains("does not fit")), "{why:?}");
    assert!(why.iter().any(|w| w.contains("even alone")), "{why:?}");
    let o = tokenscope()
        .args(["sim", "size"])
        .args([&SEVENTY_B[..], &["--gpu", "l4,a10g"]].concat())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("No deployment meets the SLO"));
}

#[test]
fn a_closed_loop_or_a_missing_slo_is_refused() {
    for args in [
        &["--concurrency", "8", "--slo", "ttft_p99=1s"][..],
        &["--rate", "1,2", "--slo", "ttft_p99=1s"],
        &["--rate", "2"],
    ] {
        let o = tokenscope()
            .args(["sim", "size"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
}

/// A reasoning workload: the thinking is decode work, so the same answers
/// at the same rate need more of a fleet, and the answer-start objective
/// is what each option is sized to (and meets when re-run).
#[test]
fn a_reasoning_workload_is_sized_by_its_answer_start_and_needs_more() {
    // SEVENTY_B's workload, without its SLO.
    let base = [&SEVENTY_B[..8], &["--gpu", "h100-sxm", "--top", "2"]].concat();
    let slo = ["--slo", "answer_start_p99=15s,tpot_p99=50ms"];
    let (code, plain, err) = size(&[&base[..], &slo].concat());
    assert_eq!(code, Some(0), "{err}");
    let thinking = ["--reasoning-tokens", "512"];
    let (code, reasoning, err) = size(&[&base[..], &slo, &thinking].concat());
    assert_eq!(code, Some(0), "{err}");
    let cheapest = |doc: &Value| {
        doc["report"]["options"][0]["usd_per_hour"]
            .as_f64()
            .unwrap()
    };
    assert!(
        cheapest(&reasoning) > cheapest(&plain),
        "thinking 512 tokens a request costs more GPUs: {} vs {}",
        cheapest(&reasoning),
        cheapest(&plain)
    );
    let command = reasoning["commands"][0].as_str().unwrap();
    assert!(command.contains("--reasoning-tokens 512"), "{command}");
    rerun_every_option(&reasoning, "size-reasoning-rerun");
    // Run, the answer starts after 512 decode steps of thinking.
    let out = run_dir("size-reasoning-answer");
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_ok(&plan(&words[3..], &out));
    let r = results(&out);
    let thinking_ms = stat(&r, "latency.answer_start_ms.p50") - stat(&r, "latency.ttft_ms.p50");
    let decode_ms = 512.0 * stat(&r, "latency.tpot_ms.p50");
    assert!(
        (0.8..1.25).contains(&(thinking_ms / decode_ms)),
        "{thinking_ms} ms thinking, 512 × TPOT = {decode_ms} ms"
    );
}

/// 100,000-token prompts at 2 req/s: one replica given a random share of
/// the arrivals (rate ÷ `--max-replicas`) misses TTFT p99, yet the fleet
/// behind the least-outstanding router, which sends a burst to idle
/// replicas, meets it. `sim size` gives that fleet (it said "misses even
/// with 40 replicas" before), and the command it lists meets the SLO. An
/// L4, whose KV cache holds less than one such request, is left out: its
/// engine refuses them.
#[test]
fn a_fleet_its_router_carries_is_sized_though_a_random_share_misses() {
    let load = [
        "--model",
        "llama-3.1-8b",
        "--input-tokens",
        "100000",
        "--slo",
        "ttft_p99=20s",
    ];
    let shapes = ["--gpu", "h100-sxm,l4", "--tp", "1", "--dtype", "bf16"];
    let (code, doc, err) =
        size(&[&load[..], &shapes, &["--rate", "2", "--max-replicas", "40"]].concat());
    assert_eq!(code, Some(0), "{err}");
    // The share at 40 replicas misses on its own.
    let dir = run_dir("size-share");
    let share = plan(
        &[
            &load[..],
            &["--gpu", "h100-sxm", "--rate", "0.05", "--requests", "200"],
        ]
        .concat(),
        &dir.join("share"),
    );
    assert_eq!(
        share.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&share.stderr)
    );
    let options = doc["report"]["options"].as_array().unwrap();
    assert_eq!(options.len(), 1, "{doc:#}");
    let replicas = options[0]["replicas"].as_u64().unwrap();
    assert!((1..=40).contains(&replicas), "{doc:#}");
    let cmd = doc["commands"][0].as_str().unwrap();
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let run = plan(&words[3..], &dir.join("option"));
    assert_eq!(
        run.status.code(),
        Some(0),
        "{cmd}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rejected = doc["report"]["rejected"].as_array().unwrap();
    let l4 = rejected
        .iter()
        .find(|r| r["candidate"].as_str().unwrap().contains("l4"))
        .expect("the L4 is left out");
    let why = l4["why"].as_str().unwrap();
    assert!(
        why.contains("refuses") && why.contains("maximum context length"),
        "{why}"
    );
}
