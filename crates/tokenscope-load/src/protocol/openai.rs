//! What OpenAI's chat and completions APIs share: the body's common fields,
//! usage, errors, and the stream chunk. Servers are loose about which shape
//! they answer in (a completions server's chunk may carry a `delta`), so
//! both APIs read chunks and whole answers the same way.
//!
//! Chunks are parsed borrowing from the event's text, so a token costs one
//! JSON scan and no allocation unless its text has escapes.

use super::{Event, Malformed, Request, ToolCallDelta, Usage};
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;

/// The fields both APIs' bodies carry, set over `obj` (the API's own fields
/// and `--extra-body`): streaming with usage asked for, or (`stream` off)
/// one whole answer, which carries its usage anyway; the lengths.
pub fn finish_body(mut obj: serde_json::Map<String, Value>, r: &Request<'_>) -> Vec<u8> {
    r.common_fields(&mut obj);
    if let Some(f) = r.response_format {
        obj.insert("response_format".into(), f.openai());
    }
    r.tool_fields(&mut obj, Value::clone, super::ToolChoice::openai);
    if r.stream {
        obj.insert("stream_options".into(), json!({"include_usage": true}));
    } else {
        obj.remove("stream_options");
    }
    if let Some(n) = r.max_tokens {
        obj.insert("max_tokens".into(), json!(n));
        if r.ignore_eos {
            obj.insert("min_tokens".into(), json!(n));
        }
    }
    serde_json::to_vec(&obj).expect("a JSON value serializes")
}

/// Token counts as OpenAI writes them. Some servers send them as floats
/// (`3.0`): whole ones are taken, anything else is no count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
struct RawUsage {
    #[serde(default, deserialize_with = "count")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    completion_tokens: Option<u64>,
    /// `prompt_tokens_details.cached_tokens` (vLLM, SGLang, llama.cpp, the built-in engine).
    #[serde(default, rename = "prompt_tokens_details", deserialize_with = "cached")]
    cached_tokens: Option<u64>,
    /// `completion_tokens_details.reasoning_tokens`.
    #[serde(
        default,
        rename = "completion_tokens_details",
        deserialize_with = "reasoning"
    )]
    reasoning_tokens: Option<u64>,
}

impl From<RawUsage> for Usage {
    fn from(u: RawUsage) -> Usage {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
            reasoning_tokens: u.reasoning_tokens,
        }
    }
}

/// A count inside a details object (`{"cached_tokens": 5}`).
fn detail(details: Option<Value>, key: &str) -> Option<u64> {
    details.as_ref()?.get(key)?.as_u64()
}

fn cached<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(detail(Option::deserialize(d)?, "cached_tokens"))
}

fn reasoning<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(detail(Option::deserialize(d)?, "reasoning_tokens"))
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
    usage: Option<RawUsage>,
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
    #[serde(borrow, default, deserialize_with = "null_as_empty")]
    tool_calls: Vec<RawToolCall<'a>>,
}

/// A piece of a streamed tool call: the first of a call carries its id
/// and name, the rest its arguments' text.
#[derive(Deserialize)]
struct RawToolCall<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<RawFunction<'a>>,
}

#[derive(Deserialize)]
struct RawFunction<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

/// A whole answer's tool call (`message.tool_calls[i]`), as an event.
fn whole_call(i: usize, call: &Value) -> Event<'_> {
    let f = &call["function"];
    // Arguments are a string of JSON; a server that sends the object
    // itself is read as that object's text.
    let arguments = match &f["arguments"] {
        Value::String(s) => Cow::Borrowed(s.as_str()),
        Value::Null => Cow::Borrowed(""),
        other => Cow::Owned(other.to_string()),
    };
    Event::ToolCall(ToolCallDelta {
        index: call["index"].as_u64().unwrap_or(i as u64) as u32,
        id: call["id"].as_str().map(Cow::Borrowed),
        name: f["name"].as_str().map(Cow::Borrowed),
        arguments,
    })
}

/// Text that is there: an empty or missing field is no event (a role-only
/// chunk is not a token).
fn text_event<'a>(
    s: Option<Cow<'a, str>>,
    kind: fn(Cow<'a, str>) -> Event<'a>,
) -> Option<Event<'a>> {
    s.filter(|s| !s.is_empty()).map(kind)
}

/// One chunk of a chat or completions stream, as events.
pub fn chunk_events(data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
    let raw: RawChunk<'_> = serde_json::from_str(data).map_err(|e| Malformed::of(e, data))?;
    if let Some(err) = raw.error {
        emit(Event::Error(error_message(&err)));
    } else if raw.object.as_deref() == Some("error") {
        let said = raw.message.as_deref().unwrap_or("error object in stream");
        emit(Event::Error(said.to_string()));
    }
    for choice in raw.choices {
        if let Some(d) = choice.delta {
            let texts = [
                text_event(d.reasoning_content, Event::Reasoning),
                text_event(d.reasoning, Event::Reasoning),
                text_event(d.content, Event::Answer),
            ];
            texts.into_iter().flatten().for_each(&mut *emit);
            for call in d.tool_calls {
                let f = call.function;
                let (name, arguments) = f.map_or((None, None), |f| (f.name, f.arguments));
                emit(Event::ToolCall(ToolCallDelta {
                    index: call.index,
                    id: call.id,
                    name: name.filter(|n| !n.is_empty()),
                    arguments: arguments.unwrap_or_default(),
                }));
            }
        }
        if let Some(e) = text_event(choice.text, Event::Answer) {
            emit(e);
        }
        if let Some(f) = choice.finish_reason {
            emit(Event::Finish(f));
        }
    }
    if let Some(u) = raw.usage {
        emit(Event::Usage(u.into()));
    }
    if let Some(t) = raw.timings {
        emit(Event::Timings(t));
    }
    Ok(())
}

/// A whole chat or completions answer, as events.
pub fn whole_events(body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
    #[derive(Deserialize)]
    struct RawWhole {
        #[serde(default, deserialize_with = "null_as_empty")]
        choices: Vec<Value>,
        #[serde(default)]
        usage: Option<RawUsage>,
        #[serde(default)]
        error: Option<Value>,
        #[serde(default)]
        timings: Option<Value>,
    }
    let raw: RawWhole = serde_json::from_str(body).map_err(|e| Malformed::of(e, body))?;
    if let Some(err) = &raw.error {
        emit(Event::Error(error_message(err)));
    }
    for c in &raw.choices {
        let m = &c["message"];
        let parts = [
            (&m["reasoning_content"], true),
            (&m["reasoning"], true),
            (&m["content"], false),
            (&c["text"], false),
        ];
        for (part, reasoning) in parts {
            if let Some(s) = part.as_str().filter(|s| !s.is_empty()) {
                emit(match reasoning {
                    true => Event::Reasoning(s.into()),
                    false => Event::Answer(s.into()),
                });
            }
        }
        let calls = m["tool_calls"].as_array().into_iter().flatten();
        calls
            .enumerate()
            .for_each(|(i, call)| emit(whole_call(i, call)));
        if let Some(f) = c["finish_reason"].as_str() {
            emit(Event::Finish(f.into()));
        }
    }
    if let Some(u) = raw.usage {
        emit(Event::Usage(u.into()));
    }
    if let Some(t) = raw.timings {
        emit(Event::Timings(t));
    }
    Ok(())
}

/// A body's `error` field, when it holds one, in one short line.
pub fn error_field(body: &Value) -> Option<String> {
    body.get("error")
        .filter(|e| !e.is_null())
        .map(error_message)
}

/// An `error` value in one short line: its `message`, or the value itself.
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
    use crate::protocol::{Piece, Reasoner, ReasoningParser};

    fn parse(data: &str) -> (Piece, String) {
        let mut text = String::new();
        let mut piece = Piece::default();
        let mut r = Reasoner::new(ReasoningParser::Auto);
        chunk_events(data, &mut |e| piece.add(e, &mut text, &mut r)).unwrap();
        (piece, text)
    }

    fn usage(prompt: Option<u64>, completion: Option<u64>) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            ..Usage::default()
        }
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
        let (info, _) =
            parse(r#"{"choices":null,"usage":{"prompt_tokens":18.0,"completion_tokens":3.0}}"#);
        assert_eq!(info.usage, Some(usage(Some(18), Some(3))));
        let (info, _) = parse(r#"{"choices":[],"usage":{"completion_tokens":2.5}}"#);
        assert_eq!(info.usage.unwrap().completion_tokens, None, "not a count");
    }

    #[test]
    fn usage_only_final_chunk() {
        let (info, _) = parse(
            r#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":18,"total_tokens":21},"timings":{"prompt_ms":7.1}}"#,
        );
        assert_eq!(info.text_bytes, 0);
        assert_eq!(info.usage, Some(usage(Some(18), Some(3))));
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
    fn reasoning_tokens_are_read_from_the_details() {
        let (info, _) = parse(
            r#"{"choices":[],"usage":{"completion_tokens":60,"completion_tokens_details":{"reasoning_tokens":40}}}"#,
        );
        assert_eq!(info.usage.unwrap().reasoning_tokens, Some(40));
        assert_eq!(info.usage.unwrap().completion_tokens, Some(60));
    }

    #[test]
    fn reasoning_content_counts_as_generated_text() {
        let (info, text) = parse(r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#);
        assert_eq!((info.text_bytes, info.reasoning_bytes), (5, 5));
        assert_eq!(text, "", "reasoning is kept apart from the answer's text");
        let (info, _) = parse(r#"{"choices":[{"delta":{"reasoning":"hm"}}]}"#);
        assert_eq!(info.text_bytes, 2);
        let mut events = Vec::new();
        chunk_events(
            r#"{"choices":[{"delta":{"reasoning_content":"a","content":"b"}}]}"#,
            &mut |e| events.push(format!("{e:?}")),
        )
        .unwrap();
        assert_eq!(events, [r#"Reasoning("a")"#, r#"Answer("b")"#]);
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
        let whole = |body: &str| {
            let mut text = String::new();
            let mut piece = Piece::default();
            let mut r = Reasoner::new(ReasoningParser::Auto);
            whole_events(body, &mut |e| piece.add(e, &mut text, &mut r)).map(|()| (piece, text))
        };
        let (chat, text) = whole(
            r#"{"choices":[{"message":{"role":"assistant","content":"hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#,
        )
        .unwrap();
        assert_eq!(text, "hi there");
        assert_eq!(chat.finish_reason.as_deref(), Some("stop"));
        assert_eq!(chat.usage.unwrap().completion_tokens, Some(2));
        let (comp, text) =
            whole(r#"{"choices":[{"text":" x y","finish_reason":"length"}]}"#).unwrap();
        assert_eq!((text.as_str(), comp.usage), (" x y", None));
        let (err, _) = whole(r#"{"error":{"message":"no such model"}}"#).unwrap();
        assert_eq!(err.error.as_deref(), Some("no such model"));
        assert!(whole("<html>").is_err());
    }

    #[test]
    fn streamed_and_whole_tool_calls_are_read() {
        let (p, text) = parse(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
        );
        assert_eq!(
            (p.text_bytes, text.as_str()),
            (11, ""),
            "the name is generated"
        );
        assert_eq!(p.calls[0].name.as_deref(), Some("get_weather"));
        let (p, _) = parse(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\""}}]}}]}"#,
        );
        assert_eq!(
            (p.calls[0].arguments.as_ref(), p.text_bytes),
            ("{\"city\"", 7)
        );
        let mut piece = Piece::default();
        let (mut text, mut r) = (String::new(), Reasoner::new(ReasoningParser::Auto));
        whole_events(
            r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"a":1}}}]},"finish_reason":"tool_calls"}]}"#,
            &mut |e| piece.add(e, &mut text, &mut r),
        )
        .unwrap();
        assert_eq!(piece.calls[0].arguments, r#"{"a":1}"#);
        assert_eq!(piece.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn malformed_chunk_is_an_error_with_a_snippet() {
        let err = chunk_events("{not json", &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("{not json"), "{err}");
    }
}
