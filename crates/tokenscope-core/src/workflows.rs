//! Agent workflows (`--workflow`, `--replay-trace`): each workflow's
//! makespan and its critical path's parts, taken from its last record (so
//! memory stays flat), and two findings on the graph's shape — a join held
//! by one slow branch, and a fan-out whose parallel calls queue in the
//! server (sent together, answered one after another: their TTFTs, ranked,
//! a staircase).

use crate::diagnosis::finding;
use crate::record::RequestRecord;
use crate::results::{Finding, WorkflowFigures};
use crate::stats::Distribution;
use serde_json::json;
use std::collections::BTreeMap;

/// Joins and fan-outs followed by name, at most (past it, not followed).
const MAX_FOLLOWED: usize = 64;
/// Sibling places followed per fan-out (the first 32 sent).
const MAX_PLACES: usize = 32;
/// Workflows (or siblings per place) a finding needs before it is drawn.
const MIN_SAMPLES: u64 = 5;

/// The finished workflows, one last record at a time.
#[derive(Debug, Clone, Default)]
pub struct WorkflowTally {
    workflows: u64,
    complete: u64,
    calls: u64,
    makespan: Distribution,
    makespan_us: u64,
    llm_us: u64,
    tool_us: u64,
    other_us: u64,
    join_wait_us: u64,
    peak: u64,
    peak_max: u64,
    joins: BTreeMap<String, JoinTally>,
    /// Per step of parallel calls, each rank's TTFT sum (µs) and count
    /// (rank 0: the sibling answered first).
    siblings: BTreeMap<String, Vec<(f64, u64)>>,
}

/// One join's waits, summed over the workflows that ran it.
#[derive(Debug, Clone, Default)]
struct JoinTally {
    n: u64,
    branches: u64,
    slowest_us: u64,
    median_us: u64,
    held_us: u64,
    makespan_us: u64,
}

impl WorkflowTally {
    /// Takes one measured record (a workflow's last carries its figures).
    pub fn add(&mut self, r: &RequestRecord) {
        let Some(e) = r.workflow_end.as_deref() else {
            return;
        };
        self.workflows += 1;
        self.calls += e.calls as u64;
        if !e.complete {
            return;
        }
        self.complete += 1;
        self.makespan.record_us(e.makespan_us);
        self.makespan_us += e.makespan_us;
        self.llm_us += e.path_llm_us;
        self.tool_us += e.path_tool_us;
        self.other_us += e.path_other_us;
        self.join_wait_us += e.path_join_wait_us;
        self.peak += e.peak_in_flight as u64;
        self.peak_max = self.peak_max.max(e.peak_in_flight as u64);
        for j in &e.joins {
            if self.joins.len() >= MAX_FOLLOWED && !self.joins.contains_key(&j.step) {
                continue;
            }
            let t = self.joins.entry(j.step.clone()).or_default();
            t.n += 1;
            t.branches += j.branches as u64;
            t.slowest_us += j.slowest_us;
            t.median_us += j.median_us;
            t.held_us += j.held_us;
            t.makespan_us += e.makespan_us;
        }
        for group in &e.siblings {
            for (rank, &ttft) in group.ttft_us.iter().enumerate() {
                self.sibling(&group.step, rank, ttft as f64);
            }
        }
    }

    fn sibling(&mut self, step: &str, place: usize, ttft_us: f64) {
        if place >= MAX_PLACES {
            return;
        }
        if self.siblings.len() >= MAX_FOLLOWED && !self.siblings.contains_key(step) {
            return;
        }
        let places = self.siblings.entry(step.to_string()).or_default();
        if places.len() <= place {
            places.resize(place + 1, (0.0, 0));
        }
        places[place].0 += ttft_us;
        places[place].1 += 1;
    }

    /// The figures, when any workflow ended.
    pub fn finish(&self) -> Option<WorkflowFigures> {
        (self.workflows > 0).then(|| {
            let n = self.complete.max(1) as f64;
            let total = self.makespan_us.max(1) as f64;
            WorkflowFigures {
                workflows: self.workflows,
                complete: self.complete,
                calls_per_workflow: self.calls as f64 / self.workflows as f64,
                makespan_ms: self.makespan.summary(1e-3),
                path_llm_share: self.llm_us as f64 / total,
                path_tool_share: self.tool_us as f64 / total,
                path_other_share: self.other_us as f64 / total,
                path_join_wait_share: self.join_wait_us as f64 / total,
                peak_in_flight_mean: self.peak as f64 / n,
                peak_in_flight_max: self.peak_max,
            }
        })
    }

    /// The findings on the graph's shape the workflows support.
    pub fn findings(&self) -> Vec<Finding> {
        let mut out: Vec<Finding> = self
            .joins
            .iter()
            .filter_map(|(name, j)| slow_branch(name, j))
            .collect();
        out.extend(
            self.siblings
                .iter()
                .filter_map(|(name, places)| fan_out_queued(name, places)),
        );
        out
    }
}

/// A join held by one slow branch, on average over the workflows: its
/// slowest branch took at least twice the median one, and the join waited
/// after half its branches were done for at least a fifth of the makespan.
fn slow_branch(name: &str, j: &JoinTally) -> Option<Finding> {
    let n = j.n as f64;
    let (slowest, median) = (j.slowest_us as f64 / n / 1e3, j.median_us as f64 / n / 1e3);
    let (held, makespan) = (j.held_us as f64 / n / 1e3, j.makespan_us as f64 / n / 1e3);
    let share = held / makespan.max(1e-9);
    if j.n < MIN_SAMPLES || slowest < 2.0 * median || share < 0.2 {
        return None;
    }
    Some(finding(
        "join_slow_branch",
        "info",
        format!(
            "join `{name}` is held by one slow branch: its slowest of {:.1} branches took {slowest:.0} ms against {median:.0} ms for the median, and it waited {held:.0} ms after half were done — {:.0} % of the makespan (means over {} workflows; the rule: slowest ≥ 2× median and the wait ≥ 20 % of the makespan)",
            j.branches as f64 / n,
            share * 100.0,
            j.n
        ),
        &[
            ("step", json!(name)),
            ("workflows", json!(j.n)),
            ("slowest_ms", json!(slowest)),
            ("median_ms", json!(median)),
            ("held_ms", json!(held)),
            ("makespan_share", json!(share)),
        ],
    ))
}

/// A fan-out's calls queued in the server: sent together, they were
/// answered one after another — the mean TTFT of the k-th answered rises
/// as a staircase: ranked, the last rank's mean at least 1.5× and 10 ms
/// over the first's, over at least three ranks with five workflows each.
/// (Siblings of very different prompt lengths spread too: the message
/// says so.)
fn fan_out_queued(name: &str, places: &[(f64, u64)]) -> Option<Finding> {
    let means: Vec<f64> = places
        .iter()
        .take_while(|(_, n)| *n >= MIN_SAMPLES)
        .map(|(sum, n)| sum / *n as f64 / 1e3)
        .collect();
    let (first, last) = (*means.first()?, *means.last()?);
    if means.len() < 3 || last < 1.5 * first || last - first < 10.0 {
        return None;
    }
    Some(finding(
        "fan_out_queued",
        "warning",
        format!(
            "the parallel calls of `{name}` queue in the server: sent together, they were answered one after another — TTFT {first:.0} ms for the first answered to {last:.0} ms for the {}th (means over at least {} workflows each; the rule: the last ≥ 1.5× and 10 ms over the first, unless their prompts differ that much): whatever waits for all of them waits for the last",
            means.len(),
            MIN_SAMPLES
        ),
        &[("step", json!(name)), ("ttft_ms_by_rank", json!(means))],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Chunk, JoinWait, SiblingTtfts, WorkflowCall, WorkflowEnd};

    fn call(step: &str, branch: u32, ttft_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::sent(0, 0, 0);
        r.first_token_at_us = Some(ttft_ms * 1000);
        r.chunks = vec![Chunk(ttft_ms * 1000, 1)];
        r.done_at_us = ttft_ms * 1000;
        r.workflow = Some(WorkflowCall {
            id: 0,
            step: step.into(),
            branch,
            pass: 0,
        });
        r
    }

    #[test]
    fn makespans_and_path_shares_come_from_last_records() {
        let mut t = WorkflowTally::default();
        let mut r = call("join", 0, 10);
        r.workflow_end = Some(Box::new(WorkflowEnd {
            calls: 6,
            complete: true,
            makespan_us: 1_000_000,
            path_llm_us: 700_000,
            path_tool_us: 200_000,
            path_other_us: 100_000,
            path_join_wait_us: 250_000,
            peak_in_flight: 4,
            ..Default::default()
        }));
        t.add(&r);
        let mut broken = call("join", 0, 10);
        broken.workflow_end = Some(Box::new(WorkflowEnd {
            calls: 2,
            complete: false,
            makespan_us: 5,
            ..Default::default()
        }));
        t.add(&broken);
        let f = t.finish().unwrap();
        assert_eq!((f.workflows, f.complete, f.peak_in_flight_max), (2, 1, 4));
        assert!((f.path_llm_share - 0.7).abs() < 1e-9 && (f.path_other_share - 0.1).abs() < 1e-9);
        assert!((f.makespan_ms.unwrap().p50 - 1000.0).abs() < 1.0);
        assert!((f.path_join_wait_share - 0.25).abs() < 1e-9);
        assert_eq!(f.calls_per_workflow, 4.0);
    }

    #[test]
    fn a_join_held_by_one_branch_is_found_and_an_even_one_is_not() {
        let held = |slowest_us, held_us| {
            let mut t = WorkflowTally::default();
            for _ in 0..5 {
                let mut r = call("w", 0, 10);
                r.workflow_end = Some(Box::new(WorkflowEnd {
                    complete: true,
                    makespan_us: 1_000_000,
                    joins: vec![JoinWait {
                        step: "join".into(),
                        branches: 4,
                        slowest_us,
                        median_us: 100_000,
                        held_us,
                    }],
                    ..Default::default()
                }));
                t.add(&r);
            }
            t.findings()
        };
        let f = held(600_000, 500_000);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].rule, "join_slow_branch");
        assert!(
            f[0].message.contains("600 ms against 100 ms"),
            "{}",
            f[0].message
        );
        assert!(held(150_000, 50_000).is_empty());
    }

    #[test]
    fn siblings_answered_as_a_staircase_are_found_and_even_ones_are_not() {
        let mut t = WorkflowTally::default();
        for _ in 0..5 {
            let mut r = call("join", 0, 10);
            r.workflow_end = Some(Box::new(WorkflowEnd {
                complete: true,
                makespan_us: 1,
                siblings: vec![
                    SiblingTtfts {
                        step: "research".into(),
                        ttft_us: vec![20_000, 40_000, 60_000, 80_000],
                    },
                    SiblingTtfts {
                        step: "even".into(),
                        ttft_us: vec![50_000, 51_000, 52_000, 53_000],
                    },
                ],
                ..Default::default()
            }));
            t.add(&r);
        }
        let f = t.findings();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].message.contains("`research`")
                && f[0]
                    .message
                    .contains("20 ms for the first answered to 80 ms")
        );
    }
}
