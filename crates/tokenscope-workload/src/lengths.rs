//! Length distributions in tokens (`--input-tokens`, `--output-tokens`,
//! the datasets' and sessions' lengths): parsed from a SPEC, sampled from a
//! seeded generator, bounded by [`MAX_LENGTH`].

use rand::Rng;
use rand_distr::{Distribution, LogNormal, Normal};

/// A length distribution in tokens: `256`, `uniform:128..512`,
/// `normal:512,64` (mean, std), `lognormal:512,256` (mean, std of the lengths).
/// Every draw is at least 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LengthSpec {
    Fixed(u64),
    Uniform(u64, u64),
    Normal { mean: f64, std: f64 },
    LogNormal { mean: f64, std: f64 },
}

/// The longest prompt or answer a SPEC may ask for (10M tokens: past the
/// largest context windows; a longer one is a typo that would build
/// gigabytes of prompt).
pub const MAX_LENGTH: u64 = 10_000_000;

impl std::str::FromStr for LengthSpec {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "`{spec}`: {why} (use 256, uniform:128..512, normal:512,64 or lognormal:512,256)"
            )
        };
        let num = |s: &str| match s.trim().parse::<f64>() {
            Ok(v) if !v.is_finite() || v < 0.0 => Err(bad("not a finite, non-negative number")),
            Ok(v) if v > MAX_LENGTH as f64 => Err(bad(&format!(
                "above {MAX_LENGTH} tokens, more than any model's context"
            ))),
            Ok(v) => Ok(v),
            Err(_) => Err(bad("not a number")),
        };
        let pair = |s: &str, sep: &str| -> Result<(f64, f64), String> {
            let (a, b) = s
                .split_once(sep)
                .ok_or_else(|| bad("expected two numbers"))?;
            Ok((num(a)?, num(b)?))
        };
        let parsed = match spec.split_once(':') {
            None => LengthSpec::Fixed(num(spec)? as u64),
            Some(("uniform", rest)) => {
                let (a, b) = pair(rest, "..")?;
                if b < a {
                    return Err(bad("the upper bound is below the lower one"));
                }
                LengthSpec::Uniform(a as u64, b as u64)
            }
            Some(("normal", rest)) => {
                let (mean, std) = pair(rest, ",")?;
                LengthSpec::Normal { mean, std }
            }
            Some(("lognormal", rest)) => {
                let (mean, std) = pair(rest, ",")?;
                LengthSpec::LogNormal { mean, std }
            }
            Some((kind, _)) => return Err(bad(&format!("unknown distribution `{kind}`"))),
        };
        match parsed {
            LengthSpec::Fixed(0) | LengthSpec::Uniform(0, _) => {
                Err(bad("a length must be at least 1"))
            }
            LengthSpec::Normal { mean, std } | LengthSpec::LogNormal { mean, std }
                if !(mean > 0.0 && std >= 0.0) =>
            {
                Err(bad("mean must be positive and std non-negative"))
            }
            ok => Ok(ok),
        }
    }
}

impl std::fmt::Display for LengthSpec {
    /// The SPEC form it was parsed from.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LengthSpec::Fixed(n) => write!(f, "{n}"),
            LengthSpec::Uniform(a, b) => write!(f, "uniform:{a}..{b}"),
            LengthSpec::Normal { mean, std } => write!(f, "normal:{mean},{std}"),
            LengthSpec::LogNormal { mean, std } => write!(f, "lognormal:{mean},{std}"),
        }
    }
}

impl LengthSpec {
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let v = match *self {
            LengthSpec::Fixed(n) => n as f64,
            LengthSpec::Uniform(a, b) => rng.random_range(a..=b) as f64,
            LengthSpec::Normal { mean, std } => {
                Normal::new(mean, std).map_or(mean, |d| d.sample(rng))
            }
            LengthSpec::LogNormal { mean, std } => {
                let sigma2 = (1.0 + (std / mean).powi(2)).ln();
                let mu = mean.ln() - sigma2 / 2.0;
                LogNormal::new(mu, sigma2.sqrt()).map_or(mean, |d| d.sample(rng))
            }
        };
        v.round().max(1.0) as u64
    }

    /// The expected length.
    pub fn mean(&self) -> f64 {
        match *self {
            LengthSpec::Fixed(n) => n as f64,
            LengthSpec::Uniform(a, b) => (a + b) as f64 / 2.0,
            LengthSpec::Normal { mean, .. } | LengthSpec::LogNormal { mean, .. } => mean,
        }
    }
}
