//! SQLite and PostgreSQL behind one small interface: statements written
//! once with `?` placeholders, values of four kinds, rows as vectors. The
//! store's logic is then the same for both, so both give the same answers.

use crate::{Error, Location, Result};
use postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use std::time::Duration;

/// A value bound to a statement or read from a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl Value {
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Real(r) => Some(*r as i64),
            _ => None,
        }
    }

    pub fn real(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Real(r) => Some(*r),
            _ => None,
        }
    }

    pub fn text(&self) -> Option<String> {
        match self {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Text(s.to_string())
    }
}

impl From<Option<&str>> for Value {
    fn from(s: Option<&str>) -> Value {
        s.map_or(Value::Null, Value::from)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int(i)
    }
}

impl From<Option<i64>> for Value {
    fn from(i: Option<i64>) -> Value {
        i.map_or(Value::Null, Value::Int)
    }
}

impl From<f64> for Value {
    fn from(r: f64) -> Value {
        Value::Real(r)
    }
}

/// A PostgreSQL connection: plain, or with TLS as `sslmode` and
/// `sslrootcert` ask (crate::tls).
fn open_postgres(loc: &Location, url: &str) -> Result<Db> {
    use crate::tls::SslMode;
    let tls = |what: String| crate::Error::Tls {
        db: loc.shown(),
        what,
    };
    let wanted = crate::tls::take_params(url).map_err(tls)?;
    let mut config: postgres::Config = wanted
        .url
        .parse()
        .map_err(|e| pg_err(loc, "reading the URL", e))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(WAIT);
    }
    config.application_name("tokenscope");
    let client = match wanted.mode {
        None | Some(SslMode::Disable) => {
            config.ssl_mode(postgres::config::SslMode::Disable);
            config.connect(postgres::NoTls)
        }
        Some(mode) => {
            let rustls =
                crate::tls::client_config(mode, wanted.root_cert.as_deref()).map_err(tls)?;
            config.ssl_mode(match mode {
                SslMode::Prefer => postgres::config::SslMode::Prefer,
                _ => postgres::config::SslMode::Require,
            });
            config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(rustls))
        }
    };
    client
        .map(|c| Db::Postgres(Box::new(c)))
        .map_err(|e| pg_err(loc, "connecting", e))
}

/// An open connection to either database.
pub enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

/// How long a connection or a locked SQLite file may hold a run up: in
/// all, across the statements of one open or one write (each would wait
/// this long again if each had its own timeout).
pub const WAIT: Duration = Duration::from_secs(10);

impl Db {
    /// Opens `loc`, waiting for a locked file until `until` at most.
    pub fn open(loc: &Location, until: std::time::Instant) -> Result<Db> {
        match loc {
            Location::Sqlite(path) => {
                open_sqlite(path, until).map_err(|e| sqlite_err(loc, "opening", e))
            }
            Location::Postgres(url) => open_postgres(loc, url),
        }
    }

    /// A locked SQLite file is waited for until `until` and no longer,
    /// whatever statements come before it (PostgreSQL waits on its own).
    pub fn wait_until(&mut self, until: std::time::Instant) {
        if let Db::Sqlite(c) = self {
            busy_until(c, until);
        }
    }

    /// Runs statements that take no values and return no rows.
    pub fn batch(&mut self, sql: &str) -> std::result::Result<(), DbError> {
        match self {
            Db::Sqlite(c) => c.execute_batch(sql).map_err(DbError::Sqlite),
            Db::Postgres(c) => c.batch_execute(sql).map_err(DbError::Postgres),
        }
    }

    /// Runs one statement; its rows, if it returns any.
    pub fn query(
        &mut self,
        sql: &str,
        values: &[Value],
    ) -> std::result::Result<Vec<Vec<Value>>, DbError> {
        match self {
            Db::Sqlite(c) => query_sqlite(c, sql, values).map_err(DbError::Sqlite),
            Db::Postgres(c) => query_postgres(c, &numbered(sql), values).map_err(DbError::Postgres),
        }
    }

    /// Takes the write lock for a transaction: SQLite's `BEGIN IMMEDIATE`
    /// (waits for other writers up to the busy timeout); PostgreSQL's
    /// advisory lock, so two processes migrating at once do it one by one.
    pub fn begin_exclusive(&mut self) -> std::result::Result<(), DbError> {
        match self {
            Db::Sqlite(_) => self.batch("BEGIN IMMEDIATE"),
            Db::Postgres(_) => self.batch("BEGIN; SELECT pg_advisory_xact_lock(7036574312)"),
        }
    }

    /// The column type of an auto-numbered key.
    pub fn serial_key(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "INTEGER PRIMARY KEY AUTOINCREMENT",
            Db::Postgres(_) => "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
        }
    }
}

/// An error of either engine, before it is told which database and what was being done.
#[derive(Debug)]
pub enum DbError {
    Sqlite(rusqlite::Error),
    Postgres(postgres::Error),
}

impl DbError {
    pub fn at(self, loc: &Location, doing: &'static str) -> Error {
        match self {
            DbError::Sqlite(e) => sqlite_err(loc, doing, e),
            DbError::Postgres(e) => pg_err(loc, doing, e),
        }
    }
}

fn sqlite_err(loc: &Location, doing: &'static str, source: rusqlite::Error) -> Error {
    Error::Sqlite {
        db: loc.shown(),
        doing,
        source,
    }
}

fn pg_err(loc: &Location, doing: &'static str, source: postgres::Error) -> Error {
    let message = tokenscope_core::error_chain::line(&source);
    Error::Postgres {
        db: loc.shown(),
        doing,
        message,
    }
}

fn open_sqlite(path: &str, until: std::time::Instant) -> rusqlite::Result<Db> {
    use rusqlite::OpenFlags;
    let uri = path.starts_with("file:");
    if !uri {
        if let Some(parent) = std::path::Path::new(path).parent() {
            // A missing directory is made; one that cannot be is reported by the open.
            let _ = std::fs::create_dir_all(parent);
        }
    }
    let flags = if uri && path.contains("mode=ro") {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI
    };
    let c = rusqlite::Connection::open_with_flags(path, flags)?;
    busy_until(&c, until);
    // Readers do not block the writer, nor it them; a read-only file keeps its mode.
    let _ = c.pragma_update(None, "journal_mode", "WAL");
    busy_until(&c, until);
    c.pragma_update(None, "foreign_keys", "ON")?;
    Ok(Db::Sqlite(c))
}

/// A locked file is waited for until `until`, however many statements
/// come before it.
fn busy_until(c: &rusqlite::Connection, until: std::time::Instant) {
    let left = until.saturating_duration_since(std::time::Instant::now());
    let _ = c.busy_timeout(left.max(Duration::from_millis(1)));
}

fn query_sqlite(
    c: &rusqlite::Connection,
    sql: &str,
    values: &[Value],
) -> rusqlite::Result<Vec<Vec<Value>>> {
    use rusqlite::types::Value as V;
    let mut stmt = c.prepare_cached(sql)?;
    let bound = values.iter().map(|v| match v {
        Value::Null => V::Null,
        Value::Int(i) => V::Integer(*i),
        Value::Real(r) => V::Real(*r),
        Value::Text(s) => V::Text(s.clone()),
    });
    let width = stmt.column_count();
    let mut rows = stmt.query(rusqlite::params_from_iter(bound))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut cells = Vec::with_capacity(width);
        for i in 0..width {
            cells.push(match row.get::<_, V>(i)? {
                V::Null | V::Blob(_) => Value::Null,
                V::Integer(i) => Value::Int(i),
                V::Real(r) => Value::Real(r),
                V::Text(s) => Value::Text(s),
            });
        }
        out.push(cells);
    }
    Ok(out)
}

fn query_postgres(
    c: &mut postgres::Client,
    sql: &str,
    values: &[Value],
) -> std::result::Result<Vec<Vec<Value>>, postgres::Error> {
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as _).collect();
    let rows = c.query(sql, &params)?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let mut cells = Vec::with_capacity(row.len());
        for (i, col) in row.columns().iter().enumerate() {
            let t = col.type_();
            cells.push(if *t == Type::INT8 {
                row.get::<_, Option<i64>>(i).into()
            } else if *t == Type::INT4 {
                row.get::<_, Option<i32>>(i).map(i64::from).into()
            } else if *t == Type::FLOAT8 {
                row.get::<_, Option<f64>>(i)
                    .map_or(Value::Null, Value::Real)
            } else {
                row.get::<_, Option<String>>(i)
                    .map_or(Value::Null, Value::Text)
            });
        }
        out.push(cells);
    }
    Ok(out)
}

/// `?` placeholders → PostgreSQL's `$1, $2, …` (no statement here has a `?`
/// inside a string literal).
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for ch in sql.chars() {
        if ch == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(ch);
        }
    }
    out
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) if *ty == Type::FLOAT8 => (*i as f64).to_sql(ty, out),
            Value::Int(i) => i.to_sql(ty, out),
            Value::Real(r) => r.to_sql(ty, out),
            Value::Text(s) => s.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        assert_eq!(
            numbered("SELECT a FROM t WHERE b = ? AND c IN (?, ?)"),
            "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)"
        );
    }

    #[test]
    fn sqlite_round_trips_every_kind_of_value() {
        let mut db = Db::Sqlite(rusqlite::Connection::open_in_memory().unwrap());
        db.batch("CREATE TABLE t (i BIGINT, r DOUBLE PRECISION, s TEXT, n TEXT)")
            .unwrap();
        db.query(
            "INSERT INTO t VALUES (?, ?, ?, ?)",
            &[Value::Int(7), Value::Real(2.5), "x".into(), Value::Null],
        )
        .unwrap();
        let rows = db.query("SELECT i, r, s, n FROM t", &[]).unwrap();
        assert_eq!(
            rows,
            vec![vec![
                Value::Int(7),
                Value::Real(2.5),
                Value::Text("x".into()),
                Value::Null
            ]]
        );
    }
}
