//! Images, audio and video a request carries beside its text.
//!
//! Synthetic images (`--images N --image-size WxH --image-format png|jpeg`)
//! and audio clips (`--audio N --audio-seconds S`) are made here, locally
//! and reproducibly from the seed: a smooth gradient with coloured
//! rectangles (so it compresses like a photo, not like noise), a chord of
//! tones. Each distinct piece is encoded once — into the base64 data URL
//! the APIs take — and shared by every request that draws it, so sending
//! media costs per distinct piece, never per request or per token. A run
//! draws from `--media-pool` distinct pieces per size; a server's own
//! media cache may hit on repeats, and a larger pool defeats it.
//!
//! Datasets name their media by path (read and encoded once, at load) or by
//! URL (sent as it is, for the server to fetch).

use base64::Engine as _;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What a piece of media is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Image,
    Audio,
    Video,
}

/// One piece of media as requests carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct Media {
    pub kind: Kind,
    /// A `data:` URL (its bytes inline, base64) or a URL the server fetches.
    /// Boxed where it is built, never copied: a piece is shared as an
    /// `Arc<Media>`, and a second copy of a large one while it is made
    /// would stay in the allocator's arenas for the run.
    pub url: Box<str>,
    /// `image/png`, `audio/wav`, … (empty for a URL of unknown type).
    pub mime: String,
    /// Its encoded size, bytes (0 for a URL: the server fetches it).
    pub bytes: u64,
    /// What it is, for figures by size: `640x480`, `3.0s`, the file name.
    pub label: String,
    /// An audio clip's duration, read from its own header (a URL's: unknown).
    pub seconds: Option<f64>,
}

impl Media {
    /// The base64 payload of a data URL (after `;base64,`), for the APIs
    /// that take it bare (Anthropic's image source, OpenAI's `input_audio`).
    pub fn base64(&self) -> Option<&str> {
        self.url
            .strip_prefix("data:")?
            .split_once(";base64,")
            .map(|(_, b64)| b64)
    }

    /// The data URL of `bytes` of type `mime`.
    fn inline(kind: Kind, mime: &str, bytes: &[u8], label: String) -> Media {
        let seconds = match kind {
            Kind::Audio => crate::audio_len::seconds(bytes, mime).ok(),
            _ => None,
        };
        // The URL built in one allocation: no second copy of the base64.
        let mut url = String::with_capacity(data_url_len(mime, bytes.len() as u64) as usize);
        url.push_str("data:");
        url.push_str(mime);
        url.push_str(";base64,");
        base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut url);
        Media {
            kind,
            url: url.into_boxed_str(),
            mime: mime.into(),
            bytes: bytes.len() as u64,
            label,
            seconds,
        }
    }

    /// The raw bytes of a data URL (decoded from its base64), for the APIs
    /// that upload a file (the speech APIs' multipart form).
    pub fn raw(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(self.base64()?)
            .ok()
    }

    /// A file from a dataset, read and encoded once; or a URL as it is.
    pub fn from_dataset(
        kind: Kind,
        reference: &str,
        base: &std::path::Path,
    ) -> Result<Media, String> {
        if reference.contains("://") || reference.starts_with("data:") {
            return Ok(Media {
                kind,
                url: reference.into(),
                mime: String::new(),
                bytes: 0,
                label: reference.rsplit('/').next().unwrap_or(reference).into(),
                seconds: None,
            });
        }
        let path = base.join(reference);
        let size = std::fs::metadata(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        if size > MAX_FILE_BYTES {
            return Err(format!(
                "{}: {size} bytes, past the {MAX_FILE_BYTES} a media file may hold (not read)",
                path.display()
            ));
        }
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let mime = match (kind, ext.to_ascii_lowercase().as_str()) {
            (Kind::Image, "jpg" | "jpeg") => "image/jpeg",
            (Kind::Image, "webp") => "image/webp",
            (Kind::Image, "gif") => "image/gif",
            (Kind::Image, _) => "image/png",
            (Kind::Audio, "mp3") => "audio/mpeg",
            (Kind::Audio, "flac") => "audio/flac",
            (Kind::Audio, _) => "audio/wav",
            (Kind::Video, _) => "video/mp4",
        };
        let label = path
            .file_name()
            .map_or(reference.into(), |n| n.to_string_lossy().into_owned());
        // A clip whose length cannot be read is refused: the speech figures
        // rest on it.
        if kind == Kind::Audio {
            crate::audio_len::seconds(&bytes, mime)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(Media::inline(kind, mime, &bytes, label))
    }
}

/// The most bytes one media file a dataset names may hold: 32 MiB, past
/// any image or clip a model takes. Checked before the file is read.
pub const MAX_FILE_BYTES: u64 = 32 << 20;

/// The most memory the encoded synthetic media may take (`--media-pool`
/// pieces per size, each a data URL): 128 MiB, so the client's whole
/// footprint stays under 200 MB whatever the media flags say.
pub const MAX_POOL_BYTES: u64 = 128 << 20;

/// One kind of piece in the pool: how many, and the bytes of each.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPart {
    pub what: String,
    pub pieces: u64,
    pub each: u64,
}

/// Bytes in MiB, as the refusal says them.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// The length of the data URL of `bytes` bytes of type `mime`.
fn data_url_len(mime: &str, bytes: u64) -> u64 {
    "data:;base64,".len() as u64 + mime.len() as u64 + bytes.div_ceil(3) * 4
}

/// An image size, `WxH` in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Size {
    pub width: u32,
    pub height: u32,
}

/// The largest side an image may have (JPEG's limit; far past any model's).
const MAX_SIDE: u32 = 8192;

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Size, String> {
        let (w, h) = s
            .split_once(['x', 'X'])
            .ok_or_else(|| format!("`{s}`: expected WIDTHxHEIGHT, e.g. 640x480"))?;
        let side = |v: &str| match v.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_SIDE).contains(&n) => Ok(n),
            _ => Err(format!("`{s}`: each side is 1 to {MAX_SIDE} pixels")),
        };
        Ok(Size {
            width: side(w)?,
            height: side(h)?,
        })
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// How images are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Format {
    #[default]
    Png,
    Jpeg,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "png" => Ok(Format::Png),
            "jpeg" | "jpg" => Ok(Format::Jpeg),
            _ => Err(format!("`{s}`: png or jpeg")),
        }
    }
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Png => "png",
            Format::Jpeg => "jpeg",
        }
    }
}

/// The synthetic media every request carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Images per request, each of a size drawn from `sizes`.
    pub images: u32,
    pub sizes: Vec<Size>,
    pub format: Format,
    /// Audio clips per request, each of a length drawn per clip.
    pub audio: u32,
    pub audio_seconds: ClipSeconds,
    /// Distinct pieces per size (and per clip length) requests draw from.
    pub pool: u32,
}

/// Which distinct piece: its kind's size index and its place in the pool.
type Key = (Kind, usize, u32);

/// The run's synthetic media: drawn per request, encoded once per
/// distinct piece.
#[derive(Debug)]
pub struct Synthetic {
    spec: Spec,
    seed: u64,
    encoded: Mutex<HashMap<Key, Arc<Media>>>,
}

impl Synthetic {
    pub fn new(spec: Spec, seed: u64) -> Synthetic {
        Synthetic {
            spec,
            seed,
            encoded: Mutex::new(HashMap::new()),
        }
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Request `id`'s media: its images, then its audio clips. The same
    /// for the same seed and id.
    pub fn for_request(&self, id: u64) -> Vec<Arc<Media>> {
        let mut rng = StdRng::seed_from_u64(crate::seed::mix(
            self.seed ^ 0x6d65_6469 ^ crate::seed::mix(id),
        ));
        let pool = self.spec.pool.max(1);
        let mut out = Vec::new();
        for _ in 0..self.spec.images {
            let size = rng.random_range(0..self.spec.sizes.len().max(1));
            out.push(self.piece((Kind::Image, size, rng.random_range(0..pool))));
        }
        for _ in 0..self.spec.audio {
            out.push(self.piece((Kind::Audio, 0, rng.random_range(0..pool))));
        }
        out
    }

    /// What the encoded pool will hold in memory, reckoned before it is
    /// encoded: a clip's exactly (a WAV's length is its duration), each
    /// image size's from its first piece, encoded now (and kept: the run
    /// sends it), with a quarter more for how pieces differ.
    pub fn reckon(&self) -> Vec<PoolPart> {
        let pool = self.spec.pool.max(1) as u64;
        let mut parts = Vec::new();
        if self.spec.images > 0 {
            for (i, size) in self.spec.sizes.iter().enumerate() {
                let first = self.piece((Kind::Image, i, 0)).url.len() as u64;
                parts.push(PoolPart {
                    what: format!("{size} {} image", self.spec.format.name()),
                    pieces: pool,
                    each: first.saturating_add(first / 4),
                });
            }
        }
        if self.spec.audio > 0 {
            // Each piece's length drawn as it will be; the longest reckoned for all.
            let longest = (0..pool as u32)
                .map(|k| self.clip_seconds(k))
                .fold(0.0, f64::max);
            let samples = (longest * 16_000.0) as u64;
            parts.push(PoolPart {
                what: format!("{longest}s audio clip"),
                pieces: pool,
                each: data_url_len("audio/wav", 44 + samples * 2),
            });
        }
        parts
    }

    /// The pool reckoned against `budget` bytes: its size, or why it
    /// cannot be held — the arithmetic, and the largest pool that fits.
    pub fn within(&self, budget: u64) -> Result<u64, String> {
        let parts = self.reckon();
        let total = parts.iter().fold(0u64, |t, p| {
            t.saturating_add(p.pieces.saturating_mul(p.each))
        });
        // Writing a request copies its media (into the body's JSON, the
        // serialised body with its growth, the bytes on the wire): room for
        // that is kept beside the pool.
        let request = self.request_bytes(&parts);
        if total.saturating_add(request) <= budget {
            return Ok(total);
        }
        let per_slot: u64 = parts.iter().map(|p| p.each).sum();
        let fits = budget.saturating_sub(request) / per_slot.max(1);
        let sums: Vec<String> = parts
            .iter()
            .map(|p| format!("{} × {} of ~{}", p.pieces, p.what, mib(p.each)))
            .collect();
        Err(format!(
            "--media-pool {} holds {} = {} encoded, and writing a request copies its media (~{}): past the {} the client keeps for synthetic media; {} (lower --media-pool{})",
            self.spec.pool,
            sums.join(" + "),
            mib(total),
            mib(request),
            mib(budget),
            match fits {
                0 => "not one piece of each fits".to_string(),
                n => format!("at most {n} fit"),
            },
            if self.spec.images > 0 { ", --image-size or --images" } else { ", --audio-seconds or --audio" },
        ))
    }

    /// The working copies one request's media costs while it is written:
    /// four of what it carries at most (its pieces of the largest kinds).
    fn request_bytes(&self, parts: &[PoolPart]) -> u64 {
        let image = parts
            .iter()
            .filter(|p| p.what.ends_with("image"))
            .map(|p| p.each)
            .max();
        let audio = parts
            .iter()
            .filter(|p| p.what.ends_with("clip"))
            .map(|p| p.each)
            .max();
        let carried = (self.spec.images as u64)
            .saturating_mul(image.unwrap_or(0))
            .saturating_add((self.spec.audio as u64).saturating_mul(audio.unwrap_or(0)));
        carried.saturating_mul(4)
    }

    /// Encodes every distinct piece the run may draw, on every core, so
    /// no request waits for an encoding inside the measured window.
    /// Returns how many there are.
    pub fn encode_all(&self) -> usize {
        let mut keys: Vec<Key> = Vec::new();
        let pool = self.spec.pool.max(1);
        if self.spec.images > 0 {
            for size in 0..self.spec.sizes.len() {
                keys.extend((0..pool).map(|k| (Kind::Image, size, k)));
            }
        }
        if self.spec.audio > 0 {
            keys.extend((0..pool).map(|k| (Kind::Audio, 0, k)));
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per = keys.len().div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            for part in keys.chunks(per) {
                scope.spawn(move || part.iter().for_each(|&k| drop(self.piece(k))));
            }
        });
        keys.len()
    }

    /// How many distinct pieces have been encoded so far.
    pub fn encoded(&self) -> usize {
        self.encoded.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn piece(&self, key: Key) -> Arc<Media> {
        if let Some(m) = self
            .encoded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return m.clone();
        }
        // Encoded outside the lock; two requests racing for the same piece
        // both encode it, and the first kept wins (the same bytes).
        let made = Arc::new(self.make(key));
        let mut all = self.encoded.lock().unwrap_or_else(|p| p.into_inner());
        all.entry(key).or_insert(made).clone()
    }

    /// Clip `k`'s length, seconds: drawn from the pool's seed and its place.
    fn clip_seconds(&self, k: u32) -> f64 {
        let seed = crate::seed::mix(self.seed ^ 0x6175_6469 ^ u64::from(k));
        self.spec
            .audio_seconds
            .draw(&mut StdRng::seed_from_u64(seed))
    }

    fn make(&self, (kind, size, k): Key) -> Media {
        let seed = crate::seed::mix(self.seed ^ crate::seed::mix(((size as u64) << 32) | k as u64));
        match kind {
            Kind::Audio => audio(self.clip_seconds(k), seed),
            _ => image(self.spec.sizes[size], self.spec.format, seed),
        }
    }
}

/// A synthetic picture, drawn a row at a time: a two-colour gradient with
/// a few rectangles on it. Never held whole: an 8192×8192 image's pixels
/// are 200 MB, its rows a few kilobytes.
struct Picture {
    width: usize,
    height: usize,
    from: [u8; 3],
    to: [u8; 3],
    /// `(x0, y0, x1, y1, colour)`, painted in order (the last on top).
    rects: Vec<(usize, usize, usize, usize, [u8; 3])>,
}

impl Picture {
    fn new(size: Size, seed: u64) -> Picture {
        let mut rng = StdRng::seed_from_u64(seed);
        let (w, h) = (size.width as usize, size.height as usize);
        let colour =
            |rng: &mut StdRng| [rng.random::<u8>(), rng.random::<u8>(), rng.random::<u8>()];
        let (from, to) = (colour(&mut rng), colour(&mut rng));
        let rects = (0..6)
            .map(|_| {
                let fill = colour(&mut rng);
                let (x0, y0) = (rng.random_range(0..w), rng.random_range(0..h));
                let (x1, y1) = (rng.random_range(x0..=w), rng.random_range(y0..=h));
                (x0, y0, x1, y1, fill)
            })
            .collect();
        Picture {
            width: w,
            height: h,
            from,
            to,
            rects,
        }
    }

    fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let on_top = self
            .rects
            .iter()
            .rev()
            .find(|r| (r.0..r.2).contains(&x) && (r.1..r.3).contains(&y));
        if let Some(r) = on_top {
            return r.4;
        }
        let t = (x + y) as f32 / (self.width + self.height) as f32;
        std::array::from_fn(|c| (self.from[c] as f32 * (1.0 - t) + self.to[c] as f32 * t) as u8)
    }

    /// Row `y`'s RGB bytes into `row`.
    fn row(&self, y: usize, row: &mut Vec<u8>) {
        row.clear();
        row.extend((0..self.width).flat_map(|x| self.pixel(x, y)));
    }
}

/// JPEG's encoder asks for the picture a row at a time, in YCbCr.
impl jpeg_encoder::ImageBuffer for Picture {
    fn get_jpeg_color_type(&self) -> jpeg_encoder::JpegColorType {
        jpeg_encoder::JpegColorType::Ycbcr
    }
    fn width(&self) -> u16 {
        self.width as u16
    }
    fn height(&self) -> u16 {
        self.height as u16
    }
    fn fill_buffers(&self, y: u16, buffers: &mut [Vec<u8>; 4]) {
        for x in 0..self.width {
            let [r, g, b] = self.pixel(x, y as usize);
            let (luma, cb, cr) = jpeg_encoder::rgb_to_ycbcr(r, g, b);
            buffers[0].push(luma);
            buffers[1].push(cb);
            buffers[2].push(cr);
        }
    }
}

/// A synthetic image: a two-colour gradient with a few rectangles,
/// encoded a row at a time.
pub fn image(size: Size, format: Format, seed: u64) -> Media {
    let picture = Picture::new(size, seed);
    let mut bytes = Vec::new();
    match format {
        Format::Png => {
            let mut enc = png::Encoder::new(&mut bytes, size.width, size.height);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            let mut writer = enc.write_header().expect("a PNG header writes to memory");
            let mut rows = writer
                .stream_writer()
                .expect("a PNG stream writes to memory");
            let mut row = Vec::with_capacity(picture.width * 3);
            for y in 0..picture.height {
                picture.row(y, &mut row);
                std::io::Write::write_all(&mut rows, &row).expect("PNG rows write to memory");
            }
            rows.finish().expect("a PNG finishes in memory");
        }
        Format::Jpeg => {
            let enc = jpeg_encoder::Encoder::new(&mut bytes, 85);
            enc.encode_image(picture).expect("a JPEG writes to memory");
        }
    }
    let mime = format!("image/{}", format.name());
    Media::inline(Kind::Image, &mime, &bytes, size.to_string())
}

/// A synthetic audio clip: `seconds` of a three-tone chord, 16 kHz mono
/// 16-bit WAV (what speech models take).
pub fn audio(seconds: f64, seed: u64) -> Media {
    const RATE: u32 = 16_000;
    let mut rng = StdRng::seed_from_u64(seed);
    let tones: Vec<f64> = (0..3).map(|_| rng.random_range(110.0..880.0)).collect();
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: RATE,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut bytes = Vec::new();
    {
        let mut w = hound::WavWriter::new(std::io::Cursor::new(&mut bytes), spec)
            .expect("a WAV header writes to memory");
        let n = (seconds * RATE as f64) as u64;
        for i in 0..n {
            let t = i as f64 / RATE as f64;
            let v: f64 = tones
                .iter()
                .map(|f| (t * f * std::f64::consts::TAU).sin())
                .sum();
            w.write_sample((v / 3.0 * 8000.0) as i16)
                .expect("WAV samples write to memory");
        }
        w.finalize().expect("a WAV file finishes in memory");
    }
    Media::inline(Kind::Audio, "audio/wav", &bytes, format!("{seconds}s"))
}

/// Clip lengths in seconds (`--audio-seconds`): `5`, `uniform:2..10`,
/// `normal:6,2`, `lognormal:6,3`, drawn per clip as text lengths are,
/// each at least 10 ms and at most [`MAX_CLIP_SECONDS`]. Held as a
/// [`LengthSpec`] of milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipSeconds(pub crate::lengths::LengthSpec);

/// The longest clip: ten minutes.
pub const MAX_CLIP_SECONDS: f64 = 600.0;

impl ClipSeconds {
    pub fn fixed(seconds: f64) -> ClipSeconds {
        ClipSeconds(crate::lengths::LengthSpec::Fixed(
            (seconds * 1000.0).round() as u64,
        ))
    }

    /// One clip's length, seconds.
    pub fn draw(&self, rng: &mut impl Rng) -> f64 {
        let ms = self
            .0
            .sample(rng)
            .clamp(10, (MAX_CLIP_SECONDS * 1000.0) as u64);
        ms as f64 / 1000.0
    }
}

impl std::fmt::Display for ClipSeconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::lengths::LengthSpec::*;
        let s = |ms: f64| ms / 1000.0;
        match self.0 {
            Fixed(ms) => write!(f, "{}", s(ms as f64)),
            Uniform(a, b) => write!(f, "uniform:{}..{}", s(a as f64), s(b as f64)),
            Normal { mean, std } => write!(f, "normal:{},{}", s(mean), s(std)),
            LogNormal { mean, std } => write!(f, "lognormal:{},{}", s(mean), s(std)),
        }
    }
}

impl std::str::FromStr for ClipSeconds {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!("`{spec}`: {why} (seconds: 5, uniform:2..10, normal:6,2 or lognormal:6,3)")
        };
        let (kind, rest) = spec.split_once(':').map_or(("", spec), |(k, r)| (k, r));
        let sep = [",", ".."].into_iter().find(|s| rest.contains(s));
        let numbers: Vec<&str> = match sep {
            Some(sep) => rest.split(sep).collect(),
            None => vec![rest],
        };
        let mut scaled = Vec::new();
        for n in &numbers {
            match n.trim().parse::<f64>() {
                Ok(v) if (0.0..=MAX_CLIP_SECONDS).contains(&v) => {
                    scaled.push(format!("{}", (v * 1000.0).round()))
                }
                Ok(_) => return Err(bad("each number from 0 to 600 seconds")),
                Err(_) => return Err(bad("not a number")),
            }
        }
        let ms = scaled.join(sep.unwrap_or(""));
        let ms = match kind {
            "" => ms,
            k => format!("{k}:{ms}"),
        };
        // The length parser's reason, without its milliseconds and its advice.
        let parsed: crate::lengths::LengthSpec = ms.parse().map_err(|e: String| {
            let why = e.split_once("`: ").map_or("not a SPEC", |(_, r)| r);
            bad(why.split(" (use").next().unwrap_or(why))
        })?;
        if matches!(parsed, crate::lengths::LengthSpec::Fixed(0)) {
            return Err(bad("a clip of 0 seconds"));
        }
        Ok(ClipSeconds(parsed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(images: u32, pool: u32) -> Spec {
        Spec {
            images,
            sizes: vec!["64x48".parse().unwrap()],
            format: Format::Png,
            audio: 0,
            audio_seconds: ClipSeconds::fixed(1.0),
            pool,
        }
    }

    #[test]
    fn clip_lengths_are_drawn_from_a_spec_in_seconds() {
        let fixed: ClipSeconds = "2.5".parse().unwrap();
        assert_eq!(fixed.to_string(), "2.5");
        let spread: ClipSeconds = "uniform:1..3".parse().unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let drawn: Vec<f64> = (0..200).map(|_| spread.draw(&mut rng)).collect();
        assert!(drawn.iter().all(|s| (1.0..=3.0).contains(s)));
        assert!(drawn.iter().any(|&s| s < 1.5) && drawn.iter().any(|&s| s > 2.5));
        for bad in [
            "0",
            "-1",
            "601",
            "uniform:5..2",
            "x",
            "normal:1",
            "uniform:1..nan",
        ] {
            assert!(bad.parse::<ClipSeconds>().is_err(), "{bad}");
        }
        assert!("uniform:5..2"
            .parse::<ClipSeconds>()
            .unwrap_err()
            .contains("upper bound"));
        // The pool's clips take their lengths from the spec, each read back from its header.
        let s = Synthetic::new(
            Spec {
                audio: 1,
                audio_seconds: spread,
                ..spec(0, 8)
            },
            3,
        );
        let lens: Vec<f64> = (0..8)
            .map(|k| s.piece((Kind::Audio, 0, k)).seconds.unwrap())
            .collect();
        assert!(
            lens.iter().all(|l| (1.0..=3.0).contains(l)) && lens.iter().any(|&l| l != lens[0]),
            "{lens:?}"
        );
    }

    #[test]
    fn each_distinct_image_is_encoded_once_and_shared() {
        let s = Synthetic::new(spec(2, 4), 7);
        let first: Vec<_> = (0..50).flat_map(|id| s.for_request(id)).collect();
        assert_eq!(first.len(), 100);
        assert!(
            s.encoded() <= 4,
            "{} encodings for a pool of 4",
            s.encoded()
        );
        let again = s.for_request(3);
        assert!(
            Arc::ptr_eq(&again[0], &s.for_request(3)[0]),
            "the same piece, shared"
        );
        assert_eq!(again[0].label, "64x48");
        let all = Synthetic::new(spec(1, 5), 7);
        assert_eq!(all.encode_all(), 5);
        assert_eq!(all.encoded(), 5);
        let _ = all.for_request(9);
        assert_eq!(all.encoded(), 5, "nothing left to encode during the run");
    }

    #[test]
    fn images_decode_to_their_size_in_both_formats() {
        for format in [Format::Png, Format::Jpeg] {
            let m = image("320x200".parse().unwrap(), format, 1);
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(m.base64().unwrap())
                .unwrap();
            assert_eq!(bytes.len() as u64, m.bytes);
            match format {
                Format::Png => {
                    assert_eq!(&bytes[1..4], b"PNG");
                    assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 320);
                    assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().unwrap()), 200);
                }
                Format::Jpeg => assert_eq!(&bytes[..2], &[0xFF, 0xD8]),
            }
            assert!(m
                .url
                .starts_with(&format!("data:image/{};base64,", format.name())));
        }
        // Smooth content: far smaller than its raw pixels.
        let m = image("640x480".parse().unwrap(), Format::Png, 2);
        assert!(m.bytes < 640 * 480 * 3 / 10, "{} bytes", m.bytes);
    }

    #[test]
    fn an_image_drawn_a_row_at_a_time_is_the_picture() {
        let size: Size = "97x61".parse().unwrap();
        let m = image(size, Format::Png, 5);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(m.base64().unwrap())
            .unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .unwrap();
        let mut px = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut px).unwrap();
        let picture = Picture::new(size, 5);
        let mut row = Vec::new();
        for y in 0..61 {
            picture.row(y, &mut row);
            assert_eq!(&px[y * 97 * 3..][..97 * 3], &row[..], "row {y}");
        }
        // A rectangle shows: not every pixel is the gradient.
        let gradient_only = Picture {
            rects: vec![],
            ..Picture::new(size, 5)
        };
        assert!((0..61).any(|y| (0..97).any(|x| picture.pixel(x, y) != gradient_only.pixel(x, y))));
    }

    #[test]
    fn a_pool_past_the_budget_is_refused_with_its_arithmetic() {
        let clips = |seconds: f64, pool: u32| {
            Synthetic::new(
                Spec {
                    images: 0,
                    audio: 1,
                    audio_seconds: ClipSeconds::fixed(seconds),
                    ..spec(0, pool)
                },
                1,
            )
        };
        // Ten minutes of 16 kHz 16-bit audio: 19.2 MB, 25.6 MB as base64.
        let why = clips(600.0, 100_000).within(MAX_POOL_BYTES).unwrap_err();
        assert!(
            why.contains("100000 × 600s audio clip of ~24.4 MiB"),
            "{why}"
        );
        assert!(why.contains("at most 1 fit"), "{why}");
        assert_eq!(
            clips(600.0, 100_000).encoded(),
            0,
            "nothing encoded to say so"
        );
        let fits = clips(600.0, 1).within(MAX_POOL_BYTES).unwrap();
        assert!(fits <= MAX_POOL_BYTES);
        // Images: the first piece measured (and kept), the rest reckoned.
        let s = Synthetic::new(spec(1, 100_000), 7);
        let why = s.within(1 << 20).unwrap_err();
        assert!(why.contains("100000 × 64x48 png image"), "{why}");
        assert_eq!(s.encoded(), 1);
        assert!(Synthetic::new(spec(1, 8), 7).within(1 << 20).is_ok());
    }

    #[test]
    fn audio_is_a_wav_of_its_length() {
        let m = audio(0.5, 3);
        assert_eq!(m.mime, "audio/wav");
        assert_eq!(m.bytes, 44 + 8000 * 2);
    }

    #[test]
    fn sizes_and_formats_parse_with_clear_errors() {
        assert_eq!("640x480".parse::<Size>().unwrap().to_string(), "640x480");
        assert!("640".parse::<Size>().unwrap_err().contains("WIDTHxHEIGHT"));
        assert!("0x10".parse::<Size>().is_err());
        assert!("99999x10".parse::<Size>().is_err());
        assert!("gif".parse::<Format>().is_err());
    }
}
