//! `--stop-on saturation`'s sooner sign: the requests waiting for a first
//! token, sampled on a timer of their own. The recorder's rule reads
//! finished requests, and under a growing queue a request finishes only
//! after its wait (half a minute in, on the built-in engine sent three
//! times what it serves); the waiting count shows the queue within
//! seconds ([`tokenscope_core::breaker::WaitingRise`]).

use crate::spec::RunSpec;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokenscope_core::breaker::{StopRule, Tripped, WaitingRise, WaitingSample, WAITING_EVERY_S};
use tokenscope_core::clock::Clock;
use tokenscope_load::runner::Progress;
use tokenscope_workload::arrival::LoadPattern;
use tokio_util::sync::CancellationToken;

/// The watch, while the load runs: on every open loop that streams. With
/// `--stop-on saturation` it stops the run (enforce); without, it only
/// notes when the queue began to grow (monitor: a finding). `None` where
/// the loop is closed (its users bound the queue), or the answers come
/// whole (`--no-stream`, a pooling API: no first token, so the count would
/// be every request in flight, which rises through a stable server's
/// first E2E too).
pub struct QueueWatch(Option<tokio::task::JoinHandle<Option<Grew>>>);

/// The queue seen growing, and whether that stopped the run.
pub struct Grew {
    pub tripped: Tripped,
    pub stopped: bool,
}

impl QueueWatch {
    pub fn start(
        spec: &RunSpec,
        streams: bool,
        progress: &Arc<Progress>,
        clock: Clock,
        cancel: &CancellationToken,
    ) -> QueueWatch {
        let enforce = spec.client.stop_on.contains(&StopRule::Saturation);
        let open = matches!(spec.plan.pattern, LoadPattern::Open { .. });
        if !open || !streams {
            return QueueWatch(None);
        }
        let (progress, cancel) = (progress.clone(), cancel.clone());
        QueueWatch(Some(tokio::spawn(async move {
            let mut rise = WaitingRise::default();
            let mut tick = tokio::time::interval(Duration::from_secs_f64(WAITING_EVERY_S));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tick.tick() => {}
                }
                let now_s = clock.now_us() as f64 / 1e6;
                let sample = WaitingSample {
                    sent: progress.sent.load(Ordering::Relaxed),
                    waiting: progress.waiting(),
                    answered: progress.first_chunks.load(Ordering::Relaxed),
                    answer_wait_us: progress.first_chunk_wait_us.load(Ordering::Relaxed),
                };
                if let Some(tripped) = rise.add(now_s, sample) {
                    if enforce {
                        cancel.cancel();
                    }
                    return Some(Grew {
                        tripped,
                        stopped: enforce,
                    });
                }
            }
        })))
    }

    /// What it found, once the load is done.
    pub async fn finish(self) -> Option<Grew> {
        let handle = self.0?;
        if !handle.is_finished() {
            handle.abort();
        }
        handle.await.ok().flatten()
    }
}
