//! Speculative decoding as servers report it: a draft proposes k tokens,
//! the target verifies them in one step and accepts a prefix. vLLM (V1)
//! and llama.cpp count drafts, draft tokens and accepted tokens (vLLM also
//! accepted tokens by draft position); SGLang and vLLM's V0 engine give an
//! acceptance gauge. Over a window:
//!
//! - acceptance rate = accepted tokens ÷ draft tokens;
//! - mean accepted length = 1 + accepted tokens ÷ drafts: the tokens a
//!   sequence gains per verification step, the target's own token included
//!   (vLLM's "mean acceptance length");
//! - acceptance at position i = accepted at i ÷ drafts.

use crate::prometheus::Exposition;
use serde::{Deserialize, Serialize};

/// Whose series a scrape holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// vLLM (and the built-in engine): counters, and V0's acceptance gauge.
    Vllm,
    /// llama.cpp: counters.
    LlamaCpp,
    /// SGLang: gauges.
    Sglang,
}

/// The counters and gauges of one scrape (cumulative counters).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecCounters {
    pub drafts: Option<f64>,
    pub draft_tokens: Option<f64>,
    pub accepted_tokens: Option<f64>,
    /// Accepted tokens by draft position (0 the first), cumulative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_by_position: Vec<(u32, f64)>,
    /// A server's own gauges: acceptance rate (0–1), mean accepted length.
    pub accept_rate: Option<f64>,
    pub accept_length: Option<f64>,
}

/// A scrape's speculative-decoding series.
pub fn read(source: Source, e: &Exposition) -> SpecCounters {
    let prefix = match source {
        Source::Vllm => "vllm:",
        Source::LlamaCpp => "llamacpp:",
        Source::Sglang => {
            return SpecCounters {
                accept_rate: e.sum("sglang:spec_accept_rate"),
                accept_length: e.sum("sglang:spec_accept_length"),
                ..SpecCounters::default()
            };
        }
    };
    let name = |s: &str| format!("{prefix}spec_decode_{s}");
    let mut by_position: Vec<(u32, f64)> = e
        .series(&name("num_accepted_tokens_per_pos_total"))
        .filter_map(|s| Some((s.label("position")?.parse().ok()?, s.value)))
        .collect();
    by_position.sort_by_key(|p| p.0);
    SpecCounters {
        drafts: e.sum(&name("num_drafts_total")),
        draft_tokens: e.sum(&name("num_draft_tokens_total")),
        accepted_tokens: e.sum(&name("num_accepted_tokens_total")),
        accepted_by_position: by_position,
        accept_rate: e.sum(&name("draft_acceptance_rate")),
        accept_length: None,
    }
}

/// Speculative decoding over a window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecDecode {
    /// Counter deltas, where the server counts.
    pub drafts: Option<f64>,
    pub draft_tokens: Option<f64>,
    pub accepted_tokens: Option<f64>,
    /// Accepted ÷ draft tokens (the server's own gauge where it has no
    /// counters).
    pub acceptance_rate: Option<f64>,
    /// Tokens a sequence gains per verification step: 1 + accepted ÷ drafts.
    pub mean_accepted_length: Option<f64>,
    /// Acceptance at each draft position: accepted there ÷ drafts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acceptance_by_position: Vec<f64>,
}

/// The window's speculative decoding from its scrapes' counters, in time
/// order; `None` when the server shows none (no drafts in the window, and
/// no acceptance gauge).
pub fn summarize(scrapes: &[&SpecCounters]) -> Option<SpecDecode> {
    let (first, last) = (*scrapes.first()?, *scrapes.last()?);
    let delta = |f: fn(&SpecCounters) -> Option<f64>| match (f(first), f(last)) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        (_, b) => b,
    };
    let drafts = delta(|s| s.drafts).filter(|&d| d > 0.0);
    let draft_tokens = delta(|s| s.draft_tokens).filter(|&d| d > 0.0);
    let accepted = delta(|s| s.accepted_tokens);
    let gauge_mean = |f: fn(&SpecCounters) -> Option<f64>| {
        let v: Vec<f64> = scrapes.iter().filter_map(|s| f(s)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let rate = match (accepted, draft_tokens) {
        (Some(a), Some(d)) => Some(a / d),
        _ => gauge_mean(|s| s.accept_rate),
    };
    let length = match (accepted, drafts) {
        (Some(a), Some(n)) => Some(1.0 + a / n),
        _ => gauge_mean(|s| s.accept_length),
    };
    let by_position = drafts.map_or_else(Vec::new, |n| {
        last.accepted_by_position
            .iter()
            .map(|&(pos, b)| {
                let a = first
                    .accepted_by_position
                    .iter()
                    .find(|p| p.0 == pos)
                    .map_or(0.0, |p| p.1);
                (if b >= a { b - a } else { b }) / n
            })
            .collect()
    });
    (rate.is_some() || length.is_some()).then_some(SpecDecode {
        drafts,
        draft_tokens,
        accepted_tokens: accepted.filter(|_| draft_tokens.is_some()),
        acceptance_rate: rate,
        mean_accepted_length: length,
        acceptance_by_position: by_position,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(source: Source, text: &str) -> SpecCounters {
        read(source, &crate::prometheus::parse(text).unwrap())
    }

    fn window(a: &SpecCounters, b: &SpecCounters) -> Option<SpecDecode> {
        summarize(&[a, b])
    }

    fn vllm(k: f64) -> String {
        format!(
            "vllm:num_requests_running 1\nvllm:spec_decode_num_drafts_total {}\nvllm:spec_decode_num_draft_tokens_total {}\nvllm:spec_decode_num_accepted_tokens_total {}\nvllm:spec_decode_num_accepted_tokens_per_pos_total{{position=\"0\"}} {}\nvllm:spec_decode_num_accepted_tokens_per_pos_total{{position=\"1\"}} {}\n",
            250.0 * k,
            1000.0 * k,
            600.0 * k,
            240.0 * k,
            360.0 * k
        )
    }

    #[test]
    fn vllms_counters_give_acceptance_length_and_positions() {
        let (a, b) = (
            scrape(Source::Vllm, &vllm(1.0)),
            scrape(Source::Vllm, &vllm(2.0)),
        );
        let s = window(&a, &b).unwrap();
        assert_eq!(s.draft_tokens, Some(1000.0));
        assert!((s.acceptance_rate.unwrap() - 0.6).abs() < 1e-12);
        assert!((s.mean_accepted_length.unwrap() - 3.4).abs() < 1e-12);
        assert_eq!(s.acceptance_by_position, vec![0.96, 1.44]);
    }

    #[test]
    fn no_drafts_is_no_speculative_decoding_and_sglang_gives_gauges() {
        let idle = scrape(Source::Vllm, &vllm(1.0));
        assert!(window(&idle, &idle).is_none());
        let plain = scrape(Source::Vllm, "vllm:num_requests_running 1\n");
        assert!(window(&plain, &plain).is_none());
        let sglang = "sglang:num_running_reqs 2\nsglang:spec_accept_rate 0.5\nsglang:spec_accept_length 2.5\n";
        let g = scrape(Source::Sglang, sglang);
        let s = window(&g, &g).unwrap();
        assert_eq!(
            (s.acceptance_rate, s.mean_accepted_length),
            (Some(0.5), Some(2.5))
        );
        assert!(s.drafts.is_none());
    }
}
