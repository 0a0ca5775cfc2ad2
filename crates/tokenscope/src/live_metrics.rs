//! `--serve-metrics ADDR`: tokenscope's own live figures as a Prometheus
//! endpoint (`GET /metrics`), for soak runs and canaries watched in the
//! Prometheus/Grafana stack an operator already has.
//!
//! Every finished record is shown to the exporter on the recorder's thread
//! (never the load's); the endpoint is served by a thread and runtime of
//! its own, so a slow or hanging scraper cannot delay a request. The
//! exposition is `prometheus-client`'s, never written by hand. One exporter
//! serves the whole process: a sweep's points are series of it, told apart
//! by their `run` label (the run directory's name).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{
    exponential_buckets, Histogram, NativeHistogramConfig,
};
use prometheus_client::registry::{Registry, Unit};
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use tokenscope_core::record::RequestRecord;
use tokenscope_core::slo::Slo;
use tokenscope_load::runner::Progress;

/// Which run a series belongs to, and how a request ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    run: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    run: String,
    /// `ok`, or the error kind (`http_429`, `timeout`, `stream`, …).
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenKind {
    run: String,
    /// `input` or `output`.
    kind: String,
}

type Histograms = Family<RunLabels, Histogram, fn() -> Histogram>;

/// A figure of the last closed window (`--windows`): the rolling percentiles.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WindowFigure {
    run: String,
    figure: String,
}

type Gauges<L> = Family<L, Gauge<f64, std::sync::atomic::AtomicU64>>;

/// A server figure `watch` reads (`running`, `kv_usage`, `ttft_p99_seconds`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerFigure {
    figure: String,
}

/// The server's own figures, as `watch` reads them over its window.
pub struct ServerFigures {
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    pub kv_usage: Option<f64>,
    pub requests_per_s: Option<f64>,
    pub generation_tokens_per_s: Option<f64>,
    pub ttft_p99_s: Option<f64>,
    pub queue_time_p99_s: Option<f64>,
    pub gpu_util: Option<f64>,
    pub preemptions: Option<f64>,
    /// Speculative decoding's acceptance rate (0–1).
    pub spec_acceptance: Option<f64>,
}

/// What a scrape reads of a run in progress.
pub struct RunSources {
    /// Requests sent and finished.
    pub progress: Arc<Progress>,
    /// The client's event-loop delay probe.
    pub loop_delay: Option<Arc<Mutex<tokenscope_load::loop_delay::LoopDelay>>>,
    /// The server's latest scrape (`--metrics-url`, on by default).
    pub server: Option<tokenscope_telemetry::scraper::Latest>,
}

impl ServerFigures {
    /// What a bench's own scrape of the server gives (its gauges; the
    /// rates and percentiles `watch` works out over its window are not).
    pub fn of_sample(s: &tokenscope_telemetry::scraper::Sample) -> ServerFigures {
        ServerFigures {
            running: s.running,
            waiting: s.waiting,
            kv_usage: s.kv_usage,
            requests_per_s: None,
            generation_tokens_per_s: None,
            ttft_p99_s: None,
            queue_time_p99_s: None,
            gpu_util: s.gpu_util_time_pct.map(|p| p / 100.0),
            preemptions: s.preemptions_total,
            spec_acceptance: s.spec_acceptance,
        }
    }
}

/// Latency buckets, seconds: 1 ms to ~65 s, doubling; and native.
fn latency() -> Histogram {
    Histogram::new_classic_and_native(exponential_buckets(0.001, 2.0, 17), native())
}

/// Per-token buckets, seconds: 0.1 ms to ~3.3 s, doubling; and native.
fn per_token() -> Histogram {
    Histogram::new_classic_and_native(exponential_buckets(0.0001, 2.0, 16), native())
}

/// Native (sparse, exponential) buckets, for a scraper that asks for
/// Prometheus's protobuf exposition: schema 3, each bucket 2^(1/8) ≈ 9 %
/// wide, so a quantile read from them is within ~4.5 % whatever the
/// server's latencies; a text scraper gets the classic buckets.
fn native() -> NativeHistogramConfig {
    NativeHistogramConfig::with_schema(NATIVE_SCHEMA)
}

/// The native histograms' resolution: 2^(2^-3) per bucket.
pub const NATIVE_SCHEMA: i8 = 3;

/// The figures, as the registry exposes them.
pub struct LiveMetrics {
    registry: Registry,
    requests: Family<Outcome, Counter>,
    tokens: Family<TokenKind, Counter>,
    ttft: Histograms,
    answer_start: Histograms,
    tpot: Histograms,
    itl: Histograms,
    e2e: Histograms,
    send_lag: Histograms,
    in_flight: Family<RunLabels, Gauge>,
    /// `--slo`: the requests that met every per-request objective.
    good: Family<RunLabels, Counter>,
    server: Gauges<ServerFigure>,
    window: Gauges<WindowFigure>,
    /// The runs in progress, what each scrape reads of them now.
    running: Mutex<Vec<(String, RunSources)>>,
    /// The client's event-loop delay: the worst of the latest second.
    loop_delay: Gauges<RunLabels>,
}

/// What the live exporters take of one finished record, in seconds.
pub struct Seen {
    /// `ok`, or the error kind (`http_429`, `timeout`, …).
    pub outcome: String,
    pub send_lag_s: f64,
    pub e2e_s: f64,
    /// A successful request's timings.
    pub ok: Option<Timed>,
}

/// A successful request's timings, seconds.
pub struct Timed {
    pub ttft_s: Option<f64>,
    pub answer_start_s: Option<f64>,
    pub tpot_s: Option<f64>,
}

impl Seen {
    /// The record as the exporters see it; `None` for a warm-up request.
    pub fn of(r: &RequestRecord) -> Option<Seen> {
        let s = |us: u64| us as f64 * 1e-6;
        (!r.warmup).then(|| Seen {
            outcome: r.error_kind.map_or("ok".to_string(), |k| k.to_string()),
            send_lag_s: s(r.lag_us()),
            e2e_s: s(r.e2e_us()),
            ok: r.succeeded().then(|| Timed {
                ttft_s: r.ttft_us().map(s),
                answer_start_s: r.answer_start_or_ttft_us().map(s),
                tpot_s: r.tpot_us().map(|t| t * 1e-6),
            }),
        })
    }

    /// Each streamed token's gap (ITL), seconds: a chunk's gap split over
    /// its tokens, once per token, as the results count it.
    pub fn itl_s(r: &RequestRecord) -> impl Iterator<Item = f64> + '_ {
        r.itl_us()
            .flat_map(|(gap, k)| std::iter::repeat_n(gap * 1e-6, k as usize))
    }
}

impl LiveMetrics {
    /// An exporter whose every series carries `labels` (model, API, tag, shard).
    pub fn new(labels: Vec<(String, String)>) -> LiveMetrics {
        let labels = labels
            .into_iter()
            .map(|(k, v)| (Cow::Owned(k), Cow::Owned(v)));
        let mut registry = Registry::with_prefix_and_labels("tokenscope", labels);
        let m = LiveMetrics {
            requests: Family::default(),
            tokens: Family::default(),
            ttft: Family::new_with_constructor(latency),
            answer_start: Family::new_with_constructor(latency),
            tpot: Family::new_with_constructor(per_token),
            itl: Family::new_with_constructor(per_token),
            e2e: Family::new_with_constructor(latency),
            send_lag: Family::new_with_constructor(latency),
            in_flight: Family::default(),
            good: Family::default(),
            server: Family::default(),
            window: Family::default(),
            loop_delay: Family::default(),
            running: Mutex::new(Vec::new()),
            registry: Registry::default(),
        };
        registry.register(
            "requests",
            "Finished requests, by outcome (ok, or the error kind)",
            m.requests.clone(),
        );
        registry.register(
            "tokens",
            "Tokens, input (prompt) and output",
            m.tokens.clone(),
        );
        let seconds = [
            (
                "ttft",
                "Time to first token (send to first generated token)",
                &m.ttft,
            ),
            (
                "answer_start",
                "Time to the answer's first token, after any reasoning",
                &m.answer_start,
            ),
            (
                "tpot",
                "Time per output token after the first, per request",
                &m.tpot,
            ),
            (
                "itl",
                "Gap between streamed tokens (a chunk's gap over its tokens)",
                &m.itl,
            ),
            ("e2e", "Request latency, send to last byte", &m.e2e),
            (
                "send_lag",
                "How late a request left after its intended start (client lag)",
                &m.send_lag,
            ),
        ];
        for (name, help, family) in seconds {
            registry.register_with_unit(name, help, Unit::Seconds, family.clone());
        }
        registry.register("in_flight", "Requests in flight now", m.in_flight.clone());
        registry.register(
            "slo_good_requests",
            "Finished requests that met every per-request objective of --slo (goodput)",
            m.good.clone(),
        );
        registry.register(
            "server",
            "The server's own figures over watch's window (by figure: running, waiting, kv_usage, requests_per_second, generation_tokens_per_second, ttft_p99_seconds, queue_time_p99_seconds, gpu_util, preemptions)",
            m.server.clone(),
        );
        registry.register_with_unit(
            "loop_delay",
            "The client's event-loop delay, the worst of the latest second: a read arriving then waited this long (its figures may be that far off)",
            Unit::Seconds,
            m.loop_delay.clone(),
        );
        registry.register(
            "window",
            "The last closed window of --windows (by figure: ttft_p50_seconds, ttft_p99_seconds, tpot_p50_seconds, tpot_p99_seconds, itl_p99_seconds, e2e_p99_seconds, requests_per_second, output_tokens_per_second, error_ratio, slo_met): rolling percentiles, exact over the window",
            m.window.clone(),
        );
        LiveMetrics { registry, ..m }
    }

    /// Run `run`'s window `w` has closed: its figures replace the last's.
    pub fn window(&self, run: &str, w: &tokenscope_core::windows::WindowSummary) {
        let s = |q: Option<tokenscope_core::windows::Quantiles>, p: fn(&_) -> f64| {
            q.map(|q| p(&q) * 1e-3)
        };
        let figures = [
            ("ttft_p50_seconds", s(w.ttft_ms, |q| q.p50)),
            ("ttft_p99_seconds", s(w.ttft_ms, |q| q.p99)),
            ("tpot_p50_seconds", s(w.tpot_ms, |q| q.p50)),
            ("tpot_p99_seconds", s(w.tpot_ms, |q| q.p99)),
            ("itl_p99_seconds", s(w.itl_ms, |q| q.p99)),
            ("e2e_p99_seconds", s(w.e2e_ms, |q| q.p99)),
            ("requests_per_second", Some(w.requests_per_s)),
            ("output_tokens_per_second", Some(w.output_tokens_per_s)),
            (
                "error_ratio",
                (w.requests > 0).then(|| w.failed as f64 / w.requests as f64),
            ),
            (
                "slo_met",
                match w.slo {
                    Some(tokenscope_core::slo::Verdict::Met) => Some(1.0),
                    Some(tokenscope_core::slo::Verdict::NotMet) => Some(0.0),
                    _ => None,
                },
            ),
        ];
        for (name, value) in figures {
            let key = WindowFigure {
                run: run.into(),
                figure: name.into(),
            };
            match value {
                Some(v) => {
                    self.window.get_or_create(&key).set(v);
                }
                // An empty window has no percentiles: the series is dropped, not zeroed.
                None => drop(self.window.remove(&key)),
            }
        }
    }

    /// Takes one finished record of run `run`, judged by the run's `slo`
    /// (warm-up left out, as the results leave it).
    pub fn observe(&self, run: &str, slo: Option<&Slo>, r: &RequestRecord) {
        let Some(seen) = Seen::of(r) else { return };
        let labels = RunLabels { run: run.into() };
        let outcome = Outcome {
            run: run.into(),
            outcome: seen.outcome.clone(),
        };
        self.requests.get_or_create(&outcome).inc();
        for (kind, n) in [
            ("output", r.output_tokens),
            ("input", r.input_tokens.unwrap_or(0)),
        ] {
            let key = TokenKind {
                run: run.into(),
                kind: kind.into(),
            };
            self.tokens.get_or_create(&key).inc_by(n);
        }
        self.send_lag
            .get_or_create(&labels)
            .observe(seen.send_lag_s);
        if let Some(slo) = slo {
            let good = u64::from(slo.request_is_good(r));
            self.good.get_or_create(&labels).inc_by(good);
        }
        let Some(ok) = &seen.ok else { return };
        self.e2e.get_or_create(&labels).observe(seen.e2e_s);
        let timed = [
            (&self.ttft, ok.ttft_s),
            (&self.answer_start, ok.answer_start_s),
            (&self.tpot, ok.tpot_s),
        ];
        for (family, value) in timed {
            if let Some(v) = value {
                family.get_or_create(&labels).observe(v);
            }
        }
        let itl = self.itl.get_or_create(&labels);
        Seen::itl_s(r).for_each(|gap| itl.observe(gap));
    }

    /// `watch`'s latest look at the server: each figure it has, set; one
    /// it has not is left out (missing, not zero).
    pub fn server_figures(&self, f: &ServerFigures) {
        let figures = [
            ("running", f.running),
            ("waiting", f.waiting),
            ("kv_usage", f.kv_usage),
            ("requests_per_second", f.requests_per_s),
            ("generation_tokens_per_second", f.generation_tokens_per_s),
            ("ttft_p99_seconds", f.ttft_p99_s),
            ("queue_time_p99_seconds", f.queue_time_p99_s),
            ("gpu_util", f.gpu_util),
            ("preemptions", f.preemptions),
            ("spec_decode_acceptance", f.spec_acceptance),
        ];
        for (name, value) in figures {
            if let Some(v) = value {
                let key = ServerFigure {
                    figure: name.into(),
                };
                self.server.get_or_create(&key).set(v);
            }
        }
    }

    /// Run `run` has started: each scrape reads `sources` now.
    pub fn started(&self, run: &str, sources: RunSources) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|(r, _)| r != run);
        running.push((run.to_string(), sources));
    }

    /// Run `run` is over: nothing of it is in flight.
    pub fn ended(&self, run: &str) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|(r, _)| r != run);
        self.in_flight
            .get_or_create(&RunLabels { run: run.into() })
            .set(0);
    }

    /// The exposition, the in-flight gauges read now.
    pub fn encode(&self) -> String {
        self.refresh_in_flight();
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// What the runs in progress show now: requests in flight, the
    /// loop's delay, the server's latest scrape.
    fn refresh_in_flight(&self) {
        for (run, s) in self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let labels = RunLabels { run: run.clone() };
            let sent = s.progress.sent.load(Ordering::Relaxed) as i64;
            let done = s.progress.finished.load(Ordering::Relaxed) as i64;
            self.in_flight
                .get_or_create(&labels)
                .set((sent - done).max(0));
            let worst = s
                .loop_delay
                .as_ref()
                .and_then(|d| d.lock().ok()?.latest_worst_us());
            if let Some(us) = worst {
                self.loop_delay.get_or_create(&labels).set(us as f64 * 1e-6);
            }
            let latest = s.server.as_ref().and_then(|l| l.lock().ok()?.clone());
            if let Some(sample) = latest.filter(|x| x.error.is_none()) {
                self.server_figures(&ServerFigures::of_sample(&sample));
            }
        }
    }

    /// The same, as Prometheus's length-delimited protobuf (with the
    /// histograms' native buckets).
    pub fn encode_protobuf(&self) -> Result<Vec<u8>, String> {
        self.refresh_in_flight();
        prometheus_client::encoding::prometheus_protobuf::encode_to_vec(&self.registry)
            .map_err(|e| e.to_string())
    }
}

/// The process's exporter, once started, and where it listens.
static EXPORTER: OnceLock<(SocketAddr, Arc<LiveMetrics>)> = OnceLock::new();

/// The exporter on `addr`, started on first use (its labels are the first
/// run's); a later run asking for another address is refused.
pub fn exporter(
    addr: SocketAddr,
    labels: Vec<(String, String)>,
) -> anyhow::Result<Arc<LiveMetrics>> {
    if let Some((at, m)) = EXPORTER.get() {
        return match *at == addr {
            true => Ok(m.clone()),
            false => Err(crate::exit::Exit::usage(format!(
                "--serve-metrics {addr}: this process already serves its metrics on {at}"
            ))),
        };
    }
    let metrics = Arc::new(LiveMetrics::new(labels));
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        crate::exit::Exit::usage(format!("--serve-metrics {addr}: cannot listen there: {e}"))
    })?;
    listener.set_nonblocking(true)?;
    let served = metrics.clone();
    std::thread::Builder::new()
        .name("ts-metrics".into())
        .spawn(move || serve(listener, served))?;
    let _ = EXPORTER.set((addr, metrics.clone()));
    Ok(metrics)
}

/// `GET /metrics` on a runtime of its own, until the process ends.
fn serve(listener: std::net::TcpListener, metrics: Arc<LiveMetrics>) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(async move {
        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
            return;
        };
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move |headers: axum::http::HeaderMap| {
                let m = metrics.clone();
                async move { exposition(&m, &headers) }
            }),
        );
        let _ = axum::serve(listener, app).await;
    });
}

/// Prometheus's protobuf exposition, which carries native histograms.
pub const PROTOBUF: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The exposition the scraper asked for: protobuf (native histograms)
/// when its Accept header names it, else OpenMetrics text.
fn exposition(m: &LiveMetrics, headers: &axum::http::HeaderMap) -> axum::response::Response {
    use axum::http::header::{ACCEPT, CONTENT_TYPE};
    use axum::response::IntoResponse;
    let accept = headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("application/vnd.google.protobuf") {
        if let Ok(body) = m.encode_protobuf() {
            return ([(CONTENT_TYPE, PROTOBUF)], body).into_response();
        }
    }
    let text = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(CONTENT_TYPE, text)], m.encode()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscope_core::windows::{Quantiles, WindowSummary};

    fn window(ttft_p99_ms: Option<f64>) -> WindowSummary {
        let q = ttft_p99_ms.map(|p99| Quantiles {
            count: 10,
            mean: 100.0,
            p50: 90.0,
            p90: 120.0,
            p99,
            max: p99,
        });
        WindowSummary {
            window: 3,
            start_s: 180.0,
            end_s: 240.0,
            partial: false,
            requests: 12,
            succeeded: 10,
            failed: 2,
            errors: Default::default(),
            output_tokens: 600,
            requests_per_s: 10.0 / 60.0,
            output_tokens_per_s: 10.0,
            good_requests: None,
            slo: None,
            ttft_ms: q,
            tpot_ms: None,
            itl_ms: None,
            e2e_ms: None,
        }
    }

    #[test]
    fn each_closed_window_sets_the_rolling_gauges_and_an_empty_one_drops_them() {
        let m = LiveMetrics::new(vec![]);
        m.window("r1", &window(Some(250.0)));
        let text = m.encode();
        let line = |figure: &str| {
            let key = format!("tokenscope_window{{run=\"r1\",figure=\"{figure}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&key))
                .map(|v| v.parse::<f64>().unwrap())
        };
        assert_eq!(line("ttft_p99_seconds"), Some(0.25));
        assert_eq!(line("output_tokens_per_second"), Some(10.0));
        assert_eq!(line("error_ratio"), Some(2.0 / 12.0));
        assert_eq!(line("tpot_p99_seconds"), None, "no TPOT: no series");
        m.window("r1", &window(None));
        let text = m.encode();
        assert!(!text.contains("figure=\"ttft_p99_seconds\""), "{text}");
    }
}
