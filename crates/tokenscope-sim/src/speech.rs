//! The speech endpoints both built-in servers speak, in OpenAI's and
//! vLLM's shapes: `/v1/audio/transcriptions` and `/v1/audio/translations`
//! (a multipart upload, answered whole or streamed as vLLM streams it),
//! `/v1/audio/speech` (WAV bytes back) and the Realtime WebSocket at
//! `/v1/realtime` (vLLM's events).
//!
//! What a request costs is the server's [`Model`]: the exact server's
//! known timings, or the engine's steps. The shapes and the server's own
//! stamps (kept in a [`SpeechLog`], read at `GET /speech-log`) are here,
//! once, so both servers answer alike.
//!
//! The sizes, stated so tests can reckon them:
//! - a transcript has [`WORDS_PER_AUDIO_SECOND`] words a second of audio
//!   (150 words a minute, conversational speech), at least one, one token
//!   each; `max_completion_tokens` sets it instead;
//! - speech is [`SPEECH_SECONDS_PER_WORD`] a word of the input, made in
//!   tokens of [`AUDIO_SECONDS_PER_TOKEN`] (a 12.5 Hz codec), 24 kHz 16-bit
//!   mono WAV;
//! - a realtime session's append of any length is one delta of one word.

use crate::http::bad_request;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Multipart, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;

pub const WORDS_PER_AUDIO_SECOND: f64 = 2.5;
pub const SPEECH_SECONDS_PER_WORD: f64 = 0.4;
pub const AUDIO_SECONDS_PER_TOKEN: f64 = 0.08;
pub const SPEECH_SAMPLE_RATE: u32 = 24_000;

/// The most chunks one realtime session may append (a 100 ms chunk: 2.7
/// hours); past it the session is closed with an error.
pub const MAX_SESSION_CHUNKS: usize = 100_000;

/// One piece of work for the model.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    /// Seconds of audio the encoder reads (0 for text to speech).
    pub audio_s: f64,
    /// The whole clip was padded to the encoder's window (Whisper's 30 s),
    /// as a transcription's is; a realtime chunk is read as it is.
    pub padded: bool,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub arrived: Instant,
}

/// How a server does a job: one message on the receiver a token, as each
/// is ready; closed after the last (or when the job fails).
pub trait Model: Send + Sync + 'static {
    fn start(&self, job: Job) -> mpsc::UnboundedReceiver<()>;
}

/// The server's own stamps of its speech requests (the first
/// [`SpeechLog::KEPT`]), on the host's monotonic clock: what a client's
/// figures are checked against.
#[derive(Debug, Default)]
pub struct SpeechLog {
    kept: Mutex<Vec<Value>>,
}

impl SpeechLog {
    pub const KEPT: usize = 10_000;

    fn keep(&self, entry: Value) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < Self::KEPT {
            kept.push(entry);
        }
    }

    pub fn entries(&self) -> Vec<Value> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn mono(t: Instant) -> u64 {
    tokenscope_core::clock::monotonic_us(t).unwrap_or_default()
}

struct Speech {
    model: Arc<dyn Model>,
    name: String,
    log: Arc<SpeechLog>,
}

/// The four endpoints and `GET /speech-log`, served by `model`.
pub fn routes(model: Arc<dyn Model>, name: &str, log: Arc<SpeechLog>) -> Router {
    let state = Arc::new(Speech {
        model,
        name: name.into(),
        log,
    });
    Router::new()
        .route(
            "/v1/audio/transcriptions",
            post(|State(s): State<Arc<Speech>>, form: Multipart| transcribe(s, form, false)),
        )
        .route(
            "/v1/audio/translations",
            post(|State(s): State<Arc<Speech>>, form: Multipart| transcribe(s, form, true)),
        )
        .route("/v1/audio/speech", post(speak))
        .route("/v1/realtime", get(realtime))
        .route(
            "/speech-log",
            get(|State(s): State<Arc<Speech>>| async move { Json(s.log.entries()) }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
        .with_state(state)
}

/// What a transcription's form said.
#[derive(Default)]
struct Form {
    file: Option<(Vec<u8>, String)>,
    stream: bool,
    include_usage: bool,
    max_tokens: Option<u64>,
    model: Option<String>,
}

async fn read_form(mut form: Multipart) -> Result<Form, String> {
    let mut out = Form::default();
    while let Some(field) = form.next_field().await.map_err(|e| e.to_string())? {
        let name = field.name().unwrap_or("").to_string();
        if name == "file" {
            let by_name = field.file_name().map(mime_of_name);
            let mime = field
                .content_type()
                .filter(|c| c.starts_with("audio/"))
                .map(str::to_string)
                .or(by_name)
                .unwrap_or_else(|| "audio/wav".into());
            let bytes = field.bytes().await.map_err(|e| e.to_string())?;
            out.file = Some((bytes.to_vec(), mime));
            continue;
        }
        let text = field.text().await.map_err(|e| e.to_string())?;
        match name.as_str() {
            "stream" => out.stream = text == "true",
            "stream_include_usage" => out.include_usage = text == "true",
            "max_completion_tokens" => out.max_tokens = text.parse().ok(),
            "model" => out.model = Some(text),
            _ => {}
        }
    }
    Ok(out)
}

fn mime_of_name(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    match lower.rsplit('.').next() {
        Some("mp3") => "audio/mpeg",
        Some("flac") => "audio/flac",
        _ => "audio/wav",
    }
    .into()
}

/// `/v1/audio/transcriptions` and `/v1/audio/translations`.
async fn transcribe(s: Arc<Speech>, form: Multipart, translate: bool) -> Response {
    let arrived = Instant::now();
    let form = match read_form(form).await {
        Ok(f) => f,
        Err(why) => return bad_request(&format!("the form could not be read: {why}")),
    };
    let Some((bytes, mime)) = &form.file else {
        return bad_request("the form has no `file`: the audio to transcribe");
    };
    let audio_s = match tokenscope_workload::audio_len::seconds(bytes, mime) {
        Ok(a) => a,
        Err(why) => return bad_request(&format!("the audio cannot be read: {why}")),
    };
    // A transcript's length is bounded: a decoder writes at most a few
    // hundred tokens a window, and a timer's arithmetic stays in range.
    let words = form
        .max_tokens
        .unwrap_or((audio_s * WORDS_PER_AUDIO_SECOND).ceil() as u64)
        .clamp(1, 1 << 20);
    let prompt_tokens = (audio_s * 50.0).ceil() as u64;
    let job = Job {
        audio_s,
        padded: true,
        prompt_tokens,
        output_tokens: words,
        arrived,
    };
    let mut ready = s.model.start(job);
    let kind = if translate {
        "translation"
    } else {
        "transcription"
    };
    let log = s.log.clone();
    let entry = move |first: Instant, last: Instant| {
        json!({"kind": kind, "audio_s": audio_s, "words": words,
            "arrived_mono_us": mono(arrived), "first_sent_mono_us": mono(first),
            "last_sent_mono_us": mono(last)})
    };
    if !form.stream {
        let mut n = 0;
        while ready.recv().await.is_some() {
            n += 1;
        }
        let now = Instant::now();
        log.keep(entry(now, now));
        return Json(json!({
            "text": crate::openai::text(0, n).trim_start(),
            "usage": {"type": "duration", "seconds": audio_s.ceil() as u64},
            "timings": {"arrived_mono_us": mono(arrived), "last_sent_mono_us": mono(now)},
        }))
        .into_response();
    }
    let model = form.model.unwrap_or_else(|| s.name.clone());
    let chunk = move |delta: Value, usage: Option<Value>| {
        let mut c = json!({"id": "trsc-sim", "object": "transcription.chunk", "created": 0,
            "model": model, "choices": [delta]});
        if let Some(u) = usage {
            c["choices"] = json!([]);
            c["usage"] = u;
        }
        bytes::Bytes::from(format!("data: {c}\n\n"))
    };
    let include_usage = form.include_usage;
    let body = async_stream(move |tx| async move {
        let (mut i, mut first, mut last) = (0u64, None, arrived);
        while ready.recv().await.is_some() {
            let word = crate::openai::text(i, i + 1);
            let delta = json!({"index": 0, "delta": {"content": word}, "finish_reason": null});
            last = Instant::now();
            first.get_or_insert(last);
            if tx.send(chunk(delta, None)).is_err() {
                return;
            }
            i += 1;
        }
        let end = json!({"index": 0, "delta": {}, "finish_reason": "stop"});
        let _ = tx.send(chunk(end, None));
        let first = first.unwrap_or(last);
        if include_usage {
            let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": i,
                "total_tokens": prompt_tokens + i});
            let _ = tx.send(chunk(json!({}), Some(usage)));
        }
        let _ = tx.send(bytes::Bytes::from_static(b"data: [DONE]\n\n"));
        log.keep(entry(first, last));
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .expect("a valid response")
}

/// A streamed body written by `write` through the sender it is given.
fn async_stream<F, Fut>(write: F) -> Body
where
    F: FnOnce(mpsc::UnboundedSender<bytes::Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(write(tx));
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        let b = rx.recv().await?;
        Some((Ok::<_, std::io::Error>(b), rx))
    }))
}

/// A WAV header for `samples` of 24 kHz 16-bit mono.
fn wav_header(samples: u64) -> Vec<u8> {
    let data = (samples * 2).min(u32::MAX as u64 - 36) as u32;
    let rate = SPEECH_SAMPLE_RATE;
    let mut h = Vec::with_capacity(44);
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&(36 + data).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&(rate * 2).to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&16u16.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data.to_le_bytes());
    h
}

/// `/v1/audio/speech`: the input said, as WAV streamed a token at a time.
async fn speak(State(s): State<Arc<Speech>>, body: bytes::Bytes) -> Response {
    let arrived = Instant::now();
    let body = match crate::http::parse_body(&body) {
        Ok(b) => b,
        Err(msg) => return bad_request(&msg),
    };
    let Some(input) = body["input"].as_str() else {
        return bad_request("`input`, the text to say, is missing");
    };
    if let Some(f) = body["response_format"].as_str().filter(|f| *f != "wav") {
        return bad_request(&format!(
            "response_format `{f}`: this server writes wav only"
        ));
    }
    let words = input.split_whitespace().count().max(1) as u64;
    let audio_s = words as f64 * SPEECH_SECONDS_PER_WORD;
    let tokens = (audio_s / AUDIO_SECONDS_PER_TOKEN).round() as u64;
    let samples_per_token = (AUDIO_SECONDS_PER_TOKEN * SPEECH_SAMPLE_RATE as f64) as u64;
    let job = Job {
        audio_s: 0.0,
        padded: false,
        prompt_tokens: words,
        output_tokens: tokens,
        arrived,
    };
    let mut ready = s.model.start(job);
    let log = s.log.clone();
    let body = async_stream(move |tx| async move {
        let (mut first, mut last, mut n) = (None, arrived, 0u64);
        while ready.recv().await.is_some() {
            let mut piece = match n {
                0 => wav_header(tokens * samples_per_token),
                _ => Vec::new(),
            };
            piece.resize(piece.len() + samples_per_token as usize * 2, 0);
            last = Instant::now();
            first.get_or_insert(last);
            if tx.send(piece.into()).is_err() {
                return;
            }
            n += 1;
        }
        let first = first.unwrap_or(last);
        log.keep(json!({"kind": "speech", "audio_s": audio_s, "tokens": n,
            "arrived_mono_us": mono(arrived), "first_sent_mono_us": mono(first),
            "last_sent_mono_us": mono(last)}));
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "audio/wav")
        .body(body)
        .expect("a valid response")
}

/// `/v1/realtime`: a session of vLLM's Realtime API.
async fn realtime(State(s): State<Arc<Speech>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(16 << 20)
        .on_upgrade(move |socket| session(s, socket))
}

/// What the reader hands the writer, in order.
enum Out {
    /// A chunk's job: its delta when its tokens are ready.
    Delta(mpsc::UnboundedReceiver<()>),
    /// The final commit: `transcription.done` after the last delta.
    Done,
    Error(String, &'static str),
}

async fn session(s: Arc<Speech>, socket: WebSocket) {
    let (mut tx, mut rx) = socket.split();
    let created = json!({"type": "session.created", "id": "sess-sim", "created": 0});
    if tx
        .send(Message::Text(created.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    let (out, mut queue) = mpsc::unbounded_channel::<Out>();
    let arrivals = Arc::new(Mutex::new(Vec::<u64>::new()));
    let final_at = Arc::new(Mutex::new(None::<u64>));
    let (log, arr, fin) = (s.log.clone(), arrivals.clone(), final_at.clone());
    let writer = tokio::spawn(async move {
        let mut sent = Vec::new();
        let mut words = 0u64;
        while let Some(o) = queue.recv().await {
            let msg = match o {
                Out::Delta(mut ready) => {
                    while ready.recv().await.is_some() {}
                    let word = crate::openai::text(words, words + 1);
                    words += 1;
                    json!({"type": "transcription.delta", "delta": word})
                }
                Out::Error(e, code) => json!({"type": "error", "error": e, "code": code}),
                Out::Done => {
                    let chunks = sent.len() as u64;
                    json!({"type": "transcription.done",
                        "text": crate::openai::text(0, words).trim_start(),
                        "usage": {"prompt_tokens": chunks, "completion_tokens": words,
                            "total_tokens": chunks + words}})
                }
            };
            let done = msg["type"] == "transcription.done";
            let stamp = mono(Instant::now());
            if tx
                .send(Message::Text(msg.to_string().into()))
                .await
                .is_err()
            {
                return;
            }
            if msg["type"] == "transcription.delta" {
                sent.push(stamp);
            }
            if done {
                let arrived = arr.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let fin = *fin.lock().unwrap_or_else(|p| p.into_inner());
                log.keep(
                    json!({"kind": "realtime", "chunks_arrived_mono_us": arrived,
                    "deltas_sent_mono_us": sent, "final_arrived_mono_us": fin,
                    "done_sent_mono_us": stamp}),
                );
                return;
            }
        }
    });
    while let Some(Ok(msg)) = rx.next().await {
        let Message::Text(text) = msg else {
            if matches!(msg, Message::Close(_)) {
                break;
            }
            continue;
        };
        let arrived = Instant::now();
        let event: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let sent = match event["type"].as_str() {
            Some("session.update") => continue,
            Some("input_audio_buffer.append") => {
                let audio = event["audio"]
                    .as_str()
                    .and_then(|a| base64::engine::general_purpose::STANDARD.decode(a).ok());
                let mut arrivals = arrivals.lock().unwrap_or_else(|p| p.into_inner());
                match audio {
                    None => out.send(Out::Error(
                        "`audio` is not base64 PCM16".into(),
                        "invalid_audio",
                    )),
                    Some(_) if arrivals.len() >= MAX_SESSION_CHUNKS => {
                        let _ = out.send(Out::Error(
                            "too many chunks in one session".into(),
                            "too_long",
                        ));
                        break;
                    }
                    Some(pcm) => {
                        arrivals.push(mono(arrived));
                        let audio_s = pcm.len() as f64 / 32_000.0;
                        let job = Job {
                            audio_s,
                            padded: false,
                            prompt_tokens: (audio_s * 12.5).ceil().max(1.0) as u64,
                            output_tokens: 1,
                            arrived,
                        };
                        out.send(Out::Delta(s.model.start(job)))
                    }
                }
            }
            Some("input_audio_buffer.commit") if event["final"] == true => {
                *final_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(mono(arrived));
                out.send(Out::Done)
            }
            Some("input_audio_buffer.commit") => continue,
            Some(other) => out.send(Out::Error(
                format!("Unknown event type: {other}"),
                "unknown_event",
            )),
            None => out.send(Out::Error("Invalid JSON".into(), "invalid_json")),
        };
        if sent.is_err() {
            break;
        }
    }
    drop(out);
    let _ = writer.await;
}

/// A speech model's audio encoder, charged by the engine as prefill of
/// equal cost: 2 × its parameters FLOPs a frame, its frames a second of
/// audio, a transcription padded to its window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AudioEncoder {
    pub name: &'static str,
    pub params_b: f64,
    pub frames_per_s: f64,
    /// Whisper reads every clip as whole 30-second windows.
    pub window_s: Option<f64>,
    pub source: &'static str,
}

pub const AUDIO_ENCODERS: [AudioEncoder; 1] = [AudioEncoder {
    name: "whisper-large-v3",
    params_b: 0.635,
    frames_per_s: 50.0,
    window_s: Some(30.0),
    source: "Radford et al., Robust Speech Recognition via Large-Scale Weak Supervision (2022), §2.2 and Table 1 (large: 32 encoder layers of width 1280; 30-second windows, 80-bin log-Mel at 100 frames/s, halved to 1,500 encoder positions by the stride-2 convolution); openai/whisper-large-v3 config.json (d_model 1280, encoder_layers 32, max_source_positions 1500, 128 Mel bins); encoder ≈ 635M of the model's 1.55B parameters",
}];

impl AudioEncoder {
    /// The served model's encoder: its catalogue entry's, else Whisper
    /// large-v3's (any model behind the speech endpoints needs one).
    pub fn of(model: &crate::engine::catalogue::Model) -> &'static AudioEncoder {
        model
            .audio
            .as_deref()
            .and_then(|n| {
                AUDIO_ENCODERS
                    .iter()
                    .find(|e| e.name.eq_ignore_ascii_case(n))
            })
            .unwrap_or(&AUDIO_ENCODERS[0])
    }

    /// The encoder's work on `job`'s audio as prefill tokens of a model of
    /// `active_params_b` (each such token costs 2 × its parameters FLOPs).
    pub fn prefill_tokens(&self, job: Job, active_params_b: f64) -> u64 {
        let seconds = match (self.window_s, job.padded) {
            (Some(w), true) => (job.audio_s / w).ceil().max(1.0) * w,
            _ => job.audio_s,
        };
        let frames = seconds * self.frames_per_s;
        (frames * self.params_b / active_params_b.max(1e-3))
            .ceil()
            .clamp(0.0, u32::MAX as f64 / 4.0) as u64
    }
}

/// Known timings: token i of a job is ready at its start + `ttft` +
/// i × `itl`, its start its arrival (or, with `slots`, when one is free).
pub struct Timed {
    pub ttft: std::time::Duration,
    pub itl: std::time::Duration,
    pub slots: Option<Arc<tokio::sync::Semaphore>>,
}

impl Model for Timed {
    fn start(&self, job: Job) -> mpsc::UnboundedReceiver<()> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (ttft, itl, slots) = (self.ttft, self.itl, self.slots.clone());
        tokio::spawn(async move {
            let _slot = match slots {
                Some(s) => s.acquire_owned().await.ok(),
                None => None,
            };
            let start = Instant::now().max(job.arrived);
            let start = if _slot.is_some() { start } else { job.arrived };
            for i in 0..job.output_tokens {
                crate::timer::sleep_until(start + ttft + itl * i as u32).await;
                if tx.send(()).is_err() {
                    return;
                }
            }
        });
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whisper_pads_a_transcription_to_its_window_and_not_a_chunk() {
        let e = &AUDIO_ENCODERS[0];
        let job = |audio_s, padded| Job {
            audio_s,
            padded,
            prompt_tokens: 1,
            output_tokens: 1,
            arrived: Instant::now(),
        };
        // 5 s is read as 30 s: 1,500 frames of a 0.635B encoder, as prefill of a 0.635B model.
        assert_eq!(e.prefill_tokens(job(5.0, true), 0.635), 1500);
        assert_eq!(e.prefill_tokens(job(31.0, true), 0.635), 3000);
        assert_eq!(e.prefill_tokens(job(0.1, false), 0.635), 5);
    }

    #[test]
    fn the_wav_header_says_its_samples() {
        let h = wav_header(24_000);
        let mut b = h.clone();
        b.resize(44 + 48_000, 0);
        assert_eq!(tokenscope_workload::audio_len::wav(&b).unwrap(), 1.0);
    }
}
