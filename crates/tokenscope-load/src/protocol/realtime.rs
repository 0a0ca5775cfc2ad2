//! `openai-realtime`: vLLM's Realtime API, a WebSocket at `/v1/realtime`.
//!
//! The client's events: `session.update` (the model), `input_audio_buffer.
//! append` (base64 PCM16, 16 kHz mono), `input_audio_buffer.commit` (the
//! first starts the transcription; one with `final: true` ends the audio).
//! The server's: `session.created` on connecting, `transcription.delta`
//! with the new text, `transcription.done` with the whole text and usage,
//! `error` with its message and code. The session itself is driven by
//! [`crate::realtime_session`]; this module writes and reads the events.

use super::{Event, Malformed, MediaKind, Protocol, Request, Usage};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy)]
pub struct OpenaiRealtime;

impl Protocol for OpenaiRealtime {
    fn name(&self) -> &'static str {
        "openai-realtime"
    }

    fn path(&self) -> &'static str {
        "/v1/realtime"
    }

    /// The session's first event: `session.update` naming the model.
    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut obj = r.extra.clone();
        obj.insert("type".into(), json!("session.update"));
        obj.insert("model".into(), json!(r.model));
        serde_json::to_vec(&obj).expect("a JSON value serializes")
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({"type": "session.update", "model": model})
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        match ServerEvent::read(data)? {
            ServerEvent::Delta(d) => emit(Event::Answer(d.into())),
            ServerEvent::Done { usage, .. } => {
                if let Some(u) = usage {
                    emit(Event::Usage(u));
                }
                emit(Event::Finish("stop".into()));
            }
            ServerEvent::Error(e) => emit(Event::Error(e)),
            ServerEvent::Created | ServerEvent::Other => {}
        }
        Ok(())
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        self.stream_event(body, emit)
    }

    fn media_kinds(&self) -> &'static [MediaKind] {
        &[MediaKind::Audio]
    }

    fn audio_in(&self) -> bool {
        true
    }

    fn websocket(&self) -> bool {
        true
    }
}

/// One server event of a realtime session.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    Created,
    Delta(String),
    Done {
        text: String,
        usage: Option<Usage>,
    },
    Error(String),
    /// An event this client does not time (`session.updated`, a server's own).
    Other,
}

impl ServerEvent {
    /// Reads one text frame; the wrong shape is malformed, saying what came.
    pub fn read(data: &str) -> Result<ServerEvent, Malformed> {
        let v: Value = serde_json::from_str(data).map_err(|e| Malformed::of(e, data))?;
        let bad = |why: &str| Malformed {
            reason: why.into(),
            snippet: data.chars().take(80).collect(),
        };
        let kind = v["type"]
            .as_str()
            .ok_or_else(|| bad("an event without `type`"))?;
        Ok(match kind {
            "session.created" => ServerEvent::Created,
            "transcription.delta" => ServerEvent::Delta(
                v["delta"]
                    .as_str()
                    .ok_or_else(|| bad("a delta without its `delta` text"))?
                    .to_string(),
            ),
            "transcription.done" => ServerEvent::Done {
                text: v["text"].as_str().unwrap_or("").to_string(),
                usage: usage(&v["usage"]),
            },
            "error" => {
                let said = match &v["error"] {
                    Value::String(s) => s.clone(),
                    e => e["message"]
                        .as_str()
                        .unwrap_or("an error event")
                        .to_string(),
                };
                let code = v["code"]
                    .as_str()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default();
                ServerEvent::Error(format!("{said}{code}"))
            }
            _ => ServerEvent::Other,
        })
    }
}

fn usage(u: &Value) -> Option<Usage> {
    let count = |k: &str| u[k].as_u64();
    let usage = Usage {
        prompt_tokens: count("prompt_tokens").or(count("input_tokens")),
        completion_tokens: count("completion_tokens").or(count("output_tokens")),
        ..Usage::default()
    };
    (usage != Usage::default()).then_some(usage)
}

/// The client's `input_audio_buffer.append` of one chunk of PCM16.
pub fn append(pcm: &[u8]) -> String {
    use base64::Engine as _;
    let mut s = String::with_capacity(pcm.len() * 4 / 3 + 64);
    s.push_str(r#"{"type":"input_audio_buffer.append","audio":""#);
    base64::engine::general_purpose::STANDARD.encode_string(pcm, &mut s);
    s.push_str(r#""}"#);
    s
}

/// The client's `input_audio_buffer.commit`; `final` ends the audio.
pub fn commit(last: bool) -> String {
    json!({"type": "input_audio_buffer.commit", "final": last}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_events_are_read_and_the_wrong_shape_refused() {
        assert_eq!(
            ServerEvent::read(r#"{"type":"session.created","id":"s"}"#).unwrap(),
            ServerEvent::Created
        );
        assert_eq!(
            ServerEvent::read(r#"{"type":"transcription.delta","delta":" hi"}"#).unwrap(),
            ServerEvent::Delta(" hi".into())
        );
        let done = ServerEvent::read(
            r#"{"type":"transcription.done","text":"hi","usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#,
        )
        .unwrap();
        assert!(
            matches!(done, ServerEvent::Done { ref text, usage: Some(u) } if text == "hi" && u.completion_tokens == Some(1))
        );
        assert_eq!(
            ServerEvent::read(r#"{"type":"error","error":"no model","code":"model_not_found"}"#)
                .unwrap(),
            ServerEvent::Error("no model (model_not_found)".into())
        );
        assert!(ServerEvent::read(r#"{"delta":"x"}"#).is_err());
        assert!(ServerEvent::read(r#"{"type":"transcription.delta","delta":5}"#).is_err());
        assert!(ServerEvent::read("[").is_err());
    }

    #[test]
    fn appends_carry_base64_pcm() {
        let a: Value = serde_json::from_str(&append(&[1, 0, 2, 0])).unwrap();
        assert_eq!(a["type"], "input_audio_buffer.append");
        assert_eq!(a["audio"], "AQACAA==");
        let c: Value = serde_json::from_str(&commit(true)).unwrap();
        assert_eq!(c["final"], true);
    }
}
