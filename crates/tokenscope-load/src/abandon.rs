//! `--cancel SHARE --cancel-after WHEN`: users who leave. A share of the
//! requests, chosen by the seed, close their connection part-way, as a
//! user who closes the tab does, so that a server is seen to stop
//! generating for nobody (vLLM aborts a request whose client is gone) or
//! not. AIPerf cancels a chosen share the same way.
//!
//! When a request leaves is a time after its send (fixed, or drawn
//! uniformly between two), which falls in prefill or decode as the load
//! has it, or a number of output chunks received (`tokens:N`: one token a
//! chunk, as servers stream them unless told to bunch).

use crate::draw::{mix, unit};
use std::time::Duration;

/// When a chosen request leaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum After {
    /// This long after its send.
    Time(Duration),
    /// Drawn uniformly between the two, per request.
    Between(Duration, Duration),
    /// Once this many chunks of output have come.
    Tokens(u64),
}

impl After {
    /// `500ms`, `uniform:100ms..2s` or `tokens:N`.
    pub fn parse(s: &str) -> Result<After, String> {
        let duration = |d: &str| match humantime::parse_duration(d.trim()) {
            Ok(t) if t <= After::MAX => Ok(t),
            Ok(_) => Err(format!("`{d}`: at most 24h")),
            Err(e) => Err(format!("`{d}`: {e} (a time such as 500ms, 2s)")),
        };
        if let Some(n) = s.strip_prefix("tokens:") {
            return match n.trim().parse::<u64>() {
                Ok(n) if n >= 1 => Ok(After::Tokens(n)),
                _ => Err(format!("`{s}`: tokens:N takes a whole number of 1 or more")),
            };
        }
        if let Some(range) = s.strip_prefix("uniform:") {
            let (a, b) = range
                .split_once("..")
                .ok_or_else(|| format!("`{s}`: uniform:A..B, such as uniform:100ms..2s"))?;
            let (a, b) = (duration(a)?, duration(b)?);
            return match a < b {
                true => Ok(After::Between(a, b)),
                false => Err(format!("`{s}`: the first time must be below the second")),
            };
        }
        duration(s).map(After::Time)
    }

    /// The longest a user waits before leaving: past it a request has
    /// long met `--timeout`, and a time can overflow the clock.
    pub const MAX: Duration = Duration::from_secs(24 * 3600);

    /// As written on the command line.
    pub fn label(&self) -> String {
        let t = |d: &Duration| humantime::format_duration(*d).to_string();
        match self {
            After::Time(d) => t(d),
            After::Between(a, b) => format!("uniform:{}..{}", t(a), t(b)),
            After::Tokens(n) => format!("tokens:{n}"),
        }
    }
}

/// When one request leaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Leave {
    At(Duration),
    AfterChunks(u64),
}

impl Leave {
    /// What the record says of why it ended.
    pub fn reason(self) -> String {
        match self {
            Leave::At(d) => format!(
                "abandoned {} ms after its send (--cancel-after)",
                d.as_millis()
            ),
            Leave::AfterChunks(n) => {
                format!("abandoned after {n} chunks of output (--cancel-after tokens:{n})")
            }
        }
    }
}

/// The run's leavers: which requests, and when each leaves.
#[derive(Debug, Clone, Copy)]
pub struct Abandon {
    /// 0–1.
    pub share: f64,
    pub after: After,
    pub seed: u64,
}

impl Abandon {
    /// Whether request `id` leaves, and when: the same for the same seed.
    pub fn for_request(&self, id: u64) -> Option<Leave> {
        let chosen = unit(mix(self.seed ^ mix(id))) < self.share;
        if !chosen {
            return None;
        }
        Some(match self.after {
            After::Time(d) => Leave::At(d),
            After::Tokens(n) => Leave::AfterChunks(n),
            After::Between(a, b) => {
                let u = unit(mix(self.seed.rotate_left(17) ^ mix(id ^ 0xA5A5)));
                Leave::At(a + (b - a).mul_f64(u))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_parses_a_time_a_range_or_tokens_and_refuses_the_rest() {
        assert_eq!(
            After::parse("500ms"),
            Ok(After::Time(Duration::from_millis(500)))
        );
        assert_eq!(After::parse("tokens:10"), Ok(After::Tokens(10)));
        assert_eq!(
            After::parse("uniform:100ms..2s"),
            Ok(After::Between(
                Duration::from_millis(100),
                Duration::from_secs(2)
            ))
        );
        for bad in [
            "",
            "tokens:0",
            "tokens:-1",
            "tokens:99999999999999999999999",
            "uniform:2s..1s",
            "uniform:1s",
            "soon",
            "-5ms",
            "300000000000y",
            "uniform:1s..18446744073709551615s",
        ] {
            assert!(After::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn about_the_share_leaves_and_the_same_ones_each_time() {
        let a = Abandon {
            share: 0.25,
            after: After::Between(Duration::from_millis(10), Duration::from_millis(20)),
            seed: 7,
        };
        let left: Vec<u64> = (0..10_000)
            .filter(|id| a.for_request(*id).is_some())
            .collect();
        assert!((2_300..2_700).contains(&left.len()), "{}", left.len());
        let again: Vec<u64> = (0..10_000)
            .filter(|id| a.for_request(*id).is_some())
            .collect();
        assert_eq!(left, again);
        for id in left {
            match a.for_request(id) {
                Some(Leave::At(d)) => assert!((10..20).contains(&d.as_millis()), "{d:?}"),
                other => panic!("{other:?}"),
            }
        }
        let none = Abandon { share: 0.0, ..a };
        assert!((0..1000).all(|id| none.for_request(id).is_none()));
        let all = Abandon { share: 1.0, ..a };
        assert!((0..1000).all(|id| all.for_request(id).is_some()));
    }
}
