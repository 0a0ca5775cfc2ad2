//! Rerank: `POST /v1/rerank` with a query and documents, the shape Jina
//! defined and vLLM, llama.cpp (`--reranking`), TEI and Cohere-compatible
//! gateways take. The prompt is the query; the request's other inputs
//! (`--batch-size` of them) are the documents. The answer scores each
//! document (`top_n` in `--extra-body` keeps fewer).

use super::{pooling, Event, ItemsAsked, Malformed, Protocol, Request};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy)]
pub struct Rerank;

impl Protocol for Rerank {
    fn name(&self) -> &'static str {
        "rerank"
    }

    fn path(&self) -> &'static str {
        "/v1/rerank"
    }

    fn body(&self, r: &Request<'_>) -> Vec<u8> {
        let mut obj = r.extra.clone();
        obj.insert("model".into(), json!(r.model));
        obj.insert("query".into(), json!(r.prompt()));
        obj.insert("documents".into(), json!(r.documents));
        serde_json::to_vec(&obj).expect("a JSON value serializes")
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({"model": model, "query": "hi", "documents": ["hi"]})
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
        batch_size.max(1)
    }

    fn items_asked(&self, r: &Request<'_>) -> ItemsAsked {
        let docs = r.documents.len() as u64;
        let least = r
            .extra
            .get("top_n")
            .and_then(Value::as_u64)
            .map_or(docs, |n| n.min(docs));
        ItemsAsked {
            least,
            inputs: docs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Shape;

    #[test]
    fn the_prompt_is_the_query_and_the_batch_the_documents() {
        let mut shape = Shape::default();
        let r = Request {
            documents: vec!["d1", "d2", "d3"],
            ..Request::conversation("m", &shape, [], "q")
        };
        let body: Value = serde_json::from_slice(&Rerank.body(&r)).unwrap();
        assert_eq!(body["query"], "q");
        assert_eq!(body["documents"], json!(["d1", "d2", "d3"]));
        assert_eq!(
            Rerank.items_asked(&r),
            ItemsAsked {
                least: 3,
                inputs: 3
            }
        );
        shape.extra.insert("top_n".into(), json!(2));
        let r = Request {
            documents: vec!["d1", "d2", "d3"],
            ..Request::conversation("m", &shape, [], "q")
        };
        assert_eq!(
            Rerank.items_asked(&r),
            ItemsAsked {
                least: 2,
                inputs: 3
            }
        );
    }
}
