//! From the scrapes of a run to window figures: counters as deltas and rates,
//! histograms as quantiles and means of their bucket deltas (interpolated
//! within a bucket as Prometheus' `histogram_quantile` does), gauges as mean,
//! extremes and trend.

use crate::kinds::{Concepts, Hist};
use serde::{Deserialize, Serialize};

/// One scrape at `t_s` seconds on the run's clock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scrape {
    pub t_s: f64,
    pub concepts: Concepts,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GaugeSummary {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub first: f64,
    pub last: f64,
    /// Least-squares trend, units per second.
    pub slope_per_s: f64,
}

/// A histogram over the window, in milliseconds. The mean is exact (sum ÷
/// count); quantiles are interpolated inside buckets, so they are no finer
/// than the buckets (`first_bucket_ms` is the lowest bound: vLLM's request
/// histograms start at 300 ms), and never above mean ÷ (1 − q) (see
/// [`summary`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HistSummary {
    pub count: f64,
    pub mean_ms: f64,
    pub first_bucket_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

/// The server's own figures over the run's window. `None` = not exposed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSummary {
    pub scrapes: usize,
    pub window_s: f64,
    pub running: Option<GaugeSummary>,
    pub waiting: Option<GaugeSummary>,
    pub kv_usage: Option<GaugeSummary>,
    pub kv_capacity_tokens: Option<f64>,
    pub prompt_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
    pub generation_tokens_per_s: Option<f64>,
    pub prefix_cache_hit_rate: Option<f64>,
    pub preemptions: Option<f64>,
    /// Requests the server aborted over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<f64>,
    pub queue_time: Option<HistSummary>,
    pub ttft: Option<HistSummary>,
    pub itl: Option<HistSummary>,
    pub e2e: Option<HistSummary>,
    pub prefill_time: Option<HistSummary>,
    pub gpu_util_time_pct: Option<GaugeSummary>,
    pub gpu_sm_active: Option<GaugeSummary>,
    pub gpu_power_w: Option<GaugeSummary>,
    pub gpu_memory_used_bytes: Option<GaugeSummary>,
    pub gpu_memory_total_bytes: Option<f64>,
    pub gpu_energy_j: Option<f64>,
    /// Speculative decoding, when the server shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode: Option<crate::spec_decode::SpecDecode>,
}

fn gauge(scrapes: &[Scrape], f: impl Fn(&Concepts) -> Option<f64>) -> Option<GaugeSummary> {
    let pts: Vec<(f64, f64)> = scrapes
        .iter()
        .filter_map(|s| f(&s.concepts).map(|v| (s.t_s, v)))
        .collect();
    GaugeSummary::of(&pts)
}

impl GaugeSummary {
    /// The summary of a gauge's `(t_s, value)` samples in time order; `None`
    /// without any.
    pub fn of(pts: &[(f64, f64)]) -> Option<GaugeSummary> {
        if pts.is_empty() {
            return None;
        }
        let n = pts.len() as f64;
        let mean = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let mt = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let var_t: f64 = pts.iter().map(|p| (p.0 - mt).powi(2)).sum();
        let cov: f64 = pts.iter().map(|p| (p.0 - mt) * (p.1 - mean)).sum();
        Some(GaugeSummary {
            mean,
            min: pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min),
            max: pts.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
            first: pts[0].1,
            last: pts[pts.len() - 1].1,
            slope_per_s: if var_t > 0.0 { cov / var_t } else { 0.0 },
        })
    }
}

fn endpoints<T>(scrapes: &[Scrape], f: impl Fn(&Concepts) -> Option<T>) -> Option<(T, T)> {
    let first = scrapes.iter().find_map(|s| f(&s.concepts))?;
    let last = scrapes.iter().rev().find_map(|s| f(&s.concepts))?;
    Some((first, last))
}

/// last − first; a counter that went down was reset, so its last value is the increase.
fn counter(scrapes: &[Scrape], f: impl Fn(&Concepts) -> Option<f64>) -> Option<f64> {
    let (a, b) = endpoints(scrapes, f)?;
    Some(if b >= a { b - a } else { b })
}

/// The bucket-wise difference of two cumulative histograms.
pub fn hist_delta(first: &Hist, last: &Hist) -> Hist {
    let reset = last.count < first.count;
    let buckets = last
        .buckets
        .iter()
        .map(|&(le, c)| {
            let before = if reset {
                0.0
            } else {
                first
                    .buckets
                    .iter()
                    .find(|b| b.0 == le)
                    .map_or(0.0, |b| b.1)
            };
            (le, (c - before).max(0.0))
        })
        .collect();
    if reset {
        return Hist {
            buckets,
            sum: last.sum,
            count: last.count,
        };
    }
    Hist {
        buckets,
        sum: last.sum - first.sum,
        count: last.count - first.count,
    }
}

/// The `q` quantile of a cumulative histogram, interpolating linearly inside
/// the bucket; a rank in the +Inf bucket returns the highest finite bound.
pub fn quantile(h: &Hist, q: f64) -> Option<f64> {
    let total = h.buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, cum) in &h.buckets {
        if cum >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = cum - below;
            let frac = if inside > 0.0 {
                (rank - below) / inside
            } else {
                1.0
            };
            return Some(lower + (le - lower) * frac);
        }
        lower = le;
        below = cum;
    }
    Some(lower)
}

fn hist(scrapes: &[Scrape], f: impl Fn(&Concepts) -> Option<Hist>) -> Option<HistSummary> {
    let (a, b) = endpoints(scrapes, f)?;
    summary(&hist_delta(&a, &b))
}

/// The summary of a histogram's observations (seconds in, ms out).
///
/// A quantile interpolated inside a wide bucket can be far above anything
/// observed: vLLM's queue-time histogram starts at 300 ms, so a queue that
/// was always empty read p99 ≈ 297 ms. Durations are never negative, so
/// Markov's inequality bounds the q quantile by mean ÷ (1 − q) — with the
/// exact mean that is sure, and the estimate is the smaller of the two.
fn summary(d: &Hist) -> Option<HistSummary> {
    if d.count <= 0.0 {
        return None;
    }
    let mean = d.sum.max(0.0) / d.count;
    let q = |q: f64| quantile(d, q).map(|v| v.min(mean / (1.0 - q)) * 1e3);
    Some(HistSummary {
        count: d.count,
        mean_ms: mean * 1e3,
        first_bucket_ms: d.buckets.first().map_or(0.0, |b| b.0 * 1e3),
        p50_ms: q(0.5)?,
        p90_ms: q(0.9)?,
        p99_ms: q(0.99)?,
    })
}

/// Summarises the scrapes of one run (in time order). Gauges describe the
/// load phase — scrapes up to `load_end_s` (the last send) and the first one
/// after it — so a drain at the end does not hide a queue that grew;
/// counters and histograms cover every scrape.
pub fn summarize(scrapes: &[Scrape], load_end_s: Option<f64>) -> ServerSummary {
    let cut = match load_end_s {
        Some(end) => scrapes
            .iter()
            .position(|s| s.t_s > end)
            .map_or(scrapes.len(), |i| i + 1),
        None => scrapes.len(),
    };
    let loaded = &scrapes[..cut.max(scrapes.len().min(1))];
    let window_s = match (scrapes.first(), scrapes.last()) {
        (Some(a), Some(b)) => b.t_s - a.t_s,
        _ => 0.0,
    };
    let generation_tokens = counter(scrapes, |c| c.generation_tokens);
    let hits = counter(scrapes, |c| c.prefix_hits);
    let queries = counter(scrapes, |c| c.prefix_queries);
    ServerSummary {
        scrapes: scrapes.len(),
        window_s,
        running: gauge(loaded, |c| c.running),
        waiting: gauge(loaded, |c| c.waiting),
        kv_usage: gauge(loaded, |c| c.kv_usage),
        kv_capacity_tokens: endpoints(scrapes, |c| c.kv_capacity_tokens).map(|p| p.1),
        prompt_tokens: counter(scrapes, |c| c.prompt_tokens),
        generation_tokens,
        generation_tokens_per_s: generation_tokens
            .filter(|_| window_s > 0.0)
            .map(|g| g / window_s),
        prefix_cache_hit_rate: match (hits, queries) {
            (Some(h), Some(q)) if q > 0.0 => Some(h / q),
            _ => None,
        },
        preemptions: counter(scrapes, |c| c.preemptions),
        aborted: counter(scrapes, |c| c.aborted),
        queue_time: hist(scrapes, |c| c.queue_time.clone()),
        ttft: hist(scrapes, |c| c.ttft.clone()),
        itl: hist(scrapes, |c| c.itl.clone()),
        e2e: hist(scrapes, |c| c.e2e.clone()),
        prefill_time: hist(scrapes, |c| c.prefill_time.clone()),
        gpu_util_time_pct: gauge(loaded, |c| c.gpu_util_time_pct),
        gpu_sm_active: gauge(loaded, |c| c.gpu_sm_active),
        gpu_power_w: gauge(loaded, |c| c.gpu_power_w),
        gpu_memory_used_bytes: gauge(loaded, |c| c.gpu_memory_used_bytes),
        gpu_memory_total_bytes: endpoints(scrapes, |c| c.gpu_memory_total_bytes).map(|p| p.1),
        gpu_energy_j: counter(scrapes, |c| c.gpu_energy_j),
        spec_decode: crate::spec_decode::summarize(
            &scrapes.iter().map(|s| &s.concepts.spec).collect::<Vec<_>>(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(buckets: &[(f64, f64)], sum: f64) -> Hist {
        Hist {
            buckets: buckets.to_vec(),
            sum,
            count: buckets.last().unwrap().1,
        }
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let x = h(
            &[(0.1, 10.0), (0.2, 30.0), (0.5, 40.0), (f64::INFINITY, 40.0)],
            8.0,
        );
        assert!((quantile(&x, 0.25).unwrap() - 0.1).abs() < 1e-12);
        assert!((quantile(&x, 0.5).unwrap() - 0.15).abs() < 1e-12);
        assert!((quantile(&x, 1.0).unwrap() - 0.5).abs() < 1e-12);
        let tail = h(&[(0.1, 1.0), (f64::INFINITY, 10.0)], 1.0);
        assert_eq!(
            quantile(&tail, 0.9),
            Some(0.1),
            "+Inf bucket returns the highest finite bound"
        );
    }

    #[test]
    fn quantiles_in_a_wide_first_bucket_are_bounded_by_the_mean() {
        // 100 queue times of 0.1 ms, all in vLLM's first bucket (≤ 300 ms):
        // interpolation alone says p99 = 297 ms.
        let empty_queue = h(&[(0.3, 100.0), (1.0, 100.0), (f64::INFINITY, 100.0)], 0.01);
        assert!((quantile(&empty_queue, 0.99).unwrap() - 0.297).abs() < 1e-9);
        let s = summary(&empty_queue).unwrap();
        assert!((s.mean_ms - 0.1).abs() < 1e-9);
        assert!((s.p99_ms - 10.0).abs() < 1e-9, "≤ 0.1 ms ÷ 0.01: {s:?}");
        assert!((s.p50_ms - 0.2).abs() < 1e-9, "{s:?}");
        // Where the buckets are finer than the bound, they decide.
        let x = h(
            &[(0.1, 10.0), (0.2, 30.0), (0.5, 40.0), (f64::INFINITY, 40.0)],
            8.0,
        );
        let s = summary(&x).unwrap();
        assert!((s.p50_ms - 150.0).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn deltas_cover_only_the_window_and_survive_resets() {
        let a = h(&[(0.1, 5.0), (1.0, 5.0), (f64::INFINITY, 5.0)], 0.25);
        let b = h(&[(0.1, 5.0), (1.0, 15.0), (f64::INFINITY, 15.0)], 5.25);
        let d = hist_delta(&a, &b);
        assert_eq!(d.count, 10.0);
        assert!((d.sum - 5.0).abs() < 1e-12);
        assert_eq!(d.buckets[0].1, 0.0);
        let reset = hist_delta(&b, &a);
        assert_eq!(reset.count, 5.0);
    }

    #[test]
    fn summary_of_gauges_counters_and_missing_concepts() {
        let scrape = |t: f64, waiting: f64, gen: f64| Scrape {
            t_s: t,
            concepts: Concepts {
                waiting: Some(waiting),
                generation_tokens: Some(gen),
                ..Default::default()
            },
        };
        let s = summarize(
            &[
                scrape(0.0, 0.0, 100.0),
                scrape(1.0, 5.0, 300.0),
                scrape(2.0, 10.0, 500.0),
            ],
            None,
        );
        let w = s.waiting.unwrap();
        assert_eq!((w.first, w.last, w.max, w.mean), (0.0, 10.0, 10.0, 5.0));
        assert!((w.slope_per_s - 5.0).abs() < 1e-12);
        assert_eq!(s.generation_tokens, Some(400.0));
        assert_eq!(s.generation_tokens_per_s, Some(200.0));
        assert_eq!(s.kv_usage, None, "not exposed is None, not zero");
        assert_eq!(s.preemptions, None);
        // A drain after the last send does not hide the growth.
        let drained = [
            scrape(0.0, 0.0, 0.0),
            scrape(1.0, 8.0, 10.0),
            scrape(2.0, 16.0, 20.0),
            scrape(3.0, 0.0, 30.0),
            scrape(4.0, 0.0, 40.0),
        ];
        let s = summarize(&drained, Some(1.5));
        assert_eq!(s.waiting.unwrap().last, 16.0);
        assert_eq!(
            s.generation_tokens,
            Some(40.0),
            "counters cover the whole run"
        );
    }
}
