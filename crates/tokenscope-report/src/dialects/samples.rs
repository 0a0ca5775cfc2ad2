//! A run's requests as the peers count them, read once from
//! `requests.jsonl`, and the statistics each peer computes over them.
//!
//! The peers summarise raw per-request values, each its own way: vLLM and
//! AIPerf interpolate between ranks (numpy's default, "linear"); GuideLLM
//! takes the lowest value whose cumulative share reaches the quantile (its
//! `Percentiles.from_pdf`: nearest rank). tokenscope's own summaries come
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
    /// The first answer (non-reasoning) token − sent, for a request that reasoned.
    pub answer_s: Option<f64>,
    /// End of the response − sent.
    pub e2e_s: f64,
    /// The last chunk − sent.
    pub last_token_s: Option<f64>,
    pub input_tokens: u64,
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
            answer_s: r.reasoning_tokens.and(r.answer_start_us()).map(s),
            e2e_s: s(r.e2e_us()),
            last_token_s: r.last_token_at_us().map(since_sent),
            input_tokens: r.input_tokens.unwrap_or(0),
            output_tokens: r.output_tokens,
            gaps_s: r.chunk_gaps_us().map(s).collect(),
            chunks: r.chunks.len() as u64,
        }
    }

    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// (E2E − TTFT) ÷ (tokens − 1): vLLM's TPOT and AIPerf's inter-token
    /// latency (the first token excluded, the stream's end included).
    pub fn tpot_from_end_s(&self) -> Option<f64> {
        let n = self.output_tokens;
        (n > 1).then_some(())?;
        Some((self.e2e_s - self.ttft_s?) / (n - 1) as f64)
    }

    /// (last token − first token) ÷ (tokens − 1): GuideLLM's inter-token
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
    crate::run_dir::for_each_record(dir, |r| {
        if !r.warmup {
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

    /// The lowest value whose share of the values reaches `q` (0–1): the
    /// nearest rank, GuideLLM's method; 0 for no values.
    pub fn nearest_rank(&self, q: f64) -> f64 {
        let v = &self.sorted;
        if v.is_empty() {
            return 0.0;
        }
        // A hair below the rank, so that q × n landing on a whole number
        // (0.5 × 40) takes that rank, as an exact cumulative share would.
        let rank = (q.clamp(0.0, 1.0) * v.len() as f64 - 1e-9).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }

    /// The most frequent value, the lowest among ties (GuideLLM's `mode`).
    pub fn mode(&self) -> f64 {
        let mut best = (0.0, 0usize);
        let mut i = 0;
        while i < self.sorted.len() {
            let run = self.sorted[i..]
                .iter()
                .take_while(|&&v| v == self.sorted[i])
                .count();
            if run > best.1 {
                best = (self.sorted[i], run);
            }
            i += run;
        }
        best.0
    }
}

#[cfg(test)]
mod tests {
    use super::Values;

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
    fn nearest_ranks_are_guidellms() {
        let v = Values::new((1..=40).map(f64::from));
        assert_eq!(v.nearest_rank(0.5), 20.0, "0.5 × 40 lands on rank 20");
        assert_eq!(v.nearest_rank(0.9), 36.0);
        assert_eq!(v.nearest_rank(0.001), 1.0);
        assert_eq!(v.nearest_rank(0.999), 40.0);
        assert_eq!(v.nearest_rank(0.0), 1.0);
    }

    #[test]
    fn moments_are_the_populations_and_the_mode_the_lowest_of_ties() {
        let v = Values::new([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(v.mean(), 5.0);
        assert_eq!(v.std(), 2.0);
        assert_eq!(v.mode(), 4.0);
        assert_eq!(Values::new([3.0, 1.0, 3.0, 1.0]).mode(), 1.0);
        assert_eq!(Values::new([f64::NAN, 1.0]).count(), 1, "no NaN counted");
    }
}
