//! The HTTP client of tokenscope, in the order data flows: a request from
//! the workload (`tokenscope-workload`) is written by its API's
//! [`protocol`] module, sent over [`http1`] and read back as protocol-neutral
//! events over [`sse`] — one request, timed per network read, in
//! [`request`] — by the load loop in [`runner`], and kept by the
//! [`recorder`] (`requests.jsonl`); [`counts`] holds what a finished
//! answer's token counts may be. [`probe`] asks the server what it
//! serves before the load; [`connections`], [`runtime`], [`rx_stamp`],
//! [`loop_delay`] and [`cpu`] keep the client itself fast and measured.

pub mod abandon;
mod audio_answer;
pub mod classes;
pub mod connections;
pub mod counts;
pub mod cpu;
pub mod draw;
pub mod failure;
pub mod grading;
pub mod http1;
pub mod loop_delay;
pub mod probe;
pub mod protocol;
pub mod realtime_session;
pub mod recorder;
pub mod request;
pub mod request_ids;
pub mod runner;
pub mod runtime;
pub mod rx_stamp;
pub mod sse;
pub mod structured;
pub mod target;
pub mod tools;
pub mod workflow;
