//! `requests.jsonl`: one line per finished request, appended and flushed as it
//! finishes, on a thread of its own so disk never stalls the load loop. A crash
//! or Ctrl-C loses nothing that completed.
//!
//! Records are not kept: each is written, then taken into the run's figures
//! (an [`Aggregator`]) and dropped, so memory does not grow with the run.
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

impl Recorder {
    /// Creates (truncates) `path` and starts the writer thread, which takes
    /// each record into `figures` once written; a failed write cancels `on_failure`.
    pub fn create(
        path: &Path,
        on_failure: CancellationToken,
        figures: Aggregator,
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
            .spawn(move || write_all(file, &path, rx, on_failure, figures))
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

/// The writer thread: a line per record, each written whole with one call.
fn write_all(
    mut file: File,
    path: &Path,
    rx: mpsc::Receiver<RequestRecord>,
    on_failure: CancellationToken,
    figures: Aggregator,
) -> Recorded {
    let mut done = Recorded {
        figures,
        total: 0,
        on_disk: 0,
        error: None,
    };
    let mut written: u64 = 0;
    let mut line = Vec::with_capacity(4096);
    for r in rx {
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
        done.figures.add(&r);
        done.total += 1;
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

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
            stop.clone(),
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
