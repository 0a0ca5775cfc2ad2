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
/// the queue time of requests that finished since the previous line.
#[derive(Debug, Serialize)]
struct Line<'a> {
    t_s: f64,
    in_flight: u64,
    running: Option<f64>,
    waiting: Option<f64>,
    kv_usage: Option<f64>,
    preemptions_total: Option<f64>,
    prompt_tokens_total: Option<f64>,
    generation_tokens_total: Option<f64>,
    queue_time_mean_ms: Option<f64>,
    gpu_util_time_pct: Option<f64>,
    gpu_power_w: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

pub struct Scraper {
    stop: CancellationToken,
    task: JoinHandle<ScrapeLog>,
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
        let mut sampler = Sampler {
            client,
            config,
            out,
            origin,
            in_flight,
            log: ScrapeLog::default(),
        };
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
        Ok(Scraper { stop, task })
    }

    /// Takes the last scrape and returns everything seen.
    pub async fn finish(self) -> ScrapeLog {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

/// Everything one scrape needs, and what the scrapes found so far.
struct Sampler {
    client: reqwest::Client,
    config: ScrapeConfig,
    out: std::io::BufWriter<std::fs::File>,
    origin: Instant,
    in_flight: Arc<dyn Fn() -> u64 + Send + Sync>,
    log: ScrapeLog,
}

impl Sampler {
    /// One scrape: fetched, merged, logged, and written as a line.
    async fn take(&mut self) {
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
        let line = Line {
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
            error: error.as_deref(),
        };
        if serde_json::to_writer(&mut self.out, &line).is_ok() {
            let _ = self.out.write_all(b"\n");
            let _ = self.out.flush();
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
