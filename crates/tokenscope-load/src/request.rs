//! One streaming request, timed per network read.
//!
//! The per-token path is: read bytes → stamp the clock → SSE parse → borrow-parse
//! the chunk JSON → push `(instant, bytes)`. Token counts per chunk are settled
//! once the stream ends, from the server's usage when it has one.

use crate::http1::{Body, Conn, Head, HttpError};
use crate::protocol::{Piece, Protocol, Reasoner, ReasoningParser, Request, Shape, Usage};
use crate::sse::SseParser;
use crate::tools::{merge, CallSoFar, ToolUse};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokenscope_core::clock::Clock;
use tokenscope_core::record::{Chunk, ErrorKind, RequestRecord, TokenSource};
use tokenscope_workload::session::Exchange;
use tokenscope_workload::tokenizer;
use tokenscope_workload::workload::PromptSpec;
use tokio::time::{timeout_at, Instant};
use tokio_util::sync::CancellationToken;

/// A kept-alive connection that the server closed while it sat in the pool
/// fails the next request sent on it before any response. Servers do this
/// (llama.cpp's closes after every stream although it answers `Keep-Alive`),
/// so, like browsers and Go's net/http, such a request is sent again on a fresh
/// connection. Only this failure is retried, and at most this often.
const MAX_STALE_RETRIES: u32 = 2;

/// The largest whole answer (`--no-stream`) kept; the rest is read and dropped.
const MAX_WHOLE_ANSWER: usize = 256 << 20;

/// Everything a request needs that is the same for the whole run.
#[derive(Debug, Clone)]
pub struct Target {
    /// The endpoint (`…/v1/chat/completions` or `…/v1/completions`), the
    /// run's headers (`Authorization` among them) and the kept-alive connections.
    pub http: std::sync::Arc<crate::http1::Client>,
    /// The API: how the body is written and the answer read.
    pub api: &'static dyn Protocol,
    pub model: String,
    pub ignore_eos: bool,
    /// `false` (`--no-stream`): whole answers, timed end to end only.
    pub stream: bool,
    /// System prompt, temperature and extra body fields of every request.
    pub shape: Shape,
    /// Where reasoning is recognised (`--reasoning-parser`).
    pub reasoning: ReasoningParser,
    /// A pooling API's inputs per request besides the prompt (from
    /// `--batch-size`); 0 for the generating APIs.
    pub documents: u64,
    /// `--response-format`: every successful answer is checked.
    pub check: Option<std::sync::Arc<crate::structured::AnswerCheck>>,
    /// `--tools` (or a dataset's): what is offered, and every call checked.
    pub tools: Option<std::sync::Arc<crate::tools::ToolUse>>,
    /// `--grade`: answers with an `expected` are graded.
    pub grade: Option<std::sync::Arc<crate::grading::Grade>>,
    /// `--keep-text`: each record keeps its answer's text.
    pub keep_text: bool,
    /// `--lora`: each request names its adapter as its model.
    pub adapters: Option<std::sync::Arc<tokenscope_workload::adapters::Adapters>>,
    /// Longest a whole request may take.
    pub timeout: Duration,
    /// Longest to wait for the response head or the next read of the stream.
    pub idle_timeout: Duration,
}

/// Who a request is, apart from its prompt.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    pub id: u64,
    pub scheduled_at_us: u64,
    pub warmup: bool,
    pub waited_for_slot: bool,
    /// Multi-turn: (session, turn).
    pub turn: Option<(u64, u32)>,
}

/// The state of one stream while it is read.
struct Stream {
    api: &'static dyn Protocol,
    /// `(arrival, text bytes)`; the bytes become token counts at the end.
    chunks: Vec<Chunk>,
    /// Per-chunk cumulative completion tokens, when the server sends usage on every chunk.
    chunk_usage: Vec<u64>,
    text: String,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    timings: Option<serde_json::Value>,
    done: bool,
    failure: Option<(ErrorKind, String)>,
    /// Sorts the generated text into reasoning and answer.
    reasoner: Reasoner,
    /// The first chunk known to carry answer text (its index in `chunks`).
    first_answer_chunk: Option<usize>,
    reasoning_bytes: u64,
    /// Chunks that carried reasoning and no answer.
    reasoning_chunks: u64,
    /// Generated tokens the events counted one by one (Triton's
    /// `num_output_tokens`), so far.
    counted_tokens: u64,
    /// Bytes of the text that were answer (after any reasoning).
    answer_bytes: usize,
    /// What the answer is checked for, once it is whole.
    judging: Judging,
    /// The tool calls, put together from their pieces.
    calls: Vec<CallSoFar>,
    /// The first chunk that carried a piece of a tool call.
    first_call_chunk: Option<usize>,
}

/// What a successful answer is checked for, and against what: the run's
/// format, tools, grade and `--keep-text`, with the request's own tools and
/// expected answer.
struct Judging {
    check: Option<Arc<crate::structured::AnswerCheck>>,
    tools: Option<(Arc<ToolUse>, Arc<Vec<serde_json::Value>>)>,
    grade: Option<(Arc<crate::grading::Grade>, String)>,
    keep_text: bool,
}

impl Judging {
    fn of(target: &Target, spec: &PromptSpec) -> Judging {
        let tools = target.tools.as_ref().map(|t| {
            let list = spec.tools.clone().unwrap_or_else(|| t.tools.clone());
            (t.clone(), list)
        });
        let grade = target.grade.clone().zip(spec.expected.clone());
        Judging {
            check: target.check.clone(),
            tools,
            grade,
            keep_text: target.keep_text,
        }
    }

    /// The checks of a whole answer, into its record: `text` the generated
    /// text, of which the last `answer_bytes` are answer (not reasoning).
    fn judge(&self, rec: &mut RequestRecord, text: &str, answer_bytes: usize, calls: &[CallSoFar]) {
        let answer = answer_of(text, answer_bytes);
        if let Some(check) = &self.check {
            let verdict = check.check(answer);
            rec.format_valid = Some(verdict.is_ok());
            rec.format_error = verdict.err();
        }
        if let Some((tools, list)) = &self.tools {
            rec.tool_calls = calls.iter().map(|c| tools.check.judge(list, c)).collect();
        }
        if let Some((grade, expected)) = &self.grade {
            rec.correct = Some(grade.right(answer, expected));
        }
        let mut said = std::borrow::Cow::Borrowed(answer);
        for c in calls {
            said.to_mut()
                .push_str(&format!("\u{1f}{}\u{1f}{}", c.name, c.arguments));
        }
        rec.answer_hash = Some(crate::grading::answer_hash(&said));
        if self.keep_text {
            rec.answer_text = Some(said.into_owned());
        }
    }
}

impl Stream {
    fn new(api: &'static dyn Protocol, reasoning: ReasoningParser, judging: Judging) -> Stream {
        Stream {
            answer_bytes: 0,
            judging,
            calls: Vec::new(),
            first_call_chunk: None,
            api,
            reasoner: Reasoner::new(reasoning),
            first_answer_chunk: None,
            reasoning_bytes: 0,
            reasoning_chunks: 0,
            counted_tokens: 0,
            chunks: Vec::new(),
            chunk_usage: Vec::new(),
            text: String::new(),
            usage: None,
            finish_reason: None,
            timings: None,
            done: false,
            failure: None,
        }
    }

    fn event(&mut self, data: &str, at_us: u64) {
        if self.done || self.failure.is_some() {
            return;
        }
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        match Piece::of_event(self.api, data, &mut self.text, &mut self.reasoner) {
            Err(e) => self.failure = Some((ErrorKind::Malformed, e.to_string())),
            Ok(info) => {
                if let Some(msg) = info.error {
                    self.failure = Some((ErrorKind::ServerError, msg));
                    return;
                }
                if let Some(n) = info.output_tokens {
                    self.counted_tokens += n;
                }
                if info.text_bytes > 0 {
                    self.chunks
                        .push(Chunk(at_us, info.text_bytes.min(u32::MAX as usize) as u32));
                    let counted = info
                        .usage
                        .and_then(|u| u.completion_tokens)
                        .or(info.output_tokens.map(|_| self.counted_tokens));
                    if let Some(c) = counted.or_else(|| generated_so_far(&info.timings)) {
                        self.chunk_usage.push(c);
                    }
                }
                self.sort(info.reasoning_bytes, info.answer_bytes);
                self.take_calls(info.calls);
                if let Some(u) = info.usage {
                    self.usage = Some(self.usage.map_or(u, |was| was.merged(u)));
                }
                if info.finish_reason.is_some() {
                    self.finish_reason = info.finish_reason;
                }
                if info.timings.is_some() {
                    self.timings = info.timings;
                }
            }
        }
    }
}

impl Stream {
    /// What of the latest chunk was reasoning and what answer.
    fn sort(&mut self, reasoning: usize, answer: usize) {
        self.answer_bytes += answer;
        if answer > 0 && self.first_answer_chunk.is_none() {
            self.first_answer_chunk = self.chunks.len().checked_sub(1);
        }
        if reasoning > 0 {
            self.reasoning_bytes += reasoning as u64;
            self.reasoning_chunks += u64::from(answer == 0);
        }
    }

    /// Pieces of tool calls the latest chunk carried: a call is generated
    /// output, so its first piece also starts the answer.
    fn take_calls(&mut self, pieces: Vec<crate::protocol::ToolCallDelta<'static>>) {
        if pieces.is_empty() {
            return;
        }
        let latest = self.chunks.len().checked_sub(1);
        self.first_call_chunk = self.first_call_chunk.or(latest);
        self.first_answer_chunk = self.first_answer_chunk.or(latest);
        pieces.into_iter().for_each(|p| merge(&mut self.calls, p));
    }

    /// The end of the stream: text held back to be told apart is sorted,
    /// as of the last chunk.
    fn finish_text(&mut self) {
        let rest = self.reasoner.finish(&mut self.text);
        self.sort(rest.reasoning, rest.answer);
    }
}

/// What media the request carries, for its record.
fn media_sent(
    media: &[std::sync::Arc<tokenscope_workload::media::Media>],
) -> Option<tokenscope_core::record::MediaSent> {
    use tokenscope_workload::media::Kind;
    if media.is_empty() {
        return None;
    }
    let count = |k: Kind| media.iter().filter(|m| m.kind == k).count() as u32;
    Some(tokenscope_core::record::MediaSent {
        images: count(Kind::Image),
        audio: count(Kind::Audio),
        video: count(Kind::Video),
        bytes: media.iter().map(|m| m.bytes).sum(),
        image_size: media
            .iter()
            .find(|m| m.kind == Kind::Image)
            .map(|m| m.label.clone()),
    })
}

/// Adds the content chunks one network read brought to the live count.
fn count_new(streamed: &AtomicU64, arrived: usize) {
    if arrived > 0 {
        streamed.fetch_add(arrived as u64, Ordering::Relaxed);
    }
}

/// Sends one request and follows its stream to the end, a failure, or
/// cancellation. Never panics; always returns a record, and the answer's
/// text (what a next turn carries). `history` is the session's earlier
/// turns (empty for a single request). `streamed` counts the content
/// chunks as they arrive (once per network read, for the live view).
pub async fn execute(
    target: &Target,
    clock: &Clock,
    ticket: Ticket,
    (spec, history): (&PromptSpec, &[Exchange]),
    cancel: &CancellationToken,
    streamed: &AtomicU64,
) -> (RequestRecord, String) {
    let adapter = target.adapters.as_ref().map(|a| a.for_request(ticket.id));
    let judging = Judging::of(target, spec);
    let (wire, items_asked) = wire_request(target, (spec, history), adapter, &judging);
    let mut rec = sent_record(&ticket, spec, adapter, &judging);
    let deadline = Instant::now() + target.timeout;
    let sent = send(target, clock, &wire, &mut rec, cancel, deadline).await;
    drop(wire);
    let (mut conn, head) = match sent {
        Ok(answer) => answer,
        Err((kind, msg)) => return fail(rec, clock, kind, msg),
    };
    // The kernel's arrival stamp where it gives one: the instant the bytes
    // reached the socket, however late this task woke to read them.
    // Never before the send: a step of the wall clock between a stamp and
    // its read would misplace the kernel's stamp by the step.
    let at = clock
        .us(conn.arrived().unwrap_or_else(std::time::Instant::now))
        .max(rec.sent_at_us);
    rec.first_byte_at_us = Some(at);
    rec.status = Some(head.status);
    let Head {
        status,
        content_type,
        location,
        mut body,
    } = head;
    let success = (200..300).contains(&status);
    if !target.stream && success {
        let answer = (conn, body, content_type);
        return whole_answer(
            rec,
            answer,
            (target, items_asked, judging),
            clock,
            cancel,
            deadline,
        )
        .await;
    }
    if let Some((kind, msg)) = refusal(
        target,
        (&mut conn, &mut body),
        status,
        content_type,
        location,
    )
    .await
    {
        return fail(rec, clock, kind, msg);
    }
    let mut stream = Stream::new(target.api, target.reasoning, judging);
    let reading = Reading {
        target,
        clock,
        cancel,
        deadline,
        streamed,
    };
    let (ended, last_at) = reading.follow(&mut conn, &mut body, &mut stream, at).await;
    // The end of the stream is the arrival of the read that ended it (the
    // kernel's stamp where there is one); a failure ends when it is seen.
    rec.done_at_us = match stream.failure {
        None => last_at,
        Some(_) => clock.now_us(),
    };
    let ended = ended || (stream.done && drained(&mut conn, &mut body).await);
    if ended && body.reusable() {
        target.http.checkin(conn);
    }
    stream.finish_text();
    settle_off_runtime(rec, stream).await
}

/// The request on the wire (the API's body under the run's headers), and
/// how many items a pooling API is asked to score.
fn wire_request(
    target: &Target,
    (spec, history): (&PromptSpec, &[Exchange]),
    adapter: Option<&str>,
    judging: &Judging,
) -> (Vec<u8>, u64) {
    let offered = judging.tools.as_ref();
    let request = Request {
        tools: offered.map_or(&[][..], |(_, list)| list.as_slice()),
        tool_choice: offered.map(|(t, _)| &t.choice),
        max_tokens: spec.max_tokens,
        ignore_eos: target.ignore_eos,
        stream: target.stream,
        documents: spec.documents.iter().map(String::as_str).collect(),
        // An empty prompt after tool results: the turn goes on from them.
        ..Request::session(
            adapter.unwrap_or(&target.model),
            &target.shape,
            history,
            (!spec.prompt.is_empty() || history.is_empty()).then_some(spec.prompt.as_str()),
        )
        .with_media(&spec.media)
    };
    let body = target.api.body(&request);
    (target.http.post(&body), target.api.items_asked(&request))
}

/// The record of a request about to be sent: who it is and what it asks.
fn sent_record(
    ticket: &Ticket,
    spec: &PromptSpec,
    adapter: Option<&str>,
    judging: &Judging,
) -> RequestRecord {
    RequestRecord {
        warmup: ticket.warmup,
        input_tokens: Some(spec.input_tokens),
        input_token_source: Some(TokenSource::Tokenizer),
        requested_input_tokens: Some(spec.input_tokens),
        requested_output_tokens: spec.max_tokens,
        waited_for_slot: ticket.waited_for_slot,
        session: ticket.turn.map(|t| t.0),
        turn: ticket.turn.map(|t| t.1),
        adapter: adapter.map(str::to_owned),
        media: media_sent(&spec.media),
        tools_offered: judging.tools.as_ref().map(|(_, list)| list.len() as u32),
        ..RequestRecord::sent(ticket.id, ticket.scheduled_at_us, 0)
    }
}

/// Sends the request and waits for the response head, stamping
/// `rec.sent_at_us` at each try. A pooled connection the server closed
/// under it is retried on a fresh one (`MAX_STALE_RETRIES`).
async fn send(
    target: &Target,
    clock: &Clock,
    wire: &[u8],
    rec: &mut RequestRecord,
    cancel: &CancellationToken,
    deadline: Instant,
) -> Result<(Conn, Head), (ErrorKind, String)> {
    loop {
        rec.sent_at_us = clock.now_us();
        // A retry (the connection was closed under it) takes a new connection.
        let fresh = rec.retries > 0;
        let attempt = async {
            let mut conn = match fresh {
                true => target.http.connect().await?,
                false => target.http.checkout().await?,
            };
            conn.send(wire).await?;
            let head = conn.head().await?;
            Ok::<_, HttpError>((conn, head))
        };
        let until = deadline.min(Instant::now() + target.idle_timeout);
        let sent = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err((ErrorKind::Cancelled, "cancelled before the response".into())),
            r = timeout_at(until, attempt) => r,
        };
        match sent {
            Err(_) => return Err((ErrorKind::Timeout, "no response head in time".into())),
            Ok(Err(e)) if rec.retries < MAX_STALE_RETRIES && e.closed_before_response() => {
                rec.retries += 1
            }
            Ok(Err(e)) if e.is_connect() => return Err((ErrorKind::Connect, e.to_string())),
            Ok(Err(e)) => return Err((ErrorKind::Stream, e.to_string())),
            Ok(Ok(answer)) => return Ok(answer),
        }
    }
}

/// Why a streamed request's response is no stream to read: a redirect (not
/// followed: a POST turned into a GET elsewhere measures something else), a
/// complete body where a stream was asked, or an HTTP error with the
/// server's own message. `None`: a stream follows.
async fn refusal(
    target: &Target,
    (conn, body): (&mut Conn, &mut Body),
    status: u16,
    content_type: Option<String>,
    location: Option<String>,
) -> Option<(ErrorKind, String)> {
    if (300..400).contains(&status) {
        let to = location.as_deref().unwrap_or("?");
        let msg = format!(
            "HTTP {status}: redirected to {to} (not followed; pass the final URL as --url)"
        );
        return Some((ErrorKind::Http(status), msg));
    }
    if (200..300).contains(&status) {
        // No content type at all is read as a stream: some servers send none.
        return match content_type {
            Some(kind) if !kind.contains("text/event-stream") => {
                let msg = format!(
                    "asked for a stream, got a complete `{kind}` body: the server ignored stream=true, so TTFT and ITL cannot be measured"
                );
                Some((ErrorKind::NotStreamed, msg))
            }
            _ => None,
        };
    }
    let text = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(body, 64 << 10)).await;
    let text = match text {
        Ok(Ok(t)) => String::from_utf8_lossy(&t).into_owned(),
        _ => String::new(),
    };
    let msg = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| target.api.error_message(&v))
        .unwrap_or_else(|| {
            text.lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect()
        });
    Some((ErrorKind::Http(status), format!("HTTP {status}: {msg}")))
}

/// What following one stream needs besides the stream itself.
struct Reading<'a> {
    target: &'a Target,
    clock: &'a Clock,
    cancel: &'a CancellationToken,
    deadline: Instant,
    streamed: &'a AtomicU64,
}

impl Reading<'_> {
    /// Reads the stream to its end, a failure (into `stream.failure`),
    /// cancellation or a timeout. `at` stamps the bytes that came with the
    /// head. Returns whether the body ended, and the last read's stamp.
    async fn follow(
        &self,
        conn: &mut Conn,
        body: &mut Body,
        stream: &mut Stream,
        at: u64,
    ) -> (bool, u64) {
        let mut sse = SseParser::new();
        let mut ended = match conn.decode(body, |d| sse.feed(d, |ev| stream.event(ev.data, at))) {
            Ok(ended) => ended,
            Err(e) => {
                stream.failure = Some((ErrorKind::Stream, e.to_string()));
                false
            }
        };
        count_new(self.streamed, stream.chunks.len());
        // One cancellation waiter and one watchdog timer per request, not per
        // read: the watchdog fires at most once per idle period and re-arms
        // itself from the time of the last read.
        let cancelled = self.cancel.cancelled();
        tokio::pin!(cancelled);
        let idle = self.target.idle_timeout;
        let watchdog = tokio::time::sleep_until(self.deadline.min(Instant::now() + idle));
        tokio::pin!(watchdog);
        let mut last_read = Instant::now();
        let mut last_at = at;
        while !ended && !stream.done && stream.failure.is_none() {
            let read = tokio::select! {
                biased;
                _ = &mut cancelled => {
                    stream.failure.get_or_insert((ErrorKind::Cancelled, "cancelled mid-stream".into()));
                    break;
                }
                _ = &mut watchdog => {
                    let now = Instant::now();
                    let idle_until = self.deadline.min(last_read + idle);
                    if now < idle_until {
                        watchdog.as_mut().reset(idle_until);
                        continue;
                    }
                    let why = if now >= self.deadline { "request exceeded --timeout" } else { "stream stalled past --idle-timeout" };
                    stream.failure.get_or_insert((ErrorKind::Timeout, why.into()));
                    break;
                }
                r = conn.fill() => r,
            };
            let now = std::time::Instant::now();
            let at = self.clock.us(conn.arrived().unwrap_or(now)).max(last_at);
            last_at = at;
            last_read = now.into();
            let before = stream.chunks.len();
            let decoded = match read {
                Err(e) => Err(HttpError::Io(e)),
                Ok(0) => body.eof().map(|()| true),
                Ok(_) => conn.decode(body, |d| sse.feed(d, |ev| stream.event(ev.data, at))),
            };
            match decoded {
                Ok(true) => {
                    ended = true;
                    sse.finish(|ev| stream.event(ev.data, at));
                }
                Ok(false) => {}
                Err(e) => {
                    stream
                        .failure
                        .get_or_insert((ErrorKind::Stream, e.to_string()));
                }
            }
            count_new(self.streamed, stream.chunks.len() - before);
        }
        (ended, last_at)
    }
}

/// Reads the body to its end after `[DONE]` (the chunked terminator usually
/// follows at once) so the connection can carry the next request.
async fn drained(conn: &mut Conn, body: &mut Body) -> bool {
    let drain = conn.read_to_end(body, 0);
    matches!(
        tokio::time::timeout(Duration::from_secs(1), drain).await,
        Ok(Ok(_))
    )
}

/// Settles the record from the stream. Counting tokens locally (no usage
/// from the server) is CPU work: then it runs off the runtime's threads, so
/// the other streams are read on time, and after `done_at`, so it is never
/// part of this request's timing.
async fn settle_off_runtime(rec: RequestRecord, stream: Stream) -> (RequestRecord, String) {
    let counts_reasoning =
        stream.reasoning_bytes > 0 && stream.usage.is_none_or(|u| u.reasoning_tokens.is_none());
    let needs_tokenizer = stream.failure.is_none()
        && (stream.usage.is_none_or(|u| u.completion_tokens.is_none()) || counts_reasoning)
        && (!stream.text.is_empty() || !stream.calls.is_empty());
    if !needs_tokenizer {
        return settle(rec, stream);
    }
    match tokio::task::spawn_blocking(move || settle(rec, stream)).await {
        Ok(settled) => settled,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => panic!("counting the answer's tokens was cancelled"),
        },
    }
}

/// `--no-stream`: reads the whole answer. There is no first token to time:
/// the record has E2E and token counts only (its tokens as one chunk at the
/// end, so throughput counts them; no `first_token_at`, so no TTFT or ITL).
async fn whole_answer(
    mut rec: RequestRecord,
    (mut conn, mut body, content_type): (Conn, Body, Option<String>),
    (target, items_asked, judging): (&Target, u64, Judging),
    clock: &Clock,
    cancel: &CancellationToken,
    deadline: Instant,
) -> (RequestRecord, String) {
    if content_type.is_some_and(|c| c.contains("text/event-stream")) {
        let msg = "asked for a whole answer (--no-stream), got an event stream".to_string();
        return fail(rec, clock, ErrorKind::Malformed, msg);
    }
    let read = tokio::select! {
        biased;
        _ = cancel.cancelled() => return fail(rec, clock, ErrorKind::Cancelled, "cancelled before the answer".into()),
        b = timeout_at(deadline, conn.read_to_end(&mut body, MAX_WHOLE_ANSWER)) => b,
    };
    let bytes = match read {
        Err(_) => {
            let msg = "request exceeded --timeout".into();
            return fail(rec, clock, ErrorKind::Timeout, msg);
        }
        Ok(Err(e)) => return fail(rec, clock, ErrorKind::Stream, e.to_string()),
        Ok(Ok(bytes)) => bytes,
    };
    // The answer's end is the arrival of its last bytes (the kernel's stamp
    // where there is one), as a stream's is.
    let now = std::time::Instant::now();
    rec.done_at_us = clock.us(conn.arrived().unwrap_or(now)).max(rec.sent_at_us);
    if body.reusable() {
        target.http.checkin(conn);
    }
    let body = String::from_utf8_lossy(&bytes).into_owned();
    if target.api.pooling() {
        return pooled(rec, &body, target.api, items_asked);
    }
    let mut text = String::new();
    let mut reasoner = Reasoner::new(target.reasoning);
    let mut whole = match Piece::of_whole(target.api, &body, &mut text, &mut reasoner) {
        Err(e) => return failed_after(rec, ErrorKind::Malformed, e.to_string()),
        Ok(w) => w,
    };
    if let Some(msg) = whole.error {
        return failed_after(rec, ErrorKind::ServerError, msg);
    }
    let mut calls = Vec::new();
    std::mem::take(&mut whole.calls)
        .into_iter()
        .for_each(|p| merge(&mut calls, p));
    // No first tool-call token to time in a whole answer, as no TTFT.
    if text.is_empty()
        && calls.is_empty()
        && !thought_to_its_limit(whole.usage, whole.finish_reason.as_deref())
    {
        let msg = "the answer carried no generated text".to_string();
        return failed_after(rec, ErrorKind::EmptyAnswer, msg);
    }
    rec.finish_reason = whole.finish_reason.take();
    rec.server_timings = whole.timings.take();
    // The answer, if any, came with the rest at the end.
    rec.first_answer_at_us =
        (whole.answer_bytes > 0 || !calls.is_empty()).then_some(rec.done_at_us);
    whole_reasoning(&mut rec, &whole, &reasoner).await;
    prompt_counts(&mut rec, whole.usage);
    let (tokens, source) = whole_output_tokens(&whole, &text, &calls).await;
    rec.output_tokens = tokens;
    rec.output_token_source = Some(source);
    rec.chunks = vec![Chunk(rec.done_at_us, tokens.min(u32::MAX as u64) as u32)];
    judging.judge(&mut rec, &text, whole.answer_bytes, &calls);
    (rec, text)
}

/// A whole answer's thinking: the server's count where it gives one (then
/// hidden if no thought was sent), else the thought's text counted off the
/// runtime's threads.
async fn whole_reasoning(rec: &mut RequestRecord, whole: &Piece, reasoner: &Reasoner) {
    let usage_reasoning = whole
        .usage
        .and_then(|u| u.reasoning_tokens)
        .filter(|&n| n > 0);
    rec.reasoning_tokens = match (usage_reasoning, whole.reasoning_bytes) {
        (Some(n), _) => Some(n),
        (None, 0) => None,
        (None, _) => {
            let thought = reasoner.reasoning_text().to_string();
            let n = tokio::task::spawn_blocking(move || tokenizer::count_tokens(&thought)).await;
            Some(n.ok().flatten().unwrap_or(1))
        }
    };
    rec.reasoning_hidden = usage_reasoning.is_some() && whole.reasoning_bytes == 0;
    rec.reasoning_token_source = rec.reasoning_tokens.map(|_| match usage_reasoning {
        Some(_) => TokenSource::ServerUsage,
        None => TokenSource::Tokenizer,
    });
}

/// A whole answer's output tokens and where the count came from: the
/// server's, else its text and calls counted off the runtime's threads.
async fn whole_output_tokens(whole: &Piece, text: &str, calls: &[CallSoFar]) -> (u64, TokenSource) {
    let counted = whole
        .usage
        .and_then(|u| u.completion_tokens)
        .or(whole.output_tokens);
    if let Some(n) = counted {
        return (n, TokenSource::ServerUsage);
    }
    let counted = with_calls(text, calls).into_owned();
    let n = tokio::task::spawn_blocking(move || tokenizer::count_tokens(&counted)).await;
    match n.ok().flatten() {
        Some(n) => (n, TokenSource::Tokenizer),
        None => (1, TokenSource::Chunks),
    }
}

/// A pooling API's answer (embeddings, rerank): nothing generated, so no
/// tokens out and no chunks; its items must be all that were asked for,
/// and its prompt tokens are the server's count where it gives one.
fn pooled(
    mut rec: RequestRecord,
    body: &str,
    api: &dyn Protocol,
    asked: u64,
) -> (RequestRecord, String) {
    let mut none = String::new();
    let mut reasoner = Reasoner::new(ReasoningParser::None);
    let whole = match Piece::of_whole(api, body, &mut none, &mut reasoner) {
        Err(e) => return failed_after(rec, ErrorKind::Malformed, e.to_string()),
        Ok(w) => w,
    };
    if let Some(msg) = whole.error {
        return failed_after(rec, ErrorKind::ServerError, msg);
    }
    rec.items = whole.items;
    rec.server_timings = whole.timings;
    match whole.items.unwrap_or(0) {
        0 => {
            let msg = "the answer carried no items (no vectors or scores)".to_string();
            return failed_after(rec, ErrorKind::EmptyAnswer, msg);
        }
        n if n < asked => {
            let msg = format!("asked for {asked} items, the answer carried {n}");
            return failed_after(rec, ErrorKind::Malformed, msg);
        }
        _ => {}
    }
    prompt_counts(&mut rec, whole.usage);
    (rec, String::new())
}

/// The answer: the last `answer_bytes` of the generated text (reasoning
/// comes first).
fn answer_of(text: &str, answer_bytes: usize) -> &str {
    text.get(text.len().saturating_sub(answer_bytes)..)
        .unwrap_or(text)
}

/// The generated text with the tool calls' names and arguments after it:
/// what the tokenizer counts when the server gives no count.
fn with_calls<'a>(text: &'a str, calls: &[CallSoFar]) -> std::borrow::Cow<'a, str> {
    let mut all = std::borrow::Cow::Borrowed(text);
    for c in calls {
        let s = all.to_mut();
        s.push_str(&c.name);
        s.push_str(&c.arguments);
    }
    all
}

/// A failure found in a response already read to its end.
fn failed_after(mut rec: RequestRecord, kind: ErrorKind, msg: String) -> (RequestRecord, String) {
    rec.error_kind = Some(kind);
    rec.error = Some(msg);
    (rec, String::new())
}

/// Turns the stream into the record — failure or success, token counts and
/// their sources — and the answer's text.
fn settle(mut rec: RequestRecord, mut s: Stream) -> (RequestRecord, String) {
    rec.first_token_at_us = s.chunks.first().map(Chunk::at_us);
    rec.finish_reason = s.finish_reason.take();
    rec.server_timings = s.timings.take();
    if s.counted_tokens > 0 && s.usage.is_none_or(|u| u.completion_tokens.is_none()) {
        let counted = Usage {
            completion_tokens: Some(s.counted_tokens),
            ..Usage::default()
        };
        s.usage = Some(s.usage.map_or(counted, |u| u.merged(counted)));
    }
    check_stream(&mut rec, &mut s);
    prompt_counts(&mut rec, s.usage);
    let n_chunks = s.chunks.len() as u64;
    let (total, source) = output_count(&s);
    rec.first_answer_at_us = s.first_answer_chunk.map(|i| s.chunks[i].at_us());
    rec.first_tool_call_at_us = s.first_call_chunk.map(|i| s.chunks[i].at_us());
    let hidden = count_reasoning(&mut rec, &s);
    let streamed = match hidden {
        0 => total,
        n => total.saturating_sub(n).max(n_chunks),
    };
    let chunk_usage: std::borrow::Cow<'_, [u64]> = match hidden {
        0 => std::borrow::Cow::Borrowed(&s.chunk_usage),
        n => s.chunk_usage.iter().map(|c| c.saturating_sub(n)).collect(),
    };
    split_tokens(&mut s.chunks, &chunk_usage, streamed);
    rec.output_tokens = if s.chunks.is_empty() && s.failure.is_some() {
        total.min(n_chunks)
    } else {
        total
    };
    rec.output_token_source = Some(source);
    rec.chunks = s.chunks;
    if let Some((kind, msg)) = s.failure {
        rec.error_kind = Some(kind);
        rec.error = Some(msg);
    } else {
        s.judging.judge(&mut rec, &s.text, s.answer_bytes, &s.calls);
    }
    (rec, s.text)
}

/// The prompt's tokens as the server counted them, and those its prefix
/// cache served (from the usage, else llama.cpp's own timings' `cache_n`),
/// for a streamed answer and a whole one alike.
fn prompt_counts(rec: &mut RequestRecord, usage: Option<Usage>) {
    if let Some(p) = usage.and_then(|u| u.prompt_tokens) {
        rec.input_tokens = Some(p);
        rec.input_token_source = Some(TokenSource::ServerUsage);
    }
    rec.cached_tokens = usage
        .and_then(|u| u.cached_tokens)
        .or_else(|| rec.server_timings.as_ref()?.get("cache_n")?.as_u64());
}

/// What the finished stream says against itself: an end with no `[DONE]`
/// or finish reason is broken, a usage its own text cannot hold is dropped
/// (and said so), and no text at all is an empty answer — unless the
/// server thought to its limit without showing it.
fn check_stream(rec: &mut RequestRecord, s: &mut Stream) {
    let ended_by_body = s.api.ends_with_the_body() && !s.chunks.is_empty();
    if s.failure.is_none() && !s.done && rec.finish_reason.is_none() && !ended_by_body {
        s.failure = Some((
            ErrorKind::Stream,
            "stream ended without [DONE] or a finish reason".into(),
        ));
    }
    let n_chunks = s.chunks.len() as u64;
    // Before the split, a chunk's second field is its text bytes.
    let bytes: u64 = s.chunks.iter().map(|c| c.1 as u64).sum();
    // A tool call's framing (`{"name": …, "arguments": `) is generated and
    // never streamed as text: with calls, the bytes bound no count.
    let text_bound = (s.calls.is_empty()).then_some((bytes, n_chunks));
    if let Some(why) = implausible(s.usage, text_bound, rec.requested_output_tokens) {
        rec.implausible_usage = Some(why);
        s.usage = None;
    }
    if s.failure.is_none()
        && s.chunks.is_empty()
        && !thought_to_its_limit(s.usage, rec.finish_reason.as_deref())
    {
        s.failure = Some((
            ErrorKind::EmptyAnswer,
            "the stream ended without any generated text (no chunk's choices carried content)"
                .into(),
        ));
    }
}

/// The answer's tokens and where the count comes from: the server's usage,
/// else the tokenizer over the text (never fewer than the chunks), else the
/// chunks. A failed request's usage and text are not trusted.
fn output_count(s: &Stream) -> (u64, TokenSource) {
    let n_chunks = s.chunks.len() as u64;
    match s.usage.and_then(|u| u.completion_tokens) {
        Some(n) if s.failure.is_none() => (n, TokenSource::ServerUsage),
        _ => match tokenizer::count_tokens(&with_calls(&s.text, &s.calls))
            .filter(|_| s.failure.is_none())
        {
            Some(n) => (n.max(n_chunks), TokenSource::Tokenizer),
            None => (n_chunks, TokenSource::Chunks),
        },
    }
}

/// Records the reasoning's tokens and their source; the count of them the
/// server never streamed (0 when it streamed its thinking, or none).
fn count_reasoning(rec: &mut RequestRecord, s: &Stream) -> u64 {
    let Some((n, source)) = reasoning_count(s) else {
        return 0;
    };
    rec.reasoning_tokens = Some(n);
    rec.reasoning_token_source = Some(source);
    // Reasoning the server counted and never streamed: the chunks carry
    // the rest, and their tokens are what the per-token figures rest on.
    rec.reasoning_hidden = n > 0 && s.reasoning_bytes == 0;
    if rec.reasoning_hidden {
        n
    } else {
        0
    }
}

/// A response with no text that is still an answer of sorts: the server
/// counted reasoning it never showed and stopped at the length limit — a
/// hidden thinking budget spent whole (the `thinking_budget_exhausted`
/// finding), not a broken stream.
fn thought_to_its_limit(usage: Option<Usage>, finish_reason: Option<&str>) -> bool {
    let counted = usage.and_then(|u| u.reasoning_tokens);
    finish_reason == Some("length") && counted.is_some_and(|n| n > 0)
}

/// llama.cpp's running count of generated tokens on a chunk
/// (`timings.predicted_n`, sent on every chunk with `timings_per_token`).
fn generated_so_far(timings: &Option<serde_json::Value>) -> Option<u64> {
    timings.as_ref()?.get("predicted_n")?.as_u64()
}

/// A stream's reasoning tokens and where the count came from: the server's
/// usage; else its running count on every chunk — all it generated before
/// the answer's first token, the tags around the thinking included; else
/// the tokenizer on the reasoning it streamed; else its reasoning chunks.
/// `None` when it showed no reasoning at all.
fn reasoning_count(s: &Stream) -> Option<(u64, TokenSource)> {
    match s.usage.and_then(|u| u.reasoning_tokens) {
        Some(0) if s.reasoning_bytes == 0 => None,
        Some(n) => Some((n, TokenSource::ServerUsage)),
        None if s.reasoning_bytes == 0 => None,
        None if s.chunk_usage.len() == s.chunks.len() => {
            let before_answer = match s.first_answer_chunk {
                Some(i) => s.chunk_usage[i].saturating_sub(1),
                None => *s.chunk_usage.last()?,
            };
            Some((
                before_answer.max(s.reasoning_chunks),
                TokenSource::ServerChunks,
            ))
        }
        None => Some(match tokenizer::count_tokens(s.reasoner.reasoning_text()) {
            Some(n) => (n.max(s.reasoning_chunks), TokenSource::Tokenizer),
            None => (s.reasoning_chunks.max(1), TokenSource::Chunks),
        }),
    }
}

/// Prompt sizes past this are not real (the largest context windows hold ~10M).
const MAX_PLAUSIBLE_PROMPT: u64 = 1 << 32;

/// Why the server's usage cannot be true, if it cannot: a token is at least
/// a byte of text (or an empty chunk), a server never writes past
/// `max_tokens` (one more for an end-of-sequence token), and no prompt holds
/// billions of tokens.
fn implausible(
    usage: Option<Usage>,
    text: Option<(u64, u64)>,
    max_tokens: Option<u64>,
) -> Option<String> {
    let u = usage?;
    if let Some(n) = u.completion_tokens {
        let hidden = u.reasoning_tokens.unwrap_or(0);
        if hidden > n {
            return Some(format!(
                "reasoning_tokens {hidden} of completion_tokens {n}"
            ));
        }
        // Reasoning may have been counted and never shown (hidden): only
        // the rest needs text.
        if let Some((bytes, chunks)) = text.filter(|(b, c)| n - hidden > b.saturating_add(*c)) {
            return Some(format!(
                "completion_tokens {n} from {chunks} chunks carrying {bytes} bytes"
            ));
        }
        if let Some(max) = max_tokens.filter(|&m| n > m.saturating_add(1)) {
            return Some(format!("completion_tokens {n} with max_tokens {max}"));
        }
    }
    match u.prompt_tokens {
        Some(p) if p > MAX_PLAUSIBLE_PROMPT => Some(format!("prompt_tokens {p}")),
        _ => None,
    }
}

/// Replaces each chunk's byte count with its token count.
/// Per-chunk usage when the server sent it; otherwise one token per chunk
/// when the totals agree; otherwise `total` split in proportion to text bytes
/// (largest remainder, at least one per chunk).
fn split_tokens(chunks: &mut [Chunk], chunk_usage: &[u64], total: u64) {
    let n = chunks.len() as u64;
    if n == 0 {
        return;
    }
    if chunk_usage.len() == chunks.len() && chunk_usage.windows(2).all(|w| w[1] >= w[0]) {
        let mut prev = 0;
        for (c, &cum) in chunks.iter_mut().zip(chunk_usage) {
            c.1 = (cum - prev).max(1) as u32;
            prev = cum;
        }
        return;
    }
    if total <= n {
        chunks.iter_mut().for_each(|c| c.1 = 1);
        return;
    }
    let bytes: u64 = chunks.iter().map(|c| c.1 as u64).sum();
    let extra = total - n; // one each first, the rest by bytes
    let mut given = 0;
    let mut remainders: Vec<(u64, usize)> = Vec::with_capacity(chunks.len());
    for (i, c) in chunks.iter_mut().enumerate() {
        let share = extra * c.1 as u64;
        let whole = share / bytes;
        remainders.push((share % bytes, i));
        c.1 = 1 + whole as u32;
        given += whole;
    }
    remainders.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders.iter().take((extra - given) as usize) {
        chunks[i].1 += 1;
    }
}

/// A request that failed before any stream: its record, and no answer.
fn fail(
    mut rec: RequestRecord,
    clock: &Clock,
    kind: ErrorKind,
    msg: String,
) -> (RequestRecord, String) {
    rec.done_at_us = clock.now_us();
    rec.error_kind = Some(kind);
    rec.error = Some(msg);
    (rec, String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(bytes: &[u32]) -> Vec<Chunk> {
        bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| Chunk(i as u64, b))
            .collect()
    }

    #[test]
    fn one_token_per_chunk_when_totals_agree() {
        let mut c = chunks(&[5, 3, 9]);
        split_tokens(&mut c, &[], 3);
        assert!(c.iter().all(|c| c.1 == 1));
    }

    #[test]
    fn equal_chunks_split_evenly() {
        let mut c = chunks(&[12, 12, 12, 12]);
        split_tokens(&mut c, &[], 16);
        assert!(c.iter().all(|c| c.1 == 4), "{c:?}");
    }

    #[test]
    fn uneven_chunks_split_by_bytes_and_sum_to_total() {
        let mut c = chunks(&[1, 3, 10, 6]);
        split_tokens(&mut c, &[], 11);
        assert_eq!(c.iter().map(|c| c.1 as u64).sum::<u64>(), 11);
        assert!(c[2].1 > c[0].1);
    }

    #[test]
    fn per_chunk_usage_wins() {
        let mut c = chunks(&[4, 4, 4]);
        split_tokens(&mut c, &[2, 5, 6], 6);
        assert_eq!(c.iter().map(|c| c.1).collect::<Vec<_>>(), vec![2, 3, 1]);
    }
}
