//! One run as the history records it, and the identity of its
//! configuration: the runs whose figures may be compared over time.

use crate::metrics::{self, Figure};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokenscope_core::analysis::Analysis;
use tokenscope_core::results::{RunResults, SloReport};
use tokenscope_core::slo::Verdict;

/// What produced the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Bench,
    /// A whole sweep; its points are recorded as [`Kind::SweepPoint`]s under it.
    Sweep,
    SweepPoint,
    /// `sim plan`: simulated on a virtual clock, never mixed with measured runs.
    Plan,
    /// `tokenscope merge` of a sharded run.
    Merge,
    /// `tokenscope tune`: its settings' searches are recorded as
    /// [`Kind::Sweep`]s under it.
    Tune,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bench => "bench",
            Kind::Sweep => "sweep",
            Kind::SweepPoint => "sweep-point",
            Kind::Plan => "plan",
            Kind::Merge => "merge",
            Kind::Tune => "tune",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        [
            Kind::Bench,
            Kind::Sweep,
            Kind::SweepPoint,
            Kind::Plan,
            Kind::Merge,
            Kind::Tune,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }

    /// Runs of one family measure the same kind of thing: a bench, a merged
    /// sharded run and a sweep's point all measured a server; a plan only
    /// predicted one; a sweep is a series.
    fn family(self) -> &'static str {
        match self {
            Kind::Bench | Kind::SweepPoint | Kind::Merge => "measured",
            Kind::Plan => "simulated",
            Kind::Sweep => "sweep",
            Kind::Tune => "tune",
        }
    }
}

/// One run as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEntry {
    pub kind: Kind,
    /// When the run started (RFC 3339 UTC, from `results.json`).
    pub started_at: String,
    /// A sweep point's label (`concurrency 16`).
    pub point: Option<String>,
    /// The server's URL, or what the built-in server or simulation was.
    pub target: String,
    pub api: String,
    pub server_kind: Option<String>,
    pub model: String,
    /// What the server said of its version (vLLM's `/version`, TGI's
    /// `/info`, llama.cpp's `/props` build), when it said.
    pub engine_version: Option<String>,
    /// A short hash of [`RunEntry::config`]: runs with the same key are one
    /// configuration's history.
    pub config_key: String,
    /// What defines the configuration (target, model, API, load, workload).
    pub config: Value,
    /// The SLO in words, and whether the run met it (`None`: no SLO, or not judged).
    pub slo: Option<String>,
    pub slo_met: Option<bool>,
    pub partial: bool,
    pub requests: u64,
    pub failed: u64,
    /// The diagnosis' findings above `info`: `rule: message`.
    pub diagnosis: Vec<String>,
    pub run_dir: String,
    pub tool_version: String,
    /// `--tag`s given to the run.
    pub tags: Vec<String>,
    pub figures: Vec<Figure>,
}

/// A recorded run with its id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredRun {
    pub id: i64,
    /// When it was recorded (RFC 3339 UTC).
    pub recorded_at: String,
    /// The sweep a point belongs to.
    pub parent_id: Option<i64>,
    #[serde(flatten)]
    pub entry: RunEntry,
}

impl StoredRun {
    pub fn figure(&self, metric: &str) -> Option<&Figure> {
        self.entry.figures.iter().find(|f| f.metric == metric)
    }
}

/// The workload settings that define a configuration. Seeds, request
/// counts, durations, timeouts and prices are left out: they change how
/// precisely or at what price a run measured, not what it measured.
const WORKLOAD_KEYS: [&str; 11] = [
    "load",
    "input_tokens",
    "output_tokens",
    "shared_prefix",
    "prefix_groups",
    "dataset",
    "multi_turn",
    "ignore_eos",
    "stream",
    "system_prompt",
    "extra_body_keys",
];

impl RunEntry {
    /// The entry of one run's `results.json` in `run_dir`.
    pub fn of_results(kind: Kind, r: &RunResults, run_dir: &str, tags: &[String]) -> RunEntry {
        let target = target_of(r);
        let mut config = json!({
            "family": kind.family(),
            "target": target,
            "api": r.target.api,
            "model": r.target.model,
        });
        for key in WORKLOAD_KEYS {
            let v = &r.config[key];
            if !v.is_null() {
                config[key] = workload_value(key, v);
            }
        }
        let slo = r.slo.as_ref();
        RunEntry {
            kind,
            started_at: r.started_at.clone(),
            point: None,
            target,
            api: r.target.api.clone(),
            server_kind: r.server.kind.clone(),
            model: r.target.model.clone(),
            engine_version: r.server.version.clone(),
            config_key: key_of(&config),
            config,
            slo: slo.map(objectives_text),
            slo_met: slo
                .filter(|s| s.verdict != Some(Verdict::NotEnoughData))
                .map(|s| s.met),
            partial: r.partial,
            requests: r.counts.requests,
            failed: r.counts.failed,
            diagnosis: r
                .diagnosis
                .iter()
                .filter(|f| f.severity != "info")
                .map(|f| format!("{}: {}", f.rule, f.message))
                .collect(),
            run_dir: run_dir.to_string(),
            tool_version: r.tool.version.clone(),
            tags: tags.to_vec(),
            figures: metrics::of_results(r),
        }
    }

    /// A sweep's own entry: its loads and, with `--slo`, its capacity, from
    /// its first point's settings and its analysis.
    pub fn of_sweep(
        first: &RunResults,
        loads: &[f64],
        analysis: &Analysis,
        dir: &str,
        tags: &[String],
    ) -> RunEntry {
        let mut e = RunEntry::of_results(Kind::Sweep, first, dir, tags);
        let mode = first.config["load"]["mode"].clone();
        e.config["load"] = json!({ "mode": mode, "series": loads });
        e.config_key = key_of(&e.config);
        e.requests = 0;
        e.failed = 0;
        e.partial = false;
        e.figures.clear();
        e.slo_met = None;
        if let Some(cap) = &analysis.slo {
            e.slo = Some(cap.objectives.clone());
            if let Some(load) = cap.highest_met_load {
                e.figures
                    .push(metrics::fig("slo_capacity_load", load, None));
            }
        }
        if let Some(peak) = analysis
            .series
            .iter()
            .map(|p| p.output_tps)
            .reduce(f64::max)
        {
            e.figures
                .push(metrics::fig("output_tokens_per_s", peak, None));
        }
        e
    }

    /// A tune's own entry, from its first measured point's settings: the
    /// server's command (`{port}` and each `{NAME}` as given), the
    /// settings tried, the SLO, and the best capacity and throughput
    /// measured. Its settings' sweeps go under it.
    pub fn of_tune(first: &RunResults, tune: &TuneSummary, dir: &str, tags: &[String]) -> RunEntry {
        let mut e = RunEntry::of_results(Kind::Tune, first, dir, tags);
        e.target = format!("serve: {}", tune.serve);
        e.config["target"] = json!(e.target);
        e.config["load"] = json!({ "mode": tune.over, "settings": tune.settings });
        e.config_key = key_of(&e.config);
        e.requests = tune.requests;
        e.failed = 0;
        e.partial = tune.interrupted;
        e.figures.clear();
        e.slo = Some(tune.slo.clone());
        e.slo_met = None;
        if let Some(c) = tune.best_capacity {
            e.figures.push(metrics::fig("slo_capacity_load", c, None));
        }
        if let Some(t) = tune.best_output_tokens_per_s {
            e.figures.push(metrics::fig("output_tokens_per_s", t, None));
        }
        e.point = tune.recommended.as_ref().map(|s| format!("chat: {s}"));
        e
    }
}

/// What a tune's own entry records.
#[derive(Debug, Clone, Default)]
pub struct TuneSummary {
    /// The command template (`{port}`, `{NAME}` unfilled).
    pub serve: String,
    /// `rate` or `concurrency`.
    pub over: String,
    /// The settings' names, in the order given.
    pub settings: Vec<String>,
    pub slo: String,
    pub requests: u64,
    pub interrupted: bool,
    pub best_capacity: Option<f64>,
    pub best_output_tokens_per_s: Option<f64>,
    /// Chat's recommended setting.
    pub recommended: Option<String>,
}

/// `ttft_p99 ≤ 500 ms, tpot_p99 ≤ 50 ms`.
fn objectives_text(slo: &SloReport) -> String {
    slo.objectives
        .iter()
        .map(|o| format!("{}_{} ≤ {} ms", o.metric, o.stat, o.limit_ms))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The server's URL; a built-in server's changing port is not part of its
/// identity, what it simulated is.
fn target_of(r: &RunResults) -> String {
    match &r.target.builtin {
        Some(b) if r.target.url.starts_with("http://127.0.0.1") => format!("built-in: {b}"),
        _ => r.target.url.clone(),
    }
}

/// A dataset is known by its file name (the same file in another checkout
/// is the same workload); other settings as they are.
fn workload_value(key: &str, v: &Value) -> Value {
    match (key, v.as_str()) {
        ("dataset", Some(path)) => Value::from(
            std::path::Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.to_string()),
        ),
        _ => v.clone(),
    }
}

/// 12 hex digits of FNV-1a over the canonical JSON (serde_json sorts object
/// keys): stable across builds and platforms, unlike std's hasher.
pub fn key_of(config: &Value) -> String {
    let h = tokenscope_core::hash::fnv1a(config.to_string().bytes());
    format!("{:012x}", h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_stable_and_order_free() {
        let a = json!({"model": "m", "load": {"mode": "closed", "concurrency": 4}});
        let b = json!({"load": {"concurrency": 4, "mode": "closed"}, "model": "m"});
        assert_eq!(key_of(&a), key_of(&b));
        assert_eq!(key_of(&a).len(), 12);
        let c = json!({"model": "m", "load": {"mode": "closed", "concurrency": 8}});
        assert_ne!(key_of(&a), key_of(&c));
    }

    #[test]
    fn kinds_round_trip() {
        for k in ["bench", "sweep", "sweep-point", "plan", "merge", "tune"] {
            assert_eq!(Kind::parse(k).unwrap().name(), k);
        }
        assert!(Kind::parse("x").is_none());
    }
}
