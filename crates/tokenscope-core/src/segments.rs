//! Where a run's records are on disk: `requests.jsonl`, and in a long run
//! the segments rotated out of it before it, oldest first.
//!
//! A run rotates its records (`--rotate-records SIZE`) so a soak or a
//! canary keeps a compact directory: when `requests.jsonl` reaches the
//! size it is renamed `requests.000001.jsonl` (then `…000002…`), that file
//! is compressed to `requests.000001.jsonl.gz` and removed once the copy is
//! whole. Readers take the segments in order, then `requests.jsonl`: a
//! plain segment wins over its `.gz` (a crash mid-compression leaves both,
//! the plain one whole).

use std::path::{Path, PathBuf};

/// The records being written.
pub const REQUESTS: &str = "requests.jsonl";

/// A rotated segment's name before compression: `requests.000042.jsonl`.
pub fn plain_segment(n: u32) -> String {
    format!("requests.{n:06}.jsonl")
}

/// A rotated segment's name once compressed: `requests.000042.jsonl.gz`.
pub fn compressed_segment(n: u32) -> String {
    format!("{}.gz", plain_segment(n))
}

/// A segment's number, from either of its names.
pub fn segment_number(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("requests.")?;
    let digits = digits
        .strip_suffix(".jsonl.gz")
        .or_else(|| digits.strip_suffix(".jsonl"))?;
    (digits.len() == 6).then(|| digits.parse().ok()).flatten()
}

/// One file of a run's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFile {
    pub path: PathBuf,
    pub gzip: bool,
}

/// The segments of `dir` in order, each once (a plain file over its
/// `.gz`), then `requests.jsonl` when it exists.
pub fn record_files(dir: &Path) -> Vec<RecordFile> {
    let mut numbers: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| segment_number(&e.file_name().to_string_lossy()))
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    let mut files: Vec<RecordFile> = numbers
        .into_iter()
        .map(|n| {
            let plain = dir.join(plain_segment(n));
            match plain.exists() {
                true => RecordFile {
                    path: plain,
                    gzip: false,
                },
                false => RecordFile {
                    path: dir.join(compressed_segment(n)),
                    gzip: true,
                },
            }
        })
        .collect();
    let live = dir.join(REQUESTS);
    if live.exists() || files.is_empty() {
        files.push(RecordFile {
            path: live,
            gzip: false,
        });
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_come_in_order_plain_over_compressed_then_the_live_file() {
        let dir = std::env::temp_dir().join(format!("ts-segments-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "requests.000002.jsonl.gz",
            "requests.000010.jsonl.gz",
            "requests.000001.jsonl.gz",
            "requests.000002.jsonl",
            "requests.jsonl",
            "requests.7.jsonl.gz",
            "results.json",
        ] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        let names: Vec<(String, bool)> = record_files(&dir)
            .into_iter()
            .map(|f| (f.path.file_name().unwrap().to_string_lossy().into(), f.gzip))
            .collect();
        let want = [
            ("requests.000001.jsonl.gz", true),
            ("requests.000002.jsonl", false),
            ("requests.000010.jsonl.gz", true),
            ("requests.jsonl", false),
        ];
        assert_eq!(names, want.map(|(n, g)| (n.to_string(), g)));
        std::fs::remove_dir_all(&dir).unwrap();
        // A directory with nothing yet names the live file (its reader says it is missing).
        assert_eq!(record_files(&dir).len(), 1);
    }
}
