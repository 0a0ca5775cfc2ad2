//! `tokenscope compare`: two runs of the same configuration do not differ
//! significantly; a server whose TPOT is 20 % slower is reported as a
//! regression and fails the `--fail-on-regression` gate.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::sync::Mutex;

/// The two tests take turns: each compares runs made one after the other,
/// and the other test's load landing on only one of them would be a real
/// difference, not the one under test.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(url: &str, name: &str) -> std::path::PathBuf {
    let out = run_dir(name);
    assert_ok(&bench(
        url,
        &out,
        &[
            "--concurrency",
            "4",
            "--requests",
            "120",
            "--output-tokens",
            "20",
        ],
    ));
    out
}

fn compare(a: &Path, b: &Path, extra: &[&str]) -> (Option<i32>, Value) {
    let o = tokenscope()
        .arg("compare")
        .arg(a)
        .arg(b)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code(), doc)
}

fn metric<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == name)
        .unwrap()
}

#[test]
fn same_configuration_twice_is_not_a_significant_difference() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start(exact(40, 10));
    let (a, b) = (
        run(&server.url, "cmp-same-a"),
        run(&server.url, "cmp-same-b"),
    );
    let (code, doc) = compare(&a, &b, &["--fail-on-regression", "5%"]);
    let significant: Vec<&Value> = doc["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["significant"] == true)
        .collect();
    assert!(significant.is_empty(), "{significant:#?}");
    assert_eq!(code, Some(0));
    // Every metric carries its interval around the estimate.
    for m in doc["metrics"].as_array().unwrap() {
        let (lo, c, hi) = (
            m["ci_low_pct"].as_f64().unwrap(),
            m["change_pct"].as_f64().unwrap(),
            m["ci_high_pct"].as_f64().unwrap(),
        );
        assert!(lo <= c + 1e-9 && c <= hi + 1e-9, "{m}");
    }
    // 120 requests are too few to judge a p99; the comparison says so.
    let p99 = metric(&doc, "ttft_p99");
    assert!(
        p99["not_judged"]
            .as_str()
            .unwrap()
            .contains("1000 requests"),
        "{p99}"
    );
    // The p50 has enough requests; it may still be within the clients'
    // own measured delay, which is said as such.
    let p50 = metric(&doc, "ttft_p50");
    if let Some(why) = p50.get("not_judged").and_then(|w| w.as_str()) {
        assert!(
            why.contains("within the clients' own measured delay"),
            "{why}"
        );
    }
}

#[test]
fn twenty_percent_slower_decode_is_a_regression_and_fails_the_gate() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fast = Server::start(exact(40, 10));
    let slow = Server::start(exact(40, 12));
    let (a, b) = (run(&fast.url, "cmp-fast"), run(&slow.url, "cmp-slow"));
    let (code, doc) = compare(&a, &b, &["--fail-on-regression", "5%"]);
    let tpot = metric(&doc, "tpot_mean");
    let change = tpot["change_pct"].as_f64().unwrap();
    assert!((15.0..25.0).contains(&change), "{tpot}");
    assert_eq!(tpot["significant"], true);
    assert!(doc["regressions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m == "tpot_mean"));
    assert_eq!(code, Some(6), "--fail-on-regression exits 6");
    // TTFT did not change.
    assert_eq!(metric(&doc, "ttft_p50")["significant"], false);
    // The other way round it is an improvement, not a regression.
    let (code, doc) = compare(&b, &a, &["--fail-on-regression", "5%"]);
    assert_eq!(code, Some(0));
    assert!(metric(&doc, "tpot_mean")["change_pct"].as_f64().unwrap() < -10.0);
    // Without the gate the regression is reported but the exit code is 0.
    let o = tokenscope()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("significant · worse"));
}

/// Two sweeps are compared at the loads both ran, a concurrency with a
/// concurrency and a rate with a rate: a concurrency series against a rate
/// series shares no load (it compared concurrency 4 with 4 requests/s).
#[test]
fn sweeps_are_compared_at_the_same_loads_of_the_same_kind() {
    let dirs: Vec<_> = [
        ("cmp-sweep-c14", "concurrency:1,4"),
        ("cmp-sweep-c416", "concurrency:4,16"),
        ("cmp-sweep-r14", "rate:1,4"),
    ]
    .into_iter()
    .map(|(name, sweep)| {
        let out = run_dir(name);
        let o = sim_plan(
            &out,
            &["--sweep", sweep, "--requests", "24", "--no-history"],
        );
        assert_ok(&o);
        out
    })
    .collect();
    let (code, doc) = compare(&dirs[0], &dirs[1], &[]);
    assert_eq!(code, Some(0));
    let loads: Vec<&str> = doc["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["load"].as_str().unwrap())
        .collect();
    assert_eq!(loads, ["concurrency 4"]);
    let o = tokenscope()
        .arg("compare")
        .args([&dirs[0], &dirs[2]])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("a concurrency series") && err.contains("a rate series"),
        "{err}"
    );
}
