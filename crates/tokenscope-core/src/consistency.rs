//! Answers that change with load: the same prompts sent at temperature 0
//! at two loads (a sweep's points, or two runs `compare`d) should get the
//! same answers. Batch-variance bugs, KV-cache corruption, quantisation and
//! speculative-decoding bugs show up as answers that differ; each pair of
//! requests with the same id is compared by its answer's hash, and where
//! the texts were kept (`--keep-text`), by where the first difference falls
//! (a token index).

use crate::formats::wilson;
use crate::results::Finding;
use crate::stats::{Distribution, Summary};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One request's answer: its hash, and its text where kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub hash: u64,
    pub text: Option<String>,
}

/// The answers of one run, by request id.
pub type Answers = HashMap<u64, Answer>;

/// How one run's answers compare with a baseline's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Consistency {
    /// Requests answered in both (same id, both successful).
    pub compared: u64,
    pub identical: u64,
    pub share: f64,
    /// The Wilson 95 % interval of the share.
    pub share_ci95: (f64, f64),
    /// Of the differing answers, the token index where each first differs
    /// (tokens of their common beginning); only where both texts were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_divergence_token: Option<Summary>,
    /// Differing answers whose texts were both kept.
    pub texts_compared: u64,
}

/// `run` against `base`: `count_tokens` measures a common beginning.
pub fn compare(base: &Answers, run: &Answers, count_tokens: &dyn Fn(&str) -> u64) -> Consistency {
    let (mut compared, mut identical, mut texts_compared) = (0, 0, 0);
    let mut at = Distribution::new();
    for (id, a) in run {
        let Some(b) = base.get(id) else { continue };
        compared += 1;
        if a.hash == b.hash {
            identical += 1;
            continue;
        }
        if let (Some(x), Some(y)) = (&a.text, &b.text) {
            texts_compared += 1;
            at.record(count_tokens(common_start(x, y)) as f64);
        }
    }
    Consistency {
        compared,
        identical,
        share: match compared {
            0 => 0.0,
            n => identical as f64 / n as f64,
        },
        share_ci95: wilson(identical, compared),
        first_divergence_token: at.summary(1.0),
        texts_compared,
    }
}

/// The longest beginning two texts share in whole words: cut back to
/// the last word's start unless both go on with a new word there, so its
/// tokens are the tokens the two answers have in common.
fn common_start<'a>(a: &'a str, b: &str) -> &'a str {
    let n = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i);
    let word_ends = |s: &str| s[n..].chars().next().is_none_or(char::is_whitespace);
    match word_ends(a) && b.get(n..).is_some_and(|_| word_ends(b)) {
        true => &a[..n],
        false => &a[..a[..n].rfind(char::is_whitespace).unwrap_or(0)],
    }
}

/// The finding when answers at `label` differed from the baseline's.
pub fn finding(c: &Consistency, label: &str, baseline: &str) -> Option<Finding> {
    (c.identical < c.compared).then(|| {
        let at = match &c.first_divergence_token {
            Some(s) => format!(
                "; the first difference falls at token p50 {:.0} (min {:.0}, max {:.0}) of {} compared texts",
                s.p50, s.min, s.max, c.texts_compared
            ),
            None => "; keep the texts (--keep-text) to see where they first differ".into(),
        };
        Finding {
            rule: "answers_change_with_load".into(),
            severity: "warning".into(),
            message: format!(
                "at {label}, {} of {} answers differed from {baseline}'s for the same prompts ({:.1} % identical, 95 % interval {:.1}–{:.1} %){at}",
                c.compared - c.identical,
                c.compared,
                c.share * 100.0,
                c.share_ci95.0 * 100.0,
                c.share_ci95.1 * 100.0
            ),
            evidence: [
                ("compared".to_string(), serde_json::json!(c.compared)),
                ("identical".to_string(), serde_json::json!(c.identical)),
                ("share_ci95".to_string(), serde_json::json!(c.share_ci95)),
            ]
            .into_iter()
            .collect(),
        }
    })
}

/// What the answers did across a series' loads: per point, how many were
/// the same as at the lowest load (`sweep --consistency`) and how many were
/// right (`--grade`), and the findings where either fell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AcrossLoads {
    /// The point the others are compared with (the lowest load).
    pub baseline: String,
    pub points: Vec<AtLoad>,
    pub findings: Vec<Finding>,
}

/// One point's answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AtLoad {
    pub point: String,
    pub load: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<crate::results::Accuracy>,
}

/// The finding when a point's accuracy fell below the baseline's: its
/// 95 % interval lies wholly below the baseline's (a drop the counts
/// support, not noise).
pub fn accuracy_finding(points: &[AtLoad]) -> Option<Finding> {
    let (base, base_acc) = points
        .iter()
        .find_map(|p| p.accuracy.as_ref().map(|a| (p, a)))?;
    let dropped = points.iter().find(|p| {
        p.accuracy
            .as_ref()
            .is_some_and(|a| a.share_ci95.1 < base_acc.share_ci95.0)
    })?;
    let a = dropped.accuracy.as_ref()?;
    let pct = |x: f64| x * 100.0;
    Some(Finding {
        rule: "accuracy_drops_with_load".into(),
        severity: "warning".into(),
        message: format!(
            "accuracy fell with load: {:.1} % at {} (95 % interval {:.1}–{:.1} %, {} graded) against {:.1} % at {} ({:.1}–{:.1} %, {} graded); the intervals do not overlap",
            pct(a.share), dropped.point, pct(a.share_ci95.0), pct(a.share_ci95.1), a.graded,
            pct(base_acc.share), base.point, pct(base_acc.share_ci95.0), pct(base_acc.share_ci95.1),
            base_acc.graded
        ),
        evidence: [
            ("baseline".to_string(), serde_json::json!(base.point)),
            ("point".to_string(), serde_json::json!(dropped.point)),
            ("share".to_string(), serde_json::json!(a.share)),
            ("baseline_share".to_string(), serde_json::json!(base_acc.share)),
        ]
        .into_iter()
        .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(items: &[(u64, u64, Option<&str>)]) -> Answers {
        items
            .iter()
            .map(|&(id, hash, text)| {
                let text = text.map(str::to_owned);
                (id, Answer { hash, text })
            })
            .collect()
    }

    #[test]
    fn same_ids_are_compared_and_the_first_difference_placed() {
        let base = answers(&[
            (0, 1, Some(" a b c")),
            (1, 2, None),
            (2, 3, None),
            (9, 9, None),
        ]);
        let run = answers(&[
            (0, 7, Some(" a b x")),
            (1, 2, None),
            (2, 3, None),
            (5, 5, None),
        ]);
        let words = |s: &str| s.split_whitespace().count() as u64;
        let c = compare(&base, &run, &words);
        assert_eq!((c.compared, c.identical, c.texts_compared), (3, 2, 1));
        assert_eq!(c.first_divergence_token.unwrap().p50, 2.0);
        let f = finding(&c, "concurrency 8", "concurrency 1").unwrap();
        assert!(f.message.contains("1 of 3"), "{}", f.message);
        let same = compare(&base, &base, &words);
        assert_eq!(same.identical, same.compared);
        assert!(finding(&same, "x", "y").is_none());
        assert_eq!(common_start(" the héllo", " the hélp"), " the");
        assert_eq!(common_start(" the of x", " the of y"), " the of");
        assert_eq!(common_start(" a b", " a b c"), " a b");
    }

    #[test]
    fn accuracy_drops_only_when_the_intervals_part() {
        let at = |point: &str, correct, graded| AtLoad {
            point: point.into(),
            load: 1.0,
            consistency: None,
            accuracy: Some(crate::results::Accuracy {
                rule: "number".into(),
                graded,
                correct,
                share: correct as f64 / graded as f64,
                share_ci95: wilson(correct, graded),
            }),
        };
        let noisy = [at("c1", 95, 100), at("c8", 88, 100)];
        assert!(accuracy_finding(&noisy).is_none(), "overlapping intervals");
        let fell = [at("c1", 98, 100), at("c8", 70, 100)];
        let f = accuracy_finding(&fell).unwrap();
        assert!(f.message.contains("70.0 % at c8"), "{}", f.message);
    }
}
