//! Multi-turn sessions (`--multi-turn`): conversations whose every turn
//! carries the whole history — the server's own answers, not a dataset's —
//! so each prompt extends the last, which is what prefix caching serves.
//! Sessions come from a dataset (ShareGPT conversations, JSONL lines sharing
//! a `session_id`) or are synthetic (`--turns`, `--think-time`).
//!
//! With tools (`--tools`), a session is an agent's task: an answer that
//! calls tools is followed, after the tools' run time (`--tool-latency`), by
//! a turn that carries their results (`--tool-result-tokens` long) and no
//! new user message, until the model answers without a call.

use crate::lengths::LengthSpec;
use rand::Rng;
use rand_distr::{Distribution, Exp};
use std::time::Duration;

/// How sessions are made.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiTurn {
    /// Synthetic sessions: how many turns each has (a dataset's conversations
    /// have their own).
    pub turns: LengthSpec,
    /// The user's pause between an answer and the next turn.
    pub think_time: ThinkTime,
    /// An agent's tools: how long they run, and how long their results are.
    pub tools: AgentTools,
}

/// How an agent's tools answer its calls (`--tool-latency`,
/// `--tool-result-tokens`, `--max-tool-rounds`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentTools {
    /// A tool's run time, between the answer that called it and the turn
    /// that carries its result.
    pub latency: ThinkTime,
    /// Tokens of a tool's result.
    pub result_tokens: LengthSpec,
    /// Turns that go on from tool results, at most, per user message: a
    /// model that calls tools forever cannot hold a session forever.
    pub max_rounds: u32,
}

impl Default for AgentTools {
    fn default() -> Self {
        AgentTools {
            latency: ThinkTime::default(),
            result_tokens: LengthSpec::Fixed(64),
            max_rounds: 8,
        }
    }
}

/// One finished turn, as the next turn's request carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// What the user said; `None` for a turn that went on from tool results.
    pub user: Option<String>,
    pub assistant: String,
    /// The tool calls the answer made, each with its result.
    pub calls: Vec<ToolExchange>,
}

/// A tool call an answer made, and the result the next turn carries.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolExchange {
    pub id: String,
    pub name: String,
    pub arguments: String,
    pub result: String,
}

/// A pause: `0`, `2s`, `uniform:1s..3s` or `exponential:2s` (mean).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThinkTime {
    Fixed(Duration),
    Uniform(Duration, Duration),
    Exponential(Duration),
}

impl Default for ThinkTime {
    fn default() -> Self {
        ThinkTime::Fixed(Duration::ZERO)
    }
}

/// Longest think time a flag may ask for (past it, a typo).
const MAX_THINK: Duration = Duration::from_secs(24 * 3600);

impl std::str::FromStr for ThinkTime {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        let bad =
            |why: &str| format!("`{spec}`: {why} (use 0, 2s, uniform:1s..3s or exponential:2s)");
        let one = |s: &str| -> Result<Duration, String> {
            let s = s.trim();
            let d = if s == "0" {
                Duration::ZERO
            } else {
                humantime::parse_duration(s).map_err(|e| bad(&e.to_string()))?
            };
            if d > MAX_THINK {
                return Err(bad("longer than a day"));
            }
            Ok(d)
        };
        match spec.split_once(':') {
            None => Ok(ThinkTime::Fixed(one(spec)?)),
            Some(("uniform", rest)) => {
                let (a, b) = rest
                    .split_once("..")
                    .ok_or_else(|| bad("expected FROM..TO"))?;
                let (a, b) = (one(a)?, one(b)?);
                if b < a {
                    return Err(bad("the upper bound is below the lower one"));
                }
                Ok(ThinkTime::Uniform(a, b))
            }
            Some(("exponential", mean)) => Ok(ThinkTime::Exponential(one(mean)?)),
            Some((kind, _)) => Err(bad(&format!("unknown distribution `{kind}`"))),
        }
    }
}

impl std::fmt::Display for ThinkTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |d: &Duration| humantime::format_duration(*d).to_string();
        match self {
            ThinkTime::Fixed(x) if x.is_zero() => write!(f, "0"),
            ThinkTime::Fixed(x) => write!(f, "{}", d(x)),
            ThinkTime::Uniform(a, b) => write!(f, "uniform:{}..{}", d(a), d(b)),
            ThinkTime::Exponential(m) => write!(f, "exponential:{}", d(m)),
        }
    }
}

impl ThinkTime {
    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        match *self {
            ThinkTime::Fixed(d) => d,
            ThinkTime::Uniform(a, b) if a == b => a,
            ThinkTime::Uniform(a, b) => rng.random_range(a..=b),
            ThinkTime::Exponential(m) if m.is_zero() => m,
            ThinkTime::Exponential(m) => {
                let s = Exp::new(1.0 / m.as_secs_f64()).map_or(0.0, |e| e.sample(rng));
                Duration::from_secs_f64(s.min(MAX_THINK.as_secs_f64()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn think_times_parse_and_print_back() {
        for spec in ["0", "2s", "uniform:1s..3s", "exponential:500ms"] {
            let t: ThinkTime = spec.parse().unwrap();
            assert_eq!(t.to_string(), spec);
        }
        for bad in ["x", "uniform:3s..1s", "gamma:2s", "uniform:1s", "2days"] {
            let err = bad.parse::<ThinkTime>().unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn think_times_follow_their_distribution() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let exp: ThinkTime = "exponential:2s".parse().unwrap();
        let n = 20_000;
        let mean = (0..n)
            .map(|_| exp.sample(&mut rng).as_secs_f64())
            .sum::<f64>()
            / n as f64;
        assert!((mean - 2.0).abs() < 0.1, "{mean}");
        let u: ThinkTime = "uniform:1s..3s".parse().unwrap();
        assert!((0..1000).all(|_| {
            let d = u.sample(&mut rng);
            d >= Duration::from_secs(1) && d <= Duration::from_secs(3)
        }));
    }
}
