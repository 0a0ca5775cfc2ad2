//! Offline token counting, used only when the server does not report usage,
//! and for a dataset's text prompts. The built-in tokenizer is OpenAI's
//! cl100k, shipped inside `tiktoken-rs`; it is loaded on first use (a
//! fraction of a second), never downloaded. `--tokenizer FILE` puts the
//! model's own (a Hugging Face `tokenizer.json`) in its place, for counting
//! and for the synthetic prompts' words.

use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

static CL100K: OnceLock<Option<CoreBPE>> = OnceLock::new();

/// The model's tokenizer, once `--tokenizer` has loaded it (for the whole process).
static MODEL: OnceLock<ModelTokenizer> = OnceLock::new();

/// A Hugging Face tokenizer and the words that are one token each in it.
pub struct ModelTokenizer {
    pub path: std::path::PathBuf,
    tokenizer: tokenizers::Tokenizer,
    /// Words with their leading space, each one token alone and in a run of
    /// them: what the synthetic prompts are made of.
    pub words: Vec<&'static str>,
}

/// Fewer one-token words than this and synthetic prompts would repeat too
/// much to be realistic (and the tokenizer is probably not a text one).
const MIN_WORDS: usize = 16;
/// Vocabulary entries tried for words (the common ones have low ids in BPE vocabularies).
const WORD_CANDIDATES: u32 = 8192;
const MAX_WORDS: usize = 1024;

impl ModelTokenizer {
    pub fn load(path: &std::path::Path) -> Result<ModelTokenizer, String> {
        let tokenizer = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| format!("--tokenizer {}: not a tokenizer.json ({e})", path.display()))?;
        let mut words: Vec<&'static str> = Vec::new();
        let vocab = tokenizer.get_vocab_size(true) as u32;
        for id in 0..vocab.min(WORD_CANDIDATES) {
            let Ok(text) = tokenizer.decode(&[id], true) else {
                continue;
            };
            let word = text.trim();
            if word.len() < 2 || !word.chars().all(|c| c.is_ascii_alphabetic()) {
                continue;
            }
            let spaced = format!(" {word}");
            let once = encoded_len(&tokenizer, &spaced);
            let thrice = encoded_len(&tokenizer, &spaced.repeat(3));
            if once == Some(1) && thrice == Some(3) && !words.contains(&spaced.as_str()) {
                words.push(Box::leak(spaced.into_boxed_str()));
                if words.len() == MAX_WORDS {
                    break;
                }
            }
        }
        if words.len() < MIN_WORDS {
            return Err(format!(
                "--tokenizer {}: only {} words are one token each in it (at least {MIN_WORDS} are needed to build prompts of exact length)",
                path.display(),
                words.len()
            ));
        }
        Ok(ModelTokenizer {
            path: path.into(),
            tokenizer,
            words,
        })
    }

    /// Tokens of `text`, special tokens not added.
    pub fn count(&self, text: &str) -> Option<u64> {
        encoded_len(&self.tokenizer, text)
    }
}

fn encoded_len(t: &tokenizers::Tokenizer, text: &str) -> Option<u64> {
    t.encode_fast(text, false).ok().map(|e| e.len() as u64)
}

/// Makes `tokenizer` the process's tokenizer; a second call is refused.
pub fn use_model(tokenizer: ModelTokenizer) -> Result<&'static ModelTokenizer, String> {
    MODEL
        .set(tokenizer)
        .map_err(|_| "a model tokenizer is already in use".to_string())?;
    Ok(MODEL.get().expect("just set"))
}

/// The model's tokenizer, when `--tokenizer` gave one.
pub fn model() -> Option<&'static ModelTokenizer> {
    MODEL.get()
}

/// What counts tokens: the model's tokenizer file, or the built-in cl100k.
pub fn name() -> String {
    match model() {
        Some(m) => m.path.display().to_string(),
        None => "cl100k (built-in)".into(),
    }
}

/// Text is counted in slices of about this many bytes: BPE merges are
/// quadratic in the length of one pre-token, and an answer of one repeated
/// word with no spaces is one pre-token (128 KB cost 8.4 CPU-s whole). A
/// slice boundary can split a token in two: at most one token too many per
/// slice, 0.1 % of a 4 KB slice's ~1,000 tokens.
pub const SLICE_BYTES: usize = 4096;

/// Counts the tokens of `text` with the model's tokenizer when one is in
/// use, else with the built-in one, in bounded slices.
pub fn count_tokens(text: &str) -> Option<u64> {
    if let Some(m) = model() {
        let mut total = 0u64;
        let mut rest = text;
        while !rest.is_empty() {
            let cut = slice_end(rest);
            total += m.count(&rest[..cut])?;
            rest = &rest[cut..];
        }
        return Some(total);
    }
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
