//! The pooling APIs the built-in servers answer: embeddings
//! (`/v1/embeddings`) and rerank (`/v1/rerank`). A pooling request is
//! prefill only: each input (embeddings) or each query–document pair
//! (rerank, as vLLM and llama.cpp score them) is one sequence the engine
//! reads and pools, and nothing is generated. Tokens are whitespace words,
//! as the servers' other answers count them.

use serde_json::{json, Value};

/// Which pooling API a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooled {
    Embeddings,
    Rerank,
}

/// The numbers in each embedding: small, so a batch's answer stays cheap
/// to write and to read.
const DIMENSIONS: usize = 8;

fn words(v: &Value) -> u64 {
    v.as_str().unwrap_or("").split_whitespace().count() as u64
}

/// Texts of a string-or-list field.
fn texts(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().collect(),
        Value::Null => Vec::new(),
        one => vec![one],
    }
}

impl Pooled {
    /// The sequences the request asks the engine to read, each its prompt
    /// tokens; or why the request is not one this API takes.
    pub fn sequences(self, body: &Value) -> Result<Vec<u64>, String> {
        let seqs: Vec<u64> = match self {
            Pooled::Embeddings => texts(&body["input"]).into_iter().map(words).collect(),
            Pooled::Rerank => {
                let query = words(&body["query"]);
                texts(&body["documents"])
                    .into_iter()
                    .map(|d| query + words(d))
                    .collect()
            }
        };
        match (self, seqs.is_empty()) {
            (Pooled::Embeddings, true) => {
                Err("\"input\" must be a string or a non-empty list".into())
            }
            (Pooled::Rerank, true) => Err("\"documents\" must be a non-empty string array".into()),
            _ => Ok(seqs),
        }
    }

    /// The answer to a request whose sequences were `seqs`: a vector or a
    /// score each (rerank's best first, `top_n` of them), and the prompt
    /// tokens read.
    pub fn answer(self, body: &Value, model: &str, seqs: &[u64]) -> Value {
        let tokens: u64 = seqs.iter().sum();
        let usage = json!({"prompt_tokens": tokens, "total_tokens": tokens});
        match self {
            Pooled::Embeddings => {
                let data: Vec<Value> = (0..seqs.len())
                    .map(|i| {
                        let v: Vec<f64> = (0..DIMENSIONS)
                            .map(|d| ((i * DIMENSIONS + d) % 7) as f64 / 7.0)
                            .collect();
                        json!({"object": "embedding", "index": i, "embedding": v})
                    })
                    .collect();
                json!({"object": "list", "model": model, "data": data, "usage": usage})
            }
            Pooled::Rerank => {
                let top_n = body["top_n"].as_u64().map_or(seqs.len(), |n| n as usize);
                // Scores fall with the index: the answer is in document order.
                let results: Vec<Value> = (0..seqs.len().min(top_n))
                    .map(|i| json!({"index": i, "relevance_score": 1.0 / (1 + i) as f64}))
                    .collect();
                json!({"object": "list", "model": model, "results": results, "usage": usage})
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_input_or_query_document_pair_is_one_sequence() {
        let body = json!({"input": ["a b", "c d e"]});
        assert_eq!(Pooled::Embeddings.sequences(&body).unwrap(), [2, 3]);
        assert_eq!(
            Pooled::Embeddings
                .sequences(&json!({"input": "a b"}))
                .unwrap(),
            [2]
        );
        let body = json!({"query": "q r", "documents": ["a", "b c"], "top_n": 1});
        let seqs = Pooled::Rerank.sequences(&body).unwrap();
        assert_eq!(seqs, [3, 4]);
        let answer = Pooled::Rerank.answer(&body, "m", &seqs);
        assert_eq!(answer["results"].as_array().unwrap().len(), 1);
        assert_eq!(answer["usage"]["prompt_tokens"], 7);
        assert!(Pooled::Rerank.sequences(&json!({"query": "q"})).is_err());
        assert!(Pooled::Embeddings.sequences(&json!({})).is_err());
    }
}
