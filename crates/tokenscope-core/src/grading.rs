//! Graded answers (`--grade`): the share of answers that matched their
//! entry's `expected`, with the interval its count supports.

use crate::formats::wilson;
use crate::record::RequestRecord;
use crate::results::Accuracy;

/// The successful requests' grades, gathered one record at a time.
#[derive(Debug, Clone, Copy, Default)]
pub struct GradeTally {
    graded: u64,
    correct: u64,
}

impl GradeTally {
    /// Takes one successful measured record.
    pub fn add(&mut self, r: &RequestRecord) {
        if let Some(ok) = r.correct {
            self.graded += 1;
            self.correct += u64::from(ok);
        }
    }

    /// The accuracy under the run's `rule` (`--grade`), when any answer
    /// was graded.
    pub fn finish(&self, rule: &str) -> Option<Accuracy> {
        let n = self.graded;
        (n > 0).then(|| Accuracy {
            rule: rule.to_string(),
            graded: n,
            correct: self.correct,
            share: self.correct as f64 / n as f64,
            share_ci95: wilson(self.correct, n),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_graded_answers_count() {
        let mut t = GradeTally::default();
        let mut r = RequestRecord::sent(0, 0, 0);
        t.add(&r);
        assert!(t.finish("exact").is_none());
        for ok in [true, true, true, false] {
            r.correct = Some(ok);
            t.add(&r);
        }
        let a = t.finish("number").unwrap();
        assert_eq!((a.graded, a.correct, a.rule.as_str()), (4, 3, "number"));
        assert!((a.share - 0.75).abs() < 1e-12);
        assert!(a.share_ci95.0 < 0.75 && a.share_ci95.1 > 0.75);
    }
}
