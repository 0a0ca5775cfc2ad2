//! Offline token counting, used only when the server does not report usage.
//! The built-in tokenizer is OpenAI's cl100k, shipped inside `tiktoken-rs`;
//! it is loaded on first use (a fraction of a second), never downloaded.

use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

static CL100K: OnceLock<Option<CoreBPE>> = OnceLock::new();

/// Text is counted in slices of about this many bytes: BPE merges are
/// quadratic in the length of one pre-token, and an answer of one repeated
/// word with no spaces is one pre-token (128 KB cost 8.4 CPU-s whole). A
/// slice boundary can split a token in two: at most one token too many per
/// slice, 0.1 % of a 4 KB slice's ~1,000 tokens.
pub const SLICE_BYTES: usize = 4096;

/// Counts the tokens of `text` with the built-in tokenizer, in bounded slices.
pub fn count_tokens(text: &str) -> Option<u64> {
    let bpe = CL100K
        .get_or_init(|| tiktoken_rs::cl100k_base().ok())
        .as_ref()?;
    let mut total = 0u64;
    let mut rest = text;
    while !rest.is_empty() {
        let cut = slice_end(rest);
        total += bpe.encode_ordinary(&rest[..cut]).len() as u64;
        rest = &rest[cut..];
    }
    Some(total)
}

/// Where the next slice ends: after whitespace near [`SLICE_BYTES`] when there
/// is one (so words stay whole), else at a character boundary.
fn slice_end(text: &str) -> usize {
    if text.len() <= SLICE_BYTES {
        return text.len();
    }
    let mut cut = SLICE_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    match text[..cut].rfind(char::is_whitespace) {
        Some(i) if i > SLICE_BYTES / 2 => i,
        _ => cut,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_offline() {
        assert_eq!(super::count_tokens(" the river"), Some(2));
        assert_eq!(super::count_tokens(""), Some(0));
    }

    #[test]
    fn long_text_is_counted_in_slices_close_to_whole() {
        // Ordinary prose: slicing at whitespace changes nothing.
        let prose = " the river runs past the old mill".repeat(2000);
        let sliced = super::count_tokens(&prose).unwrap();
        let whole = super::CL100K
            .get()
            .unwrap()
            .as_ref()
            .unwrap()
            .encode_ordinary(&prose)
            .len() as u64;
        assert!(sliced.abs_diff(whole) <= whole / 500, "{sliced} vs {whole}");
        // One 128 KB word (the quadratic case) is counted, in bounded time.
        let word = "ab".repeat(64 * 1024);
        let n = super::count_tokens(&word).unwrap();
        assert!(n > 1000, "{n}");
        // Multi-byte characters are never cut.
        assert!(super::count_tokens(&"é".repeat(10_000)).unwrap() > 0);
    }
}
