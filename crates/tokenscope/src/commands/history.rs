//! `tokenscope history list | trend | changes | import | export`.

use crate::cli::{
    HistoryAction, HistoryChangesArgs, HistoryCommand, HistoryExportArgs, HistoryFormat,
    HistoryImportArgs, HistoryListArgs, HistoryTrendArgs,
};
use crate::exit::Exit;
use crate::output::to_stdout;
use crate::recording::{change_line, filter_of, num, open};
use anyhow::Context;
use std::collections::BTreeMap;
use std::path::Path;
use tokenscope_history::metrics::{metric, Metric, METRICS};
use tokenscope_history::{
    export, judge, Filter, Judgement, Kind, Rule, RunEntry, Store, StoredRun, Verdict,
};
use tokenscope_report::trend::{TrendChart, TrendView};

pub fn run(cmd: HistoryCommand) -> anyhow::Result<Exit> {
    let mut store = open(cmd.db.as_deref())?;
    match cmd.action {
        HistoryAction::List(a) => list(&mut store, a),
        HistoryAction::Trend(a) => trend(&mut store, a),
        HistoryAction::Changes(a) => changes(&mut store, a),
        HistoryAction::Import(a) => import(&mut store, a),
        HistoryAction::Export(a) => export_runs(&mut store, a),
    }
}

/// A store error as the command's error.
fn db<T>(r: tokenscope_history::Result<T>) -> anyhow::Result<T> {
    r.map_err(|e| anyhow::Error::new(Exit::Error).context(format!("history {e}")))
}

fn list(store: &mut Store, a: HistoryListArgs) -> anyhow::Result<Exit> {
    let filter = filter_of(&a.filter, a.points)?;
    let runs = db(store.runs(&filter))?;
    if a.json {
        to_stdout(&(export::json(&runs) + "\n"));
        return Ok(Exit::Success);
    }
    if runs.is_empty() {
        to_stdout(&format!("no runs in {} match\n", store.location().shown()));
        return Ok(Exit::Success);
    }
    let flags = change_points(store, &runs, &METRICS.iter().collect::<Vec<_>>())?;
    let mut out = String::new();
    for r in &runs {
        out.push_str(&list_line(r));
        for j in flags.iter().filter(|j| j.run_id == r.id) {
            out.push_str(&format!("      ⚑ {}\n", change_line(j)));
        }
    }
    out.push_str(&format!(
        "\n{} run(s) in {} · figures: TTFT p50, TPOT p50, output tok/s · ⚑ a change point ({})\n",
        runs.len(),
        store.location().shown(),
        Rule::default().describe()
    ));
    to_stdout(&out);
    Ok(Exit::Success)
}

/// `#12  2026-12-04 02:31  bench  llama-3.1-8b  cfg 3f2a…  31.2 ms  7.91 ms  1,234 tok/s  SLO met  http://…  → dir`.
fn list_line(r: &StoredRun) -> String {
    let e = &r.entry;
    let fig = |m: &str, unit: &str| {
        r.figure(m)
            .map_or("-".into(), |f| format!("{} {unit}", num(f.value)))
    };
    let slo = match e.slo_met {
        Some(true) => "SLO met",
        Some(false) => "SLO NOT met",
        None if e.slo.is_some() => "SLO not judged",
        None => "",
    };
    let tags = if e.tags.is_empty() {
        String::new()
    } else {
        format!(" [{}]", e.tags.join(", "))
    };
    let point = e
        .point
        .as_deref()
        .map(|p| format!(" ({p})"))
        .unwrap_or_default();
    let partial = if e.partial { " PARTIAL" } else { "" };
    format!(
        "#{:<5} {}  {:<11} {}  cfg {}  TTFT {:>10}  TPOT {:>10}  {:>14}  {slo}{partial}{tags}\n      {}{point}{}  → {}\n",
        r.id,
        short_time(&e.started_at),
        e.kind.name(),
        e.model,
        e.config_key,
        fig("ttft_p50", "ms"),
        fig("tpot_p50", "ms"),
        fig("output_tokens_per_s", "tok/s"),
        e.target,
        e.engine_version.as_deref().map(|v| format!(" ({v})")).unwrap_or_default(),
        e.run_dir,
    )
}

/// `2026-12-04T02:31:07.123Z` → `2026-12-04 02:31`.
fn short_time(t: &str) -> String {
    t.get(..16).unwrap_or(t).replace('T', " ")
}

/// The change points among `runs`, each judged against its whole
/// configuration's history (not only the runs listed).
fn change_points(
    store: &mut Store,
    runs: &[StoredRun],
    metrics: &[&'static Metric],
) -> anyhow::Result<Vec<Judgement>> {
    let mut keys: Vec<&str> = runs.iter().map(|r| r.entry.config_key.as_str()).collect();
    keys.sort();
    keys.dedup();
    let shown: std::collections::HashSet<i64> = runs.iter().map(|r| r.id).collect();
    let rule = Rule::default();
    let mut out = Vec::new();
    for key in keys {
        let history = db(store.runs(&Filter {
            config: Some(key.to_string()),
            with_points: true,
            ..Filter::default()
        }))?;
        for m in metrics {
            out.extend(
                judge(&history, m, &rule)
                    .into_iter()
                    .filter(|j| j.is_change() && shown.contains(&j.run_id)),
            );
        }
    }
    out.sort_by_key(|j| j.run_id);
    Ok(out)
}

fn changes(store: &mut Store, a: HistoryChangesArgs) -> anyhow::Result<Exit> {
    let metrics = chosen_metrics(&a.metric)?;
    let runs = db(store.runs(&filter_of(&a.filter, true)?))?;
    let flags = change_points(store, &runs, &metrics)?;
    if a.json {
        to_stdout(&(serde_json::to_string_pretty(&flags)? + "\n"));
        return Ok(Exit::Success);
    }
    let mut out = String::new();
    let mut last = None;
    for j in &flags {
        if last != Some(j.run_id) {
            if let Some(r) = runs.iter().find(|r| r.id == j.run_id) {
                out.push_str(&list_line(r));
            }
            last = Some(j.run_id);
        }
        out.push_str(&format!("      ⚑ {}\n", change_line(j)));
    }
    let flagged = flags
        .iter()
        .map(|j| j.run_id)
        .collect::<std::collections::BTreeSet<_>>();
    out.push_str(&format!(
        "{} of {} runs are change points · rule: {}\n",
        flagged.len(),
        runs.len(),
        Rule::default().describe()
    ));
    to_stdout(&out);
    Ok(Exit::Success)
}

fn chosen_metrics(names: &[String]) -> anyhow::Result<Vec<&'static Metric>> {
    if names.is_empty() {
        return Ok(METRICS.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            metric(n).ok_or_else(|| {
                Exit::usage(format!(
                    "--metric {n}: not a recorded figure; one of {}",
                    tokenscope_history::metrics::names()
                ))
            })
        })
        .collect()
}

fn trend(store: &mut Store, a: HistoryTrendArgs) -> anyhow::Result<Exit> {
    let m = metric(&a.metric).ok_or_else(|| {
        Exit::usage(format!(
            "`{}` is not a recorded figure; one of {}",
            a.metric,
            tokenscope_history::metrics::names()
        ))
    })?;
    let key = configuration(store, &a)?;
    let runs = db(store.runs(&Filter {
        config: Some(key.clone()),
        with_points: true,
        last: a.filter.last,
        ..Filter::default()
    }))?;
    let judged = judge(&runs, m, &Rule::default());
    if let Some(path) = &a.html {
        let html = tokenscope_report::trend::trend_page(&trend_view(&runs, &key));
        std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("tokenscope: trend page {}", path.display());
    }
    if a.json {
        to_stdout(
            &(serde_json::to_string_pretty(&serde_json::json!({
                "config_key": key,
                "metric": m.name,
                "unit": m.unit,
                "rule": Rule::default().describe(),
                "runs": judged,
            }))? + "\n"),
        );
        return Ok(Exit::Success);
    }
    to_stdout(&trend_text(&runs, m, &judged, &key));
    Ok(Exit::Success)
}

fn trend_text(runs: &[StoredRun], m: &Metric, judged: &[Judgement], key: &str) -> String {
    let better = if m.higher_is_better {
        "higher"
    } else {
        "lower"
    };
    let mut out = format!(
        "{} ({}, {better} is better) · configuration {key}\n",
        m.name, m.unit
    );
    if let Some(r) = runs.last() {
        out.push_str(&format!("  {}\n", describe_config(&r.entry)));
    }
    if judged.is_empty() {
        out.push_str(&format!("  no run of this configuration has {}\n", m.name));
        return out;
    }
    let values: Vec<f64> = judged.iter().map(|j| j.value).collect();
    out.push_str(&format!(
        "  {}   {} runs, {} → {}\n",
        sparkline(&values),
        values.len(),
        short_time(
            &runs
                .first()
                .map(|r| r.entry.started_at.clone())
                .unwrap_or_default()
        ),
        short_time(
            &runs
                .last()
                .map(|r| r.entry.started_at.clone())
                .unwrap_or_default()
        ),
    ));
    for j in judged {
        let r = runs.iter().find(|r| r.id == j.run_id);
        let when = r
            .map(|r| short_time(&r.entry.started_at))
            .unwrap_or_default();
        let flag = match &j.verdict {
            tokenscope_history::Verdict::Change { regression } => format!(
                "  ⚑ {} vs the median {} ({})",
                j.change.map_or("changed".into(), |c| format!("{c:+.1} %")),
                j.baseline.map_or("-".into(), num),
                if *regression {
                    "regression"
                } else {
                    "improvement"
                }
            ),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  #{:<5} {when}  {:>10} {}{flag}\n",
            j.run_id,
            num(j.value),
            m.unit
        ));
    }
    out.push_str(&format!("  rule: {}\n", Rule::default().describe()));
    out
}

/// The configuration a trend is of: `--run`'s, `--config`'s, or the filters' only one.
fn configuration(store: &mut Store, a: &HistoryTrendArgs) -> anyhow::Result<String> {
    if let Some(id) = a.run {
        let run = db(store.run(id))?
            .ok_or_else(|| Exit::usage(format!("no run #{id} in the history")))?;
        return Ok(run.entry.config_key);
    }
    let runs = db(store.runs(&filter_of(&a.filter, true)?))?;
    let mut by_key: BTreeMap<&str, (usize, &StoredRun)> = BTreeMap::new();
    for r in &runs {
        let slot = by_key.entry(&r.entry.config_key).or_insert((0, r));
        slot.0 += 1;
        slot.1 = r;
    }
    match by_key.len() {
        0 => Err(Exit::usage(format!(
            "no runs in {} match these filters",
            store.location().shown()
        ))),
        1 => Ok(by_key.keys().next().unwrap_or(&"").to_string()),
        n => {
            let listed: Vec<String> = by_key
                .iter()
                .map(|(k, (count, r))| {
                    format!("  {k}  {count} runs  {}", describe_config(&r.entry))
                })
                .collect();
            Err(Exit::usage(format!(
                "these runs are of {n} configurations; choose one with --config KEY (or --run ID):\n{}",
                listed.join("\n")
            )))
        }
    }
}

/// `▁▂▃▄▅▆▇█` scaled to the values' range.
pub fn sparkline(values: &[f64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    values
        .iter()
        .map(|v| {
            if hi > lo {
                BARS[(((v - lo) / (hi - lo)) * 7.0).round() as usize]
            } else {
                BARS[3]
            }
        })
        .collect()
}

fn import(store: &mut Store, a: HistoryImportArgs) -> anyhow::Result<Exit> {
    let (mut recorded, mut skipped, mut failed) = (0, 0, 0);
    for dir in &a.dirs {
        match import_one(store, dir, &a.tag) {
            Ok(Some(line)) => {
                recorded += 1;
                to_stdout(&format!("{line}\n"));
            }
            Ok(None) => {
                skipped += 1;
                to_stdout(&format!("{}: already recorded\n", dir.display()));
            }
            Err(e) => {
                failed += 1;
                eprintln!("tokenscope: error: {}: {e:#}", dir.display());
            }
        }
    }
    to_stdout(&format!(
        "imported {recorded}, already there {skipped}, failed {failed} into {}\n",
        store.location().shown()
    ));
    Ok(if failed > 0 {
        Exit::Error
    } else {
        Exit::Success
    })
}

/// Records one run or sweep directory; `None` when it is already recorded.
fn import_one(store: &mut Store, dir: &Path, tags: &[String]) -> anyhow::Result<Option<String>> {
    // A peer's result (vLLM, AIPerf, GuideLLM) is recorded as its converted run directory.
    let dir = &crate::peer_results::resolve(dir)?;
    let path = crate::recording::absolute(dir);
    if dir.join(crate::tuning::TUNE_JSON).exists() {
        return import_tune(store, dir, tags);
    }
    if crate::run_dir::holds_sweep(dir) {
        let sweep = crate::run_dir::Sweep::read(dir).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (entry, points) =
            crate::recording::sweep_entries(&sweep, tags).context("the sweep has no points")?;
        if db(store.find(&path, &entry.started_at))?.is_some() {
            return Ok(None);
        }
        let (id, ids) = db(store.record_sweep(&entry, &points))?;
        return Ok(Some(format!(
            "#{id} sweep with {} points: {path}",
            ids.len()
        )));
    }
    let run = crate::run_dir::Run::read(dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let r = &run.results;
    if db(store.find(&path, &r.started_at))?.is_some() {
        return Ok(None);
    }
    let kind = if r.simulated.is_some() {
        Kind::Plan
    } else if r.merged.is_some() {
        Kind::Merge
    } else {
        Kind::Bench
    };
    let id = db(store.record(&crate::recording::entry_of(kind, r, dir, tags)))?;
    Ok(Some(format!("#{id} {}: {path}", kind.name())))
}

/// A tune's directory: the tune, its settings' sweeps and their points.
fn import_tune(store: &mut Store, dir: &Path, tags: &[String]) -> anyhow::Result<Option<String>> {
    let path = crate::recording::absolute(dir);
    let doc = crate::tuning::read(dir)?;
    let (summary, settings) = crate::tuning::history_parts(dir, &doc);
    let (tune, sweeps) = crate::recording::tune_entries(dir, &summary, &settings, tags)
        .context("no setting of the tune has a sweep to record")?;
    if db(store.find(&path, &tune.started_at))?.is_some() {
        return Ok(None);
    }
    let (id, under) = db(store.record_tune(&tune, &sweeps))?;
    let words = crate::recording::tune_words(sweeps.len(), under);
    Ok(Some(format!("#{id} tune{words}: {path}")))
}

fn export_runs(store: &mut Store, a: HistoryExportArgs) -> anyhow::Result<Exit> {
    let runs = db(store.runs(&filter_of(&a.filter, a.points)?))?;
    let text = match a.format {
        HistoryFormat::Csv => export::csv(&runs).context("writing CSV")?,
        HistoryFormat::Json => export::json(&runs) + "\n",
    };
    match &a.out {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "tokenscope: {} runs written to {}",
                runs.len(),
                path.display()
            );
        }
        None => to_stdout(&text),
    }
    Ok(Exit::Success)
}

/// What `tokenscope_report::trend` renders: each figure of the
/// configuration's runs, judged by the change-point rule.
fn trend_view(runs: &[StoredRun], key: &str) -> TrendView {
    let rule = Rule::default();
    let charts = METRICS
        .iter()
        .filter_map(|m| {
            let judged = judge(runs, m, &rule);
            (!judged.is_empty()).then(|| TrendChart {
                name: m.name.to_string(),
                about: m.about.to_string(),
                unit: m.unit.to_string(),
                points: judged.iter().map(|j| (j.run_id as u64, j.value)).collect(),
                changes: judged
                    .iter()
                    .filter_map(|j| match j.verdict {
                        Verdict::Change { regression } => {
                            Some((j.run_id as u64, j.value, regression))
                        }
                        _ => None,
                    })
                    .collect(),
            })
        })
        .collect();
    TrendView {
        key: key.to_string(),
        description: runs.last().map(|r| describe_config(&r.entry)),
        runs: runs.len(),
        first: runs
            .first()
            .map_or(String::new(), |r| r.entry.started_at.clone()),
        last: runs
            .last()
            .map_or(String::new(), |r| r.entry.started_at.clone()),
        rule: rule.describe(),
        charts,
    }
}

/// `bench · built-in: … · llama-3.1-8b · closed loop, concurrency 4 · input 256, output 128`.
pub fn describe_config(e: &RunEntry) -> String {
    let c = &e.config;
    let load = &c["load"];
    let load_text = match (load["mode"].as_str(), &load["series"]) {
        (Some(mode), serde_json::Value::Array(s)) => format!("{mode}-loop series {s:?}"),
        (Some("closed"), _) => format!("closed loop, concurrency {}", load["concurrency"]),
        (Some("open"), _) => format!(
            "open loop, {} req/s {}",
            load["rate"],
            load["arrival"].as_str().unwrap_or("")
        ),
        _ => load.to_string(),
    };
    format!(
        "{} · {} · {} · {load_text} · input {}, output {}",
        e.kind.name(),
        e.target,
        e.model,
        c["input_tokens"].as_str().unwrap_or("-"),
        c["output_tokens"].as_str().unwrap_or("-"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_spans_the_range() {
        assert_eq!(sparkline(&[1.0, 2.0, 3.0]), "▁▅█");
        assert_eq!(sparkline(&[5.0, 5.0]), "▄▄");
    }
}
