//! Servers and engines built into tokenscope, so `bench` has a target with no
//! GPU and the tests have ground truth.
//!
//! - [`exact`]: a server that streams with exactly the timing it is given
//!   (and says its own send times), with [`faults`] to inject; [`openai`]
//!   is what both built-in servers read and write, [`http`] and [`timer`]
//!   their plumbing; [`pooling`] answers embeddings and rerank, [`vision`]
//!   counts the media a request carries.
//! - [`engine`]: a vLLM-like engine (continuous batching, paged KV cache,
//!   preemption, the schedulers of other engines) on a hardware cost model.
//! - [`serve`]: the engine as a real-time server with vLLM's `/metrics`
//!   ([`prom`]), one replica or several behind a [`router`].
//! - [`plan`]: the engine on a virtual clock, fed by [`traffic`] with the
//!   [`load`] it is given; [`autoscale`] plays a scaling policy through it.
//! - [`calibrate`]: the efficiency factors fitted to a measured run;
//!   [`size`]: the cheapest deployments that meet an SLO at a load.
//!
//! Its workload types come from `tokenscope-workload`; it never depends on
//! the HTTP client.

pub mod answers;
pub mod autoscale;
pub mod calibrate;
pub mod engine;
pub mod exact;
pub mod faults;
pub mod front_end;
pub mod http;
pub mod load;
pub mod openai;
pub mod phase;
pub mod plan;
pub mod pooling;
pub mod prom;
pub mod router;
pub mod serve;
pub mod size;
pub mod speech;
pub mod timer;
pub mod traffic;
pub mod vision;
