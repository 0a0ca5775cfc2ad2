//! Speculative decoding across a sweep's loads: the acceptance each point's
//! server counted, and a warning when it falls as the load grows (a
//! proposer starved of time or a scheduler that drafts less under pressure
//! both lower it, and with it the tokens each step yields).

use crate::results::Finding;
use serde::{Deserialize, Serialize};

/// One point's speculation, as its server counted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecAtLoad {
    pub point: String,
    pub load: f64,
    /// Accepted ÷ drafted tokens.
    pub acceptance_rate: f64,
    /// 1 + accepted ÷ drafts: tokens a sequence gains per step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_accepted_length: Option<f64>,
    /// The draft tokens the rate rests on (`None`: a server's gauge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_tokens: Option<f64>,
}

/// A sweep's `analysis.spec_decode`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecAcrossLoads {
    pub points: Vec<SpecAtLoad>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

/// The least fall, in points of acceptance, that is reported.
pub const MIN_FALL: f64 = 0.05;

/// The points' speculation and, when a higher load's acceptance fell from
/// the lowest load's by at least [`MIN_FALL`] and by more than three
/// standard errors of the two rates (each draft token counted as a trial),
/// the finding `spec_acceptance_falls_with_load`. `None` when no point's
/// server speculated.
pub fn across(mut points: Vec<SpecAtLoad>) -> Option<SpecAcrossLoads> {
    if points.is_empty() {
        return None;
    }
    points.sort_by(|a, b| a.load.total_cmp(&b.load));
    let base = &points[0];
    let fell = points.iter().skip(1).find(|p| falls(base, p));
    let findings = fell.map(|p| finding(base, p)).into_iter().collect();
    Some(SpecAcrossLoads { points, findings })
}

/// Whether `p`'s acceptance is below `base`'s by the rule's margin.
fn falls(base: &SpecAtLoad, p: &SpecAtLoad) -> bool {
    let fall = base.acceptance_rate - p.acceptance_rate;
    let (Some(n0), Some(n1)) = (base.draft_tokens, p.draft_tokens) else {
        return false; // a gauge gives no count to judge a fall by
    };
    let var = |r: f64, n: f64| r * (1.0 - r) / n.max(1.0);
    let se = (var(base.acceptance_rate, n0) + var(p.acceptance_rate, n1)).sqrt();
    fall >= MIN_FALL && fall > 3.0 * se
}

fn finding(base: &SpecAtLoad, p: &SpecAtLoad) -> Finding {
    let pct = |x: f64| x * 100.0;
    let length = |s: &SpecAtLoad| {
        s.mean_accepted_length
            .map_or(String::new(), |l| format!(", {l:.2} tokens a step"))
    };
    Finding {
        rule: "spec_acceptance_falls_with_load".into(),
        severity: "warning".into(),
        message: format!(
            "speculative decoding's acceptance fell with load: {:.1} % of draft tokens accepted at {}{} against {:.1} % at {}{}; each step yields fewer tokens, so TPOT rises faster than the batch alone explains (rule: a fall of at least {:.0} points and over 3 standard errors of the counted draft tokens)",
            pct(p.acceptance_rate), p.point, length(p),
            pct(base.acceptance_rate), base.point, length(base),
            pct(MIN_FALL)
        ),
        evidence: [
            ("baseline".to_string(), serde_json::json!(base.point)),
            ("point".to_string(), serde_json::json!(p.point)),
            ("acceptance_rate".to_string(), serde_json::json!(p.acceptance_rate)),
            ("baseline_acceptance_rate".to_string(), serde_json::json!(base.acceptance_rate)),
        ]
        .into_iter()
        .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(load: f64, rate: f64, drafted: f64) -> SpecAtLoad {
        SpecAtLoad {
            point: format!("c{load}"),
            load,
            acceptance_rate: rate,
            mean_accepted_length: Some(1.0 + 4.0 * rate),
            draft_tokens: Some(drafted),
        }
    }

    #[test]
    fn a_counted_fall_is_reported_and_noise_is_not() {
        let fell = across(vec![at(16.0, 0.55, 20_000.0), at(1.0, 0.7, 20_000.0)]).unwrap();
        assert_eq!(fell.points[0].load, 1.0, "in load order");
        assert_eq!(fell.findings.len(), 1);
        assert!(fell.findings[0]
            .message
            .contains("55.0 % of draft tokens accepted at c16"));
        // 4 points down on 100 draft tokens each: within noise.
        let noise = across(vec![at(1.0, 0.7, 100.0), at(16.0, 0.6, 100.0)]).unwrap();
        assert!(noise.findings.is_empty());
        // A rise is no warning; nothing speculated, nothing said.
        assert!(across(vec![at(1.0, 0.6, 1e5), at(8.0, 0.7, 1e5)])
            .unwrap()
            .findings
            .is_empty());
        assert!(across(vec![]).is_none());
    }
}
