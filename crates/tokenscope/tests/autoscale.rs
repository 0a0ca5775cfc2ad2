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
    eprintln!("capacity: real {}, plan {}", cap(&a), cap(&b));
    assert!(
        (cap(&a) - cap(&b)).abs() <= step,
        "real {} vs plan {} (step {step})",
        cap(&a),
        cap(&b)
    );
    // The threshold itself, on both axes, within 40 % (the real-time engine
    // slows on a loaded machine; the step rule above is the bound).
    for axis in ["requests_per_s.value", "in_server.value"] {
        let (x, y) = (stat(&a, axis), stat(&b, axis));
        eprintln!("{axis}: real {x:.2}, plan {y:.2}");
        assert!((x / y - 1.0).abs() < 0.4, "{axis}: real {x} vs plan {y}");
    }
    assert_eq!(a["metric"], "vllm:num_requests_running");
    assert_eq!(a["waiting_metric"], "vllm:num_requests_waiting");
    for dir in [&real, &plan] {
        let keda = std::fs::read_to_string(dir.join("keda.yaml")).unwrap();
        assert!(keda.contains("sum(vllm:num_requests_running{namespace=\"default\"}) + sum(vllm:num_requests_waiting"), "{keda}");
        let hpa = std::fs::read_to_string(dir.join("hpa.yaml")).unwrap();
        assert!(hpa.contains("name: vllm_requests_in_server"), "{hpa}");
        // The HPA passes Kubernetes' own schema (KEDA's ScaledObject is a
        // custom resource those schemas do not hold).
        kubernetes_validate(&dir.join("hpa.yaml"));
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

/// A Mooncake-style trace: 2 requests/s for 60 s, 20/s until 180 s, 2/s until 300 s.
fn rate_step() -> std::path::PathBuf {
    let mut lines = String::new();
    let (mut t, mut seed) = (0.0f64, 7u64);
    while t < 300.0 {
        let rate = if (60.0..180.0).contains(&t) {
            20.0
        } else {
            2.0
        };
        // Exponential gaps from a small LCG: the same trace every run.
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = ((seed >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        t += -u.ln() / rate;
        lines.push_str(&format!(
            "{{\"timestamp\": {:.3}, \"input_length\": 512, \"output_length\": 128}}\n",
            t * 1e3
        ));
    }
    write_file("rate-step.jsonl", &lines)
}

fn autoscaled(name: &str, trace: &Path, policy: &str) -> (Value, Vec<Value>, Vec<Value>) {
    let out = run_dir(name);
    let o = tokenscope()
        .args([
            "sim",
            "plan",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "l40s",
            "--dataset",
        ])
        .arg(trace)
        .args([
            "--replay-trace",
            "--replicas",
            "1..6",
            "--router",
            "least-outstanding",
        ])
        .args(["--autoscale", policy, "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    // The report draws the replicas and TTFT through the changes.
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        page.contains("Replicas serving") && page.contains("TTFT by when the request was sent")
    );
    let series = std::fs::read_to_string(out.join("timeseries.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (results(&out), records(&out), series)
}

/// TTFT p99 (ms) of the requests sent during the step.
fn step_ttft_p99(recs: &[Value]) -> f64 {
    let mut t: Vec<f64> = recs
        .iter()
        .filter(|r| (60e6..180e6).contains(&r["sent_at_us"].as_f64().unwrap()))
        .map(|r| {
            (r["first_token_at_us"].as_f64().unwrap() - r["sent_at_us"].as_f64().unwrap()) / 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[(t.len() * 99 / 100).min(t.len() - 1)]
}

#[test]
fn a_rate_step_is_served_later_with_a_slower_autoscaler_and_replicas_follow_the_policy() {
    let trace = rate_step();
    let policy =
        |delay: &str| format!("metric=in-server,target=16,delay={delay},interval=10s,cooldown=30s");
    let (fast, fast_recs, series) = autoscaled("autoscale-10s", &trace, &policy("10s"));
    let (slow, slow_recs, _) = autoscaled("autoscale-60s", &trace, &policy("60s"));
    let (a, b) = (step_ttft_p99(&fast_recs), step_ttft_p99(&slow_recs));
    eprintln!("TTFT p99 in the step: delay 10 s {a:.0} ms, 60 s {b:.0} ms");
    assert!(
        b > a * 1.5,
        "TTFT p99 in the step: delay 60 s {b} ms vs 10 s {a} ms"
    );

    let scaling = |r: &Value| r["simulated"]["engine_summary"]["autoscale"].clone();
    let s = scaling(&fast);
    let startup = stat(&s, "startup_s");
    let events = s["events"].as_array().unwrap().clone();
    let up = &events[0];
    // Up only after the step (at 60 s) and the 10 s delay, from the minimum, within the maximum.
    assert!(stat(up, "t_s") >= 70.0 && stat(up, "t_s") <= 100.0, "{up}");
    assert_eq!(
        (up["from"].as_u64(), up["to"].as_u64().unwrap() <= 6),
        (Some(1), true)
    );
    // The new replicas serve after their start-up, not before.
    let serving = |t: f64| {
        series
            .iter()
            .find(|x| x["t_s"].as_f64().unwrap() >= t)
            .map(|x| x["replicas"].as_u64().unwrap())
            .unwrap()
    };
    assert_eq!(
        serving(stat(up, "t_s") + startup - 2.0),
        1,
        "still starting"
    );
    assert_eq!(
        serving(stat(up, "t_s") + startup + 2.0),
        up["to"].as_u64().unwrap()
    );
    assert!(series.iter().all(|x| x["replicas"].as_u64().unwrap() <= 6));
    // After the step the fleet shrinks, one replica per cooldown, never below 1.
    let downs: Vec<&Value> = events
        .iter()
        .filter(|e| e["to"].as_u64() < e["from"].as_u64())
        .collect();
    assert!(!downs.is_empty(), "{events:?}");
    assert!(downs
        .iter()
        .all(|e| stat(e, "t_s") > 180.0 && e["to"].as_u64().unwrap() >= 1));
    // Paid for by replica-seconds: more than one replica's whole plan, less than six.
    let window = stat(&fast, "window.duration_s");
    let paid = stat(&s, "replica_seconds");
    assert!(
        paid > window && paid < 6.0 * window,
        "{paid} replica-seconds over {window} s"
    );
    // The slower policy's replicas came later, so it paid for fewer of them.
    let slow_paid = stat(&scaling(&slow), "replica_seconds");
    eprintln!("replica-seconds: delay 10 s {paid:.0}, 60 s {slow_paid:.0}");
    assert!(slow_paid < paid);
}

#[test]
fn autoscale_flags_refuse_what_cannot_run() {
    for (args, why) in [
        (&["--replicas", "1..4"][..], "is a range for --autoscale"),
        (
            &["--replicas", "4..2", "--autoscale", "target=8"][..],
            "a range (1..8)",
        ),
        (
            &["--replicas", "1..4", "--autoscale", "metric=gpu,target=1"][..],
            "running, waiting or in-server",
        ),
    ] {
        let o = tokenscope()
            .args(["sim", "plan", "--requests", "10", "--quiet"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(why), "{args:?}: {err}");
    }
}
