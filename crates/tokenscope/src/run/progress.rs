//! What a run shows while it goes: the live dashboard when stdout is a
//! terminal, otherwise a progress line on stderr (redrawn in place on a
//! terminal, every 10 s in a log); `--quiet` and `--json` show neither.

use super::probe::Probed;
use crate::spec::RunSpec;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokenscope_core::clock::Clock;
use tokenscope_load::runner::Progress;

/// The dashboard or the progress line of a running load.
pub struct Watch {
    dashboard: Option<crate::live::Dashboard>,
    reporter: Option<tokio::task::JoinHandle<()>>,
}

impl Watch {
    pub fn start(
        spec: &RunSpec,
        probed: &Probed,
        progress: &Arc<Progress>,
        clock: Clock,
        latest: Option<tokenscope_telemetry::scraper::Latest>,
    ) -> Watch {
        let plan = &spec.plan;
        let total = plan.requests.map(|n| n + plan.warmup);
        let show = !spec.quiet();
        let dashboard = (show && std::io::stdout().is_terminal())
            .then(|| {
                let title = format!(
                    "tokenscope · {} · {} · {}",
                    probed.base,
                    probed.model,
                    probed.out_dir.display()
                );
                let mut source = LiveSource {
                    progress: progress.clone(),
                    clock,
                    total,
                    planned_s: plan
                        .duration
                        .filter(|d| !tokenscope_core::duration::is_forever(*d))
                        .map(|d| d.as_secs_f64()),
                    latest,
                    title,
                    rate: crate::live::Rate::new(),
                    slo: spec.output.slo.clone(),
                };
                crate::live::Dashboard::start(move || source.view())
            })
            .flatten();
        let reporter = (show && dashboard.is_none())
            .then(|| tokio::spawn(report_progress(progress.clone(), clock, total)));
        Watch {
            dashboard,
            reporter,
        }
    }

    /// Takes the dashboard down, or ends the progress line.
    pub fn stop(self) {
        if let Some(d) = self.dashboard {
            d.stop();
        }
        if let Some(r) = self.reporter {
            r.abort();
            if std::io::stderr().is_terminal() {
                eprintln!();
            }
        }
    }
}

/// What the dashboard reads during a run.
struct LiveSource {
    progress: Arc<Progress>,
    clock: Clock,
    total: Option<u64>,
    planned_s: Option<f64>,
    latest: Option<tokenscope_telemetry::scraper::Latest>,
    title: String,
    rate: crate::live::Rate,
    slo: Option<tokenscope_core::slo::Slo>,
}

impl LiveSource {
    fn view(&mut self) -> tokenscope_report::dashboard::View {
        use tokenscope_report::dashboard::{ServerView, View};
        let p = &self.progress;
        let (sent, done, failed, tokens) = (
            p.sent.load(Ordering::Relaxed),
            p.finished.load(Ordering::Relaxed),
            p.failed.load(Ordering::Relaxed),
            p.live_output_tokens(),
        );
        let elapsed_s = self.clock.now_us() as f64 / 1e6;
        self.rate.feed(elapsed_s, tokens);
        let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| {
            (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1e3)
        };
        let (latency, errors, slo) = match p.live.lock() {
            Ok(live) => {
                let row = |name: &str, h| (name.to_string(), ms(h, 0.5), ms(h, 0.99));
                let mut rows = vec![row("TTFT", &live.ttft_us)];
                if live.reasoned {
                    rows.push(row("answer start", &live.answer_start_us));
                }
                rows.push(row("TPOT", &live.tpot_us));
                (
                    rows,
                    live.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                    self.slo.as_ref().map_or(Vec::new(), |s| live_slo(s, &live)),
                )
            }
            Err(_) => (Vec::new(), Vec::new(), Vec::new()),
        };
        let sample = self
            .latest
            .as_ref()
            .and_then(|l| l.lock().ok().and_then(|s| s.clone()));
        let server = match (&self.latest, sample) {
            (None, _) => ServerView {
                missing: Some("not sampled (--no-metrics)".into()),
                ..Default::default()
            },
            (Some(_), None) => ServerView {
                missing: Some("no sample yet".into()),
                ..Default::default()
            },
            (Some(_), Some(s)) => ServerView {
                kind: None,
                running: s.running,
                waiting: s.waiting,
                kv_usage: s.kv_usage,
                preemptions: s.preemptions_total,
                queue_time_ms: s.queue_time_mean_ms,
                gpu_util_pct: s.gpu_util_time_pct,
                gpu_power_w: s.gpu_power_w,
                missing: s.error.clone(),
            },
        };
        View {
            title: self.title.clone(),
            progress: self.total.map(|t| (done, t)),
            elapsed_s,
            planned_s: self.planned_s,
            latency,
            tokens_per_s: self.rate.history.clone(),
            requests_per_s: (elapsed_s > 0.0).then(|| done as f64 / elapsed_s),
            done,
            failed,
            in_flight: Some(sent.saturating_sub(done)),
            errors,
            server,
            findings: Vec::new(),
            slo,
            footer: "Ctrl-C stops the run: requests in flight are recorded as cancelled".into(),
        }
    }
}

/// `--slo` while the run goes: each TTFT, answer-start and TPOT objective's figure so far, red
/// once past its limit, amber while too few requests can judge it.
fn live_slo(
    slo: &tokenscope_core::slo::Slo,
    live: &tokenscope_load::runner::LiveLatency,
) -> Vec<(String, String, tokenscope_report::health::Health)> {
    use tokenscope_core::slo::{quantile_of, SloMetric};
    use tokenscope_report::health::Health;
    slo.objectives
        .iter()
        .filter_map(|o| {
            let h = match o.metric {
                SloMetric::Ttft => &live.ttft_us,
                SloMetric::AnswerStart => &live.answer_start_us,
                SloMetric::Tpot => &live.tpot_us,
                _ => return None,
            };
            let label = format!("{}≤{}ms", o.key(), o.limit_ms);
            if h.is_empty() {
                return Some((label, "—".into(), Health::Unknown));
            }
            let us = match (quantile_of(&o.stat), o.stat.as_str()) {
                (Some(q), _) => h.value_at_quantile(q) as f64,
                (None, "mean") => h.mean(),
                _ => h.max() as f64,
            };
            let (ms, n, needed) = (us / 1e3, h.len(), o.samples_needed());
            let (word, health) = if ms > o.limit_ms {
                ("over".to_string(), Health::Bad)
            } else if n < needed {
                (format!("n={n}/{needed}"), Health::Warn)
            } else {
                ("ok".to_string(), Health::Good)
            };
            Some((label, format!("{ms:.0} ms {word}"), health))
        })
        .collect()
}

/// A progress line on stderr: redrawn in place on a terminal, every 10 s otherwise.
async fn report_progress(p: Arc<Progress>, clock: Clock, total: Option<u64>) {
    let tty = std::io::stderr().is_terminal();
    let period = if tty {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(10)
    };
    let mut last_tokens = 0;
    loop {
        tokio::time::sleep(period).await;
        let (sent, done, failed, tokens) = (
            p.sent.load(Ordering::Relaxed),
            p.finished.load(Ordering::Relaxed),
            p.failed.load(Ordering::Relaxed),
            p.live_output_tokens(),
        );
        let rate = (tokens - last_tokens) as f64 / period.as_secs_f64();
        last_tokens = tokens;
        let of = total.map(|t| format!("/{t}")).unwrap_or_default();
        let line = format!(
            "[{:>6.1}s] {done}{of} done · {failed} failed · {} in flight · {rate:.0} tok/s",
            clock.now_us() as f64 / 1e6,
            sent - done
        );
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }
}
