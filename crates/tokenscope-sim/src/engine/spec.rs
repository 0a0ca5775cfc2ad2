//! Speculative decoding (`--spec-decode k=4,acceptance=0.7`): a proposer
//! (an n-gram lookup in the prompt, an EAGLE head, or a small draft model)
//! guesses `k` tokens, and the target verifies all `k + 1` positions in one
//! step; the accepted prefix and one more token come out together.
//!
//! What the model charges, per decoding sequence and step:
//! - the target's step computes `1 + k` tokens instead of 1 (their FLOPs,
//!   their logits, their KV writes; the weights are still read once), so at
//!   a small batch, where a step is bound by reading the weights, the extra
//!   tokens are nearly free, and at a large batch, bound by compute, they
//!   cost what they compute;
//! - the proposer runs `k` passes first: an n-gram lookup costs the CPU a
//!   little ([`NGRAM_PER_SEQUENCE_S`]), an EAGLE head one decoder layer and
//!   the LM head, a draft model its own roofline;
//! - each step emits `1 + accepted` tokens.
//!
//! Acceptance is given as vLLM reports it, so a bench run of `sim serve
//! --spec-decode …` reads back what was given: `acceptance=A` is the share
//! of drafted tokens accepted (`num_accepted_tokens / num_draft_tokens`),
//! and a list `acceptance=0.9/0.7/0.5/0.3` is the per-position rate
//! (`num_accepted_tokens_per_pos[i] / num_drafts`), which sets `k`. A
//! position is accepted only if every one before it was (rejection sampling
//! stops at the first miss), so per-position rates never rise; a single
//! rate is spread over the positions as a constant conditional probability
//! α (the model of Leviathan et al., 2023) solving mean(α, α², …, αᵏ) = A.

use super::catalogue::Model;

/// Draft tokens per step, at most.
pub const MAX_K: usize = 16;

/// An n-gram proposer's CPU time per sequence and step (an assumption: a
/// suffix match over the prompt, tens of microseconds; vLLM runs it on
/// the CPU between steps).
pub const NGRAM_PER_SEQUENCE_S: f64 = 20e-6;

/// Who proposes the draft tokens.
#[derive(Debug, Clone, PartialEq)]
pub enum Method {
    /// Prompt lookup: free on the GPU.
    Ngram,
    /// An EAGLE head: one decoder layer of the target plus its LM head.
    Eagle,
    /// A small model of the catalogue, run `k` times.
    Draft(Box<Model>),
}

/// The rule a deployment speculates by.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecDecode {
    pub k: u32,
    /// Per position, the chance it is accepted given every earlier one
    /// was (α₁ … α_k).
    conditional: Vec<f64>,
    pub method: Method,
}

impl SpecDecode {
    /// `k=4,acceptance=0.7[,method=ngram|eagle|draft:MODEL]`, or
    /// `acceptance=0.9/0.7/0.5` (per position; sets k). `draft` looks the
    /// model up with `model_of`.
    pub fn parse(
        text: &str,
        model_of: impl Fn(&str) -> Result<Model, String>,
    ) -> Result<SpecDecode, String> {
        let (mut k, mut rates, mut method) = (None, None, Method::Eagle);
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected key=value (k=4,acceptance=0.7)"))?;
            match key.trim() {
                "k" | "num_speculative_tokens" => {
                    let n: u32 = value.parse().map_err(|_| format!("k=`{value}`: a count"))?;
                    if n == 0 || n as usize > MAX_K {
                        return Err(format!("k={n}: between 1 and {MAX_K}"));
                    }
                    k = Some(n);
                }
                "acceptance" => {
                    let list: Result<Vec<f64>, _> = value.split('/').map(str::parse).collect();
                    let list = list.map_err(|_| {
                        format!("acceptance=`{value}`: a rate or rates like 0.9/0.7/0.5")
                    })?;
                    if list.iter().any(|a| !(0.0..=1.0).contains(a)) {
                        return Err(format!("acceptance=`{value}`: rates lie in 0…1"));
                    }
                    rates = Some(list);
                }
                "method" => {
                    method = match value.split_once(':') {
                        Some(("draft", name)) => Method::Draft(Box::new(model_of(name)?)),
                        None if value == "ngram" => Method::Ngram,
                        None if value == "eagle" => Method::Eagle,
                        _ => return Err(format!("method=`{value}`: ngram, eagle or draft:MODEL")),
                    }
                }
                other => return Err(format!("`{other}`: expected k, acceptance or method")),
            }
        }
        let rates = rates
            .ok_or("--spec-decode needs acceptance=RATE (vLLM's accepted ÷ drafted tokens)")?;
        let conditional = match (rates.as_slice(), k) {
            ([a], k) => vec![solve_alpha(*a, k.unwrap_or(1)); k.unwrap_or(1) as usize],
            (list, None) => per_position(list)?,
            (list, Some(k)) if list.len() == k as usize => per_position(list)?,
            (list, Some(k)) => return Err(format!("{} per-position rates for k={k}", list.len())),
        };
        Ok(SpecDecode {
            k: conditional.len() as u32,
            conditional,
            method,
        })
    }

    /// α of position `i` (0-based).
    pub fn conditional(&self, i: usize) -> f64 {
        self.conditional.get(i).copied().unwrap_or(0.0)
    }

    /// The chance position `i` (0-based) is accepted: α₁ × … × α_{i+1}.
    pub fn position_rate(&self, i: usize) -> f64 {
        self.conditional.iter().take(i + 1).product()
    }

    /// Expected accepted draft tokens per step of a sequence drafting `k`.
    pub fn expected_accepted(&self) -> f64 {
        (0..self.k as usize).map(|i| self.position_rate(i)).sum()
    }

    /// Accepted ÷ drafted, as vLLM reports it.
    pub fn acceptance_rate(&self) -> f64 {
        self.expected_accepted() / self.k as f64
    }

    /// Tokens a step emits per sequence, on average: 1 + accepted (vLLM's
    /// mean acceptance length).
    pub fn tokens_per_step(&self) -> f64 {
        1.0 + self.expected_accepted()
    }

    /// How many of `drafted` tokens pass, given `u(i)`, a uniform draw in
    /// [0, 1) for position i: stops at the first miss.
    pub fn accept(&self, drafted: u32, u: impl Fn(usize) -> f64) -> u32 {
        (0..drafted as usize)
            .take_while(|&i| u(i) < self.conditional(i))
            .count() as u32
    }

    /// The rule as `--spec-decode` takes it, per position (so it reads
    /// back exactly).
    pub fn text(&self) -> String {
        let rates: Vec<String> = (0..self.k as usize)
            .map(|i| format!("{:.4}", self.position_rate(i)))
            .collect();
        let method = match &self.method {
            Method::Ngram => "ngram".to_string(),
            Method::Eagle => "eagle".to_string(),
            Method::Draft(m) => format!("draft:{}", m.name),
        };
        format!("acceptance={},method={method}", rates.join("/"))
    }

    /// `method` with the acceptance a server counted: per-position rates
    /// (accepted at i ÷ drafts), else one rate over `k` positions where `k`
    /// is the server's (mean accepted length − 1 ÷ rate; 1 without a length).
    pub fn learned(
        method: Method,
        by_position: &[f64],
        rate: f64,
        length: Option<f64>,
    ) -> Result<SpecDecode, String> {
        let conditional = if by_position.is_empty() {
            let k = match length {
                Some(l) if rate > 0.0 => ((l - 1.0) / rate).round().clamp(1.0, MAX_K as f64) as u32,
                _ => 1,
            };
            vec![solve_alpha(rate, k); k as usize]
        } else {
            // Counted rates may wobble upward by noise: held to the one before.
            let mut held = Vec::with_capacity(by_position.len());
            let mut before: f64 = 1.0;
            for &r in by_position {
                before = before.min(r.clamp(0.0, 1.0));
                held.push(before);
            }
            per_position(&held)?
        };
        Ok(SpecDecode {
            k: conditional.len() as u32,
            conditional,
            method,
        })
    }

    /// A line for reports.
    pub fn describe(&self) -> String {
        let method = match &self.method {
            Method::Ngram => "n-gram".to_string(),
            Method::Eagle => "EAGLE".to_string(),
            Method::Draft(m) => format!("draft {}", m.name),
        };
        format!(
            "speculative decoding: {method}, k {}, acceptance {:.2} ({:.2} tokens a step)",
            self.k,
            self.acceptance_rate(),
            self.tokens_per_step()
        )
    }
}

/// Per-position rates (each at most the one before) to conditional ones.
fn per_position(rates: &[f64]) -> Result<Vec<f64>, String> {
    if rates.len() > MAX_K {
        return Err(format!("{} positions: at most {MAX_K}", rates.len()));
    }
    let mut out = Vec::with_capacity(rates.len());
    let mut before = 1.0;
    for &r in rates {
        if r > before + 1e-12 {
            return Err(format!(
                "per-position acceptance {r} after {before}: a position is accepted only when every earlier one is, so the rates never rise"
            ));
        }
        out.push(if before > 0.0 { r / before } else { 0.0 });
        before = r;
    }
    Ok(out)
}

/// α with mean(α, α², …, αᵏ) = `rate`, by bisection (the mean rises with α).
fn solve_alpha(rate: f64, k: u32) -> f64 {
    let mean = |a: f64| (1..=k).map(|i| a.powi(i as i32)).sum::<f64>() / k as f64;
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if mean(mid) < rate {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// An EAGLE head as a model: one decoder layer of the target (its share of
/// the non-embedding weights) and the LM head it shares.
pub fn eagle_head(target: &Model) -> Model {
    let head_b = target.vocab as f64 * target.hidden as f64 / 1e9;
    let layer_b = (target.active_params_b - 2.0 * head_b).max(0.0) / target.layers.max(1) as f64;
    Model {
        name: format!("{} EAGLE head", target.name),
        layers: 1,
        params_b: layer_b + head_b,
        active_params_b: layer_b + head_b,
        ..target.clone()
    }
}

/// A uniform draw in [0, 1) from a sequence, its step and a position:
/// the same on every run, whatever the order steps are simulated in.
pub fn draw(seq: u64, generated: u32, position: usize) -> f64 {
    let mut x = seq
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(generated) << 20)
        .wrapping_add(position as u64 + 1);
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::catalogue::Catalogue;

    fn parse(text: &str) -> Result<SpecDecode, String> {
        let cat = Catalogue::builtin();
        SpecDecode::parse(text, |n| cat.model(n).map_err(|e| e.to_string()))
    }

    #[test]
    fn a_single_rate_is_vllms_accepted_over_drafted() {
        let s = parse("k=4,acceptance=0.7").unwrap();
        assert!((s.acceptance_rate() - 0.7).abs() < 1e-9);
        assert!((s.tokens_per_step() - 3.8).abs() < 1e-9);
        // Later positions pass less often: a miss ends the run.
        assert!(s.position_rate(0) > s.position_rate(3));
        // Drawn, the rate comes back.
        let (mut drafted, mut accepted) = (0u64, 0u64);
        for seq in 0..2000 {
            for step in 0..10 {
                drafted += 4;
                accepted += s.accept(4, |i| draw(seq, step, i)) as u64;
            }
        }
        let rate = accepted as f64 / drafted as f64;
        assert!((rate - 0.7).abs() < 0.01, "{rate}");
    }

    #[test]
    fn per_position_rates_set_k_and_never_rise() {
        let s = parse("acceptance=0.9/0.7/0.5,method=ngram").unwrap();
        assert_eq!(s.k, 3);
        assert!((s.position_rate(1) - 0.7).abs() < 1e-12);
        assert!((s.acceptance_rate() - 0.7).abs() < 1e-12);
        assert!(parse("acceptance=0.5/0.7")
            .unwrap_err()
            .contains("never rise"));
        assert!(parse("k=2,acceptance=0.9/0.7/0.5").is_err());
        assert!(parse("k=4").unwrap_err().contains("acceptance"));
        assert!(parse("k=0,acceptance=0.5").is_err());
        assert!(parse("k=4,acceptance=1.5").is_err());
        assert!(parse("acceptance=0.6,method=draft:llama-3.2-1b").is_ok());
        assert!(parse("acceptance=0.6,method=draft:nothing").is_err());
    }
}
