//! Synthetic workload: prompt and output lengths drawn from a SPEC, prompts
//! built from words that are one token each in the built-in tokenizer
//! (cl100k), reproducible from `--seed` and unique per request unless a
//! shared prefix is asked for.

pub use crate::lengths::{LengthSpec, MAX_LENGTH};
use crate::seed::mix;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::Distribution;

/// Words that are exactly one cl100k token each, with their leading space
/// (checked by a test), so a prompt of N words is N tokens in the built-in tokenizer.
pub const WORDS: &[&str] = &[
    " the", " of", " and", " to", " in", " is", " was", " for", " on", " that", " with", " as",
    " by", " at", " from", " his", " it", " an", " were", " are", " which", " this", " be", " or",
    " has", " had", " first", " not", " but", " after", " also", " new", " their", " one", " two",
    " they", " its", " who", " been", " time", " her", " she", " he", " year", " city", " school",
    " world", " used", " during", " would", " other", " there", " all", " into", " more", " most",
    " can", " some", " such", " many", " only", " over", " later", " war", " may", " about",
    " made", " team", " state", " film", " game", " music", " house", " water", " light", " river",
    " paper", " stone", " green", " small", " large", " early", " north", " south", " west",
    " east", " party", " family", " people", " group", " second", " three", " four", " five",
    " life", " work", " part", " place", " name", " day", " night", " number", " line", " form",
    " power", " country", " system", " public", " service", " company", " market", " model",
    " data", " value", " point", " level", " order", " table", " field", " road", " train",
    " plant", " animal", " color", " sound", " word", " story", " book", " letter", " king",
    " church", " station", " island", " lake", " door", " street",
];

/// The words synthetic prompts are made of: one token each in the
/// tokenizer in use (the model's, with `--tokenizer`; else cl100k's [`WORDS`]).
pub fn words() -> &'static [&'static str] {
    crate::tokenizer::model().map_or(WORDS, |m| &m.words)
}

/// Words that encode the request index, so no two prompts share a prefix past the shared one.
const ID_WORDS: usize = 3;

/// What the workload asks of every request.
#[derive(Debug, Clone)]
pub struct Workload {
    pub input: LengthSpec,
    /// `None`: no `max_tokens`, the server decides.
    pub output: Option<LengthSpec>,
    pub seed: u64,
    /// Tokens at the start of every prompt that are the same for all requests.
    pub shared_prefix: u64,
    /// Prompts (or recorded lengths) from a file: request `id` sends entry
    /// `id` (cycling past the end); its output length wins over `output`.
    pub dataset: Option<std::sync::Arc<crate::dataset::Dataset>>,
    /// Agentic loads: the shared prefix is one of this many (system prompts,
    /// tool contexts), each request's drawn with Zipf popularity (exponent
    /// `prefix_zipf`: group 1 the most used). 1: one prefix for all.
    pub prefix_groups: u32,
    pub prefix_zipf: f64,
    /// `--multi-turn`: requests come in sessions.
    pub multi_turn: Option<crate::session::MultiTurn>,
    /// `--images`, `--audio`: synthetic media every request carries (a
    /// dataset entry's own media win).
    pub media: Option<std::sync::Arc<crate::media::Synthetic>>,
    /// `--workflow`, `--replay-trace`: requests come in agent workflows.
    pub workflows: Option<std::sync::Arc<crate::workflow::Workflows>>,
}

/// One request's prompt and length.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSpec {
    pub prompt: String,
    /// Tokens in the built-in tokenizer (the server's usage count is preferred when it comes).
    pub input_tokens: u64,
    pub max_tokens: Option<u64>,
    /// A pooling request's other inputs (`--batch-size`): the rest of an
    /// embeddings batch, or rerank's documents. `input_tokens` counts them.
    pub documents: Vec<String>,
    /// Images, audio and video sent with the prompt (text tokens only are
    /// in `input_tokens`; the server counts the media's).
    pub media: Vec<std::sync::Arc<crate::media::Media>>,
    /// Its dataset entry's own tools (they win over `--tools`).
    pub tools: Option<std::sync::Arc<Vec<serde_json::Value>>>,
    /// Its dataset entry's expected answer (`--grade`).
    pub expected: Option<String>,
}

impl Workload {
    /// Synthetic prompts and lengths, one request at a time: no shared
    /// prefix, no dataset, no sessions (set those fields after).
    pub fn new(input: LengthSpec, output: Option<LengthSpec>, seed: u64) -> Workload {
        Workload {
            input,
            output,
            seed,
            shared_prefix: 0,
            dataset: None,
            prefix_groups: 1,
            prefix_zipf: 1.0,
            multi_turn: None,
            media: None,
            workflows: None,
        }
    }

    /// Request `id`'s prompt and output lengths, as [`Workload::request`] draws
    /// them, without building the prompt (the simulator needs only lengths).
    pub fn lengths(&self, id: u64) -> (u64, Option<u64>) {
        let (_, input, output) = self.draw_lengths(id);
        (input, output)
    }

    /// How many entries the dataset holds, when there is one.
    pub fn dataset_len(&self) -> Option<u64> {
        self.dataset.as_ref().map(|d| d.len() as u64)
    }

    /// The identity of the shared prefix request `id` starts with (a
    /// session's first turn: `id` is the session): its group's. Equal keys,
    /// equal prefixes.
    pub fn prefix_key(&self, id: u64) -> u64 {
        mix(self.seed ^ self.prefix_group(id))
    }

    /// Request `id`'s prefix group, 0-based (0 when there is one group).
    pub fn prefix_group(&self, id: u64) -> u64 {
        if self.prefix_groups <= 1 {
            return 0;
        }
        let mut rng = StdRng::seed_from_u64(mix(self.seed ^ mix(id) ^ 0x7072_6566));
        rand_distr::Zipf::new(self.prefix_groups as f64, self.prefix_zipf)
            .map_or(0, |z| z.sample(&mut rng) as u64 - 1)
    }

    /// How many sessions the dataset holds (`None`: no dataset sessions).
    pub fn dataset_sessions(&self) -> Option<u64> {
        let d = self.dataset.as_ref()?;
        (!d.sessions.is_empty()).then_some(d.sessions.len() as u64)
    }

    /// How many turns session `s` has.
    pub fn session_turns(&self, s: u64) -> u32 {
        if let Some(d) = self.dataset.as_ref().filter(|d| !d.sessions.is_empty()) {
            return d.session(s).len() as u32;
        }
        let turns = self
            .multi_turn
            .as_ref()
            .map_or(LengthSpec::Fixed(1), |m| m.turns);
        let mut rng = StdRng::seed_from_u64(mix(self.seed ^ mix(s) ^ 0x7475_726e));
        turns.sample(&mut rng).min(u32::MAX as u64) as u32
    }

    /// The result of tool call `call` in round `round` after turn `k` of
    /// session `s`: one-token words, as many as `--tool-result-tokens` draws.
    pub fn tool_result(&self, s: u64, (k, round, call): (u32, u32, u32)) -> (String, u64) {
        let tools = self
            .multi_turn
            .as_ref()
            .map(|m| m.tools.clone())
            .unwrap_or_default();
        let key = mix(mix(s) ^ mix(((k as u64) << 40) | ((round as u64) << 20) | call as u64));
        let mut rng = StdRng::seed_from_u64(mix(self.seed ^ key ^ 0x746f_6f6c));
        let n = tools.result_tokens.sample(&mut rng);
        (self.unique_words(key, n, &mut rng), n)
    }

    /// The user message of turn `k` of session `s` and its lengths (the
    /// history is not in it: the runner carries the server's answers). Only
    /// a session's first turn starts with the shared prefix.
    pub fn turn(&self, s: u64, k: u32) -> PromptSpec {
        let (mut rng, key, input_tokens, max_tokens) = self.draw_turn(s, k);
        let media = self.media_of(self.session_entry(s, k), key);
        let prompt = match self.session_entry(s, k).map(|e| &e.prompt) {
            Some(crate::dataset::Prompt::Text(t)) => t.clone(),
            Some(_) => self.unique_words(key, input_tokens, &mut rng),
            None if k == 0 => self.synthetic(s, input_tokens, &mut rng),
            None => self.unique_words(key, input_tokens, &mut rng),
        };
        let entry = self.session_entry(s, k);
        PromptSpec {
            prompt,
            input_tokens,
            max_tokens,
            documents: Vec::new(),
            media,
            tools: entry.and_then(|e| e.tools.clone()),
            expected: entry.and_then(|e| e.expected.clone()),
        }
    }

    /// The media of a request: its dataset entry's, else the run's
    /// synthetic media drawn for `key`.
    fn media_of(
        &self,
        entry: Option<&crate::dataset::Entry>,
        key: u64,
    ) -> Vec<std::sync::Arc<crate::media::Media>> {
        match (entry.filter(|e| !e.media.is_empty()), &self.media) {
            (Some(e), _) => e.media.clone(),
            (None, Some(synthetic)) => synthetic.for_request(key),
            (None, None) => Vec::new(),
        }
    }

    /// Turn `k` of session `s`: its new message's tokens and `max_tokens`,
    /// as [`Workload::turn`] draws them, without building the text (the
    /// simulator needs only lengths).
    pub fn turn_lengths(&self, s: u64, k: u32) -> (u64, Option<u64>) {
        let (_, _, input, output) = self.draw_turn(s, k);
        (input, output)
    }

    /// A dataset session's entry for turn `k` of session `s`.
    fn session_entry(&self, s: u64, k: u32) -> Option<&crate::dataset::Entry> {
        let d = self.dataset.as_ref().filter(|d| !d.sessions.is_empty())?;
        Some(&d.entries[d.session(s)[k as usize]])
    }

    /// The turn's random source (what its words are drawn from), its key and lengths.
    fn draw_turn(&self, s: u64, k: u32) -> (StdRng, u64, u64, Option<u64>) {
        let key = mix(mix(s) ^ (k as u64 + 1));
        let mut rng = StdRng::seed_from_u64(mix(self.seed ^ key));
        let input = self.input.sample(&mut rng);
        let output = self.output.map(|o| o.sample(&mut rng));
        match self.session_entry(s, k) {
            Some(e) => (rng, key, e.input_tokens, e.output_tokens.or(output)),
            None => (rng, key, input, output),
        }
    }

    fn draw_lengths(&self, id: u64) -> (StdRng, u64, Option<u64>) {
        let mut rng = StdRng::seed_from_u64(mix(self.seed ^ mix(id)));
        let input_tokens = self.input.sample(&mut rng);
        let max_tokens = self.output.map(|o| o.sample(&mut rng));
        match self.dataset.as_ref().map(|d| d.entry(id)) {
            Some(e) => (rng, e.input_tokens, e.output_tokens.or(max_tokens)),
            None => (rng, input_tokens, max_tokens),
        }
    }

    /// Request `id` of a pooling API with `documents` inputs besides its
    /// prompt (`--batch-size`: the rest of an embeddings batch, or rerank's
    /// documents): the workload's prompts from `id × (documents + 1)` on,
    /// the first its prompt. With none, [`Workload::request`]`(id)`.
    pub fn batch(&self, id: u64, documents: u64) -> PromptSpec {
        if documents == 0 {
            return self.request(id);
        }
        let first = id.saturating_mul(documents + 1);
        let mut spec = self.request(first);
        for k in 1..=documents {
            let doc = self.request(first.saturating_add(k));
            spec.input_tokens += doc.input_tokens;
            spec.documents.push(doc.prompt);
        }
        spec
    }

    /// The prompt and lengths of request `id`: the same for the same seed and id,
    /// whatever the concurrency or timing.
    pub fn request(&self, id: u64) -> PromptSpec {
        let (mut rng, input_tokens, max_tokens) = self.draw_lengths(id);
        use crate::dataset::{Prompt, MOONCAKE_BLOCK};
        let prompt = match self.dataset.as_ref().map(|d| &d.entry(id).prompt) {
            None | Some(Prompt::Length(_)) => self.synthetic(id, input_tokens, &mut rng),
            Some(Prompt::Text(text)) => text.clone(),
            Some(Prompt::Blocks { hash_ids, length }) => {
                // Equal hash ids, equal blocks: the trace's prefix reuse.
                let vocab = words();
                let mut prompt = String::with_capacity(*length as usize * 7);
                let mut left = *length;
                for h in hash_ids {
                    let mut block = StdRng::seed_from_u64(mix(self.seed ^ mix(!h)));
                    for _ in 0..left.min(MOONCAKE_BLOCK) {
                        prompt.push_str(vocab[block.random_range(0..vocab.len())]);
                    }
                    left = left.saturating_sub(MOONCAKE_BLOCK);
                }
                for _ in 0..left {
                    prompt.push_str(vocab[rng.random_range(0..vocab.len())]);
                }
                prompt
            }
        };
        let entry = self.dataset.as_ref().map(|d| d.entry(id));
        PromptSpec {
            prompt,
            input_tokens,
            max_tokens,
            documents: Vec::new(),
            media: self.media_of(entry, id),
            tools: entry.and_then(|e| e.tools.clone()),
            expected: entry.and_then(|e| e.expected.clone()),
        }
    }

    /// `input_tokens` one-token words: the shared prefix, words that encode
    /// `id` (so no two prompts share more), then words drawn from `rng`.
    fn synthetic(&self, id: u64, input_tokens: u64, rng: &mut StdRng) -> String {
        let mut prompt = String::with_capacity(input_tokens as usize * 7);
        let mut shared = StdRng::seed_from_u64(self.prefix_key(id));
        let vocab = words();
        let prefix = self.shared_prefix.min(input_tokens);
        for _ in 0..prefix {
            prompt.push_str(vocab[shared.random_range(0..vocab.len())]);
        }
        prompt.push_str(&self.unique_words(id, input_tokens - prefix, rng));
        prompt
    }

    /// A workflow step's new words: `n` one-token words, unique to `key`
    /// (the workflow, step, pass and branch it is).
    pub fn step_words(&self, key: u64, n: u64) -> String {
        let mut rng = StdRng::seed_from_u64(mix(self.seed ^ key ^ 0x7766_6c77));
        self.unique_words(key, n, &mut rng)
    }

    /// `n` one-token words, the first few encoding `id` so no two such runs share a prefix.
    fn unique_words(&self, id: u64, n: u64, rng: &mut StdRng) -> String {
        let vocab = words();
        let mut prompt = String::with_capacity(n as usize * 7);
        let mut left = n;
        let mut digits = id;
        for _ in 0..ID_WORDS.min(left as usize) {
            prompt.push_str(vocab[(digits % vocab.len() as u64) as usize]);
            digits /= vocab.len() as u64;
            left -= 1;
        }
        for _ in 0..left {
            prompt.push_str(vocab[rng.random_range(0..vocab.len())]);
        }
        prompt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!("256".parse::<LengthSpec>().unwrap(), LengthSpec::Fixed(256));
        assert_eq!(
            "uniform:128..512".parse::<LengthSpec>().unwrap(),
            LengthSpec::Uniform(128, 512)
        );
        assert_eq!(
            "normal:512,64".parse::<LengthSpec>().unwrap(),
            LengthSpec::Normal {
                mean: 512.0,
                std: 64.0
            }
        );
        assert!("lognormal:512,256".parse::<LengthSpec>().is_ok());
        for spec in [
            "256",
            "uniform:128..512",
            "normal:512,64",
            "lognormal:512,256",
        ] {
            assert_eq!(spec.parse::<LengthSpec>().unwrap().to_string(), spec);
        }
        for bad in [
            "0",
            "uniform:0..5",
            "abc",
            "uniform:5..1",
            "gauss:1,2",
            "normal:1",
            "normal:-1,2",
            "normal:inf,1",
            "1e15",
            "uniform:1..1e9",
            "lognormal:512,NaN",
        ] {
            let err = bad.parse::<LengthSpec>().unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn samples_follow_the_spec() {
        let mut rng = StdRng::seed_from_u64(1);
        let n = 20_000;
        let u: Vec<u64> = (0..n)
            .map(|_| LengthSpec::Uniform(10, 20).sample(&mut rng))
            .collect();
        assert!(u.iter().all(|&v| (10..=20).contains(&v)));
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
        assert!((mean(&u) - 15.0).abs() < 0.1);
        let ln: Vec<u64> = (0..n)
            .map(|_| {
                LengthSpec::LogNormal {
                    mean: 512.0,
                    std: 256.0,
                }
                .sample(&mut rng)
            })
            .collect();
        assert!((mean(&ln) - 512.0).abs() < 10.0, "{}", mean(&ln));
        let nn: Vec<u64> = (0..n)
            .map(|_| {
                LengthSpec::Normal {
                    mean: 100.0,
                    std: 10.0,
                }
                .sample(&mut rng)
            })
            .collect();
        assert!((mean(&nn) - 100.0).abs() < 0.5);
    }

    fn workload(shared_prefix: u64) -> Workload {
        Workload {
            shared_prefix,
            ..Workload::new(LengthSpec::Uniform(50, 60), Some(LengthSpec::Fixed(8)), 7)
        }
    }

    #[test]
    fn reproducible_and_unique() {
        let w = workload(0);
        assert_eq!(w.request(3), w.request(3));
        let a = w.request(1);
        let b = w.request(2);
        assert_ne!(a.prompt, b.prompt);
        // Different from the first words on: no accidental prefix-cache hit.
        assert_ne!(a.prompt.split(' ').nth(1), b.prompt.split(' ').nth(1));
        assert_eq!(a.max_tokens, Some(8));
        assert_eq!(w.lengths(1), (a.input_tokens, a.max_tokens));
    }

    #[test]
    fn shared_prefix_is_shared() {
        let w = workload(20);
        let a = w.request(1);
        let b = w.request(2);
        let first20 = |s: &str| s.split(' ').take(21).collect::<Vec<_>>().join(" ");
        assert_eq!(first20(&a.prompt), first20(&b.prompt));
        assert_ne!(a.prompt, b.prompt);
    }

    #[test]
    fn prompt_has_exactly_the_asked_tokens_in_cl100k() {
        let bpe = tiktoken_rs::cl100k_base().unwrap();
        for w in WORDS {
            assert_eq!(bpe.encode_ordinary(w).len(), 1, "`{w}` is not one token");
        }
        let w = workload(5);
        for id in 0..20 {
            let p = w.request(id);
            assert_eq!(bpe.encode_ordinary(&p.prompt).len() as u64, p.input_tokens);
            assert_eq!(p.prompt.split_whitespace().count() as u64, p.input_tokens);
        }
    }

    #[test]
    fn prefix_groups_follow_zipf_and_share_their_prefix() {
        let w = Workload {
            prefix_groups: 4,
            prefix_zipf: 1.2,
            ..workload(20)
        };
        let n = 20_000;
        let mut counts = [0u64; 4];
        for id in 0..n {
            counts[w.prefix_group(id) as usize] += 1;
        }
        let weights: Vec<f64> = (1..=4).map(|i| (i as f64).powf(-1.2)).collect();
        let total: f64 = weights.iter().sum();
        for (c, wt) in counts.iter().zip(&weights) {
            let (got, want) = (*c as f64 / n as f64, wt / total);
            assert!((got - want).abs() < 0.015, "{counts:?}: {got} vs {want}");
        }
        // Requests of one group start alike; of two groups, not.
        let first = |id| {
            w.request(id)
                .prompt
                .split(' ')
                .take(21)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let (a, b) = (
            (0..).find(|&i| w.prefix_group(i) == 0).unwrap(),
            (0..).find(|&i| w.prefix_group(i) == 1).unwrap(),
        );
        let a2 = (a + 1..).find(|&i| w.prefix_group(i) == 0).unwrap();
        assert_eq!(first(a), first(a2));
        assert_ne!(first(a), first(b));
    }

    #[test]
    fn a_batch_takes_the_prompts_after_its_own_and_counts_them_all() {
        let w = Workload::new(LengthSpec::Fixed(5), None, 7);
        let b = w.batch(1, 2);
        assert_eq!(b.prompt, w.request(3).prompt);
        assert_eq!(b.documents, [w.request(4).prompt, w.request(5).prompt]);
        assert_eq!(b.input_tokens, 15);
        assert_eq!(w.batch(1, 2), b, "reproducible");
        assert_eq!(w.batch(1, 0), w.request(1));
    }
}
