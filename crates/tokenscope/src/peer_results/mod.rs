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

/// The most bytes a peer's JSON file may hold. Read into typed fields, a
/// number costs at most 4× its shortest text (`0,`): 256 MiB keeps the
/// parse near 1 GiB, and holds ~12 million chunk gaps as Python writes them.
const MAX_BYTES: u64 = 256 << 20;
/// The most chunks an import rebuilds (16 bytes each as records).
const MAX_CHUNKS: u64 = 50_000_000;

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
    /// Cancelled rather than failed (GuideLLM's incomplete, AIPerf's
    /// `was_cancelled`): tokenscope's `cancelled` kind, not a failure.
    pub cancelled: bool,
    /// Outside the measured window (AIPerf's warm-up phase, GuideLLM's
    /// warm-up and cool-down).
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
    if is_key(&head, "benchmarks") {
        Some((Dialect::Guidellm, base))
    } else if head.contains("\"endpoint_type\"") || head.contains("\"num_prompts\"") {
        Some((Dialect::Vllm, base))
    } else {
        None
    }
}

/// `"key":` somewhere in `text` (a key, not a value that says its name).
/// Its value's shape is the reader's to check, so that a file of the
/// wrong shape is refused with why, not taken for something else.
fn is_key(text: &str, key: &str) -> bool {
    let quoted = format!("\"{key}\"");
    text.match_indices(&quoted)
        .any(|(at, _)| text[at + quoted.len()..].trim_start().starts_with(':'))
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
    serde_json::from_str(&text).map_err(|e| why_unread(e, "JSON"))
}

/// Why a peer's file did not parse: cut short, not JSON at all, or JSON
/// of another shape than `what`.
pub(crate) fn why_unread(e: serde_json::Error, what: &str) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Eof => format!("truncated JSON ({e})"),
        Category::Syntax => format!("not JSON ({e})"),
        Category::Data | Category::Io => format!("not {what} ({e})"),
    }
}

/// The file as text, refused past [`MAX_BYTES`], Python's float words made JSON.
pub(crate) fn read_text(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let too_large = || format!("larger than {} MiB: not a peer's result", MAX_BYTES >> 20);
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
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    Ok(python_floats_as_null(text))
}

/// Python's `json.dump` (vLLM's writer) writes a NaN or infinite float as
/// the bare words `NaN`, `Infinity`, `-Infinity`, which JSON has not: a
/// summary over no samples holds them. Each outside a string becomes
/// `null`, the peers' own "no value" (pydantic writes it so).
fn python_floats_as_null(text: String) -> String {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text.as_str();
    while let Some(c) = rest.chars().next() {
        if !in_string {
            let word = ["-Infinity", "Infinity", "NaN"]
                .into_iter()
                .find(|w| rest.starts_with(w));
            if let Some(w) = word {
                out.push_str("null");
                rest = &rest[w.len()..];
                continue;
            }
        }
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => in_string = !in_string,
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
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

/// A number a peer wrote as a count, refused when it is not one
/// (negative, fractional, not finite, beyond u64).
pub(crate) fn count_of(x: f64, what: &str) -> Result<u64, String> {
    match x.is_finite() && x >= 0.0 && x < u64::MAX as f64 && x.fract() == 0.0 {
        true => Ok(x as u64),
        false => Err(format!("{what}: {x} is not a count")),
    }
}

/// A duration a peer wrote, in seconds; refused when negative or not finite.
pub(crate) fn seconds_of(x: f64, what: &str) -> Result<f64, String> {
    match x.is_finite() && x >= 0.0 {
        true => Ok(x),
        false => Err(format!("{what}: {x} is not a duration")),
    }
}

/// Refuses an import past [`MAX_CHUNKS`] chunks, before they are built.
pub(crate) fn within_chunk_limit(chunks: u64) -> Result<(), String> {
    match chunks <= MAX_CHUNKS {
        true => Ok(()),
        false => Err(format!(
            "more than {MAX_CHUNKS} chunks: past what an import rebuilds"
        )),
    }
}

/// Seconds since the Unix epoch as RFC 3339, "unknown" outside 1970–9999.
pub(crate) fn iso(epoch_s: f64) -> String {
    match std::time::Duration::try_from_secs_f64(epoch_s) {
        Ok(d) if d.as_secs() < 253_402_300_800 => {
            humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + d).to_string()
        }
        _ => format!("unknown ({epoch_s} s since 1970)"),
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
            let busy_s = self
                .requests
                .iter()
                .filter(|p| !p.warmup)
                .map(|p| p.e2e_s)
                .sum();
            over_window(&mut r, d, busy_s);
        }
        // Chunk times the peer did not keep are not shown, nor recorded in the history.
        if self.not_measured.iter().any(|(f, _)| *f == "itl") {
            r.latency.itl_ms = None;
            r.latency.icl_ms = None;
        }
        r
    }
}

/// The rates over the peer's own window, where the records hold no send
/// times. The mean concurrency is then the requests' summed latency over
/// the window (Little's law, exact); the peak is known only to the whole
/// window's resolution (every request in it), an upper bound said as one;
/// the steady window is unknown, not 0.
fn over_window(r: &mut RunResults, d: f64, busy_s: f64) {
    let t = &mut r.throughput;
    let (input, output) = (r.tokens.input_total as f64, r.tokens.output_total as f64);
    t.requests_per_s = r.counts.succeeded as f64 / d;
    t.output_tokens_per_s = output / d;
    t.input_tokens_per_s = input / d;
    t.total_tokens_per_s = (input + output) / d;
    t.output_tokens_per_s_ci95 = None;
    t.concurrency.mean = busy_s / d;
    t.concurrency.max = r.counts.requests;
    t.concurrency.max_resolution_ms = Some(d * 1e3);
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
        r.error_kind = Some(match p.cancelled {
            true => ErrorKind::Cancelled,
            false => error_kind(e),
        });
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
    // A number is a status only in a message that says it is one.
    let lower = message.to_ascii_lowercase();
    let says_status = lower.contains("http") || lower.contains("status");
    let status = says_status
        .then_some(message)
        .into_iter()
        .flat_map(|m| m.split(|c: char| !c.is_ascii_digit()))
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
        None if split_index(path).0.is_file() => Err(crate::exit::Exit::usage(format!(
            "{}: not a result tokenscope reads (a run or sweep directory, a vLLM bench serve \
             result, AIPerf's profile_export*.json or .jsonl, GuideLLM's benchmarks file)",
            path.display()
        ))),
        None => Ok(path.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pythons_float_words_become_null_outside_strings_only() {
        let text = r#"{"a": NaN, "b": [-Infinity, Infinity], "c": "NaN \" Infinity", "d": 1}"#;
        let v: Value = serde_json::from_str(&python_floats_as_null(text.into())).unwrap();
        assert_eq!(v["a"], Value::Null);
        assert_eq!(v["b"], json!([null, null]));
        assert_eq!(v["c"], "NaN \" Infinity");
        assert_eq!(v["d"], 1);
    }

    #[test]
    fn counts_and_durations_refuse_what_they_cannot_be() {
        assert_eq!(count_of(3.0, "n"), Ok(3));
        for x in [-1.0, 0.5, f64::NAN, f64::INFINITY, 1e20] {
            assert!(count_of(x, "n").is_err(), "{x}");
        }
        assert!(seconds_of(-0.1, "t").is_err());
        assert!(seconds_of(f64::NAN, "t").is_err());
        assert!(iso(1e30).starts_with("unknown"));
        assert!(iso(-5.0).starts_with("unknown"));
        assert!(iso(0.0).starts_with("1970-01-01T00:00:00"));
    }

    #[test]
    fn error_kinds_come_from_a_status_or_its_phrase() {
        assert_eq!(error_kind("HTTP 429: slow down"), ErrorKind::Http(429));
        assert_eq!(error_kind("Service Unavailable"), ErrorKind::Http(503));
        assert_eq!(error_kind("took 1500 ms then reset"), ErrorKind::Stream);
        assert_eq!(error_kind("timed out after 404 s"), ErrorKind::Stream);
    }
}
