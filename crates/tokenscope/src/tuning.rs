//! A tune's parts: its settings (a grid of `--param`s or a TOML file of
//! named ones), each setting's outcome ([`Tuned`]), the recommendation per
//! kind of service and what it rests on, and `tune.json`.

use crate::find::Found;
use crate::plan_search::Planned;
use crate::recording::TunedSweep;
use crate::run_dir::Done;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use tokenscope_core::slo::Slo;
use tokenscope_history::entry::TuneSummary;

pub const TUNE_JSON: &str = "tune.json";
pub const SCHEMA: &str = "tokenscope.tune/v1";
/// The most settings a tune runs: a grid past this is a typo, not a plan.
pub const MAX_SETTINGS: usize = 1000;

/// One setting: its name and its parameters' values.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub name: String,
    pub values: Vec<(String, String)>,
}

impl Setting {
    /// `--serve` with `{port}` and each `{NAME}` filled in.
    pub fn command(&self, serve: &str, port: u16) -> String {
        self.fill(serve, Some(port))
    }

    /// `--serve` with each `{NAME}` filled in and `{port}` left: what the
    /// setting ran, whichever port it had (its identity in the history).
    pub fn identity(&self, serve: &str) -> String {
        self.fill(serve, None)
    }

    fn fill(&self, serve: &str, port: Option<u16>) -> String {
        // One pass: a value holding `{other}` is not filled in again.
        let mut out = String::with_capacity(serve.len());
        let mut rest = serve;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let name = after.find('}').map(|end| &after[..end]);
            let value = match name {
                Some("port") => port.map(|p| p.to_string()),
                Some(n) => self
                    .values
                    .iter()
                    .find(|(k, _)| k == n)
                    .map(|(_, v)| v.clone()),
                None => None,
            };
            match (name, value) {
                (Some(n), Some(v)) => {
                    out.push_str(&v);
                    rest = &after[n.len() + 1..];
                }
                _ => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// A directory name: `slots=4,tp=2` → `slots-4_tp-2`.
    pub fn dir_name(&self) -> String {
        let name: String = self
            .name
            .chars()
            .map(|c| match c {
                '=' => '-',
                ',' => '_',
                c if c.is_ascii_alphanumeric() || "-_.".contains(c) => c,
                _ => '-',
            })
            .collect();
        match name.trim_matches('.') {
            "" => "setting".into(),
            n => n.to_string(),
        }
    }
}

/// Every combination of the `--param` values, the first parameter varying slowest.
pub fn grid(params: &[(String, Vec<String>)]) -> Vec<Setting> {
    let mut settings = vec![Setting {
        name: String::new(),
        values: Vec::new(),
    }];
    for (name, values) in params {
        settings = settings
            .into_iter()
            .flat_map(|s| {
                values.iter().map(move |v| {
                    let mut values = s.values.clone();
                    values.push((name.clone(), v.clone()));
                    Setting {
                        name: String::new(),
                        values,
                    }
                })
            })
            .take(MAX_SETTINGS + 1)
            .collect();
    }
    for s in &mut settings {
        s.name = s
            .values
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(",");
    }
    settings
}

/// `--settings FILE`: `[[setting]]` tables, each a `name` and its values.
pub fn read_settings(path: &Path) -> anyhow::Result<Vec<Setting>> {
    let text = read_small(path, 1 << 20)
        .map_err(|e| crate::exit::Exit::usage(format!("--settings {}: {e}", path.display())))?;
    parse_settings(&text)
        .map_err(|e| crate::exit::Exit::usage(format!("--settings {}: {e}", path.display())))
}

/// A text file of at most `limit` bytes (a settings file past it is not one).
fn read_small(path: &Path, limit: u64) -> Result<String, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "larger than {} KiB: not a settings file",
            limit / 1024
        ));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into())
}

pub fn parse_settings(text: &str) -> Result<Vec<Setting>, String> {
    let doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| e.message().to_string())?;
    let tables = doc
        .get("setting")
        .and_then(|s| s.as_array())
        .ok_or("expected [[setting]] tables, each with a name and its parameters")?;
    let mut settings = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        let t = t
            .as_table()
            .ok_or(format!("setting {}: not a table", i + 1))?;
        let name = t
            .get("name")
            .and_then(|n| n.as_str())
            .ok_or(format!("setting {}: no name = \"…\"", i + 1))?;
        let mut values = Vec::new();
        for (k, v) in t.iter().filter(|(k, _)| *k != "name") {
            let v = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    return Err(format!(
                        "setting `{name}`: {k} is not a string, number or boolean"
                    ))
                }
            };
            values.push((k.clone(), v));
        }
        if settings.iter().any(|s: &Setting| s.name == name) {
            return Err(format!("setting `{name}` is named twice"));
        }
        settings.push(Setting {
            name: name.to_string(),
            values,
        });
    }
    if settings.is_empty() {
        return Err("no [[setting]]".into());
    }
    Ok(settings)
}

/// Every `{NAME}` in `--serve` is `port` or a parameter each setting
/// gives; without `--url`, `{port}` must be there (tune chooses it).
pub fn check_placeholders(serve: &str, settings: &[Setting], has_url: bool) -> Result<(), String> {
    if settings.len() > MAX_SETTINGS {
        return Err(format!(
            "{} settings or more: a tune runs at most {MAX_SETTINGS}",
            settings.len()
        ));
    }
    if !has_url && !serve.contains("{port}") {
        return Err("--serve has no {port}: tune chooses a free port per setting (or give --url where the server listens)".into());
    }
    // `{NAME}` of a parameter's characters only: a command's own braces
    // (a JSON argument) are its business.
    let mut rest = serve;
    while let Some(open) = rest.find('{') {
        let Some(len) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + len];
        rest = &rest[open + 1..];
        let is_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        let known = |s: &Setting| s.values.iter().any(|(n, _)| n == name);
        if is_name && name != "port" {
            if let Some(s) = settings.iter().find(|s| !known(s)) {
                return Err(format!(
                    "--serve has {{{name}}}, which setting `{}` does not give",
                    s.name
                ));
            }
        }
    }
    let mut dirs: BTreeMap<String, &str> = BTreeMap::new();
    for s in settings {
        if let Some(other) = dirs.insert(s.dir_name().to_lowercase(), &s.name) {
            return Err(format!(
                "settings `{other}` and `{}` would share the directory {}: name them apart",
                s.name,
                s.dir_name()
            ));
        }
    }
    Ok(())
}

/// The port of `http[s]://host[:port]…` (the scheme's when none is written).
pub fn port_of(url: &str) -> u16 {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split('/').next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    match host_port.rsplit_once(':') {
        Some((host, p)) if !host.ends_with(']') || host.contains('[') => p
            .parse()
            .unwrap_or(if scheme == "https" { 443 } else { 80 }),
        _ if scheme == "https" => 443,
        _ => 80,
    }
}

/// A port free on 127.0.0.1 now.
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| anyhow::anyhow!("finding a free port on 127.0.0.1: {e}"))?;
    Ok(l.local_addr()?.port())
}

/// Whether `port` can be bound again within 5 s (the server let it go).
pub fn port_freed(port: u16) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One setting's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tuned {
    pub name: String,
    pub params: BTreeMap<String, String>,
    pub command: String,
    /// Its directory, relative to the tune's.
    pub dir: String,
    /// Seconds from the start to its first `/health` 200.
    pub ready_s: Option<f64>,
    /// Seconds from SIGTERM to its exit (SIGKILL after 10 s).
    pub stop_s: Option<f64>,
    /// Why it has no full result: it did not start, or died.
    pub error: Option<String>,
    pub notes: Vec<String>,
    pub interrupted: bool,
    /// The highest load measured to meet the SLO, and the figures there.
    pub capacity: Option<f64>,
    pub bracket: Option<(f64, f64)>,
    /// The SLO held at the probe's maximum throughput: the capacity is at least `capacity`.
    #[serde(default)]
    pub at_least: bool,
    pub at_capacity: Option<AtCapacity>,
    /// The probe's output tokens/s: the setting's throughput at full load.
    pub max_output_tokens_per_s: Option<f64>,
    pub find: Option<Found>,
    /// `--sim`: the capacity planned on the virtual clock (calibrated to
    /// the first measured setting, when the tune calibrated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned: Option<Planned>,
    /// The plan before calibration, when the tune calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_uncalibrated: Option<Planned>,
    /// False for a setting `--plan-first` left unmeasured (or one an
    /// interrupted tune never reached): its figures are the plan's alone.
    pub measured: bool,
    /// No other measured setting carries both more load inside the SLO
    /// and more tokens/s at full load: chat and batch each find their
    /// pick among these.
    #[serde(default)]
    pub on_frontier: bool,
}

/// A setting's figures at its capacity point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AtCapacity {
    pub load: f64,
    pub output_tokens_per_s: f64,
    pub usd_per_1k_output_tokens: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
}

impl Tuned {
    pub fn new(setting: &Setting, command: &str, dir: &str) -> Tuned {
        Tuned {
            name: setting.name.clone(),
            params: setting.values.iter().cloned().collect(),
            command: command.to_string(),
            dir: dir.to_string(),
            ready_s: None,
            stop_s: None,
            error: None,
            notes: Vec::new(),
            interrupted: false,
            capacity: None,
            bracket: None,
            at_least: false,
            at_capacity: None,
            max_output_tokens_per_s: None,
            find: None,
            planned: None,
            planned_uncalibrated: None,
            measured: true,
            on_frontier: false,
        }
    }

    /// A setting not measured, and why.
    pub fn unmeasured(setting: &Setting, planned: Option<Planned>, why: String) -> Tuned {
        let mut t = Tuned::new(setting, "", &setting.dir_name());
        t.measured = false;
        t.planned = planned;
        t.notes.push(why);
        t
    }

    /// Planned capacity (the bracket's bottom), when planned.
    pub fn planned_capacity(&self) -> Option<f64> {
        self.planned.as_ref().and_then(|p| p.bracket.capacity)
    }

    /// The search's capacity and the figures at its point.
    pub fn take(&mut self, found: &Found, points: &[Done]) {
        self.max_output_tokens_per_s = found.probe.as_ref().map(|p| p.output_tokens_per_s);
        let Some(b) = &found.bracket else { return };
        self.capacity = b.capacity;
        self.bracket = Some((b.low, b.high));
        self.at_least = b.at_least;
        self.at_capacity = b.capacity.and_then(|c| {
            let d = points.iter().find(|d| d.load == c)?;
            let r = &d.results;
            Some(AtCapacity {
                load: c,
                output_tokens_per_s: r.throughput.output_tokens_per_s,
                usd_per_1k_output_tokens: r
                    .efficiency
                    .cost
                    .as_ref()
                    .and_then(|c| c.usd_per_1k_output_tokens),
                ttft_p99_ms: r.latency.ttft_ms.as_ref().map(|s| s.p99),
                e2e_p99_ms: r.latency.e2e_ms.as_ref().map(|s| s.p99),
            })
        });
    }
}

/// `tune.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TuneDoc {
    pub schema: String,
    pub serve: String,
    pub slo: String,
    pub settings: Vec<Tuned>,
    pub recommendations: Vec<Recommendation>,
    pub interrupted: bool,
    /// `--plan-first`: the simulator fitted to the first measured setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
}

/// The simulator's fit to the first measured setting (`sim calibrate`
/// over its search's points), and whether the plan used it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    /// The setting it was fitted to.
    pub from: String,
    /// The profile, relative to the tune's directory.
    pub profile: Option<String>,
    /// Summed squared log errors of the four medians over its points (0 = exact).
    pub residual: Option<f64>,
    pub points: usize,
    /// Whether the settings were planned again with it.
    pub used: bool,
    /// What it rests on, or why it was not used.
    pub note: String,
}

impl TuneDoc {
    pub fn best_capacity(&self) -> Option<f64> {
        self.settings
            .iter()
            .filter_map(|t| t.capacity)
            .reduce(f64::max)
    }
}

/// The setting for one kind of service, and what the choice rests on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recommendation {
    /// chat, batch, cost, long-context or agent.
    pub service: String,
    /// `None`: the tune's data cannot choose (`why` says why).
    pub setting: Option<String>,
    pub why: String,
}

pub fn document(serve: &str, slo: &Slo, mut settings: Vec<Tuned>) -> TuneDoc {
    mark_frontier(&mut settings);
    let recommendations = recommend(&settings);
    TuneDoc {
        schema: SCHEMA.into(),
        serve: serve.to_string(),
        slo: slo.describe(),
        interrupted: settings.iter().any(|t| t.interrupted),
        settings,
        recommendations,
        calibration: None,
    }
}

/// The measured settings on the frontier of SLO capacity (none met: 0)
/// against tokens/s at full load: those no other beats on one without
/// losing on the other (ties on both count as beaten by neither).
fn mark_frontier(settings: &mut [Tuned]) {
    let at = |t: &Tuned| {
        (t.measured && t.max_output_tokens_per_s.is_some()).then(|| {
            (
                t.capacity.unwrap_or(0.0),
                t.max_output_tokens_per_s.unwrap_or(0.0),
            )
        })
    };
    let all: Vec<Option<(f64, f64)>> = settings.iter().map(at).collect();
    for (t, me) in settings.iter_mut().zip(&all) {
        t.on_frontier = me.is_some_and(|(c, x)| {
            !all.iter()
                .flatten()
                .any(|&(oc, ox)| oc >= c && ox >= x && (oc > c || ox > x))
        });
    }
}

/// The best setting by `key` (higher is better) among those that have it,
/// with the runner-up.
fn best_by(settings: &[Tuned], key: impl Fn(&Tuned) -> Option<f64>) -> Vec<(&Tuned, f64)> {
    let mut ranked: Vec<(&Tuned, f64)> = settings
        .iter()
        .filter_map(|t| key(t).map(|v| (t, v)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked
}

/// Chat: the highest SLO capacity. Batch: the highest throughput at full
/// load. Cost: the most output tokens a second at SLO capacity (the least
/// cost per token on the same GPUs; dollars with a price). Long context and
/// agents: not judged from a tune's figures, and said so.
pub fn recommend(all: &[Tuned]) -> Vec<Recommendation> {
    let settings: Vec<Tuned> = all.iter().filter(|t| t.measured).cloned().collect();
    let settings = settings.as_slice();
    let mut out = Vec::new();
    let chat = best_by(settings, |t| t.capacity);
    out.push(match chat.first() {
        None => Recommendation {
            service: "chat".into(),
            setting: None,
            why: "no setting met the SLO at any load searched".into(),
        },
        Some((best, cap)) => {
            let unit = best.find.as_ref().map_or("requests/s", |f| f.over.unit());
            let mut why = format!(
                "the highest SLO capacity: {cap} {unit}{}",
                bracket_words(best)
            );
            if let Some(e) = &best.error {
                why.push_str(&format!(
                    " — its search ended early ({e}), so this is a lower bound"
                ));
            }
            if let Some((next, next_cap)) = chat.get(1) {
                why.push_str(&format!("; next, {} at {next_cap}", next.name));
                let overlap = match (best.bracket, next.bracket) {
                    (Some((lo, _)), Some((_, hi))) => lo <= hi && next.capacity.is_some(),
                    _ => false,
                };
                if overlap {
                    why.push_str(": their brackets overlap, so the search cannot tell them apart at its precision");
                }
            }
            Recommendation {
                service: "chat".into(),
                setting: Some(best.name.clone()),
                why,
            }
        }
    });
    let batch = best_by(settings, |t| t.max_output_tokens_per_s);
    out.push(match batch.first() {
        None => not_judged("batch", "no setting's maximum-throughput probe finished"),
        Some((best, tps)) => Recommendation {
            service: "batch".into(),
            setting: Some(best.name.clone()),
            why: format!(
                "the most output tokens/s at full load (the probe, no SLO): {tps:.0}{}",
                batch.get(1).map_or(String::new(), |(n, v)| format!(
                    "; next, {} at {v:.0}",
                    n.name
                ))
            ),
        },
    });
    let priced = settings
        .iter()
        .filter_map(|t| t.at_capacity.as_ref())
        .all(|a| a.usd_per_1k_output_tokens.is_some());
    let cost = best_by(settings, |t| {
        let a = t.at_capacity.as_ref()?;
        match priced {
            true => a.usd_per_1k_output_tokens.map(|usd| -usd),
            false => Some(a.output_tokens_per_s),
        }
    });
    out.push(match cost.first() {
        None => not_judged("cost", "no setting met the SLO: no cost at capacity"),
        Some((best, v)) => Recommendation {
            service: "cost".into(),
            setting: Some(best.name.clone()),
            why: match priced {
                true => format!("the least cost per 1K output tokens at SLO capacity: ${:.4}", -v),
                false => format!(
                    "the most output tokens/s at SLO capacity, {v:.0}: the least cost per token if every setting runs on the same GPUs (give --gpu-price for dollars)"
                ),
            },
        },
    });
    out.push(not_judged(
        "long-context",
        "not judged by tune: it needs each setting's KV-cache headroom at long prompts (run sweep with a long-context workload per setting)",
    ));
    out.push(not_judged(
        "agent",
        "not judged by tune: it needs an agent workload (tune with its flags and an e2e objective: chat's pick is then the agent's)",
    ));
    out
}

fn not_judged(service: &str, why: &str) -> Recommendation {
    Recommendation {
        service: service.into(),
        setting: None,
        why: why.into(),
    }
}

fn bracket_words(t: &Tuned) -> String {
    match (t.bracket, &t.find) {
        (Some((lo, hi)), Some(f)) => format!(
            " (bracket {lo}–{hi}, over {} points and {} requests)",
            f.points.len(),
            f.requests
        ),
        _ => String::new(),
    }
}

/// Each measured setting's planned capacity against its measured one, and
/// the plan's rank of those not measured.
pub fn plan_agreement(settings: &[Tuned]) -> Vec<String> {
    let mut lines = Vec::new();
    for t in settings.iter().filter(|t| t.measured) {
        if let (Some(p), Some(m)) = (t.planned_capacity(), t.capacity) {
            let before = t
                .planned_uncalibrated
                .as_ref()
                .and_then(|b| b.bracket.capacity)
                .map_or(String::new(), |b| {
                    format!("; before calibration {b} ({:+.0} %)", (b / m - 1.0) * 100.0)
                });
            lines.push(format!(
                "{}: planned {p}, measured {m} ({:+.0} %){before}",
                t.name,
                (p / m - 1.0) * 100.0
            ));
        }
    }
    let mut ranked: Vec<&Tuned> = settings.iter().filter(|t| t.planned.is_some()).collect();
    ranked.sort_by(|a, b| {
        let c = |t: &Tuned| t.planned_capacity().unwrap_or(0.0);
        c(b).total_cmp(&c(a))
    });
    for (i, t) in ranked.iter().enumerate().filter(|(_, t)| !t.measured) {
        lines.push(format!(
            "{}: not measured; the plan ranks it {} of {} (planned {})",
            t.name,
            i + 1,
            ranked.len(),
            t.planned_capacity()
                .map_or("none".into(), |c| c.to_string())
        ));
    }
    lines
}

/// `tune.json` read back (`history import` of a tune's directory).
pub fn read(dir: &Path) -> anyhow::Result<TuneDoc> {
    let path = dir.join(TUNE_JSON);
    let text = read_small(&path, 64 << 20).map_err(|e| anyhow::anyhow!("{e}"))?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// What the history records of a tune: its own summary, and per measured
/// setting its sweep's directory, identity and tags.
pub fn history_parts(dir: &Path, doc: &TuneDoc) -> (TuneSummary, Vec<TunedSweep>) {
    let best_tps = doc
        .settings
        .iter()
        .filter_map(|t| t.max_output_tokens_per_s)
        .reduce(f64::max);
    let chat = doc.recommendations.iter().find(|r| r.service == "chat");
    let summary = TuneSummary {
        serve: doc.serve.clone(),
        over: doc
            .settings
            .iter()
            .find_map(|t| t.find.as_ref())
            .map_or("rate", |f| f.over.name())
            .to_string(),
        settings: doc.settings.iter().map(|t| t.name.clone()).collect(),
        slo: doc.slo.clone(),
        requests: doc
            .settings
            .iter()
            .filter_map(|t| t.find.as_ref())
            .map(|f| f.requests)
            .sum(),
        interrupted: doc.interrupted,
        best_capacity: doc.best_capacity(),
        best_output_tokens_per_s: best_tps,
        recommended: chat.and_then(|r| r.setting.clone()),
    };
    let sweeps = doc
        .settings
        .iter()
        .filter(|t| t.measured)
        .map(|t| {
            let setting = Setting {
                name: t.name.clone(),
                values: t.params.clone().into_iter().collect(),
            };
            TunedSweep {
                dir: dir.join(&t.dir),
                identity: setting.identity(&doc.serve),
                tags: vec!["tune".into(), format!("setting={}", t.name)],
            }
        })
        .collect();
    (summary, sweeps)
}

/// `tune.json` and the tune's `report.html` beside it.
pub fn write(dir: &Path, doc: &TuneDoc) -> anyhow::Result<()> {
    let value = serde_json::to_value(doc)?;
    crate::run_dir::write_json(dir, TUNE_JSON, &value)?;
    let page = dir.join("report.html");
    std::fs::write(&page, tokenscope_report::tune::page(&value))
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", page.display()))
}

/// The settings side by side, then the recommendations.
pub fn table(doc: &TuneDoc) -> String {
    let mut out = format!("tune: {} · SLO {}\n\n", doc.serve, doc.slo);
    out.push_str(&format!(
        "{:<24} {:>9} {:>12} {:>17} {:>12} {:>8} {:>7} {:>9} {:>9}\n",
        "setting",
        "ready s",
        "capacity",
        "bracket",
        "max tok/s",
        "frontier",
        "points",
        "requests",
        "planned"
    ));
    let dash = |v: Option<String>| v.unwrap_or_else(|| "–".into());
    for t in &doc.settings {
        out.push_str(&format!(
            "{:<24} {:>9} {:>12} {:>17} {:>12} {:>8} {:>7} {:>9} {:>9}\n",
            t.name,
            dash(t.ready_s.map(|s| format!("{s:.1}"))),
            dash(t.capacity.map(|c| match t.at_least {
                true => format!("≥ {c}"),
                false => c.to_string(),
            })),
            dash(t.bracket.map(|(lo, hi)| format!("{lo}–{hi}"))),
            dash(t.max_output_tokens_per_s.map(|v| format!("{v:.0}"))),
            if t.on_frontier { "yes" } else { "–" },
            dash(t.find.as_ref().map(|f| f.points.len().to_string())),
            dash(t.find.as_ref().map(|f| f.requests.to_string())),
            dash(t.planned.as_ref().map(|p| match p.bracket.capacity {
                Some(c) if p.bracket.at_least => format!("≥ {c}"),
                Some(c) => c.to_string(),
                None => "none".into(),
            })),
        ));
        if let Some(e) = &t.error {
            out.push_str(&format!("  {}: {e}\n", t.name));
        }
        for n in &t.notes {
            out.push_str(&format!("  {}: note: {n}\n", t.name));
        }
    }
    let agreement = plan_agreement(&doc.settings);
    if let Some(c) = &doc.calibration {
        out.push_str(&format!("\nCalibration on {}: {}\n", c.from, c.note));
    }
    if !agreement.is_empty() {
        out.push_str("\nPlanned against measured (capacity)\n");
        for line in agreement {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str("\nRecommended settings (measured settings only)\n");
    for r in &doc.recommendations {
        out.push_str(&format!(
            "  {:<13} {:<20} {}\n",
            r.service,
            r.setting.as_deref().unwrap_or("none"),
            r.why
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_is_every_combination_named_by_its_values() {
        let g = grid(&[
            ("slots".into(), vec!["1".into(), "2".into()]),
            ("tp".into(), vec!["1".into(), "2".into(), "4".into()]),
        ]);
        assert_eq!(g.len(), 6);
        assert_eq!(g[0].name, "slots=1,tp=1");
        assert_eq!(g[5].name, "slots=2,tp=4");
        assert_eq!(g[5].dir_name(), "slots-2_tp-4");
        assert_eq!(
            g[1].command("srv --port {port} -np {slots} --tp {tp}", 9),
            "srv --port 9 -np 1 --tp 2"
        );
    }

    #[test]
    fn a_huge_grid_is_cut_and_refused() {
        let values: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        let params: Vec<(String, Vec<String>)> =
            (0..6).map(|i| (format!("p{i}"), values.clone())).collect();
        let g = grid(&params);
        assert!(g.len() <= MAX_SETTINGS + 1, "{}", g.len());
        let e = check_placeholders("x {port}", &g, false).unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }

    #[test]
    fn placeholders_must_be_given_and_the_port_chosen() {
        let g = grid(&[("slots".into(), vec!["1".into()])]);
        assert!(check_placeholders("srv --port {port} -np {slots}", &g, false).is_ok());
        let e = check_placeholders("srv --port {port} -np {n}", &g, false).unwrap_err();
        assert!(e.contains("{n}"), "{e}");
        let e = check_placeholders("srv -np {slots}", &g, false).unwrap_err();
        assert!(e.contains("{port}"), "{e}");
        assert!(check_placeholders("srv -np {slots}", &g, true).is_ok());
        // An unclosed brace, or JSON, is the command's own business.
        assert!(check_placeholders("srv {port} {", &g, false).is_ok());
        let json = r#"srv --port {port} --compilation-config '{"level":3}' -np {slots}"#;
        assert!(check_placeholders(json, &g, false).is_ok());
        assert_eq!(
            g[0].command(json, 7),
            r#"srv --port 7 --compilation-config '{"level":3}' -np 1"#
        );
        // A value holding a placeholder is not filled in again.
        let s = Setting {
            name: "x".into(),
            values: vec![("a".into(), "{b}".into()), ("b".into(), "2".into())],
        };
        assert_eq!(s.command("{a} {b} {port}", 9), "{b} 2 9");
        // Its identity keeps the port's placeholder: any port, one setting.
        assert_eq!(s.identity("{a} {b} --port {port}"), "{b} 2 --port {port}");
        // Two settings one directory: refused.
        let two = [
            Setting {
                name: "fp8 kv".into(),
                values: vec![],
            },
            Setting {
                name: "fp8-kv".into(),
                values: vec![],
            },
        ];
        let e = check_placeholders("x {port}", &two, false).unwrap_err();
        assert!(e.contains("share the directory"), "{e}");
        assert_eq!(port_of("http://127.0.0.1:8000/v1"), 8000);
        assert_eq!(port_of("https://h.example"), 443);
        assert_eq!(port_of("http://[::1]:9/x"), 9);
    }

    #[test]
    fn settings_files_are_read_or_refused_with_the_reason() {
        let s = parse_settings(
            "[[setting]]\nname = \"small\"\nslots = 2\n[[setting]]\nname = \"big\"\nslots = 8\nflag = \"--x\"\n",
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[1].values,
            [("flag".into(), "--x".into()), ("slots".into(), "8".into())]
        );
        for (bad, says) in [
            ("", "[[setting]]"),
            ("[[setting]]\nslots = 1\n", "no name"),
            (
                "[[setting]]\nname = \"a\"\n[[setting]]\nname = \"a\"\n",
                "twice",
            ),
            ("[[setting]]\nname = \"a\"\nx = [1]\n", "not a string"),
            ("[[setting]\n", ""),
        ] {
            let e = parse_settings(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        assert_eq!(
            Setting {
                name: "../x y".into(),
                values: vec![]
            }
            .dir_name(),
            "-x-y"
        );
    }

    fn tuned(name: &str, capacity: Option<f64>, bracket: (f64, f64), max_tps: f64) -> Tuned {
        let mut t = Tuned::new(
            &Setting {
                name: name.into(),
                values: vec![],
            },
            "x",
            name,
        );
        t.capacity = capacity;
        t.bracket = Some(bracket);
        t.max_output_tokens_per_s = Some(max_tps);
        t.at_capacity = capacity.map(|c| AtCapacity {
            load: c,
            output_tokens_per_s: c * 100.0,
            usd_per_1k_output_tokens: None,
            ttft_p99_ms: None,
            e2e_p99_ms: None,
        });
        t
    }

    #[test]
    fn recommendations_rest_on_capacity_and_say_when_brackets_overlap() {
        let settings = [
            tuned("a", Some(4.0), (4.0, 4.2), 900.0),
            tuned("b", Some(8.0), (8.0, 8.4), 800.0),
            tuned("c", None, (0.0, 0.5), 100.0),
        ];
        let r = recommend(&settings);
        assert_eq!(r[0].setting.as_deref(), Some("b"));
        assert!(!r[0].why.contains("overlap"), "{}", r[0].why);
        assert_eq!(
            r[1].setting.as_deref(),
            Some("a"),
            "batch: throughput at full load"
        );
        assert_eq!(r[2].setting.as_deref(), Some("b"));
        assert!(r[2].why.contains("same GPUs"));
        assert_eq!(r[3].setting, None);
        let close = [
            tuned("a", Some(8.0), (8.0, 8.4), 1.0),
            tuned("b", Some(8.2), (8.2, 8.6), 1.0),
        ];
        assert!(recommend(&close)[0].why.contains("overlap"));
        let none = recommend(&[tuned("c", None, (0.0, 0.5), 1.0)]);
        assert_eq!(none[0].setting, None);
        assert_eq!(none[2].setting, None);
    }

    #[test]
    fn the_frontier_keeps_the_settings_none_beats_on_both() {
        let mut unmeasured = tuned("d", Some(20.0), (20.0, 21.0), 2000.0);
        unmeasured.measured = false;
        let doc = document(
            "srv",
            &Slo::parse("ttft_p90=1s").unwrap(),
            vec![
                tuned("a", Some(4.0), (4.0, 4.2), 900.0),
                tuned("b", Some(8.0), (8.0, 8.4), 800.0),
                tuned("c", Some(3.0), (3.0, 3.2), 700.0), // beaten by both
                tuned("e", None, (0.0, 0.5), 950.0),      // met nothing, fastest at full load
                tuned("f", Some(8.0), (8.0, 8.4), 800.0), // ties b: neither beats the other
                unmeasured,
            ],
        );
        let on: Vec<&str> = doc
            .settings
            .iter()
            .filter(|t| t.on_frontier)
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(on, ["a", "b", "e", "f"]);
    }
}
