//! Which generated text is the model's reasoning and which is its answer,
//! whatever the API: a reasoning field (`reasoning_content`, `reasoning`),
//! or `<think>`…`</think>` at the start of the answer from a server run
//! without a reasoning parser (`--reasoning-parser`).
//!
//! The tags may be split over chunks (`<th` + `ink>`), so a stream's
//! [`Reasoner`] holds back at most a tag's length of text until it can tell.

/// `--reasoning-parser`: where reasoning is recognised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningParser {
    /// Reasoning fields, and `<think>` tags opening the answer.
    #[default]
    Auto,
    /// Reasoning fields only: a `<think>` in the answer is answer text.
    Field,
    /// `<think>` tags only: a reasoning field's text is answer text.
    ThinkTags,
    /// None: all generated text is answer.
    None,
}

impl ReasoningParser {
    pub const NAMES: [&'static str; 4] = ["auto", "field", "think-tags", "none"];

    pub fn name(self) -> &'static str {
        match self {
            ReasoningParser::Auto => "auto",
            ReasoningParser::Field => "field",
            ReasoningParser::ThinkTags => "think-tags",
            ReasoningParser::None => "none",
        }
    }

    fn fields(self) -> bool {
        matches!(self, ReasoningParser::Auto | ReasoningParser::Field)
    }

    fn tags(self) -> bool {
        matches!(self, ReasoningParser::Auto | ReasoningParser::ThinkTags)
    }
}

impl std::str::FromStr for ReasoningParser {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(ReasoningParser::Auto),
            "field" => Ok(ReasoningParser::Field),
            "think-tags" => Ok(ReasoningParser::ThinkTags),
            "none" => Ok(ReasoningParser::None),
            _ => Err(format!("`{s}`: expected auto, field, think-tags or none")),
        }
    }
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Where a stream's answer text stands against the tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tags {
    /// Nothing answered yet: a `<think>` may still open the answer.
    Start,
    /// Inside `<think>`…`</think>`.
    Thinking,
    /// Past the tags, or there were none.
    Answering,
}

/// One stream's reasoning state.
#[derive(Debug, Clone)]
pub struct Reasoner {
    parser: ReasoningParser,
    tags: Tags,
    /// Answer text held back until the tags can be told (at most a tag's length).
    held: String,
    /// The reasoning so far (empty unless the stream reasons), for a
    /// tokenizer to count.
    reasoning: String,
}

/// How many bytes of a piece of text were reasoning and how many answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: usize,
    pub answer: usize,
}

impl Reasoner {
    pub fn new(parser: ReasoningParser) -> Reasoner {
        Reasoner {
            parser,
            tags: match parser.tags() {
                true => Tags::Start,
                false => Tags::Answering,
            },
            held: String::new(),
            reasoning: String::new(),
        }
    }

    /// The reasoning text so far.
    pub fn reasoning_text(&self) -> &str {
        &self.reasoning
    }

    /// Text taken and not yet put on the end of the stream's text (a
    /// possible tag being told apart).
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Text from a reasoning field. It is kept with the reasoning only,
    /// never on `text`: `text` is the answer's channel (a `<think>` opening
    /// it, then the answer), so the answer is its end whatever order the
    /// server interleaves the two fields in.
    pub fn reasoning_field(&mut self, s: &str, text: &mut String) -> Split {
        if !self.parser.fields() {
            return self.answer(s, text);
        }
        self.reasoning.push_str(s);
        Split {
            reasoning: s.len(),
            answer: 0,
        }
    }

    fn think(&mut self, s: &str, text: &mut String) {
        self.reasoning.push_str(s);
        text.push_str(s);
    }

    /// The first `n` held bytes are reasoning: out of the hold, onto `text`.
    fn think_held(&mut self, n: usize, text: &mut String) -> usize {
        self.reasoning.push_str(&self.held[..n]);
        text.push_str(&self.held[..n]);
        self.held.drain(..n);
        n
    }

    /// Answer text (a content delta, a completion's text).
    pub fn answer(&mut self, s: &str, text: &mut String) -> Split {
        if self.tags == Tags::Answering && self.held.is_empty() {
            text.push_str(s);
            return Split {
                reasoning: 0,
                answer: s.len(),
            };
        }
        self.held.push_str(s);
        let mut split = Split::default();
        loop {
            match self.tags {
                Tags::Answering => {
                    split.answer += self.held.len();
                    text.push_str(&self.held);
                    self.held.clear();
                    return split;
                }
                Tags::Start => {
                    let lead = self.held.len() - self.held.trim_start().len();
                    let rest = &self.held[lead..];
                    if rest.len() < OPEN.len() && OPEN.starts_with(rest) {
                        return split; // maybe the start of `<think>`: wait
                    }
                    if rest.starts_with(OPEN) {
                        split.reasoning += self.think_held(lead + OPEN.len(), text);
                        self.tags = Tags::Thinking;
                    } else {
                        self.tags = Tags::Answering;
                    }
                }
                Tags::Thinking => {
                    let (cut, closed) = match self.held.find(CLOSE) {
                        Some(at) => (at + CLOSE.len(), true),
                        None => (self.held.len() - partial_suffix(&self.held, CLOSE), false),
                    };
                    split.reasoning += self.think_held(cut, text);
                    if !closed {
                        return split;
                    }
                    self.tags = Tags::Answering;
                }
            }
        }
    }

    /// The end of the stream: text held back is what it was waiting to be.
    pub fn finish(&mut self, text: &mut String) -> Split {
        let held = std::mem::take(&mut self.held);
        match self.tags {
            Tags::Thinking => {
                self.think(&held, text);
                Split {
                    reasoning: held.len(),
                    answer: 0,
                }
            }
            _ => {
                text.push_str(&held);
                Split {
                    reasoning: 0,
                    answer: held.len(),
                }
            }
        }
    }
}

/// The length of the longest end of `s` that begins `tag` (a tag split
/// over chunks), shorter than the tag, on a character boundary.
fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.is_char_boundary(s.len() - k) && tag.starts_with(&s[s.len() - k..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `chunks` as answer text: each chunk's split, the reasoning and
    /// the whole text at the end.
    fn feed(parser: ReasoningParser, chunks: &[&str]) -> (Vec<Split>, String, String) {
        let mut r = Reasoner::new(parser);
        let mut text = String::new();
        let mut steps: Vec<Split> = chunks.iter().map(|c| r.answer(c, &mut text)).collect();
        steps.push(r.finish(&mut text));
        (steps, r.reasoning_text().to_string(), text)
    }

    fn answer_bytes(steps: &[Split]) -> usize {
        steps.iter().map(|s| s.answer).sum()
    }

    #[test]
    fn tags_split_over_chunks_are_told_apart() {
        let chunks = ["<th", "ink>let me", " see</th", "ink>The answer", " is 4"];
        let (steps, reasoning, text) = feed(ReasoningParser::Auto, &chunks);
        assert_eq!(reasoning, "<think>let me see</think>");
        assert_eq!(text, chunks.concat(), "every byte kept, in order");
        assert_eq!(answer_bytes(&steps), "The answer is 4".len());
        // The answer's first text is known at the fourth chunk, not before.
        assert_eq!(steps.iter().position(|s| s.answer > 0), Some(3));
        assert_eq!(
            steps[1].reasoning,
            "<think>let me".len(),
            "reasoning flows as it comes"
        );
    }

    #[test]
    fn an_answer_without_tags_flows_at_once_and_loses_nothing() {
        let (steps, reasoning, text) = feed(ReasoningParser::Auto, &["Hello", " world"]);
        assert_eq!(
            steps[0],
            Split {
                reasoning: 0,
                answer: 5
            }
        );
        assert_eq!((reasoning.as_str(), text.as_str()), ("", "Hello world"));
        // A lone `<` waits one chunk, then is answer.
        let (steps, reasoning, text) = feed(ReasoningParser::Auto, &["<", "b>bold"]);
        assert_eq!(steps[0], Split::default());
        assert_eq!(answer_bytes(&steps), 7);
        assert_eq!((reasoning.as_str(), text.as_str()), ("", "<b>bold"));
    }

    #[test]
    fn thinking_cut_off_is_all_reasoning_and_modes_are_kept() {
        let (steps, reasoning, _) =
            feed(ReasoningParser::Auto, &["\n<think>a long", " thought</thi"]);
        assert_eq!(reasoning, "\n<think>a long thought</thi");
        assert_eq!(answer_bytes(&steps), 0);
        let (steps, reasoning, _) = feed(ReasoningParser::Field, &["<think>x</think>y"]);
        assert_eq!(
            (reasoning.as_str(), answer_bytes(&steps)),
            ("", 17),
            "field mode reads no tags"
        );
        let mut text = String::new();
        let mut r = Reasoner::new(ReasoningParser::ThinkTags);
        assert_eq!(
            r.reasoning_field("r", &mut text).answer,
            1,
            "think-tags mode reads no field"
        );
        let mut r = Reasoner::new(ReasoningParser::None);
        assert_eq!(r.answer("<think>x</think>y", &mut text).answer, 17);
        let mut r = Reasoner::new(ReasoningParser::Auto);
        assert_eq!(
            r.reasoning_field("hm", &mut text),
            Split {
                reasoning: 2,
                answer: 0
            }
        );
        assert_eq!(
            "think-tags".parse::<ReasoningParser>(),
            Ok(ReasoningParser::ThinkTags)
        );
        assert!("xml".parse::<ReasoningParser>().is_err());
    }

    #[test]
    fn a_partial_closing_tag_is_held_on_a_character_boundary() {
        assert_eq!(partial_suffix("abc</th", CLOSE), 4);
        assert_eq!(partial_suffix("abc<", CLOSE), 1);
        assert_eq!(partial_suffix("abcé", CLOSE), 0);
        assert_eq!(partial_suffix("", CLOSE), 0);
    }
}
