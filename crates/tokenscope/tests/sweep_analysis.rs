//! The sweep report on the virtual clock (`sim plan --sweep`): frontier, knee
//! and the four service profiles' operating points follow the physics.

mod common;
use common::*;

#[test]
fn recommendations_follow_the_physics() {
    let out = run_dir("sweep-analysis");
    let o = tokenscope()
        .args([
            "sim",
            "plan",
            "--quiet",
            "--sweep",
            "concurrency:1,4,16,64,256",
            "--requests",
            "300",
        ])
        .args([
            "--output-tokens",
            "512",
            "--gpu-memory-utilization",
            "0.4",
            "--gpu-type",
            "h100-sxm",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let doc = sweep_doc(&out);
    let a = &doc["analysis"];
    let series = a["series"].as_array().unwrap();
    let rec = |profile: &str| {
        a["recommendations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["profile"] == profile)
            .unwrap()
            .clone()
    };
    let (chat, batch, cost, long) = (rec("chat"), rec("batch"), rec("cost"), rec("long-context"));
    eprintln!(
        "chat {} batch {} cost {} long-context {}",
        chat["load"], batch["load"], cost["load"], long["load"]
    );
    // Chat runs at less load than batch.
    assert!(chat["load"].as_f64().unwrap() < batch["load"].as_f64().unwrap());
    // Batch has the most tokens/s on the frontier.
    let frontier: Vec<usize> = a["pareto_frontier"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap() as usize)
        .collect();
    let best_tps = frontier
        .iter()
        .map(|&i| series[i]["output_tps"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(batch["expect"]["output_tps"].as_f64().unwrap(), best_tps);
    // Long context: no preemptions there, though the heaviest load preempts.
    assert_eq!(long["expect"]["preemptions"].as_f64().unwrap(), 0.0);
    assert!(series.last().unwrap()["preemptions"].as_f64().unwrap() > 0.0);
    // Cost: the least cost per 1K among points under its TTFT cap.
    let cap = a["objectives"]["cost_ttft_cap_ms"].as_f64().unwrap();
    let cheapest = series
        .iter()
        .filter(|p| p["ttft_p99_ms"].as_f64().unwrap() <= cap)
        .map(|p| p["cost_per_1k"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(cost["expect"]["cost_per_1k"].as_f64().unwrap(), cheapest);
    // Every recommendation says why, with numbers.
    for r in [&chat, &batch, &cost, &long] {
        assert!(
            r["why"]
                .as_str()
                .unwrap()
                .chars()
                .any(|c| c.is_ascii_digit()),
            "{r}"
        );
    }
}

/// A list in `--concurrency` or `--rate` is a series: `sim plan` runs each
/// load as `--sweep` does (it ran the first alone, silently, before), the
/// same figures point for point; with `--sweep` too it is refused.
#[test]
fn a_listed_load_is_planned_as_the_series_it_names() {
    let (listed, swept) = (run_dir("sweep-listed"), run_dir("sweep-swept"));
    let common = ["--requests", "30", "--no-history"];
    let o = sim_plan(&listed, &[&["--rate", "2,8"][..], &common].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = sim_plan(&swept, &[&["--sweep", "rate:2,8"][..], &common].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for point in ["point-00", "point-01"] {
        let (a, b) = (results(&listed.join(point)), results(&swept.join(point)));
        assert_eq!(a["throughput"], b["throughput"], "{point}");
        assert_eq!(a["latency"], b["latency"], "{point}");
    }
    let rates: Vec<f64> = ["point-00", "point-01"]
        .iter()
        .map(|p| {
            results(&listed.join(p))["config"]["load"]["rate"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert_eq!(rates, [2.0, 8.0]);
    let o = sim_plan(
        &run_dir("sweep-both"),
        &[
            "--concurrency",
            "1,4",
            "--sweep",
            "rate:1,2",
            "--requests",
            "4",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("give the series once"));
}
