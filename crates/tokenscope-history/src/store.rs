//! The history database: recording runs and reading them back.
//!
//! Every write is one transaction under the database's write lock, so two
//! runs finishing at once are both kept: SQLite waits for the other writer
//! (WAL journal, 10 s busy timeout); PostgreSQL serialises on its own.

use crate::entry::{Kind, RunEntry, StoredRun};
use crate::metrics::Figure;
use crate::sql::{Db, DbError, Value};
use crate::{schema, Error, Location, Result};
use std::collections::HashMap;

/// An open history.
pub struct Store {
    db: Db,
    loc: Location,
    /// Until when the open's wait for a locked file lasts: a write just
    /// after the open shares it, so the two together wait `sql::WAIT` at most.
    opened_until: std::time::Instant,
}

/// Which runs to read. Text filters match a part of the field, ignoring case.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub target: Option<String>,
    pub model: Option<String>,
    pub tag: Option<String>,
    pub kind: Option<Kind>,
    /// A configuration key, or its first digits.
    pub config: Option<String>,
    /// Started on or after this date or instant (`2026-11-01`, RFC 3339).
    pub since: Option<String>,
    /// Started on or before this date or instant (a date includes its whole day).
    pub until: Option<String>,
    /// The points of this sweep.
    pub parent: Option<i64>,
    /// Sweep points are left out unless asked for (by kind or parent) or this is set.
    pub with_points: bool,
    /// Only the latest N of those matching.
    pub last: Option<usize>,
}

const RUN_COLUMNS: &str = "id, recorded_at, parent_id, kind, started_at, point, target, api, \
    server_kind, model, engine_version, config_key, config_json, slo, slo_met, partial, \
    requests, failed, diagnosis_json, run_dir, tool_version";

impl Store {
    /// Connects and brings the schema up to date.
    pub fn open(loc: &Location) -> Result<Store> {
        let until = std::time::Instant::now() + crate::sql::WAIT;
        let mut db = Db::open(loc, until)?;
        db.wait_until(until);
        schema::migrate(&mut db, loc)?;
        Ok(Store {
            db,
            loc: loc.clone(),
            opened_until: until,
        })
    }

    /// One operation's wait for a locked file: what is left of the open's
    /// if it is still running, else `sql::WAIT` of its own.
    fn budget(&mut self) {
        let now = std::time::Instant::now();
        let until = match now < self.opened_until {
            true => self.opened_until,
            false => now + crate::sql::WAIT,
        };
        self.db.wait_until(until);
    }

    pub fn location(&self) -> &Location {
        &self.loc
    }

    /// Records one run; its id.
    pub fn record(&mut self, entry: &RunEntry) -> Result<i64> {
        self.in_transaction(|s| s.insert(entry, None))
    }

    /// Records a sweep and its points in one transaction: the sweep's id,
    /// then its points' ids.
    pub fn record_sweep(
        &mut self,
        sweep: &RunEntry,
        points: &[RunEntry],
    ) -> Result<(i64, Vec<i64>)> {
        self.in_transaction(|s| {
            let id = s.insert(sweep, None)?;
            let ids = points
                .iter()
                .map(|p| s.insert(p, Some(id)))
                .collect::<Result<Vec<_>>>()?;
            Ok((id, ids))
        })
    }

    /// Records a tune, its settings' sweeps under it and their points
    /// under them, in one transaction: the tune's id, and the count of
    /// entries under it.
    pub fn record_tune(
        &mut self,
        tune: &RunEntry,
        sweeps: &[(RunEntry, Vec<RunEntry>)],
    ) -> Result<(i64, usize)> {
        self.in_transaction(|s| {
            let id = s.insert(tune, None)?;
            let mut under = 0;
            for (sweep, points) in sweeps {
                let sid = s.insert(sweep, Some(id))?;
                for p in points {
                    s.insert(p, Some(sid))?;
                }
                under += 1 + points.len();
            }
            Ok((id, under))
        })
    }

    fn in_transaction<T>(&mut self, body: impl FnOnce(&mut Store) -> Result<T>) -> Result<T> {
        self.budget();
        self.db
            .begin_exclusive()
            .map_err(|e| e.at(&self.loc, "waiting for the write lock"))?;
        let result = body(self);
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let ended = self
            .db
            .batch(end)
            .map_err(|e| e.at(&self.loc, "committing"));
        let value = result?;
        ended.map(|_| value)
    }

    fn insert(&mut self, e: &RunEntry, parent: Option<i64>) -> Result<i64> {
        let values: Vec<Value> = vec![
            schema::now().as_str().into(),
            e.started_at.as_str().into(),
            e.kind.name().into(),
            parent.into(),
            e.point.as_deref().into(),
            e.target.as_str().into(),
            e.api.as_str().into(),
            e.server_kind.as_deref().into(),
            e.model.as_str().into(),
            e.engine_version.as_deref().into(),
            e.config_key.as_str().into(),
            e.config.to_string().as_str().into(),
            e.slo.as_deref().into(),
            e.slo_met.map(i64::from).into(),
            i64::from(e.partial).into(),
            (e.requests as i64).into(),
            (e.failed as i64).into(),
            serde_json::to_string(&e.diagnosis)
                .unwrap_or_default()
                .as_str()
                .into(),
            e.run_dir.as_str().into(),
            e.tool_version.as_str().into(),
        ];
        let rows = self.query(
            "INSERT INTO runs (recorded_at, started_at, kind, parent_id, point, target, api, \
             server_kind, model, engine_version, config_key, config_json, slo, slo_met, partial, \
             requests, failed, diagnosis_json, run_dir, tool_version) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            &values,
            "recording the run",
        )?;
        let id = rows
            .first()
            .and_then(|r| r[0].int())
            .ok_or_else(|| self.invalid("the insert returned no id"))?;
        for f in &e.figures {
            self.query(
                "INSERT INTO run_figures (run_id, metric, value, samples, ci_low, ci_high) \
                 VALUES (?, ?, ?, ?, ?, ?)",
                &[
                    id.into(),
                    f.metric.as_str().into(),
                    f.value.into(),
                    f.samples.map(|n| n as i64).into(),
                    f.ci_low.map_or(Value::Null, Value::Real),
                    f.ci_high.map_or(Value::Null, Value::Real),
                ],
                "recording the figures",
            )?;
        }
        let mut tags = e.tags.clone();
        tags.sort();
        tags.dedup();
        for tag in tags {
            self.query(
                "INSERT INTO run_tags (run_id, tag) VALUES (?, ?)",
                &[id.into(), tag.as_str().into()],
                "recording the tags",
            )?;
        }
        Ok(id)
    }

    /// The runs matching `filter`, oldest first.
    pub fn runs(&mut self, filter: &Filter) -> Result<Vec<StoredRun>> {
        self.budget();
        let (cond, mut values) = conditions(filter);
        let mut sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE {cond} ORDER BY started_at DESC, id DESC"
        );
        if let Some(n) = filter.last {
            sql.push_str(" LIMIT ?");
            values.push(Value::Int(n as i64));
        }
        let rows = self.query(&sql, &values, "reading runs")?;
        let mut runs = rows
            .iter()
            .map(|r| self.run_of(r))
            .collect::<Result<Vec<_>>>()?;
        runs.reverse();
        self.attach(&mut runs)?;
        Ok(runs)
    }

    /// One run by id.
    pub fn run(&mut self, id: i64) -> Result<Option<StoredRun>> {
        self.budget();
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?");
        let rows = self.query(&sql, &[id.into()], "reading a run")?;
        let mut runs = rows
            .iter()
            .map(|r| self.run_of(r))
            .collect::<Result<Vec<_>>>()?;
        self.attach(&mut runs)?;
        Ok(runs.pop())
    }

    /// The id of a run already recorded from this directory with this start, if any.
    pub fn find(&mut self, run_dir: &str, started_at: &str) -> Result<Option<i64>> {
        self.budget();
        let rows = self.query(
            "SELECT id FROM runs WHERE run_dir = ? AND started_at = ?",
            &[run_dir.into(), started_at.into()],
            "looking a run up",
        )?;
        Ok(rows.first().and_then(|r| r[0].int()))
    }

    /// Fills in the figures and tags of `runs`.
    fn attach(&mut self, runs: &mut [StoredRun]) -> Result<()> {
        let mut at: HashMap<i64, usize> = HashMap::new();
        for (i, r) in runs.iter().enumerate() {
            at.insert(r.id, i);
        }
        let ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
        for chunk in ids.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let values: Vec<Value> = chunk.iter().map(|&i| i.into()).collect();
            let sql = format!(
                "SELECT run_id, metric, value, samples, ci_low, ci_high FROM run_figures \
                 WHERE run_id IN ({marks}) ORDER BY run_id, metric"
            );
            for row in self.query(&sql, &values, "reading figures")? {
                if let Some(&i) = row[0].int().and_then(|id| at.get(&id)) {
                    runs[i].entry.figures.push(Figure {
                        metric: row[1].text().unwrap_or_default(),
                        value: row[2].real().unwrap_or(f64::NAN),
                        samples: row[3].int().map(|n| n as u64),
                        ci_low: row[4].real(),
                        ci_high: row[5].real(),
                    });
                }
            }
            let sql = format!(
                "SELECT run_id, tag FROM run_tags WHERE run_id IN ({marks}) ORDER BY run_id, tag"
            );
            for row in self.query(&sql, &values, "reading tags")? {
                if let Some(&i) = row[0].int().and_then(|id| at.get(&id)) {
                    runs[i].entry.tags.push(row[1].text().unwrap_or_default());
                }
            }
        }
        Ok(())
    }

    fn run_of(&self, r: &[Value]) -> Result<StoredRun> {
        let text = |i: usize| r[i].text().unwrap_or_default();
        let json = |i: usize| serde_json::from_str(&text(i)).unwrap_or(serde_json::Value::Null);
        let kind = Kind::parse(&text(3)).ok_or_else(|| {
            self.invalid(&format!("run {:?} has an unknown kind {:?}", r[0], text(3)))
        })?;
        Ok(StoredRun {
            id: r[0].int().unwrap_or_default(),
            recorded_at: text(1),
            parent_id: r[2].int(),
            entry: RunEntry {
                kind,
                started_at: text(4),
                point: r[5].text(),
                target: text(6),
                api: text(7),
                server_kind: r[8].text(),
                model: text(9),
                engine_version: r[10].text(),
                config_key: text(11),
                config: json(12),
                slo: r[13].text(),
                slo_met: r[14].int().map(|v| v != 0),
                partial: r[15].int().unwrap_or_default() != 0,
                requests: r[16].int().unwrap_or_default() as u64,
                failed: r[17].int().unwrap_or_default() as u64,
                diagnosis: serde_json::from_value(json(18)).unwrap_or_default(),
                run_dir: text(19),
                tool_version: text(20),
                tags: Vec::new(),
                figures: Vec::new(),
            },
        })
    }

    fn query(
        &mut self,
        sql: &str,
        values: &[Value],
        doing: &'static str,
    ) -> Result<Vec<Vec<Value>>> {
        self.db
            .query(sql, values)
            .map_err(|e: DbError| e.at(&self.loc, doing))
    }

    fn invalid(&self, what: &str) -> Error {
        Error::Invalid(what.to_string(), self.loc.shown())
    }
}

/// The WHERE clause of a filter and its values.
fn conditions(f: &Filter) -> (String, Vec<Value>) {
    let mut cond = vec!["1 = 1".to_string()];
    let mut values = Vec::new();
    let mut like = |column: &str, part: &Option<String>, cond: &mut Vec<String>| {
        if let Some(p) = part {
            cond.push(format!("LOWER({column}) LIKE ? ESCAPE '\\'"));
            values.push(Value::Text(format!("%{}%", escape_like(&p.to_lowercase()))));
        }
    };
    like("target", &f.target, &mut cond);
    like("model", &f.model, &mut cond);
    if let Some(key) = &f.config {
        cond.push("config_key LIKE ? ESCAPE '\\'".into());
        values.push(Value::Text(format!("{}%", escape_like(key))));
    }
    if let Some(tag) = &f.tag {
        cond.push(
            "EXISTS (SELECT 1 FROM run_tags t WHERE t.run_id = runs.id AND t.tag = ?)".into(),
        );
        values.push(tag.as_str().into());
    }
    if let Some(kind) = f.kind {
        cond.push("kind = ?".into());
        values.push(kind.name().into());
    }
    if let Some(parent) = f.parent {
        cond.push("parent_id = ?".into());
        values.push(parent.into());
    }
    if f.kind.is_none() && f.parent.is_none() && !f.with_points {
        cond.push("kind <> 'sweep-point'".into());
    }
    if let Some(since) = &f.since {
        cond.push("started_at >= ?".into());
        values.push(since.as_str().into());
    }
    if let Some(until) = &f.until {
        // A date (or any prefix of an instant) includes all of it.
        cond.push("SUBSTR(started_at, 1, ?) <= ?".into());
        values.push(Value::Int(until.chars().count() as i64));
        values.push(until.as_str().into());
    }
    (cond.join(" AND "), values)
}

fn escape_like(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file another writer holds locked keeps an open (and the write
    /// after it) waiting `crate::sql::WAIT` in all — not `crate::sql::WAIT` for each statement that
    /// meets the lock (the journal mode, the schema's version, the write
    /// lock: three times as long).
    #[test]
    fn a_locked_file_holds_the_open_its_busy_timeout_in_all() {
        let dir = std::env::temp_dir().join(format!("ts-busy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.sqlite");
        let _ = std::fs::remove_file(&path);
        let holder = rusqlite::Connection::open(&path).unwrap();
        holder
            .execute_batch("PRAGMA journal_mode=DELETE; CREATE TABLE x (a); BEGIN EXCLUSIVE; INSERT INTO x VALUES (1);")
            .unwrap();
        let started = std::time::Instant::now();
        let loc = crate::location::Location::Sqlite(path.to_string_lossy().into_owned());
        let opened = Store::open(&loc);
        let waited = started.elapsed();
        let why = opened.err().expect("the file is locked").to_string();
        assert!(why.contains("locked"), "{why}");
        assert!(
            waited >= crate::sql::WAIT - std::time::Duration::from_millis(500),
            "{waited:?}"
        );
        // Generous for a loaded machine; each statement's own 10 s made 30.
        assert!(
            waited < crate::sql::WAIT + std::time::Duration::from_secs(8),
            "{waited:?}"
        );
        holder.execute_batch("ROLLBACK").unwrap();
    }
}
