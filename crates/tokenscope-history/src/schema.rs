//! The history's schema, as numbered migrations. A database records which
//! it has had (`schema_migrations`); opening one applies the rest, under a
//! lock, so two processes opening a new database at once do not both
//! create it. Migrations are only ever added, never edited.

use crate::sql::{Db, DbError, Value};
use crate::{Error, Location, Result};

/// `{key}` is the auto-numbered primary key's type, which the two engines spell differently.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE runs (
        id {key},
        recorded_at TEXT NOT NULL,
        started_at TEXT NOT NULL,
        kind TEXT NOT NULL,
        parent_id BIGINT REFERENCES runs (id) ON DELETE CASCADE,
        point TEXT,
        target TEXT NOT NULL,
        api TEXT NOT NULL,
        server_kind TEXT,
        model TEXT NOT NULL,
        engine_version TEXT,
        config_key TEXT NOT NULL,
        config_json TEXT NOT NULL,
        slo TEXT,
        slo_met BIGINT,
        partial BIGINT NOT NULL,
        requests BIGINT NOT NULL,
        failed BIGINT NOT NULL,
        diagnosis_json TEXT NOT NULL,
        run_dir TEXT NOT NULL,
        tool_version TEXT NOT NULL
    );
    CREATE INDEX runs_by_config ON runs (config_key, started_at);
    CREATE INDEX runs_by_dir ON runs (run_dir);
    CREATE TABLE run_figures (
        run_id BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        metric TEXT NOT NULL,
        value DOUBLE PRECISION NOT NULL,
        samples BIGINT,
        ci_low DOUBLE PRECISION,
        ci_high DOUBLE PRECISION,
        PRIMARY KEY (run_id, metric)
    );
    CREATE TABLE run_tags (
        run_id BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (run_id, tag)
    );",
    ),
    // A tune (kind `tune`) records its settings' sweeps under it: the
    // runs under one are looked up by parent (`history list --under`).
    // Its number tells an older tokenscope, which knows no `tune`, to
    // upgrade rather than fail on the kind.
    (2, "CREATE INDEX runs_by_parent ON runs (parent_id);"),
];

/// The newest schema this build knows.
pub fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// Brings the database to [`latest`]; refuses one written by a newer
/// tokenscope. A database already there is not locked (nor written: a
/// read-only one can still be read).
pub fn migrate(db: &mut Db, loc: &Location) -> Result<()> {
    let at = |e: DbError, doing| e.at(loc, doing);
    let current = db.query("SELECT MAX(version) FROM schema_migrations", &[]);
    if let Ok(rows) = current {
        if rows.first().and_then(|r| r[0].int()) == Some(latest()) {
            return Ok(());
        }
    }
    db.begin_exclusive()
        .map_err(|e| at(e, "locking the schema"))?;
    let result = apply(db, loc);
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    let ended = db.batch(end).map_err(|e| at(e, "ending the migration"));
    result.and(ended)
}

fn apply(db: &mut Db, loc: &Location) -> Result<()> {
    let at = |e: DbError, doing| e.at(loc, doing);
    db.batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL)",
    )
    .map_err(|e| at(e, "creating schema_migrations"))?;
    let rows = db
        .query("SELECT MAX(version) FROM schema_migrations", &[])
        .map_err(|e| at(e, "reading the schema version"))?;
    let have = rows.first().and_then(|r| r[0].int()).unwrap_or(0);
    if have > latest() {
        return Err(Error::Invalid(
            format!(
                "its schema is version {have}, newer than this tokenscope knows ({}); upgrade tokenscope",
                latest()
            ),
            loc.shown(),
        ));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > have) {
        let sql = sql.replace("{key}", db.serial_key());
        db.batch(&sql).map_err(|e| at(e, "applying a migration"))?;
        db.query(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
            &[Value::Int(*version), Value::Text(now())],
        )
        .map_err(|e| at(e, "recording a migration"))?;
    }
    Ok(())
}

/// Now, RFC 3339 UTC to the millisecond.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
