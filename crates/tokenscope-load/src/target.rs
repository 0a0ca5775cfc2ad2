//! What every request of a run is sent to and how: the endpoint and its
//! connections, the API, and the run's shape of request.

use crate::protocol::{Protocol, ReasoningParser, Shape};
use std::sync::Arc;
use std::time::Duration;

/// The most bytes one response body may bring, streamed or whole: 64 MiB,
/// some three times what a 128K-token answer streams in vLLM's chat format
/// (~200 bytes an event). Past it the request fails `too_large`, naming
/// the limit, and what it held is let go: a server that streams forever,
/// or answers with an endless body, costs this much memory and no more.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Everything a request needs that is the same for the whole run.
#[derive(Debug, Clone)]
pub struct Target {
    /// The endpoint (`…/v1/chat/completions` or `…/v1/completions`), the
    /// run's headers (`Authorization` among them) and the kept-alive connections.
    pub http: Arc<crate::http1::Client>,
    /// The API: how the body is written and the answer read.
    pub api: &'static dyn Protocol,
    pub model: String,
    pub ignore_eos: bool,
    /// `false` (`--no-stream`): whole answers, timed end to end only.
    pub stream: bool,
    /// System prompt, temperature and extra body fields of every request.
    pub shape: Shape,
    /// Where reasoning is recognised (`--reasoning-parser`).
    pub reasoning: ReasoningParser,
    /// A pooling API's inputs per request besides the prompt (from
    /// `--batch-size`); 0 for the generating APIs.
    pub documents: u64,
    /// `--response-format`: every successful answer is checked.
    pub check: Option<std::sync::Arc<crate::structured::AnswerCheck>>,
    /// `--tools` (or a dataset's): what is offered, and every call checked.
    pub tools: Option<std::sync::Arc<crate::tools::ToolUse>>,
    /// `--grade`: answers with an `expected` are graded.
    pub grade: Option<std::sync::Arc<crate::grading::Grade>>,
    /// `--keep-text`: each record keeps its answer's text.
    pub keep_text: bool,
    /// `--lora`: each request names its adapter as its model.
    pub adapters: Option<std::sync::Arc<tokenscope_workload::adapters::Adapters>>,
    /// Longest a whole request may take.
    pub timeout: Duration,
    /// Longest to wait for the response head or the next read of the stream.
    pub idle_timeout: Duration,
    /// Each request's id and trace context, sent as headers and recorded.
    pub ids: crate::request_ids::RequestIds,
    /// `--cancel`: the requests that leave part-way, and when.
    pub abandon: Option<crate::abandon::Abandon>,
    /// `--class`: each request's class of traffic (its priority, headers).
    pub classes: Option<Arc<crate::classes::Classes>>,
    /// `--audio-chunk-ms`, `--audio-pace`: how a realtime session sends its audio.
    pub pacing: Pacing,
}

/// How a realtime session sends its audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// Audio a chunk, ms (`--audio-chunk-ms`).
    pub chunk_ms: u32,
    /// At the speaker's pace (`--audio-pace realtime`), else as fast as possible.
    pub paced: bool,
}

impl Default for Pacing {
    fn default() -> Self {
        Pacing {
            chunk_ms: 100,
            paced: true,
        }
    }
}
