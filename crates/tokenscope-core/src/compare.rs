//! Whether two runs differ: each metric side by side, the relative change
//! B vs A, and a bootstrap confidence interval for that change from the
//! per-request records (resample each run's requests with replacement,
//! recompute the statistic, take the percentiles of the change).
//!
//! A change is *significant* when its interval excludes zero and the
//! estimate is larger than the noise threshold (criterion's convention: two
//! runs of the same thing differ by a little that no one should act on).
//!
//! A tail quantile is judged only when each run has enough requests beyond
//! it ([`MIN_TAIL_SAMPLES`]): the p99 of 120 requests rests on one or two
//! of them, and the percentile bootstrap then gives intervals far too narrow
//! (it can only resample the few values it has), so two runs of the same
//! thing look different. Such a metric is shown, with a note, never called
//! significant.

use crate::record::RequestRecord;
use serde::{Deserialize, Serialize};

/// One metric of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricChange {
    /// `ttft_p99`, `output_tokens_per_s`, …
    pub metric: String,
    pub unit: String,
    pub a: f64,
    pub b: f64,
    /// (b − a) ÷ a, in %.
    pub change_pct: f64,
    /// The bootstrap interval of `change_pct`.
    pub ci_low_pct: f64,
    pub ci_high_pct: f64,
    pub significant: bool,
    /// Why the change was not judged (too few requests for a tail
    /// quantile); absent when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_judged: Option<String>,
    /// Whether larger is better (throughput) or worse (latency).
    pub higher_is_better: bool,
}

impl MetricChange {
    /// A significant change in the bad direction.
    pub fn is_regression(&self) -> bool {
        self.significant
            && if self.higher_is_better {
                self.change_pct < 0.0
            } else {
                self.change_pct > 0.0
            }
    }
}

/// The fewest requests a run must have beyond a quantile for a change in it
/// to be judged: p99 needs 1,000 requests, p90 100.
pub const MIN_TAIL_SAMPLES: f64 = 10.0;

/// Why a statistic of `n` values cannot be judged, if it cannot.
fn too_few(of: Of, n: usize) -> Option<String> {
    let Of::Quantile(q) = of else { return None };
    tail_too_few(q, n)
}

/// Why the `q` quantile (0–1) of `n` requests cannot be judged, if it
/// cannot: fewer than [`MIN_TAIL_SAMPLES`] of them lie beyond it. The
/// history's change points use the same rule.
pub fn tail_too_few(q: f64, n: usize) -> Option<String> {
    let needed = (MIN_TAIL_SAMPLES / (1.0 - q)).ceil() as usize;
    (q > 0.5 && n < needed).then(|| {
        format!(
            "not judged: p{:.0} needs {needed} requests a run ({MIN_TAIL_SAMPLES:.0} beyond it), this has {n}",
            q * 100.0
        )
    })
}

/// The comparison settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub resamples: usize,
    /// Two-sided confidence, e.g. 0.95.
    pub confidence: f64,
    /// Changes smaller than this (in %) are never significant.
    pub noise_threshold_pct: f64,
    pub seed: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            resamples: 2000,
            confidence: 0.95,
            noise_threshold_pct: 2.0,
            seed: 0,
        }
    }
}

/// A statistic of one run's requests.
struct Stat {
    name: &'static str,
    unit: &'static str,
    higher_is_better: bool,
    /// Which per-request values the statistic is computed over.
    values: Series,
    /// What to compute over the values: a quantile (0–1), or the mean.
    of: Of,
}

#[derive(Clone, Copy)]
enum Of {
    Mean,
    Quantile(f64),
    /// Σ values ÷ the run's window (tokens/s). Resampled over time slices
    /// ([`RunValues`]), not requests: when every request carries the
    /// same number of tokens, resampling requests would give an interval of
    /// width zero, while the rate really varies with time.
    RatePerWindow,
}

const STATS: [Stat; 14] = [
    Stat {
        name: "ttft_mean",
        unit: "ms",
        higher_is_better: false,
        values: Series::Ttft,
        of: Of::Mean,
    },
    Stat {
        name: "ttft_p50",
        unit: "ms",
        higher_is_better: false,
        values: Series::Ttft,
        of: Of::Quantile(0.5),
    },
    Stat {
        name: "ttft_p99",
        unit: "ms",
        higher_is_better: false,
        values: Series::Ttft,
        of: Of::Quantile(0.99),
    },
    Stat {
        name: "tpot_mean",
        unit: "ms",
        higher_is_better: false,
        values: Series::Tpot,
        of: Of::Mean,
    },
    Stat {
        name: "tpot_p50",
        unit: "ms",
        higher_is_better: false,
        values: Series::Tpot,
        of: Of::Quantile(0.5),
    },
    Stat {
        name: "tpot_p99",
        unit: "ms",
        higher_is_better: false,
        values: Series::Tpot,
        of: Of::Quantile(0.99),
    },
    Stat {
        name: "e2e_p50",
        unit: "ms",
        higher_is_better: false,
        values: Series::E2e,
        of: Of::Quantile(0.5),
    },
    Stat {
        name: "e2e_p99",
        unit: "ms",
        higher_is_better: false,
        values: Series::E2e,
        of: Of::Quantile(0.99),
    },
    Stat {
        name: "output_tokens_per_s",
        unit: "tokens/s",
        higher_is_better: true,
        values: Series::Tokens,
        of: Of::RatePerWindow,
    },
    // Last, so the statistics before keep their resampling streams. Only
    // runs whose requests reasoned have values: the others skip them.
    Stat {
        name: "answer_start_p50",
        unit: "ms",
        higher_is_better: false,
        values: Series::AnswerStart,
        of: Of::Quantile(0.5),
    },
    Stat {
        name: "answer_start_p99",
        unit: "ms",
        higher_is_better: false,
        values: Series::AnswerStart,
        of: Of::Quantile(0.99),
    },
    Stat {
        name: "reasoning_p50",
        unit: "ms",
        higher_is_better: false,
        values: Series::Reasoning,
        of: Of::Quantile(0.5),
    },
    Stat {
        name: "answer_tpot_p50",
        unit: "ms",
        higher_is_better: false,
        values: Series::AnswerTpot,
        of: Of::Quantile(0.5),
    },
    Stat {
        name: "answer_tpot_p99",
        unit: "ms",
        higher_is_better: false,
        values: Series::AnswerTpot,
        of: Of::Quantile(0.99),
    },
];

#[derive(Clone, Copy)]
enum Series {
    Ttft,
    Tpot,
    E2e,
    /// The time to the first answer token, of requests that reasoned.
    AnswerStart,
    /// Their thinking time on the stream, and their answers' TPOT.
    Reasoning,
    AnswerTpot,
    /// Output tokens per time slice ([`RunValues::slices`]).
    Tokens,
}

/// How many equal slices of the window the rate is resampled over.
const TIME_SLICES: usize = 20;

/// What a comparison needs of one run's measured requests — per-request
/// TTFT, TPOT and E2E (24 bytes a request), the output tokens in each of
/// [`TIME_SLICES`] equal slices of its window — gathered one record at a
/// time, so a run is never held whole. The window (first send → last end)
/// must be known first: [`RunValues::window_of`] is a first pass.
#[derive(Debug, Clone, Default)]
pub struct RunValues {
    ttft: Vec<f64>,
    tpot: Vec<f64>,
    e2e: Vec<f64>,
    answer_start: Vec<f64>,
    reasoning: Vec<f64>,
    answer_tpot: Vec<f64>,
    /// Each request's tokens spread over its chunks by their token counts
    /// (failed requests: none; a request that streamed none: at its end).
    /// Σ slices ÷ window is the run's rate; resampling slices shows how much
    /// it varies over time.
    slices: Vec<f64>,
    window_us: (u64, u64),
}

impl RunValues {
    /// First send and last end of the measured requests, µs.
    pub fn window_of<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> (u64, u64) {
        records
            .into_iter()
            .fold(None, RunValues::widen)
            .unwrap_or((0, 0))
    }

    /// The window so far, widened to hold `r` when it is measured.
    pub fn widen(window: Option<(u64, u64)>, r: &RequestRecord) -> Option<(u64, u64)> {
        if r.warmup {
            return window;
        }
        let (s, e) = window.unwrap_or((r.sent_at_us, r.done_at_us));
        Some((s.min(r.sent_at_us), e.max(r.done_at_us)))
    }

    pub fn new(window_us: (u64, u64)) -> RunValues {
        RunValues {
            slices: vec![0.0; TIME_SLICES],
            window_us,
            ..RunValues::default()
        }
    }

    /// Takes one record (warm-up ones are skipped).
    pub fn add(&mut self, r: &RequestRecord) {
        if r.warmup || !r.succeeded() {
            return; // a failed request adds no value and no tokens
        }
        if let Some(v) = r.ttft_us() {
            self.ttft.push(v as f64 / 1e3);
        }
        if let Some(v) = r.tpot_us() {
            self.tpot.push(v / 1e3);
        }
        if let Some(v) = r.answer_start_us().filter(|_| r.reasoning_tokens.is_some()) {
            self.answer_start.push(v as f64 / 1e3);
        }
        if let Some(v) = r.reasoning_span_us() {
            self.reasoning.push(v as f64 / 1e3);
        }
        if let Some(v) = r.answer_tpot_us() {
            self.answer_tpot.push(v / 1e3);
        }
        self.e2e.push(r.e2e_us() as f64 / 1e3);
        let total = r.output_tokens as f64;
        let streamed: u64 = r.chunks.iter().map(|c| c.1 as u64).sum();
        if streamed == 0 {
            let i = self.slice(r.done_at_us);
            self.slices[i] += total;
            return;
        }
        for c in &r.chunks {
            let i = self.slice(c.at_us());
            self.slices[i] += total * c.1 as f64 / streamed as f64;
        }
    }

    /// Only the rate's slices, from output tokens already summed by arrival
    /// (`(at_us, tokens)` in any order and grain, e.g. per 10 ms slot) and
    /// scaled so they total `total` (the run's counted output tokens): what
    /// [`interval`] of `output_tokens_per_s` needs, without the records.
    pub fn of_rate(
        window_us: (u64, u64),
        tokens_at: impl IntoIterator<Item = (u64, f64)>,
        total: f64,
    ) -> RunValues {
        let mut v = RunValues::new(window_us);
        for (at, tokens) in tokens_at {
            let i = v.slice(at);
            v.slices[i] += tokens;
        }
        let sum: f64 = v.slices.iter().sum();
        if sum > 0.0 {
            v.slices.iter_mut().for_each(|x| *x *= total / sum);
        }
        v
    }

    /// Both passes over records at hand.
    pub fn of(records: &[RequestRecord]) -> RunValues {
        let mut v = RunValues::new(RunValues::window_of(records));
        records.iter().for_each(|r| v.add(r));
        v
    }

    fn slice(&self, at_us: u64) -> usize {
        let (start, end) = self.window_us;
        let span = end.saturating_sub(start).max(1);
        ((at_us.saturating_sub(start) as u128 * TIME_SLICES as u128 / span as u128) as usize)
            .min(TIME_SLICES - 1)
    }

    fn window_s(&self) -> f64 {
        (self.window_us.1.saturating_sub(self.window_us.0) as f64 / 1e6).max(1e-9)
    }

    fn values(&self, series: Series) -> &[f64] {
        match series {
            Series::Ttft => &self.ttft,
            Series::Tpot => &self.tpot,
            Series::E2e => &self.e2e,
            Series::AnswerStart => &self.answer_start,
            Series::Reasoning => &self.reasoning,
            Series::AnswerTpot => &self.answer_tpot,
            Series::Tokens => &self.slices,
        }
    }
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    // Nearest rank, like the HDR summaries.
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    *v.select_nth_unstable_by(rank, f64::total_cmp).1
}

fn compute(of: Of, v: &mut [f64], window: f64) -> f64 {
    match of {
        Of::Mean => v.iter().sum::<f64>() / v.len() as f64,
        Of::Quantile(q) => quantile(v, q),
        Of::RatePerWindow => v.iter().sum::<f64>() / window,
    }
}

/// A small fast generator for resampling indices (SplitMix64): the
/// bootstrap needs many uniform draws, not cryptographic ones.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z as u128 * n as u128) >> 64) as usize
    }
}

/// Compares run B against run A (measured requests only).
pub fn compare(a: &[RequestRecord], b: &[RequestRecord], settings: &Settings) -> Vec<MetricChange> {
    compare_values(&RunValues::of(a), &RunValues::of(b), settings)
}

/// Compares run B against run A from their gathered values.
pub fn compare_values(a: &RunValues, b: &RunValues, settings: &Settings) -> Vec<MetricChange> {
    let (wa, wb) = (a.window_s(), b.window_s());
    let mut rng = SplitMix(settings.seed ^ 0x746f_6b65_6e73_636f);
    let mut out = Vec::new();
    for (k, stat) in STATS.iter().enumerate() {
        let (va, vb) = (a.values(stat.values), b.values(stat.values));
        if va.is_empty() || vb.is_empty() {
            continue;
        }
        let ea = compute(stat.of, &mut va.to_vec(), wa);
        let eb = compute(stat.of, &mut vb.to_vec(), wb);
        if ea == 0.0 {
            continue;
        }
        let change = (eb - ea) / ea * 100.0;
        let mut changes = Vec::with_capacity(settings.resamples);
        let (mut ra, mut rb) = (vec![0.0; va.len()], vec![0.0; vb.len()]);
        rng.0 ^= k as u64; // each metric its own stream, the whole run reproducible
        for _ in 0..settings.resamples {
            for x in ra.iter_mut() {
                *x = va[rng.below(va.len())];
            }
            for x in rb.iter_mut() {
                *x = vb[rng.below(vb.len())];
            }
            let (sa, sb) = (compute(stat.of, &mut ra, wa), compute(stat.of, &mut rb, wb));
            if sa != 0.0 {
                changes.push((sb - sa) / sa * 100.0);
            }
        }
        let tail = (1.0 - settings.confidence) / 2.0;
        let (lo, hi) = if changes.is_empty() {
            (f64::NEG_INFINITY, f64::INFINITY)
        } else {
            (
                quantile(&mut changes, tail),
                quantile(&mut changes, 1.0 - tail),
            )
        };
        let not_judged = too_few(stat.of, va.len().min(vb.len()));
        out.push(MetricChange {
            metric: stat.name.into(),
            unit: stat.unit.into(),
            a: ea,
            b: eb,
            change_pct: change,
            ci_low_pct: lo,
            ci_high_pct: hi,
            significant: not_judged.is_none()
                && (lo > 0.0 || hi < 0.0)
                && change.abs() > settings.noise_threshold_pct,
            not_judged,
            higher_is_better: stat.higher_is_better,
        });
    }
    out
}

/// The bootstrap interval of one statistic of one run (`output_tokens_per_s`,
/// `ttft_p50`, … as [`compare_values`] names them): the same resampling,
/// of this run alone. `None` for a name it does not know or a run without values.
pub fn interval(run: &RunValues, name: &str, settings: &Settings) -> Option<(f64, f64)> {
    let stat = STATS.iter().find(|s| s.name == name)?;
    let values = run.values(stat.values);
    if values.is_empty() {
        return None;
    }
    let window = run.window_s();
    let mut rng = SplitMix(settings.seed ^ 0x696e_7465_7276_616c);
    let mut resample = vec![0.0; values.len()];
    let mut estimates = Vec::with_capacity(settings.resamples);
    for _ in 0..settings.resamples {
        for x in resample.iter_mut() {
            *x = values[rng.below(values.len())];
        }
        estimates.push(compute(stat.of, &mut resample, window));
    }
    let tail = (1.0 - settings.confidence) / 2.0;
    Some((
        quantile(&mut estimates, tail),
        quantile(&mut estimates, 1.0 - tail),
    ))
}

/// Latency changes smaller than the clients' own measured delay are not
/// judged: a TTFT or E2E is the difference of two stamps, each of which can
/// be late by the client's event-loop delay, so a change below it cannot be
/// told from the client. `resolution_ms`: the larger of the two runs' loop
/// delay p99 beyond its idle floor. (TPOT spreads the delay over a request's
/// tokens and is not affected.)
pub fn within_resolution(changes: &mut [MetricChange], resolution_ms: f64) {
    for c in changes.iter_mut().filter(|c| {
        ["ttft", "e2e", "answer_start", "reasoning"]
            .iter()
            .any(|m| c.metric.starts_with(m))
    }) {
        if (c.b - c.a).abs() < resolution_ms {
            c.significant = false;
            c.not_judged.get_or_insert_with(|| {
                format!(
                    "not judged: the change ({:+.2} ms) is within the clients' own measured delay ({resolution_ms:.2} ms: loop delay p99 beyond its floor)",
                    c.b - c.a
                )
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Chunk;

    #[test]
    fn a_latency_change_within_the_clients_delay_is_not_judged() {
        let mut c = compare(&run(300, 20.0, 1), &run(300, 24.0, 2), &Settings::default());
        let mut shifted = run(300, 20.0, 2);
        for r in &mut shifted {
            r.first_token_at_us = r.first_token_at_us.map(|t| t + 3000);
            r.chunks.iter_mut().for_each(|ch| ch.0 += 3000);
            r.done_at_us += 3000;
        }
        let mut ttft = compare(&run(300, 20.0, 1), &shifted, &Settings::default());
        assert!(
            get(&ttft, "ttft_mean").significant,
            "3 ms on 101 ms is measurable"
        );
        within_resolution(&mut ttft, 4.5);
        let m = get(&ttft, "ttft_mean");
        assert!(
            !m.significant && m.not_judged.as_deref().unwrap().contains("4.50 ms"),
            "{m:?}"
        );
        // TPOT is not a two-stamp difference: a slower decode stays judged.
        within_resolution(&mut c, 4.5);
        assert!(get(&c, "tpot_mean").significant);
    }

    /// n requests, TTFT 100 ms ± jitter, `tokens` tokens `itl` ms apart.
    fn run(n: u64, itl_ms: f64, seed: u64) -> Vec<RequestRecord> {
        let mut rng = SplitMix(seed);
        (0..n)
            .map(|i| {
                let sent = i * 50_000;
                let jitter = |rng: &mut SplitMix| rng.below(2000) as f64; // 0–2 ms
                let first = sent + 100_000 + jitter(&mut rng) as u64;
                let chunks = (0..20)
                    .map(|k| {
                        Chunk(
                            first + (k as f64 * itl_ms * 1e3 + jitter(&mut rng)) as u64,
                            1,
                        )
                    })
                    .collect();
                RequestRecord::test_success(i, sent, chunks, 10)
            })
            .collect()
    }

    /// `run` whose requests reasoned for their first `thinking` chunks.
    fn reasoning(n: u64, thinking: usize, seed: u64) -> Vec<RequestRecord> {
        let mut records = run(n, 10.0, seed);
        for r in &mut records {
            r.reasoning_tokens = Some(thinking as u64);
            r.first_answer_at_us = Some(r.chunks[thinking].at_us());
        }
        records
    }

    #[test]
    fn the_answer_start_is_compared_only_where_requests_reasoned() {
        let plain = compare(&run(300, 10.0, 1), &run(300, 10.0, 2), &Settings::default());
        assert!(plain.iter().all(|c| !c.metric.starts_with("answer_start")));
        // Thinking 15 tokens where it thought 5: the answer starts 100 ms later.
        let c = compare(
            &reasoning(300, 5, 1),
            &reasoning(300, 15, 2),
            &Settings::default(),
        );
        let m = get(&c, "answer_start_p50");
        assert!(m.significant && m.change_pct > 50.0, "{m:?}");
        let m = get(&c, "reasoning_p50");
        assert!(m.significant && m.change_pct > 100.0, "{m:?}");
        assert!(
            !get(&c, "ttft_p50").significant,
            "the first token did not move"
        );
    }

    fn get<'a>(c: &'a [MetricChange], m: &str) -> &'a MetricChange {
        c.iter().find(|x| x.metric == m).unwrap()
    }

    #[test]
    fn same_distribution_is_not_significant() {
        let c = compare(&run(300, 20.0, 1), &run(300, 20.0, 2), &Settings::default());
        for m in &c {
            assert!(!m.significant, "{m:?}");
            assert!(
                m.ci_low_pct <= m.change_pct && m.change_pct <= m.ci_high_pct,
                "{m:?}"
            );
        }
    }

    #[test]
    fn slower_decode_is_a_significant_regression() {
        let c = compare(&run(300, 20.0, 1), &run(300, 24.0, 2), &Settings::default());
        let tpot = get(&c, "tpot_mean");
        assert!((tpot.change_pct - 20.0).abs() < 1.0, "{tpot:?}");
        assert!(tpot.significant && tpot.is_regression());
        assert!(
            tpot.ci_low_pct > 15.0 && tpot.ci_high_pct < 25.0,
            "{tpot:?}"
        );
        // TTFT did not change.
        assert!(!get(&c, "ttft_p50").significant);
    }

    #[test]
    fn the_rate_interval_comes_from_time_slices_and_is_not_degenerate() {
        // Every request has 20 tokens: resampling requests could not move
        // tokens/s at all; the time slices do (ramp-up and drain included).
        let c = compare(&run(300, 20.0, 1), &run(300, 20.0, 2), &Settings::default());
        let tps = get(&c, "output_tokens_per_s");
        assert!(tps.ci_high_pct - tps.ci_low_pct > 0.1, "{tps:?}");
        assert!(!tps.significant, "{tps:?}");
        // The same work on a clock running at 0.8×: 25 % more tokens/s.
        let mut b = run(300, 20.0, 2);
        let at = |t: u64| t * 4 / 5;
        for r in &mut b {
            r.sent_at_us = at(r.sent_at_us);
            r.first_token_at_us = r.first_token_at_us.map(at);
            r.done_at_us = at(r.done_at_us);
            r.chunks.iter_mut().for_each(|c| c.0 = at(c.0));
        }
        let c = compare(&run(300, 20.0, 1), &b, &Settings::default());
        let tps = get(&c, "output_tokens_per_s");
        assert!((tps.change_pct - 25.0).abs() < 1.0, "{tps:?}");
        assert!(tps.significant && tps.ci_low_pct > 10.0, "{tps:?}");
    }

    #[test]
    fn one_runs_rate_interval_holds_its_rate_and_excludes_a_faster_clock() {
        let a = RunValues::of(&run(300, 20.0, 1));
        let (lo, hi) = interval(&a, "output_tokens_per_s", &Settings::default()).unwrap();
        let rate = get(
            &compare(&run(300, 20.0, 1), &run(300, 20.0, 1), &Settings::default()),
            "output_tokens_per_s",
        )
        .a;
        assert!(
            lo < rate && rate < hi && hi - lo > 0.001 * rate,
            "{lo} {rate} {hi}"
        );
        // 25 % more tokens/s lies outside it.
        assert!(rate * 1.25 > hi);
        assert!(interval(&a, "nope", &Settings::default()).is_none());
    }

    #[test]
    fn a_tail_quantile_of_few_requests_is_not_judged() {
        // 120 requests: a 20 % slower decode is judged on the mean and the
        // median, but p99 rests on one or two requests.
        let c = compare(&run(120, 20.0, 1), &run(120, 24.0, 2), &Settings::default());
        assert!(get(&c, "tpot_mean").significant);
        let p99 = get(&c, "tpot_p99");
        assert!(!p99.significant, "{p99:?}");
        let note = p99.not_judged.as_deref().unwrap();
        assert!(
            note.contains("1000 requests") && note.contains("120"),
            "{note}"
        );
        assert!(get(&c, "tpot_p50").not_judged.is_none());
        // With 1,000 a run the same change in p99 is judged.
        let c = compare(
            &run(1000, 20.0, 1),
            &run(1000, 24.0, 2),
            &Settings::default(),
        );
        let p99 = get(&c, "tpot_p99");
        assert!(p99.not_judged.is_none() && p99.significant, "{p99:?}");
    }
}
