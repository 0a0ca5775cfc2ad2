//! A finished workflow's figures, from its instances: the critical path
//! traced back from the step that ended last, each join's wait for its
//! slowest branch, and each step's parallel calls' TTFTs.

use super::state::{Inst, Run};
use std::collections::BTreeMap;
use tokenscope_core::record::{JoinWait, SiblingTtfts, WorkflowEnd};

/// Joins kept per workflow (those held longest): a trace of hundreds of
/// joins keeps its record small.
const MAX_JOINS: usize = 16;
/// TTFTs kept per group of parallel calls.
const MAX_SIBLINGS: usize = 32;

/// The instance the workflow ends with: the latest to end of the steps
/// nothing comes after.
pub(super) fn end_instance(run: &Run<'_>) -> Option<usize> {
    let n = run.graph.steps.len();
    let mut followed = vec![false; n];
    for s in &run.graph.steps {
        for d in &s.after {
            followed[d.step] = true;
        }
    }
    (0..n)
        .filter(|&s| !followed[s])
        .flat_map(|s| run.steps[s].done.iter().copied())
        .max_by_key(|&i| run.arena[i].done_us)
}

/// The path back from `end` through the instances that gated each step,
/// its time in three parts that add up to the makespan.
pub(super) fn critical_path(run: &Run<'_>, end: usize, f: &mut WorkflowEnd) {
    let mut at = Some(end);
    let mut names = Vec::new();
    while let Some(i) = at {
        let x = &run.arena[i];
        let took = x.done_us.saturating_sub(x.sent_us);
        match x.tool {
            true => f.path_tool_us += took,
            false => f.path_llm_us += took,
        }
        f.path_join_wait_us += held_us(run, x);
        names.push(run.graph.steps[x.step].name.clone());
        at = x.gate;
    }
    names.reverse();
    f.path = names;
    // The rest: what the path's calls and tools did not take (a step
    // ready and not yet sent, a trace's gap after its gate).
    f.path_other_us = f.makespan_us.saturating_sub(f.path_llm_us + f.path_tool_us);
}

/// How long a join (an instance that waited for several) was held after
/// its median branch ended, until its last did; 0 for one that was not.
fn held_us(run: &Run<'_>, x: &Inst) -> u64 {
    if x.awaited.len() < 2 {
        return 0;
    }
    let mut ends: Vec<u64> = x.awaited.iter().map(|&i| run.arena[i].done_us).collect();
    ends.sort_unstable();
    ends[ends.len() - 1].saturating_sub(ends[(ends.len() - 1) / 2])
}

/// Each join of more than one branch: its slowest branch, the median
/// one, and how long it was held after the median one ended (the
/// longest-held kept).
pub(super) fn joins(run: &Run<'_>) -> Vec<JoinWait> {
    let mut out: Vec<JoinWait> = run
        .arena
        .iter()
        .filter(|x| x.awaited.len() >= 2)
        .map(|x| {
            let mut branches: Vec<&Inst> = x.awaited.iter().map(|&i| &run.arena[i]).collect();
            branches.sort_by_key(|y| y.done_us);
            let took = |y: &Inst| y.done_us.saturating_sub(y.fork_us);
            let median = branches[(branches.len() - 1) / 2];
            JoinWait {
                step: run.graph.steps[x.step].name.clone(),
                branches: branches.len() as u32,
                slowest_us: branches.iter().map(|y| took(y)).max().unwrap_or(0),
                median_us: took(median),
                held_us: held_us(run, x),
            }
        })
        .collect();
    out.sort_by_key(|j| std::cmp::Reverse(j.held_us));
    out.truncate(MAX_JOINS);
    out
}

/// Each step's parallel calls in one pass: their TTFTs, shortest first.
pub(super) fn siblings(
    run: &Run<'_>,
    ttfts: BTreeMap<(usize, u32), Vec<u64>>,
) -> Vec<SiblingTtfts> {
    ttfts
        .into_iter()
        .filter(|(_, t)| t.len() >= 2)
        .map(|((s, _), mut t)| {
            t.sort_unstable();
            t.truncate(MAX_SIBLINGS);
            SiblingTtfts {
                step: run.graph.steps[s].name.clone(),
                ttft_us: t,
            }
        })
        .collect()
}
