//! `tokenscope watch URL`: no load — samples a live server's `/metrics` (and
//! the GPU) and shows what the server's own counters say over a rolling
//! window: requests/s and tokens/s from counter deltas, TTFT and queue-time
//! quantiles from its histograms, KV usage, preemptions, and the diagnosis
//! rules. On a terminal, the dashboard; otherwise one line per sample;
//! `--once` one snapshot (`--json` for scripts).

use crate::cli::{GpuSource, WatchArgs};
use crate::exit::Exit;
use crate::live::{Dashboard, Rate};
use anyhow::Context;
use serde_json::json;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokenscope_core::results::{Finding, Latency};
use tokenscope_report::dashboard::{ServerView, View};
use tokenscope_telemetry::diagnose::diagnose;
use tokenscope_telemetry::gpu::LocalGpu;
use tokenscope_telemetry::scraper::{Sampler, ScrapeConfig};
use tokenscope_telemetry::window::{summarize, ServerSummary};

/// `http://host:port` → `http://host:port/metrics`; a URL with a path is kept.
fn metrics_url(url: &str) -> anyhow::Result<String> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| Exit::usage(format!("watch `{url}`: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Exit::usage(format!(
            "watch `{url}`: only http and https are supported"
        )));
    }
    Ok(if parsed.path().trim_matches('/').is_empty() {
        format!("{}/metrics", url.trim_end_matches('/'))
    } else {
        url.to_string()
    })
}

/// What one look at the window says.
struct Snapshot {
    kind: Option<String>,
    summary: ServerSummary,
    findings: Vec<Finding>,
    error: Option<String>,
    /// Requests finished per second (the server's request-latency histogram count).
    requests_per_s: Option<f64>,
}

/// The sampler and the rolling window of its scrapes.
struct Watcher {
    sampler: Sampler,
    window: Duration,
}

impl Watcher {
    async fn sample(&mut self) -> Snapshot {
        self.sampler
            .take(tokenscope_telemetry::scraper::SCRAPE_TIMEOUT)
            .await;
        let log = &mut self.sampler.log;
        // Keep the window (and one scrape before it, for the deltas).
        if let Some(last) = log.scrapes.last().map(|s| s.t_s) {
            let from = last - self.window.as_secs_f64();
            let keep = log.scrapes.iter().rposition(|s| s.t_s <= from).unwrap_or(0);
            log.scrapes.drain(..keep);
        }
        let summary = summarize(&log.scrapes, None);
        let findings = if log.scrapes.len() >= 2 {
            diagnose(&summary, &Latency::default())
        } else {
            Vec::new()
        };
        let requests_per_s = summary
            .e2e
            .map(|h| h.count)
            .filter(|_| summary.window_s > 0.0)
            .map(|n| n / summary.window_s);
        Snapshot {
            kind: log.server_kind().map(|k| k.name().to_string()),
            error: self.sampler.latest().and_then(|s| s.error),
            summary,
            findings,
            requests_per_s,
        }
    }
}

pub fn run(args: WatchArgs) -> anyhow::Result<Exit> {
    let mut urls = vec![metrics_url(&args.url)?];
    for u in &args.metrics_urls {
        urls.push(metrics_url(u)?);
    }
    let local_gpu = match args.gpu {
        GpuSource::None => None,
        GpuSource::Local => match LocalGpu::open() {
            Ok(g) => Some(Arc::new(g)),
            Err(why) => {
                eprintln!("tokenscope watch: no local GPU: {why}");
                None
            }
        },
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = reqwest::Client::builder()
            .build()
            .context("building the metrics client")?;
        let target =
            crate::run::target::target_headers(args.api_key_env.as_deref(), &args.headers)?;
        let config = ScrapeConfig {
            endpoints: crate::run::target::metrics_endpoints(
                &args.url,
                &urls,
                &target,
                &args.metrics_headers,
            )?,
            interval: args.interval,
            local_gpu,
        };
        let mut w = Watcher {
            sampler: Sampler::new(client, config, Some(Instant::now()), None, Arc::new(|| 0)),
            window: args.window,
        };
        if args.once {
            return once(&mut w, &args, &urls).await;
        }
        live(&mut w, &args, &urls[0]).await
    })
}

/// Two samples an interval apart, printed once.
async fn once(w: &mut Watcher, args: &WatchArgs, urls: &[String]) -> anyhow::Result<Exit> {
    let first = w.sample().await;
    if first.kind.is_none() {
        // The scraper's error names the endpoint it read.
        let why = first
            .error
            .unwrap_or_else(|| format!("{}: no metrics", urls[0]));
        return Err(anyhow::Error::new(Exit::Unreachable).context(why));
    }
    tokio::time::sleep(args.interval).await;
    let s = w.sample().await;
    if args.json {
        let doc = json!({
            "urls": urls,
            "server_kind": s.kind,
            "window_s": s.summary.window_s,
            "requests_per_s": s.requests_per_s,
            "generation_tokens_per_s": s.summary.generation_tokens_per_s,
            "server": s.summary,
            "diagnosis": s.findings,
        });
        // A closed pipe (`| head`) ends the output, never a panic.
        crate::output::to_stdout(&(serde_json::to_string_pretty(&doc)? + "\n"));
    } else {
        let mut text = line(&s) + "\n";
        for f in &s.findings {
            text += &format!("  [{}] {}\n", f.severity, f.message);
        }
        crate::output::to_stdout(&text);
    }
    Ok(Exit::Success)
}

/// One plain line for a log.
fn line(s: &Snapshot) -> String {
    let m = &s.summary;
    let g = |v: Option<f64>, unit: &str| v.map_or("—".into(), |v| format!("{v:.1}{unit}"));
    format!(
        "{} · {:.0} s window · {} req/s · {} tok/s · running {} · waiting {} · KV {} · TTFT p99 {} · queue p99 {}{}{}",
        s.kind.as_deref().unwrap_or("unknown server"),
        m.window_s,
        g(s.requests_per_s, ""),
        g(m.generation_tokens_per_s, ""),
        g(m.running.map(|x| x.last), ""),
        g(m.waiting.map(|x| x.last), ""),
        g(m.kv_usage.map(|x| x.last * 100.0), " %"),
        g(m.ttft.map(|h| h.p99_ms), " ms"),
        g(m.queue_time.map(|h| h.p99_ms), " ms"),
        m.spec_decode
            .as_ref()
            .and_then(|d| d.acceptance_rate)
            .map(|r| format!(" · spec accept {:.0} %", r * 100.0))
            .unwrap_or_default(),
        s.error.as_deref().map(|e| format!(" · error: {e}")).unwrap_or_default()
    )
}

/// The dashboard (or lines) until Ctrl-C or `--duration`.
async fn live(w: &mut Watcher, args: &WatchArgs, url: &str) -> anyhow::Result<Exit> {
    let start = Instant::now();
    let view = Arc::new(Mutex::new(View {
        title: format!("tokenscope watch · {url}"),
        footer: "Ctrl-C to stop · no load is sent".into(),
        ..View::default()
    }));
    let dashboard = std::io::stdout()
        .is_terminal()
        .then(|| {
            let view = view.clone();
            Dashboard::start(move || view.lock().map(|v| v.clone()).unwrap_or_default())
        })
        .flatten();
    let mut rate = Rate::new();
    let exported = match args.serve_metrics {
        Some(addr) => Some(crate::live_metrics::exporter(
            addr,
            vec![("target".to_string(), args.url.clone())],
        )?),
        None => None,
    };
    let mut ticker = tokio::time::interval(args.interval);
    let mut stop = crate::signals::Stop::listen()?;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.recv() => break,
        }
        let s = w.sample().await;
        if let Some(t) = w.sampler.latest().and_then(|l| l.generation_tokens_total) {
            rate.feed(start.elapsed().as_secs_f64(), t as u64);
        }
        if let Some(m) = &exported {
            m.server_figures(&figures(&s));
        }
        if dashboard.is_some() {
            if let Ok(mut v) = view.lock() {
                *v = to_view(&s, url, start, args, &rate);
            }
        } else {
            crate::output::to_stdout(&(line(&s) + "\n"));
        }
        if args.duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
    }
    if let Some(d) = dashboard {
        d.stop();
    }
    Ok(Exit::Success)
}

/// What the exporter shows of a look at the server (seconds, ratios).
fn figures(s: &Snapshot) -> crate::live_metrics::ServerFigures {
    let m = &s.summary;
    crate::live_metrics::ServerFigures {
        running: m.running.map(|g| g.last),
        waiting: m.waiting.map(|g| g.last),
        kv_usage: m.kv_usage.map(|g| g.last),
        requests_per_s: s.requests_per_s,
        generation_tokens_per_s: m.generation_tokens_per_s,
        ttft_p99_s: m.ttft.map(|h| h.p99_ms / 1e3),
        queue_time_p99_s: m.queue_time.map(|h| h.p99_ms / 1e3),
        gpu_util: m.gpu_util_time_pct.map(|g| g.last / 100.0),
        preemptions: m.preemptions,
        spec_acceptance: m.spec_decode.as_ref().and_then(|d| d.acceptance_rate),
    }
}

fn to_view(s: &Snapshot, url: &str, start: Instant, args: &WatchArgs, rate: &Rate) -> View {
    let m = &s.summary;
    let row = |name: &str, h: Option<tokenscope_telemetry::window::HistSummary>| {
        (name.to_string(), h.map(|h| h.p50_ms), h.map(|h| h.p99_ms))
    };
    View {
        title: format!(
            "tokenscope watch · {url} · {} · last {:.0} s",
            s.kind.as_deref().unwrap_or("unknown server"),
            m.window_s
        ),
        progress: None,
        elapsed_s: start.elapsed().as_secs_f64(),
        planned_s: args
            .duration
            .filter(|d| !tokenscope_core::duration::is_forever(*d))
            .map(|d| d.as_secs_f64()),
        latency: vec![
            row("TTFT", m.ttft),
            row("queue", m.queue_time),
            row("ITL", m.itl),
            row("E2E", m.e2e),
        ],
        tokens_per_s: rate.history.clone(),
        requests_per_s: s.requests_per_s,
        done: 0,
        failed: 0,
        in_flight: None,
        errors: Vec::new(),
        server: ServerView {
            kind: s.kind.clone(),
            running: m.running.map(|g| g.last),
            waiting: m.waiting.map(|g| g.last),
            kv_usage: m.kv_usage.map(|g| g.last),
            preemptions: m.preemptions,
            queue_time_ms: m.queue_time.map(|h| h.mean_ms),
            gpu_util_pct: m.gpu_util_time_pct.map(|g| g.last),
            gpu_power_w: m.gpu_power_w.map(|g| g.last),
            missing: s.error.clone(),
        },
        findings: s.findings.iter().map(|f| f.message.clone()).collect(),
        slo: Vec::new(),
        footer: "Ctrl-C to stop · no load is sent · figures are the server's own".into(),
    }
}
