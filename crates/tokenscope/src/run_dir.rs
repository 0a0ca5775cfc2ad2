//! The run directory, owned here: a new run claims it (never mixing with,
//! or overwriting, an earlier run unless `--force` clears one), holds space
//! for its `results.json` from the start, and writes `results.json`
//! atomically and `report.html` at the end; a run, its records' figures or
//! a series' points are read back from here too. `requests.jsonl` and
//! `timeseries.jsonl` are appended by their writers (the recorder, the
//! scraper) into the paths this module's directory gives them.

use crate::exit::Exit;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use tokenscope_core::compare::RunValues;
use tokenscope_core::metrics::Aggregator;
use tokenscope_core::record::RequestRecord;
use tokenscope_core::results::RunResults;
use tokenscope_report::html;
pub use tokenscope_report::run_dir::{for_each_record, ReadError, Report, Run, Sweep};

/// What a run directory holds, by name (`docs/results-schema.md`).
pub const RESULTS: &str = "results.json";
pub const REQUESTS: &str = "requests.jsonl";
pub const TIMESERIES: &str = "timeseries.jsonl";
pub const REPORT: &str = "report.html";
pub const SWEEP: &str = "sweep.json";
pub const CONFIG: &str = "config.toml";

/// A series' directory: its `sweep.json` over its points' directories.
pub fn holds_sweep(dir: &Path) -> bool {
    dir.join(SWEEP).exists()
}

/// A run killed before it wrote `results.json` (SIGKILL, a crash): its
/// records are there, its document is not.
pub fn holds_killed_run(dir: &Path) -> bool {
    !dir.join(RESULTS).exists() && !holds_sweep(dir) && dir.join(REQUESTS).exists()
}

/// Writes a series' `sweep.json`.
pub fn write_sweep(dir: &Path, doc: &serde_json::Value) -> anyhow::Result<()> {
    write_json(dir, SWEEP, doc)
}

/// Writes `doc` as pretty JSON to `dir/name` (a series' `sweep.json`, a
/// search's `find.json`, a tune's `tune.json`).
pub fn write_json(dir: &Path, name: &str, doc: &impl serde::Serialize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    let text = serde_json::to_string_pretty(doc)? + "\n";
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// Writes `items` as JSON lines (a simulated run's time series).
pub fn write_jsonl<T: serde::Serialize>(path: &Path, items: &[T]) -> anyhow::Result<()> {
    use std::io::Write;
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for item in items {
        serde_json::to_writer(&mut w, item)?;
        w.write_all(b"\n")?;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes the command's `config.toml` into the run directory it claimed,
/// when it claimed one (`--config RUN/config.toml` repeats the run).
pub fn store_config() -> std::io::Result<()> {
    match crate::config_file::resolved() {
        Some((text, dir)) if dir.is_dir() => std::fs::write(dir.join(CONFIG), text),
        _ => Ok(()),
    }
}

/// `runs/<UTC time>`, with `-2`, `-3`… when a run of the same second has it.
pub fn default_out_dir() -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "-");
    let base = PathBuf::from("runs").join(&stamp);
    (1..)
        .map(|i| match i {
            1 => base.clone(),
            i => PathBuf::from("runs").join(format!("{stamp}-{i}")),
        })
        .find(|d| !d.exists())
        .expect("a free name")
}

/// What a run or sweep directory may hold; `--force` clears only these.
fn is_run_file(name: &str) -> bool {
    matches!(
        name,
        "results.json"
            | "results.json.tmp"
            | "requests.jsonl"
            | "answers.jsonl.gz"
            | "timeseries.jsonl"
            | "report.html"
            | "sweep.json"
            | "sweep.csv"
            | "requests.csv"
            | "profile.json"
            | "config.toml"
            | ".results.reserve"
            | "windows.jsonl"
            | "server.log"
            | "keda.yaml"
            | "hpa.yaml"
            | "find.json"
            | "tune.json"
            | "probe"
    ) || tokenscope_core::segments::segment_of(name).is_some()
        || (name.starts_with("point-") && name[6..].chars().all(|c| c.is_ascii_digit()))
}

/// A run directory must be new or empty, so an earlier run is never
/// overwritten (a `compare` baseline) nor mixed with the new one (its
/// timeseries drawn beside new records). `--force` clears an earlier run
/// first — only a directory that holds nothing but a run's files.
pub fn claim_out_dir(dir: &Path, force: bool) -> anyhow::Result<()> {
    claim(dir, force)?;
    // Only a directory this run may write gets its config.toml.
    crate::config_file::claimed(dir);
    Ok(())
}

fn claim(dir: &Path, force: bool) -> anyhow::Result<()> {
    let entries: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if dir.is_file() => {
            return Err(Exit::usage(format!(
                "--out {}: a file, not a directory ({e})",
                dir.display()
            )))
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    if entries.is_empty() {
        return Ok(());
    }
    let mut shown: Vec<&str> = entries.iter().map(String::as_str).collect();
    shown.sort_unstable();
    shown.truncate(4);
    if !force {
        return Err(Exit::usage(format!(
            "--out {} already holds a run ({}…): pass --force to replace it, or choose another --out",
            dir.display(),
            shown.join(", ")
        )));
    }
    // A tune's setting directory holds its server's log and its search.
    let setting = |n: &str| {
        let d = dir.join(n);
        d.join("find.json").exists() || d.join("server.log").exists()
    };
    let foreign: Vec<&String> = entries
        .iter()
        .filter(|n| !is_run_file(n) && !setting(n))
        .collect();
    if !foreign.is_empty() {
        return Err(Exit::usage(format!(
            "--out {} holds files that are not a tokenscope run ({}); --force clears only a run directory",
            dir.display(),
            foreign.iter().take(4).map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    for name in &entries {
        let path = dir.join(name);
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("--force: removing {}", path.display()))?;
    }
    Ok(())
}

/// Space held from the start of a run for its `results.json`, so a disk
/// that fills during the run still takes the results (a run's is ~6 KB).
const RESERVE: &str = ".results.reserve";

const RESERVE_BYTES: u64 = 256 * 1024;

/// Refuses a run directory on a nearly full filesystem (before any load),
/// then holds [`RESERVE_BYTES`] for the results.
pub fn reserve_output(dir: &Path) -> anyhow::Result<()> {
    if let Some(free) = free_bytes(dir) {
        if free < 2 * RESERVE_BYTES {
            return Err(anyhow::Error::new(Exit::OutputFailed).context(format!(
                "--out {}: only {} KiB free on its filesystem; a run needs room for its records (free some space or choose another --out)",
                dir.display(),
                free / 1024
            )));
        }
    }
    std::fs::write(dir.join(RESERVE), vec![0u8; RESERVE_BYTES as usize])
        .with_context(|| format!("reserving space in {}", dir.display()))
        .map_err(|e| anyhow::Error::new(Exit::OutputFailed).context(format!("{e:#}")))
}

/// Bytes free to this user on the filesystem holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed out-struct.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// Writes `results.json` atomically (temporary file, then rename); on a full
/// disk, gives back the space held by [`reserve_output`] and tries again.
pub fn write_results(dir: &Path, results: &RunResults) -> anyhow::Result<()> {
    let path = dir.join("results.json");
    let tmp = dir.join("results.json.tmp");
    let text = serde_json::to_string_pretty(results)? + "\n";
    let write = || -> std::io::Result<()> {
        std::fs::write(&tmp, &text)?;
        std::fs::rename(&tmp, &path)
    };
    let reserve = dir.join(RESERVE);
    let outcome = write().or_else(|e| {
        let _ = std::fs::remove_file(&tmp);
        if std::fs::remove_file(&reserve).is_ok() {
            write()
        } else {
            Err(e)
        }
    });
    let _ = std::fs::remove_file(&reserve);
    outcome.with_context(|| format!("writing {}", path.display()))
}

/// One finished point of a series.
pub struct Done {
    pub label: String,
    /// Concurrency or requests/s.
    pub load: f64,
    pub results: RunResults,
    /// Its run directory, where the requests can be re-judged.
    pub dir: Option<PathBuf>,
}

/// The points of a series directory, for re-reporting (`tokenscope report`).
pub fn read_series(dir: &Path) -> anyhow::Result<Vec<Done>> {
    let mut done: Vec<Done> = finished_points(dir)?
        .into_iter()
        .filter_map(|(dir, results)| {
            let load = &results.config["load"];
            let (label, level) = match load["mode"].as_str()? {
                "closed" => {
                    let c = load["concurrency"].as_f64()?;
                    (format!("concurrency {c}"), c)
                }
                _ => {
                    let r = load["rate"].as_f64()?;
                    (format!("rate {r}/s"), r)
                }
            };
            Some(Done {
                label,
                load: level,
                results,
                dir: Some(dir),
            })
        })
        .collect();
    done.sort_by(|a, b| a.load.total_cmp(&b.load));
    Ok(done)
}

pub fn write_file(path: PathBuf, text: &str) -> anyhow::Result<PathBuf> {
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Writes `DIR/report.html` for a run or sweep directory.
pub fn write_html(dir: &Path) -> anyhow::Result<PathBuf> {
    let page = match Report::read(dir)? {
        Report::Run(run) => html::run_page(&run),
        Report::Sweep(s) => html::sweep_page(&s),
    };
    write_file(dir.join("report.html"), &page)
}

/// `report.html` at the end of a run: a failure to render is a warning, never
/// a lost run.
pub fn write_html_after_run(dir: &Path, quiet: bool) {
    said_html(write_html(dir), quiet)
}

/// `report.html` of a run whose requests' figures are at hand: written
/// without reading `requests.jsonl` back.
pub fn write_html_of(dir: &Path, results: RunResults, requests: Aggregator, quiet: bool) {
    let page = Run::from_parts(dir, results, requests)
        .map_err(anyhow::Error::from)
        .and_then(|run| write_file(dir.join("report.html"), &html::run_page(&run)));
    said_html(page, quiet)
}

fn said_html(written: anyhow::Result<PathBuf>, quiet: bool) {
    match written {
        Ok(path) if !quiet => eprintln!("tokenscope: report {}", path.display()),
        Ok(_) => {}
        Err(e) => crate::warnings::Warning::NoReportHtml {
            why: format!("{e:#}"),
        }
        .say(false),
    }
}

/// Reads a run directory for `compare`.
pub fn read_run(dir: &Path) -> anyhow::Result<Run> {
    Run::read(dir).map_err(|e| Exit::usage(e.to_string()))
}

/// What the bootstrap resamples of a run, read from its `requests.jsonl` in
/// two streaming passes (its window, then its values): never every record.
pub fn values_of(dir: &std::path::Path) -> anyhow::Result<RunValues> {
    values_where(dir, None)
}

/// [`values_of`] the requests sent to one `--lora` adapter (`None`: all),
/// over the run's whole window, as its rate in results.json is.
pub fn values_where(dir: &std::path::Path, adapter: Option<&str>) -> anyhow::Result<RunValues> {
    let bad = |e: tokenscope_report::run_dir::ReadError| Exit::usage(e.to_string());
    let mut window = None;
    for_each_record(dir, |r| window = RunValues::widen(window, &r)).map_err(bad)?;
    let mut values = RunValues::new(window.unwrap_or((0, 0)));
    let wanted = |r: &RequestRecord| adapter.is_none_or(|a| r.adapter.as_deref() == Some(a));
    for_each_record(dir, |r| {
        if wanted(&r) {
            values.add(&r)
        }
    })
    .map_err(bad)?;
    Ok(values)
}

/// The finished (not partial) points under `dir`, for `--resume`.
pub fn finished_points(dir: &Path) -> anyhow::Result<Vec<(PathBuf, RunResults)>> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(found); // nothing to resume yet
    };
    for entry in entries {
        let path = entry?.path().join("results.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let results: RunResults = serde_json::from_str(&text)
            .with_context(|| format!("--resume: reading {}", path.display()))?;
        if !results.partial {
            found.push((
                path.parent().expect("a file in a directory").into(),
                results,
            ));
        }
    }
    Ok(found)
}

/// Whether a finished point's `config` describes the same load and workload.
pub fn same_point(old: &serde_json::Value, new: &serde_json::Value) -> bool {
    [
        "load",
        "requests",
        "duration_s",
        "warmup",
        "ramp_up_s",
        "input_tokens",
        "output_tokens",
        "shared_prefix",
        "seed",
    ]
    .iter()
    .all(|k| old[k] == new[k])
}

pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ts-run-dir-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_run_directory_is_never_overwritten_unless_forced() {
        let dir = scratch("claim");
        claim(&dir, false).expect("an empty directory is free");
        std::fs::write(dir.join("results.json"), "{}").unwrap();
        let err = claim(&dir, false).unwrap_err().to_string();
        assert!(err.contains("--force"), "{err}");
        claim(&dir, true).expect("--force clears a run");
        assert!(!dir.join("results.json").exists());
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let err = claim(&dir, true).unwrap_err().to_string();
        assert!(err.contains("not a tokenscope run"), "{err}");
        assert!(dir.join("notes.txt").exists(), "a foreign file is kept");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
