//! What the run's media cost: how much each request carried, what the
//! server counted for it, and TTFT by how many images and of what size —
//! the figures a vision-language service is sized by.

use crate::record::RequestRecord;
use crate::results::MediaFigures;
use crate::stats::Distribution;
use std::collections::BTreeMap;

/// Sizes kept apart past this many are pooled under `(others)`, so a
/// dataset of many image files keeps the figures small.
const MAX_SIZES: usize = 32;

/// The successful requests' media, gathered one record at a time.
#[derive(Debug, Clone, Default)]
pub struct MediaTally {
    requests: u64,
    images: u64,
    audio: u64,
    video: u64,
    bytes: u64,
    /// Server prompt tokens past the text's own, and the images they
    /// were for, over requests whose server counted the prompt.
    media_tokens: u64,
    counted_images: u64,
    ttft_by_images: BTreeMap<u32, Distribution>,
    ttft_by_size: BTreeMap<String, Distribution>,
}

impl MediaTally {
    /// Takes one successful measured record.
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(m) = &r.media else { return };
        self.requests += 1;
        self.images += u64::from(m.images);
        self.audio += u64::from(m.audio);
        self.video += u64::from(m.video);
        self.bytes = self.bytes.saturating_add(m.bytes);
        let server_counted = r.input_token_source == Some(crate::record::TokenSource::ServerUsage);
        if let (true, Some(prompt), Some(text)) =
            (server_counted, r.input_tokens, r.requested_input_tokens)
        {
            self.media_tokens += prompt.saturating_sub(text);
            self.counted_images += u64::from(m.images);
        }
        let Some(ttft) = r.ttft_us() else { return };
        self.ttft_by_images
            .entry(m.images)
            .or_default()
            .record(ttft as f64);
        if let Some(size) = &m.image_size {
            let full =
                self.ttft_by_size.len() >= MAX_SIZES && !self.ttft_by_size.contains_key(size);
            let key = if full { "(others)" } else { size.as_str() };
            self.ttft_by_size
                .entry(key.to_string())
                .or_default()
                .record(ttft as f64);
        }
    }

    /// The figures, when any request carried media.
    pub fn finish(&self) -> Option<MediaFigures> {
        let n = self.requests;
        let per = |x: u64| x as f64 / n.max(1) as f64;
        let ms = |d: &Distribution| d.summary(1e-3);
        (n > 0).then(|| MediaFigures {
            requests: n,
            images_per_request: per(self.images),
            audio_per_request: per(self.audio),
            video_per_request: per(self.video),
            bytes_per_request: per(self.bytes),
            tokens_per_image: (self.counted_images > 0)
                .then(|| self.media_tokens as f64 / self.counted_images as f64),
            ttft_ms_by_images: self
                .ttft_by_images
                .iter()
                .filter_map(|(&k, d)| Some((k, ms(d)?)))
                .collect(),
            ttft_ms_by_size: self
                .ttft_by_size
                .iter()
                .filter_map(|(k, d)| Some((k.clone(), ms(d)?)))
                .collect(),
        })
    }
}
