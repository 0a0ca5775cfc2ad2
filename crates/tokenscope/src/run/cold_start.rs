//! `bench --cold-start "COMMAND"`: what a user meets when a replica has
//! just started. tokenscope starts the server command itself, times it to
//! its first successful `/health` (model loading, KV-cache set-up), sends
//! the load at once, reports the first requests apart from the steady
//! state, and stops the server when the run is done.

use crate::exit::Exit;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokenscope_core::record::RequestRecord;
use tokenscope_core::results::ColdStart;
use tokenscope_core::stats::Distribution;

/// How often readiness is asked.
const POLL: Duration = Duration::from_millis(100);
/// How long a stopped server may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A server tokenscope started: its process group, stopped when dropped.
pub struct Started {
    child: Child,
    pub program: String,
    pub ready_after: Duration,
}

/// Starts `command` (through `sh -c`, in a process group of its own, its
/// output to `log`) and waits for `base`'s `/health` (or `/v1/models`) to
/// answer 200. `who` opens its errors (`--cold-start`, `tune`).
pub async fn start(
    who: &str,
    command: &str,
    base: &str,
    log: &Path,
    timeout: Duration,
) -> anyhow::Result<Started> {
    let program = command.split_whitespace().next().unwrap_or("").to_string();
    let out = std::fs::File::create(log)
        .map_err(|e| Exit::usage(format!("{who}: creating {}: {e}", log.display())))?;
    let err = out.try_clone()?;
    let started = Instant::now();
    let child = Command::new("sh")
        .args(["-c", command])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| Exit::usage(format!("{who}: running `{program}`: {e}")))?;
    let mut server = Started {
        child,
        program,
        ready_after: Duration::ZERO,
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    loop {
        if let Some(status) = server.child.try_wait()? {
            return Err(anyhow::Error::new(Exit::Unreachable).context(format!(
                "{who}: `{}` exited ({status}) before {base}/health answered; its log ends: {}",
                server.program,
                last_lines(log, 3)
            )));
        }
        if ready(&client, base).await {
            server.ready_after = started.elapsed();
            return Ok(server);
        }
        if started.elapsed() > timeout {
            return Err(anyhow::Error::new(Exit::Unreachable).context(format!(
                "{who}: {base}/health did not answer 200 within {} (--ready-timeout); the server was stopped; its log ends: {}",
                humantime::format_duration(timeout),
                last_lines(log, 3)
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `/health` answers 200, or, on a server without it, `/v1/models` does.
async fn ready(client: &reqwest::Client, base: &str) -> bool {
    let status = |path: &str| {
        let req = client.get(format!("{base}{path}"));
        async move { req.send().await.ok().map(|r| r.status().as_u16()) }
    };
    match status("/health").await {
        Some(200) => true,
        Some(404) => status("/v1/models").await == Some(200),
        _ => false,
    }
}

/// The last `n` non-empty lines of a server's log, joined with ` | `,
/// each at most 300 characters; the log is read from its last 64 KiB only.
pub fn last_lines(log: &Path, n: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut tail = Vec::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let len = f.metadata().map_or(0, |m| m.len());
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
        let _ = f.take(64 * 1024).read_to_end(&mut tail);
    }
    let text = String::from_utf8_lossy(&tail);
    let mut lines: Vec<String> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(n)
        .map(|l| l.chars().take(300).collect())
        .collect();
    if lines.is_empty() {
        return "(none)".into();
    }
    lines.reverse();
    lines.join(" | ")
}

impl Started {
    /// How the server exited, if it has.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM to the server's process group, SIGKILL to the group after a
    /// grace period: the group, not only the shell leading it, must be
    /// gone (a `sh -c 'activate && vllm serve …'` leader exits first while
    /// the server still holds its port and GPU memory).
    pub fn stop(&mut self) -> Duration {
        let t = Instant::now();
        self.signal(libc::SIGTERM);
        while t.elapsed() < STOP_GRACE {
            let _ = self.child.try_wait();
            if !self.group_alive() {
                return t.elapsed();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
        t.elapsed()
    }

    /// Whether any process of the group is left (a zombie leader not yet
    /// reaped counts until `try_wait` reaps it).
    fn group_alive(&self) -> bool {
        // SAFETY: kill(2) with signal 0 only checks the group exists.
        unsafe { libc::kill(-(self.child.id() as libc::pid_t), 0) == 0 }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on the process group this child leads.
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), sig);
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        // The whole group, whether or not its leader is still there.
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The first wave (requests sent before any request of the run finished:
/// they met the server cold) against the steady state (the rest), by TTFT;
/// two passes over the run's requests, so memory stays flat.
pub fn waves(dir: &Path, server: &Started, stop_s: f64) -> anyhow::Result<ColdStart> {
    let read = |f: &mut dyn FnMut(RequestRecord)| {
        crate::run_dir::for_each_record(dir, |r| {
            if !r.warmup {
                f(r)
            }
        })
    };
    let mut first_done = u64::MAX;
    read(&mut |r| first_done = first_done.min(r.done_at_us))?;
    let (mut first, mut steady) = (Distribution::new(), Distribution::new());
    read(&mut |r| {
        if let (true, Some(ttft)) = (r.succeeded(), r.ttft_us()) {
            let wave = if r.sent_at_us < first_done {
                &mut first
            } else {
                &mut steady
            };
            wave.record_us(ttft);
        }
    })?;
    let (first, steady) = (first.summary(1e-3), steady.summary(1e-3));
    let mut affected = 0;
    if let Some(p99) = steady.map(|s| s.p99) {
        read(&mut |r| {
            let ttft_ms = r.ttft_us().map(|t| t as f64 / 1e3);
            if r.succeeded() && r.sent_at_us < first_done && ttft_ms.is_some_and(|t| t > p99) {
                affected += 1;
            }
        })?;
    }
    Ok(ColdStart {
        program: server.program.clone(),
        ready_s: server.ready_after.as_secs_f64(),
        stop_s,
        excess_p50_ms: first.zip(steady).map(|(f, s)| f.p50 - s.p50),
        first_wave: first,
        steady,
        affected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_of_one_endless_line_is_read_from_its_tail_and_clipped() {
        let dir = std::env::temp_dir().join(format!("ts-last-lines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("server.log");
        std::fs::write(&log, "x".repeat(20 << 20)).unwrap();
        let said = last_lines(&log, 3);
        assert_eq!(said.chars().count(), 300);
        std::fs::write(&log, "loading\n\nerror: out of memory\n").unwrap();
        assert_eq!(last_lines(&log, 3), "loading | error: out of memory");
        assert_eq!(last_lines(&dir.join("none.log"), 3), "(none)");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
