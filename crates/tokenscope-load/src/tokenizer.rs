//! Offline token counting, used only when the server does not report usage.
//! The built-in tokenizer is OpenAI's cl100k, shipped inside `tiktoken-rs`;
//! it is loaded on first use (a fraction of a second), never downloaded.

use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

static CL100K: OnceLock<Option<CoreBPE>> = OnceLock::new();

/// Counts the tokens of `text` with the built-in tokenizer.
pub fn count_tokens(text: &str) -> Option<u64> {
    let bpe = CL100K
        .get_or_init(|| tiktoken_rs::cl100k_base().ok())
        .as_ref()?;
    Some(bpe.encode_ordinary(text).len() as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_offline() {
        assert_eq!(super::count_tokens(" the river"), Some(2));
        assert_eq!(super::count_tokens(""), Some(0));
    }
}
