//! A run spread over processes: shards of one load against one server, a
//! shared start instant, and `tokenscope merge` pooling them exactly.

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::{Duration, SystemTime};

/// An instant `secs` from now, as `--start-at` takes it.
fn start_in(secs: u64) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() + Duration::from_secs(secs)).to_string()
}

/// Starts `count` bench processes as the shards of one run; waits for all.
fn run_shards(name: &str, url: &str, count: u32, load: &[&str]) -> Vec<PathBuf> {
    let start = start_in(3);
    let children: Vec<(PathBuf, Child)> = (0..count)
        .map(|i| {
            let out = run_dir(&format!("{name}-shard{i}"));
            let child = tokenscope()
                .args(["bench", "--url", url, "--quiet", "--client-threads", "1"])
                .args(["--shard", &format!("{i}/{count}"), "--start-at", &start])
                .arg("--out")
                .arg(&out)
                .args(load)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("starting a shard");
            (out, child)
        })
        .collect();
    children
        .into_iter()
        .map(|(out, child)| {
            assert_ok(&child.wait_with_output().unwrap());
            out
        })
        .collect()
}

fn merge(dirs: &[PathBuf], out: &Path) -> Output {
    tokenscope()
        .args(["merge", "--quiet", "--out"])
        .arg(out)
        .args(dirs)
        .output()
        .unwrap()
}

/// Nearest-rank quantile.
fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn ttfts_ms(recs: &[Value]) -> Vec<f64> {
    recs.iter()
        .filter(|r| r["error_kind"].is_null())
        .map(|r| {
            (r["first_token_at_us"].as_f64().unwrap() - r["sent_at_us"].as_f64().unwrap()) / 1e3
        })
        .collect()
}

/// Within HDR's three significant digits of the exact value.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.002 * b.abs() + 0.002
}

#[test]
fn four_shards_against_the_exact_server_merge_to_the_pooled_truth() {
    let server = Server::start(exact(100, 20));
    let load = exact_chat(&[
        "--concurrency",
        "8",
        "--requests",
        "42",
        "--output-tokens",
        "16",
        "--input-tokens",
        "16",
    ]);
    let shards = run_shards("exact4", &server.url, 4, &load);
    // The parts are exact: 8 streams as 2 each, 42 requests as 11, 11, 10, 10.
    let parts: Vec<Value> = shards.iter().map(|d| results(d)).collect();
    let requests: Vec<f64> = parts.iter().map(|r| stat(r, "counts.requests")).collect();
    assert_eq!(requests, vec![11.0, 11.0, 10.0, 10.0]);
    for (i, r) in parts.iter().enumerate() {
        assert_eq!(r["config"]["load"]["concurrency"], 2, "shard {i}");
        assert_eq!(r["shard"]["index"], i as u64);
        assert_eq!(r["shard"]["whole"]["load"]["concurrency"], 8);
    }

    let out = run_dir("exact4-merged");
    let o = merge(&shards, &out);
    assert_ok(&o);
    let m = results(&out);
    let recs = records(&out);
    // Totals are the sums.
    assert_eq!(stat(&m, "counts.requests"), 42.0);
    assert_eq!(recs.len(), 42);
    let tokens: f64 = parts.iter().map(|r| stat(r, "tokens.output_total")).sum();
    assert_eq!(stat(&m, "tokens.output_total"), tokens);
    // Every record names its shard, and ids stay unique.
    let ids: std::collections::BTreeSet<u64> =
        recs.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), 42);
    assert!(recs
        .iter()
        .all(|r| r["shard"].as_u64().is_some_and(|s| s < 4)));
    // Percentiles are those of every request pooled, not averages of the shards'.
    let pooled = ttfts_ms(&recs);
    for (q, key) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
        let merged = stat(&m, &format!("latency.ttft_ms.{key}"));
        assert!(
            close(merged, quantile(pooled.clone(), q)),
            "ttft {key}: {merged} vs pooled"
        );
    }
    // Against the exact server's own send times: the merged TTFT p50 within
    // 1 ms as the issue asks on an idle machine; here 2.5 ms (as
    // timing_accuracy.rs allows: four clients and the server share two
    // cores with whatever else runs) plus the lateness the shards' own
    // loop-delay probes show. A client stamping a timer tick late still fails.
    let errors: Vec<f64> = recs
        .iter()
        .filter(|r| r["error_kind"].is_null())
        .map(|r| {
            (r["first_token_at_us"].as_f64().unwrap() - r["sent_at_us"].as_f64().unwrap()) / 1e3
                - r["server_timings"]["ttft_ms"].as_f64().unwrap()
        })
        .collect();
    let starved = parts
        .iter()
        .map(|r| (r["client"]["loop_delay_ms"]["p99"].as_f64().unwrap_or(0.0) - 1.0).max(0.0))
        .fold(0.0, f64::max);
    let err50 = quantile(errors, 0.5);
    assert!(
        err50 >= -0.05 && err50 <= 2.5 + starved,
        "TTFT error p50 {err50} ms (probe lateness {starved} ms)"
    );
    // Every shard waited for the shared instant, and the merge says how far apart they began.
    let start_us = |r: &Value| {
        let at = humantime::parse_rfc3339_weak(r["shard"]["start_at"].as_str().unwrap()).unwrap();
        at.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as f64
    };
    for r in &parts {
        let early = start_us(r) - stat(r, "shard.origin_unix_us");
        assert!(
            early <= 1000.0,
            "a shard began {early} µs before --start-at"
        );
    }
    let spread = stat(&m, "merged.origin_spread_ms");
    assert!(spread < 1000.0, "origins {spread} ms apart");
    assert_eq!(m["merged"]["shards"].as_array().unwrap().len(), 4);
    assert_eq!(
        m["config"]["load"]["concurrency"], 8,
        "the whole run's settings"
    );

    // The same total load from one process agrees within noise.
    let single = run_dir("exact4-single");
    assert_ok(&bench(&server.url, &single, &load));
    let s = results(&single);
    for (path, within) in [("latency.ttft_ms.p50", 10.0), ("latency.tpot_ms.p50", 2.0)] {
        let (a, b) = (stat(&m, path), stat(&s, path));
        assert!(
            (a - b).abs() < within,
            "{path}: merged {a} vs one process {b}"
        );
    }
    let path = "throughput.output_tokens_per_s";
    let (a, b) = (stat(&m, path), stat(&s, path));
    assert!(
        (a / b - 1.0).abs() < 0.2,
        "{path}: merged {a} vs one process {b}"
    );

    // The merged directory reads like any run.
    assert_ok(
        &tokenscope()
            .arg("report")
            .arg(&out)
            .args(["--format", "md"])
            .output()
            .unwrap(),
    );
    assert_ok(
        &tokenscope()
            .arg("compare")
            .arg(&single)
            .arg(&out)
            .output()
            .unwrap(),
    );
}

#[test]
fn four_shards_against_the_engine_merge_and_only_shard_0_reads_the_metrics() {
    let engine = Engine::start(default_engine());
    let load = [
        "--model",
        "llama-3.1-8b",
        "--rate",
        "40",
        "--requests",
        "60",
        "--output-tokens",
        "24",
        "--input-tokens",
        "128",
        "--scrape-interval",
        "200ms",
    ];
    let shards = run_shards("engine4", &engine.url, 4, &load);
    assert!(
        shards[0].join("timeseries.jsonl").exists(),
        "shard 0 reads the metrics"
    );
    for (i, dir) in shards.iter().enumerate().skip(1) {
        let scraped = dir.join("timeseries.jsonl").exists();
        assert!(!scraped, "shard {i} leaves the metrics to shard 0");
    }
    let parts: Vec<Value> = shards.iter().map(|d| results(d)).collect();
    for r in &parts {
        assert_eq!(
            r["config"]["load"]["rate"], 10.0,
            "each shard a Poisson process at rate/4"
        );
    }
    let out = run_dir("engine4-merged");
    assert_ok(&merge(&shards, &out));
    let m = results(&out);
    let recs = records(&out);
    assert_eq!(stat(&m, "counts.requests"), 60.0);
    let pooled = ttfts_ms(&recs);
    let merged = stat(&m, "latency.ttft_ms.p90");
    assert!(close(merged, quantile(pooled, 0.9)), "ttft p90 {merged}");
    assert!(
        out.join("timeseries.jsonl").exists(),
        "shard 0's metrics carried over"
    );
    assert_eq!(m["config"]["load"]["rate"], 40.0);
}

#[test]
fn merge_refuses_shards_that_are_not_one_whole_run() {
    let server = Server::start(exact(5, 1));
    let load = exact_chat(&[
        "--concurrency",
        "2",
        "--requests",
        "4",
        "--output-tokens",
        "4",
    ]);
    let shards = run_shards("refuse", &server.url, 2, &load);
    let refused = |dirs: &[PathBuf], why: &str| {
        let o = merge(dirs, &run_dir("refuse-merged"));
        assert_eq!(o.status.code(), Some(2), "{why}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(why) && err.lines().count() == 1,
            "{why}: {err}"
        );
    };
    refused(&shards[..1], "shard 1 of 2 missing");
    refused(
        &[shards[0].clone(), shards[0].clone()],
        "shard 0 of 2 is given twice",
    );
    // A shard of another run: other settings, another start.
    let edit = |name: &str, f: &dyn Fn(&mut Value)| {
        let dir = run_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(shards[1].join("requests.jsonl"), dir.join("requests.jsonl")).unwrap();
        let mut r = results(&shards[1]);
        f(&mut r);
        std::fs::write(dir.join("results.json"), r.to_string()).unwrap();
        dir
    };
    // Percentiles pooled, not averaged: shard 1's TTFTs 50 ms longer put the
    // pooled p50 among shard 0's, far from the mean of the shards' p50s.
    let slower = edit("pooled-slower", &|_| {});
    let shifted: String = records(&shards[1])
        .into_iter()
        .map(|mut r| {
            r["first_token_at_us"] = (r["first_token_at_us"].as_u64().unwrap() + 50_000).into();
            r["done_at_us"] = (r["done_at_us"].as_u64().unwrap() + 50_000).into();
            r["chunks"]["at_us"][0] = (r["chunks"]["at_us"][0].as_u64().unwrap() + 50_000).into();
            format!("{r}\n")
        })
        .collect();
    std::fs::write(slower.join("requests.jsonl"), shifted).unwrap();
    let pooled = run_dir("pooled-merged");
    assert_ok(&merge(&[shards[0].clone(), slower], &pooled));
    let all = ttfts_ms(&records(&pooled));
    let p50 = stat(&results(&pooled), "latency.ttft_ms.p50");
    assert!(
        close(p50, quantile(all.clone(), 0.5)),
        "merged p50 {p50}, pooled {all:?}"
    );
    let own = quantile(ttfts_ms(&records(&shards[0])), 0.5);
    assert!(
        p50 < own + 20.0,
        "p50 {p50}: an average of the shards' would be near {}",
        own + 25.0
    );
    let other = edit("refuse-other", &|r| {
        r["shard"]["whole"]["load"]["concurrency"] = 4.into()
    });
    refused(
        &[shards[0].clone(), other],
        "different settings: `/load/concurrency` is 2 and 4",
    );
    let late = edit("refuse-late", &|r| {
        r["shard"]["start_at"] = "2026-01-01T00:00:00.000Z".into()
    });
    refused(&[shards[0].clone(), late], "one --start-at");
    let single = run_dir("refuse-single");
    assert_ok(&bench(&server.url, &single, &load));
    refused(&[shards[0].clone(), single], "is not a shard");

    // On one host the shards share a clock; on two, an unsynchronised clock
    // is said, and what it taints.
    let out = run_dir("clock-one-host");
    assert_ok(&merge(&shards, &out));
    let m = results(&out);
    assert!(
        m["merged"]["clock_note"]
            .as_str()
            .unwrap()
            .contains("one host"),
        "{}",
        m["merged"]
    );
    assert!(!has_rule(&m, "clock_unsynchronised"));
    let elsewhere = edit("clock-elsewhere", &|r| {
        r["shard"]["host"] = "other-host".into();
        r["shard"]["clock"] = serde_json::json!({"synchronised": false, "est_error_us": 16000000, "max_error_us": 16000000});
    });
    let out = run_dir("clock-two-hosts");
    assert_ok(&merge(&[shards[0].clone(), elsewhere], &out));
    let m = results(&out);
    assert!(has_rule(&m, "clock_unsynchronised"), "{}", m["diagnosis"]);
    let note = m["merged"]["clock_note"].as_str().unwrap();
    assert!(
        note.contains("not synchronised") && note.contains("TTFT, TPOT and E2E"),
        "{note}"
    );
    let named = m["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "clock_unsynchronised")
        .map(|f| f["evidence"]["shards"].clone());
    assert!(named.is_some_and(|s| s.as_array().unwrap().contains(&"1".into())));
}

#[test]
fn shard_flags_refuse_what_cannot_be_split() {
    let o = tokenscope()
        .args([
            "bench",
            "--builtin",
            "exact",
            "--concurrency",
            "3",
            "--shard",
            "3/4",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--concurrency 3 cannot be split into 4 shards"),
        "{err}"
    );
    let o = tokenscope()
        .env_remove("JOB_COMPLETION_INDEX")
        .args(["bench", "--builtin", "exact", "--shards", "4"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("JOB_COMPLETION_INDEX"));
    for (extra, why) in [
        (
            &["--concurrency", "1,2", "--start-at", "+5s"][..],
            "give --duration",
        ),
        (
            &["--concurrency", "1,2", "--duration", "2s"][..],
            "give --start-at",
        ),
        (
            &["--auto", "--start-at", "+5s", "--duration", "2s"][..],
            "--auto chooses",
        ),
        (
            &[
                "--find",
                "rate",
                "--slo",
                "ttft_p99=1s",
                "--start-at",
                "+5s",
                "--duration",
                "2s",
            ][..],
            "--find chooses",
        ),
    ] {
        let o = tokenscope()
            .args(["sweep", "--builtin", "exact", "--shard", "0/2"])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("a sharded sweep") && err.contains(why),
            "{err}"
        );
    }
}

#[test]
fn a_sharded_sweep_runs_each_point_together_and_merges_point_by_point() {
    let server = Server::start(exact(20, 5));
    let start = start_in(3);
    let children: Vec<(PathBuf, Child)> = (0..2)
        .map(|i| {
            let out = run_dir(&format!("sweep2-shard{i}"));
            let child = tokenscope()
                .args([
                    "sweep",
                    "--url",
                    &server.url,
                    "--quiet",
                    "--client-threads",
                    "1",
                ])
                .args([
                    "--model",
                    "tokenscope-exact",
                    "--api",
                    "openai-chat",
                    "--no-metrics",
                ])
                .args([
                    "--concurrency",
                    "2,4",
                    "--duration",
                    "2s",
                    "--point-gap",
                    "2s",
                ])
                .args(["--output-tokens", "8", "--input-tokens", "16"])
                .args(["--shard", &format!("{i}/2"), "--start-at", &start, "--out"])
                .arg(&out)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (out, child)
        })
        .collect();
    let shards: Vec<PathBuf> = children
        .into_iter()
        .map(|(out, child)| {
            assert_ok(&child.wait_with_output().unwrap());
            out
        })
        .collect();
    // Point k of every shard started at the same instant: start + k × (2 s + 2 s).
    for point in ["point-00", "point-01"] {
        let starts: Vec<String> = shards
            .iter()
            .map(|d| {
                results(&d.join(point))["shard"]["start_at"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(starts[0], starts[1], "{point}");
    }
    let out = run_dir("sweep2-merged");
    assert_ok(&merge(&shards, &out));
    let doc = sweep_doc(&out);
    let points = doc["points"].as_array().unwrap();
    let loads: Vec<f64> = points.iter().map(|p| p["load"].as_f64().unwrap()).collect();
    assert_eq!(loads, vec![2.0, 4.0], "the whole run's levels");
    for (i, p) in points.iter().enumerate() {
        let name = format!("point-{i:02}");
        let sum: f64 = shards
            .iter()
            .map(|d| stat(&results(&d.join(&name)), "counts.requests"))
            .sum();
        assert_eq!(stat(&p["results"], "counts.requests"), sum, "{name}");
        assert_eq!(
            p["results"]["merged"]["shards"].as_array().unwrap().len(),
            2
        );
        let spread = stat(&p["results"], "merged.origin_spread_ms");
        assert!(spread < 1000.0, "{name}: origins {spread} ms apart");
    }
    assert!(out.join("report.html").exists());
}

/// Constant and gamma arrivals split over 1, 2 and 4 shards: every shard
/// sends every N-th arrival of the whole run's schedule, so the merged run
/// intends each request at the single process's time for it, to the µs —
/// which `merge` checks itself (`merged.schedule`).
#[test]
fn constant_and_gamma_arrivals_add_up_over_shards_to_the_microsecond() {
    let server = Server::start(exact(2, 1));
    for arrival in ["constant", "gamma:0.5"] {
        let load = [
            "--no-metrics",
            "--rate",
            "40",
            "--arrival",
            arrival,
            "--requests",
            "24",
            "--output-tokens",
            "4",
            "--seed",
            "9",
        ];
        let single = run_dir(&format!("schedule-{arrival}-single"));
        assert_ok(&bench(&server.url, &single, &load));
        let mut truth: Vec<(u64, u64)> = records(&single)
            .iter()
            .map(|r| {
                (
                    r["id"].as_u64().unwrap(),
                    r["scheduled_at_us"].as_u64().unwrap(),
                )
            })
            .collect();
        truth.sort_unstable();
        for count in [1, 2, 4] {
            let name = format!("schedule-{}-{count}", arrival.replace(':', ""));
            let shards = run_shards(&name, &server.url, count, &load);
            let out = run_dir(&format!("{name}-merged"));
            assert_ok(&merge(&shards, &out));
            let check = &results(&out)["merged"]["schedule"];
            assert_eq!(check["requests"], 24, "{arrival} over {count}: {check}");
            assert_eq!(check["exact"], 24, "{arrival} over {count}: {check}");
            // Each shard's own intended times, by the whole run's id.
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (i, dir) in shards.iter().enumerate() {
                for r in records(dir) {
                    let local = r["id"].as_u64().unwrap();
                    let id = local * count as u64 + i as u64;
                    merged.push((id, r["scheduled_at_us"].as_u64().unwrap()));
                }
            }
            merged.sort_unstable();
            assert_eq!(merged, truth, "{arrival} over {count} shards");
        }
    }
}
