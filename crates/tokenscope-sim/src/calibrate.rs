//! `sim calibrate`: fit the cost model's efficiency factors, per-step and
//! per-request overheads to a measured run, by replaying that run's load on the virtual
//! clock and minimising the error on its latency medians (Nelder–Mead in log
//! space). The fitted factors form a profile that `sim plan --profile` uses.

use crate::engine::cost::Efficiency;
use crate::engine::EngineConfig;
use crate::plan::{simulate, PlanLoad};
use serde::{Deserialize, Serialize};
use tokenscope_core::metrics::measure;

/// The medians a calibration matches (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Targets {
    pub ttft_p50_ms: f64,
    pub ttft_p90_ms: f64,
    pub tpot_p50_ms: f64,
    pub e2e_p50_ms: f64,
}

impl Targets {
    fn error(&self, other: &Targets) -> f64 {
        let d = |a: f64, b: f64| (a.max(1e-6) / b.max(1e-6)).ln().powi(2);
        d(self.ttft_p50_ms, other.ttft_p50_ms)
            + d(self.ttft_p90_ms, other.ttft_p90_ms)
            + d(self.tpot_p50_ms, other.tpot_p50_ms)
            + d(self.e2e_p50_ms, other.e2e_p50_ms)
    }
}

/// What a calibration found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Profile {
    pub model: String,
    pub gpu: String,
    pub tp: u32,
    pub efficiency: Efficiency,
    /// Per calibration run: its directory, what was measured and what the fit predicts.
    pub runs: Vec<CalibrationRun>,
    /// Sum over runs of squared log ratios over the four medians (0 = exact).
    pub residual: f64,
    /// Speculative decoding as the runs' servers counted it (a
    /// `--spec-decode` value): `sim plan --profile` speculates so too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CalibrationRun {
    pub run_dir: String,
    pub measured: Targets,
    pub predicted: Targets,
}

/// Simulates `load` with `efficiency` and reads the four medians.
pub fn predict(
    config: &EngineConfig,
    load: &PlanLoad,
    efficiency: Efficiency,
) -> Result<Targets, String> {
    let mut cfg = config.clone();
    cfg.efficiency = efficiency;
    let out = simulate(&cfg, load)?;
    let m = measure(&out.records, None, None);
    let l = &m.latency;
    let p = |s: Option<tokenscope_core::stats::Summary>,
             q: fn(&tokenscope_core::stats::Summary) -> f64| s.as_ref().map_or(0.0, q);
    Ok(Targets {
        ttft_p50_ms: p(l.ttft_ms, |s| s.p50),
        ttft_p90_ms: p(l.ttft_ms, |s| s.p90),
        tpot_p50_ms: p(l.tpot_ms, |s| s.p50),
        e2e_p50_ms: p(l.e2e_ms, |s| s.p50),
    })
}

/// The range each fitted factor may take: (name, low, high).
const BOUNDS: [(&str, f64, f64); 5] = [
    ("compute efficiency", 1e-4, 1.0),
    ("memory efficiency", 1e-4, 1.0),
    ("step overhead (s)", 1e-6, 1.0),
    ("per-sequence cost (s)", 1e-7, 1.0),
    ("per-request overhead (s)", 1e-6, 1.0),
];

/// Parameters live in log space: compute, memory, step overhead,
/// per-sequence cost, per-request overhead. The per-layer time stays
/// `base`'s: for one model it moves every step as the step overhead does.
fn efficiency_at(x: &[f64; 5], base: &Efficiency) -> Efficiency {
    let f = |i: usize| x[i].exp().clamp(BOUNDS[i].1, BOUNDS[i].2);
    Efficiency {
        compute: f(0),
        memory: f(1),
        step_overhead_s: f(2),
        per_sequence_s: f(3),
        request_overhead_s: f(4),
        per_layer_s: base.per_layer_s,
    }
}

/// The fitted factors that ended on (within 1 % of) a bound: the model could
/// only match the run by pushing them there, so the run contradicts it (a
/// CPU server, another GPU than the one named, costs the model lacks).
pub fn at_bounds(e: &Efficiency) -> Vec<String> {
    let values = [
        e.compute,
        e.memory,
        e.step_overhead_s,
        e.per_sequence_s,
        e.request_overhead_s,
    ];
    BOUNDS
        .iter()
        .zip(values)
        .filter(|((_, lo, hi), v)| *v <= lo * 1.01 || *v >= hi * 0.99)
        .map(|((name, lo, hi), v)| {
            let which = if v <= lo * 1.01 { "lower" } else { "upper" };
            let bound = if which == "lower" { lo } else { hi };
            format!("{name} = {v:.3e} sits at its {which} bound {bound:e}")
        })
        .collect()
}

/// Fits compute and memory efficiency, the per-step overhead, the
/// per-sequence cost and the per-request overhead so the replays of `runs` (load, measured medians) match
/// their measurements together. One run pins down prefill and decode cost at
/// its batch size; runs at different loads also separate the per-step from
/// the per-sequence cost. Returns the factors, each run's prediction, and the
/// summed residual.
pub fn calibrate(
    config: &EngineConfig,
    runs: &[(PlanLoad, Targets)],
) -> Result<(Efficiency, Vec<Targets>, f64), String> {
    let start = config.efficiency;
    let cost = |x: &[f64; 5]| -> f64 {
        runs.iter()
            .map(|(load, measured)| {
                predict(config, load, efficiency_at(x, &start))
                    .map_or(f64::INFINITY, |t| t.error(measured))
            })
            .sum()
    };
    let x0 = [
        start.compute.ln(),
        start.memory.ln(),
        start.step_overhead_s.ln(),
        start.per_sequence_s.ln(),
        start.request_overhead_s.max(1e-4).ln(),
    ];
    // Starts from the given factors and from slower memory systems, the
    // best kept: a slow memory can pass for a large step overhead at one
    // load, and the replays are discrete-event runs whose error surface
    // has steps (a request crossing into the next engine step, or queueing
    // behind another in the front end), so one simplex can stall in the
    // other's valley.
    let starts = [1.0, 0.6, 0.35].map(|share| {
        let mut x = x0;
        x[1] = (start.memory * share).ln();
        x
    });
    let (best, _) = starts
        .map(|x| nelder_mead(cost, x, 1.0, 500))
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("three starts");
    let eff = efficiency_at(&best, &start);
    let predicted = runs
        .iter()
        .map(|(load, _)| predict(config, load, eff))
        .collect::<Result<Vec<_>, _>>()?;
    let residual = runs
        .iter()
        .zip(&predicted)
        .map(|((_, m), p)| p.error(m))
        .sum();
    Ok((eff, predicted, residual))
}

/// Nelder–Mead minimisation in N dimensions, from `x0` with initial step
/// `step`: the best point found and its value.
fn nelder_mead<const N: usize>(
    f: impl Fn(&[f64; N]) -> f64,
    x0: [f64; N],
    step: f64,
    max_evals: usize,
) -> ([f64; N], f64) {
    let mut simplex: Vec<([f64; N], f64)> = (0..=N)
        .map(|i| {
            let mut x = x0;
            if i > 0 {
                x[i - 1] += step;
            }
            (x, f(&x))
        })
        .collect();
    let mut evals = N + 1;
    let combine = |a: &[f64; N], b: &[f64; N], t: f64| -> [f64; N] {
        std::array::from_fn(|k| a[k] + t * (b[k] - a[k]))
    };
    while evals < max_evals {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        if (simplex[N].1 - simplex[0].1).abs() < 1e-10 {
            break;
        }
        let centroid: [f64; N] =
            std::array::from_fn(|k| simplex[..N].iter().map(|s| s.0[k]).sum::<f64>() / N as f64);
        let worst = simplex[N];
        let reflected = combine(&centroid, &worst.0, -1.0);
        let fr = f(&reflected);
        evals += 1;
        if fr < simplex[0].1 {
            let expanded = combine(&centroid, &worst.0, -2.0);
            let fe = f(&expanded);
            evals += 1;
            simplex[N] = if fe < fr {
                (expanded, fe)
            } else {
                (reflected, fr)
            };
        } else if fr < simplex[N - 1].1 {
            simplex[N] = (reflected, fr);
        } else {
            let contracted = combine(&centroid, &worst.0, 0.5);
            let fc = f(&contracted);
            evals += 1;
            if fc < worst.1 {
                simplex[N] = (contracted, fc);
            } else {
                let best = simplex[0].0;
                for s in simplex.iter_mut().skip(1) {
                    s.0 = combine(&best, &s.0, 0.5);
                    s.1 = f(&s.0);
                    evals += 1;
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_on_their_bounds_are_named() {
        let ok = Efficiency {
            compute: 0.5,
            memory: 0.7,
            step_overhead_s: 1e-3,
            per_sequence_s: 1e-5,
            request_overhead_s: 0.01,
            per_layer_s: 25e-6,
        };
        assert!(at_bounds(&ok).is_empty());
        let pinned = Efficiency {
            compute: 1e-4,
            step_overhead_s: 1.0,
            ..ok
        };
        let found = at_bounds(&pinned);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("compute efficiency") && found[0].contains("lower"));
        assert!(found[1].contains("step overhead") && found[1].contains("upper"));
    }

    #[test]
    fn nelder_mead_finds_a_quadratic_minimum() {
        let f =
            |x: &[f64; 3]| (x[0] - 1.0).powi(2) + 2.0 * (x[1] + 2.0).powi(2) + (x[2] - 0.5).powi(2);
        let (x, _) = nelder_mead(f, [0.0, 0.0, 0.0], 1.0, 500);
        assert!(
            (x[0] - 1.0).abs() < 1e-3 && (x[1] + 2.0).abs() < 1e-3 && (x[2] - 0.5).abs() < 1e-3,
            "{x:?}"
        );
    }
}
