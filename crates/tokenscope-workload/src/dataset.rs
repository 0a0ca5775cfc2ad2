//! Prompt datasets and production traces from files (`--dataset FILE`):
//! ShareGPT JSON, JSONL of prompts or messages, and traces without text —
//! the Azure LLM inference trace, BurstGPT, Mooncake — whose prompts are
//! synthesised to the recorded lengths. Nothing is fetched from a hub.
//!
//! Every malformed input is an error naming the file, the line (or entry)
//! and what is wrong; nothing is silently skipped except what the format
//! itself says to skip (a ShareGPT conversation without a human turn is
//! counted and reported).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The file formats `--dataset-format` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `[{"id", "conversations": [{"from": "human"|"gpt", "value"}…]}]`
    Sharegpt,
    /// One object per line: `prompt` or `messages`, optional `max_tokens` /
    /// `output_tokens`, `timestamp` (ms), `session_id`.
    Jsonl,
    /// Azure LLM inference trace CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`.
    AzureTrace,
    /// BurstGPT CSV: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`.
    Burstgpt,
    /// Mooncake JSONL: `timestamp`, `input_length`, `output_length`, `hash_ids`.
    Mooncake,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Sharegpt => "sharegpt",
            Format::Jsonl => "jsonl",
            Format::AzureTrace => "azure-trace",
            Format::Burstgpt => "burstgpt",
            Format::Mooncake => "mooncake",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "sharegpt" => Format::Sharegpt,
            "jsonl" => Format::Jsonl,
            "azure-trace" | "azure" => Format::AzureTrace,
            "burstgpt" => Format::Burstgpt,
            "mooncake" => Format::Mooncake,
            other => {
                return Err(format!(
                "unknown dataset format `{other}` (auto, sharegpt, jsonl, azure-trace, burstgpt, mooncake)"
            ))
            }
        })
    }
}

/// Mooncake's block size: each `hash_ids` entry stands for this many prompt tokens.
pub const MOONCAKE_BLOCK: u64 = 512;

/// What one entry asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// The text to send (the first human turn, a `prompt`, or the last user message).
    Text(String),
    /// No text: synthesise this many tokens (a trace).
    Length(u64),
    /// Mooncake: blocks of [`MOONCAKE_BLOCK`] tokens by hash id (equal ids,
    /// equal blocks, so the trace's prefix reuse is reproduced), `length`
    /// tokens in all.
    Blocks { hash_ids: Vec<u64>, length: u64 },
}

/// One request of a dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub prompt: Prompt,
    /// The prompt's tokens: a text's in the built-in tokenizer (counted once,
    /// at load), a trace's as recorded.
    pub input_tokens: u64,
    /// `max_tokens` to ask for, when the file says (ShareGPT: the first
    /// reply's length, as vLLM's benchmark does).
    pub output_tokens: Option<u64>,
    /// When it was sent, ms from the file's first entry (traces, timestamped JSONL).
    pub timestamp_ms: Option<f64>,
    /// The conversation it is a turn of (JSONL `session_id`; a ShareGPT
    /// conversation under `--multi-turn`).
    pub session: Option<String>,
    /// Images, audio and video it carries (JSONL `image`/`images`,
    /// `audio`, `video`; ShareGPT's `image`): a path beside the dataset
    /// (read and encoded once, at load) or a URL.
    pub media: Vec<std::sync::Arc<crate::media::Media>>,
    /// Those as the file names them, until [`Dataset::load`] reads them.
    media_refs: Vec<MediaRef>,
    /// Tools it offers the model (JSONL `tools`, OpenAI's or BFCL's
    /// form), put in OpenAI chat's form; they win over `--tools`.
    pub tools: Option<std::sync::Arc<Vec<serde_json::Value>>>,
    /// The answer it should get (JSONL `expected`), for `--grade`.
    pub expected: Option<String>,
}

/// A loaded dataset.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub path: PathBuf,
    pub format: Format,
    pub entries: Vec<Entry>,
    /// Entries the format itself says to skip (a conversation with no human turn).
    pub skipped: usize,
    /// `--multi-turn`: each session's entries (its turns) in file order,
    /// sessions in order of first appearance. Empty otherwise.
    pub sessions: Vec<Vec<usize>>,
}

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("--dataset {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--dataset {path}:{line}: {what}")]
    Bad {
        path: PathBuf,
        line: usize,
        what: String,
    },
    #[error("--dataset {path}: {what}")]
    Whole { path: PathBuf, what: String },
}

/// How to load: which format (`None`: detect it), a sample, a seed, filters.
#[derive(Debug, Clone, Default)]
pub struct Load {
    pub format: Option<Format>,
    /// Keep this many entries, drawn without replacement with `seed`.
    pub sample: Option<usize>,
    pub seed: u64,
    /// Drop entries whose prompt or requested output is longer (tokens; a
    /// text prompt is measured with the built-in tokenizer).
    pub max_input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    /// `--replay`: every entry needs a timestamp; entries are put in time
    /// order, and only those within the window (s from the first) are kept,
    /// their offsets then counted from the window's start.
    pub replay: Option<(f64, f64)>,
    /// Keep conversations whole: every ShareGPT human turn, JSONL lines
    /// grouped by `session_id`; `sample` then counts sessions.
    pub multi_turn: bool,
}

impl Dataset {
    pub fn load(path: &Path, how: &Load) -> Result<Dataset, DatasetError> {
        let name = path.to_str().unwrap_or("");
        let text = if name == crate::arithmetic::NAME {
            crate::arithmetic::jsonl()
        } else if name.starts_with("builtin:") && !path.exists() {
            return Err(DatasetError::Whole {
                path: path.into(),
                what: format!(
                    "no such built-in dataset; the one built in is {}",
                    crate::arithmetic::NAME
                ),
            });
        } else {
            let bytes = std::fs::read(path).map_err(|source| DatasetError::Io {
                path: path.into(),
                source,
            })?;
            utf8(bytes).map_err(|(line, what)| DatasetError::Bad {
                path: path.into(),
                line,
                what,
            })?
        };
        let format = match how.format {
            Some(f) => f,
            None => detect(&text).ok_or_else(|| DatasetError::Whole {
                path: path.into(),
                what: "format not recognised (not ShareGPT JSON, JSONL with prompt/messages, Mooncake JSONL, or an Azure/BurstGPT CSV); pass --dataset-format".into(),
            })?,
        };
        let bad = |line: usize, what: String| DatasetError::Bad {
            path: path.into(),
            line,
            what,
        };
        let (mut entries, skipped) = match format {
            Format::Sharegpt => sharegpt(&text, how.multi_turn).map_err(|(l, w)| bad(l, w))?,
            Format::Jsonl => (jsonl(&text).map_err(|(l, w)| bad(l, w))?, 0),
            Format::Mooncake => (mooncake(&text).map_err(|(l, w)| bad(l, w))?, 0),
            Format::AzureTrace | Format::Burstgpt => {
                (csv_trace(&text, format).map_err(|(l, w)| bad(l, w))?, 0)
            }
        };
        if let Some(window) = how.replay {
            by_time(&mut entries, window).map_err(|what| DatasetError::Whole {
                path: path.into(),
                what,
            })?;
        }
        entries.retain(|e| keep(e, how));
        let whole = |what: String| DatasetError::Whole {
            path: path.into(),
            what,
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        load_media(&mut entries, dir).map_err(|(l, w)| bad(l, w))?;
        let sessions = if how.multi_turn {
            let mut sessions = group_sessions(&entries).map_err(whole)?;
            if let Some(n) = how.sample {
                sample(&mut sessions, n, how.seed);
            }
            sessions
        } else {
            if let Some(n) = how.sample {
                sample(&mut entries, n, how.seed);
            }
            Vec::new()
        };
        if entries.is_empty() {
            return Err(DatasetError::Whole {
                path: path.into(),
                what: format!(
                    "no entry left to send ({} format{})",
                    format.name(),
                    if how.max_input_tokens.is_some() || how.max_output_tokens.is_some() {
                        ", after the length filters"
                    } else {
                        ""
                    }
                ),
            });
        }
        Ok(Dataset {
            path: path.into(),
            format,
            entries,
            skipped,
            sessions,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Shard `index` of `count`: every `count`-th entry (or, with sessions,
    /// every `count`-th session, whole), so the shards' parts never overlap
    /// and together are the dataset. Entries keep their send offsets: the
    /// shards of a replay together send the trace at its recorded times.
    pub fn shard(&self, index: usize, count: usize) -> Dataset {
        let mut part = Dataset {
            path: self.path.clone(),
            format: self.format,
            entries: Vec::new(),
            skipped: self.skipped,
            sessions: Vec::new(),
        };
        if self.sessions.is_empty() {
            part.entries = self
                .entries
                .iter()
                .skip(index)
                .step_by(count)
                .cloned()
                .collect();
            return part;
        }
        for session in self.sessions.iter().skip(index).step_by(count) {
            let first = part.entries.len();
            part.entries
                .extend(session.iter().map(|&i| self.entries[i].clone()));
            part.sessions.push((first..part.entries.len()).collect());
        }
        part
    }

    /// Each entry's send offset in seconds from the first, when every entry has one.
    pub fn offsets_s(&self) -> Option<Vec<f64>> {
        self.entries
            .iter()
            .map(|e| e.timestamp_ms.map(|t| t / 1e3))
            .collect()
    }

    /// The entry request `id` sends: the file in order, cycling past its end.
    pub fn entry(&self, id: u64) -> &Entry {
        &self.entries[(id % self.entries.len() as u64) as usize]
    }

    /// Session `s`'s entries (cycling past the last session).
    pub fn session(&self, s: u64) -> &[usize] {
        &self.sessions[(s % self.sessions.len() as u64) as usize]
    }

    /// Requests that sending every session once makes.
    pub fn turns(&self) -> usize {
        self.sessions.iter().map(Vec::len).sum()
    }
}

/// Entries grouped into sessions by their `session`, in order of first appearance.
fn group_sessions(entries: &[Entry]) -> Result<Vec<Vec<usize>>, String> {
    let mut index = std::collections::HashMap::new();
    let mut sessions: Vec<Vec<usize>> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let Some(key) = &e.session else {
            return Err(format!(
                "--multi-turn needs conversations: entry {} has no session (ShareGPT conversations, or JSONL lines with `session_id`)",
                i + 1
            ));
        };
        let s = *index.entry(key.as_str()).or_insert_with(|| {
            sessions.push(Vec::new());
            sessions.len() - 1
        });
        sessions[s].push(i);
    }
    Ok(sessions)
}

/// A replay's entries: in time order, within `[from, to)` seconds of the
/// first, offsets counted from `from`.
fn by_time(entries: &mut Vec<Entry>, (from, to): (f64, f64)) -> Result<(), String> {
    if let Some(i) = entries.iter().position(|e| e.timestamp_ms.is_none()) {
        return Err(format!(
            "--replay needs a timestamp on every entry; entry {} has none",
            i + 1
        ));
    }
    let ms = |e: &Entry| e.timestamp_ms.unwrap_or(0.0);
    entries.sort_by(|a, b| ms(a).total_cmp(&ms(b)));
    let first = entries.first().map_or(0.0, ms);
    let (lo, hi) = (first + from * 1e3, first + to * 1e3);
    entries.retain(|e| ms(e) >= lo && ms(e) < hi);
    for e in entries.iter_mut() {
        e.timestamp_ms = Some(ms(e) - lo);
    }
    Ok(())
}

fn entry(prompt: Prompt, output_tokens: Option<u64>, timestamp_ms: Option<f64>) -> Entry {
    Entry {
        input_tokens: input_tokens(&prompt),
        prompt,
        output_tokens,
        timestamp_ms,
        session: None,
        media: Vec::new(),
        media_refs: Vec::new(),
        tools: None,
        expected: None,
    }
}

/// A piece of media an entry names: its kind, its path or URL, and the
/// dataset's line that names it (for errors).
type MediaRef = (crate::media::Kind, String, usize);

/// A dataset's bytes as text, or where they stop being UTF-8: the line
/// and column of the first bad byte.
fn utf8(bytes: Vec<u8>) -> Result<String, (usize, String)> {
    String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = 1 + good.iter().filter(|&&b| b == b'\n').count();
        let column = 1 + good.len() - good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let byte = e.as_bytes()[good.len()];
        (
            line,
            format!("not UTF-8: byte 0x{byte:02x} at column {column} (save the file as UTF-8)"),
        )
    })
}

/// The media an entry names: each field a path or URL, or a list of them.
fn media_refs(n: usize, m: &serde_json::Map<String, serde_json::Value>) -> Parsed<Vec<MediaRef>> {
    use crate::media::Kind;
    let fields = [
        ("image", Kind::Image),
        ("images", Kind::Image),
        ("audio", Kind::Audio),
        ("video", Kind::Video),
    ];
    let mut out = Vec::new();
    for (field, kind) in fields {
        let list = match m.get(field) {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::String(one)) => vec![one.as_str()],
            Some(serde_json::Value::Array(many)) => many
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or((n, format!("`{field}` holds {v}: paths or URLs are strings")))
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err((
                    n,
                    format!("`{field}` is {v}: a path or URL, or a list of them"),
                ))
            }
        };
        out.extend(list.into_iter().map(|r| (kind, r.to_string(), n)));
    }
    Ok(out)
}

/// The most bytes the media a dataset names may hold in all, read and
/// encoded (each file's limit is `media::MAX_FILE_BYTES`).
pub const MAX_DATASET_MEDIA_BYTES: u64 = 1 << 30;

/// Reads the media every entry names, each distinct path once, relative to
/// the dataset's own directory; a file too large, or more than the client
/// keeps in all, is refused at the line that names it, before it is read.
fn load_media(entries: &mut [Entry], dir: &Path) -> Result<(), (usize, String)> {
    let mut loaded: HashMap<(crate::media::Kind, String), std::sync::Arc<crate::media::Media>> =
        HashMap::new();
    let mut held = 0u64;
    for e in entries {
        for (kind, r, line) in std::mem::take(&mut e.media_refs) {
            let m = match loaded.get(&(kind, r.clone())) {
                Some(m) => m.clone(),
                None => {
                    let m = crate::media::Media::from_dataset(kind, &r, dir)
                        .map_err(|e| (line, format!("media: {e}")))?;
                    held = held.saturating_add(m.url.len() as u64);
                    if held > MAX_DATASET_MEDIA_BYTES {
                        let why = format!(
                            "media: the files named so far hold {held} bytes encoded, past the {MAX_DATASET_MEDIA_BYTES} the client keeps for a dataset's media (sample fewer entries with --dataset-sample)"
                        );
                        return Err((line, why));
                    }
                    let m = std::sync::Arc::new(m);
                    loaded.insert((kind, r), m.clone());
                    m
                }
            };
            e.media.push(m);
        }
    }
    Ok(())
}

fn input_tokens(p: &Prompt) -> u64 {
    match p {
        Prompt::Text(t) => crate::tokenizer::count_tokens(t).unwrap_or(t.len() as u64 / 4),
        Prompt::Length(n) => *n,
        Prompt::Blocks { length, .. } => *length,
    }
}

fn keep(e: &Entry, how: &Load) -> bool {
    let output_ok = match (how.max_output_tokens, e.output_tokens) {
        (Some(max), Some(n)) => n <= max,
        _ => true,
    };
    output_ok && how.max_input_tokens.is_none_or(|max| e.input_tokens <= max)
}

/// A seeded sample without replacement, in the file's order.
fn sample<T>(entries: &mut Vec<T>, n: usize, seed: u64) {
    if n >= entries.len() {
        return;
    }
    use rand::seq::index;
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut picked = index::sample(&mut rng, entries.len(), n).into_vec();
    picked.sort_unstable();
    let all = std::mem::take(entries);
    let mut picked = picked.into_iter().peekable();
    for (i, e) in all.into_iter().enumerate() {
        if picked.peek() == Some(&i) {
            picked.next();
            entries.push(e);
        }
    }
}

/// The format a file's content has, from its first non-blank bytes and line.
pub fn detect(text: &str) -> Option<Format> {
    let t = text.trim_start();
    if t.starts_with('[') {
        return Some(Format::Sharegpt);
    }
    let first = t.lines().next()?.trim();
    if first.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(first).ok()?;
        return if v.get("hash_ids").is_some() || v.get("input_length").is_some() {
            Some(Format::Mooncake)
        } else {
            Some(Format::Jsonl)
        };
    }
    let header = first.to_ascii_lowercase().replace(' ', "");
    if header.starts_with("timestamp,contexttokens,generatedtokens") {
        Some(Format::AzureTrace)
    } else if header.starts_with("timestamp,model,requesttokens,responsetokens") {
        Some(Format::Burstgpt)
    } else {
        None
    }
}

type Parsed<T> = Result<T, (usize, String)>;

/// A reply's length in the built-in tokenizer (at least 1).
fn reply_tokens(text: &str) -> u64 {
    crate::tokenizer::count_tokens(text)
        .unwrap_or(text.len() as u64 / 4)
        .max(1)
}

fn sharegpt(text: &str, multi_turn: bool) -> Parsed<(Vec<Entry>, usize)> {
    #[derive(serde::Deserialize)]
    struct Turn {
        from: String,
        value: String,
    }
    #[derive(serde::Deserialize)]
    struct Conversation {
        conversations: Vec<Turn>,
        /// LLaVA-style: the conversation's image(s), a path or a list.
        #[serde(default)]
        image: Option<serde_json::Value>,
    }
    let all: Vec<Conversation> = serde_json::from_str(text).map_err(|e| {
        (
            e.line(),
            format!("not ShareGPT JSON ({e}): expected [{{\"conversations\": [{{\"from\", \"value\"}}…]}}…]"),
        )
    })?;
    let (mut entries, mut skipped) = (Vec::new(), 0);
    let is_human = |t: &Turn| t.from == "human" || t.from == "user";
    let is_reply = |t: &Turn| t.from == "gpt" || t.from == "assistant";
    for (n, c) in all.into_iter().enumerate() {
        if multi_turn {
            // Every human turn, the reply after it giving its length.
            let before = entries.len();
            for (i, t) in c.conversations.iter().enumerate() {
                if !is_human(t) || t.value.is_empty() {
                    continue;
                }
                let reply = c.conversations.get(i + 1).filter(|r| is_reply(r));
                let mut e = entry(
                    Prompt::Text(t.value.clone()),
                    reply.map(|r| reply_tokens(&r.value)),
                    None,
                );
                e.session = Some(n.to_string());
                entries.push(e);
            }
            skipped += (entries.len() == before) as usize;
            continue;
        }
        let first_human = c.conversations.iter().position(is_human);
        let Some(i) = first_human.filter(|&i| !c.conversations[i].value.is_empty()) else {
            skipped += 1;
            continue;
        };
        // The first reply's length as max_tokens, as vLLM's benchmark does.
        let reply = c.conversations[i + 1..]
            .iter()
            .find(|t| is_reply(t))
            .map(|t| reply_tokens(&t.value));
        let mut e = entry(Prompt::Text(c.conversations[i].value.clone()), reply, None);
        if let Some(image) = c.image {
            let fields = serde_json::Map::from_iter([("image".to_string(), image)]);
            e.media_refs = media_refs(n + 1, &fields)?;
        }
        entries.push(e);
    }
    Ok((entries, skipped))
}

/// Non-blank lines with their 1-based numbers.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
}

fn object(n: usize, line: &str) -> Parsed<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err((n, "not a JSON object".into())),
        Err(e) => Err((n, format!("not JSON: {e}"))),
    }
}

fn count(
    n: usize,
    m: &serde_json::Map<String, serde_json::Value>,
    keys: &[&str],
) -> Parsed<Option<u64>> {
    for k in keys {
        match m.get(*k) {
            None | Some(serde_json::Value::Null) => continue,
            Some(v) => {
                return match v.as_f64() {
                    Some(x)
                        if x >= 1.0
                            && x <= crate::lengths::MAX_LENGTH as f64
                            && x.fract() == 0.0 =>
                    {
                        Ok(Some(x as u64))
                    }
                    _ => Err((
                        n,
                        format!(
                            "`{k}` is {v}: a whole number of tokens from 1 to {} is needed",
                            crate::lengths::MAX_LENGTH
                        ),
                    )),
                }
            }
        }
    }
    Ok(None)
}

fn timestamp(n: usize, m: &serde_json::Map<String, serde_json::Value>) -> Parsed<Option<f64>> {
    match m.get("timestamp") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(t) if t.is_finite() && t >= 0.0 => Ok(Some(t)),
            _ => Err((
                n,
                format!("`timestamp` is {v}: milliseconds, a non-negative number"),
            )),
        },
    }
}

fn jsonl(text: &str) -> Parsed<Vec<Entry>> {
    let mut out = Vec::new();
    for (n, line) in lines(text) {
        let m = object(n, line)?;
        let prompt = match (m.get("prompt"), m.get("messages")) {
            (Some(serde_json::Value::String(p)), _) if !p.is_empty() => p.clone(),
            (_, Some(serde_json::Value::Array(msgs))) => msgs
                .iter()
                .rev()
                .find(|msg| msg["role"] == "user")
                .and_then(|msg| msg["content"].as_str())
                .filter(|c| !c.is_empty())
                .ok_or((n, "`messages` has no user message with text".to_string()))?
                .to_string(),
            _ => return Err((
                n,
                "needs `prompt` (a non-empty string) or `messages` (a list with a user message)"
                    .into(),
            )),
        };
        let mut e = entry(
            Prompt::Text(prompt),
            count(n, &m, &["max_tokens", "output_tokens"])?,
            timestamp(n, &m)?,
        );
        e.media_refs = media_refs(n, &m)?;
        e.tools = match m.get("tools") {
            None | Some(serde_json::Value::Null) => None,
            Some(t) => Some(std::sync::Arc::new(
                crate::tools::normalize(t).map_err(|why| (n, format!("`tools`: {why}")))?,
            )),
        };
        e.expected = match m.get("expected") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                Some(v.to_string())
            }
            Some(v) => Some(v.to_string()),
        };
        e.session = match m.get("session_id") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(v @ serde_json::Value::Number(_)) => Some(v.to_string()),
            Some(v) => {
                return Err((
                    n,
                    format!("`session_id` is {v}: a string or number is needed"),
                ))
            }
        };
        out.push(e);
    }
    Ok(out)
}

fn mooncake(text: &str) -> Parsed<Vec<Entry>> {
    let mut out = Vec::new();
    for (n, line) in lines(text) {
        let m = object(n, line)?;
        let length =
            count(n, &m, &["input_length"])?.ok_or((n, "no `input_length`".to_string()))?;
        let hash_ids: Vec<u64> = match m.get("hash_ids") {
            None => Vec::new(),
            Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
                (
                    n,
                    "`hash_ids` must be a list of non-negative integers".to_string(),
                )
            })?,
        };
        out.push(entry(
            Prompt::Blocks { hash_ids, length },
            count(n, &m, &["output_length"])?,
            timestamp(n, &m)?,
        ));
    }
    Ok(out)
}

/// Azure (`TIMESTAMP` as a date-time) and BurstGPT (`Timestamp` in seconds) CSVs.
fn csv_trace(text: &str, format: Format) -> Parsed<Vec<Entry>> {
    let mut rows = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut out = Vec::new();
    let mut first_s: Option<f64> = None;
    for (i, row) in rows.records().enumerate() {
        let n = i + 2; // the header is line 1
        let row = row.map_err(|e| (n, format!("not CSV: {e}")))?;
        let field = |k: usize, name: &str| -> Parsed<&str> {
            row.get(k).ok_or((n, format!("no `{name}` column")))
        };
        let tokens = |k: usize, name: &str| -> Parsed<u64> {
            let v = field(k, name)?;
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0 && *x <= crate::lengths::MAX_LENGTH as f64)
                .map(|x| x as u64)
                .ok_or((
                    n,
                    format!("`{name}` is `{v}`: a number of tokens is needed"),
                ))
        };
        let (at_s, input, output) = match format {
            Format::AzureTrace => (
                azure_time(field(0, "TIMESTAMP")?).ok_or((
                    n,
                    format!(
                        "`TIMESTAMP` `{}` is not a date-time like 2023-11-16 18:15:46.6805900",
                        field(0, "TIMESTAMP")?
                    ),
                ))?,
                tokens(1, "ContextTokens")?,
                tokens(2, "GeneratedTokens")?,
            ),
            _ => {
                let t = field(0, "Timestamp")?;
                let at = t
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or((n, format!("`Timestamp` `{t}` is not seconds")))?;
                (
                    at,
                    tokens(2, "Request tokens")?,
                    tokens(3, "Response tokens")?,
                )
            }
        };
        // A failed request in BurstGPT has 0 response tokens; nothing to ask for.
        if input == 0 {
            continue;
        }
        let start = *first_s.get_or_insert(at_s);
        out.push(entry(
            Prompt::Length(input),
            (output > 0).then_some(output),
            Some(((at_s - start) * 1e3).max(0.0)),
        ));
    }
    Ok(out)
}

/// `2023-11-16 18:15:46.6805900` → seconds since the epoch (UTC).
fn azure_time(s: &str) -> Option<f64> {
    let (date, time) = s.split_once(' ')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (h, mi) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let sec: f64 = t.next()?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3_600 + mi * 60) as f64 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, how: Load) -> Result<Dataset, DatasetError> {
        let dir = std::env::temp_dir().join(format!("ts-dataset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("d-{}", text.len()));
        std::fs::write(&path, text).unwrap();
        Dataset::load(&path, &how)
    }

    #[test]
    fn bad_utf8_is_named_by_its_line_and_column() {
        let dir = std::env::temp_dir().join(format!("ts-utf8-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("d.jsonl");
        std::fs::write(&path, b"{\"prompt\": \"ok\"}\n{\"prompt\": \"a\xffb\"}\n").unwrap();
        let e = Dataset::load(&path, &Load::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("d.jsonl:2: not UTF-8: byte 0xff at column 14"),
            "{e}"
        );
    }

    #[test]
    fn a_media_file_past_its_limit_is_refused_at_its_line_unread() {
        let dir = std::env::temp_dir().join(format!("ts-media-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // 4 GiB, sparse: nothing is written, and nothing may be read.
        let huge = std::fs::File::create(dir.join("huge.png")).unwrap();
        huge.set_len(4 << 30).unwrap();
        std::fs::write(dir.join("small.png"), b"png").unwrap();
        let path = dir.join("d.jsonl");
        let text = "{\"prompt\": \"a\", \"image\": \"small.png\"}\n{\"prompt\": \"b\", \"image\": \"huge.png\"}\n";
        std::fs::write(&path, text).unwrap();
        let e = Dataset::load(&path, &Load::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("d.jsonl:2: media:"), "{e}");
        assert!(e.contains("4294967296 bytes, past the 33554432"), "{e}");
        std::fs::remove_file(dir.join("huge.png")).unwrap();
    }

    #[test]
    fn sharegpt_takes_the_first_human_turn_and_the_first_reply_length() {
        let text = r#"[
          {"id": "a", "conversations": [{"from": "human", "value": "Tell me a story"}, {"from": "gpt", "value": "Once upon a time there was"}]},
          {"id": "b", "conversations": [{"from": "gpt", "value": "no human here"}]},
          {"id": "c", "conversations": [{"from": "human", "value": "Hi"}]}
        ]"#;
        let d = load(text, Load::default()).unwrap();
        assert_eq!(d.format, Format::Sharegpt);
        assert_eq!(d.len(), 2);
        assert_eq!(d.skipped, 1);
        assert_eq!(d.entries[0].prompt, Prompt::Text("Tell me a story".into()));
        assert_eq!(d.entries[0].output_tokens, Some(6));
        assert_eq!(d.entries[1].output_tokens, None);
    }

    #[test]
    fn every_format_is_detected_and_read() {
        let jsonl = "{\"prompt\": \"a b c\", \"max_tokens\": 7, \"timestamp\": 1500}\n\n{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"q\"}], \"output_tokens\": 3}\n";
        let d = load(jsonl, Load::default()).unwrap();
        assert_eq!((d.format, d.len()), (Format::Jsonl, 2));
        assert_eq!(d.entries[0].output_tokens, Some(7));
        assert_eq!(d.entries[0].timestamp_ms, Some(1500.0));
        assert_eq!(d.entries[1].prompt, Prompt::Text("q".into()));

        let moon = "{\"timestamp\": 0, \"input_length\": 700, \"output_length\": 20, \"hash_ids\": [1, 2]}\n{\"timestamp\": 250, \"input_length\": 512, \"output_length\": 5, \"hash_ids\": [1]}\n";
        let d = load(moon, Load::default()).unwrap();
        assert_eq!(d.format, Format::Mooncake);
        assert_eq!(
            d.entries[1].prompt,
            Prompt::Blocks {
                hash_ids: vec![1],
                length: 512
            }
        );
        assert_eq!(d.entries[1].timestamp_ms, Some(250.0));

        let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n";
        let d = load(azure, Load::default()).unwrap();
        assert_eq!(d.format, Format::AzureTrace);
        assert_eq!(d.entries[0].prompt, Prompt::Length(374));
        assert_eq!(d.entries[1].output_tokens, Some(109));
        let dt = d.entries[1].timestamp_ms.unwrap();
        assert!((dt - 4314.579).abs() < 1e-2, "{dt}");

        let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,Conversation log\n47,ChatGPT,30,12,42,API log\n";
        let d = load(burst, Load::default()).unwrap();
        assert_eq!(d.format, Format::Burstgpt);
        assert_eq!(d.len(), 3);
        assert_eq!(
            d.entries[1].output_tokens, None,
            "a failed request asks for no length"
        );
        assert_eq!(d.entries[2].timestamp_ms, Some(42_000.0));
    }

    #[test]
    fn malformed_files_name_the_line_and_what_is_wrong() {
        let e = load(
            "{\"prompt\": \"ok\"}\n{\"prompt\": \"x\", \"max_tokens\": -3}\n",
            Load::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(":2: `max_tokens` is -3"), "{e}");
        let e = load("{\"prompt\": \"ok\"}\n{not json\n", Load::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(":2: not JSON"), "{e}");
        let e = load("{\"text\": \"no prompt\"}\n", Load::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(":1: needs `prompt`"), "{e}");
        let e = load("[{\"conversations\": 3}]", Load::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not ShareGPT JSON"), "{e}");
        let e = load(
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n",
            Load::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(":2: `TIMESTAMP` `yesterday`"), "{e}");
        let e = load("hello\n", Load::default()).unwrap_err().to_string();
        assert!(e.contains("format not recognised"), "{e}");
    }

    #[test]
    fn samples_and_filters() {
        let text: String = (1..=50)
            .map(|i| format!("{{\"prompt\": \"p{i}\", \"max_tokens\": {i}}}\n"))
            .collect();
        let how = Load {
            sample: Some(10),
            seed: 3,
            ..Load::default()
        };
        let a = load(&text, how.clone()).unwrap();
        assert_eq!(a.len(), 10);
        assert_eq!(a.entries, load(&text, how).unwrap().entries, "seeded");
        let short = load(
            &text,
            Load {
                max_output_tokens: Some(5),
                ..Load::default()
            },
        )
        .unwrap();
        assert_eq!(short.len(), 5);
        assert_eq!(short.entry(7).output_tokens, Some(3), "cycles past the end");
    }

    #[test]
    fn an_unknown_builtin_names_the_one_there_is() {
        let e = Dataset::load(Path::new("builtin:nope"), &Load::default()).unwrap_err();
        let said = e.to_string();
        assert!(
            said.contains("no such built-in dataset") && said.contains("builtin:arithmetic"),
            "{said}"
        );
        assert!(Dataset::load(Path::new("builtin:arithmetic"), &Load::default()).is_ok());
    }
}
