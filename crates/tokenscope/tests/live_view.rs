//! The live view: under tmux (a real terminal) `bench` shows the dashboard
//! with numbers that change, and leaves the terminal as it found it — after
//! the run and after Ctrl-C. Without a terminal it writes a plain progress
//! line on stderr and nothing else; `--quiet` writes none.

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of the test's own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str) -> Tmux {
        Tmux::sized(name, 130, 42)
    }

    fn sized(name: &str, width: u16, height: u16) -> Tmux {
        let socket = format!("ts-{name}-{}", std::process::id());
        let t = Tmux { socket };
        let (w, h) = (width.to_string(), height.to_string());
        let o = t
            .cmd(&["new-session", "-d", "-s", "main", "-x", &w, "-y", &h])
            .output()
            .expect("tmux is installed (scripts/test.sh installs Debian's tmux)");
        assert!(
            o.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        t
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-L").arg(&self.socket).args(args);
        c
    }

    fn type_line(&self, line: &str) {
        assert!(self
            .cmd(&["send-keys", "-t", "main", line, "Enter"])
            .status()
            .unwrap()
            .success());
    }

    fn keys(&self, keys: &str) {
        assert!(self
            .cmd(&["send-keys", "-t", "main", "-l", keys])
            .status()
            .unwrap()
            .success());
    }

    /// Whether the pane's terminal has echo and line editing on, as the
    /// shell will find them (`stty -a` run from the shell).
    fn echo_and_icanon_on(&self) -> bool {
        self.type_line("clear; stty -a | tr ' ;' '\\n\\n' | grep -x -e echo -e icanon | sort | tr '\\n' ' '; echo STTY-$((6*7))");
        // The marker is computed, so the typed command line does not match it.
        let pane = self.wait_for("STTY-42", Duration::from_secs(10));
        pane.lines().any(|l| l.starts_with("echo icanon STTY-42"))
    }

    fn ctrl_c(&self) {
        assert!(self
            .cmd(&["send-keys", "-t", "main", "C-c"])
            .status()
            .unwrap()
            .success());
    }

    fn pane(&self) -> String {
        let o = self
            .cmd(&["capture-pane", "-p", "-t", "main"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `#{alternate_on} #{cursor_flag}`: whether the alternate screen is on, whether the cursor shows.
    fn screen_state(&self) -> (bool, bool) {
        let o = self
            .cmd(&[
                "display-message",
                "-p",
                "-t",
                "main",
                "#{alternate_on} #{cursor_flag}",
            ])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&o.stdout);
        let mut it = s.split_whitespace();
        (it.next() == Some("1"), it.next() == Some("1"))
    }

    /// Waits (bounded) until the pane shows `what`.
    fn wait_for(&self, what: &str, limit: Duration) -> String {
        self.wait_until(what, limit, |pane| pane.contains(what))
    }

    /// Waits (bounded) until the command typed by `type_line` has printed
    /// `EXIT=<code>` — the typed line itself shows `EXIT=$?`, and between
    /// leaving the dashboard and printing the summary only that is on screen.
    fn wait_for_exit(&self, limit: Duration) -> String {
        self.wait_until("EXIT=<code>", limit, |pane| {
            pane.match_indices("EXIT=")
                .any(|(i, _)| pane[i + 5..].starts_with(|c: char| c.is_ascii_digit()))
        })
    }

    fn wait_until(&self, what: &str, limit: Duration, seen: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let pane = self.pane();
            if seen(&pane) {
                return pane;
            }
            assert!(
                start.elapsed() < limit,
                "waited {limit:?} for {what:?}; pane:\n{pane}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

/// "N/TOTAL requests" in the progress bar.
fn done_count(pane: &str) -> Option<u64> {
    let at = pane.find("requests ·")?;
    let head = &pane[..at];
    let slash = head.rfind('/')?;
    let start = head[..slash].rfind(|c: char| !c.is_ascii_digit())? + 1;
    head[start..slash].parse().ok()
}

fn bench_line(out: &std::path::Path, requests: u32) -> String {
    format!(
        "{} bench --requests {requests} --concurrency 8 --output-tokens 128 --out {}; echo EXIT=$?",
        env!("CARGO_BIN_EXE_tokenscope"),
        out.display()
    )
}

#[test]
fn dashboard_shows_changing_numbers_and_restores_the_terminal() {
    let t = Tmux::start("dash");
    let out = run_dir("live-dash");
    t.type_line(&bench_line(&out, 200));
    let first = t.wait_for("requests ·", Duration::from_secs(30));
    for panel in [
        "Latency",
        "Throughput",
        "Server",
        "output tokens/s",
        "TTFT",
        "TPOT",
        "KV usage",
        "Errors and diagnosis",
    ] {
        assert!(first.contains(panel), "no {panel} panel:\n{first}");
    }
    assert_eq!(
        t.screen_state(),
        (true, false),
        "the dashboard is in the alternate screen, cursor hidden"
    );
    // The numbers move.
    let a = done_count(&first);
    let start = Instant::now();
    let mut later = first.clone();
    while done_count(&later) == a && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(500));
        later = t.pane();
    }
    assert!(
        done_count(&later) > a,
        "the progress did not move:\n{first}\n---\n{later}"
    );
    // Keys typed during the run neither show on the dashboard nor reach the
    // shell afterwards.
    t.keys("xyzzy");
    std::thread::sleep(Duration::from_millis(800));
    let typed = t.pane();
    assert!(!typed.contains("xyzzy"), "typed keys echoed:\n{typed}");
    // After the run: the summary on the normal screen, cursor back.
    let end = t.wait_for_exit(Duration::from_secs(90));
    assert!(end.contains("EXIT=0"), "{end}");
    assert!(end.contains("run directory:"), "{end}");
    assert!(
        !end.contains("xyzzy"),
        "typed keys reached the shell:\n{end}"
    );
    assert_eq!(t.screen_state(), (false, true), "terminal restored");
    assert!(t.echo_and_icanon_on(), "echo and line editing restored");
}

#[test]
fn an_80_by_24_terminal_shows_every_figure_and_the_slo_live() {
    let t = Tmux::sized("small", 80, 24);
    let out = run_dir("live-small");
    t.type_line(&format!(
        "{} bench --requests 160 --concurrency 8 --output-tokens 128 --slo ttft_p99=2s --out {}; echo EXIT=$?",
        env!("CARGO_BIN_EXE_tokenscope"),
        out.display()
    ));
    let pane = t.wait_for("ttft_p99≤2000ms", Duration::from_secs(30));
    let pane = if pane.contains("n=") {
        pane
    } else {
        t.wait_for("n=", Duration::from_secs(10))
    };
    for figure in [
        "requests ·",
        "TTFT",
        "TPOT",
        "tokens/s",
        "requests/s",
        "in flight",
        "KV usage",
        "running",
    ] {
        assert!(pane.contains(figure), "{figure} lost at 80×24:\n{pane}");
    }
    // Too few requests yet to judge a p99: said, not concluded.
    assert!(pane.contains("/1000"), "{pane}");
    assert!(pane.contains("SLO ttft_p99≤2000ms"), "{pane}");
    let end = t.wait_for_exit(Duration::from_secs(120));
    assert!(
        end.contains("EXIT=7"),
        "160 requests cannot judge a p99: {end}"
    );
}

#[test]
fn ctrl_c_stops_the_run_and_restores_the_terminal() {
    let t = Tmux::start("ctrlc");
    let out = run_dir("live-ctrlc");
    t.type_line(&bench_line(&out, 5000));
    t.wait_for("requests ·", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    t.ctrl_c();
    let end = t.wait_for_exit(Duration::from_secs(30));
    assert!(end.contains("EXIT=130"), "{end}");
    assert_eq!(
        t.screen_state(),
        (false, true),
        "terminal restored after Ctrl-C"
    );
    assert!(t.echo_and_icanon_on(), "echo and line editing restored");
    let r = results(&out);
    assert_eq!(r["partial"], true);
}

#[test]
fn watch_dashboard_shows_the_servers_numbers_and_ctrl_c_restores_the_terminal() {
    let engine = Engine::start(default_engine());
    let mut load = background_load(&engine.url, 16, 400, 256, &[]);
    let t = Tmux::start("watch");
    t.type_line(&format!(
        "{} watch {} --interval 250ms; echo EXIT=$?",
        env!("CARGO_BIN_EXE_tokenscope"),
        engine.url
    ));
    let pane = t.wait_for("tokenscope-sim", Duration::from_secs(20));
    assert!(pane.contains("tokenscope watch"), "{pane}");
    // The server's own numbers arrive: running sequences and tokens/s.
    let pane = t.wait_for("running          16", Duration::from_secs(20));
    assert!(pane.contains("KV usage"), "{pane}");
    assert_eq!(t.screen_state(), (true, false));
    t.ctrl_c();
    let end = t.wait_for_exit(Duration::from_secs(20));
    let _ = load.kill();
    let _ = load.wait();
    assert!(end.contains("EXIT=0"), "{end}");
    assert_eq!(t.screen_state(), (false, true), "terminal restored");
}

#[test]
fn without_a_terminal_only_a_plain_progress_line_and_quiet_writes_nothing() {
    let server = Server::start(exact(5, 2));
    let out = run_dir("live-plain");
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &server.url,
            "--requests",
            "20",
            "--output-tokens",
            "8",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        !stdout.contains('\x1b') && !stderr.contains('\x1b'),
        "no terminal codes:\n{stderr}"
    );
    assert!(stderr.contains("tokenscope:"), "{stderr}");
    assert!(stdout.contains("Latency"), "the summary on stdout");
    let o = tokenscope()
        .args([
            "bench",
            "--url",
            &server.url,
            "--requests",
            "20",
            "--output-tokens",
            "8",
            "--quiet",
            "--out",
        ])
        .arg(run_dir("live-quiet"))
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(
        o.stderr.is_empty(),
        "--quiet: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A reasoning model: the dashboard adds when the answer starts under TTFT,
/// and an answer-start SLO is followed live.
#[test]
fn the_dashboard_shows_when_the_answer_starts_for_a_reasoning_model() {
    let server = Server::start(tokenscope_sim::exact::ExactConfig {
        reasoning_tokens: 30,
        ..exact(20, 5)
    });
    let t = Tmux::start("reasoning");
    let out = run_dir("live-reasoning");
    t.type_line(&format!(
        "{} bench --url {} --api openai-chat --no-metrics --requests 200 --concurrency 8 --output-tokens 60 --slo answer_start_p50=2s --out {}; echo EXIT=$?",
        env!("CARGO_BIN_EXE_tokenscope"),
        server.url,
        out.display()
    ));
    let pane = t.wait_for("answer start", Duration::from_secs(30));
    assert!(pane.contains("TTFT"), "{pane}");
    let pane = t.wait_for("answer_start_p50≤2000ms", Duration::from_secs(10));
    assert!(pane.contains("SLO answer_start_p50≤2000ms"), "{pane}");
    let end = t.wait_for_exit(Duration::from_secs(90));
    assert!(end.contains("EXIT=0"), "{end}");
    assert_eq!(t.screen_state(), (false, true), "terminal restored");
}
