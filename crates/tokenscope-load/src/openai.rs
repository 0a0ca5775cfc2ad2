//! The OpenAI-compatible streaming APIs: request bodies and stream chunks.
//!
//! Chunks are parsed borrowing from the event's text, so a token costs one
//! JSON scan and no allocation unless its text has escapes.

use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;

/// Which endpoint and request shape to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/chat/completions` with `messages`.
    Chat,
    /// `POST /v1/completions` with `prompt`.
    Completions,
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::Chat => "openai-chat",
            Api::Completions => "openai-completions",
        }
    }

    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Completions => "/v1/completions",
        }
    }
}

/// What one request asks for.
#[derive(Debug, Clone)]
pub struct RequestParams<'a> {
    pub model: &'a str,
    pub prompt: &'a str,
    pub max_tokens: Option<u64>,
    /// Ask the server to ignore end-of-sequence so lengths are exact
    /// (`ignore_eos`, and `min_tokens` = `max_tokens`).
    pub ignore_eos: bool,
    pub shape: &'a Shape,
    /// Multi-turn: the session's earlier turns, sent before `prompt`.
    pub history: &'a [tokenscope_workload::session::Exchange],
    /// `false`: ask for the whole answer at once (`--no-stream`).
    pub stream: bool,
}

/// What every request carries besides its prompt and length
/// (`--system-prompt`, `--temperature`, `--extra-body`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shape {
    /// Chat: a system message first. Completions (no roles): before the
    /// prompt, a blank line between.
    pub system_prompt: Option<String>,
    pub temperature: Option<f64>,
    /// Merged into the body first: the fields tokenscope times by (`model`,
    /// the prompt, `stream`, `stream_options`, lengths) are set after it and win.
    pub extra: serde_json::Map<String, Value>,
}

/// The JSON body of a request: streaming with usage requested, or (`stream`
/// off) one whole answer, which carries its usage anyway.
pub fn request_body(api: Api, p: &RequestParams<'_>) -> Vec<u8> {
    let mut obj = p.shape.extra.clone();
    let system = p.shape.system_prompt.as_deref();
    match api {
        Api::Chat => {
            let mut messages = Vec::with_capacity(2 + 2 * p.history.len());
            if let Some(s) = system {
                messages.push(json!({"role": "system", "content": s}));
            }
            for turn in p.history {
                messages.push(json!({"role": "user", "content": turn.user}));
                messages.push(json!({"role": "assistant", "content": turn.assistant}));
            }
            messages.push(json!({"role": "user", "content": p.prompt}));
            obj.insert("messages".into(), Value::Array(messages));
        }
        Api::Completions => {
            // No roles: the system prompt, then each earlier turn's text and
            // answer, one after the other, so the prompt only ever grows.
            let mut prompt = String::new();
            if let Some(s) = system {
                prompt.push_str(s);
                prompt.push_str("\n\n");
            }
            for turn in p.history {
                prompt.push_str(&turn.user);
                prompt.push_str(&turn.assistant);
                prompt.push_str("\n\n");
            }
            prompt.push_str(p.prompt);
            obj.insert("prompt".into(), json!(prompt));
        }
    }
    obj.insert("model".into(), json!(p.model));
    if let Some(t) = p.shape.temperature {
        obj.insert("temperature".into(), json!(t));
    }
    obj.insert("stream".into(), json!(p.stream));
    if p.stream {
        obj.insert("stream_options".into(), json!({"include_usage": true}));
    } else {
        obj.remove("stream_options");
    }
    if let Some(n) = p.max_tokens {
        obj.insert("max_tokens".into(), json!(n));
        if p.ignore_eos {
            obj.insert("min_tokens".into(), json!(n));
        }
    }
    if p.ignore_eos {
        obj.insert("ignore_eos".into(), json!(true));
    }
    serde_json::to_vec(&obj).expect("a JSON value serializes")
}

/// Token counts the server reports. Some servers send them as floats
/// (`3.0`): whole ones are taken, anything else is no count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    #[serde(default, deserialize_with = "count")]
    pub prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    pub completion_tokens: Option<u64>,
    /// `prompt_tokens_details.cached_tokens`: prompt tokens served from the
    /// server's prefix cache (vLLM, SGLang, llama.cpp, the built-in engine).
    #[serde(default, rename = "prompt_tokens_details", deserialize_with = "cached")]
    pub cached_tokens: Option<u64>,
}

/// `cached_tokens` of a `prompt_tokens_details` object, as a count.
fn cached<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let details: Option<Value> = Option::deserialize(d)?;
    Ok(details
        .as_ref()
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Value::as_u64))
}

/// A token count as an integer, or a float with no fraction; else none.
fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v: Option<Value> = Option::deserialize(d)?;
    Ok(v.and_then(|v| {
        v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
        })
    }))
}

/// `null` where a list belongs (`"choices": null`) is an empty list.
fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize)]
struct RawChunk<'a> {
    #[serde(borrow, default, deserialize_with = "null_as_empty")]
    choices: Vec<RawChoice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(borrow, default)]
    object: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(default)]
    timings: Option<Value>,
}

#[derive(Deserialize)]
struct RawChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<RawDelta<'a>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
}

/// What one stream chunk carried.
#[derive(Debug, Default, PartialEq)]
pub struct ChunkInfo {
    /// Bytes of generated text (content + reasoning, or completion text).
    /// Zero for role-only, empty and usage-only chunks: those are not tokens.
    pub text_bytes: usize,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    /// The server reported an error inside the stream.
    pub error: Option<String>,
    /// llama.cpp's per-request `timings`.
    pub timings: Option<Value>,
}

/// The data of an event was not a chunk of the API.
#[derive(Debug, thiserror::Error)]
#[error("malformed stream chunk: {reason} (data: {snippet})")]
pub struct Malformed {
    pub reason: String,
    pub snippet: String,
}

/// Parses one event's data; generated text is appended to `text`.
pub fn parse_chunk(data: &str, text: &mut String) -> Result<ChunkInfo, Malformed> {
    let raw: RawChunk<'_> = serde_json::from_str(data).map_err(|e| Malformed {
        reason: e.to_string(),
        snippet: data.chars().take(80).collect(),
    })?;
    let mut info = ChunkInfo {
        usage: raw.usage,
        timings: raw.timings,
        ..Default::default()
    };
    if let Some(err) = raw.error {
        info.error = Some(error_message(&err));
    } else if raw.object.as_deref() == Some("error") {
        info.error = Some(
            raw.message
                .as_deref()
                .unwrap_or("error object in stream")
                .to_string(),
        );
    }
    for choice in raw.choices {
        let mut add = |s: Option<Cow<'_, str>>| {
            if let Some(s) = s {
                info.text_bytes += s.len();
                text.push_str(&s);
            }
        };
        if let Some(d) = choice.delta {
            add(d.reasoning_content);
            add(d.reasoning);
            add(d.content);
        }
        add(choice.text);
        if let Some(f) = choice.finish_reason {
            info.finish_reason = Some(f.into_owned());
        }
    }
    Ok(info)
}

/// What a whole (non-streamed) answer carried.
#[derive(Debug, Default, PartialEq)]
pub struct Whole {
    pub text: String,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
    pub timings: Option<Value>,
}

/// Parses a whole chat or completions answer (`choices[].message.content`
/// or `choices[].text`, reasoning included).
pub fn parse_whole(body: &str) -> Result<Whole, Malformed> {
    #[derive(Deserialize)]
    struct RawWhole {
        #[serde(default, deserialize_with = "null_as_empty")]
        choices: Vec<Value>,
        #[serde(default)]
        usage: Option<Usage>,
        #[serde(default)]
        error: Option<Value>,
        #[serde(default)]
        timings: Option<Value>,
    }
    let raw: RawWhole = serde_json::from_str(body).map_err(|e| Malformed {
        reason: e.to_string(),
        snippet: body.chars().take(80).collect(),
    })?;
    let mut whole = Whole {
        usage: raw.usage,
        error: raw.error.as_ref().map(error_message),
        timings: raw.timings,
        ..Default::default()
    };
    for c in &raw.choices {
        let m = &c["message"];
        for part in [
            &m["reasoning_content"],
            &m["reasoning"],
            &m["content"],
            &c["text"],
        ] {
            if let Some(s) = part.as_str() {
                whole.text.push_str(s);
            }
        }
        if let Some(f) = c["finish_reason"].as_str() {
            whole.finish_reason = Some(f.to_string());
        }
    }
    Ok(whole)
}

/// A one-line message from an error object (`{"message": ...}` or a string).
pub fn error_message(err: &Value) -> String {
    let msg = match err {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| err.to_string()),
        other => other.to_string(),
    };
    msg.lines().next().unwrap_or("").chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(data: &str) -> (ChunkInfo, String) {
        let mut text = String::new();
        let info = parse_chunk(data, &mut text).unwrap();
        (info, text)
    }

    #[test]
    fn content_delta_is_text() {
        let (info, text) = parse(r#"{"choices":[{"index":0,"delta":{"content":" hello"}}]}"#);
        assert_eq!(info.text_bytes, 6);
        assert_eq!(text, " hello");
    }

    #[test]
    fn role_only_chunk_is_not_a_token() {
        let (info, _) = parse(
            r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}]}"#,
        );
        assert_eq!(info.text_bytes, 0);
        let (info, _) =
            parse(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#);
        assert_eq!(info.text_bytes, 0, "empty content is not a token");
    }

    #[test]
    fn float_usage_and_null_choices_are_tolerated() {
        let mut text = String::new();
        let info = parse_chunk(
            r#"{"choices":null,"usage":{"prompt_tokens":18.0,"completion_tokens":3.0}}"#,
            &mut text,
        )
        .unwrap();
        assert_eq!(info.usage.unwrap().completion_tokens, Some(3));
        assert_eq!(info.usage.unwrap().prompt_tokens, Some(18));
        let info = parse_chunk(
            r#"{"choices":[],"usage":{"completion_tokens":2.5}}"#,
            &mut text,
        )
        .unwrap();
        assert_eq!(info.usage.unwrap().completion_tokens, None, "not a count");
    }

    #[test]
    fn usage_only_final_chunk() {
        let (info, _) = parse(
            r#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":18,"total_tokens":21},"timings":{"prompt_ms":7.1}}"#,
        );
        assert_eq!(info.text_bytes, 0);
        assert_eq!(
            info.usage,
            Some(Usage {
                prompt_tokens: Some(18),
                completion_tokens: Some(3),
                cached_tokens: None,
            })
        );
        assert!(info.timings.is_some());
    }

    #[test]
    fn cached_prompt_tokens_are_read_when_sent() {
        let (info, _) = parse(
            r#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":18,"prompt_tokens_details":{"cached_tokens":5}}}"#,
        );
        assert_eq!(info.usage.unwrap().cached_tokens, Some(5));
        for odd in [r#"null"#, r#"{}"#, r#"{"cached_tokens":null}"#, r#""x""#] {
            let data = format!(
                r#"{{"choices":[],"usage":{{"completion_tokens":3,"prompt_tokens_details":{odd}}}}}"#
            );
            let (info, _) = parse(&data);
            assert_eq!(info.usage.unwrap().cached_tokens, None, "{odd}");
            assert_eq!(info.usage.unwrap().completion_tokens, Some(3), "{odd}");
        }
    }

    #[test]
    fn reasoning_content_counts_as_generated_text() {
        let (info, text) = parse(r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#);
        assert_eq!(info.text_bytes, 5);
        assert_eq!(text, "think");
        let (info, _) = parse(r#"{"choices":[{"delta":{"reasoning":"hm"}}]}"#);
        assert_eq!(info.text_bytes, 2);
    }

    #[test]
    fn completion_text_and_finish_reason() {
        let (info, text) = parse(
            r#"{"choices":[{"text":" duef","index":0,"logprobs":null,"finish_reason":"length"}]}"#,
        );
        assert_eq!((info.text_bytes, text.as_str()), (5, " duef"));
        assert_eq!(info.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn per_chunk_usage_is_kept() {
        let (info, _) = parse(
            r#"{"choices":[{"delta":{"content":"ab"}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
        );
        assert_eq!(info.usage.unwrap().completion_tokens, Some(2));
    }

    #[test]
    fn escaped_text_is_decoded() {
        let (info, text) = parse(r#"{"choices":[{"delta":{"content":"a\nb\u00e9"}}]}"#);
        assert_eq!(text, "a\nbé");
        assert_eq!(info.text_bytes, 5, "bytes, not characters");
    }

    #[test]
    fn error_object_mid_stream() {
        let (info, _) =
            parse(r#"{"error":{"code":500,"message":"slot died\nmore","type":"server_error"}}"#);
        assert_eq!(info.error.as_deref(), Some("slot died"));
        let (info, _) =
            parse(r#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#);
        assert_eq!(info.error.as_deref(), Some("bad"));
    }

    #[test]
    fn whole_answers_of_both_apis_are_read() {
        let chat = parse_whole(
            r#"{"choices":[{"message":{"role":"assistant","content":"hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#,
        )
        .unwrap();
        assert_eq!(chat.text, "hi there");
        assert_eq!(chat.finish_reason.as_deref(), Some("stop"));
        assert_eq!(chat.usage.unwrap().completion_tokens, Some(2));
        let comp =
            parse_whole(r#"{"choices":[{"text":" x y","finish_reason":"length"}]}"#).unwrap();
        assert_eq!((comp.text.as_str(), comp.usage), (" x y", None));
        let err = parse_whole(r#"{"error":{"message":"no such model"}}"#).unwrap();
        assert_eq!(err.error.as_deref(), Some("no such model"));
        assert!(parse_whole("<html>").is_err());
    }

    #[test]
    fn a_non_streaming_body_asks_for_no_stream() {
        let shape = Shape::default();
        let p = RequestParams {
            model: "m",
            prompt: "hi",
            max_tokens: Some(3),
            ignore_eos: false,
            shape: &shape,
            history: &[],
            stream: false,
        };
        let body: Value = serde_json::from_slice(&request_body(Api::Chat, &p)).unwrap();
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn malformed_chunk_is_an_error_with_a_snippet() {
        let mut text = String::new();
        let err = parse_chunk("{not json", &mut text).unwrap_err();
        assert!(err.to_string().contains("{not json"), "{err}");
    }

    #[test]
    fn bodies_ask_for_usage_and_exact_lengths() {
        let shape = Shape::default();
        let p = RequestParams {
            model: "m",
            prompt: "hi",
            max_tokens: Some(7),
            ignore_eos: true,
            shape: &shape,
            history: &[],
            stream: true,
        };
        let chat: Value = serde_json::from_slice(&request_body(Api::Chat, &p)).unwrap();
        assert_eq!(chat["messages"][0]["content"], "hi");
        assert_eq!(chat["stream"], true);
        assert_eq!(chat["stream_options"]["include_usage"], true);
        assert_eq!(chat["max_tokens"], 7);
        assert_eq!(chat["min_tokens"], 7);
        assert_eq!(chat["ignore_eos"], true);
        let p = RequestParams {
            ignore_eos: false,
            ..p
        };
        let comp: Value = serde_json::from_slice(&request_body(Api::Completions, &p)).unwrap();
        assert_eq!(comp["prompt"], "hi");
        assert!(comp.get("ignore_eos").is_none() && comp.get("min_tokens").is_none());
    }

    #[test]
    fn the_request_shape_is_added_and_the_timed_fields_win() {
        let mut extra = serde_json::Map::new();
        extra.insert("top_p".into(), json!(0.9));
        extra.insert("stream".into(), json!(false));
        extra.insert("model".into(), json!("other"));
        let shape = Shape {
            system_prompt: Some("Be brief.".into()),
            temperature: Some(0.0),
            extra,
        };
        let p = RequestParams {
            model: "m",
            prompt: "hi",
            max_tokens: None,
            ignore_eos: false,
            shape: &shape,
            history: &[],
            stream: true,
        };
        let chat: Value = serde_json::from_slice(&request_body(Api::Chat, &p)).unwrap();
        assert_eq!(
            chat["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(chat["messages"][1]["content"], "hi");
        assert_eq!(
            (chat["temperature"].clone(), chat["top_p"].clone()),
            (json!(0.0), json!(0.9))
        );
        assert_eq!(
            (chat["stream"].clone(), chat["model"].clone()),
            (json!(true), json!("m"))
        );
        let comp: Value = serde_json::from_slice(&request_body(Api::Completions, &p)).unwrap();
        assert_eq!(comp["prompt"], "Be brief.\n\nhi");
    }

    #[test]
    fn a_later_turn_carries_the_history_and_extends_the_last_prompt() {
        use tokenscope_workload::session::Exchange;
        let shape = Shape {
            system_prompt: Some("S".into()),
            ..Default::default()
        };
        let history = [Exchange {
            user: "q1".into(),
            assistant: " a1".into(),
        }];
        let p = RequestParams {
            model: "m",
            prompt: "q2",
            max_tokens: None,
            ignore_eos: false,
            shape: &shape,
            history: &history,
            stream: true,
        };
        let chat: Value = serde_json::from_slice(&request_body(Api::Chat, &p)).unwrap();
        let roles: Vec<_> = chat["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                format!(
                    "{}:{}",
                    m["role"].as_str().unwrap(),
                    m["content"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(roles, ["system:S", "user:q1", "assistant: a1", "user:q2"]);
        let first = RequestParams {
            prompt: "q1",
            history: &[],
            ..p.clone()
        };
        let a: Value = serde_json::from_slice(&request_body(Api::Completions, &first)).unwrap();
        let b: Value = serde_json::from_slice(&request_body(Api::Completions, &p)).unwrap();
        let (a, b) = (a["prompt"].as_str().unwrap(), b["prompt"].as_str().unwrap());
        assert!(b.starts_with(a), "`{b}` extends `{a}`");
    }
}
