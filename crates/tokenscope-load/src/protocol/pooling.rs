//! What the pooling APIs (embeddings, rerank) share: their answers are
//! whole — a list of items (vectors, scores) and a usage that counts only
//! the prompt tokens — and they never stream. The list is counted, not
//! read: an embedding's thousand floats are skipped unparsed.

use super::{openai, Event, Malformed, Usage};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

enum RawAnswer {
    /// `{"data": [...]}` (OpenAI embeddings) or `{"results": [...]}`
    /// (rerank: Jina's, Cohere's, vLLM's, llama.cpp's).
    Object(RawObject),
    /// A bare list (TEI's rerank).
    List(Vec<RawItem>),
}

/// Told apart by the first byte, not by serde's `untagged` (which would
/// hold the whole answer in memory, each float a value of its own, before
/// choosing).
impl<'de> Deserialize<'de> for RawAnswer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawAnswer, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RawAnswer;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a pooling answer (an object or a list)")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<RawAnswer, A::Error> {
                RawObject::deserialize(MapAccessDeserializer::new(m)).map(RawAnswer::Object)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, s: A) -> Result<RawAnswer, A::Error> {
                Vec::deserialize(SeqAccessDeserializer::new(s)).map(RawAnswer::List)
            }
        }
        d.deserialize_any(Visit)
    }
}

#[derive(Deserialize)]
struct RawObject {
    #[serde(default)]
    data: Option<Vec<RawItem>>,
    #[serde(default)]
    results: Option<Vec<RawItem>>,
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
/// One item of a pooling answer: only its `index` is read (an object's
/// `index` field; a bare vector has none), the rest skipped unparsed.
struct RawItem {
    index: Option<Value>,
}

impl<'de> Deserialize<'de> for RawItem {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawItem, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RawItem;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an item (an object or a vector)")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<RawItem, A::Error> {
                let mut index = None;
                while let Some(key) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "index" => index = Some(m.next_value::<Value>()?),
                        _ => drop(m.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(RawItem { index })
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<RawItem, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(RawItem { index: None })
            }
        }
        d.deserialize_any(Visit)
    }
}

/// The items' count and highest index, to `emit`; an index that is no
/// input's place (negative, not a whole number) or is named twice makes
/// the answer malformed.
fn items(list: &[RawItem], body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
    let bad = |reason: String| Malformed {
        reason,
        snippet: body.chars().take(80).collect(),
    };
    let mut seen = std::collections::HashSet::new();
    let mut highest = None;
    for index in list.iter().filter_map(|i| i.index.as_ref()) {
        let i = index
            .as_u64()
            .ok_or_else(|| bad(format!("an item's index {index} is no input's place")))?;
        if !seen.insert(i) {
            return Err(bad(format!("two items at index {i}")));
        }
        highest = highest.max(Some(i));
    }
    emit(Event::Items(list.len() as u64));
    if let Some(i) = highest {
        emit(Event::HighestIndex(i));
    }
    Ok(())
}

pub fn whole_events(body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed> {
    let raw: RawAnswer = serde_json::from_str(body).map_err(|e| Malformed::of(e, body))?;
    let o = match raw {
        RawAnswer::List(list) => return items(&list, body, emit),
        RawAnswer::Object(o) => o,
    };
    if let Some(err) = o.error.filter(|e| !e.is_null()) {
        emit(Event::Error(openai::error_message(&err)));
        return Ok(());
    }
    match o.data.or(o.results) {
        Some(list) => items(&list, body, emit)?,
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
    fn indices_are_read_and_impossible_ones_refused() {
        let p = fold(r#"{"results":[{"index":1000,"relevance_score":0.9},{"index":1001,"relevance_score":0.1}]}"#).unwrap();
        assert_eq!((p.items, p.highest_index), (Some(2), Some(1001)));
        // TEI's bare vectors have no index.
        let p = fold("[[0.1,0.2],[0.3,0.4],[0.5,0.6]]").unwrap();
        assert_eq!((p.items, p.highest_index), (Some(3), None));
        let negative = fold(r#"{"results":[{"index":-1,"relevance_score":0.9}]}"#);
        assert!(negative.unwrap_err().reason.contains("index -1"));
        let twice = fold(r#"{"data":[{"embedding":[1],"index":0},{"embedding":[2],"index":0}]}"#);
        assert!(twice.unwrap_err().reason.contains("two items at index 0"));
        assert!(fold(r#"{"data":[{"embedding":[1],"index":0.5}]}"#).is_err());
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
