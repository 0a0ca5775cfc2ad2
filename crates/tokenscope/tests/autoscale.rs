//! The autoscaling threshold a sweep gives: on the built-in engine, the
//! real-time sweep and `sim plan --sweep` agree within one sweep step, and
//! both write KEDA and HPA settings on the engine's vLLM metrics.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

const SERIES: &[&str] = &[
    "--concurrency",
    "6,12,24,48",
    "--requests",
    "120",
    "--input-tokens",
    "1024",
    "--output-tokens",
    "16",
    "--ignore-eos",
    "--slo",
    "ttft_p90=300ms",
    "--quiet",
];

fn scaling(dir: &Path) -> Value {
    let doc = sweep_doc(dir);
    assert!(
        doc["analysis"]["scaling"].is_object(),
        "{}",
        doc["analysis"]
    );
    doc["analysis"]["scaling"].clone()
}

#[test]
fn the_real_time_sweep_and_the_plan_agree_on_the_threshold() {
    let real = run_dir("autoscale-real");
    let o = tokenscope()
        .args(["sweep", "--builtin", "engine", "--out"])
        .arg(&real)
        .args(SERIES)
        .output()
        .unwrap();
    assert_ok(&o);
    let plan = run_dir("autoscale-plan");
    let concurrency = SERIES[1];
    let series: Vec<&str> = SERIES[2..]
        .iter()
        .copied()
        .filter(|a| *a != "--ignore-eos")
        .collect();
    let o = tokenscope()
        .args([
            "sim",
            "plan",
            "--sweep",
            &format!("concurrency:{concurrency}"),
            "--out",
        ])
        .arg(&plan)
        .args(&series)
        .output()
        .unwrap();
    assert_ok(&o);
    let (a, b) = (scaling(&real), scaling(&plan));
    // Within one step of the series: the capacity each interpolated lies in
    // the other's interval between neighbouring points, or they share it.
    let cap = |s: &Value| stat(s, "capacity_load.value");
    let (lo, hi) = (
        stat(&b, "capacity_load.low"),
        stat(&b, "capacity_load.high"),
    );
    let step = hi - lo;
    assert!(
        (cap(&a) - cap(&b)).abs() <= step,
        "real {} vs plan {} (step {step})",
        cap(&a),
        cap(&b)
    );
    // The threshold itself, on both axes, within a quarter.
    for axis in ["requests_per_s.value", "in_server.value"] {
        let (x, y) = (stat(&a, axis), stat(&b, axis));
        assert!((x / y - 1.0).abs() < 0.25, "{axis}: real {x} vs plan {y}");
    }
    assert_eq!(a["metric"], "vllm:num_requests_running");
    assert_eq!(a["waiting_metric"], "vllm:num_requests_waiting");
    for dir in [&real, &plan] {
        let keda = std::fs::read_to_string(dir.join("keda.yaml")).unwrap();
        assert!(keda.contains("sum(vllm:num_requests_running{namespace=\"default\"}) + sum(vllm:num_requests_waiting"), "{keda}");
        let hpa = std::fs::read_to_string(dir.join("hpa.yaml")).unwrap();
        assert!(hpa.contains("name: vllm_requests_in_server"), "{hpa}");
    }
    // The threshold is below the capacity by the headroom, on both axes.
    let rps = stat(&a, "requests_per_s.value");
    assert!(rps > 0.0 && stat(&a, "in_server.value") > 0.0);
    assert_eq!(stat(&a, "headroom_pct"), 20.0);
    // And the summary says it, with what it rests on.
    let o = tokenscope()
        .arg("report")
        .arg(&real)
        .args(["--format", "terminal"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("autoscaling threshold per replica (20 % headroom)"),
        "{text}"
    );
    assert!(text.contains("reaching its limit near load"), "{text}");
}

#[test]
fn without_an_slo_there_is_no_threshold_and_no_autoscaler_settings() {
    let plan = run_dir("autoscale-no-slo");
    let o = tokenscope()
        .args([
            "sim",
            "plan",
            "--sweep",
            "concurrency:4,8",
            "--requests",
            "40",
            "--quiet",
            "--out",
        ])
        .arg(&plan)
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(sweep_doc(&plan)["analysis"]["scaling"].is_null());
    assert!(!plan.join("keda.yaml").exists());
}
