//! The exact server: an OpenAI-compatible streaming server whose timing is
//! known, so measurements can be checked against the truth.
//!
//! For a request of n output tokens, token i (0-based) is ready at
//! `arrival + ttft + i × itl`; a chunk of k tokens leaves when its last token is
//! ready. Each token is one word that is one token in cl100k. Usage counts
//! prompt tokens as whitespace-separated words (tokenscope's synthetic prompts
//! are one token per word). Faults are drawn per request from a seeded hash of
//! its arrival index, so a run's mix is reproducible.

use crate::answers::InFlight;
use crate::faults::{pick_fault, uniform, Fault, Faults};
use crate::http::{bad_request, injected_status, parse_body};
use crate::openai::{Ask, Dialect, Writer};
use crate::pooling::Pooled;
use crate::timer::sleep_until;
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use tokenscope_core::stats::Distribution;

#[derive(Debug, Clone)]
pub struct ExactConfig {
    pub model: String,
    pub ttft: Duration,
    /// Time between successive tokens.
    pub itl: Duration,
    pub tokens_per_chunk: u32,
    /// Output length when the request sets no `max_tokens`.
    pub default_output_tokens: u64,
    pub faults: Faults,
    pub stall: Duration,
    pub seed: u64,
    /// The first this many tokens of every answer are reasoning (counted in
    /// its length, as servers count them), shown as `reasoning_as` says.
    pub reasoning_tokens: u64,
    pub reasoning_as: ReasoningAs,
    /// Keep the first this many request bodies (for tests: what a client sent).
    pub keep_bodies: usize,
    /// Requests served at once (`None`: all of them). A request beyond
    /// them waits, first come first served, and its TTFT counts the wait:
    /// with constant arrivals the server keeps up with exactly
    /// `slots ÷ (ttft + (tokens − 1) × itl)` requests a second, a capacity
    /// known before it is measured.
    pub slots: Option<u32>,
}

pub use crate::openai::ReasoningAs;

impl Default for ExactConfig {
    fn default() -> Self {
        ExactConfig {
            model: "tokenscope-exact".into(),
            ttft: Duration::from_millis(100),
            itl: Duration::from_millis(20),
            tokens_per_chunk: 1,
            default_output_tokens: 128,
            faults: Faults::default(),
            stall: Duration::from_secs(5),
            seed: 0,
            reasoning_tokens: 0,
            reasoning_as: ReasoningAs::Field,
            keep_bodies: 0,
            slots: None,
        }
    }
}

/// Counters a test can read to know what the server did.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub requests: AtomicU64,
    /// Streams that reached `[DONE]` (non-streaming answers not counted).
    pub completed_streams: AtomicU64,
    /// How late chunks left compared with their due time, in µs: the server's
    /// own share of any timing error a client measures. Merged per stream.
    pub lateness_us: std::sync::Mutex<Option<hdrhistogram::Histogram<u64>>>,
    /// Requests by the `model` they named (a LoRA run's adapters).
    pub models: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// JSON answers sent broken (`--bad-json`).
    pub broken_json: AtomicU64,
    /// Answers that were tool calls, and those with broken arguments.
    pub tool_calls: AtomicU64,
    pub broken_tool_args: AtomicU64,
    /// Questions with a known answer, and those answered wrong.
    pub graded: AtomicU64,
    pub wrong_answers: AtomicU64,
    /// Answers changed for the load (`--diverge-above`).
    pub diverged: AtomicU64,
    /// Requests whose conversation ended with tool results.
    pub after_tool_results: AtomicU64,
    /// Requests in flight now.
    pub in_flight: Arc<AtomicU64>,
    /// The first `keep_bodies` request bodies, in arrival order.
    pub bodies: std::sync::Mutex<Vec<Value>>,
    /// Images received, by their size read from their headers (`640x480`).
    pub images: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Each request's `X-Request-Id` and `traceparent`, as received.
    pub ids: Arc<crate::http::SeenIds>,
    /// The speech requests' own stamps (`GET /speech-log`).
    pub speech: Arc<crate::speech::SpeechLog>,
}

impl ServerStats {
    /// The images one request carried.
    fn saw_images(&self, sizes: &[(u32, u32)]) {
        let mut m = self.images.lock().unwrap_or_else(|p| p.into_inner());
        for (w, h) in sizes {
            *m.entry(format!("{w}x{h}")).or_insert(0) += 1;
        }
    }

    /// One more request naming `model`.
    fn named(&self, model: Option<&str>) {
        let mut m = self.models.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(model.unwrap_or("").to_string()).or_insert(0) += 1;
    }

    /// What was done to one answer, counted.
    fn shaped(&self, done: crate::answers::Shaped) {
        let add = |c: &AtomicU64, yes: bool| {
            c.fetch_add(u64::from(yes), Ordering::Relaxed);
        };
        add(&self.broken_json, done.broken_json);
        add(&self.tool_calls, done.tool_call);
        add(&self.broken_tool_args, done.broken_args);
        add(&self.graded, done.graded);
        add(&self.wrong_answers, done.wrong);
        add(&self.diverged, done.diverged);
        add(&self.after_tool_results, done.after_tools);
    }

    fn add_lateness(&self, h: &hdrhistogram::Histogram<u64>) {
        let mut all = self.lateness_us.lock().unwrap_or_else(|p| p.into_inner());
        match all.as_mut() {
            Some(a) => {
                let _ = a.add(h);
            }
            None => *all = Some(h.clone()),
        }
    }

    /// `{requests, completed_streams, lateness_us: {count, p50, p99, p999, max}}`;
    /// `reset` clears the lateness histogram afterwards.
    pub fn snapshot(&self, reset: bool) -> Value {
        let mut all = self.lateness_us.lock().unwrap_or_else(|p| p.into_inner());
        let lateness = all.as_ref().map(|h| {
            json!({"count": h.len(), "p50": h.value_at_quantile(0.5), "p99": h.value_at_quantile(0.99),
                   "p999": h.value_at_quantile(0.999), "max": h.max()})
        });
        if reset {
            *all = None;
        }
        json!({
            "requests": self.requests.load(Ordering::Relaxed),
            "completed_streams": self.completed_streams.load(Ordering::Relaxed),
            "lateness_us": lateness,
            "models": *self.models.lock().unwrap_or_else(|p| p.into_inner()),
            "broken_json": self.broken_json.load(Ordering::Relaxed),
            "tool_calls": self.tool_calls.load(Ordering::Relaxed),
            "broken_tool_args": self.broken_tool_args.load(Ordering::Relaxed),
            "graded": self.graded.load(Ordering::Relaxed),
            "wrong_answers": self.wrong_answers.load(Ordering::Relaxed),
            "diverged": self.diverged.load(Ordering::Relaxed),
            "after_tool_results": self.after_tool_results.load(Ordering::Relaxed),
            "images": *self.images.lock().unwrap_or_else(|p| p.into_inner()),
        })
    }
}

struct Shared {
    config: ExactConfig,
    /// One permit a slot, with `slots`.
    slots: Option<Arc<tokio::sync::Semaphore>>,
    model_json: String,
    stats: Arc<ServerStats>,
}

/// A running exact server; dropping it does not stop it, [`ExactServer::shutdown`] does.
pub struct ExactServer {
    pub addr: SocketAddr,
    pub stats: Arc<ServerStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl ExactServer {
    /// Binds `addr` (port 0 for a free one) and serves on the current runtime.
    pub async fn start(addr: SocketAddr, config: ExactConfig) -> std::io::Result<ExactServer> {
        let listener = crate::http::listen(addr)?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(ServerStats::default());
        let shared = Arc::new(Shared {
            model_json: serde_json::to_string(&config.model).expect("a string serializes"),
            slots: config
                .slots
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n.max(1) as usize))),
            config,
            stats: stats.clone(),
        });
        let api =
            crate::http::log_request_ids(crate::http::api_routes(respond, pool), stats.ids.clone());
        let app = api
            .route("/v1/models", get(models))
            .route("/request-ids", get(request_ids))
            .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
            .route("/stats", get(stats_handler))
            .with_state(shared.clone());
        let timed = crate::speech::Timed {
            ttft: shared.config.ttft,
            itl: shared.config.itl,
            slots: shared.slots.clone(),
        };
        let speech =
            crate::speech::routes(Arc::new(timed), &shared.config.model, stats.speech.clone());
        let app = app.merge(crate::http::log_request_ids(speech, stats.ids.clone()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            crate::http::serve(listener, app, stopped).await;
        });
        Ok(ExactServer {
            addr,
            stats,
            stop: Some(stop),
            task,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets open streams finish, and waits.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }

    /// Stops at once, cutting open streams.
    pub fn abort(self) {
        self.task.abort();
    }
}

/// `GET /stats[?reset]`: what the server did and how late it was.
async fn stats_handler(State(s): State<Arc<Shared>>, uri: axum::http::Uri) -> Response {
    let reset = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "reset"));
    Json(s.stats.snapshot(reset)).into_response()
}

/// `GET /request-ids`: the ids of the requests received, in arrival order
/// (the first [`crate::http::SeenIds::KEPT`]).
async fn request_ids(State(s): State<Arc<Shared>>) -> Response {
    Json(json!({"count": s.stats.ids.count(), "kept": s.stats.ids.kept()})).into_response()
}

async fn models(State(s): State<Arc<Shared>>) -> Response {
    let body = format!(
        r#"{{"object":"list","data":[{{"id":{},"object":"model","owned_by":"tokenscope"}}]}}"#,
        s.model_json
    );
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn respond(s: Arc<Shared>, body: Bytes, dialect: Dialect) -> Response {
    let body = match parse_body(&body) {
        Ok(b) => b,
        Err(msg) => return bad_request(&msg),
    };
    let ask = Ask::read(&body, dialect);
    let arrival = Instant::now();
    {
        let mut kept = s.stats.bodies.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < s.config.keep_bodies {
            kept.push(body.clone());
        }
    }
    let n = s.stats.requests.fetch_add(1, Ordering::Relaxed);
    let in_flight = InFlight::enter(&s.stats.in_flight);
    s.stats.named(body["model"].as_str());
    if ask.media_tokens > 0 {
        s.stats.saw_images(&crate::vision::count(&body).images);
    }
    let cfg = &s.config;
    let fault = pick_fault(&cfg.faults, uniform(cfg.seed, n));
    if let Fault::Status(code) = fault {
        return injected_status(code);
    }
    // A request waits here for a slot: its tokens are timed from then.
    let slot = match &s.slots {
        Some(slots) => Some(slots.clone().acquire_owned().await.expect("never closed")),
        None => None,
    };
    let mut plan = Plan {
        started: Instant::now(),
        _slot: slot,
        writer: Writer::new(dialect, "exact", n, &s.model_json, ask.prompt_tokens).asked(&ask),
        shared: s.clone(),
        arrival,
        tokens: ask.max_tokens.unwrap_or(cfg.default_output_tokens).max(1),
        usage_at_end: ask.include_usage,
        usage_per_chunk: ask.continuous_usage,
        fault,
        lateness: hdrhistogram::Histogram::new(3).expect("valid precision"),
        first_sent: None,
        answer_sent: None,
        last_sent: arrival,
        in_flight,
    };
    let reasoning = plan.reasoning();
    plan.writer.set_reasoning(reasoning, cfg.reasoning_as);
    let context = crate::answers::Context {
        body: &body,
        ask: &ask,
        dialect,
        faults: &cfg.faults,
        seed: cfg.seed,
        n,
        tokens: plan.tokens,
        reasoning,
        in_flight: plan.in_flight.at_arrival,
    };
    s.stats
        .shaped(crate::answers::shape(&mut plan.writer, &context));
    if !ask.stream {
        return plan.whole().await.into_response();
    }
    let body = Body::from_stream(futures_util::stream::unfold(
        (plan, 0u64),
        |(mut plan, step)| async move {
            let item = plan.step(step).await?;
            Some((item, (plan, step + 1)))
        },
    ));
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .expect("a valid response")
}

/// An embeddings or rerank request: its answer after the TTFT (the
/// prefill it stands for), whatever its size — the ground truth a pooling
/// run's latency is checked against.
async fn pool(s: Arc<Shared>, body: Bytes, kind: Pooled) -> Response {
    let arrival = Instant::now();
    let body = match parse_body(&body) {
        Ok(b) => b,
        Err(msg) => return bad_request(&msg),
    };
    let n = s.stats.requests.fetch_add(1, Ordering::Relaxed);
    let cfg = &s.config;
    let fault = pick_fault(&cfg.faults, uniform(cfg.seed, n));
    if let Fault::Status(code) = fault {
        return injected_status(code);
    }
    let seqs = match kind.sequences(&body) {
        Ok(seqs) => seqs,
        Err(msg) => return bad_request(&msg),
    };
    sleep_until(arrival + cfg.ttft).await;
    if matches!(fault, Fault::Malformed) {
        // An answer cut in the middle of its JSON.
        return (
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"data":[{"embedding":["#,
        )
            .into_response();
    }
    let mut answer = kind.answer(&body, &cfg.model, &seqs);
    let mono = tokenscope_core::clock::monotonic_us;
    // Its send on the host's shared clock: the answer is written as this returns.
    answer["timings"] = json!({
        "arrived_mono_us": mono(arrival),
        "last_sent_mono_us": mono(Instant::now()),
    });
    Json(answer).into_response()
}

/// One response, step by step: 0 = role chunk (chat), 1..=chunks = content,
/// then finish, usage, `[DONE]`.
struct Plan {
    shared: Arc<Shared>,
    writer: Writer,
    arrival: Instant,
    /// When its slot was free (its arrival without `slots`): its tokens are due from here.
    started: Instant,
    /// Held until the answer is done with.
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
    tokens: u64,
    usage_at_end: bool,
    usage_per_chunk: bool,
    fault: Fault,
    /// This stream's chunk lateness, merged into the server's at `[DONE]`.
    lateness: hdrhistogram::Histogram<u64>,
    /// When the first and the latest content chunks were handed to the connection.
    first_sent: Option<Instant>,
    /// When the first answer (not reasoning) chunk was.
    answer_sent: Option<Instant>,
    last_sent: Instant,
    /// Counted in flight until the answer is done with.
    in_flight: InFlight,
}

impl Plan {
    fn chunks(&self) -> u64 {
        let k = self.shared.config.tokens_per_chunk.max(1) as u64;
        self.tokens.div_ceil(k)
    }

    /// Reasoning tokens of this answer (at most all of it: a spent budget).
    fn reasoning(&self) -> u64 {
        self.shared.config.reasoning_tokens.min(self.tokens)
    }

    /// Tokens the stream carries: all but hidden reasoning.
    fn streamed_tokens(&self) -> u64 {
        match self.shared.config.reasoning_as {
            ReasoningAs::Hidden => self.tokens - self.reasoning(),
            _ => self.tokens,
        }
    }

    /// Chunks never streamed: whole chunks of hidden reasoning.
    fn hidden_chunks(&self) -> u64 {
        let cfg = &self.shared.config;
        match cfg.reasoning_as {
            ReasoningAs::Hidden => self.reasoning() / cfg.tokens_per_chunk.max(1) as u64,
            _ => 0,
        }
    }

    /// Chunk `j`'s frame: tokens `from..to`, the reasoning among them as
    /// the server shows it (hidden chunks are never asked for).
    fn frame(&self, from: u64, to: u64) -> Bytes {
        let usage = self.usage_per_chunk.then_some(to);
        self.writer.tokens(from, to, usage).unwrap_or_default()
    }

    /// When the last token of chunk `j` (0-based) is ready.
    fn chunk_ready(&self, j: u64) -> Instant {
        let cfg = &self.shared.config;
        let k = cfg.tokens_per_chunk.max(1) as u64;
        let last = ((j + 1) * k).min(self.tokens) - 1;
        self.started + cfg.ttft + cfg.itl * last as u32
    }

    async fn step(&mut self, step: u64) -> Option<Result<Bytes, std::io::Error>> {
        let chunks = self.chunks();
        let k = self.shared.config.tokens_per_chunk.max(1) as u64;
        if step == 0 {
            // The role arrives at once, before any token: it must not start TTFT.
            return Some(Ok(self.writer.role().unwrap_or_default()));
        }
        let hidden = self.hidden_chunks();
        if step <= chunks - hidden {
            let j = step - 1 + hidden;
            if j == chunks / 2 {
                match self.fault {
                    Fault::Disconnect => {
                        return Some(Err(std::io::Error::other("injected disconnect")));
                    }
                    Fault::Malformed => return Some(Ok(Writer::malformed())),
                    Fault::Stall => tokio::time::sleep(self.shared.config.stall).await,
                    _ => {}
                }
            }
            let due = self.chunk_ready(j);
            sleep_until(due).await;
            let late = Instant::now().saturating_duration_since(due).as_micros() as u64;
            let _ = self.lateness.record(late);
            let last = ((j + 1) * k).min(self.tokens);
            let frame = self.frame(j * k, last);
            let now = Instant::now();
            self.first_sent.get_or_insert(now);
            if last > self.reasoning() {
                self.answer_sent.get_or_insert(now);
            }
            self.last_sent = now;
            return Some(Ok(frame));
        }
        let chunks = chunks - hidden;
        match step - chunks {
            1 => {
                // Hidden reasoning may have been all of it: the generation
                // still takes its time before the finish.
                sleep_until(self.chunk_ready(self.chunks() - 1)).await;
                // What the server actually did, in the manner of llama.cpp's
                // `timings`: a loaded machine can make it differ from the config.
                let first = self.first_sent.unwrap_or(self.arrival);
                let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
                let mono = tokenscope_core::clock::monotonic_us;
                let timings = json!({
                    "ttft_ms": ms(first - self.arrival),
                    "tpot_ms": ms(self.last_sent - first) / (self.streamed_tokens().max(2) - 1) as f64,
                    // The same instants on the host's shared clock, so a
                    // client on this machine can tell its own delay (reading)
                    // from the server's (accepting, queueing) per request.
                    "arrived_mono_us": mono(self.arrival),
                    "first_sent_mono_us": mono(first),
                    "last_sent_mono_us": mono(self.last_sent),
                    "answer_sent_mono_us": self.answer_sent.and_then(mono),
                    "reasoning_tokens": self.reasoning(),
                });
                Some(Ok(self.writer.finish(&timings, self.tokens)))
            }
            2 if self.usage_at_end => Some(Ok(self.writer.usage(self.tokens))),
            2 | 3 => {
                if step - chunks == 3 && !self.usage_at_end {
                    return None;
                }
                self.shared
                    .stats
                    .completed_streams
                    .fetch_add(1, Ordering::Relaxed);
                self.shared.stats.add_lateness(&self.lateness);
                self.writer.done().map(Ok)
            }
            _ => None,
        }
    }

    async fn whole(&self) -> impl IntoResponse {
        sleep_until(self.chunk_ready(self.chunks().saturating_sub(1))).await;
        let model = &self.shared.config.model;
        Json(self.writer.whole(self.tokens, model))
    }
}

/// The client's error against this server's own times, per request (µs, by
/// size). Requests without the server's timings (failed, or another server)
/// are skipped.
#[derive(Debug, Default)]
pub struct ServerErrors {
    /// Client TTFT − the server's `timings.ttft_ms` (arrival at its handler →
    /// first token handed to the socket): the client's delays plus the
    /// server's own accept queue, which its TTFT does not count.
    pub ttft: Distribution,
    /// Client TPOT − the server's `timings.tpot_ms`.
    pub tpot: Distribution,
    /// On the host's shared clock (a client on the server's machine):
    /// the client's read stamp of the first token − the server's send of it.
    /// This is the client's own share of its TTFT error.
    pub first_read_delay: Distribution,
    /// The same for the last token: the client's share of its E2E error.
    pub last_read_delay: Distribution,
    /// The server's handler arrival − the client's send stamp: the kernel
    /// and the server's accept/parse queue, i.e. the server's time, inside
    /// TTFT but outside the server's own `ttft_ms`.
    pub server_queue: Distribution,
}

/// [`ServerErrors`] of a run's records; `origin_mono_us` is the run's clock
/// origin on the host's `CLOCK_MONOTONIC` (`client.monotonic_origin_us`),
/// without which only the TTFT and TPOT differences are measured.
pub fn errors_against_server<'a>(
    records: impl IntoIterator<Item = &'a tokenscope_core::record::RequestRecord>,
    origin_mono_us: Option<u64>,
) -> ServerErrors {
    let mut e = ServerErrors::default();
    let ms = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
    for r in records.into_iter().filter(|r| r.succeeded()) {
        let Some(t) = &r.server_timings else { continue };
        if let (Some(client), Some(server)) = (r.ttft_us(), ms(t, "ttft_ms")) {
            record_size(&mut e.ttft, client as f64 - server * 1e3);
        }
        if let (Some(client), Some(server)) = (r.tpot_us(), ms(t, "tpot_ms")) {
            record_size(&mut e.tpot, client - server * 1e3);
        }
        let Some(origin) = origin_mono_us else {
            continue;
        };
        let shared = |k: &str| ms(t, k).map(|us| us - origin as f64);
        if let (Some(read), Some(sent)) = (r.first_token_at_us, shared("first_sent_mono_us")) {
            record_size(&mut e.first_read_delay, read as f64 - sent);
        }
        if let (Some(read), Some(sent)) = (r.last_token_at_us(), shared("last_sent_mono_us")) {
            record_size(&mut e.last_read_delay, read as f64 - sent);
        }
        if let Some(arrived) = shared("arrived_mono_us") {
            record_size(&mut e.server_queue, arrived - r.sent_at_us as f64);
        }
    }
    e
}

/// The size of an error. TTFT's cannot be below zero (the client stamps
/// before the server receives and after it sends), nor can a read delay or
/// the queue, but the two clocks' readings are µs apart; TPOT's can (a first
/// token read late shortens the client's span), and counts by its size.
fn record_size(d: &mut Distribution, us: f64) {
    d.record(us.abs());
}
