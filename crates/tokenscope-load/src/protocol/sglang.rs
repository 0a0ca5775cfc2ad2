//! SGLang's native API: `POST /generate`, what SGLang's own users run.
//! Each stream event carries the whole text so far (`text`) and
//! `meta_info` with the running token counts, so every chunk's tokens are
//! the server's own; the last also its `finish_reason` (an object, e.g.
//! `{"type": "length"}`); then `[DONE]`.

use super::{Event, Malformed, Protocol, Request, Usage};
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;

#[derive(Debug, Clone, Copy)]
pub struct Sglang;

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    meta_info: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    timings: Option<Value>,
}

fn meta(m: &Value, emit: &mut dyn FnMut(Event<'_>)) {
    let count = |k: &str| m[k].as_u64();
    emit(Event::Usage(Usage {
        prompt_tokens: count("prompt_tokens"),
        completion_tokens: count("completion_tokens"),
        cached_tokens: count("cached_tokens"),
        reasoning_tokens: None,
    }));
    let reason = &m["finish_reason"];
    if let Some(kind) = reason["type"].as_str().or(reason.as_str()) {
        emit(Event::Finish(kind.to_string().into()));
    }
}

impl Protocol for Sglang {
    fn name(&self) -> &'static str {
        "sglang"
    }

    fn path(&self) -> &'static str {
        "/generate"
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut params = serde_json::Map::new();
        if r.ignore_eos {
            params.insert("ignore_eos".into(), json!(true));
        }
        if let Some(t) = r.temperature {
            params.insert("temperature".into(), json!(t));
        }
        if let Some(f) = r.response_format {
            params.insert("json_schema".into(), json!(f.schema().to_string()));
        }
        r.native_body("text", "sampling_params", params)
    }

    fn probe_body(&self, _model: &str) -> Value {
        json!({"text": "hi", "sampling_params": {"max_new_tokens": 1}})
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let raw: RawEvent<'_> = serde_json::from_str(data).map_err(|e| Malformed::of(e, data))?;
        if let Some(err) = raw.error {
            emit(Event::Error(super::openai::error_message(&err)));
        }
        if let Some(t) = raw.text {
            emit(Event::AnswerSoFar(t));
        }
        if let Some(m) = &raw.meta_info {
            meta(m, emit);
        }
        if let Some(t) = raw.timings {
            emit(Event::Timings(t));
        }
        Ok(())
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let v: Value = serde_json::from_str(body).map_err(|e| Malformed::of(e, body))?;
        if let Some(err) = self.error_message(&v) {
            emit(Event::Error(err));
        }
        if let Some(t) = v["text"].as_str().filter(|t| !t.is_empty()) {
            emit(Event::Answer(t.into()));
        }
        meta(&v["meta_info"], emit);
        Ok(())
    }

    fn response_formats(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Piece, Reasoner, ReasoningParser};

    #[test]
    fn the_text_so_far_becomes_each_events_new_text() {
        let (mut text, mut r) = (String::new(), Reasoner::new(ReasoningParser::Auto));
        let mut pieces = Vec::new();
        for d in [
            r#"{"text":" the","meta_info":{"prompt_tokens":4,"completion_tokens":1,"finish_reason":null}}"#,
            r#"{"text":" the of and","meta_info":{"prompt_tokens":4,"completion_tokens":3,"finish_reason":null}}"#,
            r#"{"text":" the of and","meta_info":{"prompt_tokens":4,"completion_tokens":3,"cached_tokens":2,"finish_reason":{"type":"length","length":3}}}"#,
        ] {
            let mut p = Piece::default();
            Sglang
                .stream_event(d, &mut |e| p.add(e, &mut text, &mut r))
                .unwrap();
            pieces.push(p);
        }
        assert_eq!(text, " the of and");
        let bytes: Vec<_> = pieces.iter().map(|p| p.text_bytes).collect();
        assert_eq!(bytes, [4, 7, 0], "the last repeats the text: no new text");
        assert_eq!(pieces[1].usage.unwrap().completion_tokens, Some(3));
        assert_eq!(pieces[2].finish_reason.as_deref(), Some("length"));
        assert_eq!(pieces[2].usage.unwrap().cached_tokens, Some(2));
    }

    #[test]
    fn an_incremental_stream_is_read_as_one() {
        // `--incremental-streaming-output`: each event's text is its own.
        let data = [
            r#"{"text":" the river","meta_info":{"completion_tokens":2}}"#,
            r#"{"text":" runs","meta_info":{"completion_tokens":3}}"#,
            r#"{"text":" past the old stone church and on to the sea","meta_info":{"completion_tokens":12}}"#,
            r#"{"text":"","meta_info":{"completion_tokens":12,"finish_reason":{"type":"length"}}}"#,
        ];
        let (p, text) = crate::protocol::fold_events(&Sglang, &data);
        assert_eq!(
            text,
            " the river runs past the old stone church and on to the sea"
        );
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
    }
}
