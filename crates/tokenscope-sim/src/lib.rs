//! Servers built into tokenscope, so that `bench` has a target with no GPU and
//! the tests have ground truth. [`exact`] streams with exactly the timing it is
//! configured with; the engine model (continuous batching, paged KV cache) is
//! to come beside it.

pub mod exact;
pub mod timer;
