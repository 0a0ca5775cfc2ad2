//! Sampling the server's `/metrics` during a run: a baseline before the load,
//! one scrape every interval, a last one after; each appended to
//! `timeseries.jsonl` on the run's clock as it is taken.
//!
//! Scraping never shapes the load: it runs on a thread and runtime of its own
//! (never the client's), the baseline is taken before the run's clock starts
//! and is bounded, endpoints are fetched concurrently, a scrape in progress is
//! abandoned when the run ends, and the last scrape is bounded too. Each
//! endpoint gets only its own headers: credentials go to the target's origin
//! alone (the caller decides; see [`Endpoint`]).

use crate::kinds::{self, Concepts, ServerKind};
use crate::prometheus;
use crate::window::{hist_delta, Scrape};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenscope_core::error_chain;
use tokio_util::sync::CancellationToken;

/// How long the baseline may wait for an endpoint: the run waits for it
/// before its clock starts, so it is short.
pub const EDGE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the last scrape may wait: the run's end waits for it.
pub const FINAL_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a scrape during the run may wait (it runs beside the load).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// One metrics URL and the headers it may be sent.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub url: String,
    pub headers: reqwest::header::HeaderMap,
}

/// Where and how often to scrape.
#[derive(Clone)]
pub struct ScrapeConfig {
    pub endpoints: Vec<Endpoint>,
    pub interval: Duration,
    /// The local GPU, sampled with every scrape (`--gpu local`).
    pub local_gpu: Option<Arc<crate::gpu::LocalGpu>>,
}

/// How one endpoint fared over the run.
#[derive(Debug, Default, Clone, Serialize)]
pub struct EndpointHealth {
    pub attempts: u64,
    pub failures: u64,
    pub first_error: Option<String>,
}

/// What the scraper saw.
#[derive(Debug, Default)]
pub struct ScrapeLog {
    pub scrapes: Vec<Scrape>,
    /// The kind each URL answered as (from its first good scrape).
    pub sources: Vec<(String, ServerKind)>,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Per URL: attempts, failures and the first error.
    pub endpoints: BTreeMap<String, EndpointHealth>,
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
    /// Speculative decoding's acceptance since the previous line (accepted
    /// ÷ drafted tokens, or the server's gauge); absent when it drafted none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_acceptance: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The latest sample, shared with whoever displays it.
pub type Latest = Arc<std::sync::Mutex<Option<Sample>>>;

/// The scraping thread of one run.
pub struct Scraper {
    stop: CancellationToken,
    origin: Option<tokio::sync::oneshot::Sender<Instant>>,
    thread: Option<std::thread::JoinHandle<ScrapeLog>>,
    latest: Latest,
}

impl Scraper {
    /// Starts the scraping thread and takes the baseline (bounded by
    /// [`EDGE_TIMEOUT`]); returns once it is taken, before the run's clock
    /// starts. The periodic scrapes wait for [`Scraper::run_from`].
    pub async fn start(
        config: ScrapeConfig,
        timeseries: &Path,
        in_flight: Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> std::io::Result<Scraper> {
        let out = std::io::BufWriter::new(std::fs::File::create(timeseries)?);
        let stop = CancellationToken::new();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Latest>();
        let (origin_tx, origin_rx) = tokio::sync::oneshot::channel::<Instant>();
        let token = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ts-scraper".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime");
                rt.block_on(scrape_loop(
                    config, out, in_flight, token, ready_tx, origin_rx,
                ))
            })?;
        // The baseline is bounded; a thread that cannot even start is an error.
        let latest = tokio::time::timeout(EDGE_TIMEOUT * 2, ready_rx)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Ok(Scraper {
            stop,
            origin: Some(origin_tx),
            thread: Some(thread),
            latest,
        })
    }

    /// Starts the periodic scrapes on the run's clock.
    pub fn run_from(&mut self, origin: Instant) {
        if let Some(tx) = self.origin.take() {
            let _ = tx.send(origin);
        }
    }

    /// The latest sample, for a live view.
    pub fn latest(&self) -> Latest {
        self.latest.clone()
    }

    /// Abandons a scrape in progress, takes the last one (bounded by
    /// [`FINAL_TIMEOUT`]) and returns everything seen.
    pub async fn finish(mut self) -> ScrapeLog {
        self.stop.cancel();
        drop(self.origin.take());
        let thread = self.thread.take();
        tokio::task::spawn_blocking(move || thread.and_then(|t| t.join().ok()))
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    }
}

/// The scraping thread: baseline, then every interval until stopped, then the last.
async fn scrape_loop(
    config: ScrapeConfig,
    out: std::io::BufWriter<std::fs::File>,
    in_flight: Arc<dyn Fn() -> u64 + Send + Sync>,
    stop: CancellationToken,
    ready: tokio::sync::oneshot::Sender<Latest>,
    origin: tokio::sync::oneshot::Receiver<Instant>,
) -> ScrapeLog {
    let client = match reqwest::Client::builder().build() {
        Ok(c) => c,
        Err(_) => return ScrapeLog::default(),
    };
    let every = config.interval;
    let mut sampler = Sampler::new(client, config, None, Some(out), in_flight);
    sampler.take(EDGE_TIMEOUT).await;
    let _ = ready.send(sampler.latest.clone());
    let Ok(origin) = origin.await else {
        return sampler.log; // the run never started
    };
    sampler.origin = Some(origin);
    let mut next = tokio::time::Instant::now() + every;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep_until(next) => {}
        }
        tokio::select! {
            biased;
            _ = stop.cancelled() => break, // a scrape in progress is abandoned
            _ = sampler.take(SCRAPE_TIMEOUT) => {}
        }
        next = (next + every).max(tokio::time::Instant::now());
    }
    sampler.take(FINAL_TIMEOUT).await;
    sampler.log
}

/// Everything one scrape needs, and what the scrapes found so far. The
/// scraper drives one on a timer during a run; `watch` drives one itself.
pub struct Sampler {
    client: reqwest::Client,
    config: ScrapeConfig,
    out: Option<std::io::BufWriter<std::fs::File>>,
    /// The run's clock; `None` before it starts (the baseline is at t = 0).
    origin: Option<Instant>,
    in_flight: Arc<dyn Fn() -> u64 + Send + Sync>,
    pub log: ScrapeLog,
    latest: Latest,
}

impl Sampler {
    /// `out`: where to append `timeseries.jsonl` lines (none for `watch`).
    pub fn new(
        client: reqwest::Client,
        config: ScrapeConfig,
        origin: Option<Instant>,
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

    /// One scrape, each endpoint waited for at most `timeout`: fetched,
    /// merged, logged, and written as a line.
    pub async fn take(&mut self, timeout: Duration) {
        let (mut concepts, mut error) =
            scrape(&self.client, &self.config, &mut self.log, timeout).await;
        if let Some(gpu) = &self.config.local_gpu {
            concepts = kinds::merge(&[gpu.sample(), concepts]);
            error = None;
        }
        let t_s = self.origin.map_or(0.0, |o| o.elapsed().as_secs_f64());
        let previous = self.log.scrapes.last().map(|s| &s.concepts);
        let prev_queue = previous.and_then(|c| c.queue_time.clone());
        let spec = previous.map_or_else(
            || crate::spec_decode::summarize(&[&concepts.spec]),
            |p| crate::spec_decode::summarize(&[&p.spec, &concepts.spec]),
        );
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
            spec_acceptance: spec.and_then(|s| s.acceptance_rate),
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
            if self.log.scrapes.len() > MAX_KEPT_SCRAPES {
                thin(&mut self.log.scrapes);
            }
        }
    }
}

/// Scrapes kept in memory for the run's summary and diagnosis: past it (2.3
/// hours of 1 s scrapes) every other one is let go, so a run of any length
/// holds at most this many, evenly spread. `timeseries.jsonl` keeps them all.
pub const MAX_KEPT_SCRAPES: usize = 8192;

/// Keeps the first, every other one after it, and the last: counters' first
/// and last values stay exact, gauges are sampled half as often.
fn thin(scrapes: &mut Vec<Scrape>) {
    let last = scrapes.len() - 1;
    let mut i = 0;
    scrapes.retain(|_| {
        let keep = i % 2 == 0 || i == last;
        i += 1;
        keep
    });
}

/// Scrapes every endpoint once, all at the same time, and merges what they said.
async fn scrape(
    client: &reqwest::Client,
    config: &ScrapeConfig,
    log: &mut ScrapeLog,
    timeout: Duration,
) -> (Concepts, Option<String>) {
    let fetches = config
        .endpoints
        .iter()
        .map(|e| fetch(client, &e.url, &e.headers, timeout));
    let answers = futures_util::future::join_all(fetches).await;
    let mut parts = Vec::new();
    let mut error = None;
    for (e, answer) in config.endpoints.iter().zip(answers) {
        let health = log.endpoints.entry(e.url.clone()).or_default();
        health.attempts += 1;
        match answer {
            Ok(exp) => {
                let kind = kinds::detect(&exp);
                if !log.sources.iter().any(|(u, _)| *u == e.url) {
                    log.sources.push((e.url.clone(), kind));
                }
                parts.push(kinds::concepts(kind, &exp));
            }
            Err(msg) => {
                health.failures += 1;
                health.first_error.get_or_insert_with(|| msg.clone());
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
    timeout: Duration,
) -> Result<prometheus::Exposition, String> {
    let get = async {
        let resp = client
            .get(url)
            .headers(headers.clone())
            .send()
            .await
            .map_err(|e| format!("{url}: {}", error_chain::line(&e.without_url())))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("{url}: HTTP {}", status.as_u16()));
        }
        let mut body = tokenscope_core::capped::Capped::new(MAX_EXPOSITION_BYTES);
        let mut resp = resp;
        while let Some(piece) = resp
            .chunk()
            .await
            .map_err(|e| format!("{url}: {}", error_chain::line(&e.without_url())))?
        {
            if !body.push(&piece) {
                break;
            }
        }
        let bytes = body.finish().map_err(|e| format!("{url}: {e}"))?;
        prometheus::parse(&String::from_utf8_lossy(&bytes)).map_err(|e| format!("{url}: {e}"))
    };
    tokio::time::timeout(timeout, get)
        .await
        .unwrap_or_else(|_| Err(format!("{url}: no answer within {timeout:?}")))
}

/// The most bytes one scrape may bring: 16 MiB, some twenty times a
/// large exporter's page (DCGM's on eight GPUs). Past it the scrape fails,
/// naming the limit, and the next one is tried as usual.
pub const MAX_EXPOSITION_BYTES: usize = 16 << 20;

#[cfg(test)]
mod thinning {
    use super::*;

    #[test]
    fn thinning_keeps_the_ends_and_halves_the_rest() {
        let mut s: Vec<Scrape> = (0..=MAX_KEPT_SCRAPES)
            .map(|i| Scrape {
                t_s: i as f64,
                concepts: Default::default(),
            })
            .collect();
        thin(&mut s);
        assert_eq!(s.len(), MAX_KEPT_SCRAPES / 2 + 1);
        assert_eq!(s[0].t_s, 0.0);
        assert_eq!(s[1].t_s, 2.0);
        assert_eq!(s.last().unwrap().t_s, MAX_KEPT_SCRAPES as f64);
    }
}
