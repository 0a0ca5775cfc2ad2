//! `requests.jsonl`: one line per finished request, appended and flushed as it
//! finishes, on a thread of its own so disk never stalls the load loop. A crash
//! or Ctrl-C loses nothing that completed.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use tokenscope_core::record::RequestRecord;

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

pub struct Recorder {
    sink: RecordSink,
    writer: JoinHandle<Result<Vec<RequestRecord>, RecorderError>>,
}

impl Recorder {
    /// Creates (truncates) `path` and starts the writer thread.
    pub fn create(path: &Path) -> Result<Recorder, RecorderError> {
        let io = |source| RecorderError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::create(path).map_err(io)?;
        let path = path.to_owned();
        let (tx, rx) = mpsc::channel::<RequestRecord>();
        let writer = std::thread::Builder::new()
            .name("ts-recorder".into())
            .spawn(move || {
                let io = |source| RecorderError::Io {
                    path: path.clone(),
                    source,
                };
                let mut out = BufWriter::new(file);
                let mut all = Vec::new();
                for r in rx {
                    serde_json::to_writer(&mut out, &r).map_err(|e| io(e.into()))?;
                    out.write_all(b"\n").map_err(io)?;
                    out.flush().map_err(io)?;
                    all.push(r);
                }
                Ok(all)
            })
            .map_err(io)?;
        Ok(Recorder {
            sink: RecordSink { tx },
            writer,
        })
    }

    pub fn sink(&self) -> RecordSink {
        self.sink.clone()
    }

    /// Waits until every record sent so far is on disk; returns them all in finishing order.
    /// Every clone of the sink must be dropped first.
    pub fn finish(self) -> Result<Vec<RequestRecord>, RecorderError> {
        drop(self.sink);
        self.writer
            .join()
            .expect("the recorder thread does not panic")
    }
}
