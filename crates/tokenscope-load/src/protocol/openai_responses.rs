//! OpenAI's Responses API: `POST /v1/responses`, what agent frameworks
//! call (llama.cpp's server and vLLM speak it too). Its stream is typed
//! events: `response.output_text.delta` (answer),
//! `response.reasoning_text.delta` and `response.reasoning_summary_text.delta`
//! (thinking), `response.function_call_arguments.delta` (a tool call), and
//! `response.completed` / `response.incomplete` with the usage, reasoning
//! tokens among it; no `[DONE]`.

use super::{Event, Malformed, MediaKind, PartStyle, Protocol, Request, ToolCallDelta, Usage};
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;

#[derive(Debug, Clone, Copy)]
pub struct OpenaiResponses;

#[derive(Deserialize)]
struct RawEvent<'a> {
    /// Absent in a bare `{"error": …}` object (llama.cpp sends one).
    #[serde(borrow, rename = "type", default)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    output_index: Option<u32>,
    /// `response.output_item.added`'s item (a function call's name).
    #[serde(default)]
    item: Option<Value>,
    #[serde(default)]
    response: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    timings: Option<Value>,
}

/// The end of a response: its finish in OpenAI chat's words (an answer cut
/// at `max_output_tokens` reads as `length`) and its usage.
fn finished(response: &Value, emit: &mut dyn FnMut(Event<'_>)) {
    let reason = match response["status"].as_str() {
        Some("incomplete") => match response["incomplete_details"]["reason"].as_str() {
            Some("max_output_tokens") => "length",
            Some(other) => other,
            None => "incomplete",
        },
        Some("failed") => "error",
        _ => "stop",
    };
    emit(Event::Finish(reason.to_string().into()));
    let u = &response["usage"];
    if u.is_object() {
        let count = |v: &Value| v.as_u64();
        emit(Event::Usage(Usage {
            prompt_tokens: count(&u["input_tokens"]),
            completion_tokens: count(&u["output_tokens"]),
            cached_tokens: count(&u["input_tokens_details"]["cached_tokens"]),
            reasoning_tokens: count(&u["output_tokens_details"]["reasoning_tokens"]),
        }));
    }
}

/// A `function_call` output item as a tool-call event: its name, and its
/// arguments where they come whole (`with_arguments`; streamed, they come
/// in their own deltas).
fn function_call(index: u32, item: &Value, with_arguments: bool) -> Event<'_> {
    let arguments = match with_arguments {
        true => item["arguments"].as_str().unwrap_or(""),
        false => "",
    };
    Event::ToolCall(ToolCallDelta {
        index,
        id: item["call_id"].as_str().map(Cow::Borrowed),
        name: item["name"].as_str().map(Cow::Borrowed),
        arguments: arguments.into(),
    })
}

impl Protocol for OpenaiResponses {
    fn name(&self) -> &'static str {
        "openai-responses"
    }

    fn path(&self) -> &'static str {
        "/v1/responses"
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut obj = r.roles_body("instructions", "input", PartStyle::Responses);
        if let Some(n) = r.max_tokens {
            obj.insert("max_output_tokens".into(), json!(n));
        }
        if let Some(f) = r.response_format {
            obj.insert("text".into(), json!({"format": f.responses()}));
        }
        use super::tool_forms::{responses_tool, ToolChoice};
        r.tool_fields(&mut obj, responses_tool, ToolChoice::responses);
        serde_json::to_vec(&obj).expect("a JSON value serializes")
    }

    fn probe_body(&self, model: &str) -> Value {
        // OpenAI's own floor for max_output_tokens is 16.
        json!({"model": model, "input": "hi", "max_output_tokens": 16})
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let raw: RawEvent<'_> = serde_json::from_str(data).map_err(|e| Malformed::of(e, data))?;
        let text = raw.delta.filter(|d| !d.is_empty());
        match raw.kind.as_ref() {
            "response.output_text.delta" => text.map(Event::Answer).into_iter().for_each(emit),
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                text.map(Event::Reasoning).into_iter().for_each(emit)
            }
            "response.output_item.added" => {
                let item = raw.item.unwrap_or(Value::Null);
                if item["type"] == "function_call" {
                    emit(function_call(raw.output_index.unwrap_or(0), &item, false));
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(args) = text {
                    emit(Event::ToolCall(ToolCallDelta {
                        index: raw.output_index.unwrap_or(0),
                        id: None,
                        name: None,
                        arguments: args,
                    }));
                }
            }
            "response.completed" | "response.incomplete" => {
                finished(&raw.response.unwrap_or(Value::Null), emit);
                if let Some(t) = raw.timings {
                    emit(Event::Timings(t));
                }
            }
            "response.failed" => {
                let r = raw.response.unwrap_or(Value::Null);
                let said = self
                    .error_message(&r)
                    .unwrap_or_else(|| "response failed".into());
                emit(Event::Error(said));
            }
            "error" => {
                let said = raw
                    .message
                    .unwrap_or_else(|| "error event in stream".into());
                emit(Event::Error(said));
            }
            // A bare error object where a typed event was due.
            _ if raw.error.as_ref().is_some_and(|e| !e.is_null()) => {
                let err = raw.error.unwrap_or(Value::Null);
                emit(Event::Error(super::openai::error_message(&err)));
            }
            // created, in_progress, output_item.*, content_part.*, *.done, …
            _ => {}
        }
        Ok(())
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let v: Value = serde_json::from_str(body).map_err(|e| Malformed::of(e, body))?;
        if let Some(err) = self.error_message(&v) {
            emit(Event::Error(err));
        }
        for (i, item) in v["output"].as_array().into_iter().flatten().enumerate() {
            if item["type"] == "function_call" {
                emit(function_call(i as u32, item, true));
            }
            let parts = item["content"].as_array().into_iter().flatten();
            let summary = item["summary"].as_array().into_iter().flatten();
            for part in parts.chain(summary) {
                let Some(t) = part["text"].as_str().filter(|t| !t.is_empty()) else {
                    continue;
                };
                emit(match (item["type"].as_str(), part["type"].as_str()) {
                    (Some("reasoning"), _) | (_, Some("reasoning_text")) => {
                        Event::Reasoning(t.into())
                    }
                    _ => Event::Answer(t.into()),
                });
            }
        }
        finished(&v, emit);
        if let Some(t) = v.get("timings") {
            emit(Event::Timings(t.clone()));
        }
        Ok(())
    }

    fn media_kinds(&self) -> &'static [MediaKind] {
        &[MediaKind::Image]
    }

    fn response_formats(&self) -> bool {
        true
    }

    fn tool_calls(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Piece, Reasoner, ReasoningParser, Shape};

    fn events(data: &[&str]) -> (Piece, String) {
        crate::protocol::fold_events(&OpenaiResponses, data)
    }

    #[test]
    fn a_stream_with_reasoning_and_its_usage() {
        let (p, text) = events(&[
            r#"{"type":"response.created","response":{"id":"r","status":"in_progress"}}"#,
            r#"{"type":"response.reasoning_text.delta","item_id":"rs","output_index":0,"content_index":0,"delta":"so"}"#,
            r#"{"type":"response.output_text.delta","item_id":"m","output_index":1,"content_index":0,"delta":"Yes"}"#,
            r#"{"type":"response.output_text.done","text":"Yes"}"#,
            r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":4},"output_tokens":6,"output_tokens_details":{"reasoning_tokens":5},"total_tokens":15}}}"#,
        ]);
        assert_eq!(text, "Yes", "the answer's text holds no reasoning");
        assert_eq!((p.reasoning_bytes, p.answer_bytes), (2, 3));
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
        let u = p.usage.unwrap();
        assert_eq!(
            (
                u.prompt_tokens,
                u.completion_tokens,
                u.cached_tokens,
                u.reasoning_tokens
            ),
            (Some(9), Some(6), Some(4), Some(5))
        );
    }

    #[test]
    fn errors_in_the_stream_and_malformed_events() {
        let (p, _) = events(&[r#"{"type":"error","code":"server_error","message":"boom"}"#]);
        assert_eq!(p.error.as_deref(), Some("boom"));
        let (p, _) = events(&[
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"x","message":"no"}}}"#,
        ]);
        assert_eq!(p.error.as_deref(), Some("no"));
        // llama.cpp's bare error object, where a typed event was due.
        let (p, _) = events(&[
            r#"{"error":{"code":500,"message":"failed to process mtmd chunk","type":"server_error"}}"#,
        ]);
        assert_eq!(p.error.as_deref(), Some("failed to process mtmd chunk"));
        let mut sink = |_: Event<'_>| {};
        assert!(OpenaiResponses.stream_event("[1,", &mut sink).is_err());
    }

    #[test]
    fn the_body_is_input_and_instructions() {
        let shape = Shape {
            system_prompt: Some("S".into()),
            ..Shape::default()
        };
        let r = Request {
            max_tokens: Some(32),
            ..Request::conversation("m", &shape, [("q", "a")], "hi")
        };
        let b: Value = serde_json::from_slice(&OpenaiResponses.body(&r)).unwrap();
        assert_eq!(b["instructions"], "S");
        let input = b["input"].as_array().unwrap();
        assert_eq!(input.len(), 3);
        assert_eq!(input[2]["content"], "hi");
        assert_eq!(b["max_output_tokens"], 32);
        assert!(b.get("max_tokens").is_none());
    }

    #[test]
    fn a_whole_response() {
        let body = r#"{"status":"completed","output":[{"type":"reasoning","content":[{"type":"reasoning_text","text":"t"}]},{"type":"message","content":[{"type":"output_text","text":"ok"}]}],"usage":{"input_tokens":3,"output_tokens":2}}"#;
        let (mut piece, mut text) = (Piece::default(), String::new());
        let mut r = Reasoner::new(ReasoningParser::Auto);
        OpenaiResponses
            .whole(body, &mut |e| piece.add(e, &mut text, &mut r))
            .unwrap();
        assert_eq!(text, "ok", "the answer's text holds no reasoning");
        assert_eq!(piece.reasoning_bytes, 1);
        assert_eq!(piece.finish_reason.as_deref(), Some("stop"));
        assert_eq!(piece.usage.unwrap().completion_tokens, Some(2));
    }
}
