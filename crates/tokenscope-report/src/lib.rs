//! Rendering results for people. The terminal summary groups the numbers as
//! the field does: Latency, Throughput, Efficiency, then errors, SLO and the
//! diagnosis.

pub mod terminal;
