//! OpenAI's completions API: `POST /v1/completions` with one `prompt`.

use super::{openai, Event, Malformed, Protocol, Request};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy)]
pub struct OpenaiCompletions;

impl Protocol for OpenaiCompletions {
    fn name(&self) -> &'static str {
        "openai-completions"
    }

    fn path(&self) -> &'static str {
        "/v1/completions"
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut obj = r.extra.clone();
        obj.insert("prompt".into(), json!(r.prompt_text()));
        openai::finish_body(obj, r)
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({"model": model, "prompt": "hi", "max_tokens": 1})
    }

    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        openai::chunk_events(data, emit)
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        openai::whole_events(body, emit)
    }

    fn response_formats(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Shape;

    fn body(r: &Request<'_>) -> Value {
        serde_json::from_slice(&OpenaiCompletions.body(r)).unwrap()
    }

    #[test]
    fn the_prompt_is_sent_without_ignore_eos_unless_asked() {
        let shape = Shape::default();
        let r = Request {
            max_tokens: Some(7),
            ..Request::conversation("m", &shape, [], "hi")
        };
        let comp = body(&r);
        assert_eq!(comp["prompt"], "hi");
        assert_eq!(comp["max_tokens"], 7);
        assert!(comp.get("ignore_eos").is_none() && comp.get("min_tokens").is_none());
        assert!(comp.get("messages").is_none());
    }

    #[test]
    fn the_system_prompt_comes_first_a_blank_line_between() {
        let shape = Shape {
            system_prompt: Some("Be brief.".into()),
            ..Default::default()
        };
        assert_eq!(
            body(&Request::conversation("m", &shape, [], "hi"))["prompt"],
            "Be brief.\n\nhi"
        );
    }

    #[test]
    fn a_later_turn_extends_the_last_prompt() {
        let shape = Shape {
            system_prompt: Some("S".into()),
            ..Default::default()
        };
        let a = body(&Request::conversation("m", &shape, [], "q1"));
        let b = body(&Request::conversation("m", &shape, [("q1", " a1")], "q2"));
        let (a, b) = (a["prompt"].as_str().unwrap(), b["prompt"].as_str().unwrap());
        assert!(b.starts_with(a), "`{b}` extends `{a}`");
        assert_eq!(b, "S\n\nq1 a1\n\nq2");
    }
}
