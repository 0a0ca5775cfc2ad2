//! Triton Inference Server's generate extension, as TensorRT-LLM's
//! ensemble (and Triton's vLLM backend) serve it:
//! `POST /v2/models/{model}/generate_stream` (whole: `/generate`), the model
//! in the path. The body is `text_input` with `max_tokens` and `stream`
//! beside it, as the ensemble takes them. Each event's `text_output` is the
//! text it adds; no `[DONE]` and no finish reason: the stream's clean end
//! is the answer's end. No usage either, unless the model is asked for
//! `num_output_tokens` (`--extra-body '{"return_num_output_tokens": true}'`,
//! a count per event); else tokens are counted with the tokenizer.

use super::{openai, Event, Malformed, Protocol, Request, Usage};
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;

#[derive(Debug, Clone, Copy)]
pub struct Triton;

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    text_output: Option<Cow<'a, str>>,
    /// Tokens this event adds (the vLLM backend's `return_num_output_tokens`).
    #[serde(default)]
    num_output_tokens: Option<u64>,
    #[serde(default)]
    num_input_tokens: Option<u64>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<Value>,
    /// The built-in servers' own timings, where given.
    #[serde(default)]
    timings: Option<Value>,
}

impl RawEvent<'_> {
    fn emit(self, emit: &mut dyn FnMut(Event<'_>)) {
        if let Some(err) = self.error {
            emit(Event::Error(openai::error_message(&err)));
        }
        if let Some(t) = self.text_output.filter(|t| !t.is_empty()) {
            emit(Event::Answer(t));
        }
        if self.num_output_tokens.is_some() || self.num_input_tokens.is_some() {
            emit(Event::Usage(Usage {
                prompt_tokens: self.num_input_tokens,
                ..Usage::default()
            }));
        }
        if let Some(n) = self.num_output_tokens {
            emit(Event::OutputTokens(n));
        }
        if let Some(f) = self.finish_reason {
            emit(Event::Finish(f));
        }
        if let Some(t) = self.timings {
            emit(Event::Timings(t));
        }
    }
}

impl Protocol for Triton {
    fn name(&self) -> &'static str {
        "triton"
    }

    fn path(&self) -> &'static str {
        "/v2/models/{model}/generate_stream"
    }

    fn path_for(&self, stream: bool) -> &'static str {
        match stream {
            true => "/v2/models/{model}/generate_stream",
            false => "/v2/models/{model}/generate",
        }
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut obj = r.extra.clone();
        obj.insert("text_input".into(), json!(r.prompt_text()));
        obj.insert("stream".into(), json!(r.stream));
        if let Some(n) = r.max_tokens {
            obj.insert("max_tokens".into(), json!(n));
        }
        if let Some(t) = r.temperature {
            obj.insert("temperature".into(), json!(t));
        }
        serde_json::to_vec(&obj).expect("a JSON value serializes")
    }

    fn probe_body(&self, _model: &str) -> Value {
        json!({"text_input": "hi", "max_tokens": 1, "stream": false})
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let raw: RawEvent<'_> = serde_json::from_str(data).map_err(|e| Malformed::of(e, data))?;
        raw.emit(emit);
        Ok(())
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let raw: RawEvent<'_> = serde_json::from_str(body).map_err(|e| Malformed::of(e, body))?;
        raw.emit(emit);
        Ok(())
    }

    fn ends_with_the_body(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{fold_events, Shape};

    #[test]
    fn the_body_is_the_ensembles_and_the_model_goes_in_the_path() {
        let shape = Shape::default();
        let r = Request {
            max_tokens: Some(7),
            ..Request::conversation("m", &shape, [], "hi")
        };
        let body: Value = serde_json::from_slice(&Triton.body(&r)).unwrap();
        assert_eq!(
            body,
            json!({"text_input": "hi", "stream": true, "max_tokens": 7})
        );
        assert_eq!(
            Triton.endpoint("ensemble", true),
            "/v2/models/ensemble/generate_stream"
        );
        assert_eq!(
            Triton.endpoint("ensemble", false),
            "/v2/models/ensemble/generate"
        );
    }

    #[test]
    fn each_event_adds_its_text_and_its_count() {
        let (p, text) = fold_events(
            &Triton,
            &[
                r#"{"model_name":"ensemble","model_version":"1","text_output":" a","num_output_tokens":1}"#,
                r#"{"model_name":"ensemble","model_version":"1","text_output":" b c","num_output_tokens":2}"#,
                r#"{"model_name":"ensemble","model_version":"1","text_output":"","finish_reason":"length"}"#,
            ],
        );
        assert_eq!(text, " a b c");
        assert_eq!(p.output_tokens, Some(3));
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
        let (p, _) = fold_events(&Triton, &[r#"{"error":"model not ready"}"#]);
        assert_eq!(p.error.as_deref(), Some("model not ready"));
        assert!(Triton.stream_event("{", &mut |_| {}).is_err());
    }
}
