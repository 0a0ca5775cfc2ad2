//! What went wrong with the history, for every module of this crate.

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
    /// `sslmode` or `sslrootcert` cannot be honoured (an unknown mode, a
    /// root certificate file that cannot be read).
    #[error("{db}: TLS: {what}")]
    Tls { db: String, what: String },
}

pub type Result<T> = std::result::Result<T, Error>;
