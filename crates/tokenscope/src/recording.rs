//! The results history from the runs' side: every finished run and series
//! recorded in the database, with the change points it raised (the
//! `history` command itself is `commands::history`).
//!
//! Recording never fails a run: the run directory is already written, and
//! a database that is unreachable, locked past its timeout or read-only only
//! costs a line in the summary saying the history was not updated, and why.

use crate::cli::{HistoryArgs, RunFilterArgs};
use crate::exit::Exit;
use crate::run_dir::Done;
use std::path::Path;
use tokenscope_core::analysis::Analysis;
use tokenscope_core::compare::Settings;
use tokenscope_core::results::RunResults;
use tokenscope_history::metrics::{metric, METRICS};
use tokenscope_history::{judge, Filter, Judgement, Kind, Location, Rule, RunEntry, Store};

/// Records one finished run and says so: in the summary, or with `--json`
/// (stdout holds the document alone) on stderr when it failed.
pub fn record_run(kind: Kind, results: &RunResults, dir: &Path, args: &HistoryArgs, json: bool) {
    if args.no_history || results.shard.is_some() {
        return; // a shard is recorded once merged
    }
    let entry = entry_of(kind, results, dir, &args.tag);
    let loc = Location::resolve(args.db.as_deref());
    let outcome = off_runtime(|| -> tokenscope_history::Result<(i64, Vec<Judgement>)> {
        let mut store = Store::open(&loc)?;
        let id = store.record(&entry)?;
        Ok((id, changes_of(&mut store, id, &entry.config_key)?))
    });
    say(outcome.map(|(id, changes)| (id, None, changes)), &loc, json);
}

/// Records a finished series (its points under it) and says so.
pub fn record_sweep(
    dir: &Path,
    points: &[Done],
    analysis: &Analysis,
    args: &HistoryArgs,
    json: bool,
) {
    let Some(first) = points.first() else { return };
    if args.no_history || points.iter().any(|p| p.results.shard.is_some()) {
        return;
    }
    let loads: Vec<f64> = points.iter().map(|p| p.load).collect();
    let sweep = RunEntry::of_sweep(&first.results, &loads, analysis, &absolute(dir), &args.tag);
    let entries: Vec<RunEntry> = points
        .iter()
        .map(|p| {
            let mut e = match p.dir.as_deref() {
                Some(d) => entry_of(Kind::SweepPoint, &p.results, d, &args.tag),
                None => RunEntry::of_results(Kind::SweepPoint, &p.results, "", &args.tag),
            };
            e.point = Some(p.label.clone());
            e
        })
        .collect();
    let loc = Location::resolve(args.db.as_deref());
    let outcome = off_runtime(|| -> tokenscope_history::Result<_> {
        let mut store = Store::open(&loc)?;
        let (id, ids) = store.record_sweep(&sweep, &entries)?;
        let mut changes = changes_of(&mut store, id, &sweep.config_key)?;
        for (pid, e) in ids.iter().zip(&entries) {
            changes.extend(changes_of(&mut store, *pid, &e.config_key)?);
        }
        Ok((id, Some(format!(" with its {} points", ids.len())), changes))
    });
    say(outcome, &loc, json);
}

/// A sweep's entry and its points'.
pub type SweepEntries = (RunEntry, Vec<RunEntry>);

/// A sweep directory's entries: the sweep's own and its points', as
/// `record_sweep` and `history import` record them.
pub fn sweep_entries(
    sweep: &crate::run_dir::Sweep,
    tags: &[String],
) -> Option<(RunEntry, Vec<RunEntry>)> {
    let first = sweep.points.first()?;
    let loads: Vec<f64> = sweep.points.iter().map(|p| p.load).collect();
    let path = absolute(&sweep.dir);
    let entry = RunEntry::of_sweep(&first.results, &loads, &sweep.analysis, &path, tags);
    let points = sweep
        .points
        .iter()
        .zip(&sweep.point_dirs)
        .map(|(p, d)| {
            let mut e = match d.as_deref() {
                Some(d) => entry_of(Kind::SweepPoint, &p.results, d, tags),
                None => RunEntry::of_results(Kind::SweepPoint, &p.results, "", tags),
            };
            e.point = Some(p.point.clone());
            e
        })
        .collect();
    Some((entry, points))
}

/// One of a tune's settings as the history records it: its sweep's
/// directory, its identity (the command it ran, any port) and its own
/// tags (the tune's are added).
pub struct TunedSweep {
    pub dir: std::path::PathBuf,
    pub identity: String,
    pub tags: Vec<String>,
}

/// Records a tune as one entry, its settings' sweeps under it (each known
/// by the command it ran, whichever port it had, so the same setting in
/// the next tune is the same configuration) and their points under them.
/// A setting whose directory holds no sweep (it did not start) has no
/// entry; a tune that measured nothing is not recorded.
pub fn record_tune(
    dir: &Path,
    summary: &tokenscope_history::entry::TuneSummary,
    settings: &[TunedSweep],
    args: &HistoryArgs,
    json: bool,
) {
    if args.no_history {
        return;
    }
    let Some((tune, sweeps)) = tune_entries(dir, summary, settings, &args.tag) else {
        return;
    };
    let loc = Location::resolve(args.db.as_deref());
    let outcome = off_runtime(|| -> tokenscope_history::Result<_> {
        let mut store = Store::open(&loc)?;
        let (id, under) = store.record_tune(&tune, &sweeps)?;
        Ok((id, Some(tune_words(sweeps.len(), under)), Vec::new()))
    });
    say(outcome, &loc, json);
}

/// ` (a tune) with 3 settings and 17 points under it`.
pub fn tune_words(settings: usize, under: usize) -> String {
    format!(
        " (a tune) with {settings} settings and {} points under it",
        under - settings
    )
}

/// A tune's entry and its settings' sweeps with their points; `None`
/// when no setting's directory holds a sweep.
pub fn tune_entries(
    dir: &Path,
    summary: &tokenscope_history::entry::TuneSummary,
    settings: &[TunedSweep],
    tags: &[String],
) -> Option<(RunEntry, Vec<SweepEntries>)> {
    let mut first = None;
    let mut sweeps = Vec::new();
    for s in settings {
        let Ok(sweep) = crate::run_dir::Sweep::read(&s.dir) else {
            continue;
        };
        let tags: Vec<String> = s.tags.iter().chain(tags).cloned().collect();
        let Some((mut entry, mut points)) = sweep_entries(&sweep, &tags) else {
            continue;
        };
        // The loads a search visits follow the measured probe; the sweep is
        // known by what was searched, not where the bisection went.
        entry.config["load"]["series"] = serde_json::json!({ "find": summary.over });
        let target = format!("serve: {}", s.identity);
        for e in std::iter::once(&mut entry).chain(points.iter_mut()) {
            e.target = target.clone();
            e.config["target"] = serde_json::json!(target);
            e.config_key = tokenscope_history::entry::key_of(&e.config);
        }
        first.get_or_insert_with(|| sweep.points[0].results.clone());
        sweeps.push((entry, points));
    }
    let mut tune = RunEntry::of_tune(&first?, summary, &absolute(dir), tags);
    // It began with the first of its settings to run.
    if let Some(earliest) = sweeps.iter().map(|(e, _)| &e.started_at).min() {
        tune.started_at = earliest.clone();
    }
    Some((tune, sweeps))
}

/// A run's entry, its tokens/s with the interval `compare`'s bootstrap gives
/// it: as results.json carries it, else (a run directory written before it
/// did) from the run's requests, streamed from `requests.jsonl`.
pub fn entry_of(kind: Kind, results: &RunResults, dir: &Path, tags: &[String]) -> RunEntry {
    let mut e = RunEntry::of_results(kind, results, &absolute(dir), tags);
    let ci = results.throughput.output_tokens_per_s_ci95.or_else(|| {
        let values = crate::run_dir::values_of(dir).ok()?;
        tokenscope_core::compare::interval(&values, "output_tokens_per_s", &Settings::default())
    });
    if let (Some((lo, hi)), Some(f)) = (
        ci,
        e.figures
            .iter_mut()
            .find(|f| f.metric == "output_tokens_per_s"),
    ) {
        f.ci_low = Some(lo.min(f.value));
        f.ci_high = Some(hi.max(f.value));
    }
    e
}

/// The change points of run `id` against its configuration's history.
fn changes_of(store: &mut Store, id: i64, key: &str) -> tokenscope_history::Result<Vec<Judgement>> {
    let rule = Rule::default();
    let runs = store.runs(&Filter {
        config: Some(key.to_string()),
        with_points: true,
        last: Some(rule.window * 3),
        ..Filter::default()
    })?;
    Ok(METRICS
        .iter()
        .flat_map(|m| judge(&runs, m, &rule))
        .filter(|j| j.run_id == id && j.is_change())
        .collect())
}

/// The database work runs on a thread of its own: the PostgreSQL client
/// drives its own small runtime, which cannot start inside the run's.
fn off_runtime<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(work).join().expect("the history thread panicked"))
}

/// The id, what was recorded under it (` with its 4 points`), and the
/// change points the record raised.
type Recorded = (i64, Option<String>, Vec<Judgement>);

fn say(outcome: tokenscope_history::Result<Recorded>, loc: &Location, json: bool) {
    match outcome {
        Ok((id, points, changes)) => {
            if json {
                return;
            }
            let points = points.unwrap_or_default();
            let mut text = format!("history: run #{id}{points} recorded in {}\n", loc.shown());
            for j in &changes {
                text.push_str(&format!("history: {}\n", change_line(j)));
            }
            if !changes.is_empty() {
                text.push_str(&format!("history: rule: {}\n", Rule::default().describe()));
            }
            crate::output::to_stdout(&text);
        }
        Err(e) => {
            let line = format!("not updated (the run directory is complete): {e}");
            if json {
                crate::warnings::Warning::HistoryNotRecorded { what: line }.say(false);
            } else {
                crate::output::to_stdout(&format!("history: {line}\n"));
            }
        }
    }
}

/// `run #12 tpot_p50 9.53 ms: +20.5 % vs the median 7.91 of 10 runs (z 12.3), a regression`.
pub fn change_line(j: &Judgement) -> String {
    let unit = metric(j.metric).map_or("", |m| m.unit);
    let change = match (j.change, unit) {
        (Some(c), "%") => format!("{c:+.1} points"),
        (Some(c), _) => format!("{c:+.1} %"),
        (None, _) => "changed".into(),
    };
    let z = j.z.map_or(String::new(), |z| {
        if z.is_finite() {
            format!(", {z:.1} robust SDs")
        } else {
            ", the history did not vary".into()
        }
    });
    let way = match j.verdict {
        tokenscope_history::Verdict::Change { regression: true } => "a regression",
        _ => "an improvement",
    };
    format!(
        "run #{} differs from its history: {} {} {unit}: {change} vs the median {} of {} runs{z} — {way}",
        j.run_id,
        j.metric,
        num(j.value),
        j.baseline.map_or("-".into(), num),
        j.history,
    )
}

/// A figure to 3 significant digits or so.
pub fn num(v: f64) -> String {
    match v.abs() {
        a if a >= 1000.0 => format!("{v:.0}"),
        a if a >= 100.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// The directory as an absolute path, so `compare #id` finds it from anywhere.
pub fn absolute(dir: &Path) -> String {
    std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

/// Opens the history for a command; a failure is the command's error.
pub fn open(db: Option<&str>) -> anyhow::Result<Store> {
    let loc = Location::resolve(db);
    off_runtime(|| Store::open(&loc))
        .map_err(|e| anyhow::Error::new(Exit::Error).context(format!("history {e}")))
}

/// The filter flags as the store's filter.
pub fn filter_of(f: &RunFilterArgs, with_points: bool) -> anyhow::Result<Filter> {
    let kind = match &f.kind {
        Some(k) => Some(Kind::parse(k).ok_or_else(|| {
            Exit::usage(format!(
                "--kind {k}: expected bench, sweep, sweep-point, plan, merge or tune"
            ))
        })?),
        None => None,
    };
    Ok(Filter {
        target: f.target.clone(),
        model: f.model.clone(),
        tag: f.tag.clone(),
        kind,
        config: f.config.clone(),
        since: f.since.clone(),
        until: f.until.clone(),
        parent: f.under,
        with_points,
        last: f.last,
    })
}

/// A run's directory from a history id (`42` or `#42`), for `compare`.
pub fn run_dir_of(id_text: &str, db: Option<&str>) -> anyhow::Result<Option<std::path::PathBuf>> {
    let Ok(id) = id_text.trim_start_matches('#').parse::<i64>() else {
        return Ok(None);
    };
    let mut store = open(db)?;
    let run = off_runtime(|| store.run(id))
        .map_err(|e| anyhow::Error::new(Exit::Error).context(format!("history {e}")))?;
    let run = run.ok_or_else(|| Exit::usage(format!("no run #{id} in the history")))?;
    Ok(Some(run.entry.run_dir.into()))
}
