//! Hugging Face TGI's native API: `POST /generate_stream` (a whole answer:
//! `POST /generate`), what TGI's own users run. Each event carries one
//! token (`token.text`, `token.special` for end-of-sequence and the like);
//! the last also `details` with the finish reason and the generated token
//! count; no `[DONE]`. TGI counts no prompt tokens here.

use super::{Event, Malformed, Protocol, Request, Usage};
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;

#[derive(Debug, Clone, Copy)]
pub struct Tgi;

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    token: Option<RawToken<'a>>,
    #[serde(default)]
    details: Option<RawDetails>,
    #[serde(default)]
    error: Option<Value>,
    /// The built-in servers' own timings, where given.
    #[serde(default)]
    timings: Option<Value>,
}

#[derive(Deserialize)]
struct RawToken<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    special: bool,
}

#[derive(Deserialize)]
struct RawDetails {
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    generated_tokens: Option<u64>,
}

/// TGI's finish reasons in OpenAI's words.
fn finish(reason: String) -> Cow<'static, str> {
    match reason.as_str() {
        "eos_token" | "stop_sequence" => "stop".into(),
        _ => reason.into(), // `length` is already OpenAI's
    }
}

fn ended(details: RawDetails, emit: &mut dyn FnMut(Event<'_>)) {
    if let Some(r) = details.finish_reason {
        emit(Event::Finish(finish(r)));
    }
    emit(Event::Usage(Usage {
        completion_tokens: details.generated_tokens,
        ..Usage::default()
    }));
}

impl Protocol for Tgi {
    fn name(&self) -> &'static str {
        "tgi"
    }

    fn path(&self) -> &'static str {
        "/generate_stream"
    }

    fn path_for(&self, stream: bool) -> &'static str {
        if stream {
            "/generate_stream"
        } else {
            "/generate"
        }
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut params = serde_json::Map::new();
        params.insert("details".into(), json!(true));
        // TGI refuses a temperature of 0: greedy is its default anyway.
        if let Some(t) = r.temperature.filter(|&t| t > 0.0) {
            params.insert("temperature".into(), json!(t));
        }
        if let Some(f) = r.response_format {
            params.insert(
                "grammar".into(),
                json!({"type": "json", "value": f.schema()}),
            );
        }
        r.native_body("inputs", "parameters", params)
    }

    fn probe_body(&self, _model: &str) -> Value {
        json!({"inputs": "hi", "parameters": {"max_new_tokens": 1}})
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let raw: RawEvent<'_> = serde_json::from_str(data).map_err(|e| Malformed::of(e, data))?;
        if let Some(err) = raw.error {
            emit(Event::Error(super::openai::error_message(&err)));
        }
        // A special token (end of sequence) is no text of the answer.
        if let Some(t) = raw.token.filter(|t| !t.special).and_then(|t| t.text) {
            if !t.is_empty() {
                emit(Event::Answer(t));
            }
        }
        if let Some(d) = raw.details {
            ended(d, emit);
        }
        if let Some(t) = raw.timings {
            emit(Event::Timings(t));
        }
        Ok(())
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let v: Value = serde_json::from_str(body).map_err(|e| Malformed::of(e, body))?;
        // `/generate` answers an object; some versions a one-element list.
        let v = v.as_array().and_then(|a| a.first()).unwrap_or(&v);
        if let Some(err) = self.error_message(v) {
            emit(Event::Error(err));
        }
        if let Some(t) = v["generated_text"].as_str().filter(|t| !t.is_empty()) {
            emit(Event::Answer(t.into()));
        }
        if let Ok(d) = RawDetails::deserialize(&v["details"]) {
            ended(d, emit);
        }
        Ok(())
    }

    fn response_formats(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Piece, Shape};

    fn events(data: &[&str]) -> (Piece, String) {
        crate::protocol::fold_events(&Tgi, data)
    }

    #[test]
    fn tokens_then_the_details_and_no_special_text() {
        let (p, text) = events(&[
            r#"{"index":1,"token":{"id":5,"text":" Hi","logprob":-0.1,"special":false},"generated_text":null,"details":null}"#,
            r#"{"index":2,"token":{"id":2,"text":"</s>","logprob":0.0,"special":true},"generated_text":" Hi","details":{"finish_reason":"eos_token","generated_tokens":2,"seed":null}}"#,
        ]);
        assert_eq!(text, " Hi");
        assert_eq!(p.finish_reason.as_deref(), Some("stop"));
        assert_eq!(p.usage.unwrap().completion_tokens, Some(2));
        let (p, _) =
            events(&[r#"{"error":"Request failed during generation","error_type":"generation"}"#]);
        assert_eq!(p.error.as_deref(), Some("Request failed during generation"));
    }

    #[test]
    fn the_body_is_inputs_and_parameters() {
        let shape = Shape {
            system_prompt: Some("S".into()),
            ..Shape::default()
        };
        let r = Request {
            max_tokens: Some(9),
            ..Request::conversation("m", &shape, [], "hi")
        };
        let b: Value = serde_json::from_slice(&Tgi.body(&r)).unwrap();
        assert_eq!(b["inputs"], "S\n\nhi");
        assert_eq!(b["parameters"]["max_new_tokens"], 9);
        assert_eq!(b["stream"], true);
        assert_eq!(Tgi.path_for(false), "/generate");
    }
}
