//! Graded answers (`--grade`): each answer compared with its dataset
//! entry's `expected` by one rule, the conventions of the evaluation
//! harnesses (lm-evaluation-harness's exact match and regex filter,
//! GSM8K's last number), so accuracy can be watched under load.

use serde_json::Value;

/// How an answer is compared with what was expected.
#[derive(Debug, Clone)]
pub enum Grade {
    /// The same text, trimmed, case ignored, a final period dropped.
    Exact,
    /// The expected text appears in the answer, case ignored.
    Contains,
    /// The answer's last number equals the expected one (1e-6 relative):
    /// how GSM8K-style sets are graded, whatever the words around it.
    Number,
    /// The answer is JSON equal to the expected JSON (key order ignored).
    Json,
    /// The pattern's first group (or whole match) in the answer, compared
    /// exactly with the expected text (lm-evaluation-harness's regex filter).
    Regex(regex::Regex),
}

impl std::str::FromStr for Grade {
    type Err = String;

    fn from_str(s: &str) -> Result<Grade, String> {
        Ok(match s {
            "exact" => Grade::Exact,
            "contains" => Grade::Contains,
            "number" => Grade::Number,
            "json" => Grade::Json,
            _ => match s.strip_prefix("regex:") {
                Some(p) => Grade::Regex(
                    regex::Regex::new(p).map_err(|e| format!("`{p}` is not a regex: {e}"))?,
                ),
                None => {
                    return Err(format!(
                        "`{s}`: exact, contains, number, json or regex:PATTERN"
                    ))
                }
            },
        })
    }
}

impl Grade {
    /// Its name in the results (`exact`, `regex:…`).
    pub fn label(&self) -> String {
        match self {
            Grade::Exact => "exact".into(),
            Grade::Contains => "contains".into(),
            Grade::Number => "number".into(),
            Grade::Json => "json".into(),
            Grade::Regex(r) => format!("regex:{}", r.as_str()),
        }
    }

    /// Whether `answer` is right, `expected` being the entry's answer.
    pub fn right(&self, answer: &str, expected: &str) -> bool {
        let norm = |s: &str| s.trim().trim_end_matches('.').trim().to_lowercase();
        match self {
            Grade::Exact => norm(answer) == norm(expected),
            Grade::Contains => answer
                .to_lowercase()
                .contains(&expected.trim().to_lowercase()),
            Grade::Number => match (last_number(answer), last_number(expected)) {
                (Some(a), Some(e)) => (a - e).abs() <= 1e-6 * e.abs().max(1.0),
                _ => false,
            },
            Grade::Json => {
                let parse = |s: &str| serde_json::from_str::<Value>(s.trim()).ok();
                matches!((parse(answer), parse(expected)), (Some(a), Some(e)) if a == e)
            }
            Grade::Regex(r) => r.captures(answer).is_some_and(|c| {
                let got = c.get(1).or_else(|| c.get(0)).map_or("", |m| m.as_str());
                got.trim() == expected.trim()
            }),
        }
    }
}

/// The last number in `s` (`1,234.5` reads as 1234.5; a sign is kept).
fn last_number(s: &str) -> Option<f64> {
    static NUMBER: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re =
        NUMBER.get_or_init(|| regex::Regex::new(r"-?\d[\d,]*(?:\.\d+)?").expect("a valid pattern"));
    let m = re.find_iter(s).last()?;
    m.as_str().replace(',', "").parse().ok()
}

/// A hash of an answer's text (FNV-1a, 64 bits, in hex): what two runs'
/// answers are compared by when their text is not kept.
pub fn answer_hash(text: &str) -> String {
    format!("{:016x}", tokenscope_core::hash::fnv1a(text.bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grade(rule: &str, answer: &str, expected: &str) -> bool {
        rule.parse::<Grade>().unwrap().right(answer, expected)
    }

    #[test]
    fn each_rule_grades_as_the_harnesses_do() {
        assert!(grade("exact", " Paris. ", "paris"));
        assert!(!grade("exact", "Paris, France", "Paris"));
        assert!(grade("contains", "It is Paris, France", "paris"));
        assert!(grade("number", "7 + 12 makes 19.", "19"));
        assert!(grade("number", "The total is 1,234.50", "1234.5"));
        assert!(!grade("number", "19 or 20", "19"), "the last number counts");
        assert!(!grade("number", "no idea", "19"));
        assert!(grade("number", "-3", "-3"));
        assert!(grade("json", r#"{"b": 2, "a": 1}"#, r#"{"a":1,"b":2}"#));
        assert!(!grade("json", r#"{"a": 1"#, r#"{"a":1}"#));
        assert!(grade(r"regex:answer is (\w+)", "so the answer is B", "B"));
        assert!(!grade(r"regex:answer is (\w+)", "so the answer is C", "B"));
        assert!("regex:(".parse::<Grade>().is_err());
        assert!("fuzzy".parse::<Grade>().unwrap_err().contains("exact"));
    }

    #[test]
    fn equal_texts_hash_equal_and_others_not() {
        assert_eq!(answer_hash("a b"), answer_hash("a b"));
        assert_ne!(answer_hash("a b"), answer_hash("a c"));
        assert_eq!(answer_hash("").len(), 16);
    }
}
