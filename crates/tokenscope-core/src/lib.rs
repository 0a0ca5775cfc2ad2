//! The core of tokenscope: what one request looked like ([`record`]), how the
//! numbers are defined and computed from those records ([`metrics`]), the
//! statistics behind every distribution ([`stats`]), service-level objectives
//! ([`slo`]) and where a series stops meeting them ([`capacity`]) or a
//! search finds it does ([`search`]), cost
//! ([`cost`], [`prices`]), the findings of a run ([`diagnosis`]), the
//! trade-offs of a series ([`analysis`]) and the autoscaling thresholds they
//! give ([`autoscale`]), whether two runs differ ([`compare`]), the run's one
//! monotonic clock ([`clock`]), and the `results.json` document ([`results`]).
//! [`duration`] parses the durations flags carry; [`capped`] holds a
//! server's body up to a limit; [`error_chain`] says an
//! error with its causes; [`mutate`] feeds the
//! fuzz tests of the crates above.
//!
//! Nothing here does I/O or knows about HTTP: the load crate produces
//! [`record::RequestRecord`]s, this crate turns them into [`results::RunResults`].

pub mod analysis;
pub mod autoscale;
pub mod breaker;
pub mod capacity;
pub mod capped;
pub mod clock;
pub mod compare;
pub mod consistency;
pub mod cost;
pub mod diagnosis;
pub mod duration;
pub mod error_chain;
pub mod formats;
pub mod grading;
pub mod hash;
pub mod instants;
pub mod media;
pub mod metrics;
pub mod mutate;
pub mod overload;
pub mod prices;
pub mod record;
pub mod results;
pub mod search;
pub mod segments;
pub mod sessions;
pub mod slo;
pub mod spec_decode;
pub mod speech;
pub mod stats;
pub mod tool_calls;
pub mod ttft_by_sent;
pub mod waves;
pub mod windows;
pub mod workflows;
