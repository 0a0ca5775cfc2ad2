//! The speech APIs over HTTP: speech to text (`/v1/audio/transcriptions`,
//! `/v1/audio/translations`) and text to speech (`/v1/audio/speech`).
//!
//! Speech to text uploads the clip as a multipart form, as OpenAI's and
//! vLLM's servers take it. Streamed (`stream=true`), vLLM answers in chat's
//! chunk shape (`object: transcription.chunk`, the text under
//! `choices[].delta.content`, usage in a last chunk when
//! `stream_include_usage` is set) and OpenAI in typed events
//! (`transcript.text.delta` with its `delta`, `transcript.text.done` with the
//! whole text and usage); both are read here. Whole, both answer `{"text"}`,
//! with usage of type `duration` (the audio's seconds) or of tokens.
//!
//! Text to speech answers with the audio's bytes themselves: timed to the
//! first byte and the last, their seconds read from the WAV header asked for.

use super::{openai, Event, Malformed, MediaKind, Protocol, Request, Usage};
use serde_json::{json, Value};

/// The multipart boundary: long and odd enough never to appear in a clip
/// by chance (a clip holding it would be cut there; the odds are 2⁻²⁰⁰).
pub const BOUNDARY: &str = "tokenscope-form-7f3a9c1e5b2d8046-speech";

/// `openai-transcriptions` and `openai-translations`: the clip uploaded,
/// its transcript (or its English translation) read back.
#[derive(Debug, Clone, Copy)]
pub struct SpeechToText {
    pub translate: bool,
}

pub const TRANSCRIPTIONS: SpeechToText = SpeechToText { translate: false };
pub const TRANSLATIONS: SpeechToText = SpeechToText { translate: true };

impl Protocol for SpeechToText {
    fn name(&self) -> &'static str {
        match self.translate {
            false => "openai-transcriptions",
            true => "openai-translations",
        }
    }

    fn path(&self) -> &'static str {
        match self.translate {
            false => "/v1/audio/transcriptions",
            true => "/v1/audio/translations",
        }
    }

    fn content_type(&self) -> &'static str {
        "multipart/form-data; boundary=tokenscope-form-7f3a9c1e5b2d8046-speech"
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let clip = r
            .messages
            .last()
            .and_then(|m| {
                m.content.iter().find_map(|p| match p {
                    super::Part::Media(m) if m.kind == MediaKind::Audio => Some(*m),
                    _ => None,
                })
            })
            .and_then(|m| Some((m.raw()?, m.mime.as_str(), m.label.as_str())));
        let mut form = Form::default();
        // No clip: the server says what is missing, in its own words.
        if let Some((bytes, mime, label)) = clip {
            form.file("file", &file_name(label, mime), mime, &bytes);
        }
        let mut fields: Vec<(String, String)> = r
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), form_value(v)))
            .collect();
        // No length is sent: a transcript is as long as its audio.
        let mut own = vec![
            ("model", r.model.to_string()),
            ("response_format", "json".into()),
            ("stream", r.stream.to_string()),
        ];
        if r.stream {
            own.push(("stream_include_usage", "true".into()));
        }
        if let Some(t) = r.temperature {
            own.push(("temperature", t.to_string()));
        }
        // tokenscope's own fields win over `--extra-body`'s.
        fields.retain(|(k, _)| !own.iter().any(|(o, _)| o == k));
        for (k, v) in own {
            form.field(k, &v);
        }
        for (k, v) in &fields {
            form.field(k, v);
        }
        form.finish()
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({"model": model})
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let v: Value = serde_json::from_str(data).map_err(|e| Malformed::of(e, data))?;
        match v["type"].as_str() {
            Some("transcript.text.delta") => {
                if let Some(d) = v["delta"].as_str().filter(|d| !d.is_empty()) {
                    emit(Event::Answer(d.to_string().into()));
                }
            }
            Some("transcript.text.done") => {
                usage(&v["usage"], emit);
                emit(Event::Finish("stop".into()));
            }
            Some("error") => emit(Event::Error(
                openai::error_field(&v).unwrap_or_else(|| "error event in stream".into()),
            )),
            _ => {
                openai::chunk_events(data, emit)?;
                // vLLM's usage chunk may also say the audio's seconds.
                if v["usage"]["type"] == "duration" {
                    usage(&v["usage"], emit);
                }
            }
        }
        Ok(())
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let v: Value = serde_json::from_str(body).map_err(|e| Malformed::of(e, body))?;
        if let Some(e) = openai::error_field(&v) {
            emit(Event::Error(e));
            return Ok(());
        }
        let text = v["text"].as_str().ok_or_else(|| Malformed {
            reason: "no `text` in the transcription".into(),
            snippet: body.chars().take(80).collect(),
        })?;
        if !text.is_empty() {
            emit(Event::Answer(text.to_string().into()));
        }
        usage(&v["usage"], emit);
        emit(Event::Finish("stop".into()));
        Ok(())
    }

    fn media_kinds(&self) -> &'static [MediaKind] {
        &[MediaKind::Audio]
    }

    fn audio_in(&self) -> bool {
        true
    }
}

/// A speech API's usage: `{"type": "duration", "seconds": S}` (the audio's
/// length as the server counted it), or tokens (`input_tokens`,
/// `output_tokens`, or chat's names).
pub fn usage(u: &Value, emit: &mut dyn FnMut(Event<'_>)) {
    if !u.is_object() {
        return;
    }
    if let Some(s) = u["seconds"].as_f64().filter(|s| s.is_finite() && *s >= 0.0) {
        emit(Event::AudioSeconds(s));
    }
    let count = |keys: [&str; 2]| keys.iter().find_map(|k| u[*k].as_u64());
    let tokens = Usage {
        prompt_tokens: count(["input_tokens", "prompt_tokens"]),
        completion_tokens: count(["output_tokens", "completion_tokens"]),
        ..Usage::default()
    };
    if tokens != Usage::default() {
        emit(Event::Usage(tokens));
    }
}

/// The uploaded file's name: the clip's own (a dataset's file), else one
/// with the extension of its type.
fn file_name(label: &str, mime: &str) -> String {
    let ext = match mime {
        "audio/mpeg" => "mp3",
        "audio/flac" => "flac",
        _ => "wav",
    };
    match label.rsplit_once('.') {
        Some((_, e)) if e.eq_ignore_ascii_case(ext) => label.replace(['"', '\r', '\n'], "_"),
        _ => format!("audio.{ext}"),
    }
}

/// A form field's text: a string as it is, anything else as JSON.
fn form_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A `multipart/form-data` body under [`BOUNDARY`].
#[derive(Default)]
struct Form {
    body: Vec<u8>,
}

impl Form {
    fn part_head(&mut self, disposition: &str) {
        self.body.extend_from_slice(b"--");
        self.body.extend_from_slice(BOUNDARY.as_bytes());
        self.body
            .extend_from_slice(b"\r\nContent-Disposition: form-data; ");
        self.body.extend_from_slice(disposition.as_bytes());
        self.body.extend_from_slice(b"\r\n");
    }

    fn field(&mut self, name: &str, value: &str) {
        self.part_head(&format!("name=\"{name}\""));
        self.body.extend_from_slice(b"\r\n");
        self.body.extend_from_slice(value.as_bytes());
        self.body.extend_from_slice(b"\r\n");
    }

    fn file(&mut self, name: &str, file: &str, mime: &str, bytes: &[u8]) {
        self.body.reserve(bytes.len() + 256);
        self.part_head(&format!("name=\"{name}\"; filename=\"{file}\""));
        self.body
            .extend_from_slice(format!("Content-Type: {mime}\r\n\r\n").as_bytes());
        self.body.extend_from_slice(bytes);
        self.body.extend_from_slice(b"\r\n");
    }

    fn finish(mut self) -> Vec<u8> {
        self.body.extend_from_slice(b"--");
        self.body.extend_from_slice(BOUNDARY.as_bytes());
        self.body.extend_from_slice(b"--\r\n");
        self.body
    }
}

/// `openai-speech`: text to speech. The prompt is the text to say; the
/// answer is the audio, in WAV, timed to its first byte and its end.
#[derive(Debug, Clone, Copy)]
pub struct OpenaiSpeech;

impl Protocol for OpenaiSpeech {
    fn name(&self) -> &'static str {
        "openai-speech"
    }

    fn path(&self) -> &'static str {
        "/v1/audio/speech"
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut obj = r.extra.clone();
        obj.entry("voice").or_insert_with(|| json!("alloy"));
        obj.insert("model".into(), json!(r.model));
        obj.insert("input".into(), json!(r.prompt()));
        obj.insert("response_format".into(), json!("wav"));
        serde_json::to_vec(&obj).expect("a JSON value serializes")
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({"model": model, "input": "hi", "voice": "alloy", "response_format": "wav"})
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        // The audio comes as bytes, not events (see `answer_is_audio`).
        let _ = (data, emit);
        Ok(())
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let _ = (body, emit);
        Ok(())
    }

    fn answer_is_audio(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Shape;
    use std::sync::Arc;

    fn events(api: &dyn Protocol, data: &str) -> Vec<String> {
        let mut out = Vec::new();
        api.stream_event(data, &mut |e| out.push(format!("{e:?}")))
            .unwrap();
        out
    }

    #[test]
    fn the_clip_goes_up_as_a_multipart_file_with_the_fields() {
        let shape = Shape::default();
        let clip = Arc::new(tokenscope_workload::media::audio(0.1, 1));
        let media = [clip.clone()];
        let r = Request::conversation("whisper", &shape, [], "").with_media(&media);
        let body = TRANSCRIPTIONS.body(&r);
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.starts_with(&format!("--{BOUNDARY}\r\n")),
            "{text:.200}"
        );
        assert!(text.contains(
            "name=\"file\"; filename=\"audio.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF"
        ));
        assert!(text.contains("name=\"model\"\r\n\r\nwhisper\r\n"));
        assert!(text.contains("name=\"stream\"\r\n\r\ntrue\r\n"));
        assert!(text.ends_with(&format!("--{BOUNDARY}--\r\n")));
        // The clip's bytes are there whole.
        let raw = clip.raw().unwrap();
        assert!(body.windows(raw.len()).any(|w| w == raw.as_slice()));
        assert!(TRANSCRIPTIONS.content_type().ends_with(BOUNDARY));
    }

    #[test]
    fn vllm_and_openai_streams_are_both_read() {
        let vllm = r#"{"object":"transcription.chunk","choices":[{"delta":{"content":" hello"}}]}"#;
        assert_eq!(events(&TRANSCRIPTIONS, vllm), [r#"Answer(" hello")"#]);
        let usage = r#"{"object":"transcription.chunk","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}"#;
        assert!(events(&TRANSCRIPTIONS, usage)[0].contains("completion_tokens: Some(3)"));
        let openai = r#"{"type":"transcript.text.delta","delta":"hi"}"#;
        assert_eq!(events(&TRANSCRIPTIONS, openai), [r#"Answer("hi")"#]);
        let done = r#"{"type":"transcript.text.done","text":"hi","usage":{"type":"tokens","input_tokens":5,"output_tokens":1}}"#;
        let e = events(&TRANSCRIPTIONS, done);
        assert!(
            e[0].contains("completion_tokens: Some(1)") && e[1] == r#"Finish("stop")"#,
            "{e:?}"
        );
    }

    #[test]
    fn a_whole_answer_gives_its_text_and_its_seconds() {
        let mut out = Vec::new();
        TRANSLATIONS
            .whole(
                r#"{"text":"good day","usage":{"type":"duration","seconds":5}}"#,
                &mut |e| out.push(format!("{e:?}")),
            )
            .unwrap();
        assert_eq!(
            out,
            [
                r#"Answer("good day")"#,
                "AudioSeconds(5.0)",
                r#"Finish("stop")"#
            ]
        );
        // The wrong shape with HTTP 200 is malformed, not an empty answer.
        assert!(TRANSLATIONS.whole(r#"{"words":[]}"#, &mut |_| {}).is_err());
        assert!(TRANSLATIONS.whole("[1,2]", &mut |_| {}).is_err());
    }

    #[test]
    fn speech_asks_for_wav_of_the_prompt() {
        let shape = Shape::default();
        let r = Request::conversation("tts", &shape, [], "say this");
        let v: Value = serde_json::from_slice(&OpenaiSpeech.body(&r)).unwrap();
        assert_eq!(v["input"], "say this");
        assert_eq!(v["response_format"], "wav");
        assert_eq!(v["voice"], "alloy");
    }
}
