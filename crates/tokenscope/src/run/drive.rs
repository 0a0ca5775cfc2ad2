//! Phase 3 of a run: the load sent and watched, then every part stopped in
//! order — the load, the loop-delay probe, the dashboard or progress line,
//! the scraper, the records file, a server started cold — and the client's
//! CPU read. Nothing here fails: whatever happens, what was measured goes on
//! to be collected.

use super::cold_start;
use super::prepare::Prepared;
use crate::signals::Stop;
use crate::spec::RunSpec;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokenscope_core::results::{ColdStart, Finding};
use tokenscope_load::cpu::thread_cpu;
use tokenscope_load::loop_delay::LoopDelay;
use tokenscope_load::recorder::Recorded;
use tokenscope_telemetry::scraper::ScrapeLog;

/// Client threads are named with this prefix so their CPU time can be told
/// apart from a built-in server's in the same process.
pub const CLIENT_THREADS: &str = "ts-";

/// A run's load, done.
pub struct Driven {
    pub probed: super::probe::Probed,
    pub started_at: String,
    pub http: std::sync::Arc<tokenscope_load::http1::Client>,
    /// Ctrl-C or SIGTERM cut it short.
    pub interrupted: bool,
    pub warmed: Option<tokenscope_load::connections::Warmed>,
    pub late: Option<Duration>,
    pub clock: tokenscope_core::clock::Clock,
    pub origin_unix_us: u64,
    /// The client's working time: from the clock's start until every
    /// request was settled, s.
    pub client_wall_s: f64,
    pub loop_delay: LoopDelay,
    pub telemetry: Option<ScrapeLog>,
    pub recorded: Recorded,
    /// The requests waiting for a first token grew
    /// ([`super::queue_watch`]): with `--stop-on saturation`, that stopped it.
    pub queue_grew: Option<super::queue_watch::Grew>,
    /// `--cold-start`: the cold server's start and first requests, or why
    /// they could not be read.
    pub cold_start: Option<anyhow::Result<ColdStart>>,
    /// The client threads' CPU time and count.
    pub cpu: Option<(Duration, usize)>,
}

pub async fn drive(spec: &RunSpec, p: Prepared, mut stop: Stop) -> Driven {
    let Prepared {
        live,
        otlp,
        mut probed,
        started_at,
        recorder,
        runner,
        http,
        mut scraper,
        progress,
        cancel,
        interrupted,
        warmed,
        late,
        clock,
        origin_unix_us,
        loop_probe,
    } = p;
    let on_ctrl_c = {
        let (cancel, interrupted) = (cancel.clone(), interrupted.clone());
        tokio::spawn(async move {
            stop.recv().await;
            interrupted.store(true, Ordering::SeqCst);
            cancel.cancel();
        })
    };
    if !spec.output.quiet {
        eprintln!(
            "tokenscope: {} · {} · model {} · results in {}",
            probed.base,
            probed.api.name(),
            probed.model,
            probed.out_dir.display()
        );
    }
    let latest = scraper.as_ref().map(|s| s.latest());
    let watch = super::progress::Watch::start(spec, &probed, &progress, clock, latest);
    let streams = runner.target.stream;
    let queue = super::queue_watch::QueueWatch::start(spec, streams, &progress, clock, &cancel);
    runner.clone().run(&spec.plan).await;
    let queue_grew = queue.finish().await;
    let client_wall_s = clock.now_us() as f64 / 1e6;
    let loop_delay = loop_probe.finish().await;
    on_ctrl_c.abort();
    watch.stop();
    // The runner holds the records' sink: the recorder finishes once it is gone.
    drop(runner);
    let telemetry = match scraper.take() {
        Some(s) => Some(s.finish().await),
        None => None,
    };
    if progress.arrival_failed.load(Ordering::SeqCst) {
        probed.notes.push(Finding {
            rule: "internal_error".into(),
            severity: "critical".into(),
            message: "the arrival schedule broke off (an internal error in tokenscope): fewer requests were sent than planned".into(),
            evidence: Default::default(),
        });
    }
    let recorded = recorder.finish();
    if let Some((m, run)) = &live {
        m.ended(run);
    }
    if let Some(why) = otlp.as_ref().and_then(|o| o.finish()) {
        probed.notes.push(Finding {
            rule: "otlp_export_failed".into(),
            severity: "info".into(),
            message: format!("{why}; the run itself is whole"),
            evidence: Default::default(),
        });
    }
    let cold_start = probed.cold.as_mut().map(|server| {
        let stop_s = server.stop().as_secs_f64();
        cold_start::waves(&probed.out_dir, server, stop_s)
    });
    let cpu = thread_cpu(CLIENT_THREADS);
    Driven {
        probed,
        started_at,
        http,
        interrupted: interrupted.load(Ordering::SeqCst),
        warmed,
        late,
        clock,
        origin_unix_us,
        client_wall_s,
        loop_delay,
        telemetry,
        recorded,
        queue_grew,
        cold_start,
        cpu,
    }
}
