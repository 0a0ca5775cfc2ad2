//! What the pooling APIs (embeddings, rerank) share: their answers are
//! whole — a list of items (vectors, scores) and a usage that counts only
//! the prompt tokens — and they never stream. The list is counted, not
//! read: an embedding's thousand floats are skipped unparsed.

use super::{openai, Event, Malformed, Usage};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(untagged)]
enum RawAnswer {
    /// `{"data": [...]}` (OpenAI embeddings) or `{"results": [...]}`
    /// (rerank: Jina's, Cohere's, vLLM's, llama.cpp's).
    Object(RawObject),
    /// A bare list (TEI's rerank).
    List(Vec<IgnoredAny>),
}

#[derive(Deserialize)]
struct RawObject {
    #[serde(default)]
    data: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    results: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    usage: Option<RawUsage>,
    #[serde(default)]
    error: Option<Value>,
    /// The built-in servers' own timings, where given.
    #[serde(default)]
    timings: Option<Value>,
}

/// Pooling usage: `prompt_tokens`, or only `total_tokens` (vLLM's
/// rerank), which for a pooling request is the same count.
#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

/// A whole pooling answer as events: its error, its items, its usage.
pub fn whole_events(body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
    let raw: RawAnswer = serde_json::from_str(body).map_err(|e| Malformed::of(e, body))?;
    let o = match raw {
        RawAnswer::List(items) => {
            emit(Event::Items(items.len() as u64));
            return Ok(());
        }
        RawAnswer::Object(o) => o,
    };
    if let Some(err) = o.error.filter(|e| !e.is_null()) {
        emit(Event::Error(openai::error_message(&err)));
        return Ok(());
    }
    match o.data.or(o.results) {
        Some(items) => emit(Event::Items(items.len() as u64)),
        None => {
            return Err(Malformed {
                reason: "a pooling answer carries neither `data` nor `results`".into(),
                snippet: body.chars().take(80).collect(),
            })
        }
    }
    if let Some(u) = o.usage {
        emit(Event::Usage(Usage {
            prompt_tokens: u.prompt_tokens.or(u.total_tokens),
            completion_tokens: Some(0),
            ..Usage::default()
        }));
    }
    if let Some(t) = o.timings {
        emit(Event::Timings(t));
    }
    Ok(())
}

/// A pooling API never streams: any event is not what it defines.
pub fn no_stream(data: &str) -> Result<(), Malformed> {
    Err(Malformed {
        reason: "a pooling API answers whole; it sent a stream".into(),
        snippet: data.chars().take(80).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Piece;

    fn fold(body: &str) -> Result<Piece, Malformed> {
        let mut p = Piece::default();
        let (mut text, mut r) = (
            String::new(),
            super::super::Reasoner::new(Default::default()),
        );
        whole_events(body, &mut |e| p.add(e, &mut text, &mut r))?;
        assert!(text.is_empty(), "a pooling answer generates no text");
        Ok(p)
    }

    #[test]
    fn embeddings_count_their_vectors_and_prompt_tokens() {
        let p = fold(
            r#"{"object":"list","data":[{"embedding":[0.1,0.2],"index":0},{"embedding":[0.3,0.4],"index":1}],"usage":{"prompt_tokens":7,"total_tokens":7}}"#,
        )
        .unwrap();
        assert_eq!(p.items, Some(2));
        assert_eq!(p.usage.unwrap().prompt_tokens, Some(7));
        assert_eq!(p.usage.unwrap().completion_tokens, Some(0));
    }

    #[test]
    fn rerank_answers_in_every_peer_shape_are_counted() {
        // vLLM: usage with only total_tokens.
        let p = fold(r#"{"id":"r","results":[{"index":1,"relevance_score":0.9}],"usage":{"total_tokens":12}}"#).unwrap();
        assert_eq!(
            (p.items, p.usage.unwrap().prompt_tokens),
            (Some(1), Some(12))
        );
        // TEI: a bare list.
        let p = fold(r#"[{"index":0,"score":0.5},{"index":1,"score":0.1}]"#).unwrap();
        assert_eq!((p.items, p.usage), (Some(2), None));
    }

    #[test]
    fn errors_and_wrong_shapes_are_told_apart() {
        let p = fold(r#"{"error":{"message":"too long","code":400}}"#).unwrap();
        assert_eq!(p.error.as_deref(), Some("too long"));
        assert!(fold(r#"{"choices":[]}"#).is_err());
        assert!(fold("not json").is_err());
        assert!(no_stream("{}").is_err());
    }
}
