//! One streaming request, timed per network read.
//!
//! The per-token path is: read bytes → stamp the clock → SSE parse → borrow-parse
//! the chunk JSON → push `(instant, bytes)`. Token counts per chunk are settled
//! once the stream ends, from the server's usage when it has one.

use crate::abandon::Leave;
use crate::counts::{implausible, implausible_running, split_tokens, Carried};
use crate::http1::{Body, Conn, Head, HttpError};
use crate::protocol::{
    ItemsAsked, Piece, Protocol, Reasoner, ReasoningParser, Request, Shape, Usage,
};
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

/// The most bytes one response body may bring, streamed or whole: 64 MiB,
/// some three times what a 128K-token answer streams in vLLM's chat format
/// (~200 bytes an event). Past it the request fails `too_large`, naming
/// the limit, and what it held is let go: a server that streams forever,
/// or answers with an endless body, costs this much memory and no more.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

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
    /// Each request's id and trace context, sent as headers and recorded.
    pub ids: crate::request_ids::RequestIds,
    /// `--cancel`: the requests that leave part-way, and when.
    pub abandon: Option<crate::abandon::Abandon>,
    /// `--class`: each request's class of traffic (its priority, headers).
    pub classes: Option<Arc<crate::classes::Classes>>,
    /// `--audio-chunk-ms`, `--audio-pace`: how a realtime session sends its audio.
    pub pacing: crate::realtime_session::Pacing,
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
    /// Generated bytes so far (answer, reasoning, calls), for its bound.
    generated: usize,
    /// `--cancel-after tokens:N`: the user leaves when a chunk past the
    /// N-th comes (an answer of N chunks or fewer is seen whole).
    leave_after: Option<u64>,
    /// A speech API's usage: the audio's seconds as the server counted them.
    audio_seconds: Option<f64>,
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

    /// Whether any check reads the answer (format, tools, grade).
    fn checks(&self) -> bool {
        self.check.is_some() || self.tools.is_some() || self.grade.is_some()
    }

    /// The checks of a whole answer, into its record: the answer alone
    /// (never its reasoning) and its tool calls.
    fn judge(&self, rec: &mut RequestRecord, answer: &str, calls: &[CallSoFar]) {
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
            generated: 0,
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
            leave_after: None,
            audio_seconds: None,
        }
    }

    /// Whether a user who leaves after N chunks has had them.
    fn leaves_now(&self) -> bool {
        self.leave_after
            .is_some_and(|n| self.chunks.len() as u64 >= n)
    }

    fn event(&mut self, data: &str, at_us: u64) {
        if self.done || self.failure.is_some() {
            return;
        }
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let before = self.text.len();
        match Piece::of_event(self.api, data, &mut self.text, &mut self.reasoner) {
            Err(e) => self.failure = Some((ErrorKind::Malformed, e.to_string())),
            Ok(info) if info.text_bytes > 0 && self.leaves_now() => {
                // The user left after the N-th chunk: this one is not theirs.
                self.text.truncate(before);
                let n = self.leave_after.unwrap_or_default();
                self.failure = Some((ErrorKind::Abandoned, Leave::AfterChunks(n).reason()));
            }
            Ok(info) => {
                if let Some(msg) = info.error {
                    self.failure = Some((ErrorKind::ServerError, msg));
                    return;
                }
                if let Some(n) = info.output_tokens {
                    self.counted_tokens = self.counted_tokens.saturating_add(n);
                }
                self.generated = self.generated.saturating_add(info.text_bytes);
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
                if info.audio_seconds.is_some() {
                    self.audio_seconds = info.audio_seconds;
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
        // A call's id is held too (and bounded with the rest).
        let ids: usize = pieces
            .iter()
            .filter_map(|p| p.id.as_ref())
            .map(|i| i.len())
            .sum();
        self.generated = self.generated.saturating_add(ids);
        let latest = self.chunks.len().checked_sub(1);
        self.first_call_chunk = self.first_call_chunk.or(latest);
        self.first_answer_chunk = self.first_answer_chunk.or(latest);
        if let Err(e) = pieces
            .into_iter()
            .try_for_each(|p| merge(&mut self.calls, p))
        {
            self.failure
                .get_or_insert((ErrorKind::Malformed, e.to_string()));
        }
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
        audio_ms: (audio_seconds(media) * 1000.0).round() as u64,
        image_size: media
            .iter()
            .find(|m| m.kind == Kind::Image)
            .map(|m| m.label.clone()),
    })
}

/// The audio clips' seconds, as their headers say.
pub(crate) fn audio_seconds(media: &[std::sync::Arc<tokenscope_workload::media::Media>]) -> f64 {
    media.iter().filter_map(|m| m.seconds).sum()
}

/// The live counts a stream adds to: its content chunks; and, once, at
/// its first chunk, one answering request and the µs it waited for it.
#[derive(Clone, Copy)]
pub struct Streamed<'a> {
    pub chunks: &'a AtomicU64,
    pub answering: &'a AtomicU64,
    pub answer_wait_us: &'a AtomicU64,
}

/// Adds the content chunks one network read brought to the live counts,
/// `before` of them already counted; `waited_us` since the request was sent.
fn count_new(streamed: Streamed, before: usize, now: usize, waited_us: u64) {
    if now > before {
        streamed
            .chunks
            .fetch_add((now - before) as u64, Ordering::Relaxed);
        if before == 0 {
            streamed.answering.fetch_add(1, Ordering::Relaxed);
            streamed
                .answer_wait_us
                .fetch_add(waited_us, Ordering::Relaxed);
        }
    }
}

/// Sends one request and follows its stream to the end, a failure, or
/// cancellation. Never panics; always returns a record, and the answer's
/// text (what a next turn carries). `history` is the session's earlier
/// turns (empty for a single request). `streamed` counts the content
/// chunks as they arrive (once per network read, for the live view), and
/// the requests whose first chunk has come.
pub async fn execute(
    target: &Target,
    clock: &Clock,
    ticket: Ticket,
    (spec, history): (&PromptSpec, &[Exchange]),
    cancel: &CancellationToken,
    streamed: Streamed<'_>,
) -> (RequestRecord, String) {
    let adapter = target.adapters.as_ref().map(|a| a.for_request(ticket.id));
    let judging = Judging::of(target, spec);
    let class = target.classes.as_ref().map(|c| c.for_request(ticket.id));
    let (mut own_head, request_id, traceparent) = target.ids.head(ticket.id);
    own_head.extend(class.map(|c| c.head()).unwrap_or_default());
    let priority = class.and_then(|c| c.priority);
    let (wire, items_asked) = wire_request(
        target,
        (spec, history),
        adapter,
        &judging,
        (&own_head, priority),
    );
    let mut rec = sent_record(&ticket, spec, adapter, &judging);
    (rec.request_id, rec.traceparent) = (request_id, traceparent);
    rec.class = class.map(|c| c.name.clone());
    if target.api.audio_in() {
        // A transcript is as long as its audio: no length was asked.
        (rec.requested_input_tokens, rec.requested_output_tokens) = (None, None);
        (rec.input_tokens, rec.input_token_source) = (None, None);
    }
    if target.api.answer_is_audio() {
        rec.requested_output_tokens = None;
    }
    if target.api.websocket() {
        drop(wire);
        return crate::realtime_session::run(target, clock, rec, (spec, &own_head), cancel).await;
    }
    if target.api.audio_in() {
        rec.speech = Some(Box::new(tokenscope_core::record::Speech {
            audio_s: audio_seconds(&spec.media),
            ..Default::default()
        }));
    }
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
    if target.api.answer_is_audio() && success {
        let answer = (conn, body, content_type);
        return crate::audio_answer::read(rec, answer, (target, clock, cancel, deadline), at).await;
    }
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
    let leave = match ticket.warmup {
        true => None, // warm-up requests are not counted: none leaves
        false => target.abandon.and_then(|a| a.for_request(ticket.id)),
    };
    if let Some(Leave::AfterChunks(n)) = leave {
        stream.leave_after = Some(n);
    }
    let reading = Reading {
        target,
        clock,
        cancel,
        deadline,
        streamed,
        sent_at_us: rec.sent_at_us,
        leave,
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
    (own_head, priority): (&[u8], Option<i64>),
) -> (Vec<u8>, ItemsAsked) {
    let offered = judging.tools.as_ref();
    // A class's priority goes in the body as vLLM's `priority` field.
    let with_priority = priority.map(|p| {
        let mut extra = target.shape.extra.clone();
        extra.insert("priority".into(), serde_json::json!(p));
        extra
    });
    let mut request = Request {
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
    if let Some(extra) = &with_priority {
        request.extra = extra;
    }
    let body = target.api.body(&request);
    (
        target.http.post(&body, own_head),
        target.api.items_asked(&request),
    )
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
    streamed: Streamed<'a>,
    /// When the request went out (the run's clock, µs).
    sent_at_us: u64,
    /// `--cancel`: when this request leaves, if it does.
    leave: Option<crate::abandon::Leave>,
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
        let mut sse = Framing::default();
        let mut ended = match conn.decode(body, |d| sse.feed(d, at, stream)) {
            Ok(ended) => ended,
            Err(e) => {
                stream.failure = Some((ErrorKind::Stream, e.to_string()));
                false
            }
        };
        count_new(
            self.streamed,
            0,
            stream.chunks.len(),
            at.saturating_sub(self.sent_at_us),
        );
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
        // A user who leaves at a time: a timer from the send, else never
        // (a time past the clock's range never comes).
        let leave_at = match self.leave {
            Some(Leave::At(d)) => {
                let sent = self.clock.at(Duration::from_micros(self.sent_at_us));
                Instant::from_std(sent).checked_add(d)
            }
            _ => None,
        };
        let leaving = async {
            match leave_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(leaving);
        while !ended && !stream.done && stream.failure.is_none() {
            // The read first: a task woken by its socket finds its bytes
            // without polling the cancellation's waiter (a lock each time)
            // or the watchdog; they are polled only when the read would
            // wait. A run cancelled while bytes keep coming is seen here,
            // and a read past --timeout below, as the watchdog would have.
            if self.cancel.is_cancelled() {
                stream
                    .failure
                    .get_or_insert((ErrorKind::Cancelled, "cancelled mid-stream".into()));
                break;
            }
            let read = tokio::select! {
                biased;
                r = conn.fill() => r,
                _ = &mut cancelled => {
                    stream.failure.get_or_insert((ErrorKind::Cancelled, "cancelled mid-stream".into()));
                    break;
                }
                _ = &mut leaving => {
                    let why = self.leave.map(Leave::reason).unwrap_or_default();
                    stream.failure.get_or_insert((ErrorKind::Abandoned, why));
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
            };
            let now = std::time::Instant::now();
            // A server that keeps bytes waiting is never waited on: the
            // user's time is checked after each read too.
            if leave_at.is_some_and(|t| Instant::from_std(now) >= t) {
                let why = self.leave.map(Leave::reason).unwrap_or_default();
                stream.failure.get_or_insert((ErrorKind::Abandoned, why));
                break;
            }
            if Instant::from_std(now) >= self.deadline {
                let why = "request exceeded --timeout";
                stream
                    .failure
                    .get_or_insert((ErrorKind::Timeout, why.into()));
                break;
            }
            let at = self.clock.us(conn.arrived().unwrap_or(now)).max(last_at);
            last_at = at;
            last_read = now.into();
            let before = stream.chunks.len();
            let decoded = match read {
                Err(e) => Err(HttpError::Io(e)),
                Ok(0) => body.eof().map(|()| true),
                Ok(_) => conn.decode(body, |d| sse.feed(d, at, stream)),
            };
            match decoded {
                Ok(true) => {
                    ended = true;
                    sse.sse.finish(|ev| stream.event(ev.data, at));
                }
                Ok(false) => {}
                Err(e) => {
                    stream
                        .failure
                        .get_or_insert((ErrorKind::Stream, e.to_string()));
                }
            }
            count_new(
                self.streamed,
                before,
                stream.chunks.len(),
                at.saturating_sub(self.sent_at_us),
            );
        }
        (ended, last_at)
    }
}

/// A stream's body framed into events, within its memory bounds.
#[derive(Default)]
struct Framing {
    sse: SseParser,
}

impl Framing {
    /// Frames one read's bytes into the stream's events; fails the stream,
    /// once, when it outgrew a bound: one line or event
    /// ([`crate::sse::MAX_EVENT_BYTES`]), or what the answer holds
    /// ([`MAX_ANSWER_BYTES`] of text and chunk stamps). The bound is on
    /// what is kept, not on the bytes on the wire: SGLang's events each
    /// carry the whole text so far, and logprobs carry far more than text.
    fn feed(&mut self, d: &[u8], at: u64, stream: &mut Stream) {
        self.sse.feed(d, |ev| stream.event(ev.data, at));
        if stream.failure.is_some() {
            return;
        }
        if let Some(e) = self.sse.overflow() {
            stream.failure = Some((ErrorKind::TooLarge, e.to_string()));
        } else if stream.held() > MAX_ANSWER_BYTES {
            let msg = format!(
                "the answer outgrew {MAX_ANSWER_BYTES} bytes held (its text and chunk stamps; the limit on one answer) before it ended"
            );
            stream.failure = Some((ErrorKind::TooLarge, msg));
        }
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

/// Settles the record from the stream. What the stream says against
/// itself is checked first (cheap); the rest — counting tokens locally,
/// checking the answer's format and tools, grading it, hashing a long
/// one — is CPU work that grows with the answer: then it runs off the
/// runtime's threads, so the other streams are read on time, and after
/// `done_at`, so it is never part of this request's timing.
async fn settle_off_runtime(mut rec: RequestRecord, mut stream: Stream) -> (RequestRecord, String) {
    check_stream(&mut rec, &mut stream);
    if !stream.needs_cpu() {
        return settle(rec, stream);
    }
    off_runtime(move || settle(rec, stream)).await
}

/// Runs one request's CPU work on the blocking pool and waits for it.
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => panic!("settling the answer was cancelled"),
        },
    }
}

/// Answers shorter than this are hashed on the runtime's thread (a few
/// microseconds); longer ones off it.
const SHORT_ANSWER: usize = 16 << 10;

impl Stream {
    /// The bytes this stream holds so far: every generated byte (answer,
    /// reasoning, calls) and a stamp a chunk.
    fn held(&self) -> usize {
        let stamp = std::mem::size_of::<Chunk>() + std::mem::size_of::<u64>();
        self.generated.saturating_add(self.chunks.len() * stamp)
    }

    /// Whether settling it is CPU work that can take long.
    fn needs_cpu(&self) -> bool {
        if self.failure.is_some() {
            return false;
        }
        let counted = self.usage.is_some_and(|u| u.completion_tokens.is_some());
        let thought_counted =
            self.reasoning_bytes == 0 || self.usage.is_some_and(|u| u.reasoning_tokens.is_some());
        !(counted && thought_counted)
            || self.judging.checks()
            || self.text.len() + self.reasoner.reasoning_text().len() > SHORT_ANSWER
    }
}

/// `--no-stream`: reads the whole answer. There is no first token to time:
/// the record has E2E and token counts only (its tokens as one chunk at the
/// end, so throughput counts them; no `first_token_at`, so no TTFT or ITL).
async fn whole_answer(
    mut rec: RequestRecord,
    (mut conn, mut body, content_type): (Conn, Body, Option<String>),
    (target, items_asked, judging): (&Target, ItemsAsked, Judging),
    clock: &Clock,
    cancel: &CancellationToken,
    deadline: Instant,
) -> (RequestRecord, String) {
    if content_type.is_some_and(|c| c.contains("text/event-stream")) {
        return fail(rec, clock, ErrorKind::Malformed, streamed_whole(target.api));
    }
    let read = tokio::select! {
        biased;
        _ = cancel.cancelled() => return fail(rec, clock, ErrorKind::Cancelled, "cancelled before the answer".into()),
        b = timeout_at(deadline, conn.read_within(&mut body, whole_limit(items_asked))) => b,
    };
    let bytes = match read {
        Err(_) => {
            let msg = "request exceeded --timeout".into();
            return fail(rec, clock, ErrorKind::Timeout, msg);
        }
        Ok(Err(e)) => return fail(rec, clock, ErrorKind::Stream, e.to_string()),
        Ok(Ok(None)) => {
            let limit = whole_limit(items_asked);
            let msg = format!("the answer outgrew {limit} bytes (the limit on one answer)");
            return fail(rec, clock, ErrorKind::TooLarge, msg);
        }
        Ok(Ok(Some(bytes))) => bytes,
    };
    // The answer's end is the arrival of its last bytes (the kernel's stamp
    // where there is one), as a stream's is.
    let now = std::time::Instant::now();
    rec.done_at_us = clock.us(conn.arrived().unwrap_or(now)).max(rec.sent_at_us);
    if body.reusable() {
        target.http.checkin(conn);
    }
    let api = (target.api, target.reasoning, items_asked);
    off_runtime(move || settle_whole(rec, bytes, api, judging)).await
}

/// A whole answer's body into its record, off the runtime's threads (the
/// body may be megabytes of JSON): a pooling API's items, or the generated
/// text, reasoning, calls and their counts, and the checks of the answer.
fn settle_whole(
    mut rec: RequestRecord,
    bytes: Vec<u8>,
    (api, parser, items_asked): (&'static dyn Protocol, ReasoningParser, ItemsAsked),
    judging: Judging,
) -> (RequestRecord, String) {
    // One copy of the body at most: a lossy copy only where it is not UTF-8.
    let body = String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    if api.pooling() {
        return pooled(rec, &body, api, items_asked);
    }
    let mut text = String::new();
    let mut reasoner = Reasoner::new(parser);
    let mut whole = match Piece::of_whole(api, &body, &mut text, &mut reasoner) {
        Err(e) => return failed_after(rec, ErrorKind::Malformed, e.to_string()),
        Ok(w) => w,
    };
    drop(body);
    if let Some(msg) = whole.error {
        return failed_after(rec, ErrorKind::ServerError, msg);
    }
    let mut calls = Vec::new();
    let merged = std::mem::take(&mut whole.calls)
        .into_iter()
        .try_for_each(|p| merge(&mut calls, p));
    if let Err(e) = merged {
        return failed_after(rec, ErrorKind::Malformed, e.to_string());
    }
    let thought = reasoner.reasoning_text();
    // No first tool-call token to time in a whole answer, as no TTFT.
    if text.is_empty()
        && thought.is_empty()
        && calls.is_empty()
        && !thought_to_its_limit(whole.usage, whole.finish_reason.as_deref())
    {
        let msg = "the answer carried no generated text".to_string();
        return failed_after(rec, ErrorKind::EmptyAnswer, msg);
    }
    rec.finish_reason = whole.finish_reason.take();
    rec.server_timings = whole.timings.take();
    let answer = answer_of(&text, whole.answer_bytes);
    let answered = !answer.is_empty() || !calls.is_empty();
    // The answer, if any, came with the rest at the end.
    rec.first_answer_at_us = answered.then_some(rec.done_at_us);
    let mut usage = whole.usage;
    if let Some(n) = whole.output_tokens {
        let u = usage.get_or_insert_with(Usage::default);
        u.completion_tokens = u.completion_tokens.or(Some(n));
    }
    let carried = Carried {
        bytes: whole.text_bytes as u64,
        chunks: u64::from(whole.text_bytes > 0),
        calls: calls.len() as u64,
        max_tokens: rec.requested_output_tokens,
        hidden: 0,
        summarised: whole.reasoning_bytes > 0
            && usage.is_some_and(|u| u.reasoning_tokens.is_none()),
    };
    if let Some(why) = implausible(usage, &carried) {
        rec.implausible_usage = Some(why);
        usage = None;
    }
    prompt_counts(&mut rec, usage);
    let total = match usage.and_then(|u| u.completion_tokens) {
        Some(n) => (n, TokenSource::ServerUsage),
        None => match local_output(thought, answer, &calls) {
            Some(n) => (n, TokenSource::Tokenizer),
            None => (1, TokenSource::Chunks),
        },
    };
    let said = Said {
        thought,
        answer,
        calls: &calls,
    };
    whole_reasoning(&mut rec, usage, whole.reasoning_bytes, &said, total);
    rec.output_tokens = total.0;
    rec.output_token_source = Some(total.1);
    rec.chunks = vec![Chunk(rec.done_at_us, total.0.min(u32::MAX as u64) as u32)];
    judging.judge(&mut rec, answer, &calls);
    heard_speech(&mut rec, answer, whole.audio_seconds);
    let answer = answer.to_string();
    (rec, answer)
}

/// The most a whole answer may bring: [`MAX_ANSWER_BYTES`], or 256 KiB an
/// input for a pooling batch (a 4096-dimension embedding is ~80 KB of
/// JSON floats), whichever is more.
fn whole_limit(items: ItemsAsked) -> usize {
    let per_input = (items.inputs as usize).saturating_mul(256 << 10);
    MAX_ANSWER_BYTES.max(per_input)
}

/// Why an event stream cannot be read where a whole answer was asked for,
/// naming the flag only when the user gave it: a pooling API is never
/// streamed, whatever the flags.
fn streamed_whole(api: &dyn Protocol) -> String {
    match api.pooling() {
        true => format!(
            "{} answers whole (a pooling API is never streamed), the server sent an event stream",
            api.name()
        ),
        false => "asked for a whole answer (--no-stream), got an event stream".into(),
    }
}

/// A whole answer's thinking: the server's count where it gives one (then
/// hidden if no thought was sent), else the thought counted locally; never
/// more than the output leaves once an answer that was sent has a token.
fn whole_reasoning(
    rec: &mut RequestRecord,
    usage: Option<Usage>,
    reasoning_bytes: usize,
    said: &Said<'_>,
    total: (u64, TokenSource),
) {
    let usage_reasoning = usage.and_then(|u| u.reasoning_tokens).filter(|&n| n > 0);
    let (n, source) = match (usage_reasoning, reasoning_bytes) {
        (Some(n), _) => (n, TokenSource::ServerUsage),
        (None, 0) => return,
        (None, _) => (
            said.local_reasoning(total).unwrap_or(1),
            TokenSource::Tokenizer,
        ),
    };
    rec.reasoning_tokens = Some(said.within(n, total.0));
    rec.reasoning_hidden = usage_reasoning.is_some() && reasoning_bytes == 0;
    rec.reasoning_token_source = Some(source);
}

/// What an answer said, apart: its reasoning, its answer and its calls.
struct Said<'a> {
    thought: &'a str,
    answer: &'a str,
    calls: &'a [CallSoFar],
}

impl Said<'_> {
    /// Whether an answer was sent: text or a call.
    fn answered(&self) -> bool {
        !self.answer.is_empty() || !self.calls.is_empty()
    }

    /// Reasoning tokens `n` held to what `total` leaves: an answer that
    /// was sent keeps at least one token, so reasoning + answer = output.
    fn within(&self, n: u64, total: u64) -> u64 {
        n.min(total.saturating_sub(u64::from(self.answered())))
    }

    /// The reasoning counted here: the tokenizer over its text; when the
    /// total is the server's, that total shared between reasoning and
    /// answer in the proportion the tokenizer counts them — the server's
    /// count is trusted for the whole, the local one only for the split,
    /// so both sides are on one scale (a tag the server counts as one
    /// token and the tokenizer as four moves no token across).
    fn local_reasoning(&self, total: (u64, TokenSource)) -> Option<u64> {
        let thought = tokenizer::count_tokens(self.thought)?;
        if total.1 != TokenSource::ServerUsage {
            return Some(thought);
        }
        let answer = tokenizer::count_tokens(&with_calls(self.answer, self.calls)).unwrap_or(0);
        Some(crate::counts::share(total.0, thought, answer))
    }
}

/// All that was generated, counted by the tokenizer: the reasoning, the
/// answer and the calls' names and arguments.
fn local_output(thought: &str, answer: &str, calls: &[CallSoFar]) -> Option<u64> {
    let answer = tokenizer::count_tokens(&with_calls(answer, calls))?;
    let thought = match thought.is_empty() {
        true => 0,
        false => tokenizer::count_tokens(thought)?,
    };
    Some(answer.saturating_add(thought))
}

/// A pooling API's answer (embeddings, rerank): nothing generated, so no
/// tokens out and no chunks; its items must be all that were asked for,
/// and its prompt tokens are the server's count where it gives one.
fn pooled(
    mut rec: RequestRecord,
    body: &str,
    api: &dyn Protocol,
    asked: ItemsAsked,
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
    let inputs = asked.inputs;
    match (whole.items.unwrap_or(0), whole.highest_index) {
        (0, _) => {
            let msg = "the answer carried no items (no vectors or scores)".to_string();
            return failed_after(rec, ErrorKind::EmptyAnswer, msg);
        }
        (n, _) if n < asked.least => {
            let msg = format!("asked for {} items, the answer carried {n}", asked.least);
            return failed_after(rec, ErrorKind::Malformed, msg);
        }
        (n, _) if n > inputs => {
            let msg = format!("the answer carried {n} items for the {inputs} inputs sent");
            return failed_after(rec, ErrorKind::Malformed, msg);
        }
        (_, Some(i)) if i >= inputs => {
            let msg = format!("an item at index {i}, past the {inputs} inputs sent");
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

/// Turns the checked stream into the record — failure or success, token
/// counts and their sources — and the answer's text (what a next turn
/// carries back: the answer, not its reasoning).
fn settle(mut rec: RequestRecord, mut s: Stream) -> (RequestRecord, String) {
    prompt_counts(&mut rec, s.usage);
    let n_chunks = s.chunks.len() as u64;
    let answer = answer_of(&s.text, s.answer_bytes);
    let said = Said {
        thought: s.reasoner.reasoning_text(),
        answer,
        calls: &s.calls,
    };
    let total = output_count(&s, &said);
    rec.first_answer_at_us = s.first_answer_chunk.map(|i| s.chunks[i].at_us());
    rec.first_tool_call_at_us = s.first_call_chunk.map(|i| s.chunks[i].at_us());
    let hidden = count_reasoning(&mut rec, &s, &said, total);
    let streamed = match hidden {
        0 => total.0,
        n => total.0.saturating_sub(n).max(n_chunks),
    };
    let running: std::borrow::Cow<'_, [u64]> = match hidden {
        0 => std::borrow::Cow::Borrowed(&s.chunk_usage),
        n => s.chunk_usage.iter().map(|c| c.saturating_sub(n)).collect(),
    };
    let mut chunks = std::mem::take(&mut s.chunks);
    split_tokens(&mut chunks, &running, streamed);
    rec.output_tokens = if chunks.is_empty() && s.failure.is_some() {
        total.0.min(n_chunks)
    } else {
        total.0
    };
    rec.output_token_source = Some(total.1);
    rec.chunks = chunks;
    match s.failure.take() {
        Some((kind, msg)) => {
            rec.error_kind = Some(kind);
            rec.error = Some(msg);
        }
        None => s.judging.judge(&mut rec, answer, &s.calls),
    }
    heard_speech(&mut rec, answer, s.audio_seconds);
    let answer = answer.to_string();
    (rec, answer)
}

/// A transcript's words and the server's count of the audio's seconds,
/// into a speech request's facts.
fn heard_speech(rec: &mut RequestRecord, transcript: &str, server_audio_s: Option<f64>) {
    if let Some(sp) = rec.speech.as_mut() {
        sp.words = Some(transcript.split_whitespace().count() as u64);
        sp.server_audio_s = server_audio_s;
    }
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

/// What the finished stream says against itself, before anything is
/// counted: an end with no `[DONE]` or finish reason is broken; a usage, or
/// a running count, that its own text cannot hold is dropped (and said
/// so), never split into timings; no text at all is an empty answer —
/// unless the server thought to its limit without showing it.
fn check_stream(rec: &mut RequestRecord, s: &mut Stream) {
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
    let ended_by_body = s.api.ends_with_the_body() && !s.chunks.is_empty();
    if s.failure.is_none() && !s.done && rec.finish_reason.is_none() && !ended_by_body {
        s.failure = Some((
            ErrorKind::Stream,
            "stream ended without [DONE] or a finish reason".into(),
        ));
    }
    let carried = Carried {
        // Before the split, a chunk's second field is its text bytes.
        bytes: s.chunks.iter().map(|c| c.1 as u64).sum(),
        chunks: s.chunks.len() as u64,
        calls: s.calls.len() as u64,
        max_tokens: rec.requested_output_tokens,
        // A running count includes the reasoning the server never showed.
        hidden: match s.reasoning_bytes {
            0 => s.usage.and_then(|u| u.reasoning_tokens).unwrap_or(0),
            _ => 0,
        },
        summarised: s.reasoning_bytes > 0 && s.usage.is_some_and(|u| u.reasoning_tokens.is_none()),
    };
    // A failed stream's counts are not used, so not judged either (an
    // Anthropic stream cut off still holds message_start's early count).
    let judged = s.failure.is_none().then(|| {
        implausible(s.usage, &carried).or_else(|| implausible_running(&s.chunk_usage, &carried))
    });
    if let Some(why) = judged.flatten() {
        // One count of the server's that cannot be true puts its others in
        // doubt: neither its total nor its running count is used.
        rec.implausible_usage = Some(why);
        s.usage = None;
        s.chunk_usage = Vec::new();
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
/// else the tokenizer over the reasoning, the answer and the calls (never
/// fewer than the chunks), else the chunks. A failed request's usage and
/// text are not trusted.
fn output_count(s: &Stream, said: &Said<'_>) -> (u64, TokenSource) {
    let n_chunks = s.chunks.len() as u64;
    if s.failure.is_some() {
        return (n_chunks, TokenSource::Chunks);
    }
    match s.usage.and_then(|u| u.completion_tokens) {
        Some(n) => (n, TokenSource::ServerUsage),
        None => match local_output(said.thought, said.answer, said.calls) {
            Some(n) => (n.max(n_chunks), TokenSource::Tokenizer),
            None => (n_chunks, TokenSource::Chunks),
        },
    }
}

/// Records the reasoning's tokens and their source; the count of them the
/// server never streamed (0 when it streamed its thinking, or none).
fn count_reasoning(
    rec: &mut RequestRecord,
    s: &Stream,
    said: &Said<'_>,
    total: (u64, TokenSource),
) -> u64 {
    let Some((n, source)) = reasoning_count(s, said, total) else {
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
/// the thought counted locally (`Said::local_reasoning`); else its
/// reasoning chunks. Always held to what the output leaves an answer that
/// was sent (`Said::within`). `None` when it showed no reasoning at all.
fn reasoning_count(
    s: &Stream,
    said: &Said<'_>,
    total: (u64, TokenSource),
) -> Option<(u64, TokenSource)> {
    let (n, source) = match s.usage.and_then(|u| u.reasoning_tokens) {
        Some(0) if s.reasoning_bytes == 0 => return None,
        Some(n) => (n, TokenSource::ServerUsage),
        None if s.reasoning_bytes == 0 => return None,
        // A failed stream's text is not trusted, nor counted (on the runtime).
        None if s.failure.is_some() => (s.reasoning_chunks.max(1), TokenSource::Chunks),
        None if !s.chunk_usage.is_empty() && s.chunk_usage.len() == s.chunks.len() => {
            let before_answer = match s.first_answer_chunk {
                Some(i) => s.chunk_usage[i].saturating_sub(1),
                None => *s.chunk_usage.last()?,
            };
            (
                before_answer.max(s.reasoning_chunks),
                TokenSource::ServerChunks,
            )
        }
        None => match said.local_reasoning(total) {
            Some(n) => (n.max(s.reasoning_chunks), TokenSource::Tokenizer),
            None => (s.reasoning_chunks.max(1), TokenSource::Chunks),
        },
    };
    Some((said.within(n, total.0), source))
}

/// A request that failed before any stream: its record, and no answer.
pub(crate) fn fail(
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
