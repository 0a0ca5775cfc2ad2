//! Connections, before the measured window: the open-file limit raised so the
//! run's streams fit (as oha's `nofile.rs` does), and one kept-alive
//! connection per stream opened ahead, so a burst of N requests is N writes on
//! open sockets instead of N connects serialised on the client's thread. Their
//! connect time is measured here and reported on its own, not inside TTFT.

use crate::http1::Client;
use std::time::{Duration, Instant};
use tokenscope_core::stats::Distribution;

/// File descriptors a run needs besides one per stream: the run directory's
/// files, the tokenizer's, the scraper's connections, stdio.
pub const FDS_BESIDES_STREAMS: u64 = 64;

/// The open-file limit, after trying to raise the soft limit to the hard one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimit {
    /// The soft limit this process now runs with.
    pub soft: u64,
    /// The hard limit (the most an unprivileged process may raise it to).
    pub hard: u64,
    /// The soft limit before tokenscope raised it.
    pub before: u64,
}

impl FileLimit {
    /// Raises the soft limit to the hard limit. `None` where the platform
    /// has no such limit (or it cannot be read).
    pub fn raise() -> Option<FileLimit> {
        let (before, hard) = rlimit::Resource::NOFILE.get().ok()?;
        let soft = rlimit::increase_nofile_limit(hard).unwrap_or(before);
        Some(FileLimit { soft, hard, before })
    }

    /// Streams that fit under the (raised) limit.
    pub fn streams(&self) -> u64 {
        self.soft.saturating_sub(FDS_BESIDES_STREAMS)
    }

    /// Why `streams` concurrent streams cannot run, with the fix; `None` when they fit.
    pub fn refuse(&self, streams: u64, flag: &str) -> Option<String> {
        (streams > self.streams()).then(|| {
            format!(
                "{flag} {streams} needs about {} open files, and this process may open at most {} (hard limit {}): raise the hard limit (`ulimit -Hn {}` as root, `LimitNOFILE=` for a systemd unit, `--ulimit nofile=` for docker) or lower {flag} to {}",
                streams + FDS_BESIDES_STREAMS,
                self.soft,
                self.hard,
                (streams + FDS_BESIDES_STREAMS).next_power_of_two(),
                self.streams()
            )
        })
    }
}

/// What opening connections ahead of the load found.
#[derive(Debug, Default)]
pub struct Warmed {
    /// Connections now open and idle in the client's pool.
    pub opened: u64,
    /// Attempts that failed (the load then opens those connections itself).
    pub failed: u64,
    /// Time to open a connection and get an answer on it, µs.
    pub connect_us: Distribution,
    /// The whole warm-up, wall time.
    pub took: Duration,
}

/// Opens `n` connections at once, each with a `GET` of `models_path`
/// (`…/v1/models`: cheap on
/// every OpenAI-compatible server, and no generation), read to its end so
/// each connection goes back to the pool kept alive. A server that closes
/// connections after each answer gains nothing, and loses nothing.
pub async fn warm(client: &Client, models_path: &str, n: u64, timeout: Duration) -> Warmed {
    let start = Instant::now();
    let wire = client.get(models_path);
    let attempts = (0..n).map(|_| {
        let wire = &wire;
        let open = async move {
            let t = Instant::now();
            let mut conn = client.connect().await.ok()?;
            conn.send(wire).await.ok()?;
            let mut head = conn.head().await.ok()?;
            conn.read_to_end(&mut head.body, 0).await.ok()?;
            let took = t.elapsed();
            if head.body.reusable() {
                client.checkin(conn);
            }
            Some(took)
        };
        async move {
            tokio::time::timeout(timeout.min(Duration::from_secs(10)), open)
                .await
                .ok()
                .flatten()
        }
    });
    let mut warmed = Warmed::default();
    for took in futures_util::future::join_all(attempts).await {
        match took {
            Some(d) => {
                warmed.opened += 1;
                warmed.connect_us.record(d.as_micros() as f64);
            }
            None => warmed.failed += 1,
        }
    }
    warmed.took = start.elapsed();
    warmed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_concurrency_over_the_limit_is_refused_with_the_numbers() {
        let limit = FileLimit {
            soft: 1024,
            hard: 1024,
            before: 1024,
        };
        assert_eq!(limit.refuse(900, "--concurrency"), None);
        let why = limit.refuse(10_000, "--concurrency").unwrap();
        assert!(why.contains("needs about 10064 open files"), "{why}");
        assert!(why.contains("at most 1024"), "{why}");
        assert!(why.contains("ulimit -Hn 16384"), "{why}");
        assert!(why.contains("lower --concurrency to 960"), "{why}");
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limit = FileLimit::raise().expect("Linux has RLIMIT_NOFILE");
        assert_eq!(
            limit.soft, limit.hard,
            "Linux lets a process raise it that far"
        );
        assert!(limit.soft >= limit.before);
        assert_eq!(rlimit::Resource::NOFILE.get().unwrap().0, limit.soft);
    }
}
