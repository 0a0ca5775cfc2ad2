//! One interface for every API the client speaks.
//!
//! A request is described once, protocol-neutrally ([`Request`]: messages
//! whose content is a list of parts, tools, sampling, lengths, streaming,
//! the extra body), and a stream is read back as protocol-neutral
//! [`Event`]s (answer text, reasoning text, a tool-call delta, usage,
//! finish, error). Each API is one module implementing [`Protocol`]: it
//! turns the request into its body and its stream (or whole answer) into
//! events. The request timer, the records, the metrics and the probe know
//! only the events.
//!
//! Adding an API is one file — a type implementing [`Protocol`], with its
//! tests — and one line in [`ALL`]: `--api` takes every name there, and
//! `--api auto` probes them in its order.

pub mod anthropic_messages;
pub mod openai;
pub mod openai_chat;
pub mod openai_completions;
pub mod openai_embeddings;
pub mod openai_responses;
pub mod pooling;
pub mod realtime;
pub mod reasoning;
pub mod rerank;
pub mod sglang;
pub mod speech;
pub mod tgi;
pub mod tool_forms;
pub mod triton;

pub use crate::structured::ResponseFormat;
pub use reasoning::{Reasoner, ReasoningParser, Split};
use serde_json::Value;
use std::borrow::Cow;
pub use tokenscope_workload::media::{Kind as MediaKind, Media};
pub use tool_forms::ToolChoice;

/// An API: how a request is written and how its answer is read.
pub trait Protocol: Sync + std::fmt::Debug {
    /// Its `--api` name (`openai-chat`).
    fn name(&self) -> &'static str;
    /// The endpoint's path on the server (`/v1/chat/completions`).
    fn path(&self) -> &'static str;
    /// The request's JSON body.
    fn body(&self, request: &Request<'_>) -> Vec<u8>;
    /// The smallest request that tells whether the server speaks this API
    /// for `model` (`--api auto`): one token, not streamed.
    fn probe_body(&self, model: &str) -> Value;
    /// One event of a stream (an SSE `data:` field, `[DONE]` excluded):
    /// what it carried, in order, to `emit`.
    fn stream_event(&self, data: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed>;
    /// A whole (not streamed) answer's body, as events.
    fn whole(&self, body: &str, emit: &mut dyn FnMut(Event<'_>)) -> Result<(), Malformed>;
    /// What an error response's body says, in one short line, if it says
    /// anything: an `error` field, as every API here writes one (a string,
    /// or an object with its `message`).
    fn error_message(&self, body: &Value) -> Option<String> {
        openai::error_field(body)
    }
    /// The target's headers as this API wants them (the key where it looks
    /// for one, its version header); most take them as they are.
    fn headers(&self, headers: reqwest::header::HeaderMap) -> reqwest::header::HeaderMap {
        headers
    }
    /// The endpoint for a streamed request or a whole one (TGI has two).
    fn path_for(&self, stream: bool) -> &'static str {
        let _ = stream;
        self.path()
    }
    /// The endpoint a request goes to: [`Protocol::path_for`], the model
    /// put in where the path names it (Triton's `/v2/models/{model}/…`).
    fn endpoint(&self, model: &str, stream: bool) -> String {
        self.path_for(stream).replace("{model}", model)
    }
    /// The stream's clean end is the answer's end: the API sends no
    /// `[DONE]` and no finish reason (Triton's generate extension).
    fn ends_with_the_body(&self) -> bool {
        false
    }
    /// The media this API writes as parts of a message (`--images`,
    /// `--audio`, a dataset's): chat takes images, audio and video,
    /// Responses and Anthropic images; the others text only.
    fn media_kinds(&self) -> &'static [MediaKind] {
        &[]
    }
    /// The API has a field for `--response-format` (each writes its own).
    fn response_formats(&self) -> bool {
        false
    }
    /// The API has fields for tools and streams the calls back (`--tools`):
    /// chat, Responses and Anthropic.
    fn tool_calls(&self) -> bool {
        false
    }
    /// A pooling API (embeddings, rerank): it generates nothing and answers
    /// whole, so its requests have no TTFT, only latency and the items
    /// they carried.
    fn pooling(&self) -> bool {
        false
    }
    /// How many items (vectors, scores) a pooling API's answer to this
    /// request should carry; none for the generating APIs.
    fn items_asked(&self, request: &Request<'_>) -> ItemsAsked {
        let _ = request;
        ItemsAsked::default()
    }
    /// A pooling API's inputs per request besides its prompt, for
    /// `--batch-size` (an embeddings batch's other inputs; rerank's
    /// documents); the generating APIs take the prompt alone.
    fn documents(&self, batch_size: u64) -> u64 {
        let _ = batch_size;
        0
    }
    /// The body's content type (the speech APIs upload a multipart form).
    fn content_type(&self) -> &'static str {
        "application/json"
    }
    /// A speech-to-text API: every request carries an audio clip, and its
    /// figures (the real-time factor) rest on the clip's seconds.
    fn audio_in(&self) -> bool {
        false
    }
    /// Text to speech: the answer is the audio's bytes, not events.
    fn answer_is_audio(&self) -> bool {
        false
    }
    /// A session over a WebSocket, not a POST (the realtime API).
    fn websocket(&self) -> bool {
        false
    }
    /// `--api auto` tries it: the speech APIs are named, never guessed.
    fn probed(&self) -> bool {
        !(self.audio_in() || self.answer_is_audio() || self.websocket())
    }
}

/// What a pooling answer's items must be: at least `least` of them (all
/// that were asked for), at most `inputs` (one an input sent), each item's
/// `index` naming one of those inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemsAsked {
    pub least: u64,
    pub inputs: u64,
}

/// Every API, in the order `--api auto` tries them.
pub const ALL: &[&dyn Protocol] = &[
    &openai_chat::OpenaiChat,
    &openai_completions::OpenaiCompletions,
    &openai_responses::OpenaiResponses,
    &anthropic_messages::AnthropicMessages,
    &tgi::Tgi,
    &sglang::Sglang,
    &triton::Triton,
    &openai_embeddings::OpenaiEmbeddings,
    &rerank::Rerank,
    &speech::TRANSCRIPTIONS,
    &speech::TRANSLATIONS,
    &realtime::OpenaiRealtime,
    &speech::OpenaiSpeech,
];

/// The API of this `--api` name.
pub fn by_name(name: &str) -> Option<&'static dyn Protocol> {
    ALL.iter().copied().find(|p| p.name() == name)
}

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool's result, answering one of the assistant's calls.
    Tool,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A tool call an earlier answer made, as a later turn carries it back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallMade<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub arguments: &'a str,
}

/// One part of a message's content: text, or a piece of media (an
/// image, an audio clip, a video) the run sends with the prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Part<'a> {
    Text(&'a str),
    Media(&'a Media),
}

/// How an API writes a message's typed parts: its text part's type, and
/// its media parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartStyle {
    /// OpenAI chat: `text`, `image_url` (a data URL or URL), `input_audio`
    /// (base64 and its format), `video_url`.
    Chat,
    /// OpenAI Responses: `input_text`, `input_image` (its URL).
    Responses,
    /// Anthropic Messages: `text`, `image` with a base64 or URL source.
    Anthropic,
}

impl PartStyle {
    fn text_type(self) -> &'static str {
        match self {
            PartStyle::Responses => "input_text",
            _ => "text",
        }
    }

    /// A piece of media as this API writes it.
    fn media(self, m: &Media) -> Value {
        use serde_json::json;
        let url = &*m.url;
        match (self, m.kind, m.base64()) {
            (PartStyle::Chat, MediaKind::Audio, Some(b64)) => {
                let format = m.mime.strip_prefix("audio/").unwrap_or("wav");
                let format = if format == "mpeg" { "mp3" } else { format };
                json!({"type": "input_audio", "input_audio": {"data": b64, "format": format}})
            }
            (PartStyle::Chat, MediaKind::Audio, None) => {
                json!({"type": "audio_url", "audio_url": {"url": url}})
            }
            (PartStyle::Chat, MediaKind::Video, _) => {
                json!({"type": "video_url", "video_url": {"url": url}})
            }
            (PartStyle::Chat, MediaKind::Image, _) => {
                json!({"type": "image_url", "image_url": {"url": url}})
            }
            (PartStyle::Responses, _, _) => json!({"type": "input_image", "image_url": url}),
            (PartStyle::Anthropic, _, Some(b64)) => json!({"type": "image",
                "source": {"type": "base64", "media_type": m.mime, "data": b64}}),
            (PartStyle::Anthropic, _, None) => {
                json!({"type": "image", "source": {"type": "url", "url": url}})
            }
        }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Message<'a> {
    pub role: Role,
    pub content: Vec<Part<'a>>,
    /// An assistant's: the tool calls its answer made.
    pub calls: Vec<CallMade<'a>>,
    /// A tool's: the call it answers.
    pub call_id: Option<&'a str>,
}

impl<'a> Message<'a> {
    pub fn text(role: Role, text: &'a str) -> Message<'a> {
        Message {
            role,
            content: vec![Part::Text(text)],
            calls: Vec::new(),
            call_id: None,
        }
    }

    /// The message as the role-based APIs write it, as the items of their
    /// list (Responses writes a call, and its result, as items of their own).
    pub fn to_items(&self, style: PartStyle) -> Vec<Value> {
        use serde_json::json;
        let text = self.joined_text();
        match (self.role, style) {
            (Role::Tool, PartStyle::Chat) => vec![json!({"role": "tool",
                "tool_call_id": self.call_id, "content": text})],
            (Role::Tool, PartStyle::Responses) => vec![json!({"type": "function_call_output",
                "call_id": self.call_id, "output": text})],
            (Role::Tool, PartStyle::Anthropic) => vec![json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": self.call_id, "content": text}]})],
            _ if self.calls.is_empty() => vec![self.to_json(style)],
            (_, PartStyle::Chat) => {
                let calls: Vec<Value> = self
                    .calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id,
                    "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect();
                let content = match text.is_empty() {
                    true => Value::Null,
                    false => json!(text),
                };
                vec![json!({"role": "assistant", "content": content, "tool_calls": calls})]
            }
            (_, PartStyle::Responses) => {
                let said = (!text.is_empty()).then(|| self.to_json(style));
                said.into_iter()
                    .chain(self.calls.iter().map(|c| {
                        json!({"type": "function_call",
                        "call_id": c.id, "name": c.name, "arguments": c.arguments})
                    }))
                    .collect()
            }
            (_, PartStyle::Anthropic) => {
                let said = (!text.is_empty()).then(|| json!({"type": "text", "text": text}));
                let uses = self.calls.iter().map(|c| {
                    let input = serde_json::from_str::<Value>(c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input})
                });
                let content: Vec<Value> = said.into_iter().chain(uses).collect();
                vec![json!({"role": "assistant", "content": content})]
            }
        }
    }

    /// The message as the role-based APIs write it: its role, and its
    /// content a string when it is one text, else a list of typed parts
    /// in the API's `style`.
    pub fn to_json(&self, style: PartStyle) -> Value {
        let content = match self.content.as_slice() {
            [Part::Text(t)] => serde_json::json!(t),
            parts => Value::Array(
                parts
                    .iter()
                    .map(|p| match p {
                        Part::Text(t) => serde_json::json!({"type": style.text_type(), "text": t}),
                        Part::Media(m) => style.media(m),
                    })
                    .collect(),
            ),
        };
        serde_json::json!({"role": self.role.name(), "content": content})
    }

    /// Its text parts, joined.
    pub fn joined_text(&self) -> Cow<'a, str> {
        match self.content.as_slice() {
            [Part::Text(t)] => Cow::Borrowed(t),
            parts => Cow::Owned(
                parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(*t),
                        Part::Media(_) => None,
                    })
                    .collect(),
            ),
        }
    }
}

/// What every request of a run carries besides its prompt and length
/// (`--system-prompt`, `--temperature`, `--extra-body`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shape {
    /// A system message first (an API without roles puts it before the
    /// prompt, a blank line between).
    pub system_prompt: Option<String>,
    pub temperature: Option<f64>,
    /// Merged into the body first: the fields tokenscope times by (`model`,
    /// the prompt, `stream`, `stream_options`, lengths) are set after it and win.
    pub extra: serde_json::Map<String, Value>,
    /// `--response-format`: the answer's format, in each API's own field.
    pub response_format: Option<ResponseFormat>,
}

/// Whether two Anthropic messages both hold tool results only.
fn both_tool_results(a: &Value, b: &Value) -> bool {
    let results = |m: &Value| {
        m["role"] == "user"
            && m["content"]
                .as_array()
                .is_some_and(|c| c.iter().all(|p| p["type"] == "tool_result"))
    };
    results(a) && results(b)
}

/// One request, whatever the API.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub model: &'a str,
    /// The conversation, oldest first; the last is the prompt.
    pub messages: Vec<Message<'a>>,
    /// Tools the model may call, in OpenAI chat's form (`--tools`, a
    /// dataset entry's); each API writes them its own way.
    pub tools: &'a [Value],
    /// `--tool-choice`, sent when tools are.
    pub tool_choice: Option<&'a ToolChoice>,
    pub temperature: Option<f64>,
    /// `None`: the server decides how long the answer is.
    pub max_tokens: Option<u64>,
    /// Ask the server to ignore end-of-sequence so lengths are exact.
    pub ignore_eos: bool,
    /// `false`: the whole answer at once (`--no-stream`).
    pub stream: bool,
    /// `--extra-body`, under the fields above.
    pub extra: &'a serde_json::Map<String, Value>,
    /// `--response-format`.
    pub response_format: Option<&'a ResponseFormat>,
    /// A pooling request's other inputs (`--batch-size`): an embeddings
    /// batch's after the prompt; rerank's documents, the prompt being
    /// its query. Empty for the generating APIs.
    pub documents: Vec<&'a str>,
}

/// A session's earlier turn: what the user said and what came back.
pub type Turn<'a> = (&'a str, &'a str);

impl Request<'_> {
    /// The conversation as one prompt, for the APIs without roles. The
    /// system prompt, then each earlier turn's text and answer one after
    /// the other, a blank line after each, then the prompt — so a
    /// session's prompt only grows.
    pub fn prompt_text(&self) -> String {
        let mut prompt = String::new();
        for m in &self.messages {
            prompt.push_str(&m.joined_text());
            if matches!(m.role, Role::System | Role::Assistant) {
                prompt.push_str("\n\n");
            }
        }
        prompt
    }

    /// A native engine API's body (TGI's, SGLang's): the conversation as
    /// one text under `prompt_key`, the length (and `--extra-body`) among
    /// the API's own `params`, under `params_key`.
    pub fn native_body(
        &self,
        prompt_key: &str,
        params_key: &str,
        mut params: serde_json::Map<String, Value>,
    ) -> Vec<u8> {
        params.extend(self.extra.clone());
        if let Some(n) = self.max_tokens {
            params.insert("max_new_tokens".into(), serde_json::json!(n));
        }
        let mut body = serde_json::Map::new();
        body.insert(prompt_key.into(), serde_json::json!(self.prompt_text()));
        body.insert(params_key.into(), Value::Object(params));
        body.insert("stream".into(), serde_json::json!(self.stream));
        serde_json::to_vec(&body).expect("a JSON value serializes")
    }

    /// The body of an API that takes the system prompt apart from the
    /// conversation (Responses' `instructions` and `input`, Anthropic's
    /// `system` and `messages`), with the common fields, over `--extra-body`.
    pub fn roles_body(
        &self,
        system_key: &str,
        turns_key: &str,
        style: PartStyle,
    ) -> serde_json::Map<String, Value> {
        let mut obj = self.extra.clone();
        let (system, turns): (Vec<_>, Vec<_>) =
            self.messages.iter().partition(|m| m.role == Role::System);
        if !system.is_empty() {
            let text: Vec<_> = system.iter().map(|m| m.joined_text()).collect();
            obj.insert(system_key.into(), serde_json::json!(text.join("\n\n")));
        }
        let mut items: Vec<Value> = Vec::new();
        for m in turns {
            for item in m.to_items(style) {
                match items.last_mut() {
                    // Anthropic's results of one answer's calls go in one
                    // user message (its roles alternate).
                    Some(last)
                        if style == PartStyle::Anthropic && both_tool_results(last, &item) =>
                    {
                        let more = item["content"].as_array().cloned().unwrap_or_default();
                        if let Some(list) = last["content"].as_array_mut() {
                            list.extend(more);
                        }
                    }
                    _ => items.push(item),
                }
            }
        }
        obj.insert(turns_key.into(), Value::Array(items));
        self.common_fields(&mut obj);
        obj
    }

    /// The tools offered and the choice, in an API's forms (`form` for a
    /// tool in OpenAI chat's form, `choice` for `--tool-choice`), set over
    /// `obj`; nothing when no tool is offered.
    pub fn tool_fields(
        &self,
        obj: &mut serde_json::Map<String, Value>,
        form: fn(&Value) -> Value,
        choice: fn(&ToolChoice) -> Value,
    ) {
        if self.tools.is_empty() {
            return;
        }
        obj.insert("tools".into(), self.tools.iter().map(form).collect());
        if let Some(c) = self.tool_choice {
            obj.insert("tool_choice".into(), choice(c));
        }
    }

    /// The fields every API's body carries the same way, set over `obj`:
    /// the model, temperature, streaming, and vLLM's `ignore_eos`.
    pub fn common_fields(&self, obj: &mut serde_json::Map<String, Value>) {
        obj.insert("model".into(), serde_json::json!(self.model));
        if let Some(t) = self.temperature {
            obj.insert("temperature".into(), serde_json::json!(t));
        }
        obj.insert("stream".into(), serde_json::json!(self.stream));
        if self.ignore_eos {
            obj.insert("ignore_eos".into(), serde_json::json!(true));
        }
    }
}

impl<'a> Request<'a> {
    /// A request of the run's shape holding only its system prompt, if any.
    fn shaped(model: &'a str, shape: &'a Shape) -> Request<'a> {
        let system = shape.system_prompt.as_deref();
        Request {
            model,
            messages: system
                .map(|s| Message::text(Role::System, s))
                .into_iter()
                .collect(),
            tools: &[],
            tool_choice: None,
            temperature: shape.temperature,
            max_tokens: None,
            ignore_eos: false,
            stream: true,
            extra: &shape.extra,
            response_format: shape.response_format.as_ref(),
            documents: Vec::new(),
        }
    }

    /// `prompt` after a session's earlier `turns`, with the run's shape.
    pub fn conversation(
        model: &'a str,
        shape: &'a Shape,
        turns: impl IntoIterator<Item = Turn<'a>>,
        prompt: &'a str,
    ) -> Request<'a> {
        let mut r = Request::shaped(model, shape);
        for (user, assistant) in turns {
            r.messages.push(Message::text(Role::User, user));
            r.messages.push(Message::text(Role::Assistant, assistant));
        }
        r.messages.push(Message::text(Role::User, prompt));
        r
    }

    /// A session's next request: its earlier exchanges (each user message,
    /// answer, tool calls and their results) then `prompt` — none where the
    /// turn goes on from the last exchange's tool results.
    pub fn session(
        model: &'a str,
        shape: &'a Shape,
        history: &'a [tokenscope_workload::session::Exchange],
        prompt: Option<&'a str>,
    ) -> Request<'a> {
        let mut r = Request::shaped(model, shape);
        for e in history {
            if let Some(user) = &e.user {
                r.messages.push(Message::text(Role::User, user));
            }
            let mut said = Message::text(Role::Assistant, &e.assistant);
            said.calls = e
                .calls
                .iter()
                .map(|c| CallMade {
                    id: &c.id,
                    name: &c.name,
                    arguments: &c.arguments,
                })
                .collect();
            r.messages.push(said);
            for c in &e.calls {
                let mut result = Message::text(Role::Tool, &c.result);
                result.call_id = Some(&c.id);
                r.messages.push(result);
            }
        }
        r.messages
            .extend(prompt.map(|p| Message::text(Role::User, p)));
        r
    }

    /// The prompt carries `media` after its text.
    pub fn with_media(mut self, media: &'a [std::sync::Arc<Media>]) -> Request<'a> {
        if let Some(last) = self.messages.last_mut() {
            last.content.extend(media.iter().map(|m| Part::Media(m)));
        }
        self
    }

    /// The prompt: the last message's text.
    pub fn prompt(&self) -> Cow<'a, str> {
        self.messages
            .last()
            .map_or(Cow::Borrowed(""), Message::joined_text)
    }
}

/// Token counts an answer reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Prompt tokens served from the server's prefix cache.
    pub cached_tokens: Option<u64>,
    /// Of the completion tokens, those spent reasoning.
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// `later` over this: an API that tells its usage in parts (Anthropic's
    /// prompt at the start, its output at the end) keeps both.
    pub fn merged(self, later: Usage) -> Usage {
        Usage {
            prompt_tokens: later.prompt_tokens.or(self.prompt_tokens),
            completion_tokens: later.completion_tokens.or(self.completion_tokens),
            cached_tokens: later.cached_tokens.or(self.cached_tokens),
            reasoning_tokens: later.reasoning_tokens.or(self.reasoning_tokens),
        }
    }
}

/// A piece of a tool call as it streams: which call, and what of it came.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallDelta<'a> {
    pub index: u32,
    pub id: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub arguments: Cow<'a, str>,
}

impl ToolCallDelta<'_> {
    /// The piece with its text owned, to outlive the event it came in.
    pub fn into_owned(self) -> ToolCallDelta<'static> {
        ToolCallDelta {
            index: self.index,
            id: self.id.map(|c| Cow::Owned(c.into_owned())),
            name: self.name.map(|c| Cow::Owned(c.into_owned())),
            arguments: Cow::Owned(self.arguments.into_owned()),
        }
    }
}

/// What a piece of an answer carries, whatever the API.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// Text of the answer.
    Answer(Cow<'a, str>),
    /// All the answer's text so far (SGLang's native stream): what is past
    /// the text already taken is this event's.
    AnswerSoFar(Cow<'a, str>),
    /// Text of the model's reasoning before its answer.
    Reasoning(Cow<'a, str>),
    /// Part of a tool call: its name, its arguments' text, or both.
    ToolCall(ToolCallDelta<'a>),
    Usage(Usage),
    /// Why the answer ended (`stop`, `length`, …).
    Finish(Cow<'a, str>),
    /// The server reported an error in the answer.
    Error(String),
    /// The server's own timings of the request (llama.cpp's `timings`).
    Timings(Value),
    /// A pooling answer's items: the vectors or scores it carried.
    Items(u64),
    /// The highest `index` a pooling answer's items named.
    HighestIndex(u64),
    /// Generated tokens this event adds, where the API counts per event
    /// (Triton's `num_output_tokens`), not in a usage total.
    OutputTokens(u64),
    /// The audio's seconds as the server counted them (a speech API's
    /// usage of type `duration`).
    AudioSeconds(f64),
}

/// An event or body that is not what the API defines.
#[derive(Debug, thiserror::Error)]
#[error("malformed stream chunk: {reason} (data: {snippet})")]
pub struct Malformed {
    pub reason: String,
    pub snippet: String,
}

impl Malformed {
    pub fn of(e: serde_json::Error, data: &str) -> Malformed {
        Malformed {
            reason: e.to_string(),
            snippet: data.chars().take(80).collect(),
        }
    }
}

/// The events of one piece of an answer folded into what the request's
/// record needs: its generated text (appended to the answer), how much of
/// it was reasoning and how much answer, usage, finish reason, error and
/// timings.
#[derive(Debug, Default, PartialEq)]
pub struct Piece {
    /// Bytes of generated text (answer, reasoning and tool calls).
    pub text_bytes: usize,
    /// Of those, bytes known to be reasoning, and to be answer (text held
    /// back until a `<think>` tag can be told is in neither yet).
    pub reasoning_bytes: usize,
    pub answer_bytes: usize,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
    pub timings: Option<Value>,
    /// A pooling answer's items.
    pub items: Option<u64>,
    /// The highest `index` its items named.
    pub highest_index: Option<u64>,
    /// Generated tokens the events counted one by one (Triton's).
    pub output_tokens: Option<u64>,
    /// The audio's seconds, as a speech API's usage said them.
    pub audio_seconds: Option<f64>,
    /// Pieces of tool calls (their text counted in `text_bytes`, not put
    /// in the answer's text).
    pub calls: Vec<ToolCallDelta<'static>>,
}

impl Piece {
    /// Takes one event; generated text goes on the end of `text`, sorted
    /// into reasoning and answer by the stream's `reasoner`.
    pub fn add(&mut self, event: Event<'_>, text: &mut String, reasoner: &mut Reasoner) {
        let split = match event {
            Event::Answer(s) => {
                self.text_bytes += s.len();
                reasoner.answer(&s, text)
            }
            Event::Reasoning(s) => {
                self.text_bytes += s.len();
                reasoner.reasoning_field(&s, text)
            }
            Event::AnswerSoFar(s) => {
                let taken = text.len() + reasoner.held_len();
                // A server set to stream increments (SGLang's
                // `--incremental-streaming-output`) sends only the new text
                // under the same field: it does not go on from the text
                // taken, and is all new.
                let new = match continues(&s, text, taken) {
                    true => s.get(taken..).unwrap_or(""),
                    false => &s,
                };
                self.text_bytes += new.len();
                reasoner.answer(new, text)
            }
            Event::ToolCall(call) => {
                self.text_bytes += call.name.as_ref().map_or(0, |n| n.len()) + call.arguments.len();
                self.calls.push(call.into_owned());
                Split::default()
            }
            Event::Usage(u) => {
                self.usage = Some(self.usage.map_or(u, |was| was.merged(u)));
                Split::default()
            }
            Event::Finish(f) => {
                self.finish_reason = Some(f.into_owned());
                Split::default()
            }
            Event::Error(e) => {
                self.error = Some(e);
                Split::default()
            }
            Event::Timings(t) => {
                self.timings = Some(t);
                Split::default()
            }
            Event::Items(n) => {
                self.items = Some(self.items.unwrap_or(0).saturating_add(n));
                Split::default()
            }
            Event::HighestIndex(i) => {
                self.highest_index = Some(self.highest_index.map_or(i, |h| h.max(i)));
                Split::default()
            }
            Event::OutputTokens(n) => {
                self.output_tokens = Some(self.output_tokens.unwrap_or(0).saturating_add(n));
                Split::default()
            }
            Event::AudioSeconds(s) => {
                self.audio_seconds = Some(s);
                Split::default()
            }
        };
        self.reasoning_bytes += split.reasoning;
        self.answer_bytes += split.answer;
    }

    /// One stream event of `api`, folded.
    pub fn of_event(
        api: &dyn Protocol,
        data: &str,
        text: &mut String,
        reasoner: &mut Reasoner,
    ) -> Result<Piece, Malformed> {
        let mut piece = Piece::default();
        api.stream_event(data, &mut |e| piece.add(e, text, reasoner))?;
        Ok(piece)
    }

    /// A whole answer of `api`, folded (text held back included).
    pub fn of_whole(
        api: &dyn Protocol,
        body: &str,
        text: &mut String,
        reasoner: &mut Reasoner,
    ) -> Result<Piece, Malformed> {
        let mut piece = Piece::default();
        api.whole(body, &mut |e| piece.add(e, text, reasoner))?;
        let rest = reasoner.finish(text);
        piece.reasoning_bytes += rest.reasoning;
        piece.answer_bytes += rest.answer;
        Ok(piece)
    }
}

/// Whether `so_far`, a whole text so far, goes on from the `taken` bytes
/// of the stream's `text` (the rest held back by the reasoner): at least
/// as long, and the same as `text` where `text` ends (its last 32 bytes,
/// so the check costs the same whatever the answer's length).
fn continues(so_far: &str, text: &str, taken: usize) -> bool {
    let end = text.len();
    let tail = end.saturating_sub(32);
    so_far.len() >= taken && so_far.as_bytes().get(tail..end) == Some(&text.as_bytes()[tail..])
}

/// Every event of `data` through `api`, folded into one piece and the text.
#[cfg(test)]
pub(crate) fn fold_events(api: &dyn Protocol, data: &[&str]) -> (Piece, String) {
    let (mut piece, mut text) = (Piece::default(), String::new());
    let mut r = Reasoner::new(ReasoningParser::Auto);
    for d in data {
        api.stream_event(d, &mut |e| piece.add(e, &mut text, &mut r))
            .unwrap();
    }
    (piece, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_api_is_found_by_its_name_and_paths_differ() {
        for api in ALL {
            assert_eq!(by_name(api.name()).unwrap().name(), api.name());
        }
        let mut paths: Vec<_> = ALL.iter().map(|a| a.path()).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), ALL.len());
        assert!(by_name("no-such-api").is_none());
    }

    #[test]
    fn a_conversation_is_the_system_prompt_the_turns_and_the_prompt() {
        let shape = Shape {
            system_prompt: Some("S".into()),
            ..Default::default()
        };
        let r = Request::conversation("m", &shape, [("q1", " a1")], "q2");
        let said: Vec<_> = r
            .messages
            .iter()
            .map(|m| format!("{}:{}", m.role.name(), m.joined_text()))
            .collect();
        assert_eq!(said, ["system:S", "user:q1", "assistant: a1", "user:q2"]);
    }

    #[test]
    fn a_piece_counts_every_kind_of_generated_text() {
        let mut text = String::new();
        let mut p = Piece::default();
        let r = &mut Reasoner::new(ReasoningParser::Auto);
        p.add(Event::Reasoning("ab".into()), &mut text, r);
        p.add(Event::Answer("cde".into()), &mut text, r);
        p.add(
            Event::ToolCall(ToolCallDelta {
                index: 0,
                id: None,
                name: Some("f".into()),
                arguments: "{}".into(),
            }),
            &mut text,
            r,
        );
        p.add(Event::Finish("stop".into()), &mut text, r);
        assert_eq!(
            (p.text_bytes, text.as_str()),
            (8, "cde"),
            "reasoning and calls are not answer text"
        );
        assert_eq!((p.reasoning_bytes, p.answer_bytes), (2, 3));
        assert_eq!(p.calls[0].name.as_deref(), Some("f"));
        assert_eq!(p.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn each_api_asks_for_the_response_format_in_its_own_field() {
        let schema = serde_json::json!({"type": "object", "required": ["a"]});
        let shape = Shape {
            response_format: Some(ResponseFormat::Schema {
                name: "s".into(),
                schema: schema.clone(),
            }),
            ..Shape::default()
        };
        let r = Request::conversation("m", &shape, [], "hi");
        let body = |api: &str| -> Value {
            serde_json::from_slice(&by_name(api).unwrap().body(&r)).unwrap()
        };
        assert_eq!(
            body("openai-chat")["response_format"]["json_schema"]["schema"],
            schema
        );
        assert_eq!(
            body("openai-completions")["response_format"]["type"],
            "json_schema"
        );
        assert_eq!(body("openai-responses")["text"]["format"]["schema"], schema);
        assert_eq!(
            body("anthropic-messages")["output_format"]["schema"],
            schema
        );
        assert_eq!(body("tgi")["parameters"]["grammar"]["value"], schema);
        let sglang = body("sglang")["sampling_params"]["json_schema"].clone();
        assert_eq!(
            serde_json::from_str::<Value>(sglang.as_str().unwrap()).unwrap(),
            schema
        );
        let takes: Vec<_> = ALL
            .iter()
            .filter(|a| a.response_formats())
            .map(|a| a.name())
            .collect();
        assert_eq!(takes.len(), 6, "{takes:?}");
    }
}
