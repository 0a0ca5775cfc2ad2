//! `sweep --auto` in real time on the built-in engine (Llama-3.1-8B on one
//! H100): it finishes in minutes, its recommendations follow the physics, its
//! knee agrees with `sim plan --sweep` on the virtual clock, and a finished
//! sweep can be resumed and gated on an SLO at a target load.
//!
//! The sweep runs once (the first test to need it) and every test reads it.

mod common;
use common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The workload: 512-token prompts, 256-token answers, 8 requests a point
/// (2 × concurrency where that is more).
const WORKLOAD: [&str; 8] = [
    "--input-tokens",
    "512",
    "--output-tokens",
    "256",
    "--requests",
    "8",
    "--gpu-type",
    "h100-sxm",
];

struct Sweep {
    dir: PathBuf,
    took: Duration,
    doc: Value,
}

fn auto_sweep() -> &'static Sweep {
    static SWEEP: OnceLock<Sweep> = OnceLock::new();
    SWEEP.get_or_init(|| {
        let dir = run_dir("sweep-auto");
        let start = Instant::now();
        let o = tokenscope()
            .args(["sweep", "--auto"])
            .args(WORKLOAD)
            .arg("--out")
            .arg(&dir)
            .output()
            .unwrap();
        let took = start.elapsed();
        assert_ok(&o);
        eprintln!("{}", String::from_utf8_lossy(&o.stdout));
        let doc = sweep_doc(&dir);
        Sweep { dir, took, doc }
    })
}

fn recommendation(doc: &Value, profile: &str) -> Value {
    doc["analysis"]["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["profile"] == profile)
        .unwrap_or_else(|| panic!("no {profile} recommendation"))
        .clone()
}

fn series(doc: &Value) -> &Vec<Value> {
    doc["analysis"]["series"].as_array().unwrap()
}

fn loads(doc: &Value) -> Vec<f64> {
    series(doc)
        .iter()
        .map(|p| p["load"].as_f64().unwrap())
        .collect()
}

#[test]
fn auto_sweep_finishes_in_under_three_minutes_with_a_baseline_probe_and_points_between() {
    let s = auto_sweep();
    eprintln!("sweep --auto took {:.0?}", s.took);
    assert!(s.took < Duration::from_secs(180), "took {:?}", s.took);
    let loads = loads(&s.doc);
    assert_eq!(loads.first(), Some(&1.0), "the synchronous baseline");
    assert_eq!(loads.last(), Some(&256.0), "the maximum-throughput probe");
    assert!(loads.len() >= 5, "points between: {loads:?}");
    // Each point is a full run directory.
    let dirs = std::fs::read_dir(&s.dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("results.json").exists())
        .count();
    assert_eq!(dirs, loads.len());
}

#[test]
fn chat_runs_at_less_concurrency_than_batch() {
    let doc = &auto_sweep().doc;
    let (chat, batch) = (recommendation(doc, "chat"), recommendation(doc, "batch"));
    assert!(
        chat["load"].as_f64().unwrap() < batch["load"].as_f64().unwrap(),
        "chat {chat} batch {batch}"
    );
}

#[test]
fn batch_has_the_most_tokens_per_second_of_the_frontier() {
    let doc = &auto_sweep().doc;
    let series = series(doc);
    let best = doc["analysis"]["pareto_frontier"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            series[i.as_u64().unwrap() as usize]["output_tps"]
                .as_f64()
                .unwrap()
        })
        .fold(0.0, f64::max);
    let batch = recommendation(doc, "batch");
    assert_eq!(batch["expect"]["output_tps"].as_f64().unwrap(), best);
}

#[test]
fn long_context_point_has_no_preemptions() {
    let doc = &auto_sweep().doc;
    let long = recommendation(doc, "long-context");
    assert_eq!(long["expect"]["preemptions"].as_f64(), Some(0.0), "{long}");
    assert!(long["expect"]["kv_usage_max"].as_f64().unwrap() < 0.9);
}

#[test]
fn cost_point_is_the_cheapest_under_its_cap() {
    let doc = &auto_sweep().doc;
    let cap = doc["analysis"]["objectives"]["cost_ttft_cap_ms"]
        .as_f64()
        .unwrap();
    let cheapest = series(doc)
        .iter()
        .filter(|p| p["ttft_p99_ms"].as_f64().unwrap() <= cap)
        .map(|p| p["cost_per_1k"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let cost = recommendation(doc, "cost");
    assert_eq!(cost["expect"]["cost_per_1k"].as_f64().unwrap(), cheapest);
}

#[test]
fn sim_plan_finds_the_same_knee_within_one_step() {
    let s = auto_sweep();
    let loads = loads(&s.doc);
    let list = loads
        .iter()
        .map(|l| format!("{l}"))
        .collect::<Vec<_>>()
        .join(",");
    let plan = run_dir("sweep-auto-plan");
    let o = tokenscope()
        .args(["sim", "plan", "--quiet", "--sweep"])
        .arg(format!("concurrency:{list}"))
        .args(WORKLOAD)
        .arg("--out")
        .arg(&plan)
        .output()
        .unwrap();
    assert_ok(&o);
    let planned = sweep_doc(&plan);
    let step = |doc: &Value| {
        let k = doc["analysis"]["knee"]["load"]
            .as_f64()
            .expect("a knee in the series");
        loads.iter().position(|&l| l == k).unwrap() as i64
    };
    let (real, virt) = (step(&s.doc), step(&planned));
    assert!(
        (real - virt).abs() <= 1,
        "knee at {} in real time, {} on the virtual clock",
        loads[real as usize],
        loads[virt as usize]
    );
}

#[test]
fn resume_keeps_finished_points_and_the_slo_gate_judges_the_target_load() {
    let s = auto_sweep();
    // A copy, so the other tests keep reading the original.
    let copy = run_dir("sweep-auto-resume");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(&s.dir).unwrap() {
        let from = entry.unwrap().path();
        if from.is_dir() {
            let to = copy.join(from.file_name().unwrap());
            std::fs::create_dir_all(&to).unwrap();
            for f in std::fs::read_dir(&from).unwrap() {
                let f = f.unwrap().path();
                std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
            }
        }
    }
    // Eight requests a point: a statement about their maxima is judged, a
    // p99 is not (see below).
    let gate_on = |slo: &str, target: &str| {
        let start = Instant::now();
        let o = tokenscope()
            .args(["sweep", "--auto", "--resume"])
            .args(WORKLOAD)
            .args(["--slo", slo, "--target-load", target])
            .arg("--out")
            .arg(&copy)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr).to_string();
        let doc = sweep_doc(&copy);
        (o, stderr, doc, start.elapsed())
    };
    let gate = |target: &str| gate_on("ttft_max=1s,tpot_max=50ms", target);
    // Every point is taken from the directory: nothing runs again.
    let (o, stderr, doc, took) = gate("16");
    assert_ok(&o);
    let kept = stderr.matches("kept from").count();
    assert_eq!(kept, loads(&s.doc).len(), "{stderr}");
    assert!(
        took < Duration::from_secs(30),
        "resuming ran points: {took:?}"
    );
    let slo = &doc["analysis"]["slo"];
    // TTFT p99 passes 1 s between the measured points; the interpolated
    // capacity lies between the last point that meets it and the next.
    let highest = slo["highest_met_load"].as_f64().unwrap();
    let capacity = slo["interpolated_load"].as_f64().unwrap();
    assert!(capacity >= highest && capacity <= 2.0 * highest, "{slo}");
    assert_eq!(slo["limiting"], "ttft_max");
    assert!(slo["margin_pct"].as_f64().unwrap() >= 0.0);
    assert_eq!(slo["target_met"], true);
    // Beyond the capacity: exit 5.
    let (o, _, doc, _) = gate(&format!("{}", (capacity * 1.5).ceil()));
    assert_eq!(
        o.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(doc["analysis"]["slo"]["target_met"], false);
    assert!(String::from_utf8_lossy(&o.stdout).contains("SLO NOT met"));
    // Every recommendation keeps the SLO: none above its capacity.
    for r in doc["analysis"]["recommendations"].as_array().unwrap() {
        if let Some(load) = r["load"].as_f64() {
            assert!(load <= highest, "{r} past the SLO capacity {highest}");
        }
    }
    // A p99 of eight requests a point cannot be judged: exit 7, and why.
    let (o, stderr, doc, _) = gate_on("ttft_p99=1s", "16");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(7), "{stdout}");
    assert!(stderr.contains("needs ≈ 1,000 requests"), "{stderr}");
    assert!(
        stdout.contains("not enough requests to judge ttft p99"),
        "{stdout}"
    );
    assert!(doc["analysis"]["slo"]["target_met"].is_null());
}
