//! A run's results in the JSON dialects of the peers' tools, so a run (or a
//! merged run) loads in their own code and plugs into dashboards built for
//! them. One file per dialect; each says which fields it fills, what they
//! are here, and what has no counterpart (docs/exports.md has the whole
//! mapping). Every figure is recomputed from the run's requests
//! ([`samples`]) with the peer's own statistics.

pub mod aiperf;
pub mod guidellm;
pub mod samples;
pub mod vllm;

use tokenscope_core::results::RunResults;

/// The run's wall-clock start, s since the Unix epoch (0 when `started_at`
/// does not parse: the times stay relative rather than wrong).
pub(crate) fn epoch_s(r: &RunResults) -> f64 {
    humantime::parse_rfc3339_weak(&r.started_at)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

/// [`epoch_s`] in ns, as AIPerf stamps its records.
pub(crate) fn epoch_ns(r: &RunResults) -> u64 {
    (epoch_s(r) * 1e9) as u64
}

/// A run-clock instant as an ISO 8601 time without a zone (AIPerf's
/// `start_time`); "unknown" outside the years 1970–9999.
pub(crate) fn wall_clock(r: &RunResults, at_s: f64) -> String {
    match std::time::Duration::try_from_secs_f64(epoch_s(r) + at_s.max(0.0)) {
        Ok(d) if d.as_secs() < 253_402_300_800 => {
            humantime::format_rfc3339_micros(std::time::UNIX_EPOCH + d)
                .to_string()
                .trim_end_matches('Z')
                .to_string()
        }
        _ => "unknown".into(),
    }
}

/// The run's identity in a peer's id field: its start, digits only.
pub(crate) fn run_id(r: &RunResults) -> String {
    let digits: String = r.started_at.chars().filter(char::is_ascii_digit).collect();
    format!("tokenscope-{digits}")
}

/// A setting as a number, whether the config holds it as one or as its
/// text (`"256"`); `None` for a distribution (`"256±32"`) or nothing.
pub(crate) fn number(v: &serde_json::Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str()?.trim().parse().ok())
}
