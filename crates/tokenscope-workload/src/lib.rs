//! What tokenscope sends, apart from how it is sent: the client
//! (`tokenscope-load`) and the simulator (`tokenscope-sim`) both draw their
//! requests from here, so a `sim plan` and a `bench` of one workload see the
//! same prompts, lengths and arrival times.
//!
//! In the order a workload is built:
//! - [`lengths`]: length distributions (`256`, `uniform:128..512`, …);
//! - [`tokenizer`]: token counts, cl100k built in or a local `tokenizer.json`;
//! - [`dataset`]: prompts and recorded lengths from files (ShareGPT, JSONL,
//!   Azure, BurstGPT and Mooncake traces);
//! - [`tools`]: the tools a request offers, in one form;
//! - [`session`]: multi-turn conversations and the user's think time;
//! - [`workflow`]: agent workflows, graphs of calls and tool waits
//!   (fan-outs, joins, loops), and [`otlp_trace`]: the same read from
//!   agents' OpenTelemetry traces;
//! - [`workload`]: what every request asks for (synthetic prompts, shared
//!   prefixes, the dataset entry it sends);
//! - [`arrival`]: when each request leaves (closed loop, Poisson, constant,
//!   gamma, a trace's own times).

pub mod adapters;
pub mod arithmetic;
pub mod arrival;
pub mod audio_len;
pub mod dataset;
pub mod lengths;
pub mod media;
pub mod otlp_trace;
pub mod seed;
pub mod session;
pub mod tokenizer;
pub mod tools;
pub mod workflow;
pub mod workload;
