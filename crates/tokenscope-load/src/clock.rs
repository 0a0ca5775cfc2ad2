//! The run's one monotonic clock: every instant is microseconds since its start.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn start() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    pub fn origin(&self) -> Instant {
        self.start
    }

    pub fn now_us(&self) -> u64 {
        self.us(Instant::now())
    }

    pub fn us(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_micros() as u64
    }

    pub fn at(&self, offset: Duration) -> Instant {
        self.start + offset
    }
}

/// An instant on the host's `CLOCK_MONOTONIC`, in µs: the clock every
/// process on one machine shares (Rust's `Instant` reads it on Linux), so a
/// client and a server on the same host can put their stamps on one line.
/// `None` where the clock cannot be read.
pub fn monotonic_us(at: Instant) -> Option<u64> {
    let now = Instant::now();
    let raw = monotonic_now_us()?;
    // `at` is (almost always) in the past: step back from the clock's now.
    match now.checked_duration_since(at) {
        Some(back) => raw.checked_sub(back.as_micros() as u64),
        None => Some(raw + at.duration_since(now).as_micros() as u64),
    }
}

#[cfg(unix)]
fn monotonic_now_us() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000)
}

#[cfg(not(unix))]
fn monotonic_now_us() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_stamps_follow_the_instants_they_map() {
        let a = Instant::now();
        let b = a + Duration::from_millis(7);
        let (ma, mb) = (monotonic_us(a).unwrap(), monotonic_us(b).unwrap());
        // Two readings of the clock a few µs apart map the 7 ms gap.
        assert!((mb as i64 - ma as i64 - 7_000).abs() <= 50, "{ma} {mb}");
        // And the clock is the one `Instant` reads: now maps to about now.
        let direct = monotonic_now_us().unwrap();
        let mapped = monotonic_us(Instant::now()).unwrap();
        assert!(mapped.abs_diff(direct) <= 1_000, "{direct} {mapped}");
    }
}
