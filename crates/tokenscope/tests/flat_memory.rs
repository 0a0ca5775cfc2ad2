//! Memory does not grow with the length of a run: `bench` keeps no record
//! (each is written, then taken into streaming figures) and `sim plan` holds
//! only the requests in flight. Each is run short and 8–12× longer and reads
//! its own peak resident memory (`VmHWM`, in results.json: a child's
//! `ru_maxrss` would include this test process's memory at the spawn).
//! Peak memory, not time: it does not depend on how loaded the machine is.

mod common;
use common::*;

/// `bench` of `requests` requests of 64 tokens; its results.
fn bench_run(url: &str, requests: u32, name: &str) -> (serde_json::Value, std::path::PathBuf) {
    let out = run_dir(name);
    let n = requests.to_string();
    let o = bench(
        url,
        &out,
        &[
            "--no-metrics",
            "--concurrency",
            "32",
            "--requests",
            &n,
            "--output-tokens",
            "64",
            "--input-tokens",
            "8",
        ],
    );
    assert_ok(&o);
    (results(&out), out)
}

#[test]
fn bench_memory_does_not_grow_with_the_number_of_requests() {
    let server = Server::start(exact(0, 0));
    let (short, _) = bench_run(&server.url, 2_000, "flat-short");
    let (r, out) = bench_run(&server.url, 16_000, "flat-long");
    let (short_mb, long_mb) = (
        stat(&short, "client.peak_rss_mb"),
        stat(&r, "client.peak_rss_mb"),
    );
    // Kept in memory, 16,000 records of 64 chunks were ~25 MB more than 2,000.
    assert!(
        long_mb < 1.3 * short_mb,
        "peak RSS {short_mb:.1} MB after 2,000 requests, {long_mb:.1} MB after 16,000"
    );
    assert_eq!(r["counts"]["succeeded"], 16_000, "every request measured");
    assert_eq!(records(&out).len(), 16_000, "every record on disk");
}

#[test]
fn a_simulated_hour_costs_the_memory_of_five_minutes() {
    let plan = |duration: &str, name: &str| {
        let out = run_dir(name);
        let o = tokenscope()
            .args([
                "sim",
                "plan",
                "--rate",
                "20",
                "--duration",
                duration,
                "--quiet",
            ])
            .args(["--input-tokens", "512", "--output-tokens", "256", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert_ok(&o);
        results(&out)
    };
    let short = stat(&plan("5m", "plan-5m"), "client.peak_rss_mb");
    let r = plan("1h", "plan-1h");
    let hour = stat(&r, "client.peak_rss_mb");
    // What grows is 24 bytes per request (send, end, intended start) and 4 bytes per 10 ms of
    // tokens-per-slot (~4 MB over the hour); the records were ~330 MB.
    assert!(
        hour < short + 16.0 && hour < 64.0,
        "peak RSS {short:.1} MB for 5 minutes, {hour:.1} MB for an hour"
    );
    assert!(stat(&r, "counts.requests") > 60_000.0, "an hour at 20/s");
}

/// A canary: `--duration forever` until SIGTERM, its records rotated into
/// zstd segments with the oldest removed under `--keep-records`, a line of
/// figures per window. The directory is complete and compact: the records
/// kept (read back through `report`) and those removed are every request of
/// results.json, the windows add up to it, and the segments kept fit the budget.
#[test]
fn a_run_forever_stops_at_sigterm_with_a_compact_complete_directory() {
    let server = Server::start(exact(5, 2));
    let out = run_dir("forever");
    let child = tokenscope()
        .args(["bench", "--url", &server.url, "--quiet", "--no-metrics"])
        .args(["--rate", "100", "--duration", "forever", "--windows", "1s"])
        .args(["--rotate-records", "16KiB", "--keep-records", "48KiB"])
        .args(["--input-tokens", "8", "--output-tokens", "16", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(5));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a stopped run says so: {said}");
    let r = results(&out);
    assert_eq!(r["partial"], true);
    assert_eq!(r["config"]["load"]["forever"], true);
    assert!(r["config"]["duration_s"].is_null());
    let requests = stat(&r, "counts.requests") as u64;
    assert!(requests > 20, "{requests} requests at 100/s");

    let segments = &r["records"];
    let removed = segments["removed_records"].as_u64().unwrap();
    assert!(
        segments["segments"].as_u64().unwrap() >= 4 && removed > 0,
        "{segments}"
    );
    assert!(has_rule(&r, "records_removed"));
    let csv = out.join("requests.csv");
    let o = tokenscope()
        .args(["report", "--format", "csv"])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let rows = std::fs::read_to_string(&csv).unwrap().lines().count() as u64 - 1;
    assert_eq!(
        rows + removed,
        requests,
        "every request: kept or counted as removed"
    );
    let kept: u64 = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl.zst"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(kept <= 48 << 10, "{kept} bytes of segments kept");

    let windows: Vec<serde_json::Value> = std::fs::read_to_string(out.join("windows.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let in_windows: u64 = windows
        .iter()
        .map(|w| w["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(in_windows, requests, "the windows add up to the run");
    // A line a second of the run's clock, whatever the machine's load
    // made of its start: as many as the seconds up to its last end.
    let end_s = stat(&r, "window.end_s");
    assert_eq!(windows.len(), end_s.ceil() as usize, "{end_s} s of run");
    assert_eq!(windows.last().unwrap()["partial"], true);
}
