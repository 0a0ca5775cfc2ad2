//! Change points: a run whose figure breaks from its configuration's recent
//! history.
//!
//! The rule, for one figure of one run:
//! - the **history** is the figure in the configuration's previous
//!   [`Rule::window`] runs (partial runs left out); with fewer than
//!   [`Rule::min_history`] there is no judgement;
//! - the **baseline** is their median and the **spread** 1.4826 × their
//!   median absolute deviation (a standard deviation that one odd run in the
//!   history does not inflate);
//! - the run is a change point when it lies more than [`Rule::robust_z`]
//!   spreads from the baseline **and** differs from it by more than 5 %
//!   (not `compare`'s 2 %: see [`Rule::noise_pct`]) **and** its 95 %
//!   interval from its own samples
//!   lies clear of the history's typical interval (the medians of their
//!   bounds): a percentile's from its order statistics
//!   ([`crate::metrics::quantile_interval`]), tokens/s's from `compare`'s
//!   bootstrap over time slices. A figure with no interval of its own (the
//!   request rates, the error rate, a sweep's capacity) is trended, never
//!   flagged.
//!
//! Each condition stops a different false alarm, all seen on real runs of
//! the built-in engine on a busy 2-core machine: a history that hardly
//! varies makes any move "many spreads" (a TTFT p50 3.6 % lower scored 25),
//! so the change must also be material; and a p99 that sits between a bulk
//! of 8 ms gaps and a few 22 ms ones jumps by 2 ms when the slow share
//! crosses 1 %, which ten calm runs cannot foresee but each run's own
//! interval shows.
//!
//! Why runs and not only requests: `compare`'s bootstrap resamples one run's
//! requests, which measures how precisely that run knows its figure, not
//! how much a configuration varies from run to run (another day, another
//! node, a warmer cache). The history holds that second variation, so it is
//! the reference, and the run's own interval is the first. What is reused
//! from `compare` is its tail rule (a p99 of fewer than 1,000 requests is
//! not judged) and its bootstrap (the tokens/s interval).

use crate::entry::StoredRun;
use crate::metrics::{Figure, Metric};
use serde::Serialize;
use tokenscope_core::compare::tail_too_few;

/// The change-point rule's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// How many earlier runs make the history.
    pub window: usize,
    /// The fewest earlier runs a judgement needs.
    pub min_history: usize,
    /// How many spreads from the baseline a change point lies, at least.
    pub robust_z: f64,
    /// Changes smaller than this, in % (percentage points for a rate in %),
    /// are never flagged. 5 %, not `compare`'s 2 %: two runs compared back
    /// to back share their machine and hour, a history's runs do not — a
    /// busy neighbour moved every E2E of a calm built-in engine by 2.0 %,
    /// with a tight interval, 31 spreads from ten runs that varied less.
    pub noise_pct: f64,
}

impl Default for Rule {
    fn default() -> Self {
        Rule {
            window: 10,
            min_history: 5,
            robust_z: 4.0,
            noise_pct: 5.0,
        }
    }
}

impl Rule {
    /// The rule in words, for every output that flags.
    pub fn describe(&self) -> String {
        format!(
            "a change point lies > {} robust SDs (1.4826 × MAD) from the median of the configuration's previous {} runs (at least {} needed), > {} % from it, with its 95 % interval clear of theirs",
            self.robust_z, self.window, self.min_history, self.noise_pct
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict", content = "why")]
pub enum Verdict {
    /// A change point; `regression` when it went the bad way.
    Change {
        regression: bool,
    },
    Steady,
    NotJudged(String),
}

/// One figure of one run against its history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    pub run_id: i64,
    pub metric: &'static str,
    pub value: f64,
    /// Earlier runs the baseline rests on.
    pub history: usize,
    pub baseline: Option<f64>,
    pub spread: Option<f64>,
    /// vs the baseline: % (percentage points for a rate in %).
    pub change: Option<f64>,
    /// Spreads from the baseline (infinite when the history did not vary).
    pub z: Option<f64>,
    /// A percentile's 95 % interval in this run, and the history's typical one.
    pub interval: Option<(f64, f64)>,
    pub history_interval: Option<(f64, f64)>,
    #[serde(flatten)]
    pub verdict: Verdict,
}

impl Judgement {
    pub fn is_change(&self) -> bool {
        matches!(self.verdict, Verdict::Change { .. })
    }
}

/// Judges `metric` in every run of one configuration (`runs` oldest first).
/// Runs without the figure get no judgement.
pub fn judge(runs: &[StoredRun], metric: &'static Metric, rule: &Rule) -> Vec<Judgement> {
    let mut out = Vec::new();
    let mut earlier: Vec<&Figure> = Vec::new();
    for run in runs {
        let Some(fig) = run.figure(metric.name) else {
            continue;
        };
        let history = &earlier[earlier.len().saturating_sub(rule.window)..];
        let mut j = Judgement {
            run_id: run.id,
            metric: metric.name,
            value: fig.value,
            history: history.len(),
            baseline: None,
            spread: None,
            change: None,
            z: None,
            interval: fig.ci_low.zip(fig.ci_high),
            history_interval: None,
            verdict: Verdict::Steady,
        };
        let tail = metric
            .quantile
            .zip(fig.samples)
            .and_then(|(q, n)| tail_too_few(q, n as usize));
        if run.entry.partial {
            j.verdict = Verdict::NotJudged("not judged: the run was cut short".into());
        } else if history.len() < rule.min_history {
            j.verdict = Verdict::NotJudged(format!(
                "not judged: {} earlier run(s) of this configuration, the rule needs {}",
                history.len(),
                rule.min_history
            ));
        } else if let Some(why) = tail {
            j.verdict = Verdict::NotJudged(why);
        } else if j.interval.is_none() {
            j.verdict = Verdict::NotJudged(
                "not judged: the run has no interval of its own for it (a request rate, the error rate, a sweep's capacity): trended only"
                    .into(),
            );
        } else {
            against(&mut j, history, metric, rule);
        }
        if !run.entry.partial {
            earlier.push(fig);
        }
        out.push(j);
    }
    out
}

/// Sets the baseline, the change and the verdict of `j` against `history`.
fn against(j: &mut Judgement, history_figs: &[&Figure], metric: &Metric, rule: &Rule) {
    let values: Vec<f64> = history_figs.iter().map(|f| f.value).collect();
    let history = &values[..];
    let baseline = median(history);
    let deviations: Vec<f64> = history.iter().map(|v| (v - baseline).abs()).collect();
    let spread = 1.4826 * median(&deviations);
    let diff = j.value - baseline;
    let change = if metric.unit == "%" {
        Some(diff)
    } else if baseline != 0.0 {
        Some(diff / baseline.abs() * 100.0)
    } else {
        None
    };
    let z = if spread > 0.0 {
        diff.abs() / spread
    } else if diff == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    j.baseline = Some(baseline);
    j.spread = Some(spread);
    j.change = change;
    j.z = Some(z);
    j.history_interval = typical_interval(history_figs);
    let clear = match (j.interval, j.history_interval) {
        (Some((lo, hi)), Some((base_lo, base_hi))) => hi < base_lo || lo > base_hi,
        _ => false, // the history has no intervals to be clear of
    };
    j.verdict = match change {
        None => Verdict::NotJudged("not judged: the baseline is 0".into()),
        Some(c) if c.abs() > rule.noise_pct && z > rule.robust_z && clear => Verdict::Change {
            regression: (diff < 0.0) == metric.higher_is_better,
        },
        Some(_) => Verdict::Steady,
    };
}

/// The medians of the history's interval bounds, when its runs have intervals.
fn typical_interval(history: &[&Figure]) -> Option<(f64, f64)> {
    let lows: Vec<f64> = history.iter().filter_map(|f| f.ci_low).collect();
    let highs: Vec<f64> = history.iter().filter_map(|f| f.ci_high).collect();
    (!lows.is_empty() && !highs.is_empty()).then(|| (median(&lows), median(&highs)))
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{Kind, RunEntry};
    use crate::metrics::{fig, metric};

    /// A run whose figure is known to ± 0.1 %.
    fn run(id: i64, metric_name: &str, value: f64, samples: u64) -> StoredRun {
        run_within(id, metric_name, value, samples, 0.001)
    }

    fn run_within(id: i64, metric_name: &str, value: f64, samples: u64, width: f64) -> StoredRun {
        StoredRun {
            id,
            recorded_at: String::new(),
            parent_id: None,
            entry: RunEntry {
                kind: Kind::Bench,
                started_at: format!("2026-12-{id:02}"),
                point: None,
                target: "t".into(),
                api: "a".into(),
                server_kind: None,
                model: "m".into(),
                engine_version: None,
                config_key: "k".into(),
                config: serde_json::Value::Null,
                slo: None,
                slo_met: None,
                partial: false,
                requests: samples,
                failed: 0,
                diagnosis: vec![],
                run_dir: String::new(),
                tool_version: String::new(),
                tags: vec![],
                figures: vec![Figure {
                    ci_low: Some(value * (1.0 - width)),
                    ci_high: Some(value * (1.0 + width)),
                    ..fig(metric_name, value, Some(samples))
                }],
            },
        }
    }

    fn flagged(values: &[f64], name: &str, samples: u64) -> Vec<i64> {
        let runs: Vec<StoredRun> = values
            .iter()
            .enumerate()
            .map(|(i, v)| run(i as i64 + 1, name, *v, samples))
            .collect();
        judge(&runs, metric(name).unwrap(), &Rule::default())
            .into_iter()
            .filter(Judgement::is_change)
            .map(|j| j.run_id)
            .collect()
    }

    #[test]
    fn a_step_is_flagged_once_and_noise_never() {
        let noisy = [10.0, 10.3, 9.8, 10.1, 9.9, 10.2, 10.0, 9.7, 10.1, 10.0];
        assert!(flagged(&noisy, "tpot_p50", 500).is_empty());
        let mut step = noisy.to_vec();
        step.push(12.0);
        assert_eq!(flagged(&step, "tpot_p50", 500), vec![11]);
    }

    #[test]
    fn the_first_runs_are_not_judged() {
        let runs: Vec<StoredRun> = [10.0, 20.0, 40.0]
            .iter()
            .enumerate()
            .map(|(i, v)| run(i as i64, "ttft_p50", *v, 500))
            .collect();
        let js = judge(&runs, metric("ttft_p50").unwrap(), &Rule::default());
        assert!(js
            .iter()
            .all(|j| matches!(j.verdict, Verdict::NotJudged(_))));
    }

    #[test]
    fn a_change_within_the_noise_threshold_is_not_flagged_even_without_spread() {
        let mut same = vec![100.0; 8];
        same.push(104.5);
        assert!(flagged(&same, "ttft_p50", 500).is_empty());
        same.push(106.0);
        assert_eq!(flagged(&same, "ttft_p50", 500), vec![10]);
    }

    #[test]
    fn a_tail_of_too_few_requests_is_not_judged() {
        let mut v = vec![100.0; 8];
        v.push(300.0);
        assert!(flagged(&v, "ttft_p99", 200).is_empty());
        assert_eq!(flagged(&v, "ttft_p99", 2000), vec![9]);
    }

    #[test]
    fn a_step_inside_the_runs_own_intervals_is_not_flagged() {
        // Ten calm p99s known only to ± 30 % each, then one 20 % higher.
        let mut runs: Vec<StoredRun> = (1..=10)
            .map(|i| run_within(i, "itl_p99", 8.4 + (i % 3) as f64 * 0.01, 5000, 0.3))
            .collect();
        runs.push(run_within(11, "itl_p99", 10.1, 5000, 0.3));
        let js = judge(&runs, metric("itl_p99").unwrap(), &Rule::default());
        assert_eq!(js[10].verdict, Verdict::Steady, "{:?}", js[10]);
        assert!(
            js[10].z.unwrap() > 4.0,
            "the spread alone would have flagged it"
        );
    }

    #[test]
    fn a_figure_without_an_interval_is_trended_not_judged() {
        let mut runs: Vec<StoredRun> = (1..=10)
            .map(|i| run(i, "requests_per_s", 7.0, 500))
            .collect();
        let mut last = run(11, "requests_per_s", 5.0, 500);
        last.entry.figures[0].ci_low = None;
        last.entry.figures[0].ci_high = None;
        runs.push(last);
        let js = judge(&runs, metric("requests_per_s").unwrap(), &Rule::default());
        assert!(matches!(&js[10].verdict, Verdict::NotJudged(w) if w.contains("trended only")));
    }

    #[test]
    fn direction_decides_regression() {
        let runs: Vec<StoredRun> = [100.0, 101.0, 99.0, 100.0, 100.5, 80.0]
            .iter()
            .enumerate()
            .map(|(i, v)| run(i as i64, "output_tokens_per_s", *v, 500))
            .collect();
        let js = judge(
            &runs,
            metric("output_tokens_per_s").unwrap(),
            &Rule::default(),
        );
        assert_eq!(js[5].verdict, Verdict::Change { regression: true });
    }
}
