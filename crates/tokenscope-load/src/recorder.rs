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
//!
//! A long run keeps its directory compact: `requests.jsonl` is rotated into
//! compressed segments ([`Rotation`], [`tokenscope_core::segments`]), the
//! oldest removed past a budget, and each window's figures are written to
//! `windows.jsonl` ([`tokenscope_core::windows`]).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use tokenscope_core::metrics::Aggregator;
use tokenscope_core::record::RequestRecord;
use tokenscope_core::windows::{WindowSummary, Windows};
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
    tx: Tx,
}

/// A load never waits for the disk (unbounded); a simulation, which makes
/// records faster than any disk takes them, waits (bounded).
#[derive(Clone)]
enum Tx {
    Unbounded(mpsc::Sender<Vec<RequestRecord>>),
    Bounded(mpsc::SyncSender<Vec<RequestRecord>>),
}

impl RecordSink {
    pub fn record(&self, r: RequestRecord) {
        self.record_all(vec![r]);
    }

    /// Several records in one hand-over: a producer that makes them in a
    /// tight loop (a simulation) wakes the writer once a batch, not once a
    /// record (a futex wake and wait each, measured at 15 % of a plan's CPU).
    pub fn record_all(&self, batch: Vec<RequestRecord>) {
        // The writer only stops after every sink is dropped.
        let _ = match &self.tx {
            Tx::Unbounded(tx) => tx.send(batch),
            Tx::Bounded(tx) => tx.send(batch),
        };
    }
}

/// `--rotate-records` and `--keep-records`: when `requests.jsonl` is
/// rotated into a compressed segment, and how many bytes of segments are
/// kept (the oldest removed first; `None`: all).
#[derive(Debug, Clone, Copy)]
pub struct Rotation {
    pub segment_bytes: u64,
    pub keep_bytes: Option<u64>,
}

/// What rotation did over the run.
#[derive(Debug, Clone, Default)]
pub struct Rotated {
    /// Segments rotated out of `requests.jsonl`.
    pub segments: u32,
    /// Of them, removed to keep under the budget, with their records.
    pub removed_segments: u32,
    pub removed_records: u64,
    /// A segment that could not be compressed or removed (the run goes on).
    pub error: Option<String>,
}

/// What a recorder does besides writing records.
#[derive(Default)]
pub struct Options {
    /// Shown every record (`--serve-metrics`, `--otlp-endpoint`).
    pub tap: Option<Tap>,
    pub rotation: Option<Rotation>,
    /// Windows of this many µs summarised in `windows.jsonl`, each also
    /// shown to the window tap; goodput judged by the SLO.
    pub windows: Option<(u64, Option<tokenscope_core::slo::Slo>)>,
    pub window_tap: Option<WindowTap>,
    /// Hand-overs (a record, or a batch of them) waiting to be written, at
    /// most (a producer that must not outrun the disk: a simulation);
    /// `None`: the load never waits.
    pub bounded: Option<usize>,
    /// Each batch handed back once written and counted, for the producer
    /// to drop: a simulation's records are freed on the thread that made
    /// them, where glibc's allocator takes no lock of another thread's
    /// arena (that contention was 5 % of a plan's CPU). A batch the
    /// producer is not taking is dropped here.
    pub hand_back: Option<mpsc::SyncSender<Vec<RequestRecord>>>,
    /// `--stop-on`: the rules judged on each record; the first to trip
    /// stops the run (`on_failure`) and is kept in [`Recorded::stopped`].
    pub breaker: Option<tokenscope_core::breaker::Breaker>,
}

/// Shown each window's figures as it closes (the live exporter's rolling percentiles).
pub type WindowTap = std::sync::Arc<dyn Fn(&WindowSummary) + Send + Sync>;

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
    /// With a [`Rotation`]: the segments made and removed.
    pub rotated: Rotated,
    /// The `--stop-on` rule that stopped the run, when one did.
    pub stopped: Option<tokenscope_core::breaker::Tripped>,
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
        Recorder::create_with(path, on_failure, figures, Options::default())
    }

    /// [`Recorder::create`] with taps, rotation and windows.
    pub fn create_with(
        path: &Path,
        on_failure: CancellationToken,
        figures: Aggregator,
        options: Options,
    ) -> Result<Recorder, RecorderError> {
        let io = |source| RecorderError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::create(path).map_err(io)?;
        let path = path.to_owned();
        let (tx, rx) = match options.bounded {
            Some(n) => {
                let (tx, rx) = mpsc::sync_channel::<Vec<RequestRecord>>(n);
                (Tx::Bounded(tx), rx)
            }
            None => {
                let (tx, rx) = mpsc::channel::<Vec<RequestRecord>>();
                (Tx::Unbounded(tx), rx)
            }
        };
        let writer = std::thread::Builder::new()
            .name("ts-recorder".into())
            .spawn(move || write_all(file, &path, rx, (on_failure, options), figures))
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

/// `requests.jsonl` as it is written: its bytes and records so far, and
/// with a [`Rotation`] the segments made of it.
struct Lines {
    file: File,
    path: PathBuf,
    written: u64,
    in_segment: u64,
    rotation: Option<(Rotation, Compressor)>,
}

impl Lines {
    /// Writes the lines of a hand-over's `records` (serialised into
    /// `lines`, reused so a long run allocates no line per record) with one
    /// call: a load hands its records over one at a time, a simulation 64.
    /// A failed write is cut back to the last whole record before them.
    fn write(&mut self, lines: &[u8], records: u64) -> std::io::Result<()> {
        if let Err(e) = self.file.write_all(lines) {
            let _ = self.file.set_len(self.written);
            return Err(e);
        }
        self.written += lines.len() as u64;
        self.in_segment += records;
        Ok(())
    }

    /// Rotates when the segment is full (after the lines are on disk, so a
    /// failed rotation never counts them as lost).
    fn rotate_if_full(&mut self) -> std::io::Result<()> {
        match &self.rotation {
            Some((r, _)) if self.written >= r.segment_bytes => self.rotate(),
            _ => Ok(()),
        }
    }

    /// `requests.jsonl` becomes the next plain segment, handed to the
    /// compressor; a new `requests.jsonl` takes the following records.
    fn rotate(&mut self) -> std::io::Result<()> {
        let Some((_, compressor)) = &mut self.rotation else {
            return Ok(());
        };
        let n = compressor.made + 1;
        let plain = self
            .path
            .with_file_name(tokenscope_core::segments::plain_segment(n));
        std::fs::rename(&self.path, &plain)?;
        self.file = File::create(&self.path)?;
        compressor.send(n, plain, self.in_segment);
        self.written = 0;
        self.in_segment = 0;
        Ok(())
    }

    fn finish(self) -> Rotated {
        self.rotation
            .map_or_else(Rotated::default, |(_, c)| c.finish())
    }
}

/// Lines serialised and not yet written: a hand-over's, written with one
/// call (a simulation hands over 64 records, a load one; ext4's cost a
/// `write` was a tenth of a simulated plan), or sooner once they pass
/// [`Pending::MAX_BYTES`], so long records never pile up in memory.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    records: u64,
}

impl Pending {
    const MAX_BYTES: usize = 1 << 20;

    fn add(&mut self, r: &RequestRecord) -> std::io::Result<()> {
        let start = self.bytes.len();
        if let Err(e) = serde_json::to_writer(&mut self.bytes, r) {
            self.bytes.truncate(start);
            return Err(e.into());
        }
        self.bytes.push(b'\n');
        self.records += 1;
        Ok(())
    }

    fn full(&self) -> bool {
        self.bytes.len() >= Self::MAX_BYTES
    }

    /// Writes the pending lines and counts them `on_disk` once they are
    /// there, then rotates if the segment is full (a failed rotation never
    /// counts them as lost). Nothing pending: nothing to do.
    fn write_to(&mut self, lines: &mut Lines, on_disk: &mut usize) -> std::io::Result<()> {
        if self.records == 0 {
            return Ok(());
        }
        let wrote = lines.write(&self.bytes, self.records);
        let records = std::mem::take(&mut self.records);
        self.bytes.clear();
        wrote?;
        *on_disk += records as usize;
        lines.rotate_if_full()
    }
}

/// Compresses rotated segments on a thread of its own (the records' writer
/// never waits for it) and removes the oldest past the budget.
struct Compressor {
    made: u32,
    tx: Option<mpsc::Sender<(u32, PathBuf, u64)>>,
    thread: Option<JoinHandle<Rotated>>,
}

impl Compressor {
    fn start(keep_bytes: Option<u64>) -> Compressor {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("ts-rotate".into())
            .spawn(move || compress_all(rx, keep_bytes))
            .ok();
        Compressor {
            made: 0,
            tx: Some(tx),
            thread,
        }
    }

    fn send(&mut self, n: u32, plain: PathBuf, records: u64) {
        self.made = n;
        if let Some(tx) = &self.tx {
            let _ = tx.send((n, plain, records));
        }
    }

    fn finish(mut self) -> Rotated {
        drop(self.tx.take());
        let mut out = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        out.segments = self.made;
        out
    }
}

/// The compressor thread: each plain segment to `.zst`, the plain one
/// removed once the copy is whole; then the oldest copies past the budget.
fn compress_all(rx: mpsc::Receiver<(u32, PathBuf, u64)>, keep_bytes: Option<u64>) -> Rotated {
    let mut out = Rotated::default();
    let mut kept: std::collections::VecDeque<(PathBuf, u64, u64)> = Default::default();
    for (n, plain, records) in rx {
        let zst = plain.with_file_name(tokenscope_core::segments::compressed_segment(n));
        match compress(&plain, &zst) {
            Ok(bytes) => kept.push_back((zst, bytes, records)),
            Err(e) => {
                out.error
                    .get_or_insert(format!("compressing {}: {e}", plain.display()));
                continue;
            }
        }
        let Some(budget) = keep_bytes else { continue };
        while kept.iter().map(|k| k.1).sum::<u64>() > budget && kept.len() > 1 {
            let Some((path, _, records)) = kept.pop_front() else {
                break;
            };
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    out.removed_segments += 1;
                    out.removed_records += records;
                }
                Err(e) => {
                    out.error
                        .get_or_insert(format!("removing {}: {e}", path.display()));
                }
            }
        }
    }
    out
}

/// zstd's level for segments: level 1 takes a one-hour plan's 64 MiB
/// segment to 2.2 MB in 0.05 CPU-s (gzip's fastest: 5.6 MB, 0.08 CPU-s).
const SEGMENT_LEVEL: i32 = 1;

/// A 128 KiB window (level 1's own is 512 KiB): records repeat their
/// shape line by line, so a long window buys little and costs a run's
/// peak memory.
const SEGMENT_WINDOW_LOG: u32 = 17;

/// `plain` compressed into `zst` (synced), then `plain` removed; the copy's size.
fn compress(plain: &Path, zst: &Path) -> std::io::Result<u64> {
    let mut from = File::open(plain)?;
    let mut to = zstd::stream::write::Encoder::new(File::create(zst)?, SEGMENT_LEVEL)?;
    to.window_log(SEGMENT_WINDOW_LOG)?;
    std::io::copy(&mut from, &mut to)?;
    to.finish()?.sync_all()?;
    std::fs::remove_file(plain)?;
    Ok(std::fs::metadata(zst)?.len())
}

/// `windows.jsonl`: each window's figures as it closes, shown to the tap.
struct WindowFile {
    windows: Windows,
    out: std::io::BufWriter<File>,
    tap: Option<WindowTap>,
    last_done: u64,
}

impl WindowFile {
    const NAME: &'static str = "windows.jsonl";

    fn create(records: &Path, options: &Options) -> Option<std::io::Result<WindowFile>> {
        let (every_us, slo) = options.windows.clone()?;
        let path = records.with_file_name(Self::NAME);
        Some(File::create(&path).map(|f| WindowFile {
            windows: Windows::new(every_us, slo),
            out: std::io::BufWriter::new(f),
            tap: options.window_tap.clone(),
            last_done: 0,
        }))
    }

    /// Takes `r` before the run's figures do (`run` holds the records before it).
    fn add(&mut self, r: &RequestRecord, run: &Aggregator) -> std::io::Result<()> {
        if !r.warmup {
            self.last_done = self.last_done.max(r.done_at_us);
        }
        for w in self.windows.add(r, run) {
            self.write(&w)?;
        }
        Ok(())
    }

    fn write(&mut self, w: &WindowSummary) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, w)?;
        self.out.write_all(b"\n")?;
        self.out.flush()?;
        if let Some(tap) = &self.tap {
            tap(w);
        }
        Ok(())
    }

    /// The last window; `run` holds every record.
    fn finish(mut self, run: &Aggregator) -> std::io::Result<()> {
        let last = self.last_done;
        let windows = std::mem::replace(&mut self.windows, Windows::new(1, None));
        if let Some(w) = windows.finish(Some(last), run) {
            self.write(&w)?;
        }
        Ok(())
    }
}

/// The writer thread: a line per record, each written whole with one call.
fn write_all(
    file: File,
    path: &Path,
    rx: mpsc::Receiver<Vec<RequestRecord>>,
    (on_failure, mut options): (CancellationToken, Options),
    figures: Aggregator,
) -> Recorded {
    let mut texts = Texts::new(path);
    let mut done = Recorded {
        figures,
        total: 0,
        on_disk: 0,
        error: None,
        rotated: Rotated::default(),
        stopped: None,
    };
    let mut breaker = options.breaker.take();
    let io = |path: &Path, source| RecorderError::Io {
        path: path.to_owned(),
        source,
    };
    let mut windows = match WindowFile::create(path, &options).transpose() {
        Ok(w) => w,
        Err(e) => {
            done.error = Some(io(&path.with_file_name(WindowFile::NAME), e));
            on_failure.cancel();
            None
        }
    };
    let mut lines = Lines {
        file,
        path: path.to_owned(),
        written: 0,
        in_segment: 0,
        rotation: options
            .rotation
            .map(|r| (r, Compressor::start(r.keep_bytes))),
    };
    let mut pending = Pending::default();
    let stop = |done: &mut Recorded, error| {
        done.error.get_or_insert(error);
        on_failure.cancel();
    };
    for mut batch in rx {
        for r in &mut batch {
            if let Some(text) = r.answer_text.take().filter(|_| done.error.is_none()) {
                if let Err(source) = texts.write(r.id, &text) {
                    stop(&mut done, io(&texts.path, source));
                }
            }
            if done.error.is_none() {
                if let Err(source) = pending.add(r) {
                    stop(&mut done, io(path, source));
                }
            }
            if pending.full() {
                if let Err(source) = pending.write_to(&mut lines, &mut done.on_disk) {
                    stop(&mut done, io(path, source));
                }
            }
            if let Some(tap) = &options.tap {
                tap(r);
            }
            if let Some(Err(source)) = windows.as_mut().map(|w| w.add(r, &done.figures)) {
                stop(
                    &mut done,
                    io(&path.with_file_name(WindowFile::NAME), source),
                );
                windows = None;
            }
            done.figures.add(r);
            done.total += 1;
            if let Some(tripped) = breaker.as_mut().and_then(|b| b.add(r)) {
                done.stopped = Some(tripped);
                breaker = None;
                on_failure.cancel();
            }
        }
        if let Err(source) = pending.write_to(&mut lines, &mut done.on_disk) {
            stop(&mut done, io(path, source));
        }
        if let Some(back) = &options.hand_back {
            let _ = back.try_send(batch);
        }
    }
    if let Some(Err(source)) = windows.map(|w| w.finish(&done.figures)) {
        done.error
            .get_or_insert(io(&path.with_file_name(WindowFile::NAME), source));
    }
    let texts_path = texts.path.clone();
    if let (Err(source), None) = (texts.finish(), &done.error) {
        done.error = Some(io(&texts_path, source));
    }
    done.rotated = lines.finish();
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
    use tokenscope_core::record::Chunk;

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

    /// Lines of every record file of `dir`, segments first.
    fn lines_in(dir: &Path) -> Vec<String> {
        use std::io::Read;
        let mut out = Vec::new();
        for f in tokenscope_core::segments::record_files(dir) {
            use tokenscope_core::segments::Encoding;
            let mut text = String::new();
            let file = File::open(&f.path).unwrap();
            match f.encoding {
                Encoding::Zstd => zstd::stream::read::Decoder::new(file)
                    .unwrap()
                    .read_to_string(&mut text),
                Encoding::Gzip => flate2::read::GzDecoder::new(file).read_to_string(&mut text),
                Encoding::Plain => std::io::BufReader::new(file).read_to_string(&mut text),
            }
            .unwrap();
            out.extend(text.lines().map(String::from));
        }
        out
    }

    #[test]
    fn records_rotate_into_compressed_segments_and_the_oldest_go_past_the_budget() {
        let dir = std::env::temp_dir().join(format!("ts-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("requests.jsonl");
        let run = |keep_bytes| {
            let options = Options {
                rotation: Some(Rotation {
                    segment_bytes: 16 << 10,
                    keep_bytes,
                }),
                windows: Some((1_000_000, None)),
                ..Options::default()
            };
            let agg = Aggregator::new(None, None);
            let rec = Recorder::create_with(&path, CancellationToken::new(), agg, options);
            let rec = rec.unwrap();
            for id in 0..3000 {
                let mut r = RequestRecord::sent(id, id * 1000, id * 1000);
                r.done_at_us = id * 1000 + 500;
                rec.sink().record(r);
            }
            rec.finish()
        };
        let mut done = run(None);
        assert!(done.error.is_none());
        assert!(done.rotated.segments >= 5, "{:?}", done.rotated);
        assert_eq!(done.rotated.removed_segments, 0);
        let lines = lines_in(&dir);
        assert_eq!(lines.len(), 3000, "every record, in order");
        assert!(lines[2999].starts_with(r#"{"id":2999"#));
        assert_eq!(done.figures.finish().counts.requests, 3000);
        let windows = std::fs::read_to_string(dir.join("windows.jsonl")).unwrap();
        assert_eq!(
            windows.lines().count(),
            3,
            "3 s of records, a line a second"
        );

        for f in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        let done = run(Some(24 << 10));
        let r = &done.rotated;
        assert!(r.removed_segments > 0 && r.error.is_none(), "{r:?}");
        let lines = lines_in(&dir);
        assert_eq!(lines.len() as u64, 3000 - r.removed_records);
        let first: u64 = lines[0][6..].split(',').next().unwrap().parse().unwrap();
        assert_eq!(first, r.removed_records, "the oldest records went first");
        let gz: u64 = tokenscope_core::segments::record_files(&dir)
            .iter()
            .filter(|f| f.encoding != tokenscope_core::segments::Encoding::Plain)
            .map(|f| std::fs::metadata(&f.path).unwrap().len())
            .sum();
        assert!(gz <= 24 << 10, "{gz} bytes of segments kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A simulation's hand-overs (here 500 records, past the 1 MiB a write
    /// takes) are written whole, in order, rotated between writes.
    #[test]
    fn large_hand_overs_are_written_in_pieces_in_order_and_rotated() {
        let dir = std::env::temp_dir().join(format!("ts-hand-overs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("requests.jsonl");
        let options = Options {
            rotation: Some(Rotation {
                segment_bytes: 1 << 20,
                keep_bytes: None,
            }),
            bounded: Some(2),
            ..Options::default()
        };
        let rec = Recorder::create_with(
            &path,
            CancellationToken::new(),
            Aggregator::new(None, None),
            options,
        )
        .unwrap();
        for batch in 0..6u64 {
            let records = (0..500)
                .map(|i| {
                    let id = batch * 500 + i;
                    let mut r = RequestRecord::sent(id, id, id);
                    // ~3 KB a line: 500 of them (1.5 MB) pass the 1 MiB a write takes.
                    r.chunks = (0..1500).map(|k| Chunk(id + k, 1)).collect();
                    r
                })
                .collect();
            rec.sink().record_all(records);
        }
        let done = rec.finish();
        assert!(done.error.is_none(), "{:?}", done.error);
        assert_eq!((done.total, done.on_disk), (3000, 3000));
        // ~9 MB of lines in 1 MiB segments, each cut after a write.
        assert!(done.rotated.segments >= 2, "{:?}", done.rotated);
        let ids: Vec<u64> = lines_in(&dir)
            .iter()
            .map(|l| l[6..].split(',').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(ids, (0..3000).collect::<Vec<_>>());
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
        // A hand-over of two (a simulation's batch), then one.
        let two = (0..2).map(|id| RequestRecord::sent(id, 0, 0)).collect();
        tx.send(two).unwrap();
        tx.send(vec![RequestRecord::sent(2, 0, 0)]).unwrap();
        drop(tx);
        let mut done = write_all(
            file,
            Path::new("/dev/full"),
            rx,
            (stop.clone(), Options::default()),
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
