//! OpenAI's chat API: `POST /v1/chat/completions` with `messages`.

use super::{openai, Event, Malformed, MediaKind, PartStyle, Protocol, Request};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy)]
pub struct OpenaiChat;

impl Protocol for OpenaiChat {
    fn name(&self) -> &'static str {
        "openai-chat"
    }

    fn path(&self) -> &'static str {
        "/v1/chat/completions"
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut obj = r.extra.clone();
        let messages = r
            .messages
            .iter()
            .flat_map(|m| m.to_items(PartStyle::Chat))
            .collect();
        obj.insert("messages".into(), Value::Array(messages));
        openai::finish_body(obj, r)
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        openai::chunk_events(data, emit)
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        openai::whole_events(body, emit)
    }

    fn media_kinds(&self) -> &'static [MediaKind] {
        &[MediaKind::Image, MediaKind::Audio, MediaKind::Video]
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
    use crate::protocol::{Message, Part, Role, Shape};

    fn body(r: &Request<'_>) -> Value {
        serde_json::from_slice(&OpenaiChat.body(r)).unwrap()
    }

    #[test]
    fn bodies_ask_for_usage_and_exact_lengths() {
        let shape = Shape::default();
        let r = Request {
            max_tokens: Some(7),
            ignore_eos: true,
            ..Request::conversation("m", &shape, [], "hi")
        };
        let chat = body(&r);
        assert_eq!(chat["messages"][0]["content"], "hi");
        assert_eq!(chat["stream"], true);
        assert_eq!(chat["stream_options"]["include_usage"], true);
        assert_eq!(chat["max_tokens"], 7);
        assert_eq!(chat["min_tokens"], 7);
        assert_eq!(chat["ignore_eos"], true);
    }

    #[test]
    fn a_non_streaming_body_asks_for_no_stream() {
        let shape = Shape::default();
        let r = Request {
            stream: false,
            max_tokens: Some(3),
            ..Request::conversation("m", &shape, [], "hi")
        };
        let chat = body(&r);
        assert_eq!(chat["stream"], false);
        assert!(chat.get("stream_options").is_none());
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
            response_format: None,
        };
        let chat = body(&Request::conversation("m", &shape, [], "hi"));
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
    }

    #[test]
    fn a_later_turn_carries_the_history() {
        let shape = Shape {
            system_prompt: Some("S".into()),
            ..Default::default()
        };
        let chat = body(&Request::conversation("m", &shape, [("q1", " a1")], "q2"));
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
    }

    #[test]
    fn content_of_several_parts_is_a_list_and_tools_go_along() {
        let shape = Shape::default();
        let tools = [json!({"type": "function", "function": {"name": "f"}})];
        let mut r = Request::conversation("m", &shape, [], "hi");
        r.messages.push(Message {
            content: vec![Part::Text("a"), Part::Text("b")],
            ..Message::text(Role::User, "")
        });
        r.tools = &tools;
        let chat = body(&r);
        assert_eq!(
            chat["messages"][1]["content"],
            json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
        );
        assert_eq!(chat["tools"][0]["function"]["name"], "f");
    }
}
