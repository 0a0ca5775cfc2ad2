//! When requests leave: closed loop (N in flight) or an open-loop process at a
//! rate (Poisson, constant, gamma with shape K for burstiness).

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Gamma};
use std::time::Duration;

/// The inter-arrival process of an open loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Process {
    /// Exponential gaps (memoryless arrivals).
    Poisson,
    /// Equal gaps of 1/rate.
    Constant,
    /// Gamma-distributed gaps of mean 1/rate and shape K: K < 1 is burstier than
    /// Poisson, K > 1 smoother, K = 1 is Poisson.
    Gamma(f64),
    /// The dataset's own timestamps (`--replay`), time scaled by 1/speed.
    Replay { speed: f64 },
}

impl std::str::FromStr for Process {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "poisson" => Ok(Process::Poisson),
            "constant" => Ok(Process::Constant),
            _ => match s.strip_prefix("gamma:").map(str::parse::<f64>) {
                Some(Ok(k)) if k > 0.0 && k.is_finite() => Ok(Process::Gamma(k)),
                _ => Err(format!(
                    "`{s}`: expected poisson, constant or gamma:K with K > 0"
                )),
            },
        }
    }
}

impl std::fmt::Display for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Process::Poisson => f.write_str("poisson"),
            Process::Constant => f.write_str("constant"),
            Process::Gamma(k) => write!(f, "gamma:{k}"),
            Process::Replay { speed } => write!(f, "replay at {speed}x"),
        }
    }
}

/// How load is applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoadPattern {
    /// Exactly `concurrency` requests in flight; each finished one is replaced at once.
    Closed { concurrency: usize },
    /// Requests scheduled at `rate` per second by `process`, whatever the server does.
    /// With `max_concurrency`, a request that finds no free slot waits for one and
    /// is counted as late (`waited_for_slot`), its lateness reported as client lag.
    Open {
        rate: f64,
        process: Process,
        max_concurrency: Option<usize>,
    },
}

impl LoadPattern {
    /// Requests that can be in flight at once (sizes the connection pool).
    pub fn max_in_flight(&self) -> Option<usize> {
        match *self {
            LoadPattern::Closed { concurrency } => Some(concurrency),
            LoadPattern::Open {
                max_concurrency, ..
            } => max_concurrency,
        }
    }
}

/// A shard's share of a whole run's schedule (`--shard I/N`): the whole
/// schedule, drawn at the whole rate from the whole run's seed, of which
/// the shard sends arrivals I, I + N, I + 2N, … — so the shards' arrivals
/// together are exactly the single process's, whatever the process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduleShare {
    pub index: u64,
    pub count: u64,
    /// The whole run's rate and arrival seed.
    pub rate: f64,
    pub seed: u64,
}

/// Send times of an open loop, as offsets from the start: the first at 0.
/// A replay's end when its entries are all sent.
pub struct Schedule {
    rng: StdRng,
    rate: f64,
    process: Process,
    next_s: f64,
    /// A replay: the recorded offsets (s, at speed 1) and the next one's index.
    recorded: Option<(std::sync::Arc<Vec<f64>>, usize)>,
    /// A shard's share: arrivals to pass before the next one it sends
    /// (its index before its first, then N − 1 between its own).
    skip: Option<(u64, u64)>,
}

impl Schedule {
    pub fn new(rate: f64, process: Process, seed: u64) -> Self {
        Schedule {
            rng: StdRng::seed_from_u64(seed),
            rate,
            process,
            next_s: 0.0,
            recorded: None,
            skip: None,
        }
    }

    /// The whole run's schedule of which `share` sends every N-th arrival.
    pub fn shared(process: Process, share: ScheduleShare) -> Self {
        let mut s = Schedule::new(share.rate, process, share.seed);
        s.skip = Some((share.index, share.count.max(1) - 1));
        s
    }

    /// The schedule of an open loop: drawn from its process, or for a
    /// replay the workload's dataset offsets scaled by 1/speed.
    pub fn for_load(
        rate: f64,
        process: Process,
        seed: u64,
        workload: &crate::workload::Workload,
    ) -> Self {
        let mut s = Schedule::new(rate, process, seed);
        if let Process::Replay { .. } = process {
            // A replayed trace's workflows, else the dataset's entries.
            let traced = workload
                .workflows
                .as_ref()
                .and_then(|w| w.offsets_s.clone());
            let offsets = traced.or_else(|| workload.dataset.as_ref().and_then(|d| d.offsets_s()));
            s.recorded = Some((std::sync::Arc::new(offsets.unwrap_or_default()), 0));
        }
        s
    }

    fn gap_s(&mut self) -> f64 {
        match self.process {
            Process::Constant => 1.0 / self.rate,
            Process::Poisson => Exp::new(self.rate).expect("rate > 0").sample(&mut self.rng),
            Process::Gamma(k) => Gamma::new(k, 1.0 / (k * self.rate))
                .expect("k, rate > 0")
                .sample(&mut self.rng),
            Process::Replay { .. } => 1.0 / self.rate,
        }
    }
}

impl Iterator for Schedule {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        if let Some((first, between)) = self.skip {
            for _ in 0..first {
                self.next_arrival()?;
            }
            self.skip = Some((between, between));
        }
        self.next_arrival()
    }
}

impl Schedule {
    fn next_arrival(&mut self) -> Option<Duration> {
        if let (Some((offsets, i)), Process::Replay { speed }) = (&mut self.recorded, self.process)
        {
            let at = *offsets.get(*i)? / speed;
            *i += 1;
            return Some(Duration::from_secs_f64(at));
        }
        let at = self.next_s;
        self.next_s += self.gap_s();
        Some(Duration::from_secs_f64(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(process: Process, rate: f64, n: usize) -> Vec<f64> {
        let times: Vec<f64> = Schedule::new(rate, process, 42)
            .take(n + 1)
            .map(|d| d.as_secs_f64())
            .collect();
        times.windows(2).map(|w| w[1] - w[0]).collect()
    }

    fn mean_cv(g: &[f64]) -> (f64, f64) {
        let m = g.iter().sum::<f64>() / g.len() as f64;
        let v = g.iter().map(|x| (x - m).powi(2)).sum::<f64>() / g.len() as f64;
        (m, v.sqrt() / m)
    }

    #[test]
    fn shards_together_send_exactly_the_whole_schedule() {
        for process in [Process::Constant, Process::Gamma(0.5), Process::Poisson] {
            let whole: Vec<Duration> = Schedule::new(8.0, process, 7).take(100).collect();
            for count in [1u64, 2, 3, 4] {
                let mut merged = vec![Duration::ZERO; 100];
                for index in 0..count {
                    let share = ScheduleShare {
                        index,
                        count,
                        rate: 8.0,
                        seed: 7,
                    };
                    let local = Schedule::shared(process, share);
                    // Local arrival k is whole arrival k × count + index.
                    for (k, at) in local
                        .enumerate()
                        .take_while(|(k, _)| (*k as u64) * count + index < 100)
                    {
                        merged[k * count as usize + index as usize] = at;
                    }
                }
                assert_eq!(merged, whole, "{process} over {count}");
            }
        }
    }

    #[test]
    fn processes_have_the_right_mean_and_burstiness() {
        let (m, cv) = mean_cv(&gaps(Process::Poisson, 10.0, 50_000));
        assert!(
            (m - 0.1).abs() < 0.002 && (cv - 1.0).abs() < 0.03,
            "{m} {cv}"
        );
        let (m, cv) = mean_cv(&gaps(Process::Constant, 10.0, 1000));
        assert!((m - 0.1).abs() < 1e-9 && cv < 1e-6);
        // Gamma shape K has CV = 1/sqrt(K).
        let (m, cv) = mean_cv(&gaps(Process::Gamma(0.25), 10.0, 50_000));
        assert!(
            (m - 0.1).abs() < 0.004 && (cv - 2.0).abs() < 0.1,
            "{m} {cv}"
        );
    }

    #[test]
    fn parse() {
        assert_eq!("poisson".parse::<Process>().unwrap(), Process::Poisson);
        assert_eq!("gamma:0.5".parse::<Process>().unwrap(), Process::Gamma(0.5));
        assert!("gamma:-1".parse::<Process>().is_err());
        assert!("bursty".parse::<Process>().is_err());
    }
}
