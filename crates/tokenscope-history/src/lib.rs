//! The results history: every run tokenscope finishes — `bench`, `sweep`,
//! `sim plan`, `merge` — recorded in a database, so a team can see its
//! figures over weeks and be told when one run breaks from its
//! configuration's recent past.
//!
//! The data flows top-down through these modules:
//! - [`location`]: where the history lives — a SQLite file (the default,
//!   embedded, no server) or a PostgreSQL URL shared by a CI fleet;
//! - [`metrics`]: the figures kept of each run, read from `results.json`;
//! - [`entry`]: one run as recorded, and the identity of its configuration;
//! - [`store`]: the database — versioned migrations, writes that many
//!   processes may make at once, and filtered reads ([`sql`] hides the two
//!   engines behind one small interface);
//! - [`changes`]: which runs differ from their configuration's recent
//!   history (the change-point rule);
//! - [`export`]: the history as CSV or JSON;
//! - [`tls`]: `sslmode` and `sslrootcert` for a shared PostgreSQL history;
//! - `error`: what can go wrong, naming the database and the step.

pub mod changes;
pub mod entry;
mod error;
pub mod export;
pub mod location;
pub mod metrics;
mod schema;
mod sql;
pub mod store;
pub mod tls;

pub use changes::{judge, Judgement, Rule, Verdict};
pub use entry::{Kind, RunEntry, StoredRun};
pub use location::Location;
pub use store::{Filter, Store};

pub use error::{Error, Result};
