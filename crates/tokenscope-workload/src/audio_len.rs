//! How long a clip is, read from its own headers, never guessed from its
//! size: a WAV's `fmt `/`data` chunks, a FLAC's STREAMINFO, an MP3's
//! frames (each frame header names its bitrate and sample rate, so the
//! frames counted give the samples, for constant and variable bitrates
//! alike). Speech figures (the real-time factor, a realtime session's
//! pace) rest on these seconds, so a file whose length cannot be read is
//! refused, saying why, rather than sent with a wrong one.

/// The clip's duration in seconds, by its format (`audio/wav`,
/// `audio/flac`, `audio/mpeg`).
pub fn seconds(bytes: &[u8], mime: &str) -> Result<f64, String> {
    match mime {
        "audio/flac" => flac(bytes),
        "audio/mpeg" => mp3(bytes),
        _ => wav(bytes),
    }
}

/// A WAV (RIFF) file's duration: the `data` chunk's bytes over the `fmt `
/// chunk's bytes a second. A streamed WAV's `data` size (0 or
/// 0xFFFFFFFF, "to the end") is read as the bytes that follow.
pub fn wav(bytes: &[u8]) -> Result<f64, String> {
    let (fmt, data) = wav_parts(bytes, false)?;
    Ok(data.len() as f64 / fmt.byte_rate as f64)
}

/// The seconds of a WAV answer received as a stream: its header from
/// `head` (the first bytes), its samples from the `total` bytes that came
/// (a streamed WAV's `data` size says "to the end").
pub fn wav_stream_seconds(head: &[u8], total: u64) -> Result<f64, String> {
    let (fmt, data) = wav_parts(head, true)?;
    let offset = data.as_ptr() as usize - head.as_ptr() as usize;
    let declared = u32::from_le_bytes(head[offset - 4..offset].try_into().expect("4 bytes")) as u64;
    let came = total.saturating_sub(offset as u64);
    let samples = match declared {
        0 | 0xFFFF_FFFF => came,
        n => n.min(came),
    };
    Ok(samples as f64 / fmt.byte_rate as f64)
}

/// What a WAV's `fmt ` chunk says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WavFormat {
    /// 1: integer PCM.
    pub code: u16,
    pub channels: u16,
    pub sample_rate: u32,
    pub byte_rate: u32,
    pub bits: u16,
}

/// The samples of a 16 kHz mono 16-bit PCM WAV, as the realtime API
/// takes them (base64 PCM16 at 16 kHz); any other WAV is refused, saying
/// what it is.
pub fn pcm16_16k(bytes: &[u8]) -> Result<&[u8], String> {
    let (f, data) = wav_parts(bytes, false)?;
    if (f.code, f.channels, f.sample_rate, f.bits) != (1, 1, 16_000, 16) {
        return Err(format!(
            "the realtime API takes 16 kHz mono 16-bit PCM; this WAV is {} Hz, {} channel(s), {} bits (format {}): resample it",
            f.sample_rate, f.channels, f.bits, f.code
        ));
    }
    Ok(&data[..data.len() & !1])
}

/// A WAV's format and its `data` chunk's bytes. `streamed`: a `data` size
/// of 0 means "to the end", as a WAV written while it streams says it (in
/// a file, 0 is an empty chunk; 0xFFFFFFFF is "to the end" in both).
fn wav_parts(bytes: &[u8], streamed: bool) -> Result<(WavFormat, &[u8]), String> {
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return Err("not a WAV file (no RIFF/WAVE header)".into());
    }
    let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut at = 12usize;
    let mut format = None;
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let size = u32_at(bytes, at + 4) as usize;
        let body = at + 8;
        if id == b"fmt " {
            let f = bytes
                .get(body..body + 16)
                .ok_or("a WAV `fmt ` chunk cut short")?;
            // WAVE_FORMAT_EXTENSIBLE names its format in its sub-format's first two bytes.
            let code = match (u16_at(f, 0), bytes.get(body + 24..body + 26)) {
                (0xFFFE, Some(sub)) if size >= 40 => u16_at(sub, 0),
                (code, _) => code,
            };
            let parsed = WavFormat {
                code,
                channels: u16_at(f, 2),
                sample_rate: u32_at(f, 4),
                byte_rate: u32_at(f, 8),
                bits: u16_at(f, 14),
            };
            if parsed.byte_rate == 0 {
                return Err("a WAV `fmt ` chunk of 0 bytes a second".into());
            }
            format = Some(parsed);
        } else if id == b"data" {
            let f = format.ok_or("a WAV `data` chunk before its `fmt ` chunk")?;
            let left = bytes.len() - body;
            let data = match size {
                0xFFFF_FFFF => left,
                0 if streamed => left,
                n => n.min(left),
            };
            return Ok((f, &bytes[body..body + data]));
        }
        // Chunks are padded to an even size.
        at = body.saturating_add(size).saturating_add(size & 1);
    }
    Err("a WAV file with no `data` chunk".into())
}

/// A FLAC file's duration: STREAMINFO's total samples over its sample rate.
fn flac(bytes: &[u8]) -> Result<f64, String> {
    if bytes.len() < 4 + 4 + 34 || &bytes[0..4] != b"fLaC" {
        return Err("not a FLAC file (no fLaC header and STREAMINFO)".into());
    }
    if bytes[4] & 0x7f != 0 {
        return Err("a FLAC file whose first block is not STREAMINFO".into());
    }
    let info = &bytes[8..8 + 34];
    // 20 bits of sample rate, 3 of channels, 5 of bits a sample, 36 of samples.
    let packed = u64::from_be_bytes(info[10..18].try_into().expect("8 bytes"));
    let rate = packed >> 44;
    let samples = packed & ((1 << 36) - 1);
    if rate == 0 {
        return Err("a FLAC STREAMINFO with a sample rate of 0".into());
    }
    if samples == 0 {
        return Err("a FLAC STREAMINFO that does not say its length (0 samples)".into());
    }
    Ok(samples as f64 / rate as f64)
}

/// An MP3's duration: its MPEG audio frames counted, each one's samples
/// over its own sample rate. An ID3v2 tag first is skipped.
fn mp3(bytes: &[u8]) -> Result<f64, String> {
    // A run of frames is trusted once it holds this many: junk before the
    // audio may look like one frame header by chance, hardly like three.
    const TRUSTED: u64 = 3;
    let mut at = id3_len(bytes);
    let (mut run_start, mut seconds, mut frames) = (at, 0.0, 0u64);
    while at + 4 <= bytes.len() {
        match mp3_frame(&bytes[at..at + 4]) {
            Some((len, samples, rate)) => {
                seconds += samples as f64 / rate as f64;
                frames += 1;
                at += len;
            }
            // A trailing tag (ID3v1, APE) or junk ends a trusted run.
            None if frames >= TRUSTED => break,
            // A false sync: look again from the byte after where it began.
            None => {
                run_start += 1;
                (at, seconds, frames) = (run_start, 0.0, 0);
            }
        }
    }
    // A file that ends within its first run is taken as the frames it holds.
    match frames {
        0 => Err("not an MP3 file (no MPEG audio frame found)".into()),
        _ => Ok(seconds),
    }
}

/// The bytes of an ID3v2 tag at the start (its syncsafe size, plus its
/// header), else 0.
fn id3_len(bytes: &[u8]) -> usize {
    if bytes.len() < 10 || &bytes[0..3] != b"ID3" {
        return 0;
    }
    let size = bytes[6..10]
        .iter()
        .fold(0usize, |n, b| (n << 7) | (*b & 0x7f) as usize);
    10 + size
}

/// One MPEG audio frame header: its length in bytes, samples and sample rate.
fn mp3_frame(h: &[u8]) -> Option<(usize, u32, u32)> {
    if h[0] != 0xff || h[1] & 0xe0 != 0xe0 {
        return None;
    }
    let version = (h[1] >> 3) & 3; // 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
    let layer = (h[1] >> 1) & 3; // 1: III, 2: II, 3: I
    let bitrate_index = (h[2] >> 4) as usize;
    let rate_index = ((h[2] >> 2) & 3) as usize;
    let padding = ((h[2] >> 1) & 1) as usize;
    if version == 1 || layer == 0 || bitrate_index == 0 || bitrate_index == 15 || rate_index == 3 {
        return None;
    }
    let mpeg1 = version == 3;
    const KBPS: [[u32; 15]; 4] = [
        [
            0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448,
        ], // v1 layer I
        [
            0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
        ], // v1 layer II
        [
            0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
        ], // v1 layer III
        [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160], // v2 layers II, III
    ];
    const V2_LAYER1: [u32; 15] = [
        0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256,
    ];
    let kbps = match (mpeg1, layer) {
        (true, 3) => KBPS[0][bitrate_index],
        (true, 2) => KBPS[1][bitrate_index],
        (true, _) => KBPS[2][bitrate_index],
        (false, 3) => V2_LAYER1[bitrate_index],
        (false, _) => KBPS[3][bitrate_index],
    };
    let rate = match version {
        3 => [44_100, 48_000, 32_000][rate_index],
        2 => [22_050, 24_000, 16_000][rate_index],
        _ => [11_025, 12_000, 8_000][rate_index],
    };
    let samples = match (layer, mpeg1) {
        (3, _) => 384,
        (2, _) | (1, true) => 1152,
        _ => 576,
    };
    let bitrate = kbps * 1000;
    let len = match layer {
        3 => (12 * bitrate / rate) as usize * 4 + padding * 4,
        _ => (samples / 8 * bitrate / rate) as usize + padding,
    };
    (len >= 4).then_some((len, samples, rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav_of(seconds: f64, rate: u32) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut bytes = Vec::new();
        let mut w = hound::WavWriter::new(std::io::Cursor::new(&mut bytes), spec).unwrap();
        for _ in 0..(seconds * rate as f64) as u64 {
            w.write_sample(0i16).unwrap();
        }
        w.finalize().unwrap();
        bytes
    }

    #[test]
    fn a_wav_says_its_length() {
        assert_eq!(wav(&wav_of(2.5, 16_000)).unwrap(), 2.5);
        assert_eq!(wav(&wav_of(1.0, 44_100)).unwrap(), 1.0);
    }

    #[test]
    fn a_streamed_wav_is_read_to_its_end() {
        let mut b = wav_of(1.0, 16_000);
        b[40..44].copy_from_slice(&0xFFFF_FFFFu32.to_le_bytes());
        assert_eq!(wav(&b).unwrap(), 1.0);
        // In a file, a data chunk of 0 bytes is empty, whatever follows it.
        b[40..44].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(wav(&b).unwrap(), 0.0);
        assert_eq!(wav_stream_seconds(&b[..64], b.len() as u64).unwrap(), 1.0);
    }

    #[test]
    fn an_extensible_wav_of_pcm_is_taken_for_realtime() {
        let plain = wav_of(0.5, 16_000);
        // The same samples under WAVE_FORMAT_EXTENSIBLE: a 40-byte fmt chunk.
        let mut b = b"RIFF\0\0\0\0WAVEfmt ".to_vec();
        b.extend_from_slice(&40u32.to_le_bytes());
        b.extend_from_slice(&0xFFFEu16.to_le_bytes());
        b.extend_from_slice(&plain[22..36]); // channels, rate, byte rate, align, bits
        b.extend_from_slice(&22u16.to_le_bytes());
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes()); // sub-format: PCM
        b.extend_from_slice(&[0u8; 14]);
        b.extend_from_slice(&plain[36..]);
        assert_eq!(pcm16_16k(&b).unwrap().len(), 16_000);
    }

    #[test]
    fn hostile_headers_are_refused_not_believed() {
        assert!(wav(b"RIFF").is_err());
        assert!(wav(b"RIFF\0\0\0\0WAVEdata\x10\0\0\0").is_err()); // data before fmt
        let mut zero_rate = wav_of(0.1, 16_000);
        zero_rate[28..32].copy_from_slice(&0u32.to_le_bytes());
        assert!(pcm16_16k(&wav_of(0.1, 44_100))
            .unwrap_err()
            .contains("44100 Hz"));
        assert_eq!(pcm16_16k(&wav_of(0.1, 16_000)).unwrap().len(), 3200);
        assert!(wav(&zero_rate).is_err());
        // A chunk claiming 4 GB ends the walk, it does not overflow.
        let mut huge = b"RIFF\0\0\0\0WAVEjunk".to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(wav(&huge).is_err());
        assert!(flac(b"fLaC").is_err());
        assert!(mp3(&[0u8; 4096]).is_err());
        assert!(seconds(&[0xff; 64], "audio/mpeg").is_err());
    }

    #[test]
    fn a_streamed_answer_counts_the_bytes_that_came() {
        let b = wav_of(2.0, 16_000);
        assert_eq!(wav_stream_seconds(&b[..64], b.len() as u64).unwrap(), 2.0);
        // Cut short: what came, not what the header promised.
        assert_eq!(wav_stream_seconds(&b[..64], 44 + 16_000).unwrap(), 0.5);
        assert!(wav_stream_seconds(b"{\"error\":1}", 100).is_err());
    }

    #[test]
    fn a_flac_streaminfo_is_read() {
        // 16 kHz, 1 channel, 16 bits, 48,000 samples: 3 s.
        let mut b = b"fLaC".to_vec();
        b.extend_from_slice(&[0x80, 0, 0, 34]);
        let mut info = [0u8; 34];
        let packed: u64 = (16_000u64 << 44) | (15u64 << 36) | 48_000; // 1 channel: 0 in its 3 bits
        info[10..18].copy_from_slice(&packed.to_be_bytes());
        b.extend_from_slice(&info);
        assert_eq!(flac(&b).unwrap(), 3.0);
    }

    #[test]
    fn mp3_frames_are_counted() {
        // MPEG-1 layer III, 128 kbps, 44.1 kHz, no padding: 417 bytes, 1152 samples.
        let header = [0xff, 0xfb, 0x90, 0x00];
        let (len, samples, rate) = mp3_frame(&header).unwrap();
        assert_eq!((len, samples, rate), (417, 1152, 44_100));
        let mut b = b"ID3\x04\0\0\0\0\0\x0a".to_vec();
        b.extend_from_slice(&[0u8; 10]);
        for _ in 0..100 {
            let mut frame = vec![0u8; 417];
            frame[..4].copy_from_slice(&header);
            b.extend_from_slice(&frame);
        }
        let s = mp3(&b).unwrap();
        assert!((s - 100.0 * 1152.0 / 44_100.0).abs() < 1e-9, "{s}");
        // Junk holding one false frame header before the audio is passed over.
        let mut junk = vec![0u8; 7];
        junk.extend_from_slice(&[0xff, 0xfb, 0x90, 0x00, 1, 2, 3]);
        junk.extend_from_slice(&b);
        let s2 = mp3(&junk).unwrap();
        assert!((s2 - s).abs() < 1e-9, "{s2} vs {s}");
    }
}
