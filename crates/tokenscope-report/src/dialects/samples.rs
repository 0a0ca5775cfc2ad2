//! A run's requests as the peers count them, read once from
//! `requests.jsonl`, and the statistics each peer computes over them.
//!
//! The peers summarise raw per-request values, each its own way: vLLM and
//! AIPerf interpolate between ranks (numpy's default, "linear"); GuideLLM
//! weighs each value and takes the first whose running share reaches the
//! quantile (its `Percentiles.from_pdf`), [`Weighted`]. tokenscope's own summaries come
//! from histograms, so an export recomputes each figure from the requests
//! with the peer's method rather than relabel tokenscope's.

use tokenscope_core::record::RequestRecord;

/// One measured request, in seconds on the run's clock.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Sent, s from the run's start.
    pub sent_s: f64,
    /// How late it was sent against its schedule (the client's lag).
    pub lag_s: f64,
    /// The error message, `None` for a success.
    pub error: Option<String>,
    pub ttft_s: Option<f64>,
    /// The request reasoned (its answer start is then `answer_s`).
    pub reasoned: bool,
    /// The first answer (non-reasoning) token − sent, for a request that reasoned.
    pub answer_s: Option<f64>,
    /// End of the response − sent.
    pub e2e_s: f64,
    /// The last chunk − sent.
    pub last_token_s: Option<f64>,
    /// `None` where neither the server nor the client counted them.
    pub input_tokens: Option<u64>,
    pub output_tokens: u64,
    /// The gap before each chunk after the first, s (vLLM's `itl`, AIPerf's ICL).
    pub gaps_s: Vec<f64>,
    /// Chunks that carried tokens.
    pub chunks: u64,
}

impl Sample {
    pub fn of(r: &RequestRecord) -> Sample {
        let s = |us: u64| us as f64 / 1e6;
        let since_sent = |at: u64| s(at.saturating_sub(r.sent_at_us));
        Sample {
            sent_s: s(r.sent_at_us),
            lag_s: s(r.lag_us()),
            error: (!r.succeeded()).then(|| r.error.clone().unwrap_or_else(|| "error".into())),
            ttft_s: r.ttft_us().map(s),
            reasoned: r.reasoning_tokens.is_some(),
            answer_s: r.reasoning_tokens.and(r.answer_start_us()).map(s),
            e2e_s: s(r.e2e_us()),
            last_token_s: r.last_token_at_us().map(since_sent),
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            gaps_s: r.chunk_gaps_us().map(s).collect(),
            chunks: r.chunks.len() as u64,
        }
    }

    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// Sent → the last chunk (the end of the response where none came):
    /// the latency vLLM and AIPerf measure, which stops at the last token.
    pub fn latency_s(&self) -> f64 {
        self.last_token_s.unwrap_or(self.e2e_s)
    }

    /// The first answer token, for the peers' "time to first output
    /// token": the answer start of a request that reasoned (none if it
    /// never answered), else TTFT.
    pub fn first_output_s(&self) -> Option<f64> {
        match self.reasoned {
            true => self.answer_s,
            false => self.ttft_s,
        }
    }

    /// (last token − first token) ÷ (tokens − 1): vLLM's TPOT (its latency
    /// ends at the last token), AIPerf's and GuideLLM's inter-token
    /// latency, and tokenscope's TPOT.
    pub fn tpot_s(&self) -> Option<f64> {
        let n = self.output_tokens;
        (n > 1).then_some(())?;
        Some((self.last_token_s? - self.ttft_s?) / (n - 1) as f64)
    }
}

/// Every measured request of a run directory (warm-up left out).
pub fn read(dir: &std::path::Path) -> Result<Vec<Sample>, crate::run_dir::ReadError> {
    let mut out = Vec::new();
    // Users who left on purpose (`--cancel`) are neither a peer's success
    // nor its failure: GuideLLM counts them as incomplete, by number only.
    crate::run_dir::for_each_record(dir, |r| {
        if !r.warmup && !r.abandoned() {
            out.push(Sample::of(&r));
        }
    })?;
    out.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
    Ok(out)
}

/// Values sorted once, with the statistics every peer reports.
#[derive(Debug, Clone, Default)]
pub struct Values {
    sorted: Vec<f64>,
    sum: f64,
}

impl Values {
    pub fn new(values: impl IntoIterator<Item = f64>) -> Values {
        let mut sorted: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let sum = sorted.iter().sum();
        Values { sorted, sum }
    }

    pub fn iter(&self) -> impl Iterator<Item = f64> + '_ {
        self.sorted.iter().copied()
    }

    pub fn count(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// The mean, 0 for no values (numpy's `mean(x or 0)` in vLLM).
    pub fn mean(&self) -> f64 {
        match self.count() {
            0 => 0.0,
            n => self.sum / n as f64,
        }
    }

    /// The population standard deviation (numpy's `std`, ddof 0).
    pub fn std(&self) -> f64 {
        self.variance().sqrt()
    }

    pub fn variance(&self) -> f64 {
        let m = self.mean();
        match self.count() {
            0 => 0.0,
            n => self.sorted.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n as f64,
        }
    }

    pub fn min(&self) -> f64 {
        self.sorted.first().copied().unwrap_or(0.0)
    }

    pub fn max(&self) -> f64 {
        self.sorted.last().copied().unwrap_or(0.0)
    }

    /// numpy's `percentile(x, p)` (linear between ranks), `p` in percent; 0
    /// for no values. vLLM's and AIPerf's method.
    pub fn linear(&self, p: f64) -> f64 {
        let v = &self.sorted;
        if v.is_empty() {
            return 0.0;
        }
        let at = (p / 100.0).clamp(0.0, 1.0) * (v.len() - 1) as f64;
        let lo = at.floor() as usize;
        let hi = (lo + 1).min(v.len() - 1);
        v[lo] + (at - lo as f64) * (v[hi] - v[lo])
    }
}

/// Values with weights, summarised as GuideLLM's
/// `DistributionSummary.from_values` does: equal values merged, each
/// value's share its weight over the total, percentiles the first value
/// whose running share (summed in order, in floating point, as numpy's
/// `cumsum`) reaches the quantile; `count` the weights' sum, rounded.
#[derive(Debug, Clone, Default)]
pub struct Weighted {
    values: Vec<f64>,
    shares: Vec<f64>,
    count: u64,
}

impl Weighted {
    pub fn new(pairs: impl IntoIterator<Item = (f64, f64)>) -> Weighted {
        let mut pairs: Vec<(f64, f64)> = pairs
            .into_iter()
            .filter(|(v, w)| v.is_finite() && w.is_finite())
            .collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut merged: Vec<(f64, f64)> = Vec::with_capacity(pairs.len());
        for (v, w) in pairs {
            match merged.last_mut() {
                Some(last) if last.0 == v => last.1 += w,
                _ => merged.push((v, w)),
            }
        }
        let count = merged
            .iter()
            .map(|p| p.1)
            .sum::<f64>()
            .round_ties_even()
            .max(0.0) as u64;
        merged.retain(|p| p.1 > 0.0);
        let mut total: f64 = merged.iter().map(|p| p.1).sum();
        if total <= 1e-6 {
            // GuideLLM's fallback where the weights vanish: every value alike.
            merged.iter_mut().for_each(|p| p.1 = 1.0);
            total = merged.len() as f64;
        }
        Weighted {
            values: merged.iter().map(|p| p.0).collect(),
            shares: merged.iter().map(|p| p.1 / total).collect(),
            count,
        }
    }

    /// One weight each.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Weighted {
        Weighted::new(values.into_iter().map(|v| (v, 1.0)))
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean(&self) -> f64 {
        self.values
            .iter()
            .zip(&self.shares)
            .map(|(v, p)| v * p)
            .sum()
    }

    pub fn variance(&self) -> f64 {
        let m = self.mean();
        self.values
            .iter()
            .zip(&self.shares)
            .map(|(v, p)| (v - m).powi(2) * p)
            .sum()
    }

    pub fn min(&self) -> f64 {
        self.values.first().copied().unwrap_or(0.0)
    }

    pub fn max(&self) -> f64 {
        self.values.last().copied().unwrap_or(0.0)
    }

    /// The value with the largest share, the lowest among ties.
    pub fn mode(&self) -> f64 {
        let mut best: Option<(f64, f64)> = None;
        for (v, p) in self.values.iter().zip(&self.shares) {
            if best.is_none_or(|(_, bp)| *p > bp) {
                best = Some((*v, *p));
            }
        }
        best.map_or(0.0, |b| b.0)
    }

    /// The first value whose running share reaches `q` (0–1); the last
    /// where rounding leaves every running share short of it; 0 for none.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut running = 0.0;
        for (v, p) in self.values.iter().zip(&self.shares) {
            running += p;
            if running >= q {
                return *v;
            }
        }
        self.max()
    }
}

#[cfg(test)]
mod tests {
    use super::{Values, Weighted};

    #[test]
    fn linear_percentiles_are_numpys() {
        // numpy.percentile([1, 2, 3, 4], [0, 25, 50, 90, 100])
        let v = Values::new([4.0, 1.0, 3.0, 2.0]);
        let got: Vec<f64> = [0.0, 25.0, 50.0, 90.0, 100.0]
            .iter()
            .map(|&p| v.linear(p))
            .collect();
        assert_eq!(got, vec![1.0, 1.75, 2.5, 3.7, 4.0]);
        assert_eq!(Values::new([]).linear(99.0), 0.0);
        assert_eq!(Values::new([7.0]).linear(99.0), 7.0);
    }

    #[test]
    fn weighted_quantiles_are_guidellms_running_shares() {
        // Each checked against guidellm 0.8.1's DistributionSummary.from_values.
        let ten = Weighted::of((1..=10).map(f64::from));
        assert_eq!(
            ten.quantile(0.9),
            10.0,
            "0.1 summed nine times falls short of 0.9"
        );
        assert_eq!(ten.quantile(0.5), 5.0);
        assert_eq!(Weighted::of((1..=12).map(f64::from)).quantile(0.5), 7.0);
        let w = Weighted::new([(100.0, 1.0), (10.0, 100.0)]);
        assert!((w.mean() - 10.891089108910892).abs() < 1e-12);
        assert_eq!((w.quantile(0.99), w.count(), w.mode()), (10.0, 101, 10.0));
        let none = Weighted::of([]);
        assert_eq!(
            (none.count(), none.mean(), none.quantile(0.5)),
            (0, 0.0, 0.0)
        );
    }

    #[test]
    fn moments_are_the_populations_and_the_mode_the_lowest_of_ties() {
        let v = Values::new([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(v.mean(), 5.0);
        assert_eq!(v.std(), 2.0);
        assert_eq!(Weighted::of([2.0, 4.0, 4.0, 4.0, 5.0]).mode(), 4.0);
        assert_eq!(Weighted::of([3.0, 1.0, 3.0, 1.0]).mode(), 1.0);
        assert_eq!(Values::new([f64::NAN, 1.0]).count(), 1, "no NaN counted");
    }
}
