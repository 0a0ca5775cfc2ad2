//! Servers and engines built into tokenscope, so `bench` has a target with no
//! GPU and the tests have ground truth: [`exact`] streams with exactly the
//! timing it is given; [`engine`] models a vLLM-like engine (continuous
//! batching, paged KV cache, preemption) on a hardware cost model, and
//! [`plan`] runs it on a virtual clock, fed by [`traffic`] with the
//! [`load`] it is given.

pub mod autoscale;
pub mod calibrate;
pub mod engine;
pub mod exact;
pub mod faults;
pub mod http;
pub mod load;
pub mod openai;
pub mod plan;
pub mod prom;
pub mod router;
pub mod serve;
pub mod size;
pub mod timer;
pub mod traffic;
