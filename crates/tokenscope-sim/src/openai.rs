//! The OpenAI shapes both built-in servers speak: what they read from a
//! request, and the chunks and answers they write. One place, so the exact
//! server and the engine server stream byte-for-byte alike.

use bytes::Bytes;
use serde_json::{json, Value};

/// Words a response is made of, each one cl100k token.
pub const TOKENS: [&str; 8] = [" the", " of", " and", " to", " in", " is", " was", " for"];

/// The text of tokens `from..to` of a response.
pub fn text(from: u64, to: u64) -> String {
    (from..to)
        .map(|i| TOKENS[(i % TOKENS.len() as u64) as usize])
        .collect()
}

/// What a chat or completions request asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    /// Whitespace-separated words of the prompt (tokenscope's synthetic
    /// prompts are one token per word).
    pub prompt_tokens: u64,
    /// `max_tokens`, `max_completion_tokens` or `n_predict`.
    pub max_tokens: Option<u64>,
    pub stream: bool,
    pub include_usage: bool,
    /// Usage on every chunk (vLLM's `continuous_usage_stats`).
    pub continuous_usage: bool,
}

/// The prompt's whitespace-separated words in order (every message's, for
/// chat): what the servers count as tokens and the engine's prefix cache hashes.
pub fn prompt_words(body: &Value, is_chat: bool) -> Box<dyn Iterator<Item = &str> + '_> {
    fn words(v: &Value) -> std::str::SplitWhitespace<'_> {
        v.as_str().unwrap_or("").split_whitespace()
    }
    if is_chat {
        let messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
        Box::new(messages.iter().flat_map(|m| words(&m["content"])))
    } else {
        Box::new(words(&body["prompt"]))
    }
}

impl Ask {
    pub fn read(body: &Value, is_chat: bool) -> Ask {
        let prompt_tokens = prompt_words(body, is_chat).count() as u64;
        let opts = &body["stream_options"];
        Ask {
            prompt_tokens,
            max_tokens: ["max_tokens", "max_completion_tokens", "n_predict"]
                .iter()
                .find_map(|k| body[k].as_u64()),
            stream: body["stream"].as_bool().unwrap_or(false),
            include_usage: opts["include_usage"].as_bool().unwrap_or(false),
            continuous_usage: opts["continuous_usage_stats"].as_bool().unwrap_or(false),
        }
    }
}

/// How a simulated server shows its reasoning: the ground truth of the
/// three ways servers do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningAs {
    /// In `reasoning_content` deltas (vLLM's, SGLang's reasoning parsers).
    #[default]
    Field,
    /// As `<think>`…`</think>` opening the content (no reasoning parser).
    Tags,
    /// Not streamed at all: the answer starts after the thinking's time
    /// (gpt-oss and the o-series through gateways).
    Hidden,
}

impl std::str::FromStr for ReasoningAs {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "field" => Ok(ReasoningAs::Field),
            "tags" => Ok(ReasoningAs::Tags),
            "hidden" => Ok(ReasoningAs::Hidden),
            _ => Err(format!("`{s}`: expected field, tags or hidden")),
        }
    }
}

/// Writes one response's chunks.
pub struct Writer {
    is_chat: bool,
    /// `chatcmpl-exact-7`, `cmpl-sim-3`, …
    id: String,
    model_json: String,
    prompt_tokens: u64,
    /// Prompt tokens found in the prefix cache, once the engine has said.
    cached_tokens: Option<u64>,
    /// Of the completion tokens, the first this many are reasoning (usage
    /// says so when any), shown as `reasoning_as` says.
    reasoning_tokens: u64,
    reasoning_as: ReasoningAs,
}

impl Writer {
    /// `server` tags the ids (`exact`, `sim`); `model_json` is the model name as a JSON string.
    pub fn new(
        is_chat: bool,
        server: &str,
        n: u64,
        model_json: &str,
        prompt_tokens: u64,
    ) -> Writer {
        let kind = if is_chat { "chatcmpl" } else { "cmpl" };
        Writer {
            is_chat,
            id: format!("{kind}-{server}-{n}"),
            model_json: model_json.into(),
            prompt_tokens,
            cached_tokens: None,
            reasoning_tokens: 0,
            reasoning_as: ReasoningAs::default(),
        }
    }

    /// The usage that follows carries `prompt_tokens_details.cached_tokens`.
    pub fn set_cached_tokens(&mut self, n: u64) {
        self.cached_tokens = Some(n);
    }

    /// The answer's first `n` tokens are reasoning, shown `how`; the usage
    /// that follows carries `completion_tokens_details.reasoning_tokens`.
    pub fn set_reasoning(&mut self, n: u64, how: ReasoningAs) {
        self.reasoning_tokens = n;
        self.reasoning_as = how;
    }

    /// The chunk of tokens `from..to`, their reasoning shown as set;
    /// `None` when all of them are hidden reasoning (nothing to stream).
    pub fn tokens(&self, from: u64, to: u64, usage: Option<u64>) -> Option<Bytes> {
        let r = self.reasoning_tokens;
        let split = r.clamp(from, to);
        let (thought, answer) = (text(from, split), text(split, to));
        Some(match self.reasoning_as {
            _ if r == 0 || from >= r => self.content(&answer, usage),
            ReasoningAs::Field => self.reasoning_and_content(&thought, &answer, usage),
            ReasoningAs::Hidden if to <= r => return None,
            ReasoningAs::Hidden => self.content(&answer, usage),
            ReasoningAs::Tags => {
                let open = if from == 0 { "<think>" } else { "" };
                let close = if to >= r { "</think>" } else { "" };
                self.content(&format!("{open}{thought}{close}{answer}"), usage)
            }
        })
    }

    fn usage_json(&self, completion: u64) -> String {
        let mut details = self
            .cached_tokens
            .map(|c| format!(r#","prompt_tokens_details":{{"cached_tokens":{c}}}"#))
            .unwrap_or_default();
        if self.reasoning_tokens > 0 {
            details.push_str(&format!(
                r#","completion_tokens_details":{{"reasoning_tokens":{}}}"#,
                self.reasoning_tokens
            ));
        }
        format!(
            r#"{{"prompt_tokens":{},"completion_tokens":{completion},"total_tokens":{}{details}}}"#,
            self.prompt_tokens,
            self.prompt_tokens + completion
        )
    }

    /// `data: {chunk}\n\n` with `extra` (`,"key":value…`) before the closing brace.
    fn chunk(&self, choice: &str, usage: Option<u64>, extra: &str) -> Bytes {
        let object = if self.is_chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let usage = usage
            .map(|c| format!(r#","usage":{}"#, self.usage_json(c)))
            .unwrap_or_default();
        Bytes::from(format!(
            "data: {{\"id\":\"{}\",\"object\":\"{object}\",\"created\":0,\"model\":{},\"choices\":[{choice}]{usage}{extra}}}\n\n",
            self.id, self.model_json
        ))
    }

    /// The role-only first chunk of a chat stream (not a token); none for completions.
    pub fn role(&self) -> Option<Bytes> {
        self.is_chat.then(|| {
            self.chunk(
                r#"{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}"#,
                None,
                "",
            )
        })
    }

    /// A chunk carrying `text`; `usage` = completion tokens so far, when sent per chunk.
    pub fn content(&self, text: &str, usage: Option<u64>) -> Bytes {
        let choice = if self.is_chat {
            format!(r#"{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}"#)
        } else {
            format!(r#"{{"index":0,"text":"{text}","logprobs":null,"finish_reason":null}}"#)
        };
        self.chunk(&choice, usage, "")
    }

    /// The finish chunk, carrying the server's own `timings` (as llama.cpp does).
    pub fn finish(&self, timings: &Value) -> Bytes {
        let choice = if self.is_chat {
            r#"{"index":0,"delta":{},"finish_reason":"length"}"#
        } else {
            r#"{"index":0,"text":"","logprobs":null,"finish_reason":"length"}"#
        };
        self.chunk(choice, None, &format!(r#","timings":{timings}"#))
    }

    /// The usage-only final chunk (`choices: []`).
    pub fn usage(&self, completion: u64) -> Bytes {
        self.chunk("", Some(completion), "")
    }

    /// A chat chunk carrying reasoning (`reasoning_content`) and answer
    /// text; either may be empty (a completions stream has no reasoning
    /// field: its text is all answer).
    pub fn reasoning_and_content(&self, thought: &str, answer: &str, usage: Option<u64>) -> Bytes {
        if !self.is_chat || thought.is_empty() {
            return self.content(answer, usage);
        }
        let content = match answer.is_empty() {
            true => String::new(),
            false => format!(r#","content":"{answer}""#),
        };
        let choice = format!(
            r#"{{"index":0,"delta":{{"reasoning_content":"{thought}"{content}}},"finish_reason":null}}"#
        );
        self.chunk(&choice, usage, "")
    }

    /// A chunk cut off in the middle of its JSON (fault injection).
    pub fn malformed() -> Bytes {
        Bytes::from_static(b"data: {\"choices\":[{\"delta\":\n\n")
    }

    pub fn done() -> Bytes {
        Bytes::from_static(b"data: [DONE]\n\n")
    }

    /// A whole (non-streaming) answer of `completion` tokens, its reasoning
    /// shown as set (a completions answer has no reasoning field: there
    /// the thinking is plain text).
    pub fn whole(&self, completion: u64, model: &str) -> Value {
        let r = self.reasoning_tokens.min(completion);
        let (thought, answer) = (text(0, r), text(r, completion));
        let (reasoning, text) = match self.reasoning_as {
            _ if r == 0 => (None, answer),
            ReasoningAs::Field if self.is_chat => (Some(thought), answer),
            ReasoningAs::Field => (None, format!("{thought}{answer}")),
            ReasoningAs::Tags => (None, format!("<think>{thought}</think>{answer}")),
            ReasoningAs::Hidden => (None, answer),
        };
        let choice = if self.is_chat {
            let mut message = json!({"role": "assistant", "content": text});
            if let Some(r) = reasoning {
                message["reasoning_content"] = json!(r);
            }
            json!({"index": 0, "message": message, "finish_reason": "length"})
        } else {
            json!({"index": 0, "text": text, "finish_reason": "length"})
        };
        json!({
            "id": self.id,
            "object": if self.is_chat { "chat.completion" } else { "text_completion" },
            "model": model,
            "choices": [choice],
            "usage": serde_json::from_str::<Value>(&self.usage_json(completion))
                .expect("usage_json writes JSON"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_request_shapes() {
        let chat = json!({"messages": [{"role": "user", "content": "a b c"}], "max_completion_tokens": 5,
                          "stream": true, "stream_options": {"include_usage": true}});
        let a = Ask::read(&chat, true);
        assert_eq!(
            (
                a.prompt_tokens,
                a.max_tokens,
                a.stream,
                a.include_usage,
                a.continuous_usage
            ),
            (3, Some(5), true, true, false)
        );
        let comp = json!({"prompt": "x y", "n_predict": 2});
        let a = Ask::read(&comp, false);
        assert_eq!(
            (a.prompt_tokens, a.max_tokens, a.stream),
            (2, Some(2), false)
        );
    }

    #[test]
    fn chunks_are_the_api_shapes() {
        let w = Writer::new(true, "exact", 7, "\"m\"", 3);
        let parse = |b: Bytes| -> Value {
            let s = String::from_utf8(b.to_vec()).unwrap();
            serde_json::from_str(s.strip_prefix("data: ").unwrap().trim_end()).unwrap()
        };
        let c = parse(w.content(&text(0, 2), Some(2)));
        assert_eq!(c["id"], "chatcmpl-exact-7");
        assert_eq!(c["choices"][0]["delta"]["content"], " the of");
        assert_eq!(c["usage"]["total_tokens"], 5);
        let f = parse(w.finish(&json!({"ttft_ms": 1.5})));
        assert_eq!(f["choices"][0]["finish_reason"], "length");
        assert_eq!(f["timings"]["ttft_ms"], 1.5);
        assert_eq!(parse(w.usage(2))["choices"].as_array().unwrap().len(), 0);
        assert!(parse(w.role().unwrap())["choices"][0]["delta"]["role"] == "assistant");
        assert!(Writer::new(false, "sim", 1, "\"m\"", 1).role().is_none());
    }
}
