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
//! - [`export`]: the history as CSV or JSON.

pub mod changes;
pub mod entry;
pub mod export;
pub mod location;
pub mod metrics;
mod schema;
mod sql;
pub mod store;

pub use changes::{judge, Judgement, Rule, Verdict};
pub use entry::{Kind, RunEntry, StoredRun};
pub use location::Location;
pub use store::{Filter, Store};

/// What went wrong with the history. Each names the database (credentials
/// removed) and what was being done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{db}: {doing}: {source}")]
    Sqlite {
        db: String,
        doing: &'static str,
        source: rusqlite::Error,
    },
    /// The PostgreSQL client's error with its causes (`error connecting to
    /// server: Connection refused`): its own message alone says too little.
    #[error("{db}: {doing}: {message}")]
    Postgres {
        db: String,
        doing: &'static str,
        message: String,
    },
    #[error("{db}: {0}", db = .1)]
    Invalid(String, String),
}

pub type Result<T> = std::result::Result<T, Error>;
