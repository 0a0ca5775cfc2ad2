//! What a finished answer's token counts may be: the checks that keep a
//! server's impossible count out of the figures, and the split of a count
//! over the chunks that carried it. Pure arithmetic on what the stream
//! said, so every rule here is tested alone (and by property).

use crate::protocol::Usage;
use tokenscope_core::record::Chunk;

/// Prompt sizes past this are not real (the largest context windows hold ~10M).
const MAX_PLAUSIBLE_PROMPT: u64 = 1 << 32;

/// Output counts past this are not real either: no server generates
/// billions of tokens for one request, hidden or not.
const MAX_PLAUSIBLE_OUTPUT: u64 = 1 << 32;

/// Tokens a tool call may take beyond the bytes streamed for it: its
/// framing (`<tool_call>{"name": …, "arguments": …}`) is generated and
/// never streamed as text.
const CALL_FRAMING_TOKENS: u64 = 64;

/// What a stream carried, against which its counts are held: text bytes,
/// chunks, tool calls, and the `max_tokens` asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Carried {
    pub bytes: u64,
    pub chunks: u64,
    pub calls: u64,
    pub max_tokens: Option<u64>,
    /// Reasoning the server counted and never streamed (its usage's
    /// `reasoning_tokens` when no reasoning text came): tokens no byte carried.
    pub hidden: u64,
    /// Reasoning streamed as a summary of what was counted (Anthropic's
    /// thinking, which its usage counts whole and gives no breakdown of):
    /// the bytes bound no count then, only `max_tokens` does.
    pub summarised: bool,
}

impl Carried {
    /// The most tokens this much output can be: a token is at least a
    /// byte of text or a chunk of its own, a call's framing a few more.
    fn most_tokens(&self) -> u64 {
        self.bytes
            .saturating_add(self.chunks)
            .saturating_add(self.calls.saturating_mul(CALL_FRAMING_TOKENS))
            .saturating_add(self.hidden)
    }

    /// Why `n` output tokens cannot be true of this output, if they cannot.
    fn refutes(&self, what: &str, n: u64) -> Option<String> {
        if n > MAX_PLAUSIBLE_OUTPUT {
            return Some(format!("{what} {n}"));
        }
        if n > self.most_tokens() && !self.summarised {
            return Some(format!(
                "{what} {n} from {} chunks carrying {} bytes",
                self.chunks, self.bytes
            ));
        }
        let max = self.max_tokens.filter(|&m| n > m.saturating_add(1))?;
        Some(format!("{what} {n} with max_tokens {max}"))
    }
}

/// Why the server's usage cannot be true, if it cannot: a token is at least
/// a byte of text (or an empty chunk), a server never writes past
/// `max_tokens` (one more for an end-of-sequence token), and no prompt holds
/// billions of tokens. Reasoning counted and never shown (hidden) needs no text.
pub fn implausible(usage: Option<Usage>, carried: &Carried) -> Option<String> {
    let u = usage?;
    if let Some(n) = u.completion_tokens {
        let reasoning = u.reasoning_tokens.unwrap_or(0);
        if reasoning > n {
            return Some(format!(
                "reasoning_tokens {reasoning} of completion_tokens {n}"
            ));
        }
        // Reasoning counted and never streamed needs no bytes.
        let counted = Carried {
            hidden: carried.hidden.max(reasoning),
            ..*carried
        };
        if let Some(why) = counted.refutes("completion_tokens", n) {
            return Some(why);
        }
        // Every chunk that carried text carried a token of it at least
        // (one chunk spared: an echoed prompt, a last piece held back),
        // and hidden reasoning carried none.
        let texts = carried.chunks.saturating_sub(carried.calls);
        if n.saturating_sub(carried.hidden).saturating_add(1) < texts {
            return Some(format!(
                "completion_tokens {n} from {} chunks of text",
                carried.chunks
            ));
        }
    }
    match u.prompt_tokens {
        Some(p) if p > MAX_PLAUSIBLE_PROMPT => Some(format!("prompt_tokens {p}")),
        _ => None,
    }
}

/// Why a running count of generated tokens (one per chunk: usage on every
/// chunk, llama.cpp's `predicted_n`) cannot be true, if it cannot: it never
/// goes back, and it ends within what the stream carried.
pub fn implausible_running(running: &[u64], carried: &Carried) -> Option<String> {
    if let Some(w) = running.windows(2).find(|w| w[1] < w[0]) {
        return Some(format!("running count fell from {} to {}", w[0], w[1]));
    }
    carried.refutes("running count", *running.last()?)
}

/// Replaces each chunk's byte count with its token count, so that the
/// chunks' tokens sum to `total` (or to one a chunk, when `total` is
/// fewer; or to one less, an end-of-sequence token no chunk carried).
/// The running count when it is one per chunk, rises at every chunk and
/// ends at `total`; otherwise one token per chunk when the totals agree;
/// otherwise `total` split in proportion to text bytes (largest remainder,
/// at least one per chunk). A request's ITL samples are its chunks'
/// tokens, so they never outnumber its output.
pub fn split_tokens(chunks: &mut [Chunk], running: &[u64], total: u64) {
    let n = chunks.len() as u64;
    if n == 0 {
        return;
    }
    let rises = running.first().is_some_and(|&f| f > 0) && running.windows(2).all(|w| w[1] > w[0]);
    // The total may count one token more than the chunks' running count:
    // the end-of-sequence token, generated and never sent as text (vLLM's
    // continuous usage, llama.cpp's `predicted_n`). No chunk carried it.
    let ends = running
        .last()
        .is_some_and(|&last| last == total || last.saturating_add(1) == total);
    if running.len() == chunks.len() && rises && ends {
        let mut prev = 0;
        for (c, &cum) in chunks.iter_mut().zip(running) {
            c.1 = clamp_u32(cum - prev);
            prev = cum;
        }
        return;
    }
    if total <= n {
        chunks.iter_mut().for_each(|c| c.1 = 1);
        return;
    }
    let bytes: u128 = chunks.iter().map(|c| c.1.max(1) as u128).sum();
    let extra = (total - n) as u128; // one each first, the rest by bytes
    let mut given = 0u128;
    let mut remainders: Vec<(u128, usize)> = Vec::with_capacity(chunks.len());
    for (i, c) in chunks.iter_mut().enumerate() {
        let share = extra * c.1.max(1) as u128;
        let whole = share / bytes;
        remainders.push((share % bytes, i));
        c.1 = clamp_u32(1 + whole as u64);
        given += whole;
    }
    remainders.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders.iter().take((extra - given) as usize) {
        chunks[i].1 = chunks[i].1.saturating_add(1);
    }
}

/// A chunk's tokens fit its 32 bits once the counts are plausible (at most
/// a token a byte of a bounded event); saturating, never truncating, if not.
fn clamp_u32(n: u64) -> u32 {
    n.min(u32::MAX as u64) as u32
}

/// `total` split as `part : rest`, to the nearest token: the server's
/// count of all it generated, shared between reasoning and answer in the
/// proportion a local tokenizer counts them.
pub fn share(total: u64, part: u64, rest: u64) -> u64 {
    let whole = part as u128 + rest as u128;
    if whole == 0 {
        return 0;
    }
    ((total as u128 * part as u128 + whole / 2) / whole) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chunks(bytes: &[u32]) -> Vec<Chunk> {
        bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| Chunk(i as u64, b))
            .collect()
    }

    fn tokens(c: &[Chunk]) -> Vec<u32> {
        c.iter().map(|c| c.1).collect()
    }

    #[test]
    fn one_token_per_chunk_when_totals_agree() {
        let mut c = chunks(&[5, 3, 9]);
        split_tokens(&mut c, &[], 3);
        assert_eq!(tokens(&c), [1, 1, 1]);
    }

    #[test]
    fn equal_chunks_split_evenly() {
        let mut c = chunks(&[12, 12, 12, 12]);
        split_tokens(&mut c, &[], 16);
        assert_eq!(tokens(&c), [4, 4, 4, 4]);
    }

    #[test]
    fn uneven_chunks_split_by_bytes_and_sum_to_total() {
        let mut c = chunks(&[1, 3, 10, 6]);
        split_tokens(&mut c, &[], 11);
        assert_eq!(c.iter().map(|c| c.1 as u64).sum::<u64>(), 11);
        assert!(c[2].1 > c[0].1);
    }

    #[test]
    fn a_running_count_that_rises_to_the_total_wins() {
        let mut c = chunks(&[4, 4, 4]);
        split_tokens(&mut c, &[2, 5, 6], 6);
        assert_eq!(tokens(&c), [2, 3, 1]);
        // The end-of-sequence token counted in the total, never streamed.
        let mut c = chunks(&[4, 4, 4]);
        split_tokens(&mut c, &[1, 2, 3], 4);
        assert_eq!(tokens(&c), [1, 1, 1]);
        // One that stalls, or ends elsewhere than the total, is not used.
        let mut c = chunks(&[4, 4, 4]);
        split_tokens(&mut c, &[2, 2, 6], 6);
        assert_eq!(tokens(&c), [2, 2, 2]);
        let mut c = chunks(&[4, 4, 4]);
        split_tokens(&mut c, &[1, 2, 1 << 32], 3);
        assert_eq!(tokens(&c), [1, 1, 1]);
    }

    #[test]
    fn a_running_count_that_jumps_past_what_was_carried_is_refuted() {
        let carried = Carried {
            bytes: 40,
            chunks: 10,
            calls: 0,
            max_tokens: Some(16),
            hidden: 0,
            summarised: false,
        };
        let jumped = [1, 2, 3, 1 << 32];
        assert!(implausible_running(&jumped, &carried)
            .unwrap()
            .contains("running count 4294967296"));
        assert!(implausible_running(&[1, 5, 3], &carried)
            .unwrap()
            .contains("fell from 5 to 3"));
        assert_eq!(implausible_running(&[1, 2, 17], &carried), None);
        assert!(implausible_running(&[1, 2, 18], &carried).is_some());
    }

    #[test]
    fn usage_that_no_output_can_hold_is_refuted_and_calls_get_their_framing() {
        let usage = |n: u64| {
            Some(Usage {
                completion_tokens: Some(n),
                ..Usage::default()
            })
        };
        let text = Carried {
            bytes: 10,
            chunks: 2,
            calls: 0,
            max_tokens: None,
            hidden: 0,
            summarised: false,
        };
        assert_eq!(implausible(usage(12), &text), None);
        assert!(implausible(usage(13), &text).is_some());
        // Fewer tokens than chunks of text: a chunk carries a token at least.
        assert_eq!(implausible(usage(1), &text), None, "one chunk spared");
        let many = Carried { chunks: 5, ..text };
        assert!(implausible(usage(1), &many)
            .unwrap()
            .contains("from 5 chunks of text"));
        // Hidden reasoning carried no chunk: the rest must cover the chunks.
        let hiding = Carried {
            chunks: 50,
            bytes: 200,
            hidden: 5,
            ..text
        };
        let six = Some(Usage {
            completion_tokens: Some(6),
            reasoning_tokens: Some(5),
            ..Usage::default()
        });
        assert!(implausible(six, &hiding).is_some());
        // A summarised thought: its count is bound by max_tokens only.
        let summary = Carried {
            summarised: true,
            ..text
        };
        assert_eq!(implausible(usage(16_000), &summary), None);
        // Reasoning counted and never streamed needs no bytes; max_tokens
        // still bounds the whole.
        let hidden = |n: u64, r: u64| {
            Some(Usage {
                completion_tokens: Some(n),
                reasoning_tokens: Some(r),
                ..Usage::default()
            })
        };
        assert_eq!(implausible(hidden(1012, 1000), &text), None);
        assert_eq!(
            implausible(
                hidden(60, 60),
                &Carried {
                    chunks: 0,
                    bytes: 0,
                    ..text
                }
            ),
            None
        );
        let capped = Carried {
            max_tokens: Some(100),
            ..text
        };
        assert!(implausible(hidden(1012, 1000), &capped)
            .unwrap()
            .contains("max_tokens 100"));
        assert!(implausible(hidden(u64::MAX, u64::MAX - 1), &text).is_some());
        let calls = Carried { calls: 1, ..text };
        assert_eq!(implausible(usage(12 + CALL_FRAMING_TOKENS), &calls), None);
        assert!(implausible(usage(u64::MAX), &calls).is_some());
        let prompt = Some(Usage {
            prompt_tokens: Some(u64::MAX),
            ..Usage::default()
        });
        assert!(implausible(prompt, &text)
            .unwrap()
            .contains("prompt_tokens"));
    }

    #[test]
    fn a_share_rounds_to_the_nearest_token_and_never_overflows() {
        assert_eq!(share(10, 9, 9), 5);
        assert_eq!(share(10, 0, 0), 0);
        assert_eq!(share(u64::MAX, u64::MAX, 0), u64::MAX);
        assert_eq!(share(7, 1, 2), 2);
    }

    proptest! {
        /// Whatever the bytes, the running count and the total: the chunks'
        /// tokens sum to the total (or one each when fewer), and no chunk
        /// claims more than the total — so ITL samples never outnumber the
        /// output.
        #[test]
        fn the_split_sums_to_the_total_and_never_outnumbers_it(
            bytes in proptest::collection::vec(0u32..5000, 1..40),
            running in proptest::collection::vec(0u64..10_000, 0..40),
            total in 0u64..200_000,
        ) {
            let mut c = chunks(&bytes);
            split_tokens(&mut c, &running, total);
            let sum: u64 = c.iter().map(|c| c.1 as u64).sum();
            let whole = total.max(c.len() as u64);
            prop_assert!(sum == whole || sum + 1 == total, "{} of {}", sum, whole);
            prop_assert!(c.iter().all(|c| c.1 >= 1));
        }
    }
}
