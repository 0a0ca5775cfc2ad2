//! How a long run keeps its directory compact and is read while it goes
//! on: `--windows`, `--rotate-records`, `--keep-records`, with defaults
//! that switch on for a soak (`--duration` of an hour or more) or a canary
//! (`--duration forever`) and stay off for an ordinary run, whose directory
//! keeps its one `requests.jsonl`.

use crate::cli::RecordsArgs;
use std::time::Duration;
use tokenscope_core::duration::is_forever;
use tokenscope_load::recorder::Rotation;

/// From this length on a run is long: windows and rotation are on by default.
pub const LONG_RUN: Duration = Duration::from_secs(3600);

/// The defaults a long run gets.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
/// A run with no end keeps this much of its rotated records by default.
pub const DEFAULT_KEEP_FOREVER_BYTES: u64 = 1 << 30;

fn long(duration: Option<Duration>) -> bool {
    duration.is_some_and(|d| d >= LONG_RUN)
}

/// `--duration forever` where a run must end: a usage error saying why.
pub fn refuse_forever(duration: Option<Duration>, why: &str) -> anyhow::Result<()> {
    match duration.is_some_and(is_forever) {
        true => Err(crate::exit::Exit::usage(format!(
            "--duration forever is for bench and watch: {why} (give a length: 24h, 7d is 168h)"
        ))),
        false => Ok(()),
    }
}

impl RecordsArgs {
    /// The window length (µs) of `windows.jsonl`, when there are windows.
    pub fn window_us(&self, duration: Option<Duration>) -> Option<u64> {
        let every = self.windows.or(long(duration).then_some(DEFAULT_WINDOW))?;
        Some(every.as_micros().max(1) as u64)
    }

    /// When `requests.jsonl` rotates and how much of it is kept, if it does.
    pub fn rotation(&self, duration: Option<Duration>) -> Option<Rotation> {
        let forever = duration.is_some_and(is_forever);
        let segment_bytes = self
            .rotate_records
            .or(long(duration).then_some(DEFAULT_SEGMENT_BYTES))
            .or(self.keep_records.map(|_| DEFAULT_SEGMENT_BYTES))?;
        let keep_bytes = self
            .keep_records
            .or(forever.then_some(DEFAULT_KEEP_FOREVER_BYTES));
        Some(Rotation {
            segment_bytes,
            keep_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_runs_get_windows_and_rotation_and_short_ones_nothing() {
        let none = RecordsArgs::default();
        let short = Some(Duration::from_secs(600));
        assert!(none.window_us(short).is_none() && none.rotation(short).is_none());
        assert!(none.rotation(None).is_none());
        let day = Some(Duration::from_secs(86_400));
        assert_eq!(none.window_us(day), Some(60_000_000));
        let r = none.rotation(day).unwrap();
        assert_eq!((r.segment_bytes, r.keep_bytes), (64 << 20, None));
        let forever = Some(tokenscope_core::duration::FOREVER);
        assert_eq!(none.rotation(forever).unwrap().keep_bytes, Some(1 << 30));
        let asked = RecordsArgs {
            windows: Some(Duration::from_secs(5)),
            rotate_records: None,
            keep_records: Some(1 << 20),
        };
        assert_eq!(asked.window_us(short), Some(5_000_000));
        let r = asked.rotation(short).unwrap();
        assert_eq!((r.segment_bytes, r.keep_bytes), (64 << 20, Some(1 << 20)));
    }
}
