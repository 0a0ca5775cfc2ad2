//! The peers' results read back: a vLLM `bench serve` result, AIPerf's
//! `profile_export*.json`/`.jsonl` or GuideLLM's `benchmarks.json`, turned
//! into a tokenscope run directory that `report`, `compare` and `history
//! import` read like any other.
//!
//! Each request the peer kept is rebuilt as a record (its send, first
//! token, chunk gaps, end, token counts, error), and every figure is then
//! recomputed by tokenscope's own definitions (docs/metrics.md), never
//! copied under a similar name. What a peer did not keep is said, not
//! filled in: a vLLM result saved without `--save-detailed` has no
//! per-request TTFT or gaps; GuideLLM keeps only the first and last token
//! of each request, so its gaps are spread evenly (as GuideLLM itself
//! assumes) and its ITL distribution is not measured. These notes go into
//! the run's findings, where report and compare show them.
//!
//! The converted directory sits beside the file (`NAME.tokenscope/`), so
//! a history entry can point at it and compare can read it again.

mod aiperf;
mod guidellm;
mod vllm;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tokenscope_core::record::{Chunk, ErrorKind, RequestRecord};
use tokenscope_core::results::{Finding, RunResults, Target};

/// The most bytes a peer's file may hold: a million requests' detailed
/// vLLM result is about 1 GiB; past that it is not one.
const MAX_BYTES: u64 = 2 << 30;

/// Which peer wrote a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Vllm,
    Aiperf,
    Guidellm,
}

impl Dialect {
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Vllm => "vLLM bench serve",
            Dialect::Aiperf => "AIPerf",
            Dialect::Guidellm => "GuideLLM",
        }
    }
}

/// One request as a peer kept it, times in seconds.
#[derive(Debug, Clone, Default)]
pub struct PeerRequest {
    /// Sent, on the peer's clock (any origin: the earliest becomes 0).
    pub start_s: f64,
    pub ttft_s: Option<f64>,
    /// The gap before each chunk after the first.
    pub gaps_s: Vec<f64>,
    pub e2e_s: f64,
    pub input_tokens: Option<u64>,
    pub output_tokens: u64,
    pub error: Option<String>,
    /// A warm-up request (AIPerf's warmup phase).
    pub warmup: bool,
}

/// A peer's run, read.
pub struct Imported {
    pub dialect: Dialect,
    pub source: PathBuf,
    /// Wall-clock start, RFC 3339, where the peer wrote one.
    pub started_at: String,
    pub target: Target,
    /// The load and workload, in tokenscope's config keys.
    pub config: Value,
    pub requests: Vec<PeerRequest>,
    /// What the peer did not keep, and so what is not measured here.
    pub notes: Vec<String>,
    /// Metric families the peer's data cannot give (`ttft`, `tpot`, `itl`,
    /// `throughput`), each with why: compare leaves them out and says so.
    pub not_measured: Vec<(&'static str, String)>,
    /// The peer's own measured window, s, where it kept no send times:
    /// the rates are then over this window (the records cannot give one).
    pub window_s: Option<f64>,
}

/// The peer file at `path` (a file, or a directory holding exactly one
/// peer result and no tokenscope run), with its dialect; `None` when it is
/// none of theirs.
pub fn detect(path: &Path) -> Option<(Dialect, PathBuf)> {
    let (base, _) = split_index(path);
    if base.is_dir() {
        if base.join("results.json").exists() || base.join("sweep.json").exists() {
            return None;
        }
        let named = [
            ("profile_export_aiperf.json", Dialect::Aiperf),
            ("profile_export.jsonl", Dialect::Aiperf),
            ("benchmarks.json", Dialect::Guidellm),
        ];
        return named
            .iter()
            .map(|(n, d)| (*d, base.join(n)))
            .find(|(_, p)| p.exists());
    }
    let name = base.file_name()?.to_string_lossy().to_string();
    if name.starts_with("profile_export") && (name.ends_with(".json") || name.ends_with(".jsonl")) {
        return Some((Dialect::Aiperf, base));
    }
    if !name.ends_with(".json") {
        return None;
    }
    // GuideLLM's and vLLM's files are named freely: told apart by their keys.
    let head = read_head(&base)?;
    // (A key's place is not fixed: a rewritten file may sort them.)
    if head.contains("\"benchmarks\"") {
        Some((Dialect::Guidellm, base))
    } else if head.contains("\"endpoint_type\"") || head.contains("\"num_prompts\"") {
        Some((Dialect::Vllm, base))
    } else {
        None
    }
}

/// `FILE#K`: the K-th benchmark of a GuideLLM file holding several.
fn split_index(path: &Path) -> (PathBuf, Option<usize>) {
    let s = path.to_string_lossy();
    match s.rsplit_once('#') {
        Some((file, k)) if !Path::new(&*s).exists() => match k.parse() {
            Ok(k) => (PathBuf::from(file), Some(k)),
            Err(_) => (path.to_path_buf(), None),
        },
        _ => (path.to_path_buf(), None),
    }
}

/// The file's first 64 KiB, for telling the dialects apart.
fn read_head(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut head)
        .ok()?;
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// The file as JSON, refused past [`MAX_BYTES`].
pub(crate) fn read_json(path: &Path) -> Result<Value, String> {
    let text = read_text(path)?;
    serde_json::from_str(&text).map_err(|e| format!("not JSON ({e})"))
}

pub(crate) fn read_text(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let too_large = || format!("larger than {} GiB: not a peer's result", MAX_BYTES >> 30);
    // Refused before reading where the size is known; bounded by take() where not (a pipe).
    if f.metadata().is_ok_and(|m| m.len() > MAX_BYTES) {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    f.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into())
}

/// Reads a peer's result.
pub fn read(dialect: Dialect, file: &Path, asked: &Path) -> Result<Imported, String> {
    let (_, index) = split_index(asked);
    match dialect {
        Dialect::Vllm => vllm::read(file),
        Dialect::Aiperf => aiperf::read(file),
        Dialect::Guidellm => guidellm::read(file, index),
    }
}

/// A number a peer wrote, refused when it is not one a count can be
/// (negative, fractional past rounding, NaN, beyond u64).
pub(crate) fn count(v: &Value, what: &str) -> Result<u64, String> {
    match v.as_f64() {
        Some(x) if x.is_finite() && x >= 0.0 && x < u64::MAX as f64 && x.fract() == 0.0 => {
            Ok(x as u64)
        }
        _ => Err(format!("{what}: {v} is not a count")),
    }
}

/// A duration a peer wrote, in its unit; refused when negative or not finite.
pub(crate) fn seconds(v: &Value, per_second: f64, what: &str) -> Result<f64, String> {
    match v.as_f64() {
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x / per_second),
        _ => Err(format!("{what}: {v} is not a duration")),
    }
}

impl Imported {
    /// The records, on a clock starting at the earliest send.
    pub fn records(&self) -> Vec<RequestRecord> {
        let origin = self
            .requests
            .iter()
            .map(|r| r.start_s)
            .fold(f64::INFINITY, f64::min);
        let us = |s: f64| (s * 1e6).round().max(0.0) as u64;
        self.requests
            .iter()
            .enumerate()
            .map(|(i, p)| record(i as u64, p, us(p.start_s - origin)))
            .collect()
    }

    /// `results.json`'s document for the peer's run: tokenscope's figures
    /// from the rebuilt records, the notes among its findings.
    pub fn results(&self, records: &[RequestRecord]) -> RunResults {
        let mut agg = tokenscope_core::metrics::Aggregator::new(None, None);
        for r in records {
            agg.add(r);
        }
        let mut findings: Vec<Finding> = self.notes.iter().map(|n| note(n)).collect();
        findings.insert(0, note(&format!(
            "read from {} ({}): every figure recomputed from the {} requests it kept, by tokenscope's definitions",
            self.source.display(),
            self.dialect.name(),
            records.len()
        )));
        let mut config = self.config.clone();
        config["not_measured"] = self
            .not_measured
            .iter()
            .map(|(family, why)| (family.to_string(), json!(why)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        let facts = crate::run::collect::RunFacts {
            started_at: self.started_at.clone(),
            partial: false,
            target: self.target.clone(),
            config,
            server: Default::default(),
            kv_cache: None,
            client_cpu: None,
            client: Default::default(),
            extra_findings: findings,
            simulated: None,
            telemetry: None,
        };
        let mut r = crate::run::collect::assemble(agg.finish(), facts);
        if let Some(d) = self.window_s.filter(|d| *d > 0.0) {
            over_window(&mut r, d);
        }
        r
    }
}

/// The rates over the peer's own window, where the records hold no send
/// times; the concurrency and the steady window are then unknown, not 0.
fn over_window(r: &mut RunResults, d: f64) {
    let t = &mut r.throughput;
    let (input, output) = (r.tokens.input_total as f64, r.tokens.output_total as f64);
    t.requests_per_s = r.counts.succeeded as f64 / d;
    t.output_tokens_per_s = output / d;
    t.input_tokens_per_s = input / d;
    t.total_tokens_per_s = (input + output) / d;
    t.output_tokens_per_s_ci95 = None;
    r.window.duration_s = d;
    r.window.end_s = r.window.start_s + d;
    r.window.steady = None;
}

fn note(message: &str) -> Finding {
    Finding {
        rule: "imported".into(),
        severity: "info".into(),
        message: message.into(),
        evidence: Default::default(),
    }
}

/// A peer's request as tokenscope's record: chunks at the first token and
/// after each gap, the output tokens spread over them (the first chunks
/// carrying one more where they do not divide evenly).
fn record(id: u64, p: &PeerRequest, sent_us: u64) -> RequestRecord {
    let us = |s: f64| (s * 1e6).round().max(0.0) as u64;
    let mut r = RequestRecord::sent(id, sent_us, sent_us);
    r.warmup = p.warmup;
    r.done_at_us = sent_us.saturating_add(us(p.e2e_s));
    r.input_tokens = p.input_tokens;
    r.output_tokens = p.output_tokens;
    if let Some(e) = &p.error {
        r.error_kind = Some(error_kind(e));
        r.error = Some(e.clone());
        return r;
    }
    r.status = Some(200);
    if let Some(ttft) = p.ttft_s {
        let first = sent_us.saturating_add(us(ttft));
        r.first_token_at_us = Some(first);
        r.first_byte_at_us = Some(first);
        r.first_answer_at_us = Some(first);
        let n = p.gaps_s.len() as u64 + 1;
        let (each, extra) = (p.output_tokens / n, p.output_tokens % n);
        let mut at = first;
        for (i, gap) in std::iter::once(0.0)
            .chain(p.gaps_s.iter().copied())
            .enumerate()
        {
            at = at.saturating_add(us(gap));
            let tokens = each + u64::from((i as u64) < extra);
            r.chunks.push(Chunk(at, tokens.min(u32::MAX as u64) as u32));
        }
        r.done_at_us = r.done_at_us.max(at);
    }
    r
}

/// An error message's kind: the HTTP status where the message names one
/// (by its number, or by its reason phrase as aiohttp words it).
fn error_kind(message: &str) -> ErrorKind {
    let phrases = [
        ("Bad Request", 400),
        ("Unauthorized", 401),
        ("Not Found", 404),
        ("Too Many Requests", 429),
        ("Internal Server Error", 500),
        ("Bad Gateway", 502),
        ("Service Unavailable", 503),
        ("Gateway Timeout", 504),
    ];
    let named = phrases
        .iter()
        .find(|(p, _)| message.contains(p))
        .map(|(_, c)| *c);
    let status = message
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| w.len() == 3)
        .filter_map(|w| w.parse::<u16>().ok())
        .find(|c| (400..600).contains(c))
        .or(named);
    status.map_or(ErrorKind::Stream, ErrorKind::Http)
}

/// The directory a peer's file is converted into: beside it, `NAME.tokenscope`.
pub fn converted_dir(file: &Path, asked: &Path) -> PathBuf {
    let (_, index) = split_index(asked);
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let stem = name.trim_end_matches(".jsonl").trim_end_matches(".json");
    let suffix = index.map(|k| format!("-{k}")).unwrap_or_default();
    file.with_file_name(format!("{stem}{suffix}.tokenscope"))
}

/// Converts a peer's result into a run directory, returning its path: the
/// records and `results.json`, with `imported.json` naming the source.
pub fn convert(dialect: Dialect, file: &Path, asked: &Path) -> anyhow::Result<PathBuf> {
    let imported = read(dialect, file, asked).map_err(|e| {
        crate::exit::Exit::usage(format!("{} ({}): {e}", file.display(), dialect.name()))
    })?;
    let dir = converted_dir(file, asked);
    std::fs::create_dir_all(&dir)?;
    let records = imported.records();
    let mut lines = String::new();
    for r in &records {
        lines.push_str(&serde_json::to_string(r)?);
        lines.push('\n');
    }
    crate::run_dir::write_file(dir.join("requests.jsonl"), &lines)?;
    let results = imported.results(&records);
    crate::run_dir::write_file(
        dir.join("results.json"),
        &serde_json::to_string_pretty(&results)?,
    )?;
    let provenance = json!({"dialect": dialect.name(), "source": file, "notes": imported.notes});
    crate::run_dir::write_file(
        dir.join("imported.json"),
        &serde_json::to_string_pretty(&provenance)?,
    )?;
    eprintln!(
        "tokenscope: read {} ({}): {} requests, as the run directory {}",
        file.display(),
        dialect.name(),
        records.len(),
        dir.display()
    );
    Ok(dir)
}

/// `path` as a tokenscope run or sweep directory: itself, or a peer's
/// result converted beside it.
pub fn resolve(path: &Path) -> anyhow::Result<PathBuf> {
    match detect(path) {
        Some((dialect, file)) => convert(dialect, &file, path),
        None => Ok(path.to_path_buf()),
    }
}
