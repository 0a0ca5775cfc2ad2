//! The event-loop delay probe: a task on the client's runtime that asks to
//! wake every millisecond and records how late it ran. A read that arrives
//! while the loop is busy waits as long as the probe does, so this is the
//! resolution of every time the client stamps — measured, not assumed.
//!
//! After a stall the missed ticks all run at once, each as late as it is:
//! a 200 ms stall is 200 samples from 200 ms down to 1 ms. So the samples
//! weigh time, not wake-ups: their p99 is the delay a read arriving at a
//! random moment of the run would have waited, and a single long stall —
//! one client thread sending a burst of requests — is not one sample lost
//! among thousands.
//!
//! tokio's timer has 1 ms granularity: an idle loop reads up to ~1 ms late
//! here by construction. The rule that judges the delay
//! (`tokenscope_core::diagnosis`) subtracts that granularity.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokenscope_core::clock::Clock;
use tokenscope_core::stats::Distribution;
use tokio_util::sync::CancellationToken;

/// How often the probe asks to wake.
pub const PERIOD: Duration = Duration::from_millis(1);

/// What the probe measured.
#[derive(Debug, Default, Clone)]
pub struct LoopDelay {
    /// Every wake-up's delay, µs.
    pub all_us: Distribution,
    /// Per second of the run: (second, the worst delay in it, µs). One entry
    /// per second, so an hour-long run holds 3,600; past [`MAX_SECONDS`]
    /// neighbours are merged (each entry the worst from its second to the
    /// next entry's), so a run of any length holds at most that many.
    pub per_second: Vec<(u64, u64)>,
}

/// Entries of [`LoopDelay::per_second`] kept before neighbours merge.
pub const MAX_SECONDS: usize = 4096;

impl LoopDelay {
    fn add(&mut self, second: u64, delay_us: u64) {
        self.all_us.record(delay_us as f64);
        match self.per_second.last_mut() {
            Some((s, worst)) if *s == second => *worst = (*worst).max(delay_us),
            _ => self.per_second.push((second, delay_us)),
        }
        if self.per_second.len() > MAX_SECONDS {
            let pairs = self.per_second.chunks(2);
            self.per_second = pairs
                .map(|p| (p[0].0, p.iter().map(|e| e.1).max().unwrap_or(0)))
                .collect();
        }
    }

    /// The worst delay of the latest second, µs (what a live view shows).
    pub fn latest_worst_us(&self) -> Option<u64> {
        self.per_second.last().map(|e| e.1)
    }
}

/// The probe, running until [`Probe::finish`].
pub struct Probe {
    measured: Arc<Mutex<LoopDelay>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Probe {
    /// Starts the probe on the current runtime.
    pub fn start(clock: Clock) -> Probe {
        let measured = Arc::new(Mutex::new(LoopDelay::default()));
        let stop = CancellationToken::new();
        let (m, s) = (measured.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(PERIOD);
            // Catch up after a stall: one sample per millisecond of it.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            loop {
                let due = tokio::select! {
                    _ = s.cancelled() => return,
                    due = tick.tick() => due,
                };
                let now = tokio::time::Instant::now();
                let late = now.saturating_duration_since(due).as_micros() as u64;
                let second = clock.us(now.into_std()) / 1_000_000;
                if let Ok(mut m) = m.lock() {
                    m.add(second, late);
                }
            }
        });
        Probe {
            measured,
            stop,
            task,
        }
    }

    /// What it has measured so far, shared (read by a live exporter).
    pub fn shared(&self) -> Arc<Mutex<LoopDelay>> {
        self.measured.clone()
    }

    /// Stops the probe; what it measured.
    pub async fn finish(self) -> LoopDelay {
        self.stop.cancel();
        let _ = self.task.await;
        let m = self.measured.lock().map(|m| m.clone());
        m.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_any_length_keeps_a_bounded_worst_per_second() {
        let mut d = LoopDelay::default();
        for s in 0..(MAX_SECONDS as u64 * 5) {
            d.add(s, s % 1000);
        }
        assert!(d.per_second.len() <= MAX_SECONDS);
        assert_eq!(d.per_second[0].0, 0);
        assert_eq!(
            d.per_second.iter().map(|e| e.1).max(),
            Some(999),
            "the worst kept"
        );
        assert_eq!(d.all_us.count(), MAX_SECONDS as u64 * 5);
    }

    #[test]
    fn a_blocked_loop_shows_as_one_late_wake_up() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let measured = rt.block_on(async {
            let probe = Probe::start(Clock::start());
            tokio::time::sleep(Duration::from_millis(50)).await;
            // Block the only thread for 80 ms: the probe cannot run meanwhile.
            std::thread::sleep(Duration::from_millis(80));
            tokio::time::sleep(Duration::from_millis(20)).await;
            probe.finish().await
        });
        let max_us = measured.all_us.quantile(1.0).unwrap();
        assert!(max_us >= 75_000.0, "the block shows: {max_us} µs");
        let late = measured.per_second.iter().map(|&(_, w)| w).max().unwrap();
        assert!(late >= 75_000);
        // The 80 ms weigh as 80 samples (one per millisecond of the stall),
        // from 80 ms down, among ~70 of the idle loop's: the upper quarter is
        // well into the stall. Had the stall been one sample, p75 would be ~1 ms.
        let n = measured.all_us.count();
        assert!((100..=250).contains(&n), "{n} samples");
        let p75 = measured.all_us.quantile(0.75).unwrap();
        assert!(p75 > 20_000.0, "p75 {p75} µs");
    }
}
