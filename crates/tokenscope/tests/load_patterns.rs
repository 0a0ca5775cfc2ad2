//! Arrival processes and the closed loop, checked from the per-request records.

mod common;
use common::*;

/// The Kolmogorov–Smirnov statistic of `samples` against Exp(rate).
fn ks_exponential(samples: &mut [f64], rate: f64) -> f64 {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = samples.len() as f64;
    samples
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let cdf = 1.0 - (-rate * x).exp();
            (cdf - i as f64 / n)
                .abs()
                .max(((i + 1) as f64 / n - cdf).abs())
        })
        .fold(0.0, f64::max)
}

#[test]
fn poisson_arrivals_keep_the_rate_and_are_exponential() {
    let server = Server::start(exact(2, 1));
    let out = run_dir("poisson");
    let rate = 100.0;
    let o = bench(
        &server.url,
        &out,
        &[
            "--rate",
            "100",
            "--requests",
            "600",
            "--output-tokens",
            "4",
            "--input-tokens",
            "16",
            "--seed",
            "3",
        ],
    );
    assert_ok(&o);
    let mut sent: Vec<f64> = records(&out)
        .iter()
        .map(|r| r["sent_at_us"].as_f64().unwrap() / 1e6)
        .collect();
    assert_eq!(sent.len(), 600);
    sent.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let achieved = (sent.len() - 1) as f64 / (sent[sent.len() - 1] - sent[0]);
    assert!(
        (achieved - rate).abs() / rate < 0.05,
        "achieved {achieved:.1}/s for a target of {rate}/s"
    );
    let mut gaps: Vec<f64> = sent.windows(2).map(|w| w[1] - w[0]).collect();
    let d = ks_exponential(&mut gaps, rate);
    // Critical value at alpha = 0.01 is 1.628 / sqrt(n).
    let critical = 1.628 / (gaps.len() as f64).sqrt();
    assert!(
        d < critical,
        "KS D = {d:.4} ≥ {critical:.4}: inter-arrivals are not exponential"
    );
    // And the test can tell: constant gaps are far from exponential.
    let mut constant = vec![1.0 / rate; gaps.len()];
    assert!(ks_exponential(&mut constant, rate) > critical);
}

#[test]
fn closed_loop_holds_exactly_n_in_flight() {
    let server = Server::start(exact(5, 5));
    let out = run_dir("closed");
    let o = bench(
        &server.url,
        &out,
        &[
            "--concurrency",
            "8",
            "--requests",
            "80",
            "--output-tokens",
            "10",
        ],
    );
    assert_ok(&o);
    let r = results(&out);
    assert_eq!(stat(&r, "throughput.concurrency.max"), 8.0);
    let steady = stat(&r, "window.steady.concurrency_mean");
    assert!(
        steady > 7.8 && steady <= 8.0 + 1e-9,
        "steady-state concurrency {steady}"
    );
    // From the records: whenever a request is sent, at most 7 others are in flight.
    let recs = records(&out);
    for r in &recs {
        let t = r["sent_at_us"].as_u64().unwrap();
        let in_flight = recs
            .iter()
            .filter(|o| {
                o["sent_at_us"].as_u64().unwrap() <= t && o["done_at_us"].as_u64().unwrap() > t
            })
            .count();
        assert!(in_flight <= 8, "{in_flight} in flight at {t} µs");
    }
}

#[test]
fn users_of_one_answer_length_started_together_are_called_waves() {
    // The exact server takes every request the same 50 + 19 × 20 ms: eight
    // users started together end within a millisecond of each other, wave
    // after wave; started over one request's lifetime they stay 54 ms apart.
    let server = Server::start(exact(50, 20));
    let run = |name: &str, extra: &[&str]| {
        let out = run_dir(name);
        let mut args = vec!["--concurrency", "8", "--requests", "48"];
        args.extend_from_slice(extra);
        let o = bench(&server.url, &out, &args);
        assert_ok(&o);
        results(&out)
    };
    let together = run("waves-together", &["--output-tokens", "20"]);
    assert!(has_rule(&together, "waves"), "{}", together["diagnosis"]);
    // All but each wave's first end with the one before: 7 of every 8.
    let ended = stat(&together, "counts.finished_together");
    assert!(ended >= 35.0, "{ended} of 48 ended together");
    let f = together["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "waves")
        .unwrap();
    assert!(
        f["message"].as_str().unwrap().contains("--ramp-up 0.4s"),
        "{f}"
    );
    let ramped = run(
        "waves-ramped",
        &["--output-tokens", "20", "--ramp-up", "430ms"],
    );
    assert!(!has_rule(&ramped, "waves"), "{}", ramped["diagnosis"]);
    assert!(stat(&ramped, "counts.finished_together") <= 5.0);
    // Answers of several lengths: not a load that keeps waves.
    let varied = run("waves-varied", &["--output-tokens", "uniform:15..25"]);
    assert!(!has_rule(&varied, "waves"), "{}", varied["diagnosis"]);
}

/// A ramp-up longer than the run: the users still waiting for their slot
/// leave once every request is handed out, or at the deadline, instead of
/// holding the run open until their slot (an hour here; it waited).
#[test]
fn users_still_ramping_up_leave_when_the_run_is_done() {
    let server = Server::start(exact(5, 5));
    for (name, until) in [
        ("ramp-budget", &["--requests", "6"][..]),
        ("ramp-deadline", &["--duration", "1s"]),
    ] {
        let out = run_dir(name);
        let started = std::time::Instant::now();
        let o = tokenscope()
            .args(["bench", "--url", &server.url, "--quiet", "--out"])
            .arg(&out)
            .args([
                "--concurrency",
                "4",
                "--ramp-up",
                "1h",
                "--output-tokens",
                "10",
            ])
            .args(until)
            .output()
            .unwrap();
        assert_ok(&o);
        // An hour's ramp over four users: the second's slot is 15 minutes in.
        assert!(
            started.elapsed().as_secs() < 120,
            "{name}: {:?}",
            started.elapsed()
        );
        let recs = records(&out);
        assert!(!recs.is_empty(), "{name}");
        assert!(recs.iter().all(|r| r["error_kind"].is_null()), "{name}");
    }
}

#[test]
fn max_concurrency_in_open_loop_counts_late_requests() {
    let server = Server::start(exact(50, 10));
    let out = run_dir("maxconc");
    // 50 requests/s of ~140 ms each want ~7 in flight; a cap of 2 makes most wait.
    let o = bench(
        &server.url,
        &out,
        &[
            "--rate",
            "50",
            "--arrival",
            "constant",
            "--max-concurrency",
            "2",
            "--requests",
            "30",
            "--output-tokens",
            "10",
        ],
    );
    assert_ok(&o);
    let r = results(&out);
    assert!(stat(&r, "counts.waited_for_slot") > 10.0, "{}", r["counts"]);
    assert_eq!(stat(&r, "throughput.concurrency.max"), 2.0);
    assert!(
        stat(&r, "latency.client_lag_ms.max") > 100.0,
        "lateness is reported, not absorbed"
    );
    assert!(has_rule(&r, "max_concurrency_reached"), "{:?}", rules(&r));
}

#[test]
fn multi_token_chunks_split_itl_to_the_per_token_truth() {
    let mut config = exact(50, 20);
    config.tokens_per_chunk = 4;
    let server = Server::start(config);
    let out = run_dir("chunks4");
    let o = bench(
        &server.url,
        &out,
        &[
            "--concurrency",
            "4",
            "--requests",
            "8",
            "--output-tokens",
            "64",
        ],
    );
    assert_ok(&o);
    let r = results(&out);
    assert_eq!(r["tokens"]["multi_token_chunks"], true);
    assert_eq!(r["tokens"]["tokens_per_chunk"]["4"], 8 * 16);
    let itl = stat(&r, "latency.itl_ms.p50");
    assert!(
        (itl - 20.0).abs() <= 1.0,
        "ITL p50 {itl} ms, per-token truth 20 ms"
    );
    let icl = stat(&r, "latency.icl_ms.p50");
    assert!(
        (icl - 80.0).abs() <= 1.0,
        "ICL p50 {icl} ms, chunk truth 80 ms"
    );
    assert!(has_rule(&r, "multi_token_chunks"), "{:?}", rules(&r));
}
