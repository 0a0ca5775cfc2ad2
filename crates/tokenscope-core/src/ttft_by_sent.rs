//! Each measured request's TTFT by when it was sent: what the report's
//! TTFT-over-the-run chart is drawn from, kept while the run is read so the
//! report need not read the records a second time.
//!
//! Kept for up to [`crate::instants::MAX_EXACT`] requests, 8 bytes each
//! (2 MiB at most); a longer run lets go of them (memory stays flat) and the
//! report reads its records back for the chart instead.

use crate::instants::MAX_EXACT;

/// (send, ms into the run; TTFT, µs) of each measured request that had a
/// first token, in finishing order; `None` past [`MAX_EXACT`].
#[derive(Debug, Clone)]
pub struct TtftBySent {
    points: Option<Vec<(u32, u32)>>,
}

impl Default for TtftBySent {
    fn default() -> Self {
        TtftBySent {
            points: Some(Vec::new()),
        }
    }
}

impl TtftBySent {
    /// Takes one request sent at `sent_us` whose first token came `ttft_us` later.
    pub fn add(&mut self, sent_us: u64, ttft_us: u64) {
        let Some(points) = &mut self.points else {
            return;
        };
        if points.len() >= MAX_EXACT {
            self.points = None;
            return;
        }
        // Saturating: 49 days of run, 71 minutes of TTFT, are past any chart.
        let ms = u32::try_from(sent_us / 1000).unwrap_or(u32::MAX);
        points.push((ms, u32::try_from(ttft_us).unwrap_or(u32::MAX)));
    }

    /// Every (send µs, TTFT µs), or `None` when the run had too many to keep.
    pub fn points(&self) -> Option<impl Iterator<Item = (u64, u64)> + '_> {
        let points = self.points.as_ref()?;
        Some(
            points
                .iter()
                .map(|&(ms, ttft)| (u64::from(ms) * 1000, u64::from(ttft))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_kept_to_the_limit_then_let_go() {
        let mut t = TtftBySent::default();
        t.add(1_234_567, 80_000);
        t.add(u64::MAX, u64::MAX);
        let kept: Vec<_> = t.points().unwrap().collect();
        assert_eq!(kept[0], (1_234_000, 80_000), "the send to the millisecond");
        assert_eq!(kept[1], (u64::from(u32::MAX) * 1000, u64::from(u32::MAX)));
        for i in 0..MAX_EXACT as u64 {
            t.add(i, 1);
        }
        assert!(t.points().is_none(), "past the limit the report reads back");
    }
}
