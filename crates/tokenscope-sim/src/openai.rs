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
    /// Triton's `return_num_output_tokens`: a token count on every response.
    pub counts_per_event: bool,
    /// The answer is asked for as JSON: OpenAI's `response_format`,
    /// Responses' `text.format`, Anthropic's `output_format`, TGI's
    /// `grammar`, SGLang's `json_schema`.
    pub wants_json: bool,
    /// Of `prompt_tokens`, those of its images and audio ([`crate::vision`]).
    pub media_tokens: u64,
    /// Of those, the images' (what a vision encoder computes).
    pub image_tokens: u64,
}

/// The prompt's whitespace-separated words in order (every message's, for
/// chat): what the servers count as tokens and the engine's prefix cache hashes.
pub fn prompt_words(body: &Value, dialect: Dialect) -> Box<dyn Iterator<Item = &str> + '_> {
    fn words(v: &Value) -> std::str::SplitWhitespace<'_> {
        v.as_str().unwrap_or("").split_whitespace()
    }
    /// A message's words: its content as one text, or its text parts'.
    /// (An Anthropic tool result's text is its `content`.)
    fn content(c: &Value) -> Box<dyn Iterator<Item = &str> + '_> {
        match c.as_array() {
            Some(parts) => Box::new(
                parts
                    .iter()
                    .flat_map(|p| words(&p["text"]).chain(words(&p["content"]))),
            ),
            None => Box::new(words(c)),
        }
    }
    /// (A Responses tool result's text is its item's `output`.)
    fn messages(v: &Value) -> impl Iterator<Item = &str> {
        let list = v.as_array().map_or(&[][..], Vec::as_slice);
        list.iter()
            .flat_map(|m| content(&m["content"]).chain(words(&m["output"])))
    }
    match dialect {
        Dialect::Chat => Box::new(messages(&body["messages"])),
        Dialect::Completions => Box::new(words(&body["prompt"])),
        Dialect::Tgi => Box::new(words(&body["inputs"])),
        Dialect::Sglang => Box::new(words(&body["text"])),
        Dialect::Triton => Box::new(words(&body["text_input"])),
        // The system prompt is the body's own field in these two.
        Dialect::Messages => Box::new(words(&body["system"]).chain(messages(&body["messages"]))),
        Dialect::Responses => Box::new(
            words(&body["instructions"])
                .chain(words(&body["input"]))
                .chain(messages(&body["input"])),
        ),
    }
}

impl Ask {
    pub fn read(body: &Value, dialect: Dialect) -> Ask {
        let media = match dialect.has_messages() {
            true => crate::vision::count(body),
            false => Default::default(),
        };
        let prompt_tokens = prompt_words(body, dialect).count() as u64 + media.tokens;
        let opts = &body["stream_options"];
        Ask {
            prompt_tokens,
            max_tokens: [
                "max_tokens",
                "max_completion_tokens",
                "max_output_tokens",
                "n_predict",
            ]
            .iter()
            .find_map(|k| body[k].as_u64())
            .or_else(|| body["parameters"]["max_new_tokens"].as_u64())
            .or_else(|| body["sampling_params"]["max_new_tokens"].as_u64()),
            // TGI's /generate_stream streams unasked.
            stream: body["stream"]
                .as_bool()
                .unwrap_or(matches!(dialect, Dialect::Tgi | Dialect::Triton)),
            include_usage: opts["include_usage"].as_bool().unwrap_or(false),
            continuous_usage: opts["continuous_usage_stats"].as_bool().unwrap_or(false),
            counts_per_event: body["return_num_output_tokens"].as_bool().unwrap_or(false),
            wants_json: [
                &body["response_format"],
                &body["text"]["format"],
                &body["output_format"],
                &body["parameters"]["grammar"],
                &body["sampling_params"]["json_schema"],
            ]
            .iter()
            .any(|v| !v.is_null()),
            media_tokens: media.tokens,
            image_tokens: media.image_tokens,
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

/// The API a request came in on, and so the shape its answer is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI chat: `/v1/chat/completions`.
    Chat,
    /// OpenAI completions: `/v1/completions`.
    Completions,
    /// OpenAI Responses: `/v1/responses`, typed events, no `[DONE]`.
    Responses,
    /// Anthropic Messages: `/v1/messages`, typed events ending `message_stop`.
    Messages,
    /// TGI's native `/generate_stream` (and `/generate`): a token an event.
    Tgi,
    /// SGLang's native `/generate`: the whole text so far in every event.
    Sglang,
    /// Triton's generate extension (`/v2/models/{model}/generate_stream`,
    /// TensorRT-LLM's ensemble): the text each event adds; the stream's
    /// end is the answer's.
    Triton,
}

impl Dialect {
    /// Whose `/generate` a body is: TGI's carries `inputs`, SGLang's `text`.
    pub fn of_generate(body: &[u8]) -> Dialect {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        match v.get("inputs") {
            Some(_) => Dialect::Tgi,
            None => Dialect::Sglang,
        }
    }

    /// Whether the prompt is a list of messages (not one text).
    pub fn has_messages(self) -> bool {
        !matches!(
            self,
            Dialect::Completions | Dialect::Tgi | Dialect::Sglang | Dialect::Triton
        )
    }
}

/// Writes one response's chunks.
pub struct Writer {
    dialect: Dialect,
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
    /// Triton's `return_num_output_tokens`: each response counts its tokens.
    counts_per_event: bool,
    /// The answer as JSON (`{"answer": "…"}`) of this many tokens, broken
    /// (its end cut) or not.
    json: Option<(u64, bool)>,
    /// Words put in place of the usual ones, by token index: a graded
    /// question's number, the word an answer diverged at.
    overrides: Vec<(u64, String)>,
    /// The answer is this tool call.
    call: Option<Call>,
}

/// An answer that is a tool call: its arguments' text is the answer's
/// words (after any reasoning) between `open` and `close` — or, where the
/// tool has no string to carry them, as many spaces (JSON whitespace).
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub open: String,
    pub close: String,
    pub spaces: bool,
    /// The answer's length in tokens, and whether `close` never comes.
    pub total: u64,
    pub broken: bool,
}

impl Writer {
    /// `server` tags the ids (`exact`, `sim`); `model_json` is the model name as a JSON string.
    pub fn new(
        dialect: Dialect,
        server: &str,
        n: u64,
        model_json: &str,
        prompt_tokens: u64,
    ) -> Writer {
        let kind = match dialect {
            Dialect::Chat => "chatcmpl",
            Dialect::Completions => "cmpl",
            Dialect::Responses => "resp",
            Dialect::Messages => "msg",
            Dialect::Tgi => "tgi",
            Dialect::Sglang => "sglang",
            Dialect::Triton => "triton",
        };
        Writer {
            dialect,
            id: format!("{kind}-{server}-{n}"),
            model_json: model_json.into(),
            prompt_tokens,
            cached_tokens: None,
            reasoning_tokens: 0,
            reasoning_as: ReasoningAs::default(),
            counts_per_event: false,
            json: None,
            overrides: Vec::new(),
            call: None,
        }
    }

    /// Token `i` of the answer is `word` (one token, its space first).
    pub fn set_word(&mut self, i: u64, word: String) {
        self.overrides.retain(|(j, _)| *j != i);
        self.overrides.push((i, word));
    }

    /// Whether token `i` was set by [`Writer::set_word`].
    pub fn has_word(&self, i: u64) -> bool {
        self.overrides.iter().any(|(j, _)| *j == i)
    }

    /// The answer is `call` (in the APIs with tool calls: chat,
    /// Responses, Anthropic).
    pub fn set_call(&mut self, call: Call) {
        self.call = Some(call);
    }

    /// The text of tokens `from..to`, the words set in place of others.
    fn words(&self, from: u64, to: u64) -> String {
        if self.overrides.is_empty() {
            return text(from, to);
        }
        (from..to)
            .map(|i| match self.overrides.iter().find(|(j, _)| *j == i) {
                Some((_, w)) => w.as_str(),
                None => TOKENS[(i % TOKENS.len() as u64) as usize],
            })
            .collect()
    }

    /// The call's arguments' text of answer tokens `from..to`: the opening
    /// with the first answer token, the closing with the last (unless broken).
    fn call_args(&self, call: &Call, (from, to): (u64, u64)) -> String {
        let r = self.reasoning_tokens.min(call.total);
        let words = match call.spaces {
            true => " ".repeat((to - from) as usize),
            false => self.words(from, to),
        };
        let open = if (from..to).contains(&r) {
            call.open.as_str()
        } else {
            ""
        };
        let close = match to >= call.total && !call.broken {
            true => call.close.as_str(),
            false => "",
        };
        format!("{open}{words}{close}")
    }

    /// The stream's piece of the call carrying `args`; `first` opens the call.
    fn call_chunk(&self, call: &Call, args: &str, first: bool, usage: Option<u64>) -> Vec<u8> {
        match self.dialect {
            Dialect::Responses => {
                let mut out = Vec::new();
                if first {
                    let item = json!({"type": "response.output_item.added", "output_index": 1,
                        "item": {"type": "function_call", "id": call.id, "call_id": call.id,
                            "name": call.name, "arguments": ""}});
                    out.extend_from_slice(&event("response.output_item.added", &item));
                }
                let delta = json!({"type": "response.function_call_arguments.delta",
                    "output_index": 1, "delta": args});
                out.extend_from_slice(&event("response.function_call_arguments.delta", &delta));
                out
            }
            Dialect::Messages => {
                let mut out = Vec::new();
                if first {
                    let start = json!({"type": "content_block_start", "index": 1,
                        "content_block": {"type": "tool_use", "id": call.id, "name": call.name,
                            "input": {}}});
                    out.extend_from_slice(&event("content_block_start", &start));
                }
                let delta = json!({"type": "content_block_delta", "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": args}});
                out.extend_from_slice(&event("content_block_delta", &delta));
                out
            }
            Dialect::Chat => {
                let function = match first {
                    true => json!({"index": 0, "id": call.id, "type": "function",
                        "function": {"name": call.name, "arguments": args}}),
                    false => json!({"index": 0, "function": {"arguments": args}}),
                };
                let choice = json!({"index": 0, "delta": {"tool_calls": [function]},
                    "finish_reason": null});
                self.chunk(&choice.to_string(), usage, "").to_vec()
            }
            _ => self.content(args, usage).to_vec(),
        }
    }

    /// Tokens `from..to` of an answer that is a tool call: the thinking
    /// among them (unless hidden), then the call's piece.
    fn call_tokens(
        &self,
        call: &Call,
        (from, to): (u64, u64),
        usage: Option<u64>,
    ) -> Option<Bytes> {
        let r = self.reasoning_tokens;
        let split = r.clamp(from, to);
        let mut out = Vec::new();
        if split > from && self.reasoning_as != ReasoningAs::Hidden {
            let thought = self.words(from, split);
            out.extend_from_slice(&self.reasoning_and_content(&thought, "", usage));
        }
        if to > split {
            let args = self.call_args(call, (split, to));
            out.extend(self.call_chunk(call, &args, split == r, usage));
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    /// The answer, of `total` tokens, is written as the JSON object
    /// `{"answer": "…"}` (its words the string); `broken`: its closing
    /// `"}` never comes, so it is not JSON.
    pub fn set_json(&mut self, total: u64, broken: bool) {
        self.json = Some((total, broken));
    }

    /// `answer`, the answer's tokens `from..to`, in its JSON object where
    /// one was asked: the opening on the chunk of its first token, the
    /// closing on the last's. `escaped`: as it goes inside a JSON string.
    fn in_json(&self, answer: String, (from, to): (u64, u64), escaped: bool) -> String {
        let Some((total, broken)) = self.json else {
            return answer;
        };
        let r = self.reasoning_tokens.min(total);
        let (open, close) = match escaped {
            true => (r#"{\"answer\":\""#, r#"\"}"#),
            false => (r#"{"answer":""#, r#""}"#),
        };
        let open = if (from..to).contains(&r) { open } else { "" };
        let close = if to >= total && !broken { close } else { "" };
        format!("{open}{answer}{close}")
    }

    /// What the request asked the answer to carry beyond its text
    /// (Triton's per-response token counts).
    pub fn asked(mut self, ask: &Ask) -> Writer {
        self.counts_per_event = ask.counts_per_event;
        self
    }

    /// The usage that follows carries `prompt_tokens_details.cached_tokens`.
    pub fn set_cached_tokens(&mut self, n: u64) {
        self.cached_tokens = Some(n);
    }

    /// The answer's first `n` tokens are reasoning, shown `how`; the usage
    /// that follows carries `completion_tokens_details.reasoning_tokens`.
    pub fn set_reasoning(&mut self, n: u64, how: ReasoningAs) {
        self.reasoning_tokens = n;
        // An API with no reasoning field shows the thinking as raw text.
        self.reasoning_as = match how {
            ReasoningAs::Field if !self.dialect.has_messages() => ReasoningAs::Tags,
            how => how,
        };
    }

    /// The text of the answer's first `upto` tokens as the stream shows
    /// it (tags around the thinking, hidden thinking left out).
    fn text_so_far(&self, upto: u64) -> String {
        let r = self.reasoning_tokens.min(upto);
        match self.reasoning_as {
            _ if self.reasoning_tokens == 0 => self.words(0, upto),
            ReasoningAs::Hidden => self.words(r, upto),
            _ => {
                let close = if upto >= self.reasoning_tokens {
                    "</think>"
                } else {
                    ""
                };
                format!("<think>{}{close}{}", self.words(0, r), self.words(r, upto))
            }
        }
    }

    /// SGLang's event: the text so far, the running counts, and at the
    /// end the finish and the server's timings.
    fn sglang_event(&self, upto: u64, end: Option<&Value>) -> Bytes {
        let mut data = json!({
            "text": self.in_json(self.text_so_far(upto), (0, upto), false),
            "meta_info": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": upto,
                "cached_tokens": self.cached_tokens.unwrap_or(0),
                "finish_reason": end.map(|_| json!({"type": "length", "length": upto})),
            },
        });
        if let Some(t) = end {
            data["timings"] = t.clone();
        }
        Bytes::from(format!("data: {data}\n\n"))
    }

    fn is_chat(&self) -> bool {
        self.dialect == Dialect::Chat
    }

    /// The chunk of tokens `from..to`, their reasoning shown as set;
    /// `None` when all of them are hidden reasoning (nothing to stream).
    pub fn tokens(&self, from: u64, to: u64, usage: Option<u64>) -> Option<Bytes> {
        let r = self.reasoning_tokens;
        if self.dialect == Dialect::Sglang {
            let hidden = self.reasoning_as == ReasoningAs::Hidden && to <= r;
            return (!hidden).then(|| self.sglang_event(to, None));
        }
        if let Some(call) = self.call.as_ref().filter(|_| self.dialect.has_messages()) {
            return self.call_tokens(call, (from, to), usage);
        }
        let split = r.clamp(from, to);
        let (thought, answer) = (self.words(from, split), self.words(split, to));
        let answer = self.in_json(answer, (from, to), true);
        let shown = match self.reasoning_as {
            _ if r == 0 || from >= r => answer,
            ReasoningAs::Field => {
                return Some(self.reasoning_and_content(&thought, &answer, usage))
            }
            ReasoningAs::Hidden if to <= r => return None,
            ReasoningAs::Hidden => answer,
            ReasoningAs::Tags => {
                let open = if from == 0 { "<think>" } else { "" };
                let close = if to >= r { "</think>" } else { "" };
                format!("{open}{thought}{close}{answer}")
            }
        };
        Some(match self.dialect {
            Dialect::Triton => self.triton_event(&shown, Some(to - from)),
            _ => self.content(&shown, usage),
        })
    }

    /// A Triton response adding `text`, with its token count when the
    /// request asked for counts (`return_num_output_tokens`).
    fn triton_event(&self, text: &str, tokens: Option<u64>) -> Bytes {
        let count = match tokens.filter(|_| self.counts_per_event) {
            Some(n) => format!(r#","num_output_tokens":{n}"#),
            None => String::new(),
        };
        Bytes::from(format!(
            "data: {{\"model_name\":{},\"model_version\":\"1\",\"sequence_end\":false,\"text_output\":\"{text}\"{count}}}\n\n",
            self.model_json
        ))
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
        let object = if self.is_chat() {
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
        match self.dialect {
            Dialect::Responses => {
                let data = json!({"type": "response.created",
                    "response": {"id": self.id, "object": "response", "status": "in_progress"}});
                return Some(event("response.created", &data));
            }
            Dialect::Messages => {
                let data = json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "content": [],
                    "model": serde_json::from_str::<Value>(&self.model_json).unwrap_or(Value::Null),
                    "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0}}});
                return Some(event("message_start", &data));
            }
            _ => {}
        }
        self.is_chat().then(|| {
            self.chunk(
                r#"{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}"#,
                None,
                "",
            )
        })
    }

    /// A chunk carrying `text`; `usage` = completion tokens so far, when sent per chunk.
    pub fn content(&self, text: &str, usage: Option<u64>) -> Bytes {
        match self.dialect {
            Dialect::Responses => return self.responses_delta("output_text", 1, text),
            Dialect::Messages => return self.messages_delta("text", 1, text),
            Dialect::Tgi => {
                return Bytes::from(format!(
                    "data: {{\"index\":0,\"token\":{{\"id\":0,\"text\":\"{text}\",\"logprob\":0.0,\"special\":false}},\"generated_text\":null,\"details\":null}}\n\n"
                ))
            }
            Dialect::Triton => return self.triton_event(text, None),
            _ => {}
        }
        let choice = if self.is_chat() {
            format!(r#"{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}"#)
        } else {
            format!(r#"{{"index":0,"text":"{text}","logprobs":null,"finish_reason":null}}"#)
        };
        self.chunk(&choice, usage, "")
    }

    /// The finish chunk, carrying the server's own `timings` (as llama.cpp
    /// does); the typed APIs' carries the usage too, of `completion` tokens.
    pub fn finish(&self, timings: &Value, completion: u64) -> Bytes {
        match self.dialect {
            Dialect::Responses => {
                let data = json!({
                    "type": "response.incomplete",
                    "response": self.response_object(completion, Value::Null),
                    "timings": timings,
                });
                return event("response.incomplete", &data);
            }
            Dialect::Tgi => {
                let data = json!({
                    "index": completion,
                    "token": {"id": 2, "text": "", "logprob": 0.0, "special": true},
                    "generated_text": self.text_so_far(completion),
                    "details": {"finish_reason": "length", "generated_tokens": completion},
                    "timings": timings,
                });
                return Bytes::from(format!("data: {data}\n\n"));
            }
            Dialect::Sglang => return self.sglang_event(completion, Some(timings)),
            Dialect::Triton => {
                // Its last response: no text, and (here) the server's timings.
                let data = json!({
                    "model_name": serde_json::from_str::<Value>(&self.model_json).unwrap_or(Value::Null),
                    "model_version": "1",
                    "sequence_end": true,
                    "text_output": "",
                    "timings": timings,
                });
                return Bytes::from(format!("data: {data}\n\n"));
            }
            Dialect::Messages => {
                let stop = match self.call {
                    Some(_) => "tool_use",
                    None => "max_tokens",
                };
                let data = json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": null},
                    "usage": {"output_tokens": completion},
                    "timings": timings,
                });
                return event("message_delta", &data);
            }
            _ => {}
        }
        let choice = if self.is_chat() && self.call.is_some() {
            r#"{"index":0,"delta":{},"finish_reason":"tool_calls"}"#
        } else if self.is_chat() {
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
        if !self.dialect.has_messages() || thought.is_empty() {
            return self.content(answer, usage);
        }
        let typed = match self.dialect {
            Dialect::Responses => Some(self.responses_delta("reasoning_text", 0, thought)),
            Dialect::Messages => Some(self.messages_delta("thinking", 0, thought)),
            _ => None,
        };
        if let Some(thought) = typed {
            let mut both = thought.to_vec();
            if !answer.is_empty() {
                both.extend_from_slice(&self.content(answer, usage));
            }
            return Bytes::from(both);
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

    /// The stream's last event: `[DONE]`, Anthropic's `message_stop`;
    /// none for Responses (its `response.incomplete` was the end).
    pub fn done(&self) -> Option<Bytes> {
        match self.dialect {
            Dialect::Chat | Dialect::Completions | Dialect::Sglang => {
                Some(Bytes::from_static(b"data: [DONE]\n\n"))
            }
            Dialect::Messages => Some(event("message_stop", &json!({"type": "message_stop"}))),
            Dialect::Responses | Dialect::Tgi | Dialect::Triton => None,
        }
    }

    /// A Responses delta event of `kind` (`output_text`, `reasoning_text`).
    fn responses_delta(&self, kind: &str, output_index: u32, text: &str) -> Bytes {
        Bytes::from(format!(
            "event: response.{kind}.delta\ndata: {{\"type\":\"response.{kind}.delta\",\"output_index\":{output_index},\"content_index\":0,\"delta\":\"{text}\"}}\n\n"
        ))
    }

    /// An Anthropic `content_block_delta` of `kind` (`text`, `thinking`).
    fn messages_delta(&self, kind: &str, index: u32, text: &str) -> Bytes {
        Bytes::from(format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{index},\"delta\":{{\"type\":\"{kind}_delta\",\"{kind}\":\"{text}\"}}}}\n\n"
        ))
    }

    /// A Responses `response` object cut at its length, with `output`.
    fn response_object(&self, completion: u64, output: Value) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "model": serde_json::from_str::<Value>(&self.model_json).unwrap_or(Value::Null),
            "output": output,
            "usage": {
                "input_tokens": self.prompt_tokens,
                "input_tokens_details": {"cached_tokens": self.cached_tokens.unwrap_or(0)},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens.min(completion)},
                "total_tokens": self.prompt_tokens + completion,
            },
        })
    }

    /// A whole (non-streaming) answer of `completion` tokens, its reasoning
    /// shown as set (a completions answer has no reasoning field: there
    /// the thinking is plain text).
    pub fn whole(&self, completion: u64, model: &str) -> Value {
        // A reasoning field only where the API has one (set_reasoning
        // turned `field` into tags elsewhere); else the text as streamed.
        let r = self.reasoning_tokens.min(completion);
        let (reasoning, text) = match self.reasoning_as {
            ReasoningAs::Field if r > 0 => (Some(self.words(0, r)), self.words(r, completion)),
            _ => (None, self.text_so_far(completion)),
        };
        if let Some(call) = self.call.as_ref().filter(|_| self.dialect.has_messages()) {
            let args = self.call_args(call, (r, completion));
            return self.whole_call(call, reasoning, &args, completion, model);
        }
        // A JSON answer after reasoning shown in its field, or with none.
        let text = match reasoning.is_some() || r == 0 {
            true => self.in_json(text, (r, completion), false),
            false => text,
        };
        match self.dialect {
            Dialect::Tgi => {
                return json!({"generated_text": text,
                    "details": {"finish_reason": "length", "generated_tokens": completion}})
            }
            Dialect::Sglang => {
                return json!({"text": text, "meta_info": {
                    "prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                    "finish_reason": {"type": "length", "length": completion}}})
            }
            Dialect::Triton => {
                let mut answer = json!({"model_name": model, "model_version": "1",
                    "text_output": text});
                if self.counts_per_event {
                    answer["num_output_tokens"] = json!(completion);
                }
                return answer;
            }
            Dialect::Responses => return self.whole_response(reasoning, &text, completion),
            Dialect::Messages => return self.whole_message(reasoning, &text, completion, model),
            _ => {}
        }
        let choice = if self.is_chat() {
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
            "object": if self.is_chat() { "chat.completion" } else { "text_completion" },
            "model": model,
            "choices": [choice],
            "usage": serde_json::from_str::<Value>(&self.usage_json(completion))
                .expect("usage_json writes JSON"),
        })
    }
}

impl Writer {
    /// A whole answer that is a tool call with arguments `args`.
    fn whole_call(
        &self,
        call: &Call,
        reasoning: Option<String>,
        args: &str,
        completion: u64,
        model: &str,
    ) -> Value {
        match self.dialect {
            Dialect::Responses => {
                let mut output = Vec::new();
                if let Some(r) = reasoning {
                    output.push(json!({"type": "reasoning",
                        "content": [{"type": "reasoning_text", "text": r}]}));
                }
                output.push(json!({"type": "function_call", "id": call.id,
                    "call_id": call.id, "name": call.name, "arguments": args}));
                self.response_object(completion, Value::Array(output))
            }
            Dialect::Messages => {
                // Its input is an object; arguments that are not one stay
                // the text they are.
                let input = serde_json::from_str::<Value>(args)
                    .unwrap_or_else(|_| Value::String(args.into()));
                let mut content = Vec::new();
                if let Some(r) = reasoning {
                    content.push(json!({"type": "thinking", "thinking": r}));
                }
                content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                    "input": input}));
                json!({
                    "id": self.id, "type": "message", "role": "assistant", "model": model,
                    "content": content, "stop_reason": "tool_use",
                    "usage": {"input_tokens": self.prompt_tokens, "output_tokens": completion},
                })
            }
            _ => {
                let mut message = json!({"role": "assistant", "content": null,
                    "tool_calls": [{"id": call.id, "type": "function",
                        "function": {"name": call.name, "arguments": args}}]});
                if let Some(r) = reasoning {
                    message["reasoning_content"] = json!(r);
                }
                json!({
                    "id": self.id, "object": "chat.completion", "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                    "usage": serde_json::from_str::<Value>(&self.usage_json(completion))
                        .expect("usage_json writes JSON"),
                })
            }
        }
    }

    fn whole_response(&self, reasoning: Option<String>, text: &str, completion: u64) -> Value {
        let mut output = Vec::new();
        if let Some(r) = reasoning {
            output.push(json!({"type": "reasoning",
                "content": [{"type": "reasoning_text", "text": r}]}));
        }
        output.push(json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]}));
        self.response_object(completion, Value::Array(output))
    }

    fn whole_message(
        &self,
        reasoning: Option<String>,
        text: &str,
        completion: u64,
        model: &str,
    ) -> Value {
        let mut content = Vec::new();
        if let Some(r) = reasoning {
            content.push(json!({"type": "thinking", "thinking": r}));
        }
        content.push(json!({"type": "text", "text": text}));
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "max_tokens",
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": completion},
        })
    }
}

/// `event: NAME` and its JSON data: the typed APIs' frame.
fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_request_shapes() {
        let chat = json!({"messages": [{"role": "user", "content": "a b c"}], "max_completion_tokens": 5,
                          "stream": true, "stream_options": {"include_usage": true}});
        let a = Ask::read(&chat, Dialect::Chat);
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
        let a = Ask::read(&comp, Dialect::Completions);
        assert_eq!(
            (a.prompt_tokens, a.max_tokens, a.stream),
            (2, Some(2), false)
        );
    }

    #[test]
    fn chunks_are_the_api_shapes() {
        let w = Writer::new(Dialect::Chat, "exact", 7, "\"m\"", 3);
        let parse = |b: Bytes| -> Value {
            let s = String::from_utf8(b.to_vec()).unwrap();
            serde_json::from_str(s.strip_prefix("data: ").unwrap().trim_end()).unwrap()
        };
        let c = parse(w.content(&text(0, 2), Some(2)));
        assert_eq!(c["id"], "chatcmpl-exact-7");
        assert_eq!(c["choices"][0]["delta"]["content"], " the of");
        assert_eq!(c["usage"]["total_tokens"], 5);
        let f = parse(w.finish(&json!({"ttft_ms": 1.5}), 3));
        assert_eq!(f["choices"][0]["finish_reason"], "length");
        assert_eq!(f["timings"]["ttft_ms"], 1.5);
        assert_eq!(parse(w.usage(2))["choices"].as_array().unwrap().len(), 0);
        assert!(parse(w.role().unwrap())["choices"][0]["delta"]["role"] == "assistant");
        assert!(Writer::new(Dialect::Completions, "sim", 1, "\"m\"", 1)
            .role()
            .is_none());
    }
}
