//! `requests.jsonl`: one line per finished request, appended and flushed as it
//! finishes, on a thread of its own so disk never stalls the load loop. A crash
//! or Ctrl-C loses nothing that completed.
//!
//! Records are not kept: each is written, then taken into the run's figures
//! (an [`Aggregator`]) and dropped, so memory does not grow with the run.
//!
//! Answers' texts (`--keep-text`) go apart, into `answers.jsonl.gz` beside
//! it (`{"id", "text"}` a line, gzip), so the records stay short and the
//! texts compress.
//!
//! When a write fails (a full disk), the line is cut back so the file ends on
//! a whole record, the run is told to stop (`on_failure`), and every later
//! record still counts in the figures: [`Recorded`] says how many reached
//! the disk and why the rest did not.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use tokenscope_core::metrics::Aggregator;
use tokenscope_core::record::RequestRecord;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The sending side; cheap to clone into every request task.
#[derive(Clone)]
pub struct RecordSink {
    tx: mpsc::Sender<RequestRecord>,
}

impl RecordSink {
    pub fn record(&self, r: RequestRecord) {
        // The writer only stops after every sink is dropped.
        let _ = self.tx.send(r);
    }
}

/// The figures of every record of the run, and how many are on disk.
pub struct Recorded {
    /// Every record's figures (those after a write failure too).
    pub figures: Aggregator,
    /// Records received, in all.
    pub total: usize,
    /// The first `on_disk` of them (in finishing order) are whole lines of `requests.jsonl`.
    pub on_disk: usize,
    /// Why the rest are not.
    pub error: Option<RecorderError>,
}

pub struct Recorder {
    sink: RecordSink,
    writer: JoinHandle<Recorded>,
}

/// Shown every finished record on the writer's thread, never the load's
/// (`--serve-metrics`: the live figures a scraper reads).
pub type Tap = std::sync::Arc<dyn Fn(&RequestRecord) + Send + Sync>;

impl Recorder {
    /// Creates (truncates) `path` and starts the writer thread, which takes
    /// each record into `figures` once written; a failed write cancels `on_failure`.
    pub fn create(
        path: &Path,
        on_failure: CancellationToken,
        figures: Aggregator,
    ) -> Result<Recorder, RecorderError> {
        Recorder::create_with(path, on_failure, figures, None)
    }

    /// [`Recorder::create`], each record also shown to `tap`.
    pub fn create_with(
        path: &Path,
        on_failure: CancellationToken,
        figures: Aggregator,
        tap: Option<Tap>,
    ) -> Result<Recorder, RecorderError> {
        let io = |source| RecorderError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::create(path).map_err(io)?;
        let path = path.to_owned();
        let (tx, rx) = mpsc::channel::<RequestRecord>();
        let writer = std::thread::Builder::new()
            .name("ts-recorder".into())
            .spawn(move || write_all(file, &path, rx, (on_failure, tap), figures))
            .map_err(io)?;
        Ok(Recorder {
            sink: RecordSink { tx },
            writer,
        })
    }

    pub fn sink(&self) -> RecordSink {
        self.sink.clone()
    }

    /// Waits until every record sent so far is written and counted; returns
    /// the figures. Every clone of the sink must be dropped first.
    pub fn finish(self) -> Recorded {
        drop(self.sink);
        self.writer
            .join()
            .expect("the recorder thread does not panic")
    }
}

/// The file answers' texts go to, beside `requests.jsonl`.
pub const ANSWERS: &str = "answers.jsonl.gz";

/// `answers.jsonl.gz`, opened at the first text: a gzip stream flushed
/// every [`Texts::FLUSH_EVERY`] texts, so a crash loses at most those.
struct Texts {
    path: PathBuf,
    gz: Option<flate2::write::GzEncoder<File>>,
    since_flush: u32,
}

impl Texts {
    const FLUSH_EVERY: u32 = 64;

    fn new(records: &Path) -> Texts {
        Texts {
            path: records.with_file_name(ANSWERS),
            gz: None,
            since_flush: 0,
        }
    }

    fn write(&mut self, id: u64, text: &str) -> std::io::Result<()> {
        let gz = match &mut self.gz {
            Some(gz) => gz,
            None => {
                let file = File::create(&self.path)?;
                self.gz.insert(flate2::write::GzEncoder::new(
                    file,
                    flate2::Compression::default(),
                ))
            }
        };
        let line = serde_json::json!({"id": id, "text": text}).to_string();
        gz.write_all(line.as_bytes())?;
        gz.write_all(b"\n")?;
        self.since_flush += 1;
        if self.since_flush >= Self::FLUSH_EVERY {
            self.since_flush = 0;
            gz.flush()?;
        }
        Ok(())
    }

    fn finish(self) -> std::io::Result<()> {
        match self.gz {
            Some(gz) => gz.finish().map(drop),
            None => Ok(()),
        }
    }
}

/// The writer thread: a line per record, each written whole with one call.
fn write_all(
    mut file: File,
    path: &Path,
    rx: mpsc::Receiver<RequestRecord>,
    (on_failure, tap): (CancellationToken, Option<Tap>),
    figures: Aggregator,
) -> Recorded {
    let mut texts = Texts::new(path);
    let mut done = Recorded {
        figures,
        total: 0,
        on_disk: 0,
        error: None,
    };
    let mut written: u64 = 0;
    let mut line = Vec::with_capacity(4096);
    for mut r in rx {
        if let Some(text) = r.answer_text.take().filter(|_| done.error.is_none()) {
            if let Err(source) = texts.write(r.id, &text) {
                done.error = Some(RecorderError::Io {
                    path: texts.path.clone(),
                    source,
                });
                on_failure.cancel();
            }
        }
        if done.error.is_none() {
            line.clear();
            let wrote = serde_json::to_writer(&mut line, &r)
                .map_err(std::io::Error::from)
                .and_then(|()| {
                    line.push(b'\n');
                    file.write_all(&line)
                });
            match wrote {
                Ok(()) => {
                    written += line.len() as u64;
                    done.on_disk += 1;
                }
                Err(source) => {
                    // Cut a torn line back to the last whole record.
                    let _ = file.set_len(written);
                    done.error = Some(RecorderError::Io {
                        path: path.to_owned(),
                        source,
                    });
                    on_failure.cancel();
                }
            }
        }
        if let Some(tap) = &tap {
            tap(&r);
        }
        done.figures.add(&r);
        done.total += 1;
    }
    let path = texts.path.clone();
    if let (Err(source), None) = (texts.finish(), &done.error) {
        done.error = Some(RecorderError::Io { path, source });
    }
    done
}

/// The texts of `answers.jsonl.gz` in `dir`, by request id (empty when
/// the run kept none). A torn end (a crash) keeps what came before it.
pub fn read_texts(dir: &Path) -> std::collections::HashMap<u64, String> {
    use std::io::BufRead;
    let mut out = std::collections::HashMap::new();
    let Ok(file) = File::open(dir.join(ANSWERS)) else {
        return out;
    };
    let lines = std::io::BufReader::new(flate2::read::GzDecoder::new(file)).lines();
    for line in lines.map_while(Result::ok) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            break;
        };
        if let (Some(id), Some(text)) = (v["id"].as_u64(), v["text"].as_str()) {
            out.insert(id, text.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_texts_go_to_their_own_compressed_file_and_read_back() {
        let dir = std::env::temp_dir().join(format!("ts-texts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("requests.jsonl");
        let rec = Recorder::create(&path, CancellationToken::new(), Aggregator::new(None, None));
        let rec = rec.unwrap();
        for id in 0..100 {
            let mut r = RequestRecord::sent(id, 0, 0);
            r.answer_text = Some(format!(" the answer{}", " of".repeat(50 + id as usize)));
            rec.sink().record(r);
        }
        let done = rec.finish();
        assert!(done.error.is_none());
        let lines = std::fs::read_to_string(&path).unwrap();
        assert!(
            !lines.contains("answer_text"),
            "texts stay out of the records"
        );
        let texts = read_texts(&dir);
        assert_eq!(texts.len(), 100);
        assert!(texts[&7].ends_with(&" of".repeat(57)));
        let gz = std::fs::metadata(dir.join(ANSWERS)).unwrap().len();
        assert!(gz < 100 * 150 / 4, "compressed: {gz} bytes");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_stops_the_run_and_keeps_every_record() {
        // /dev/full: every write fails with "no space left on device".
        let Ok(file) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            panic!("/dev/full is part of every Linux system");
        };
        let (tx, rx) = mpsc::channel();
        let stop = CancellationToken::new();
        for id in 0..3 {
            tx.send(RequestRecord::sent(id, 0, 0)).unwrap();
        }
        drop(tx);
        let mut done = write_all(
            file,
            Path::new("/dev/full"),
            rx,
            (stop.clone(), None),
            Aggregator::new(None, None),
        );
        assert!(stop.is_cancelled(), "the run is told to stop");
        assert_eq!(done.on_disk, 0);
        assert_eq!(done.total, 3);
        assert_eq!(
            done.figures.finish().counts.requests,
            3,
            "every record counted"
        );
        assert!(done.error.unwrap().to_string().contains("/dev/full"));
    }
}
