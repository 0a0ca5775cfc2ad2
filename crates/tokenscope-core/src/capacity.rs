//! Where a series stops meeting its SLO: each point's standing against the
//! objectives ([`PointSlo`]) and the highest load that meets them all
//! ([`SloCapacity`]). The trade-off analysis and the autoscaling thresholds
//! both read it, so it sits below both.

use crate::slo::{ObjectiveResult, Verdict};
use serde::{Deserialize, Serialize};

/// A point's SLO standing for the gate and the recommendations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PointSlo {
    /// `met` only when every objective's upper 95 % bound is within its
    /// limit; `not_enough_data` when a statistic rests on too few requests.
    pub verdict: Verdict,
    /// The worst objective's upper bound ÷ its limit (∞ where unbounded).
    /// JSON has no ∞ (serde_json writes it, and NaN, as `null`), so `null`
    /// reads back as ∞.
    #[serde(deserialize_with = "null_as_infinity")]
    pub ratio: f64,
}

fn null_as_infinity<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

impl PointSlo {
    /// One objective's gate: its verdict, tightened to its upper bound.
    fn gate(o: &ObjectiveResult) -> (Verdict, f64) {
        let bound = match o.stat.as_str() {
            "max" => o.value_ms,
            _ => o.ci_high_ms,
        };
        let ratio = bound.map_or(f64::INFINITY, |b| b / o.limit_ms);
        let verdict = match o
            .verdict
            .unwrap_or(if o.met { Verdict::Met } else { Verdict::NotMet })
        {
            Verdict::Met if ratio > 1.0 => Verdict::NotMet,
            v => v,
        };
        (verdict, ratio)
    }

    /// The point's standing over all objectives, and the name of the one that binds.
    pub fn judge(objectives: &[ObjectiveResult]) -> (PointSlo, Option<String>) {
        let gates: Vec<(Verdict, f64, String)> = objectives
            .iter()
            .map(|o| {
                let (v, r) = Self::gate(o);
                (v, r, format!("{}_{}", o.metric, o.stat))
            })
            .collect();
        let verdict = Verdict::all(gates.iter().map(|g| g.0));
        // The binding objective: one with the point's verdict, the largest ratio.
        let binding = gates
            .iter()
            .filter(|g| g.0 == verdict)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let ratio = gates.iter().map(|g| g.1).fold(0.0, f64::max);
        (PointSlo { verdict, ratio }, binding.map(|g| g.2.clone()))
    }

    pub fn met(&self) -> bool {
        self.verdict == Verdict::Met
    }
}

/// The highest load that meets the SLO: the heaviest point, in ascending
/// load, up to which every point meets it at each objective's 95 % upper
/// bound; the load interpolated between it and the first point that does
/// not (linearly in the worst objective's bound ÷ limit); the margin left.
/// A point whose statistic rests on too few requests stops the walk with
/// "not enough data" rather than a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloCapacity {
    /// The objectives in words (`ttft_p99 ≤ 100 ms, tpot_p99 ≤ 50 ms`).
    #[serde(default)]
    pub objectives: String,
    /// The heaviest measured load meeting every objective (`None`: not even the lightest).
    pub highest_met_load: Option<f64>,
    /// Where the worst objective reaches its limit, between the last point that
    /// meets it and the first that does not; `None` when no point fails (the
    /// capacity is beyond the series) or none meets it.
    pub interpolated_load: Option<f64>,
    /// At `highest_met_load`: how far under its limit the worst objective's upper bound is, in %.
    pub margin_pct: Option<f64>,
    /// The objective that binds first (`ttft_p99`, …).
    pub limiting: Option<String>,
    /// The first load whose verdict could not be reached (too few requests), and why.
    #[serde(default)]
    pub undecided_load: Option<f64>,
    #[serde(default)]
    pub undecided_reason: Option<String>,
    /// `--target-load`, when given, and whether the SLO holds there
    /// (`None`: the data cannot tell).
    pub target_load: Option<f64>,
    pub target_met: Option<bool>,
}

impl SloCapacity {
    /// Every point met the SLO: the capacity lies past the heaviest one.
    pub fn beyond_series(&self) -> bool {
        self.highest_met_load.is_some()
            && self.interpolated_load.is_none()
            && self.undecided_load.is_none()
    }
}

/// `judged[i]`: the objectives judged at load `loads[i]` (ascending);
/// `objectives`: the SLO in words.
pub fn slo_capacity(
    loads: &[f64],
    judged: &[Vec<ObjectiveResult>],
    objectives: String,
    target: Option<f64>,
) -> SloCapacity {
    let points: Vec<(PointSlo, Option<String>)> =
        judged.iter().map(|o| PointSlo::judge(o)).collect();
    // The SLO holds up to the first point that does not meet it; a lucky
    // point past that does not count.
    let stop = points.iter().position(|(p, _)| !p.met());
    let last_good = match stop {
        Some(0) => None,
        Some(i) => Some(i - 1),
        None => loads.len().checked_sub(1),
    };
    let undecided = stop.filter(|&i| points[i].0.verdict == Verdict::NotEnoughData);
    let first_bad = stop.filter(|_| undecided.is_none());
    let interpolated = match (last_good, first_bad) {
        (Some(a), Some(b)) => {
            let (ra, rb) = (points[a].0.ratio, points[b].0.ratio);
            let t = if rb.is_finite() && rb > ra {
                (1.0 - ra) / (rb - ra)
            } else {
                0.0
            };
            Some(loads[a] + t.clamp(0.0, 1.0) * (loads[b] - loads[a]))
        }
        _ => None,
    };
    let highest = last_good.map(|i| loads[i]);
    let capacity = interpolated.or(highest);
    let undecided_reason = undecided.map(|i| {
        let why: Vec<String> = judged[i].iter().filter_map(|o| o.reason.clone()).collect();
        why.join("; ")
    });
    // Past an undecided point the data cannot tell either way.
    let target_met = target.map(|t| match (capacity, undecided) {
        (Some(c), _) if c >= t => Some(true),
        (_, Some(_)) => None,
        _ => Some(false),
    });
    SloCapacity {
        objectives,
        highest_met_load: highest,
        interpolated_load: interpolated,
        margin_pct: last_good.map(|i| (1.0 - points[i].0.ratio) * 100.0),
        limiting: stop.or(last_good).and_then(|i| points[i].1.clone()),
        undecided_load: undecided.map(|i| loads[i]),
        undecided_reason,
        target_load: target,
        target_met: target_met.flatten(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unbounded_ratio_survives_json() {
        let p = PointSlo {
            verdict: Verdict::NotEnoughData,
            ratio: f64::INFINITY,
        };
        let text = serde_json::to_string(&p).unwrap();
        assert!(text.contains("null"), "{text}");
        let back: PointSlo = serde_json::from_str(&text).unwrap();
        assert_eq!(back.ratio, f64::INFINITY);
    }
}
