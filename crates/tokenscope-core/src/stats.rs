//! Distributions: exact count, mean, standard deviation, min and max, and
//! percentiles from an HDR histogram (3 significant digits, mergeable, so runs
//! from several machines combine exactly).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Collects non-negative samples. Values are stored in nanoseconds (or any
/// integer unit); [`Distribution::summary`] scales them for reporting.
#[derive(Clone)]
pub struct Distribution {
    hist: Histogram<u64>,
    count: u64,
    sum: f64,
    sum_sq: f64,
    min: f64,
    max: f64,
}

impl Default for Distribution {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distribution")
            .field("count", &self.count)
            .field("mean", &self.mean())
            .finish()
    }
}

impl Distribution {
    pub fn new() -> Self {
        Distribution {
            hist: Histogram::new(3).expect("3 significant digits is a valid HDR precision"),
            count: 0,
            sum: 0.0,
            sum_sq: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// Adds one sample (negative values are clamped to zero).
    pub fn record(&mut self, value: f64) {
        self.record_n(value, 1);
    }

    /// Adds `n` samples of the same value (a chunk's token-split ITL).
    pub fn record_n(&mut self, value: f64, n: u64) {
        if n == 0 || !value.is_finite() {
            return;
        }
        let value = value.max(0.0);
        self.hist
            .record_n(value.round() as u64, n)
            .expect("auto-resizing histogram accepts any u64");
        self.count += n;
        self.sum += value * n as f64;
        self.sum_sq += value * value * n as f64;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Adds one whole-number sample (a gap in µs): no rounding on the
    /// per-token path.
    pub fn record_us(&mut self, value: u64) {
        self.hist
            .record(value)
            .expect("auto-resizing histogram accepts any u64");
        let v = value as f64;
        self.count += 1;
        self.sum += v;
        self.sum_sq += v * v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Adds whole-number samples (a request's gaps, µs): as [`record_us`]
    /// one by one, with the running sums kept in registers over the batch
    /// rather than stored back after every sample (the per-token path).
    ///
    /// [`record_us`]: Distribution::record_us
    pub fn record_all_us(&mut self, values: impl IntoIterator<Item = u64>) {
        let (mut n, mut sum, mut sum_sq) = (0u64, 0.0f64, 0.0f64);
        let (mut min, mut max) = (self.min, self.max);
        for value in values {
            self.hist
                .record(value)
                .expect("auto-resizing histogram accepts any u64");
            let v = value as f64;
            n += 1;
            sum += v;
            sum_sq += v * v;
            min = min.min(v);
            max = max.max(v);
        }
        self.count += n;
        self.sum += sum;
        self.sum_sq += sum_sq;
        (self.min, self.max) = (min, max);
    }

    pub fn merge(&mut self, other: &Distribution) {
        if other.count == 0 {
            return;
        }
        self.hist.add(&other.hist).expect("auto-resizing histogram");
        self.count += other.count;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// What `self` holds beyond `earlier`, an earlier state of the same
    /// distribution: a window of a run, cut from the run's own totals at its
    /// edges instead of every sample recorded a second time. Count, sum and
    /// the histogram are exact; the min and max are their buckets' edges
    /// (to the histogram's 3 significant digits). `None` when `earlier`
    /// holds samples `self` lacks: it was not an earlier state of it.
    pub fn since(&self, earlier: &Distribution) -> Option<Distribution> {
        if earlier.count > self.count || earlier.hist.max() > self.hist.max() {
            return None;
        }
        let mut hist = self.hist.clone();
        hist.subtract(&earlier.hist).ok()?;
        let count = self.count - earlier.count;
        let (min, max) = match count {
            0 => (f64::INFINITY, f64::NEG_INFINITY),
            _ => (hist.min() as f64, hist.max() as f64),
        };
        Some(Distribution {
            hist,
            count,
            sum: self.sum - earlier.sum,
            sum_sq: self.sum_sq - earlier.sum_sq,
            min,
            max,
        })
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// How many samples are at most `value` (to the histogram's 3
    /// significant digits).
    pub fn count_at_most(&self, value: f64) -> u64 {
        if self.count == 0 || value.is_nan() || value < 0.0 {
            return 0;
        }
        self.hist.count_between(0, value.round() as u64)
    }

    /// The recorded values as `(value, how many)`, one per histogram bucket
    /// (3 significant digits): a few thousand at most, however many samples.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        self.hist
            .iter_recorded()
            .map(|b| {
                let v = self.hist.highest_equivalent(b.value_iterated_to()) as f64;
                (v.clamp(self.min, self.max), b.count_at_value())
            })
            .collect()
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// The value at quantile `q` (0..=1), from the histogram.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        (self.count > 0).then(|| (self.hist.value_at_quantile(q) as f64).clamp(self.min, self.max))
    }

    /// A distribution-free 95 % confidence interval for the `q` quantile: the
    /// order statistics at ranks n·q ∓ 1.96·√(n·q·(1−q)) (the binomial's
    /// normal approximation). A bound is `None` where its rank falls outside
    /// the sample: with n requests nothing above the largest is known, so
    /// the p99 of 32 requests has no upper bound.
    pub fn quantile_interval(&self, q: f64) -> (Option<f64>, Option<f64>) {
        if self.count == 0 {
            return (None, None);
        }
        let n = self.count as f64;
        let half = 1.96 * (n * q * (1.0 - q)).sqrt();
        let (lo, hi) = ((n * q - half).floor(), (n * q + half).ceil() + 1.0);
        let at =
            |rank: f64| (self.hist.value_at_quantile(rank / n) as f64).clamp(self.min, self.max);
        ((lo >= 1.0).then(|| at(lo)), (hi <= n).then(|| at(hi)))
    }

    /// A 95 % confidence interval for the mean (normal approximation).
    pub fn mean_interval(&self) -> (Option<f64>, Option<f64>) {
        let Some(mean) = self.mean() else {
            return (None, None);
        };
        if self.count < 2 {
            return (None, None);
        }
        let n = self.count as f64;
        let var = ((self.sum_sq - n * mean * mean) / (n - 1.0)).max(0.0);
        let half = 1.96 * (var / n).sqrt();
        (Some((mean - half).max(0.0)), Some(mean + half))
    }

    /// Summary with every value multiplied by `scale` (1e-6 turns ns into ms).
    /// `None` when there are no samples: absent, never zero.
    pub fn summary(&self, scale: f64) -> Option<Summary> {
        let mean = self.mean()?;
        let var = (self.sum_sq / self.count as f64 - mean * mean).max(0.0);
        let q = |q: f64| self.quantile(q).unwrap_or(0.0) * scale;
        Some(Summary {
            count: self.count,
            mean: mean * scale,
            std: var.sqrt() * scale,
            min: self.min * scale,
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            p999: q(0.999),
            max: self.max * scale,
        })
    }
}

/// The statistics reported for every distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub count: u64,
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Summary {
    /// Looks a statistic up by the name used in `--slo` (`mean`, `p50`, ..., `max`).
    pub fn get(&self, stat: &str) -> Option<f64> {
        Some(match stat {
            "mean" => self.mean,
            "std" => self.std,
            "min" => self.min,
            "p50" | "median" => self.p50,
            "p90" => self.p90,
            "p95" => self.p95,
            "p99" => self.p99,
            "p999" | "p99.9" => self.p999,
            "max" => self.max,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn samples_taken_in_a_batch_summarise_as_taken_one_by_one() {
        let values = [11_297u64, 0, 31_443, 7, 11_297, 5_000_000_000];
        let (mut one, mut all) = (Distribution::new(), Distribution::new());
        one.record_us(3);
        all.record_us(3);
        values.iter().for_each(|&v| one.record_us(v));
        all.record_all_us(values);
        all.record_all_us([]);
        assert_eq!(one.summary(1.0), all.summary(1.0));
        assert_eq!(all.count(), 7);
    }

    use super::*;

    #[test]
    fn exact_moments_and_close_percentiles() {
        let mut d = Distribution::new();
        for v in 1..=1000 {
            d.record(v as f64 * 1_000.0);
        }
        let s = d.summary(1e-3).unwrap();
        assert_eq!(s.count, 1000);
        assert!((s.mean - 500.5).abs() < 1e-9);
        assert!((s.std - 288.675).abs() < 0.01);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 1000.0);
        assert!((s.p50 - 500.0).abs() <= 0.5, "p50 {}", s.p50);
        assert!((s.p99 - 990.0).abs() <= 1.0, "p99 {}", s.p99);
    }

    #[test]
    fn quantile_intervals_widen_with_few_samples_and_hold_the_truth() {
        let mut d = Distribution::new();
        for v in 1..=1000 {
            d.record(v as f64);
        }
        let (lo, hi) = d.quantile_interval(0.99);
        let (lo, hi) = (lo.unwrap(), hi.unwrap());
        assert!(lo <= 990.0 && (990.0..=1000.0).contains(&hi), "{lo} {hi}");
        let (lo, hi) = d.quantile_interval(0.5);
        assert!(lo.unwrap() < 500.0 && hi.unwrap() > 500.0);
        // 32 samples: the p99 cannot be bounded from above.
        let mut few = Distribution::new();
        for v in 1..=32 {
            few.record(v as f64);
        }
        let (lo, hi) = few.quantile_interval(0.99);
        assert!(hi.is_none());
        assert!(lo.unwrap() >= 29.0, "{lo:?}");
        let (lo, hi) = few.mean_interval();
        assert!(lo.unwrap() < 16.5 && hi.unwrap() > 16.5);
    }

    #[test]
    fn empty_is_absent() {
        assert!(Distribution::new().summary(1.0).is_none());
    }

    #[test]
    fn merge_equals_recording_everything() {
        let (mut a, mut b, mut all) = (
            Distribution::new(),
            Distribution::new(),
            Distribution::new(),
        );
        for v in 0..500 {
            a.record(v as f64);
            all.record(v as f64);
        }
        for v in 500..1000 {
            b.record_n(v as f64, 2);
            all.record_n(v as f64, 2);
        }
        a.merge(&b);
        assert_eq!(a.summary(1.0), all.summary(1.0));
    }
}
