//! Service-level objectives: `--slo ttft_p99=500ms,tpot_p99=50ms`.
//!
//! An objective is checked twice. Over the run, the named statistic must not
//! exceed the limit (the verdict and the exit code). Per request, for goodput,
//! the request's own TTFT, TPOT or E2E must not exceed the limit (as vLLM's
//! `--goodput` does); ITL objectives apply to the run only, since one request
//! has many ITLs. A failed request never counts as good.
//!
//! A limit always carries its unit (`500ms`, `1s`, `250us`): a bare number is
//! refused, because tools disagree on what it means (vLLM's `--goodput
//! ttft:500` is milliseconds, a duration flag's bare number is seconds).
//!
//! A run-level verdict on a statistic rests on its sample: each objective is
//! judged with a 95 % confidence interval ([`Distribution::quantile_interval`])
//! and a sample-size rule ([`Objective::samples_needed`]): ten requests
//! beyond a quantile, as `compare` asks. Where the interval clears the limit
//! on one side the verdict stands whatever the count; where it straddles the
//! limit and the count is short, the verdict is "not enough data".

use crate::duration::parse_duration;
use crate::record::RequestRecord;
use crate::stats::Distribution;
use serde::{Deserialize, Serialize};

/// The latency an objective constrains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    Ttft,
    /// The time to the first answer token: a reasoning request's answer
    /// start, any other request's TTFT (its answer began at once).
    AnswerStart,
    Tpot,
    Itl,
    E2e,
    /// A realtime session's lag behind the speaker, each delta's
    /// ([`crate::record::RealtimeSession::lags_us`]).
    Lag,
}

impl SloMetric {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "ttft" => SloMetric::Ttft,
            "answer_start" | "ttfo" => SloMetric::AnswerStart,
            "tpot" => SloMetric::Tpot,
            "itl" => SloMetric::Itl,
            "e2e" | "e2el" => SloMetric::E2e,
            "lag" => SloMetric::Lag,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::AnswerStart => "answer_start",
            SloMetric::Tpot => "tpot",
            SloMetric::Itl => "itl",
            SloMetric::E2e => "e2e",
            SloMetric::Lag => "lag",
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

/// What the data says of an objective (or of a whole SLO).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Met,
    NotMet,
    /// Too few requests for the statistic, and its interval straddles the limit.
    NotEnoughData,
}

impl Verdict {
    /// The worst of several: any not met, else any undecided, else met.
    pub fn all(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        verdicts
            .into_iter()
            .fold(Verdict::Met, |a, b| match (a, b) {
                (Verdict::NotMet, _) | (_, Verdict::NotMet) => Verdict::NotMet,
                (Verdict::NotEnoughData, _) | (_, Verdict::NotEnoughData) => Verdict::NotEnoughData,
                _ => Verdict::Met,
            })
    }

    pub fn words(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::NotMet => "NOT met",
            Verdict::NotEnoughData => "not enough data to judge",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloReport {
    pub objectives: Vec<ObjectiveResult>,
    /// Every objective held over the run (`verdict` is `met`).
    pub met: bool,
    /// `met`, `not_met`, or `not_enough_data` (a statistic rests on too few
    /// requests to decide; exit code 7). Absent in runs written before it.
    #[serde(default)]
    pub verdict: Option<Verdict>,
    /// Requests that succeeded and met every per-request objective.
    pub good_requests: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectiveResult {
    pub metric: String,
    pub stat: String,
    pub limit_ms: f64,
    pub value_ms: Option<f64>,
    pub met: bool,
    /// `met`, `not_met` or `not_enough_data` (see `docs/metrics.md`).
    #[serde(default)]
    pub verdict: Option<Verdict>,
    /// Samples the statistic rests on, and how many its rule asks for.
    #[serde(default)]
    pub n: Option<u64>,
    #[serde(default)]
    pub needed: Option<u64>,
    /// 95 % confidence interval of the statistic; a bound is absent where the
    /// sample cannot give it (the p99 of 32 requests has no upper bound).
    #[serde(default)]
    pub ci_low_ms: Option<f64>,
    #[serde(default)]
    pub ci_high_ms: Option<f64>,
    /// Why no verdict: "not enough requests to judge ttft p99 (n = 32; need ≈ 1,000)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Requests needed beyond a quantile before its estimate may decide a
/// verdict on its own (the rule `compare` uses for tail quantiles).
pub const BEYOND_QUANTILE: f64 = 10.0;

/// `q` of a statistic name (`p99` → 0.99); `None` for `mean` and `max`.
pub fn quantile_of(stat: &str) -> Option<f64> {
    Some(match stat {
        "p50" => 0.50,
        "p90" => 0.90,
        "p95" => 0.95,
        "p99" => 0.99,
        "p999" => 0.999,
        _ => return None,
    })
}

impl Objective {
    /// `ttft_p99`.
    pub fn key(&self) -> String {
        format!("{}_{}", self.metric.name(), self.stat)
    }

    /// The sample size at which the estimate alone may decide: ten beyond a
    /// quantile (p50: 20, p90: 100, p99: 1,000), ten for a mean, one for the
    /// maximum (a statement about this run's requests, not a population).
    pub fn samples_needed(&self) -> u64 {
        match quantile_of(&self.stat) {
            Some(q) => (BEYOND_QUANTILE / (1.0 - q)).round() as u64,
            None if self.stat == "mean" => 10,
            None => 1,
        }
    }

    /// Judges the run's statistic. `values` holds the metric's samples in
    /// microseconds; `estimate_ms` is the figure the summary shows (so the
    /// verdict and the table never disagree).
    pub fn judge(&self, values: &Distribution, estimate_ms: Option<f64>) -> ObjectiveResult {
        let n = values.count();
        let needed = self.samples_needed();
        let (lo, hi) = match quantile_of(&self.stat) {
            Some(q) => values.quantile_interval(q),
            None if self.stat == "mean" => values.mean_interval(),
            None => (estimate_ms.map(|v| v * 1e3), estimate_ms.map(|v| v * 1e3)),
        };
        let (lo, hi) = (lo.map(|v| v / 1e3), hi.map(|v| v / 1e3));
        let verdict = match estimate_ms {
            None => Verdict::NotEnoughData,
            Some(_) if hi.is_some_and(|h| h <= self.limit_ms) => Verdict::Met,
            Some(_) if lo.is_some_and(|l| l > self.limit_ms) => Verdict::NotMet,
            Some(_) if n < needed => Verdict::NotEnoughData,
            Some(v) if v <= self.limit_ms => Verdict::Met,
            Some(_) => Verdict::NotMet,
        };
        let reason = (verdict == Verdict::NotEnoughData).then(|| self.not_enough(n));
        ObjectiveResult {
            metric: self.metric.name().into(),
            stat: self.stat.clone(),
            limit_ms: self.limit_ms,
            value_ms: estimate_ms,
            met: verdict == Verdict::Met,
            verdict: Some(verdict),
            n: Some(n),
            needed: Some(needed),
            ci_low_ms: lo,
            ci_high_ms: hi,
            reason,
        }
    }

    /// "not enough requests to judge p99 (n = 32; need ≈ 1,000)".
    pub fn not_enough(&self, n: u64) -> String {
        format!(
            "not enough requests to judge {} {} (n = {n}; need ≈ {})",
            self.metric.name(),
            self.stat,
            thousands(self.samples_needed())
        )
    }

    /// Whether one request meets this objective on its own (always true for ITL).
    pub fn met_by(&self, r: &RequestRecord) -> bool {
        match self.metric {
            // One-token answers have no TPOT to violate.
            SloMetric::Tpot if r.tpot_us().is_none() => true,
            SloMetric::Itl => true,
            // A session that said nothing (a silent clip) trailed no speech.
            SloMetric::Lag if r.succeeded() && self.value_us(r).is_none() => true,
            // A request that never answered did not meet it.
            _ => self.value_us(r).is_some_and(|v| v / 1e3 <= self.limit_ms),
        }
    }

    /// One request's value of the metric in µs (`None` for ITL, of which a
    /// request has many, and where the request has none).
    pub fn value_us(&self, r: &RequestRecord) -> Option<f64> {
        match self.metric {
            SloMetric::Ttft => r.ttft_us().map(|v| v as f64),
            SloMetric::AnswerStart => r.answer_start_or_ttft_us().map(|v| v as f64),
            SloMetric::Tpot => r.tpot_us(),
            SloMetric::E2e => Some(r.e2e_us() as f64),
            SloMetric::Itl => None,
            // A session's worst delta: it met the limit when all did.
            SloMetric::Lag => {
                let rt = r.speech.as_ref()?.realtime.as_ref()?;
                rt.lags_us.iter().max().map(|&v| v as f64)
            }
        }
    }
}

/// A set of objectives, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub objectives: Vec<Objective>,
}

const STATS: [&str; 7] = ["mean", "p50", "p90", "p95", "p99", "p999", "max"];

/// A latency limit in milliseconds: a duration with its unit, above zero.
/// A bare number is refused with the fix spelled out.
pub fn parse_limit_ms(key: &str, value: &str) -> Result<f64, String> {
    let v = value.trim();
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "a limit needs a unit: `{key}={v}ms` (or `{key}={v}s`); a bare number is ambiguous"
        ));
    }
    let ms = parse_duration(v)?.as_secs_f64() * 1e3;
    if ms <= 0.0 {
        return Err(format!("`{v}`: a limit must be above zero"));
    }
    Ok(ms)
}

/// 1000 → "1,000".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Slo {
    /// Parses `ttft_p99=500ms,tpot_p99=50ms,e2e_max=30s`.
    pub fn parse(text: &str) -> Result<Slo, String> {
        let mut objectives = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!("`{part}`: expected METRIC_STAT=LIMIT, e.g. ttft_p99=500ms")
            })?;
            // METRIC_STAT: the statistic after the last `_` (a metric's own
            // name may hold one: answer_start_p99); no statistic means p99.
            let (metric, stat) = match key.rsplit_once('_') {
                Some((m, s)) if SloMetric::parse(m).is_some() || STATS.contains(&s) => (m, s),
                _ => (key, "p99"),
            };
            let metric = SloMetric::parse(metric).ok_or_else(|| {
                format!("`{part}`: unknown metric `{metric}` (ttft, answer_start, tpot, itl, e2e)")
            })?;
            if !STATS.contains(&stat) {
                return Err(format!(
                    "`{part}`: unknown statistic `{stat}` ({})",
                    STATS.join(", ")
                ));
            }
            let limit_ms = parse_limit_ms(key, value).map_err(|e| format!("`{part}`: {e}"))?;
            if objectives
                .iter()
                .any(|o: &Objective| o.metric == metric && o.stat == stat)
            {
                return Err(format!(
                    "`{part}`: {}_{stat} is given twice; give each objective one limit",
                    metric.name()
                ));
            }
            objectives.push(Objective {
                metric,
                stat: stat.to_string(),
                limit_ms,
            });
        }
        if objectives.is_empty() {
            return Err("empty SLO; expected e.g. ttft_p99=500ms,tpot_p99=50ms".into());
        }
        Ok(Slo { objectives })
    }

    /// `ttft_p99 ≤ 500 ms, tpot_p99 ≤ 50 ms` (limits in ms, so `500us` shows as 0.5 ms).
    pub fn describe(&self) -> String {
        self.objectives
            .iter()
            .map(|o| format!("{} ≤ {} ms", o.key(), o.limit_ms))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The requests a run needs for every request-level statistic to be
    /// judged on its own, and the objective that asks for the most (ITL
    /// objectives count tokens, not requests, and are left out).
    pub fn requests_needed(&self) -> Option<(u64, String)> {
        self.objectives
            .iter()
            .filter(|o| o.metric != SloMetric::Itl)
            .map(|o| (o.samples_needed(), o.key()))
            .max_by_key(|(n, _)| *n)
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
    fn the_answer_start_is_a_metric_whose_name_holds_an_underscore() {
        let slo = Slo::parse("answer_start_p99=2s,ttft_p50=100ms,answer_start_p50=1s").unwrap();
        let got: Vec<(SloMetric, &str)> = slo
            .objectives
            .iter()
            .map(|o| (o.metric, o.stat.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (SloMetric::AnswerStart, "p99"),
                (SloMetric::Ttft, "p50"),
                (SloMetric::AnswerStart, "p50"),
            ]
        );
        // No statistic is p99.
        let bare = Slo::parse("answer_start=3s").unwrap();
        assert_eq!(
            (bare.objectives[0].metric, bare.objectives[0].stat.as_str()),
            (SloMetric::AnswerStart, "p99")
        );
        assert!(Slo::parse("answer_p99=1s").is_err());
        assert!(Slo::parse("ttft_p77=1s").is_err());
    }

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
    fn a_bare_number_is_refused_with_the_fix() {
        let err = Slo::parse("ttft_p99=500").unwrap_err();
        assert!(err.contains("ttft_p99=500ms"), "{err}");
        assert!(Slo::parse("ttft_p99=0ms").is_err());
        // Microseconds are allowed and kept exactly (shown back in ms).
        let slo = Slo::parse("tpot_p50=500us").unwrap();
        assert_eq!(slo.objectives[0].limit_ms, 0.5);
    }

    #[test]
    fn an_objective_given_twice_is_refused() {
        // `ttft` alone is `ttft_p99`: the same objective with two limits.
        for text in ["ttft_p99=5ms,ttft_p99=6ms", "ttft=5ms,ttft_p99=6ms"] {
            let err = Slo::parse(text).unwrap_err();
            assert!(err.contains("ttft_p99 is given twice"), "{err}");
        }
        assert!(Slo::parse("ttft_p50=5ms,ttft_p99=6ms").is_ok());
    }

    fn dist(values_ms: impl IntoIterator<Item = f64>) -> Distribution {
        let mut d = Distribution::new();
        for v in values_ms {
            d.record(v * 1e3);
        }
        d
    }

    #[test]
    fn verdicts_rest_on_their_sample() {
        let o = |text: &str| Slo::parse(text).unwrap().objectives.remove(0);
        let judge =
            |o: &Objective, d: &Distribution, q: f64| o.judge(d, d.quantile(q).map(|v| v / 1e3));
        // 32 requests around 80 ms: p99 under 100 ms cannot be judged.
        let few = dist((0..32).map(|i| 70.0 + i as f64 * 0.6));
        let r = judge(&o("ttft_p99=100ms"), &few, 0.99);
        assert_eq!(r.verdict, Some(Verdict::NotEnoughData));
        assert!(!r.met);
        assert_eq!(
            r.reason.as_deref(),
            Some("not enough requests to judge ttft p99 (n = 32; need ≈ 1,000)")
        );
        // …but 32 requests all far above 20 ms fail it whatever the tail.
        let r = judge(&o("ttft_p99=20ms"), &few, 0.99);
        assert_eq!(r.verdict, Some(Verdict::NotMet));
        // p50 of 32 is judged, with its interval around it.
        let r = judge(&o("ttft_p50=100ms"), &few, 0.5);
        assert_eq!(r.verdict, Some(Verdict::Met));
        assert!(r.ci_low_ms.unwrap() < r.value_ms.unwrap());
        assert!(r.ci_high_ms.unwrap() > r.value_ms.unwrap());
        // 1,000 requests: p99 judged by its estimate.
        let many = dist((0..1000).map(|i| i as f64 / 10.0));
        let r = judge(&o("ttft_p99=99.5ms"), &many, 0.99);
        assert_ne!(r.verdict, Some(Verdict::NotEnoughData), "{r:?}");
        assert_eq!(r.n, Some(1000));
    }

    #[test]
    fn requests_needed_name_the_most_demanding_objective() {
        let slo = Slo::parse("ttft_p50=1s,e2e_p99=10s,itl_p999=50ms").unwrap();
        // ITL counts tokens, not requests: left out.
        assert_eq!(slo.requests_needed(), Some((1000, "e2e_p99".into())));
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(10000), "10,000");
        assert_eq!(thousands(20), "20");
        assert_eq!(thousands(1234567), "1,234,567");
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
