//! The media a request carries, as the built-in servers count it: each
//! image's size read from its own header (PNG's IHDR, JPEG's frame
//! header), and its tokens as a Qwen2-VL-class model makes them — 14-pixel
//! patches merged 2×2, so one token per 28×28 pixels; each audio clip at
//! 25 tokens a second (a Whisper-style encoder's 50 frames/s pooled by 2).
//! A URL the server would fetch is taken as a 512×512 image.
//!
//! The vision encoder's own work is charged by the engine as prefill: per
//! image token, a ~0.6B-parameter ViT reads its 4 patches
//! ([`ENCODER_FLOPS_PER_TOKEN`]).

use base64::Engine as _;
use serde_json::Value;

/// The encoder's FLOPs per image token: 2 × 0.6e9 parameters × 4 patches.
pub const ENCODER_FLOPS_PER_TOKEN: f64 = 2.0 * 0.6e9 * 4.0;

/// Pixels per image token along each side.
const PIXELS_PER_TOKEN_SIDE: u32 = 28;

/// The size assumed of an image the server would fetch.
const FETCHED: (u32, u32) = (512, 512);

/// Audio tokens per second.
const AUDIO_TOKENS_PER_S: f64 = 25.0;

/// The media of one request, as counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counted {
    /// Each image's width and height.
    pub images: Vec<(u32, u32)>,
    /// Image tokens plus audio tokens.
    pub tokens: u64,
    /// Of those, image tokens (what the vision encoder computes).
    pub image_tokens: u64,
}

/// An image's tokens.
pub fn image_tokens((w, h): (u32, u32)) -> u64 {
    (w.div_ceil(PIXELS_PER_TOKEN_SIDE) as u64 * h.div_ceil(PIXELS_PER_TOKEN_SIDE) as u64).max(1)
}

/// A vision-language model family's image encoder, as `sim plan` and
/// `sim size` charge it: its own FLOPs and weights before the prompt's
/// prefill, and the image tokens it adds to the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoder {
    pub name: &'static str,
    /// Encoder parameters, billions.
    pub params_b: f64,
    /// Pixels per patch side.
    pub patch_px: u32,
    /// Patches merged into one image token, per side.
    pub merge: u32,
    /// Tiled encoders: the tile's side and the most tiles an image takes.
    pub tile: Option<(u32, u32)>,
    /// Share of the decoder's layers that hold an image token's KV (and
    /// compute it): 1 where image tokens join the prompt, the
    /// cross-attention layers' share where they are attended from beside it.
    pub kv_share: f64,
    pub source: &'static str,
}

/// The encoders `sim plan --images` knows, by family.
pub const ENCODERS: [Encoder; 2] = [
    Encoder {
        name: "qwen2.5-vl",
        params_b: 0.675,
        patch_px: 14,
        merge: 2,
        tile: None,
        kv_share: 1.0,
        source: "Qwen2.5-VL Technical Report (2025), Table 1: a 675M-parameter ViT, 14-pixel patches, 2×2 patches merged into one token; images resized to multiples of 28 pixels",
    },
    Encoder {
        name: "llama-3.2-vision",
        params_b: 0.85,
        patch_px: 14,
        merge: 1,
        tile: Some((560, 4)),
        kv_share: 8.0 / 40.0,
        source: "The Llama 3 Herd of Models (2024), §7.2: ViT-H/14 with 8 gated layers added (850M parameters), 560×560 tiles (up to 4), 1,601 tokens a tile; Llama-3.2-11B-Vision attends to them in 8 cross-attention layers of 40",
    },
];

impl Encoder {
    /// The encoder of a catalogue family.
    pub fn named(name: &str) -> Option<&'static Encoder> {
        ENCODERS.iter().find(|e| e.name.eq_ignore_ascii_case(name))
    }

    /// Patches the encoder runs over for one image of `w × h` pixels.
    pub fn patches(&self, (w, h): (u32, u32)) -> u64 {
        let side = self.patch_px * self.merge;
        match self.tile {
            // Resized to whole tokens (at least one each way).
            None => {
                let snap =
                    |x: u32| ((x as f64 / side as f64).round() as u64).max(1) * self.merge as u64;
                snap(w) * snap(h)
            }
            Some((tile, max)) => {
                let tiles = (w.div_ceil(tile) * h.div_ceil(tile)).clamp(1, max) as u64;
                let per_tile = (tile / self.patch_px) as u64;
                tiles * (per_tile * per_tile + 1)
            }
        }
    }

    /// Image tokens one image adds to what the decoder attends to.
    pub fn tokens(&self, size: (u32, u32)) -> u64 {
        self.patches(size) / (self.merge as u64 * self.merge as u64).max(1)
    }

    /// Of those, the prompt tokens the decoder's KV holds and its prefill
    /// computes ([`Encoder::kv_share`] of them).
    pub fn prompt_tokens(&self, size: (u32, u32)) -> u64 {
        (self.tokens(size) as f64 * self.kv_share).ceil() as u64
    }

    /// The encoder's FLOPs for one image: two per parameter per patch (its
    /// attention, over windows or one tile, is a few per cent more and left out).
    pub fn flops(&self, size: (u32, u32)) -> f64 {
        2.0 * self.params_b * 1e9 * self.patches(size) as f64
    }
}

/// Every media part of the request's messages (chat's `messages`,
/// Responses' `input`; Anthropic's `messages`), counted.
pub fn count(body: &Value) -> Counted {
    let mut c = Counted::default();
    let lists = [&body["messages"], &body["input"]];
    let parts = lists
        .into_iter()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten();
    for p in parts {
        match p["type"].as_str() {
            Some("image_url") => c.image(size_of_url(p["image_url"]["url"].as_str())),
            Some("input_image") => c.image(size_of_url(p["image_url"].as_str())),
            Some("image") => {
                let data = p["source"]["data"].as_str();
                c.image(
                    data.and_then(decode)
                        .and_then(|b| size(&b))
                        .unwrap_or(FETCHED),
                )
            }
            Some("input_audio") => {
                let bytes = p["input_audio"]["data"].as_str().and_then(decode);
                c.tokens += (wav_seconds(bytes.as_deref()) * AUDIO_TOKENS_PER_S).ceil() as u64;
            }
            _ => {}
        }
    }
    c
}

impl Counted {
    fn image(&mut self, size: (u32, u32)) {
        let t = image_tokens(size);
        self.images.push(size);
        self.tokens += t;
        self.image_tokens += t;
    }
}

fn decode(b64: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// The size of an image given as a data URL (else the fetched default).
fn size_of_url(url: Option<&str>) -> (u32, u32) {
    url.and_then(|u| u.strip_prefix("data:"))
        .and_then(|u| u.split_once(";base64,"))
        .and_then(|(_, b64)| decode(b64))
        .and_then(|b| size(&b))
        .unwrap_or(FETCHED)
}

/// Width and height from a PNG's or a JPEG's header.
pub fn size(b: &[u8]) -> Option<(u32, u32)> {
    if b.len() >= 24 && &b[1..4] == b"PNG" {
        let be = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        return Some((be(16), be(20)));
    }
    if b.starts_with(&[0xFF, 0xD8]) {
        let mut i = 2;
        while i + 9 < b.len() {
            if b[i] != 0xFF {
                return None;
            }
            let marker = b[i + 1];
            let len = u16::from_be_bytes([b[i + 2], b[i + 3]]) as usize;
            // SOF0..SOF15, less DHT (C4), JPG (C8) and DAC (CC).
            if (0xC0..=0xCF).contains(&marker) && ![0xC4, 0xC8, 0xCC].contains(&marker) {
                let h = u16::from_be_bytes([b[i + 5], b[i + 6]]) as u32;
                let w = u16::from_be_bytes([b[i + 7], b[i + 8]]) as u32;
                return Some((w, h));
            }
            i += 2 + len;
        }
    }
    None
}

/// Seconds of a PCM WAV (0 when it is not one).
fn wav_seconds(b: Option<&[u8]>) -> f64 {
    let Some(b) = b.filter(|b| b.len() >= 44 && &b[..4] == b"RIFF") else {
        return 0.0;
    };
    let le = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
    let byte_rate = le(28);
    if byte_rate == 0 {
        return 0.0;
    }
    (b.len() - 44) as f64 / byte_rate as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encoders_count_patches_and_tokens_as_their_papers_do() {
        let qwen = Encoder::named("qwen2.5-vl").unwrap();
        // 1024 px → 37 tokens of 28 px each way (1036 px), 74 patches.
        assert_eq!(qwen.tokens((1024, 1024)), 37 * 37);
        assert_eq!(qwen.patches((1024, 1024)), 74 * 74);
        assert_eq!(qwen.prompt_tokens((1024, 1024)), 1369);
        let llama = Encoder::named("llama-3.2-vision").unwrap();
        // 1024 × 1024 takes 2 × 2 tiles of 560: 4 × 1,601 tokens.
        assert_eq!(llama.tokens((1024, 1024)), 4 * 1601);
        assert_eq!(llama.tokens((4000, 300)), 4 * 1601, "at most 4 tiles");
        assert_eq!(
            llama.prompt_tokens((560, 560)),
            321,
            "a fifth in the decoder's layers"
        );
        assert!(llama.flops((1024, 1024)) > qwen.flops((1024, 1024)));
    }
    use tokenscope_workload::media::{audio, image, Format};

    #[test]
    fn images_are_sized_from_their_headers_in_every_apis_form() {
        let png = image("640x480".parse().unwrap(), Format::Png, 1);
        let jpeg = image("100x60".parse().unwrap(), Format::Jpeg, 1);
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": &*png.url}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": jpeg.base64().unwrap()}},
        ]}]});
        let c = count(&body);
        assert_eq!(c.images, [(640, 480), (100, 60)]);
        assert_eq!(c.tokens, 23 * 18 + 4 * 3);
        let responses = json!({"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": &*png.url}]}]});
        assert_eq!(count(&responses).images, [(640, 480)]);
        let fetched = json!({"messages": [{"content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]});
        assert_eq!(count(&fetched).images, [FETCHED]);
    }

    #[test]
    fn audio_is_counted_by_its_length() {
        let clip = audio(2.0, 1);
        let body = json!({"messages": [{"content": [
            {"type": "input_audio", "input_audio": {"data": clip.base64().unwrap(), "format": "wav"}}]}]});
        let c = count(&body);
        assert_eq!((c.tokens, c.image_tokens), (50, 0));
    }
}
