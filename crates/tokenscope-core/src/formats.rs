//! Structured outputs (`--response-format`): how many answers were what was
//! asked for, with the interval that count supports and the first reasons
//! the others were not.

use crate::record::RequestRecord;
use crate::results::{FormatFailure, StructuredOutput};
use std::collections::BTreeMap;

/// Distinct reasons kept apart; past them, the rest are counted as `(other)`.
const MAX_REASONS: usize = 8;

/// Reasons answers failed, counted: the first [`MAX_REASONS`] distinct
/// ones apart, the rest as `(other)`, so memory stays flat.
#[derive(Debug, Clone, Default)]
pub struct Reasons(BTreeMap<String, u64>);

impl Reasons {
    pub fn add(&mut self, why: &str) {
        let full = self.0.len() >= MAX_REASONS && !self.0.contains_key(why);
        let key = if full { "(other)" } else { why };
        *self.0.entry(key.to_string()).or_insert(0) += 1;
    }

    /// The reasons, most frequent first.
    pub fn list(&self) -> Vec<FormatFailure> {
        let mut failures: Vec<FormatFailure> = self
            .0
            .iter()
            .map(|(reason, &count)| FormatFailure {
                reason: reason.clone(),
                count,
            })
            .collect();
        failures.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
        failures
    }
}

/// The successful requests' format checks, gathered one record at a time.
#[derive(Debug, Clone, Default)]
pub struct FormatTally {
    checked: u64,
    valid: u64,
    reasons: Reasons,
}

impl FormatTally {
    /// Takes one successful measured record.
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(valid) = r.format_valid else { return };
        self.checked += 1;
        match valid {
            true => self.valid += 1,
            false => self.reasons.add(r.format_error.as_deref().unwrap_or("")),
        }
    }

    /// The figures, when any answer was checked.
    pub fn finish(&self) -> Option<StructuredOutput> {
        let n = self.checked;
        (n > 0).then(|| StructuredOutput {
            checked: n,
            valid: self.valid,
            valid_share: self.valid as f64 / n as f64,
            valid_share_ci95: wilson(self.valid, n),
            failures: self.reasons.list(),
        })
    }
}

/// The Wilson score interval (95 %) of `k` successes in `n` trials: it
/// stays inside [0, 1] and says something at 0 % and 100 %, where the
/// normal approximation collapses to a point.
pub fn wilson(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (z, n_f) = (1.959_963_984_540_054_f64, n as f64);
    let p = k as f64 / n_f;
    let denom = 1.0 + z * z / n_f;
    let centre = (p + z * z / (2.0 * n_f)) / denom;
    let half = z * (p * (1.0 - p) / n_f + z * z / (4.0 * n_f * n_f)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_bounds_hold_at_the_edges_and_match_the_textbook() {
        let (lo, hi) = wilson(100, 100);
        assert!(hi == 1.0 && (lo - 0.963).abs() < 0.001, "{lo}");
        let (lo, hi) = wilson(0, 10);
        assert!(lo == 0.0 && (hi - 0.278).abs() < 0.001, "{hi}");
        // 75 of 100: 0.657 .. 0.825 (Wilson).
        let (lo, hi) = wilson(75, 100);
        assert!(
            (lo - 0.657).abs() < 0.001 && (hi - 0.825).abs() < 0.001,
            "{lo} {hi}"
        );
    }

    #[test]
    fn failures_are_counted_by_reason_most_first() {
        let mut t = FormatTally::default();
        let mut rec = RequestRecord::sent(0, 0, 0);
        for (valid, why) in [
            (true, None),
            (false, Some("not JSON")),
            (false, Some("not JSON")),
            (false, Some("schema")),
        ] {
            rec.format_valid = Some(valid);
            rec.format_error = why.map(str::to_owned);
            t.add(&rec);
        }
        let s = t.finish().unwrap();
        assert_eq!((s.checked, s.valid), (4, 1));
        assert_eq!(s.failures[0].reason, "not JSON");
        assert_eq!(s.failures[0].count, 2);
    }
}
