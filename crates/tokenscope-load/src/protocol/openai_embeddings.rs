//! OpenAI's embeddings API: `POST /v1/embeddings` with a batch of inputs
//! (vLLM, SGLang, TEI, llama.cpp with `--embeddings`). The prompt and the
//! request's other inputs (`--batch-size`) go as one `input` list; the
//! answer carries a vector per input and the prompt tokens in its usage.

use super::{pooling, Event, ItemsAsked, Malformed, Protocol, Request};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy)]
pub struct OpenaiEmbeddings;

impl Protocol for OpenaiEmbeddings {
    fn name(&self) -> &'static str {
        "openai-embeddings"
    }

    fn path(&self) -> &'static str {
        "/v1/embeddings"
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut obj = r.extra.clone();
        let prompt = r.prompt();
        let inputs: Vec<&str> = std::iter::once(&*prompt)
            .chain(r.documents.iter().copied())
            .collect();
        obj.insert("model".into(), json!(r.model));
        obj.insert("input".into(), json!(inputs));
        obj.entry("encoding_format").or_insert(json!("float"));
        serde_json::to_vec(&obj).expect("a JSON value serializes")
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({"model": model, "input": ["hi"]})
    }

    fn stream_event(&self, data: &str, _: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        pooling::no_stream(data)
    }

    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
        pooling::whole_events(body, emit)
    }

    fn pooling(&self) -> bool {
        true
    }

    fn documents(&self, batch_size: u64) -> u64 {
        batch_size.saturating_sub(1)
    }

    fn items_asked(&self, r: &Request<'_>) -> ItemsAsked {
        let inputs = 1 + r.documents.len() as u64;
        ItemsAsked {
            least: inputs,
            inputs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Shape;

    #[test]
    fn the_prompt_and_the_batch_go_as_one_input_list() {
        let shape = Shape::default();
        let r = Request {
            documents: vec!["b", "c"],
            ..Request::conversation("m", &shape, [], "a")
        };
        let body: Value = serde_json::from_slice(&OpenaiEmbeddings.body(&r)).unwrap();
        assert_eq!(body["input"], json!(["a", "b", "c"]));
        assert_eq!(body["model"], "m");
        assert!(body.get("stream").is_none() && body.get("max_tokens").is_none());
        assert_eq!(OpenaiEmbeddings.items_asked(&r).least, 3);
    }
}
