//! The core of tokenscope: what one request looked like ([`record`]), how the
//! numbers are defined and computed from those records ([`metrics`]), the
//! statistics behind every distribution ([`stats`]), service-level objectives
//! ([`slo`]), cost ([`cost`]), and the `results.json` document ([`results`]).
//!
//! Nothing here does I/O or knows about HTTP: the load crate produces
//! [`record::RequestRecord`]s, this crate turns them into [`results::RunResults`].

pub mod analysis;
pub mod autoscale;
pub mod capacity;
pub mod clock;
pub mod compare;
pub mod cost;
pub mod diagnosis;
pub mod duration;
pub mod metrics;
pub mod mutate;
pub mod prices;
pub mod record;
pub mod results;
pub mod slo;
pub mod stats;
