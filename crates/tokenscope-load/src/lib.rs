//! Load generation for tokenscope, in the order data flows:
//! [`workload`] (prompts and lengths) → [`arrival`] (when requests leave) →
//! [`openai`] over [`sse`] (one streaming request, timed per chunk, in
//! [`request`]) → [`runner`] (the load loop) → [`recorder`] (`requests.jsonl`).

pub mod connections;
pub mod cpu;
pub mod http1;
pub mod loop_delay;
pub mod openai;
pub mod probe;
pub mod recorder;
pub mod request;
pub mod runner;
pub mod runtime;
pub mod rx_stamp;
pub mod sse;
