//! The client's tokio runtime, and the one setting that makes many slow
//! streams cheap: gathering wake-ups.
//!
//! At a realistic pace every token is its own socket read, and a worker that
//! sleeps on epoll between reads pays a wake-up (the kernel's context switch
//! and an `epoll_wait`) for nearly every token: two thirds of the client's
//! cost at 1,024 streams of one token per 20 ms. With `wake_batch` set, a
//! worker that runs out of work first waits that long, so one wake-up serves
//! every read that became ready meanwhile. A busy worker never waits.
//!
//! It costs no precision where reads carry the kernel's arrival stamps
//! ([`crate::rx_stamp`], plain TCP on Linux): a token's stamp is when it
//! reached the socket, not when the worker read it. Elsewhere (TLS) the wait
//! would add up to `wake_batch` to every stamp, so [`WakeBatch::resolve`]
//! turns it off there.

use std::time::Duration;

/// How long an idle worker gathers wake-ups: `--wake-batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeBatch {
    /// 200 µs where reads are kernel-stamped, else none.
    Auto,
    /// This long (zero: wake for every read).
    Fixed(Duration),
}

/// The wait `auto` chooses: long enough to gather ~10 reads at 50k tokens/s,
/// short against the 1 ms timers that pace an open loop.
pub const AUTO_WAKE_BATCH: Duration = Duration::from_micros(200);

impl WakeBatch {
    /// The wait for a target: `auto` is [`AUTO_WAKE_BATCH`] when its reads
    /// are kernel-stamped (plain `http` on Linux), none otherwise.
    pub fn resolve(self, kernel_stamps: bool) -> Duration {
        match self {
            WakeBatch::Fixed(d) => d,
            WakeBatch::Auto if kernel_stamps => AUTO_WAKE_BATCH,
            WakeBatch::Auto => Duration::ZERO,
        }
    }
}

impl std::str::FromStr for WakeBatch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(WakeBatch::Auto);
        }
        let d =
            tokenscope_core::duration::parse_duration(s).map_err(|e| format!("{e} (or `auto`)"))?;
        if d > Duration::from_millis(5) {
            return Err(format!(
                "{s} is longer than 5ms: every send and read would wait that long; 200us is the default"
            ));
        }
        Ok(WakeBatch::Fixed(d))
    }
}

/// Whether reads from `url` get the kernel's arrival stamps.
pub fn kernel_stamps(url: &str) -> bool {
    cfg!(target_os = "linux") && url.starts_with("http://")
}

/// The client's multi-threaded runtime: `threads` workers named `ts-client`,
/// each waiting `wake_batch` before it sleeps with nothing to do.
pub fn client(threads: usize, wake_batch: Duration) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(threads)
        .thread_name("ts-client")
        .enable_all();
    if !wake_batch.is_zero() {
        // Called as a worker is about to park on the I/O driver: the sleep
        // holds it back, and the reads that become ready meanwhile are all
        // handled after one wake-up.
        b.on_thread_park(move || std::thread::sleep(wake_batch));
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_gathers_only_where_the_kernel_stamps_reads() {
        assert_eq!(WakeBatch::Auto.resolve(true), AUTO_WAKE_BATCH);
        assert_eq!(WakeBatch::Auto.resolve(false), Duration::ZERO);
        let fixed: WakeBatch = "0".parse().unwrap();
        assert_eq!(fixed.resolve(true), Duration::ZERO);
        let fixed: WakeBatch = "500us".parse().unwrap();
        assert_eq!(fixed.resolve(false), Duration::from_micros(500));
        assert!("1s".parse::<WakeBatch>().unwrap_err().contains("5ms"));
        assert!("soon".parse::<WakeBatch>().is_err());
        assert!(kernel_stamps("http://127.0.0.1:8000") == cfg!(target_os = "linux"));
        assert!(!kernel_stamps("https://example.com"));
    }
}
