//! Where a run's records are on disk: `requests.jsonl`, and in a long run
//! the segments rotated out of it before it, oldest first.
//!
//! A run rotates its records (`--rotate-records SIZE`) so a soak or a
//! canary keeps a compact directory: when `requests.jsonl` reaches the
//! size it is renamed `requests.000001.jsonl` (then `…000002…`), that file
//! is compressed to `requests.000001.jsonl.zst` (zstd) and removed once the
//! copy is whole. Readers take the segments in order, then
//! `requests.jsonl`: a plain segment wins over its compressed copy (a
//! crash mid-compression leaves both, the plain one whole). Runs made
//! before zstd have gzip segments (`.jsonl.gz`), read the same way.

use std::path::{Path, PathBuf};

/// The records being written.
pub const REQUESTS: &str = "requests.jsonl";

/// A rotated segment's name before compression: `requests.000042.jsonl`.
pub fn plain_segment(n: u32) -> String {
    format!("requests.{n:06}.jsonl")
}

/// A rotated segment's name once compressed: `requests.000042.jsonl.zst`.
pub fn compressed_segment(n: u32) -> String {
    format!("{}.zst", plain_segment(n))
}

/// How a file of records is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Plain,
    /// Segments of runs made before zstd.
    Gzip,
    Zstd,
}

impl Encoding {
    const SUFFIXES: [(&'static str, Encoding); 3] = [
        (".jsonl.zst", Encoding::Zstd),
        (".jsonl.gz", Encoding::Gzip),
        (".jsonl", Encoding::Plain),
    ];
}

/// A segment's number and encoding, from any of its names.
pub fn segment_of(name: &str) -> Option<(u32, Encoding)> {
    let rest = name.strip_prefix("requests.")?;
    let (digits, encoding) = Encoding::SUFFIXES
        .iter()
        .find_map(|&(suffix, e)| Some((rest.strip_suffix(suffix)?, e)))?;
    let n = digits.parse().ok()?;
    (digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit())).then_some((n, encoding))
}

/// One file of a run's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFile {
    pub path: PathBuf,
    pub encoding: Encoding,
}

/// The segments of `dir` in order, each once (a plain file over a
/// compressed one, zstd over gzip), then `requests.jsonl` when it exists.
pub fn record_files(dir: &Path) -> Vec<RecordFile> {
    let mut found: Vec<(u32, Encoding, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let (n, encoding) = segment_of(&e.file_name().to_string_lossy())?;
            Some((n, encoding, e.path()))
        })
        .collect();
    let rank = |e: Encoding| match e {
        Encoding::Plain => 0,
        Encoding::Zstd => 1,
        Encoding::Gzip => 2,
    };
    found.sort_by_key(|&(n, e, _)| (n, rank(e)));
    found.dedup_by_key(|f| f.0);
    let mut files: Vec<RecordFile> = found
        .into_iter()
        .map(|(_, encoding, path)| RecordFile { path, encoding })
        .collect();
    let live = dir.join(REQUESTS);
    if live.exists() || files.is_empty() {
        files.push(RecordFile {
            path: live,
            encoding: Encoding::Plain,
        });
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_come_in_order_plain_over_zstd_over_gzip_then_the_live_file() {
        let dir = std::env::temp_dir().join(format!("ts-segments-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "requests.000002.jsonl.zst",
            "requests.000010.jsonl.gz",
            "requests.000001.jsonl.gz",
            "requests.000002.jsonl",
            "requests.000003.jsonl.gz",
            "requests.000003.jsonl.zst",
            "requests.jsonl",
            "requests.7.jsonl.gz",
            "requests.00000x.jsonl",
            "results.json",
        ] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        let names: Vec<(String, Encoding)> = record_files(&dir)
            .into_iter()
            .map(|f| {
                (
                    f.path.file_name().unwrap().to_string_lossy().into(),
                    f.encoding,
                )
            })
            .collect();
        let want = [
            ("requests.000001.jsonl.gz", Encoding::Gzip),
            ("requests.000002.jsonl", Encoding::Plain),
            ("requests.000003.jsonl.zst", Encoding::Zstd),
            ("requests.000010.jsonl.gz", Encoding::Gzip),
            ("requests.jsonl", Encoding::Plain),
        ];
        assert_eq!(names, want.map(|(n, g)| (n.to_string(), g)));
        std::fs::remove_dir_all(&dir).unwrap();
        // A directory with nothing yet names the live file (its reader says it is missing).
        assert_eq!(record_files(&dir).len(), 1);
    }
}
