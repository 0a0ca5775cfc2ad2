//! Anthropic's Messages API: `POST /v1/messages`, what agent frameworks
//! call (llama.cpp's server and vLLM speak it too). Its stream is typed
//! events: `message_start` (the prompt's usage), `content_block_delta`
//! (`text_delta`, `thinking_delta`, `input_json_delta`), `message_delta`
//! (the stop reason and the output tokens), `message_stop`; no `[DONE]`.
//! The key goes in `x-api-key`, with an `anthropic-version`.

use super::{Event, Malformed, MediaKind, PartStyle, Protocol, Request, ToolCallDelta, Usage};
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;

#[derive(Debug, Clone, Copy)]
pub struct AnthropicMessages;

/// The API requires a length; a request without `--output-tokens` gets this.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The API version the bodies are written to.
pub const VERSION: &str = "2023-06-01";

/// Anthropic's stop reasons in OpenAI's words, so a length limit reads as
/// one (`short_outputs`, a spent thinking budget) whatever the API.
fn finish(reason: Cow<'_, str>) -> Cow<'_, str> {
    match reason.as_ref() {
        "max_tokens" => "length".into(),
        "end_turn" | "stop_sequence" => "stop".into(),
        "tool_use" => "tool_calls".into(),
        _ => reason,
    }
}

/// Usage as Anthropic counts it: `input_tokens` leaves out the prompt
/// tokens read from (or written to) the cache.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
struct RawUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl RawUsage {
    /// `output_tokens` at `message_start` is no count yet.
    fn usage(self, at_start: bool) -> Usage {
        let cached = self.cache_read_input_tokens;
        Usage {
            // Saturating: counts near 2^64 stay huge (and are flagged
            // implausible), never wrap round to a small, believable number.
            prompt_tokens: self.input_tokens.map(|n| {
                n.saturating_add(cached.unwrap_or(0))
                    .saturating_add(self.cache_creation_input_tokens.unwrap_or(0))
            }),
            // message_start's count (0, or 1 for its first token) is no total yet.
            completion_tokens: self.output_tokens.filter(|_| !at_start),
            cached_tokens: cached,
            reasoning_tokens: None,
        }
    }
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    /// Absent in a bare `{"error": …}` object.
    #[serde(borrow, rename = "type", default)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    delta: Option<RawDelta<'a>>,
    #[serde(default)]
    index: Option<u32>,
    /// `message_start`'s message; a string where a server sends a bare
    /// error object instead of Anthropic's `error` event (llama.cpp does).
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    usage: Option<RawUsage>,
    /// `content_block_start`'s block (a `tool_use`'s id and name).
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    /// A server's own timings, where it adds them (the built-in servers do).
    #[serde(default)]
    timings: Option<Value>,
}

#[derive(Deserialize)]
struct RawDelta<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

/// A `tool_use` block as a tool-call event: its name, and its `input`
/// where it comes whole (`with_input`; streamed, the input comes in
/// `input_json_delta`s after a block opened with `{}`).
fn tool_use(index: u32, block: &Value, with_input: bool) -> Event<'_> {
    let arguments = match with_input {
        true => Cow::Owned(block["input"].to_string()),
        false => Cow::Borrowed(""),
    };
    Event::ToolCall(ToolCallDelta {
        index,
        id: block["id"].as_str().map(Cow::Borrowed),
        name: block["name"].as_str().map(Cow::Borrowed),
        arguments,
    })
}

impl Protocol for AnthropicMessages {
    fn name(&self) -> &'static str {
        "anthropic-messages"
    }

    fn path(&self) -> &'static str {
        "/v1/messages"
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut obj = r.roles_body("system", "messages", PartStyle::Anthropic);
        let max = r.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        obj.insert("max_tokens".into(), json!(max));
        if let Some(f) = r.response_format {
            // Anthropic's structured outputs.
            let format = json!({"type": "json_schema", "schema": f.schema()});
            obj.insert("output_format".into(), format);
        }
        use super::tool_forms::{anthropic_tool, ToolChoice};
        r.tool_fields(&mut obj, anthropic_tool, ToolChoice::anthropic);
        serde_json::to_vec(&obj).expect("a JSON value serializes")
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    }

    fn headers(&self, mut headers: reqwest::header::HeaderMap) -> reqwest::header::HeaderMap {
        use reqwest::header::{HeaderValue, AUTHORIZATION};
        // The key travels as `x-api-key`, not as a bearer token.
        if let Some(bearer) = headers.remove(AUTHORIZATION) {
            let key = bearer.to_str().ok().and_then(|v| v.strip_prefix("Bearer "));
            if let Some(mut value) = key.and_then(|k| HeaderValue::from_str(k).ok()) {
                value.set_sensitive(true);
                headers.insert("x-api-key", value);
            }
        }
        if !headers.contains_key("anthropic-version") {
            headers.insert("anthropic-version", HeaderValue::from_static(VERSION));
        }
        headers
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let raw: RawEvent<'_> = serde_json::from_str(data).map_err(|e| Malformed::of(e, data))?;
        match raw.kind.as_ref() {
            _ if raw.error.is_some() && raw.kind != "error" => {
                let err = raw.error.unwrap_or(Value::Null);
                emit(Event::Error(super::openai::error_message(&err)));
            }
            "content_block_delta" => {
                let Some(d) = raw.delta else { return Ok(()) };
                if let Some(t) = d.text.filter(|t| !t.is_empty()) {
                    emit(Event::Answer(t));
                }
                if let Some(t) = d.thinking.filter(|t| !t.is_empty()) {
                    emit(Event::Reasoning(t));
                }
                if let Some(args) = d.partial_json.filter(|t| !t.is_empty()) {
                    emit(Event::ToolCall(ToolCallDelta {
                        index: raw.index.unwrap_or(0),
                        id: None,
                        name: None,
                        arguments: args,
                    }));
                }
            }
            "content_block_start" => {
                let block = raw.content_block.unwrap_or(Value::Null);
                if block["type"] == "tool_use" {
                    emit(tool_use(raw.index.unwrap_or(0), &block, false));
                }
            }
            "message_start" => {
                let usage = raw.message.map(|mut m| m["usage"].take());
                if let Some(u) = usage.and_then(|u| RawUsage::deserialize(u).ok()) {
                    emit(Event::Usage(u.usage(true)));
                }
            }
            "message_delta" => {
                if let Some(reason) = raw.delta.and_then(|d| d.stop_reason) {
                    emit(Event::Finish(finish(reason)));
                }
                if let Some(u) = raw.usage {
                    emit(Event::Usage(u.usage(false)));
                }
                if let Some(t) = raw.timings {
                    emit(Event::Timings(t));
                }
            }
            "error" => {
                let err = raw.error.unwrap_or(Value::Null);
                emit(Event::Error(super::openai::error_message(&err)));
            }
            // A bare error object (`{"code": 500, "message": "…", "type":
            // "exceed_context_size_error"}`), as llama.cpp sends one.
            _ if raw.message.as_ref().is_some_and(Value::is_string) => {
                let said = raw.message.unwrap_or_default();
                emit(Event::Error(super::openai::error_message(&said)));
            }
            // ping, content_block_start/stop, message_stop, and events to come.
            _ => {}
        }
        Ok(())
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        let v: Value = serde_json::from_str(body).map_err(|e| Malformed::of(e, body))?;
        if let Some(err) = self.error_message(&v) {
            emit(Event::Error(err));
        }
        for (i, block) in v["content"].as_array().into_iter().flatten().enumerate() {
            match block["type"].as_str() {
                Some("tool_use") => emit(tool_use(i as u32, block, true)),
                Some("text") => {
                    if let Some(t) = block["text"].as_str().filter(|t| !t.is_empty()) {
                        emit(Event::Answer(t.into()));
                    }
                }
                Some("thinking") => {
                    if let Some(t) = block["thinking"].as_str().filter(|t| !t.is_empty()) {
                        emit(Event::Reasoning(t.into()));
                    }
                }
                _ => {}
            }
        }
        if let Some(reason) = v["stop_reason"].as_str() {
            emit(Event::Finish(finish(reason.into())));
        }
        if let Ok(u) = RawUsage::deserialize(&v["usage"]) {
            emit(Event::Usage(u.usage(false)));
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
        crate::protocol::fold_events(&AnthropicMessages, data)
    }

    #[test]
    fn a_stream_with_thinking_its_usage_and_stop_reason() {
        let (p, text) = events(&[
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":7,"cache_read_input_tokens":3,"output_tokens":0}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":5}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        assert_eq!(text, "Hi", "the answer's text holds no thinking");
        assert_eq!((p.reasoning_bytes, p.answer_bytes), (3, 2));
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
        let u = p.usage.unwrap();
        assert_eq!(u.prompt_tokens, Some(10), "input + cached");
        assert_eq!(u.cached_tokens, Some(3));
        assert_eq!(u.completion_tokens, Some(5));
    }

    #[test]
    fn a_prompt_count_near_two_to_the_64_saturates_never_wraps() {
        let (p, _) = events(&[
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":18446744073709551610,"cache_read_input_tokens":10,"output_tokens":0}}}"#,
        ]);
        // Wrapped, it would read 4: a small, believable prompt.
        assert_eq!(p.usage.unwrap().prompt_tokens, Some(u64::MAX));
    }

    #[test]
    fn an_error_event_is_the_servers_error_and_bad_json_is_malformed() {
        let (p, _) = events(&[
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ]);
        assert_eq!(p.error.as_deref(), Some("Overloaded"));
        // llama.cpp's bare error objects, where a typed event was due.
        for bare in [
            r#"{"code":500,"message":"Context size has been exceeded.","type":"exceed_context_size_error"}"#,
            r#"{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}"#,
        ] {
            let (p, _) = events(&[bare]);
            assert_eq!(
                p.error.as_deref(),
                Some("Context size has been exceeded."),
                "{bare}"
            );
        }
        let mut sink = |_: Event<'_>| {};
        assert!(AnthropicMessages
            .stream_event("{\"type\":", &mut sink)
            .is_err());
    }

    #[test]
    fn the_body_takes_the_system_prompt_out_and_always_a_length() {
        let shape = Shape {
            system_prompt: Some("be brief".into()),
            ..Shape::default()
        };
        let r = Request::conversation("m", &shape, [], "hi");
        let b: Value = serde_json::from_slice(&AnthropicMessages.body(&r)).unwrap();
        assert_eq!(b["system"], "be brief");
        assert_eq!(b["messages"].as_array().unwrap().len(), 1);
        assert_eq!(b["messages"][0]["role"], "user");
        assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(b["stream"], true);
        assert!(b.get("stream_options").is_none());
    }

    #[test]
    fn the_key_travels_as_x_api_key() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("authorization", "Bearer sk-1".parse().unwrap());
        let h = AnthropicMessages.headers(h);
        assert_eq!(h["x-api-key"], "sk-1");
        assert_eq!(h["anthropic-version"], VERSION);
        assert!(!h.contains_key("authorization"));
    }

    #[test]
    fn a_whole_answer() {
        let body = r#"{"content":[{"type":"thinking","thinking":"t"},{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":4,"output_tokens":2}}"#;
        let (mut piece, mut text) = (Piece::default(), String::new());
        let mut r = Reasoner::new(ReasoningParser::Auto);
        AnthropicMessages
            .whole(body, &mut |e| piece.add(e, &mut text, &mut r))
            .unwrap();
        assert_eq!(text, "ok", "the answer's text holds no thinking");
        assert_eq!(piece.finish_reason.as_deref(), Some("stop"));
        assert_eq!(piece.usage.unwrap().completion_tokens, Some(2));
    }
}
