//! `bench --cold-start`: tokenscope starts the server itself, times it to
//! ready, reports the first wave apart from the steady state, and stops it.

mod common;
use common::*;

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn the_engine_started_cold_is_timed_to_ready_and_stopped_after() {
    let port = free_port();
    let command = format!(
        "{} sim serve --port {port} --load-time 1500ms",
        env!("CARGO_BIN_EXE_tokenscope")
    );
    let out = run_dir("cold-engine");
    let o = bench(
        &format!("http://127.0.0.1:{port}"),
        &out,
        &[
            "--cold-start",
            &command,
            "--concurrency",
            "8",
            "--requests",
            "32",
            "--output-tokens",
            "16",
        ],
    );
    assert_ok(&o);
    let r = results(&out);
    let c = &r["cold_start"];
    assert_eq!(c["program"], env!("CARGO_BIN_EXE_tokenscope"));
    let ready = stat(c, "ready_s");
    assert!(
        (1.5..15.0).contains(&ready),
        "ready after {ready} s: the modelled 1.5 s load at least"
    );
    // Closed loop of 8: the 8 sent at once met the server cold, the rest did not.
    assert_eq!(stat(c, "first_wave.count"), 8.0);
    assert_eq!(stat(c, "steady.count"), 24.0);
    assert!(c["excess_p50_ms"].as_f64().is_some());
    assert_eq!(
        r["counts"]["succeeded"], 32,
        "no request met the 503 of a loading server"
    );
    assert!(
        !listening(port),
        "the server tokenscope started is stopped after the run"
    );
    assert!(out.join("server.log").exists());
    let o = tokenscope()
        .arg("report")
        .arg(&out)
        .args(["--format", "terminal"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("first wave (cold)"));
}

#[test]
fn a_start_command_that_fails_is_a_clear_error() {
    let port = free_port();
    let out = run_dir("cold-fails");
    let o = bench(
        &format!("http://127.0.0.1:{port}"),
        &out,
        &[
            "--cold-start",
            "echo cannot load the weights >&2; exit 7",
            "--requests",
            "4",
        ],
    );
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("exited (exit status: 7) before"), "{err}");
    assert!(
        err.contains("cannot load the weights"),
        "its last output: {err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // One that never gets ready is stopped at the timeout.
    let o = bench(
        &format!("http://127.0.0.1:{port}"),
        &run_dir("cold-never"),
        &[
            "--cold-start",
            "sleep 30",
            "--ready-timeout",
            "1s",
            "--requests",
            "4",
        ],
    );
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("did not answer 200 within 1s"));
}
