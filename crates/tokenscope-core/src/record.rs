//! One finished request, as measured: the line written to `requests.jsonl`.
//!
//! Every instant is microseconds since the run's start on one monotonic clock,
//! so records from one run can be compared and merged without clock skew.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a token count came from; the results say which source every count used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's own `usage` object.
    ServerUsage,
    /// tokenscope's offline tokenizer (built-in or `--tokenizer`).
    Tokenizer,
    /// One token per content-bearing chunk (the last resort).
    Chunks,
    /// The server's running count of generated tokens on each chunk
    /// (llama.cpp's `timings.predicted_n` with `timings_per_token`): for
    /// reasoning, every token generated before the answer's first.
    ServerChunks,
}

/// Why a request failed. Serialized as a short string (`http_429`, `timeout`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The TCP/TLS connection could not be made.
    Connect,
    /// No answer (or no next chunk) within the timeout.
    Timeout,
    /// The server answered with a non-2xx status.
    Http(u16),
    /// The stream broke off: dropped connection, body error, no `[DONE]`.
    Stream,
    /// The server sent an error object inside the stream.
    ServerError,
    /// A chunk that is not the JSON the API defines.
    Malformed,
    /// Cancelled by the user (Ctrl-C) or the end of a `--duration` run.
    Cancelled,
    /// Left on purpose (`--cancel`): the client closed the connection, as
    /// a user who leaves does. Not a failure: counted apart, its record
    /// keeping when it left and what it had received.
    Abandoned,
    /// tokenscope itself failed on this request (a panic in its task): a
    /// bug of ours, recorded so the request is not lost; the run exits 1.
    Internal,
    /// A stream was asked for and a complete (non-SSE) body came back.
    NotStreamed,
    /// The stream ended properly but carried no generated text at all.
    EmptyAnswer,
    /// The answer outgrew a memory bound of the client (one event-stream
    /// line or event, or a whole body): read no further, its limit named.
    TooLarge,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Connect => f.write_str("connect"),
            ErrorKind::Timeout => f.write_str("timeout"),
            ErrorKind::Http(code) => write!(f, "http_{code}"),
            ErrorKind::Stream => f.write_str("stream"),
            ErrorKind::ServerError => f.write_str("server_error"),
            ErrorKind::Malformed => f.write_str("malformed"),
            ErrorKind::Cancelled => f.write_str("cancelled"),
            ErrorKind::Abandoned => f.write_str("abandoned"),
            ErrorKind::Internal => f.write_str("internal"),
            ErrorKind::NotStreamed => f.write_str("not_streamed"),
            ErrorKind::EmptyAnswer => f.write_str("empty_answer"),
            ErrorKind::TooLarge => f.write_str("too_large"),
        }
    }
}

impl std::str::FromStr for ErrorKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "connect" => ErrorKind::Connect,
            "timeout" => ErrorKind::Timeout,
            "stream" => ErrorKind::Stream,
            "server_error" => ErrorKind::ServerError,
            "malformed" => ErrorKind::Malformed,
            "cancelled" => ErrorKind::Cancelled,
            "abandoned" => ErrorKind::Abandoned,
            "internal" => ErrorKind::Internal,
            "not_streamed" => ErrorKind::NotStreamed,
            "empty_answer" => ErrorKind::EmptyAnswer,
            "too_large" => ErrorKind::TooLarge,
            other => match other.strip_prefix("http_").and_then(|c| c.parse().ok()) {
                Some(code) => ErrorKind::Http(code),
                None => return Err(format!("unknown error kind `{other}`")),
            },
        })
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A content-bearing chunk: when it arrived and how many tokens it carried.
/// Serialized as `[at_us, tokens]` to keep `requests.jsonl` compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk(pub u64, pub u32);

impl Chunk {
    pub fn at_us(&self) -> u64 {
        self.0
    }
    pub fn tokens(&self) -> u32 {
        self.1
    }
}

/// One request from schedule to end of stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Index in the run, in scheduling order (warm-up requests included).
    pub id: u64,
    /// A warm-up request: written down, excluded from every result.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
    /// When the load pattern wanted the request sent.
    pub scheduled_at_us: u64,
    /// When the request was handed to the connection.
    pub sent_at_us: u64,
    /// The response head (status line) arrived.
    pub first_byte_at_us: Option<u64>,
    /// The first chunk carrying generated text (content, reasoning or completion text).
    pub first_token_at_us: Option<u64>,
    /// The first chunk carrying answer text — not reasoning (a reasoning
    /// field, or `<think>`…`</think>` opening the content): the answer's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_answer_at_us: Option<u64>,
    /// End of stream (or of the failure).
    pub done_at_us: u64,
    pub input_tokens: Option<u64>,
    pub input_token_source: Option<TokenSource>,
    /// The prompt's length as the workload built it (the client's
    /// tokenizer), kept when the server's count replaces `input_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_input_tokens: Option<u64>,
    pub output_tokens: u64,
    pub output_token_source: Option<TokenSource>,
    /// `max_tokens` sent, when the workload asked for a length.
    pub requested_output_tokens: Option<u64>,
    /// Prompt tokens the server found in its prefix cache, when it says
    /// (`usage.prompt_tokens_details.cached_tokens`; the built-in engine's own count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Multi-turn: the session (conversation) and the turn in it, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// `sim plan --replicas`: the engine replica that served it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
    /// `tokenscope merge`: the shard that sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// HTTP status of the response, when one came.
    pub status: Option<u16>,
    /// `None` for a success.
    pub error_kind: Option<ErrorKind>,
    /// A one-line description of the failure (never contains credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub finish_reason: Option<String>,
    /// Times the request was sent again because a reused keep-alive connection
    /// turned out closed before any response (see `request.rs`); `sent_at` is the last send.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// Open loop with `--max-concurrency`: the request could not leave on time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waited_for_slot: bool,
    /// The server's usage counts, when they could not be true (more output
    /// tokens than bytes received or than `max_tokens` allowed, absurd
    /// sizes): kept here for the record, replaced by a count of our own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implausible_usage: Option<String>,
    /// The server's own per-request timings when it sends them (llama.cpp's `timings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timings: Option<serde_json::Value>,
    /// Of `output_tokens`, those spent reasoning, and where the count came
    /// from (the server's usage, the tokenizer on the streamed reasoning, or
    /// its chunks); absent when the request showed no reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_token_source: Option<TokenSource>,
    /// The server counted reasoning tokens the stream never showed (hidden
    /// reasoning): TTFT includes the thinking, and the per-token figures
    /// are taken over the tokens that were streamed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_hidden: bool,
    /// A pooling request's items (embeddings: the vectors; rerank: the
    /// documents scored); absent for the generating APIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<u64>,
    /// `--lora`: the adapter the request was sent to (its model name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// The images, audio and video it carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<MediaSent>,
    /// `--response-format`: whether the answer was valid (JSON, and
    /// against the schema), and why not; absent when none was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format_valid: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format_error: Option<String>,
    /// `--tools`: how many tools the request offered (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_offered: Option<u32>,
    /// The tool calls the answer made, each checked against its tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallMade>,
    /// When the first token of a tool call arrived (its name or arguments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_tool_call_at_us: Option<u64>,
    /// `--grade`: whether the answer matched the entry's `expected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correct: Option<bool>,
    /// A hash of the answer's text (FNV-1a 64, hex), kept for every
    /// generated answer so two runs' answers can be compared for free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_hash: Option<String>,
    /// `--class`: the class of traffic it was (its figures are apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The id it was sent under (`X-Request-Id` by default): what finds it
    /// in the server's logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The W3C `traceparent` it was sent with (`--trace-context`): what
    /// finds it in the server's traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// `--keep-text`: the answer's text itself (written apart, to
    /// `answers.jsonl.gz`, never into `requests.jsonl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_text: Option<String>,
    /// An agent's turn after tool results: the tools' run time before it
    /// was sent (`--tool-latency`), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_wait_us: Option<u64>,
    /// A session's last request carries the session's figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_end: Option<SessionEnd>,
    /// `--workflow`, `--replay-trace`: the workflow it was a call of, and where in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<WorkflowCall>,
    /// A workflow's last record carries the workflow's figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_end: Option<Box<WorkflowEnd>>,
    /// A speech API's request: the audio's seconds, the transcript's
    /// words, a realtime session's lag behind the speaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech: Option<Box<Speech>>,
    /// Content-bearing chunks in arrival order. On disk
    /// `{"at_us": [first, gap, …], "tokens": k | [k, …]}`: see [`chunk_format`].
    #[serde(with = "chunk_format")]
    pub chunks: Vec<Chunk>,
}

/// A finished session (`--multi-turn`): an agent's task, from its first
/// send to its last answer, and where its time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEnd {
    /// Requests it made: user turns and turns after tool results.
    pub requests: u32,
    /// Of those, the turns that went on from tool results.
    pub tool_rounds: u32,
    /// From its first send to its last answer's end, µs.
    pub e2e_us: u64,
    /// The server's part: each request's send to its end, summed.
    pub server_us: u64,
    /// The tools' part: their run times, summed.
    pub tool_us: u64,
}

/// A speech request's own facts (see docs/metrics.md, "Speech").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Speech {
    /// Seconds of audio: the clip sent (speech to text, read from its
    /// header) or the audio received (text to speech, from its WAV header
    /// and bytes).
    pub audio_s: f64,
    /// The audio's seconds as the server counted them (its usage of type
    /// `duration`), where it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_audio_s: Option<f64>,
    /// Words of the transcript (whitespace-separated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<u64>,
    /// A realtime session's timings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime: Option<RealtimeSession>,
}

impl Speech {
    /// The real-time factor's inverse, RTFx: audio seconds per second of
    /// processing, from the request's send to its end.
    pub fn rtfx(&self, e2e_us: u64) -> Option<f64> {
        (e2e_us > 0 && self.audio_s > 0.0).then(|| self.audio_s / (e2e_us as f64 / 1e6))
    }
}

/// A realtime session: audio sent in chunks, and how far each piece of
/// transcript trailed the audio it covers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealtimeSession {
    /// Audio a chunk (`--audio-chunk-ms`).
    pub chunk_ms: u32,
    /// Sent at the speaker's pace (`--audio-pace realtime`), else as fast as
    /// the socket took it.
    pub paced: bool,
    /// Chunks sent.
    pub chunks: u32,
    /// The WebSocket's connect and handshake to `session.created`, µs.
    pub connect_us: u64,
    /// Each delta's lag behind the audio it covers, µs, in order: its
    /// arrival minus the send of the chunk that completed that audio.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lags_us: Vec<u64>,
    /// From the final commit (the last audio) to `transcription.done`, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_to_done_us: Option<u64>,
}

/// Where in its workflow a request was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowCall {
    /// The workflow (its arrival's index).
    pub id: u64,
    /// The step's name.
    pub step: String,
    /// Its place among the step's parallel instances, in the order they
    /// were sent (0 for a step that does not fan out).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub branch: u32,
    /// The loop's pass it ran in (0: the first).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pass: u32,
}

/// A finished workflow: its makespan and where the time on its critical
/// path went, carried by its last record so memory stays flat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowEnd {
    /// Requests it sent (its model calls).
    pub calls: u32,
    /// Every step ran and succeeded (else a call failed, or the run's
    /// budget or deadline ended it: its figures are not in the makespan's).
    pub complete: bool,
    /// From its arrival to the end of its last step, µs.
    pub makespan_us: u64,
    /// The critical path's time, µs, in three parts that add up to the
    /// makespan: model calls (send to end), tools' waits, and the rest
    /// (a step ready but not yet sent: the client's gaps, a trace's gaps).
    pub path_llm_us: u64,
    pub path_tool_us: u64,
    pub path_other_us: u64,
    /// Within those, the joins on the path waiting for their slowest
    /// branch: from each one's median branch's end to its last's, µs.
    #[serde(default)]
    pub path_join_wait_us: u64,
    /// The steps on the critical path, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
    /// Its calls in flight at once, at most.
    pub peak_in_flight: u32,
    /// Each join of more than one branch: how long it was held by its slowest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joins: Vec<JoinWait>,
    /// Each step that ran calls in parallel: their TTFTs, shortest first
    /// (at most 32) — a staircase is a queue in the server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub siblings: Vec<SiblingTtfts>,
}

/// The TTFTs of one step's parallel calls in one workflow, shortest first, µs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiblingTtfts {
    pub step: String,
    pub ttft_us: Vec<u64>,
}

/// One join's wait in one workflow.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinWait {
    pub step: String,
    /// The branches it waited for.
    pub branches: u32,
    /// The slowest and the median of those branches, from the fork to their end, µs.
    pub slowest_us: u64,
    pub median_us: u64,
    /// From the median branch's end to the last awaited one's: how long
    /// the join was held after half its branches were done, µs.
    pub held_us: u64,
}

/// One tool call an answer made: the tool it named, and whether its
/// arguments were JSON valid against that tool's parameter schema.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallMade {
    /// The call's id, where the API gave one (what its result answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    /// Its arguments' text, as it came.
    #[serde(default)]
    pub arguments: String,
    pub valid: bool,
    /// Why not, in one short line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How `chunks` is written to `requests.jsonl`: compact, because a long run
/// has millions of them. `at_us` holds the first chunk's arrival on the run's
/// clock, then each chunk's gap from the one before (delta-encoded: a gap is
/// 5 digits where an instant is 10), so arrival times are its running sum;
/// `tokens` is one number when every chunk carried that many, else one per
/// chunk. The older form, `[[at_us, tokens], …]`, is still read.
pub mod chunk_format {
    use super::Chunk;
    use serde::de::{self, MapAccess, SeqAccess, Visitor};
    use serde::ser::SerializeStruct;
    use serde::{Deserializer, Serialize, Serializer};

    struct Gaps<'a>(&'a [Chunk]);

    impl Serialize for Gaps<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut prev = 0;
            s.collect_seq(self.0.iter().map(|c| {
                let gap = c.0.saturating_sub(prev);
                prev = c.0;
                gap
            }))
        }
    }

    struct Tokens<'a>(&'a [Chunk]);

    impl Serialize for Tokens<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self.0.first() {
                Some(first) if self.0.iter().any(|c| c.1 != first.1) => {
                    s.collect_seq(self.0.iter().map(|c| c.1))
                }
                first => s.serialize_u32(first.map_or(1, |c| c.1)),
            }
        }
    }

    pub fn serialize<S: Serializer>(chunks: &[Chunk], s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Chunks", 2)?;
        st.serialize_field("at_us", &Gaps(chunks))?;
        st.serialize_field("tokens", &Tokens(chunks))?;
        st.end()
    }

    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum TokensField {
        Each(u32),
        List(Vec<u32>),
    }

    struct ChunksVisitor;

    impl<'de> Visitor<'de> for ChunksVisitor {
        type Value = Vec<Chunk>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(r#"{"at_us": [...], "tokens": ...} or [[at_us, tokens], ...]"#)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(c) = seq.next_element::<Chunk>()? {
                out.push(c);
            }
            Ok(out)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let (mut gaps, mut tokens): (Option<Vec<u64>>, Option<TokensField>) = (None, None);
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match key.as_ref() {
                    "at_us" => gaps = Some(map.next_value()?),
                    "tokens" => tokens = Some(map.next_value()?),
                    _ => {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
            }
            let gaps = gaps.ok_or_else(|| de::Error::missing_field("at_us"))?;
            let mut at = 0u64;
            let mut out = Vec::with_capacity(gaps.len());
            for (i, gap) in gaps.into_iter().enumerate() {
                at = at.saturating_add(gap);
                let k = match &tokens {
                    None => 1,
                    Some(TokensField::Each(k)) => *k,
                    Some(TokensField::List(l)) => *l.get(i).ok_or_else(|| {
                        de::Error::custom("chunks: fewer `tokens` than `at_us` entries")
                    })?,
                };
                out.push(Chunk(at, k));
            }
            Ok(out)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Chunk>, D::Error> {
        d.deserialize_any(ChunksVisitor)
    }

    #[cfg(test)]
    mod tests {
        use super::super::{Chunk, RequestRecord};

        #[test]
        fn chunks_round_trip_compactly_and_the_old_form_still_reads() {
            let mut r = RequestRecord::sent(1, 0, 0);
            r.chunks = vec![
                Chunk(1_000_123, 1),
                Chunk(1_020_130, 1),
                Chunk(1_040_200, 1),
            ];
            let text = serde_json::to_string(&r).unwrap();
            assert!(
                text.contains(r#""chunks":{"at_us":[1000123,20007,20070],"tokens":1}"#),
                "{text}"
            );
            let back: RequestRecord = serde_json::from_str(&text).unwrap();
            assert_eq!(back.chunks, r.chunks);
            r.chunks[1].1 = 3;
            let text = serde_json::to_string(&r).unwrap();
            assert!(text.contains(r#""tokens":[1,3,1]"#), "{text}");
            assert_eq!(
                serde_json::from_str::<RequestRecord>(&text).unwrap().chunks,
                r.chunks
            );
            r.chunks.clear();
            let back: RequestRecord =
                serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
            assert!(back.chunks.is_empty());
            // A run directory written before: absolute pairs.
            let old = text.replace(
                r#"{"at_us":[1000123,20007,20070],"tokens":[1,3,1]}"#,
                "[[5,1],[9,2]]",
            );
            let back: RequestRecord = serde_json::from_str(&old).unwrap();
            assert_eq!(back.chunks, vec![Chunk(5, 1), Chunk(9, 2)]);
        }
    }
}

#[cfg(test)]
impl RequestRecord {
    /// A successful request for tests: sent at `sent_at_us`, its output the given
    /// chunks (their tokens summed), done with the last chunk.
    pub(crate) fn test_success(
        id: u64,
        sent_at_us: u64,
        chunks: Vec<Chunk>,
        input_tokens: u64,
    ) -> Self {
        let output_tokens = chunks.iter().map(|c| c.1 as u64).sum();
        RequestRecord {
            first_byte_at_us: Some(sent_at_us),
            first_token_at_us: chunks.first().map(Chunk::at_us),
            done_at_us: chunks.last().map_or(sent_at_us, Chunk::at_us),
            input_tokens: Some(input_tokens),
            input_token_source: Some(TokenSource::ServerUsage),
            output_tokens,
            output_token_source: Some(TokenSource::ServerUsage),
            requested_output_tokens: Some(output_tokens),
            status: Some(200),
            finish_reason: Some("length".into()),
            chunks,
            ..RequestRecord::sent(id, sent_at_us, sent_at_us)
        }
    }
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

impl RequestRecord {
    /// A request that has been sent and has nothing back yet; the stages
    /// that follow fill in the rest.
    /// Moves every instant later by `us` (onto another clock origin).
    pub fn shift(&mut self, us: u64) {
        self.scheduled_at_us += us;
        self.sent_at_us += us;
        self.done_at_us += us;
        for t in [
            &mut self.first_byte_at_us,
            &mut self.first_token_at_us,
            &mut self.first_answer_at_us,
        ]
        .into_iter()
        .flatten()
        {
            *t += us;
        }
        for c in &mut self.chunks {
            c.0 += us;
        }
    }

    pub fn sent(id: u64, scheduled_at_us: u64, sent_at_us: u64) -> Self {
        RequestRecord {
            id,
            warmup: false,
            scheduled_at_us,
            sent_at_us,
            first_byte_at_us: None,
            first_token_at_us: None,
            first_answer_at_us: None,
            done_at_us: sent_at_us,
            input_tokens: None,
            input_token_source: None,
            requested_input_tokens: None,
            output_tokens: 0,
            output_token_source: None,
            requested_output_tokens: None,
            cached_tokens: None,
            session: None,
            turn: None,
            replica: None,
            shard: None,
            status: None,
            error_kind: None,
            error: None,
            finish_reason: None,
            retries: 0,
            waited_for_slot: false,
            implausible_usage: None,
            server_timings: None,
            reasoning_tokens: None,
            reasoning_token_source: None,
            reasoning_hidden: false,
            items: None,
            adapter: None,
            media: None,
            format_valid: None,
            format_error: None,
            tools_offered: None,
            tool_calls: Vec::new(),
            first_tool_call_at_us: None,
            correct: None,
            answer_hash: None,
            class: None,
            request_id: None,
            traceparent: None,
            answer_text: None,
            tool_wait_us: None,
            session_end: None,
            workflow: None,
            workflow_end: None,
            speech: None,
            chunks: Vec::new(),
        }
    }

    pub fn succeeded(&self) -> bool {
        self.error_kind.is_none()
    }

    /// Failed: ended by an error, not by the client leaving on purpose.
    pub fn failed(&self) -> bool {
        self.error_kind.is_some_and(|k| k != ErrorKind::Abandoned)
    }

    /// Left on purpose (`--cancel`).
    pub fn abandoned(&self) -> bool {
        self.error_kind == Some(ErrorKind::Abandoned)
    }

    /// TTFT = first token − sent, in µs.
    pub fn ttft_us(&self) -> Option<u64> {
        Some(self.first_token_at_us?.saturating_sub(self.sent_at_us))
    }

    /// TTFT measured from when the load pattern scheduled the request.
    pub fn ttft_from_scheduled_us(&self) -> Option<u64> {
        Some(self.first_token_at_us?.saturating_sub(self.scheduled_at_us))
    }

    /// When the last token arrived.
    pub fn last_token_at_us(&self) -> Option<u64> {
        self.chunks.last().map(Chunk::at_us)
    }

    /// The output tokens the stream carried: all of them, but hidden
    /// reasoning (counted by the server, never streamed).
    pub fn streamed_tokens(&self) -> u64 {
        match (self.reasoning_hidden, self.reasoning_tokens) {
            (true, Some(r)) => self.output_tokens.saturating_sub(r),
            _ => self.output_tokens,
        }
    }

    /// TPOT = (last token − first token) / (streamed tokens − 1), for ≥ 2
    /// tokens. In µs. With hidden reasoning the tokens are those streamed:
    /// the thinking's tokens came before the first one and are in its TTFT.
    pub fn tpot_us(&self) -> Option<f64> {
        let n = self.streamed_tokens();
        if n < 2 {
            return None;
        }
        let span = self
            .last_token_at_us()?
            .checked_sub(self.first_token_at_us?)?;
        Some(span as f64 / (n - 1) as f64)
    }

    /// The thinking's time on the stream = first answer chunk − first
    /// chunk, in µs, for a request whose thinking was streamed (hidden
    /// thinking came before the first chunk: it is inside TTFT and cannot
    /// be told from the prefill there).
    pub fn reasoning_span_us(&self) -> Option<u64> {
        if self.reasoning_hidden || self.reasoning_tokens.is_none() {
            return None;
        }
        self.first_answer_at_us?
            .checked_sub(self.first_token_at_us?)
    }

    /// TPOT of the answer alone = (last token − first answer chunk) /
    /// (answer tokens − 1), for a request that reasoned and answered with
    /// ≥ 2 tokens. In µs. What a reader of the answer sees, as [`tpot_us`]
    /// is over the whole generation.
    ///
    /// [`tpot_us`]: RequestRecord::tpot_us
    pub fn answer_tpot_us(&self) -> Option<f64> {
        let n = self.output_tokens.checked_sub(self.reasoning_tokens?)?;
        if n < 2 {
            return None;
        }
        let span = self
            .last_token_at_us()?
            .checked_sub(self.first_answer_at_us?)?;
        Some(span as f64 / (n - 1) as f64)
    }

    /// Time to the first answer token = first answer chunk − sent, in µs.
    /// Like TTFT, only a stream has one: a whole response's answer arrives
    /// at its end.
    pub fn answer_start_us(&self) -> Option<u64> {
        self.first_token_at_us?;
        Some(self.first_answer_at_us?.saturating_sub(self.sent_at_us))
    }

    /// The time to the first answer token whatever the request: a reasoning
    /// request's answer start (`None` if it never answered), any other's TTFT.
    pub fn answer_start_or_ttft_us(&self) -> Option<u64> {
        match self.reasoning_tokens {
            Some(_) => self.answer_start_us(),
            None => self.ttft_us(),
        }
    }

    /// The request used its whole length on reasoning: it ended at its
    /// limit with no answer.
    pub fn thinking_budget_spent(&self) -> bool {
        self.succeeded()
            && self.finish_reason.as_deref() == Some("length")
            && self.reasoning_tokens.is_some_and(|r| r > 0)
            && self.first_answer_at_us.is_none()
    }

    /// E2E = end of stream − sent, in µs.
    pub fn e2e_us(&self) -> u64 {
        self.done_at_us.saturating_sub(self.sent_at_us)
    }

    /// Client lag: how late the request left compared with its schedule, in µs.
    pub fn lag_us(&self) -> u64 {
        self.sent_at_us.saturating_sub(self.scheduled_at_us)
    }

    /// Gaps between successive chunks (ICL), in µs.
    pub fn chunk_gaps_us(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks
            .windows(2)
            .map(|w| w[1].0.saturating_sub(w[0].0))
    }

    /// Token-split inter-token latencies: each chunk after the first contributes
    /// its gap divided over the tokens it carried, once per token. Tokens that
    /// arrived together with the first token have no gap and contribute nothing.
    pub fn itl_us(&self) -> impl Iterator<Item = (f64, u32)> + '_ {
        self.chunks.windows(2).map(|w| {
            let gap = w[1].0.saturating_sub(w[0].0) as f64;
            let k = w[1].1.max(1);
            (gap / k as f64, k)
        })
    }

    /// The request finished normally but produced fewer tokens than it asked for.
    pub fn short_output(&self) -> bool {
        self.succeeded()
            && self
                .requested_output_tokens
                .is_some_and(|want| self.output_tokens < want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(chunks: Vec<Chunk>, output_tokens: u64) -> RequestRecord {
        let mut r = RequestRecord::test_success(0, 1_000, chunks, 10);
        r.output_tokens = output_tokens;
        r.requested_output_tokens = Some(output_tokens);
        r.done_at_us += 100;
        r
    }

    #[test]
    fn definitions() {
        let r = record(
            vec![Chunk(101_000, 1), Chunk(121_000, 1), Chunk(141_000, 1)],
            3,
        );
        assert_eq!(r.ttft_us(), Some(100_000));
        assert_eq!(r.tpot_us(), Some(20_000.0));
        assert_eq!(r.e2e_us(), 140_100);
        assert_eq!(
            r.itl_us().collect::<Vec<_>>(),
            vec![(20_000.0, 1), (20_000.0, 1)]
        );
    }

    #[test]
    fn a_reasoning_requests_thinking_time_and_answer_pace() {
        // Two thoughts 20 ms apart, then three answer tokens 10 ms apart.
        let at = [101_000, 121_000, 141_000, 151_000, 161_000];
        let mut r = record(at.iter().map(|&t| Chunk(t, 1)).collect(), 5);
        r.reasoning_tokens = Some(2);
        r.first_answer_at_us = Some(141_000);
        assert_eq!(r.reasoning_span_us(), Some(40_000));
        assert_eq!(r.answer_tpot_us(), Some(10_000.0));
        assert_eq!(r.answer_start_us(), Some(140_000));
        // Hidden thinking is inside TTFT: no span to tell.
        r.reasoning_hidden = true;
        assert_eq!(r.reasoning_span_us(), None);
        // One answer token has no pace; no reasoning, no answer TPOT.
        r.reasoning_tokens = Some(4);
        assert_eq!(r.answer_tpot_us(), None);
        r.reasoning_tokens = None;
        assert_eq!(r.answer_tpot_us(), None);
    }

    #[test]
    fn multi_token_chunks_split_their_gap() {
        let r = record(vec![Chunk(100_000, 4), Chunk(180_000, 4)], 8);
        assert_eq!(r.itl_us().collect::<Vec<_>>(), vec![(20_000.0, 4)]);
        assert_eq!(r.chunk_gaps_us().collect::<Vec<_>>(), vec![80_000]);
        // 7 gaps of 80ms/7 tokens: TPOT counts the whole span over n-1 tokens.
        assert!((r.tpot_us().unwrap() - 80_000.0 / 7.0).abs() < 1e-9);
    }

    #[test]
    fn tpot_needs_two_tokens() {
        let r = record(vec![Chunk(100_000, 1)], 1);
        assert_eq!(r.tpot_us(), None);
    }

    #[test]
    fn error_kinds_round_trip() {
        for kind in [
            ErrorKind::Connect,
            ErrorKind::Timeout,
            ErrorKind::Http(429),
            ErrorKind::Stream,
            ErrorKind::ServerError,
            ErrorKind::Malformed,
            ErrorKind::Cancelled,
            ErrorKind::Abandoned,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_json::from_str::<ErrorKind>(&json).unwrap(), kind);
        }
        assert_eq!(ErrorKind::Http(503).to_string(), "http_503");
    }

    #[test]
    fn record_round_trips_through_json() {
        let r = record(vec![Chunk(1, 1), Chunk(2, 3)], 4);
        let line = serde_json::to_string(&r).unwrap();
        assert!(
            line.contains(r#""chunks":{"at_us":[1,1],"tokens":[1,3]}"#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<RequestRecord>(&line).unwrap(), r);
    }
}

/// What media a request carried (`--images`, `--audio`, a dataset's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaSent {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub images: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub audio: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub video: u32,
    /// Encoded bytes sent inline (media sent as URLs count none).
    pub bytes: u64,
    /// The audio clips' length, ms, read from their headers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub audio_ms: u64,
    /// The first image's size (`640x480`; a dataset's: its file name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<String>,
}
