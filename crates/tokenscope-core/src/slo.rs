//! Service-level objectives: `--slo ttft_p99=500ms,tpot_p99=50ms`.
//!
//! An objective is checked twice. Over the run, the named statistic must not
//! exceed the limit (the verdict and the exit code). Per request, for goodput,
//! the request's own TTFT, TPOT or E2E must not exceed the limit (as vLLM's
//! `--goodput` does); ITL objectives apply to the run only, since one request
//! has many ITLs. A failed request never counts as good.

use crate::duration::parse_duration;
use crate::record::RequestRecord;
use serde::{Deserialize, Serialize};

/// The latency an objective constrains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    Ttft,
    Tpot,
    Itl,
    E2e,
}

impl SloMetric {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "ttft" => SloMetric::Ttft,
            "tpot" => SloMetric::Tpot,
            "itl" => SloMetric::Itl,
            "e2e" | "e2el" => SloMetric::E2e,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Tpot => "tpot",
            SloMetric::Itl => "itl",
            SloMetric::E2e => "e2e",
        }
    }
}

/// One objective: `stat(metric) ≤ limit_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Objective {
    pub metric: SloMetric,
    /// `mean`, `p50`, `p90`, `p95`, `p99`, `p999` or `max`.
    pub stat: String,
    pub limit_ms: f64,
}

impl Objective {
    /// Whether one request meets this objective on its own (always true for ITL).
    pub fn met_by(&self, r: &RequestRecord) -> bool {
        let value_us = match self.metric {
            SloMetric::Ttft => r.ttft_us().map(|v| v as f64),
            SloMetric::Tpot => match r.tpot_us() {
                Some(v) => Some(v),
                None => return true, // one-token answers have no TPOT to violate
            },
            SloMetric::E2e => Some(r.e2e_us() as f64),
            SloMetric::Itl => return true,
        };
        value_us.is_some_and(|v| v / 1e3 <= self.limit_ms)
    }
}

/// A set of objectives, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub objectives: Vec<Objective>,
}

const STATS: [&str; 7] = ["mean", "p50", "p90", "p95", "p99", "p999", "max"];

impl Slo {
    /// Parses `ttft_p99=500ms,tpot_p99=50ms,e2e_max=30s`.
    pub fn parse(text: &str) -> Result<Slo, String> {
        let mut objectives = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!("`{part}`: expected METRIC_STAT=LIMIT, e.g. ttft_p99=500ms")
            })?;
            let (metric, stat) = key.split_once('_').unwrap_or((key, "p99"));
            let metric = SloMetric::parse(metric).ok_or_else(|| {
                format!("`{part}`: unknown metric `{metric}` (ttft, tpot, itl, e2e)")
            })?;
            if !STATS.contains(&stat) {
                return Err(format!(
                    "`{part}`: unknown statistic `{stat}` ({})",
                    STATS.join(", ")
                ));
            }
            let limit = parse_duration(value).map_err(|e| format!("`{part}`: {e}"))?;
            objectives.push(Objective {
                metric,
                stat: stat.to_string(),
                limit_ms: limit.as_secs_f64() * 1e3,
            });
        }
        if objectives.is_empty() {
            return Err("empty SLO; expected e.g. ttft_p99=500ms,tpot_p99=50ms".into());
        }
        Ok(Slo { objectives })
    }

    pub fn is_empty(&self) -> bool {
        self.objectives.is_empty()
    }

    /// Whether a request counts toward goodput: it succeeded and meets every objective.
    pub fn request_is_good(&self, r: &RequestRecord) -> bool {
        r.succeeded() && self.objectives.iter().all(|o| o.met_by(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_objectives() {
        let slo = Slo::parse("ttft_p99=500ms, tpot_p50=0.05s,e2e_max=30s").unwrap();
        assert_eq!(slo.objectives.len(), 3);
        assert_eq!(slo.objectives[0].metric, SloMetric::Ttft);
        assert_eq!(slo.objectives[0].stat, "p99");
        assert_eq!(slo.objectives[0].limit_ms, 500.0);
        assert_eq!(slo.objectives[1].limit_ms, 50.0);
        assert_eq!(slo.objectives[2].metric, SloMetric::E2e);
    }

    #[test]
    fn rejects_nonsense_with_the_culprit_named() {
        let err = Slo::parse("latency_p99=1s").unwrap_err();
        assert!(err.contains("latency"), "{err}");
        let err = Slo::parse("ttft_p42=1s").unwrap_err();
        assert!(err.contains("p42"), "{err}");
        assert!(Slo::parse("ttft_p99").is_err());
        assert!(Slo::parse("").is_err());
    }
}
