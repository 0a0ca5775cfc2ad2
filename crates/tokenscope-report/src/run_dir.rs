//! Reading what `bench` and `sweep` wrote: a run directory (`results.json`,
//! `requests.jsonl`, `timeseries.jsonl`) or a sweep directory (`sweep.json`
//! and its `point-NN/` runs).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use thiserror::Error;
use tokenscope_core::analysis::Analysis;
use tokenscope_core::metrics::Aggregator;
use tokenscope_core::record::RequestRecord;
use tokenscope_core::results::RunResults;

#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {source}")]
    Json {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("{0}: neither a run directory (results.json) nor a sweep directory (sweep.json)")]
    NotARun(PathBuf),
}

fn read(path: &Path) -> Result<String, ReadError> {
    std::fs::read_to_string(path).map_err(|source| ReadError::Io {
        path: path.into(),
        source,
    })
}

fn parse<T: serde::de::DeserializeOwned>(
    path: &Path,
    line: usize,
    text: &str,
) -> Result<T, ReadError> {
    serde_json::from_str(text).map_err(|source| ReadError::Json {
        path: path.into(),
        line,
        source,
    })
}

/// One run: its results, its requests' figures, and the sampled time series.
pub struct Run {
    pub dir: PathBuf,
    pub results: RunResults,
    /// `requests.jsonl` read once, one record at a time, into its figures
    /// (distributions, tokens per time slot, each request's span): memory
    /// that does not grow with the run's tokens.
    pub requests: Aggregator,
    /// `timeseries.jsonl` rows (absent when nothing was scraped).
    pub timeseries: Vec<serde_json::Value>,
}

impl Run {
    pub fn read(dir: &Path) -> Result<Run, ReadError> {
        let results_path = dir.join("results.json");
        let results = parse(&results_path, 1, &read(&results_path)?)?;
        let mut requests = Aggregator::new(None, None);
        for_each_record(dir, |r| requests.add(&r))?;
        Run::from_parts(dir, results, requests)
    }

    /// A run whose results and requests' figures are at hand (the end of a
    /// run): only `timeseries.jsonl` is read.
    pub fn from_parts(
        dir: &Path,
        results: RunResults,
        requests: Aggregator,
    ) -> Result<Run, ReadError> {
        let ts_path = dir.join("timeseries.jsonl");
        let timeseries = if ts_path.exists() {
            jsonl(&ts_path)?
        } else {
            Vec::new()
        };
        Ok(Run {
            dir: dir.into(),
            results,
            requests,
            timeseries,
        })
    }

    /// `requests.jsonl` alone, every record in memory (a torn last line is
    /// skipped). [`for_each_record`] reads it without holding it.
    pub fn read_records(dir: &Path) -> Result<Vec<RequestRecord>, ReadError> {
        let mut all = Vec::new();
        for_each_record(dir, |r| all.push(r))?;
        Ok(all)
    }
}

/// Reads the run's records a line at a time (its rotated segments first,
/// zstd, gzip or plain, then `requests.jsonl`: [`tokenscope_core::segments`]),
/// handing each record to `f`; returns how many there were. A torn last
/// line of a file (a crash mid-write) is skipped; any other bad line is an
/// error naming it.
pub fn for_each_record(dir: &Path, f: impl FnMut(RequestRecord)) -> Result<usize, ReadError> {
    for_each_as(dir, f)
}

/// [`for_each_record`], each line read as `T`: a view of the fields a
/// reader needs (the rest skipped unparsed — a record's chunks are most of
/// its line), where the whole record is not wanted.
pub fn for_each_as<T: serde::de::DeserializeOwned>(
    dir: &Path,
    mut f: impl FnMut(T),
) -> Result<usize, ReadError> {
    let mut n = 0;
    for file in tokenscope_core::segments::record_files(dir) {
        n += records_of(&file, &mut f)?;
    }
    Ok(n)
}

/// One file of records, each handed to `f`.
fn records_of<T: serde::de::DeserializeOwned>(
    file: &tokenscope_core::segments::RecordFile,
    f: &mut impl FnMut(T),
) -> Result<usize, ReadError> {
    let path = &file.path;
    let io = |source| ReadError::Io {
        path: path.clone(),
        source,
    };
    let raw = std::fs::File::open(path).map_err(io)?;
    use tokenscope_core::segments::Encoding;
    let mut reader: Box<dyn BufRead> = match file.encoding {
        Encoding::Zstd => Box::new(std::io::BufReader::new(
            zstd::stream::read::Decoder::new(raw).map_err(io)?,
        )),
        Encoding::Gzip => Box::new(std::io::BufReader::new(flate2::read::GzDecoder::new(raw))),
        Encoding::Plain => Box::new(std::io::BufReader::new(raw)),
    };
    let (mut line, mut n, mut number) = (String::new(), 0, 0);
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(io)? == 0 {
            return Ok(n);
        }
        number += 1;
        if line.trim().is_empty() {
            continue;
        }
        match parse(path, number, &line) {
            Ok(r) => {
                f(r);
                n += 1;
            }
            Err(_) if !line.ends_with('\n') => return Ok(n), // torn last line
            Err(e) => return Err(e),
        }
    }
}

/// Lines of JSON; a torn last line (a crash mid-write) is skipped, any other
/// bad line is an error naming it.
fn jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, ReadError> {
    let text = read(path)?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        match parse(path, i + 1, line) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => break,
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// One point of a sweep as `sweep.json` holds it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct SweepPoint {
    pub point: String,
    pub load: f64,
    pub results: RunResults,
}

/// A sweep: its points and analysis, and where each point's run directory is.
pub struct Sweep {
    pub dir: PathBuf,
    pub points: Vec<SweepPoint>,
    pub analysis: Analysis,
    /// Per point (same order): the run directory, when found.
    pub point_dirs: Vec<Option<PathBuf>>,
}

#[derive(serde::Deserialize)]
struct SweepDoc {
    points: Vec<SweepPoint>,
    analysis: Analysis,
}

impl Sweep {
    pub fn read(dir: &Path) -> Result<Sweep, ReadError> {
        let path = dir.join("sweep.json");
        let doc: SweepDoc = parse(&path, 1, &read(&path)?)?;
        // Point directories hold results.json whose started_at is unique.
        let mut dirs: Vec<(PathBuf, String)> = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let p = e.path().join("results.json");
                if let Ok(text) = std::fs::read_to_string(&p) {
                    if let Ok(r) = serde_json::from_str::<RunResults>(&text) {
                        dirs.push((e.path(), r.started_at));
                    }
                }
            }
        }
        let point_dirs = doc
            .points
            .iter()
            .map(|p| {
                dirs.iter()
                    .find(|(_, started)| *started == p.results.started_at)
                    .map(|(d, _)| d.clone())
            })
            .collect();
        Ok(Sweep {
            dir: dir.into(),
            points: doc.points,
            analysis: doc.analysis,
            point_dirs,
        })
    }
}

/// What a directory holds.
pub enum Report {
    Run(Box<Run>),
    Sweep(Box<Sweep>),
}

impl Report {
    pub fn read(dir: &Path) -> Result<Report, ReadError> {
        if dir.join("sweep.json").exists() {
            Ok(Report::Sweep(Box::new(Sweep::read(dir)?)))
        } else if dir.join("results.json").exists() {
            Ok(Report::Run(Box::new(Run::read(dir)?)))
        } else {
            Err(ReadError::NotARun(dir.into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A run made before zstd (gzip segments) and one after read alike: the
    /// segments in order, a plain one over its compressed copy, then the
    /// live file; a segment torn mid-compression does not lose its records.
    #[test]
    fn gzip_and_zstd_segments_read_in_order_before_the_live_file() {
        let dir = std::env::temp_dir().join(format!("ts-read-segments-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let line = |id: u64| {
            let r = RequestRecord::sent(id, id, id);
            format!("{}\n", serde_json::to_string(&r).unwrap())
        };
        let lines = |ids: std::ops::Range<u64>| ids.map(line).collect::<String>();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(lines(0..3).as_bytes()).unwrap();
        std::fs::write(dir.join("requests.000001.jsonl.gz"), gz.finish().unwrap()).unwrap();
        let zst = zstd::stream::encode_all(lines(3..6).as_bytes(), 1).unwrap();
        std::fs::write(dir.join("requests.000002.jsonl.zst"), zst).unwrap();
        // Compression cut short: the plain segment is whole and wins.
        std::fs::write(dir.join("requests.000003.jsonl.zst"), b"\x28\xb5\x2f").unwrap();
        std::fs::write(dir.join("requests.000003.jsonl"), lines(6..8)).unwrap();
        std::fs::write(dir.join("requests.jsonl"), lines(8..9)).unwrap();
        let ids: Vec<u64> = Run::read_records(&dir)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, (0..9).collect::<Vec<_>>());
        // A segment that is not zstd at all: an error naming the file.
        std::fs::remove_file(dir.join("requests.000003.jsonl")).unwrap();
        std::fs::write(dir.join("requests.000003.jsonl.zst"), b"not zstd at all").unwrap();
        let e = Run::read_records(&dir).unwrap_err().to_string();
        assert!(e.contains("requests.000003.jsonl.zst"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
