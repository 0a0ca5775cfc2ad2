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
    let (now, raw_ns) = beside_instant(|| clock_ns(CLOCK_MONOTONIC))?;
    let raw = u64::try_from(raw_ns / 1_000).ok()?;
    // `at` is (almost always) in the past: step back from the clock's now.
    match now.checked_duration_since(at) {
        Some(back) => raw.checked_sub(back.as_micros() as u64),
        None => Some(raw + at.duration_since(now).as_micros() as u64),
    }
}

/// Another clock's reading (ns) paired with the `Instant` it was taken at:
/// bracketed by two `Instant`s and retried while a preemption widened the
/// bracket past 2 µs, so a mapping between the clocks is off by at most half
/// the bracket (a thread preempted between two plain readings would map by
/// the whole preemption, tens of µs on a busy machine).
pub fn beside_instant(read: impl Fn() -> Option<i128>) -> Option<(Instant, i128)> {
    let mut best: Option<(Duration, Instant, i128)> = None;
    for _ in 0..5 {
        let before = Instant::now();
        let value = read()?;
        let width = before.elapsed();
        if best.is_none_or(|(w, ..)| width < w) {
            best = Some((width, before + width / 2, value));
        }
        if width <= Duration::from_micros(2) {
            break;
        }
    }
    best.map(|(_, at, value)| (at, value))
}

#[cfg(unix)]
pub use libc::{CLOCK_MONOTONIC, CLOCK_REALTIME};
#[cfg(not(unix))]
pub const CLOCK_MONOTONIC: i32 = 1;
#[cfg(not(unix))]
pub const CLOCK_REALTIME: i32 = 0;

/// A POSIX clock's reading now, ns.
#[cfg(unix)]
pub fn clock_ns(id: libc::clockid_t) -> Option<i128> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    #[allow(clippy::unnecessary_cast)] // time_t and c_long are i32 on 32-bit targets
    (rc == 0).then(|| ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128)
}

#[cfg(not(unix))]
pub fn clock_ns(_id: i32) -> Option<i128> {
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
        let direct = (clock_ns(CLOCK_MONOTONIC).unwrap() / 1_000) as u64;
        let mapped = monotonic_us(Instant::now()).unwrap();
        assert!(mapped.abs_diff(direct) <= 1_000, "{direct} {mapped}");
    }
}
