//! LoRA adapters (`--lora`): which adapter each request is sent to, as
//! vLLM serves them — the adapter's name in the request's `model` field.
//! The choice is the request's own (its id and the seed), so a run is
//! reproducible whatever the timing, and shards split it the same way.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How requests are spread over the adapters.
#[derive(Debug, Clone, PartialEq)]
pub enum Assignment {
    /// Request `id` to adapter `id mod n`: equal shares, exactly.
    RoundRobin,
    /// Each request to an adapter drawn uniformly.
    Random,
    /// Each request to an adapter drawn with these weights (one per adapter).
    Weights(Vec<f64>),
}

impl std::str::FromStr for Assignment {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "round-robin" => Ok(Assignment::RoundRobin),
            "random" => Ok(Assignment::Random),
            _ => {
                let list = s.strip_prefix("weights:").ok_or_else(|| {
                    format!("`{s}`: expected round-robin, random or weights:W1,W2,…")
                })?;
                let weights = list
                    .split(',')
                    .map(|w| match w.trim().parse::<f64>() {
                        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                        _ => Err(format!("`{s}`: weight `{w}` is not a number ≥ 0")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if weights.iter().sum::<f64>() <= 0.0 {
                    return Err(format!("`{s}`: the weights sum to 0"));
                }
                Ok(Assignment::Weights(weights))
            }
        }
    }
}

impl std::fmt::Display for Assignment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Assignment::RoundRobin => f.write_str("round-robin"),
            Assignment::Random => f.write_str("random"),
            Assignment::Weights(w) => {
                let list: Vec<_> = w.iter().map(f64::to_string).collect();
                write!(f, "weights:{}", list.join(","))
            }
        }
    }
}

/// The adapters of a run and how requests are spread over them.
#[derive(Debug, Clone, PartialEq)]
pub struct Adapters {
    names: Vec<String>,
    assignment: Assignment,
    seed: u64,
}

impl Adapters {
    /// `names` with their `assignment`; an error when weights do not match
    /// the adapters one to one, or no adapter is named.
    pub fn new(names: Vec<String>, assignment: Assignment, seed: u64) -> Result<Adapters, String> {
        if names.is_empty() || names.iter().any(|n| n.trim().is_empty()) {
            return Err("--lora: name at least one adapter, none empty".into());
        }
        if let Assignment::Weights(w) = &assignment {
            if w.len() != names.len() {
                return Err(format!(
                    "--lora-assignment has {} weights for {} adapters: give one per adapter, in --lora's order",
                    w.len(),
                    names.len()
                ));
            }
        }
        Ok(Adapters {
            names,
            assignment,
            seed,
        })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The adapter request `id` goes to.
    pub fn for_request(&self, id: u64) -> &str {
        let n = self.names.len();
        let rng = || {
            StdRng::seed_from_u64(crate::seed::mix(
                self.seed ^ 0x6c6f_7261 ^ crate::seed::mix(id),
            ))
        };
        let i = match &self.assignment {
            Assignment::RoundRobin => (id % n as u64) as usize,
            Assignment::Random => rng().random_range(0..n),
            Assignment::Weights(w) => {
                let total: f64 = w.iter().sum();
                let mut x = rng().random_range(0.0..total);
                w.iter()
                    .position(|&wi| {
                        x -= wi;
                        x < 0.0
                    })
                    .unwrap_or(n - 1)
            }
        };
        &self.names[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(a: &Adapters, n: u64) -> Vec<u64> {
        let mut counts = vec![0; a.names().len()];
        for id in 0..n {
            let name = a.for_request(id);
            counts[a.names().iter().position(|x| x == name).unwrap()] += 1;
        }
        counts
    }

    fn names() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    #[test]
    fn round_robin_is_exact_and_weights_hold_their_shares() {
        let rr = Adapters::new(names(), Assignment::RoundRobin, 1).unwrap();
        assert_eq!(shares(&rr, 300), [100, 100, 100]);
        let w: Assignment = "weights:2,1,1".parse().unwrap();
        let weighted = Adapters::new(names(), w, 1).unwrap();
        let s = shares(&weighted, 8000);
        assert!((s[0] as f64 / 8000.0 - 0.5).abs() < 0.03, "{s:?}");
        assert!((s[1] as f64 / 8000.0 - 0.25).abs() < 0.03, "{s:?}");
        let random = Adapters::new(names(), Assignment::Random, 1).unwrap();
        assert!(shares(&random, 3000)
            .iter()
            .all(|&c| (850..1150).contains(&c)));
        assert_eq!(
            random.for_request(17),
            random.for_request(17),
            "reproducible"
        );
    }

    #[test]
    fn bad_assignments_say_what_is_wrong() {
        assert!("weights:1,x"
            .parse::<Assignment>()
            .unwrap_err()
            .contains("`x`"));
        assert!("weights:0,0"
            .parse::<Assignment>()
            .unwrap_err()
            .contains("sum to 0"));
        assert!("sticky".parse::<Assignment>().is_err());
        let two = Assignment::Weights(vec![1.0, 1.0]);
        assert!(Adapters::new(names(), two, 0)
            .unwrap_err()
            .contains("2 weights for 3"));
        assert!(Adapters::new(vec![], Assignment::Random, 0).is_err());
        for a in ["round-robin", "random", "weights:2,1,1"] {
            assert_eq!(a.parse::<Assignment>().unwrap().to_string(), a);
        }
    }
}
