//! A run spread over processes or machines (`--shard I/N`, or `--shards N`
//! in a Kubernetes Indexed Job): each shard sends its part of the load from
//! one shared start instant, and `tokenscope merge` pools their records.
//!
//! The parts are exact: concurrency, requests and warm-up split so the
//! shards' parts sum to the whole; an open loop's whole schedule drawn by
//! every shard from the whole run's seed and rate, each sending every N-th
//! arrival (so constant and gamma arrivals add up as Poisson ones do, to
//! the microsecond: `merge` checks it); a dataset dealt out without
//! overlap. Only shard 0 reads the server's metrics and GPUs.

use super::workload::Load;
use crate::cli::{parse_shard, Shard, ShardArgs, StartAt};
use std::time::{Duration, SystemTime};
use tokenscope_workload::arrival::ScheduleShare;

/// A shard of a run, as the spec holds it: which part this process sends,
/// the whole run's settings (for the merge), and the shared start instant.
#[derive(Debug, Clone)]
pub struct ShardSpec {
    pub shard: Shard,
    pub whole: serde_json::Value,
    pub start_at: Option<StartAt>,
}

impl ShardArgs {
    /// The shard this process is, if any: `--shard`, or `--shards` with
    /// JOB_COMPLETION_INDEX.
    pub fn resolve(&self) -> Result<Option<Shard>, String> {
        self.resolve_with(std::env::var("JOB_COMPLETION_INDEX").ok())
    }

    fn resolve_with(&self, job_index: Option<String>) -> Result<Option<Shard>, String> {
        let Some(count) = self.shards else {
            return Ok(self.shard);
        };
        let Some(i) = job_index else {
            return Err(format!(
                "--shards {count} takes this shard's index from JOB_COMPLETION_INDEX, which is not set (a Kubernetes Indexed Job sets it); elsewhere use --shard I/{count}"
            ));
        };
        parse_shard(&format!("{}/{count}", i.trim()))
            .map(Some)
            .map_err(|e| format!("JOB_COMPLETION_INDEX with --shards {count}: {e}"))
    }
}

impl Shard {
    /// This shard's part of `n`: the first `n % count` shards take one more,
    /// so the parts sum to `n`.
    pub fn part(&self, n: u64) -> u64 {
        let (count, index) = (self.count as u64, self.index as u64);
        n / count + u64::from(index < n % count)
    }

    /// Turns the whole run's load into this shard's part of it.
    pub fn apply(&self, l: &mut Load) -> Result<(), String> {
        let load = &mut l.flags;
        let too_small = |flag: &str, n: u64| {
            format!(
                "{flag} {n} cannot be split into {} shards: shard {} would get none (lower the shard count or raise {flag})",
                self.count, self.index
            )
        };
        for c in &mut load.concurrency {
            let whole = *c;
            *c = self.part(whole);
            if *c == 0 {
                return Err(too_small("--concurrency", whole));
            }
        }
        // The whole schedule, of which this shard sends every N-th arrival
        // (its own rate, for the summary, is the whole's ÷ N).
        if let Some(&rate) = load.rate.first().filter(|_| !load.replays_dataset()) {
            l.share = Some(ScheduleShare {
                index: self.index as u64,
                count: self.count as u64,
                rate,
                seed: load.seed,
            });
        }
        for r in &mut load.rate {
            *r /= self.count as f64;
        }
        if let Some(m) = &mut load.max_concurrency {
            let whole = *m;
            *m = self.part(whole);
            if *m == 0 {
                return Err(too_small("--max-concurrency", whole));
            }
        }
        if let Some(n) = &mut load.requests {
            let whole = *n;
            *n = self.part(whole);
            if *n == 0 {
                return Err(too_small("--requests", whole));
            }
        }
        load.warmup = self.part(load.warmup);
        // Each shard its own prompts and arrivals: identical prompts from N
        // shards would hit the server's prefix cache as one user never does.
        load.seed = load
            .seed
            .wrapping_add((self.index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        if let Some(d) = l.dataset() {
            let part = d.shard(self.index as usize, self.count as usize);
            if part.is_empty() {
                return Err(too_small("the dataset's entries", d.len() as u64));
            }
            l.set_dataset(part);
        }
        Ok(())
    }
}

/// This host's name (shards on one host share one clock).
pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

/// The kernel's view of this host's clock discipline: `adjtimex` with no
/// mode set only reads it, and needs no privilege.
pub fn clock_sync() -> Option<tokenscope_core::results::ClockSync> {
    // SAFETY: a zeroed timex with modes 0 is a valid read-only request, and
    // the kernel writes only into the struct we own.
    let mut t: libc::timex = unsafe { std::mem::zeroed() };
    let state = unsafe { libc::adjtimex(&mut t) };
    (state >= 0).then_some(tokenscope_core::results::ClockSync {
        synchronised: t.status & libc::STA_UNSYNC == 0 && state != libc::TIME_ERROR,
        est_error_us: t.esterror as i64,
        max_error_us: t.maxerror as i64,
    })
}

/// How long before the start instant the connections are opened.
pub const CONNECT_AHEAD: Duration = Duration::from_secs(2);

/// Waits until `ahead` before `start` (a shard's shared instant); returns
/// how late the wait ended, or how late the process already was.
pub async fn wait_until(start: &StartAt, ahead: Duration) -> Duration {
    let until = start.at.checked_sub(ahead).unwrap_or(start.at);
    if let Ok(left) = until.duration_since(SystemTime::now()) {
        tokio::time::sleep(left).await;
    }
    SystemTime::now()
        .duration_since(until)
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_start_at;

    #[test]
    fn parts_sum_to_the_whole_and_differ_by_at_most_one() {
        for count in 1..20u32 {
            for n in [0u64, 1, 7, 64, 1000, 4097] {
                let parts: Vec<u64> = (0..count)
                    .map(|index| Shard { index, count }.part(n))
                    .collect();
                assert_eq!(parts.iter().sum::<u64>(), n, "{n} in {count}");
                let (lo, hi) = (parts.iter().min().unwrap(), parts.iter().max().unwrap());
                assert!(hi - lo <= 1, "{parts:?}");
            }
        }
    }

    #[test]
    fn shard_and_start_flags_parse_and_refuse_clearly() {
        assert_eq!(
            parse_shard("3/16"),
            Ok(Shard {
                index: 3,
                count: 16
            })
        );
        assert!(parse_shard("16/16").unwrap_err().contains("0 ≤ I < N"));
        assert!(parse_shard("a/b").is_err() && parse_shard("1").is_err());
        let at = parse_start_at("2026-12-03T10:00:00Z").unwrap();
        assert_eq!(at.text, "2026-12-03T10:00:00.000Z");
        let soon = parse_start_at("+30s").unwrap();
        let ahead = soon.at.duration_since(SystemTime::now()).unwrap();
        assert!(ahead > Duration::from_secs(29) && ahead <= Duration::from_secs(30));
        assert!(parse_start_at("tomorrow").unwrap_err().contains("RFC 3339"));
    }

    #[test]
    fn shards_takes_the_index_from_the_job() {
        let args = ShardArgs {
            shards: Some(4),
            ..Default::default()
        };
        assert_eq!(
            args.resolve_with(Some("2".into())),
            Ok(Some(Shard { index: 2, count: 4 }))
        );
        assert!(args
            .resolve_with(None)
            .unwrap_err()
            .contains("JOB_COMPLETION_INDEX"));
        assert!(args.resolve_with(Some("4".into())).is_err());
    }
}
