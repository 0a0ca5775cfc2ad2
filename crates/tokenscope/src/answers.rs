//! What answers did across runs: a series' points compared with its lowest
//! load (the same prompts at temperature 0 should get the same answers;
//! `sweep --consistency`), each point's accuracy (`--grade`), and two runs
//! compared the same way (`compare`). Records always carry their answer's
//! hash, so this reads nothing but the run directories.

use crate::run_dir::Done;
use std::path::Path;
use tokenscope_core::consistency::{self, AcrossLoads, Answer, Answers, AtLoad};
use tokenscope_core::results::RunResults;

/// A run's successful answers by request id (warm-up left out), with their
/// texts where it kept them.
pub fn read_answers(dir: &Path) -> anyhow::Result<Answers> {
    let mut texts = tokenscope_load::recorder::read_texts(dir);
    let mut out = Answers::new();
    tokenscope_report::run_dir::for_each_record(dir, |r| {
        let hash = r
            .answer_hash
            .as_deref()
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        if let (Some(hash), false, true) = (hash, r.warmup, r.succeeded()) {
            out.insert(
                r.id,
                Answer {
                    hash,
                    text: texts.remove(&r.id),
                },
            );
        }
    })?;
    Ok(out)
}

/// Whether a run's answers can be compared with another's: it asked for
/// temperature 0 (the same prompt, the same answer).
pub fn deterministic(r: &RunResults) -> bool {
    r.config["temperature"].as_f64() == Some(0.0)
}

/// Tokens of a text, as the built-in tokenizer counts them.
fn tokens(s: &str) -> u64 {
    tokenscope_workload::tokenizer::count_tokens(s).unwrap_or(s.split_whitespace().count() as u64)
}

/// The series' answers across its loads (points sorted by load): the
/// consistency with the lowest load where every point asked for
/// temperature 0 and kept its directory, the accuracy where graded; `None`
/// when there is neither.
pub fn across(points: &[Done]) -> Option<AcrossLoads> {
    let first = points.first()?;
    // The same prompts: every point asked for temperature 0 with one seed.
    let compare = points.len() > 1
        && points.iter().all(|d| {
            deterministic(&d.results)
                && d.dir.is_some()
                && d.results.config["seed"] == first.results.config["seed"]
        });
    let base = match compare {
        true => first.dir.as_deref().and_then(|d| read_answers(d).ok()),
        false => None,
    };
    let at: Vec<AtLoad> = points
        .iter()
        .map(|d| AtLoad {
            point: d.label.clone(),
            load: d.load,
            consistency: base.as_ref().and_then(|b| {
                let run = read_answers(d.dir.as_deref()?).ok()?;
                Some(consistency::compare(b, &run, &tokens))
            }),
            accuracy: d.results.accuracy.clone(),
        })
        .collect();
    if at
        .iter()
        .all(|p| p.consistency.is_none() && p.accuracy.is_none())
    {
        return None;
    }
    let mut findings: Vec<_> = at
        .iter()
        .skip(1)
        .filter_map(|p| consistency::finding(p.consistency.as_ref()?, &p.point, &first.label))
        .collect();
    findings.extend(consistency::accuracy_finding(&at));
    Some(AcrossLoads {
        baseline: first.label.clone(),
        points: at,
        findings,
    })
}

/// Two runs' answers compared (`compare`), when both asked for
/// temperature 0 with the same seed (so the same ids sent the same prompts).
pub fn between(
    (a_dir, a): (&Path, &RunResults),
    (b_dir, b): (&Path, &RunResults),
) -> Option<consistency::Consistency> {
    let same_prompts = a.config["seed"] == b.config["seed"];
    if !(deterministic(a) && deterministic(b) && same_prompts) {
        return None;
    }
    let (x, y) = (read_answers(a_dir).ok()?, read_answers(b_dir).ok()?);
    let c = consistency::compare(&x, &y, &tokens);
    (c.compared > 0).then_some(c)
}
