//! Sampling the server's `/metrics` during a run: a baseline before the load,
//! one scrape every interval, a last one after; each appended to
//! `timeseries.jsonl` on the run's clock as it is taken.

use crate::kinds::{self, Concepts, ServerKind};
use crate::prometheus;
use crate::window::{hist_delta, Scrape};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Where and how often to scrape.
#[derive(Clone)]
pub struct ScrapeConfig {
    pub urls: Vec<String>,
    pub interval: Duration,
    pub headers: reqwest::header::HeaderMap,
    /// The local GPU, sampled with every scrape (`--gpu local`).
    pub local_gpu: Option<Arc<crate::gpu::LocalGpu>>,
}

/// What the scraper saw.
#[derive(Debug, Default)]
pub struct ScrapeLog {
    pub scrapes: Vec<Scrape>,
    /// The kind each URL answered as (from its first good scrape).
    pub sources: Vec<(String, ServerKind)>,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl ScrapeLog {
    /// The server's kind: the first source that is not only a GPU exporter.
    pub fn server_kind(&self) -> Option<ServerKind> {
        self.sources
            .iter()
            .map(|(_, k)| *k)
            .find(|k| !matches!(k, ServerKind::Dcgm | ServerKind::Unknown))
            .or_else(|| self.sources.first().map(|(_, k)| *k))
    }
}

/// One line of `timeseries.jsonl`: gauges as sampled, counters cumulative,
/// the queue time of requests that finished since the previous line. The
/// latest is also what the live dashboard shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub in_flight: u64,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    pub kv_usage: Option<f64>,
    pub preemptions_total: Option<f64>,
    pub prompt_tokens_total: Option<f64>,
    pub generation_tokens_total: Option<f64>,
    pub queue_time_mean_ms: Option<f64>,
    pub gpu_util_time_pct: Option<f64>,
    pub gpu_power_w: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The latest sample, shared with whoever displays it.
pub type Latest = Arc<std::sync::Mutex<Option<Sample>>>;

pub struct Scraper {
    stop: CancellationToken,
    task: JoinHandle<ScrapeLog>,
    latest: Latest,
}

impl Scraper {
    /// Takes the baseline scrape, then keeps scraping every interval in the
    /// background. `in_flight` reads the client's in-flight count for each
    /// line; `origin` is the run's clock origin.
    pub async fn start(
        client: reqwest::Client,
        config: ScrapeConfig,
        origin: Instant,
        timeseries: &Path,
        in_flight: Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> std::io::Result<Scraper> {
        let out = std::io::BufWriter::new(std::fs::File::create(timeseries)?);
        let mut sampler = Sampler::new(client, config, origin, Some(out), in_flight);
        let latest = sampler.latest.clone();
        sampler.take().await;
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let every = sampler.config.interval;
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let last = tokio::select! {
                    _ = ticker.tick() => false,
                    _ = token.cancelled() => true,
                };
                sampler.take().await;
                if last {
                    return sampler.log;
                }
            }
        });
        Ok(Scraper { stop, task, latest })
    }

    /// The latest sample, for a live view.
    pub fn latest(&self) -> Latest {
        self.latest.clone()
    }

    /// Takes the last scrape and returns everything seen.
    pub async fn finish(self) -> ScrapeLog {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

/// Everything one scrape needs, and what the scrapes found so far. The
/// scraper drives one on a timer during a run; `watch` drives one itself.
pub struct Sampler {
    client: reqwest::Client,
    config: ScrapeConfig,
    out: Option<std::io::BufWriter<std::fs::File>>,
    origin: Instant,
    in_flight: Arc<dyn Fn() -> u64 + Send + Sync>,
    pub log: ScrapeLog,
    latest: Latest,
}

impl Sampler {
    /// `out`: where to append `timeseries.jsonl` lines (none for `watch`).
    pub fn new(
        client: reqwest::Client,
        config: ScrapeConfig,
        origin: Instant,
        out: Option<std::io::BufWriter<std::fs::File>>,
        in_flight: Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> Sampler {
        Sampler {
            client,
            config,
            out,
            origin,
            in_flight,
            log: ScrapeLog::default(),
            latest: Latest::default(),
        }
    }

    /// The latest sample.
    pub fn latest(&self) -> Option<Sample> {
        self.latest.lock().ok().and_then(|l| l.clone())
    }

    /// One scrape: fetched, merged, logged, and written as a line.
    pub async fn take(&mut self) {
        let (mut concepts, mut error) = scrape(&self.client, &self.config, &mut self.log).await;
        if let Some(gpu) = &self.config.local_gpu {
            concepts = kinds::merge(&[gpu.sample(), concepts]);
            error = None;
        }
        let t_s = self.origin.elapsed().as_secs_f64();
        let prev_queue = self
            .log
            .scrapes
            .last()
            .and_then(|s| s.concepts.queue_time.clone());
        let queue_mean = match (&prev_queue, &concepts.queue_time) {
            (Some(a), Some(b)) => {
                let d = hist_delta(a, b);
                (d.count > 0.0).then(|| d.sum / d.count * 1e3)
            }
            _ => None,
        };
        let line = Sample {
            t_s,
            in_flight: (self.in_flight)(),
            running: concepts.running,
            waiting: concepts.waiting,
            kv_usage: concepts.kv_usage,
            preemptions_total: concepts.preemptions,
            prompt_tokens_total: concepts.prompt_tokens,
            generation_tokens_total: concepts.generation_tokens,
            queue_time_mean_ms: queue_mean,
            gpu_util_time_pct: concepts.gpu_util_time_pct,
            gpu_power_w: concepts.gpu_power_w,
            error: error.clone(),
        };
        if let Some(out) = &mut self.out {
            if serde_json::to_writer(&mut *out, &line).is_ok() {
                let _ = out.write_all(b"\n");
                let _ = out.flush();
            }
        }
        if let Ok(mut l) = self.latest.lock() {
            *l = Some(line);
        }
        if error.is_none() {
            self.log.scrapes.push(Scrape { t_s, concepts });
        }
    }
}

/// Scrapes every URL once and merges what they said.
async fn scrape(
    client: &reqwest::Client,
    config: &ScrapeConfig,
    log: &mut ScrapeLog,
) -> (Concepts, Option<String>) {
    let mut parts = Vec::new();
    let mut error = None;
    for url in &config.urls {
        match fetch(client, url, &config.headers).await {
            Ok(e) => {
                let kind = kinds::detect(&e);
                if !log.sources.iter().any(|(u, _)| u == url) {
                    log.sources.push((url.clone(), kind));
                }
                parts.push(kinds::concepts(kind, &e));
            }
            Err(msg) => {
                log.errors += 1;
                log.first_error.get_or_insert_with(|| msg.clone());
                error = Some(msg);
            }
        }
    }
    (
        kinds::merge(&parts),
        if parts.is_empty() { error } else { None },
    )
}

async fn fetch(
    client: &reqwest::Client,
    url: &str,
    headers: &reqwest::header::HeaderMap,
) -> Result<prometheus::Exposition, String> {
    let resp = client
        .get(url)
        .headers(headers.clone())
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| format!("{url}: {}", e.without_url()))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("{url}: HTTP {}", status.as_u16()));
    }
    let text = resp
        .text()
        .await
        .map_err(|e| format!("{url}: {}", e.without_url()))?;
    prometheus::parse(&text).map_err(|e| format!("{url}: {e}"))
}
