//! One realtime session (`--api openai-realtime`): a WebSocket, the clip
//! sent in chunks of `--audio-chunk-ms` at the speaker's pace (or as fast
//! as the socket takes them), the transcript's deltas timed as they come.
//!
//! The sequence is vLLM's: wait for `session.created`, send
//! `session.update` with the model, a first `input_audio_buffer.commit`
//! (which starts the transcription), the appends, then a commit with
//! `final: true`; read `transcription.delta`s until `transcription.done`.
//!
//! The protocol says nothing of which audio a delta covers, so a delta's
//! lag is reckoned from the transcript's words: after a delta the
//! transcript holds w of its W words, so it covers the first w/W of the
//! clip, and that audio was complete when the chunk holding its end was
//! sent. The lag is the delta's arrival minus that chunk's send. It rests
//! on the words being spread evenly over the speech (docs/metrics.md).

use crate::protocol::realtime::{append, commit, ServerEvent};
use crate::target::{Pacing, Target};
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokenscope_core::clock::Clock;
use tokenscope_core::record::{
    Chunk, ErrorKind, RealtimeSession, RequestRecord, Speech, TokenSource,
};
use tokenscope_workload::media::Kind;
use tokenscope_workload::workload::PromptSpec;
use tokio::time::{sleep_until, timeout_at, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// The most bytes one server event may hold: 1 MiB, far past any delta
/// or whole transcript. A larger frame fails the session (`too_large`).
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// What the session's reader saw.
#[derive(Default)]
struct Heard {
    /// Each delta's arrival (the run's clock, µs) and the transcript's
    /// words after it.
    deltas: Vec<(u64, u64)>,
    text: String,
    /// Words so far, and whether the text ends inside one: counted as
    /// each delta comes, never by reading the transcript again.
    words: u64,
    in_word: bool,
    done: Option<(u64, String, Option<crate::protocol::Usage>)>,
}

impl Heard {
    /// One delta's text, arrived `at`; within the transcript's and the
    /// deltas' bounds.
    fn take(&mut self, d: &str, at: u64) -> Result<(), Failure> {
        let max = crate::target::MAX_ANSWER_BYTES;
        if self.text.len() + d.len() > max {
            let msg = format!("the transcript outgrew {max} bytes");
            return Err((ErrorKind::TooLarge, msg));
        }
        if self.deltas.len() >= MAX_DELTAS {
            let msg = format!("more than {MAX_DELTAS} deltas in one session");
            return Err((ErrorKind::TooLarge, msg));
        }
        for c in d.chars() {
            let word = !c.is_whitespace();
            self.words += u64::from(word && !self.in_word);
            self.in_word = word;
        }
        self.text.push_str(d);
        self.deltas.push((at, self.words));
        Ok(())
    }
}

/// The most deltas one session may bring: a million (a delta a word, a
/// week of speech); past it the session fails `too_large`, so a server
/// that sends empty deltas forever costs bounded memory.
pub const MAX_DELTAS: usize = 1_000_000;

/// How long closing a finished session may take: a server that reads
/// nothing more cannot hold the client past it.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

type Failure = (ErrorKind, String);
type Tx = futures_util::stream::SplitSink<
    tokio_tungstenite::WebSocketStream<Box<dyn crate::http1::Duplex>>,
    Message,
>;

/// Runs one session; `rec` is the record of its start. Never panics;
/// always returns the record and the transcript. The session's record
/// starts at its connect (`sent_at_us`): the WebSocket's connect and
/// handshake are in its TTFT, and said apart as `connect_us`.
pub async fn run(
    target: &Target,
    clock: &Clock,
    mut rec: RequestRecord,
    (spec, own_head): (&PromptSpec, &[u8]),
    cancel: &CancellationToken,
) -> (RequestRecord, String) {
    let wav = spec
        .media
        .iter()
        .find(|m| m.kind == Kind::Audio)
        .and_then(|m| m.raw());
    let pcm = match wav
        .as_deref()
        .map(tokenscope_workload::audio_len::pcm16_16k)
    {
        None => {
            let why = "a realtime session needs an audio clip (--audio, or a dataset's audio file), sent inline";
            return crate::failure::fail(rec, clock, ErrorKind::Malformed, why.into());
        }
        Some(Err(why)) => return crate::failure::fail(rec, clock, ErrorKind::Malformed, why),
        Some(Ok(pcm)) => pcm,
    };
    let audio_s = pcm.len() as f64 / 32_000.0;
    // At the speaker's pace the clip's own length is speaking, not waiting.
    let speaking = match target.pacing.paced {
        true => Duration::from_secs_f64(audio_s),
        false => Duration::ZERO,
    };
    let deadline = Instant::now() + target.timeout + speaking;
    rec.sent_at_us = clock.now_us();
    let opened = tokio::select! {
        biased;
        _ = cancel.cancelled() => Err((ErrorKind::Cancelled, "cancelled before the session".to_string())),
        o = open(target, own_head, deadline) => o,
    };
    let (mut tx, mut rx, status) = match opened {
        Ok(o) => o,
        Err((kind, msg)) => return crate::failure::fail(rec, clock, kind, msg),
    };
    rec.status = Some(status);
    let connect_us = clock.now_us().saturating_sub(rec.sent_at_us);
    let mut spoken = Spoken::default();
    let heard = {
        let writer = speak(&mut tx, (target, clock), pcm, &mut spoken);
        let reader = read_until_done(&mut rx, clock, target.idle_timeout, deadline);
        tokio::pin!(writer, reader);
        let mut writing = true;
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break Err((ErrorKind::Cancelled, "cancelled mid-session".to_string())),
                w = &mut writer, if writing => {
                    writing = false;
                    if let Err(e) = w {
                        break Err((ErrorKind::Stream, format!("sending audio: {e}")));
                    }
                }
                r = &mut reader => break r,
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_WITHIN, tx.close()).await;
    match heard {
        Ok(h) => settle(rec, h, (&spoken, audio_s), (target.pacing, connect_us)),
        Err((kind, msg)) => crate::failure::fail(rec, clock, kind, msg),
    }
}

/// Connects, upgrades to a WebSocket and waits for `session.created`,
/// each step within the idle timeout and the deadline.
async fn open(
    target: &Target,
    own_head: &[u8],
    deadline: Instant,
) -> Result<(Tx, Rx, u16), Failure> {
    let until = deadline.min(Instant::now() + target.idle_timeout);
    let connected = timeout_at(until, async {
        let (stream, request) = target
            .http
            .websocket(own_head)
            .await
            .map_err(|e| (ErrorKind::Connect, e.to_string()))?;
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(MAX_EVENT_BYTES))
            .max_frame_size(Some(MAX_EVENT_BYTES));
        tokio_tungstenite::client_async_with_config(request, stream, Some(config))
            .await
            .map_err(|e| (ErrorKind::Connect, format!("WebSocket handshake: {e}")))
    })
    .await;
    let (ws, response) = match connected {
        Err(_) => return Err((ErrorKind::Timeout, "no WebSocket session in time".into())),
        Ok(c) => c?,
    };
    let (tx, mut rx) = ws.split();
    let until = deadline.min(Instant::now() + target.idle_timeout);
    match timeout_at(until, next_event(&mut rx)).await {
        Ok(Ok(ServerEvent::Created)) => Ok((tx, rx, response.status().as_u16())),
        Ok(Ok(other)) => Err((
            ErrorKind::Malformed,
            format!("the session began with {other:?}, not session.created"),
        )),
        Ok(Err(e)) => Err(e),
        Err(_) => Err((ErrorKind::Timeout, "no session.created in time".into())),
    }
}

/// What the writer did: each chunk's send, and the final commit's.
#[derive(Default)]
struct Spoken {
    sent: Vec<u64>,
    final_at: Option<u64>,
}

/// The session's events out: `session.update`, the first commit, the
/// chunks (at the speaker's pace, or at once), the final commit.
async fn speak(
    tx: &mut Tx,
    (target, clock): (&Target, &Clock),
    pcm: &[u8],
    spoken: &mut Spoken,
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    let pacing = target.pacing;
    let request = crate::protocol::Request::conversation(&target.model, &target.shape, [], "");
    let update = String::from_utf8_lossy(&target.api.body(&request)).into_owned();
    tx.send(Message::text(update)).await?;
    tx.send(Message::text(commit(false))).await?;
    let chunk_bytes = (pacing.chunk_ms as usize * 32).max(2);
    spoken.sent.reserve(pcm.len().div_ceil(chunk_bytes));
    let start = Instant::now();
    for (k, chunk) in pcm.chunks(chunk_bytes).enumerate() {
        if pacing.paced {
            sleep_until(start + Duration::from_millis(k as u64 * pacing.chunk_ms as u64)).await;
        }
        spoken.sent.push(clock.now_us());
        tx.send(Message::text(append(chunk))).await?;
    }
    spoken.final_at = Some(clock.now_us());
    tx.send(Message::text(commit(true))).await
}

/// The transcript's figures into the record.
fn settle(
    mut rec: RequestRecord,
    heard: Heard,
    (spoken, audio_s): (&Spoken, f64),
    (pacing, connect_us): (Pacing, u64),
) -> (RequestRecord, String) {
    let (sent, final_at) = (spoken.sent.as_slice(), spoken.final_at);
    let Some((done_at, done_text, usage)) = heard.done else {
        rec.done_at_us = heard.deltas.last().map_or(rec.sent_at_us, |d| d.0);
        rec.error_kind = Some(ErrorKind::Stream);
        rec.error = Some("the session ended before transcription.done".into());
        return (rec, String::new());
    };
    let text = match done_text.is_empty() {
        true => heard.text,
        false => done_text,
    };
    let words = text.split_whitespace().count() as u64;
    rec.done_at_us = done_at;
    rec.first_token_at_us = heard.deltas.first().map(|d| d.0);
    rec.first_answer_at_us = rec.first_token_at_us;
    let mut before = 0;
    rec.chunks = heard
        .deltas
        .iter()
        .map(|&(at, w)| {
            let new = w.saturating_sub(before).max(1);
            before = w;
            Chunk(at, new.min(u32::MAX as u64) as u32)
        })
        .collect();
    let counted: u64 = rec.chunks.iter().map(|c| c.1 as u64).sum();
    match usage.and_then(|u| u.completion_tokens) {
        Some(n) => {
            (rec.output_tokens, rec.output_token_source) = (n, Some(TokenSource::ServerUsage))
        }
        None => (rec.output_tokens, rec.output_token_source) = (counted, Some(TokenSource::Chunks)),
    }
    if let Some(p) = usage.and_then(|u| u.prompt_tokens) {
        (rec.input_tokens, rec.input_token_source) = (Some(p), Some(TokenSource::ServerUsage));
    }
    rec.finish_reason = Some("stop".into());
    let lags = lags(
        &heard.deltas,
        words.max(heard.deltas.last().map_or(0, |d| d.1)),
        sent,
        (audio_s, pacing.chunk_ms),
    );
    rec.speech = Some(Box::new(Speech {
        audio_s,
        server_audio_s: None,
        words: Some(words),
        realtime: Some(RealtimeSession {
            chunk_ms: pacing.chunk_ms,
            paced: pacing.paced,
            chunks: sent.len() as u32,
            connect_us,
            lags_us: lags,
            final_to_done_us: final_at.map(|f| done_at.saturating_sub(f)),
        }),
    }));
    (rec, text)
}

/// Each delta's lag behind the audio it covers: its arrival minus the send
/// of the chunk that completed the first w/W of the clip (see the module's
/// doc). `deltas` are (arrival, words so far); `sent` each chunk's send.
pub fn lags(
    deltas: &[(u64, u64)],
    words: u64,
    sent: &[u64],
    (audio_s, chunk_ms): (f64, u32),
) -> Vec<u64> {
    if words == 0 || sent.is_empty() {
        return Vec::new();
    }
    let chunk_s = chunk_ms as f64 / 1000.0;
    deltas
        .iter()
        .map(|&(at, w)| {
            let covered = w.min(words) as f64 / words as f64 * audio_s;
            // The chunk whose end reaches `covered` (a hair under a boundary is the chunk before).
            let k = ((covered / chunk_s - 1e-6).ceil() as i64 - 1).clamp(0, sent.len() as i64 - 1);
            at.saturating_sub(sent[k as usize])
        })
        .collect()
}

type Rx = futures_util::stream::SplitStream<
    tokio_tungstenite::WebSocketStream<Box<dyn crate::http1::Duplex>>,
>;

/// The next server event that is text; pings are answered by the library.
async fn next_event(rx: &mut Rx) -> Result<ServerEvent, (ErrorKind, String)> {
    loop {
        let msg = match rx.next().await {
            None => return Err((ErrorKind::Stream, "the server closed the session".into())),
            Some(Err(e)) => return Err(ws_error(e)),
            Some(Ok(m)) => m,
        };
        match msg {
            Message::Text(t) => {
                return ServerEvent::read(&t).map_err(|e| (ErrorKind::Malformed, e.to_string()))
            }
            Message::Close(frame) => {
                let why = frame
                    .map(|f| format!(" ({} {})", u16::from(f.code), f.reason))
                    .unwrap_or_default();
                return Err((
                    ErrorKind::Stream,
                    format!("the server closed the session{why}"),
                ));
            }
            Message::Binary(_) => {
                return Err((
                    ErrorKind::Malformed,
                    "a binary frame where the protocol sends JSON text".into(),
                ))
            }
            _ => continue,
        }
    }
}

fn ws_error(e: tokio_tungstenite::tungstenite::Error) -> (ErrorKind, String) {
    use tokio_tungstenite::tungstenite::Error as E;
    match e {
        E::Capacity(c) => (
            ErrorKind::TooLarge,
            format!("a server event past {MAX_EVENT_BYTES} bytes: {c}"),
        ),
        other => (ErrorKind::Stream, other.to_string()),
    }
}

/// Reads deltas until `transcription.done`, an error, a stall past
/// `idle`, or the deadline. The transcript is bounded by
/// [`crate::target::MAX_ANSWER_BYTES`].
async fn read_until_done(
    rx: &mut Rx,
    clock: &Clock,
    idle: Duration,
    deadline: Instant,
) -> Result<Heard, (ErrorKind, String)> {
    let mut heard = Heard::default();
    loop {
        let until = deadline.min(Instant::now() + idle);
        let event = match timeout_at(until, next_event(rx)).await {
            Err(_) if Instant::now() >= deadline => {
                return Err((ErrorKind::Timeout, "session exceeded --timeout".into()))
            }
            Err(_) => {
                return Err((
                    ErrorKind::Timeout,
                    "session stalled past --idle-timeout".into(),
                ))
            }
            Ok(e) => e?,
        };
        let at = clock.now_us();
        match event {
            // An empty delta says nothing: not kept, not counted.
            ServerEvent::Delta(d) if d.is_empty() => {}
            ServerEvent::Delta(d) => heard.take(&d, at)?,
            ServerEvent::Done { text, usage } => {
                heard.done = Some((at, text, usage));
                return Ok(heard);
            }
            ServerEvent::Error(e) => return Err((ErrorKind::ServerError, e)),
            ServerEvent::Created | ServerEvent::Other => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delta_lags_the_chunk_that_completed_its_words() {
        // 1 s of audio in 100 ms chunks sent every 100 ms; two words a chunk.
        let sent: Vec<u64> = (0..10).map(|k| 1_000 + k * 100_000).collect();
        let deltas: Vec<(u64, u64)> = (0..10)
            .map(|k| (sent[k] + 30_000 + k as u64 * 1_000, 2 * (k as u64 + 1)))
            .collect();
        let lags = lags(&deltas, 20, &sent, (1.0, 100));
        assert_eq!(
            lags,
            (0..10).map(|k| 30_000 + k * 1_000).collect::<Vec<u64>>()
        );
    }

    #[test]
    fn words_are_counted_across_deltas_that_split_them() {
        let mut h = Heard::default();
        for (k, d) in [" hel", "lo wor", "ld", " ", "again"].iter().enumerate() {
            h.take(d, k as u64).unwrap();
        }
        let words: Vec<u64> = h.deltas.iter().map(|d| d.1).collect();
        assert_eq!(words, [1, 2, 2, 2, 3]);
        assert_eq!(h.words, h.text.split_whitespace().count() as u64);
    }

    #[test]
    fn a_session_of_endless_deltas_is_cut_at_its_bounds() {
        let mut h = Heard {
            deltas: vec![(0, 0); MAX_DELTAS],
            ..Heard::default()
        };
        assert_eq!(h.take("a", 1).unwrap_err().0, ErrorKind::TooLarge);
        let mut long = Heard {
            text: "a".repeat(crate::target::MAX_ANSWER_BYTES),
            ..Heard::default()
        };
        assert_eq!(long.take("b", 1).unwrap_err().0, ErrorKind::TooLarge);
    }

    #[test]
    fn counts_past_the_transcript_and_empty_sessions_do_not_wrap() {
        assert!(lags(&[(5, 3)], 0, &[1], (1.0, 100)).is_empty());
        assert!(lags(&[(5, 3)], 3, &[], (1.0, 100)).is_empty());
        // More words than the total (a delta after a short done text): the last chunk.
        assert_eq!(lags(&[(500, 9)], 3, &[100, 200], (0.2, 100)), vec![300]);
        // An arrival stamped before its chunk's send (clock steps): 0, not a wrap.
        assert_eq!(lags(&[(50, 1)], 1, &[100], (0.1, 100)), vec![0]);
    }
}
