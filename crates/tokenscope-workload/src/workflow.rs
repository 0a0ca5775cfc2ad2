//! Agent workflows (`--workflow FILE`): a graph of steps that one task of
//! an agent runs — LLM calls and tool waits, fan-outs to parallel branches,
//! joins that wait for all of them (or the first k), a loop back to an
//! earlier step. A workflow is one arrival of the load, as a session is;
//! the client runs its graph (`tokenscope_load::workflow`) and the figures
//! are the whole task's: its makespan and critical path.
//!
//! The file (TOML, or the same in JSON) lists the steps in order; a step
//! names the steps it comes `after`, which must be above it, so the file
//! reads top-down and cannot hold a cycle except the loops it asks for:
//!
//! ```toml
//! [[step]]
//! name = "plan"
//! input_tokens = 200
//! output_tokens = 40
//!
//! [[step]]
//! name = "research"
//! after = ["plan"]
//! fan_out = "uniform:2..6"    # parallel branches, drawn per workflow
//! output_tokens = "uniform:20..80"
//!
//! [[step]]
//! name = "search"
//! after = ["research"]
//! each = true                  # one per branch, going on from it
//! tool = "uniform:100ms..300ms"
//!
//! [[step]]
//! name = "write"
//! after = ["search"]
//! join = "all"                 # or "first:2"
//! output_tokens = 120
//!
//! [[step]]
//! name = "critic"
//! after = ["write"]
//! output_tokens = 20
//! loop = { to = "write", times = "uniform:0..2" }
//! ```
//!
//! Workflows replayed from traces (`crate::otlp_trace`) are graphs of the
//! same type with fixed lengths, and the gaps the trace left between a call
//! and the calls after it kept on the graph's edges.

use crate::lengths::LengthSpec;
use crate::session::ThinkTime;
use rand::Rng;
use serde::Deserialize;
use std::time::Duration;

/// Steps a workflow may have (a replayed trace's LLM calls among them).
pub const MAX_STEPS: usize = 1024;
/// Parallel branches a fan-out may have.
pub const MAX_FAN_OUT: u64 = 256;
/// Extra passes a loop may make.
pub const MAX_LOOPS: u64 = 16;
/// Calls and waits one workflow may make at most, counted before it runs
/// (every fan-out at its largest, every loop at its longest): a file that
/// could ask for more is refused, so a workflow's own bookkeeping is bounded.
pub const MAX_INSTANCES: u64 = 65_536;
/// The longest step name kept (names are keys of the figures).
const MAX_NAME: usize = 64;

/// One workflow's graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    /// In file order: every step's `after` points above it.
    pub steps: Vec<Step>,
}

/// One step of a workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: String,
    pub kind: StepKind,
    /// The steps it waits for; with [`Step::each`], the one step whose
    /// branches it follows.
    pub after: Vec<Dep>,
    /// How many parallel instances it runs (1 unless a fan-out).
    pub fan_out: Count,
    /// One instance per instance of its one `after` step, each going on as
    /// soon as its own parent is done (a branch's chain).
    pub each: bool,
    /// Of the instances it waits for, how many: all, or the first k.
    pub join: Join,
    /// After it, go back to an earlier step this many more times.
    pub repeat: Option<Loop>,
    /// A first step's offset from the workflow's start (a replayed trace's;
    /// zero in a file).
    pub start_after: Duration,
    /// Its prompt starts with the conversation of the step it goes on
    /// from (its parent's prompt and answer), as an agent's sub-call
    /// shares its caller's context; else only the answers are carried.
    pub share_prefix: bool,
    /// Its new message is a `--dataset` entry's (its text and lengths; the
    /// step's `output_tokens` wins), drawn per call, instead of words.
    pub from_dataset: bool,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// A request to the model: its own new prompt tokens (the context it
    /// carries comes on top) and its output length (`None`: the run's).
    Llm {
        input: Option<LengthSpec>,
        output: Option<LengthSpec>,
        /// `input` is the whole prompt's length, the context carried
        /// included (a replayed trace's calls, whose usage counted it all):
        /// the new words fill what the context leaves.
        input_total: bool,
    },
    /// A tool's run: a wait, no request.
    Tool { latency: ThinkTime },
}

/// An edge: the step waited for, and the gap left after it before this
/// step is ready (a replayed trace's; zero in a file).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dep {
    pub step: usize,
    pub gap: Duration,
}

/// How many of the instances a step waits for it needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Join {
    All,
    /// The first k to finish (all of them when there are fewer); the rest
    /// still run to their end, and are recorded, but nothing waits for them.
    First(u64),
}

/// A loop back from the step that holds it to `to`, an earlier step (or
/// itself): the steps between run again, `times` more passes, drawn per
/// workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct Loop {
    pub to: usize,
    pub times: Count,
    /// The steps each pass runs again, in order: `to`, the steps after it
    /// that lead to the looping step, and the looping step.
    pub body: Vec<usize>,
}

/// A count drawn per workflow: `4` or `uniform:2..6` (0 allowed where a
/// loop may make no extra pass).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Count {
    Fixed(u64),
    Uniform(u64, u64),
}

impl Count {
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match *self {
            Count::Fixed(n) => n,
            Count::Uniform(a, b) => rng.random_range(a..=b),
        }
    }

    pub fn max(&self) -> u64 {
        match *self {
            Count::Fixed(n) | Count::Uniform(_, n) => n,
        }
    }

    fn parse(spec: &str, most: u64) -> Result<Count, String> {
        let bad = |why: &str| format!("`{spec}`: {why} (use 4 or uniform:2..6)");
        let num = |s: &str| -> Result<u64, String> {
            let n = s
                .trim()
                .parse::<u64>()
                .map_err(|_| bad("not a whole number"))?;
            match n > most {
                true => Err(bad(&format!("above {most}"))),
                false => Ok(n),
            }
        };
        match spec.trim().strip_prefix("uniform:") {
            None => Ok(Count::Fixed(num(spec)?)),
            Some(rest) => {
                let (a, b) = rest.split_once("..").ok_or_else(|| bad("expected A..B"))?;
                let (a, b) = (num(a)?, num(b)?);
                match b < a {
                    true => Err(bad("the upper bound is below the lower one")),
                    false => Ok(Count::Uniform(a, b)),
                }
            }
        }
    }
}

/// The file's workflow, or a trace's workflows, and for a trace the start
/// of each (seconds from the first, at speed 1): the arrivals replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflows {
    pub graphs: Vec<Workflow>,
    pub offsets_s: Option<Vec<f64>>,
    /// Where they came from, for the results' config.
    pub source: String,
}

impl Workflows {
    /// Workflow `w`'s graph (a trace's workflows cycle).
    pub fn graph(&self, w: u64) -> &Workflow {
        &self.graphs[(w % self.graphs.len() as u64) as usize]
    }
}

/// A workflow or trace file that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct WorkflowError {
    pub path: String,
    pub why: String,
}

/// The largest workflow file read (a graph, not data).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Reads a workflow file: TOML, or JSON when it starts with `{`.
pub fn read(path: &std::path::Path) -> Result<Workflows, WorkflowError> {
    let fail = |why: String| WorkflowError {
        path: path.display().to_string(),
        why,
    };
    let big = "more than a workflow holds (is it a trace? use --replay-trace FILE)";
    let text = read_text(path, MAX_FILE_BYTES, big).map_err(fail)?;
    let graph = parse(&text).map_err(fail)?;
    Ok(Workflows {
        graphs: vec![graph],
        offsets_s: None,
        source: path.display().to_string(),
    })
}

/// A workflow from its file's text (TOML or JSON).
pub fn parse(text: &str) -> Result<Workflow, String> {
    let file: File = match text.trim_start().starts_with('{') {
        true => serde_json::from_str(text).map_err(|e| format!("not a workflow in JSON: {e}"))?,
        false => toml::from_str(text).map_err(|e| toml_error(text, &e))?,
    };
    build(file)
}

/// A file's text, at most `max` bytes read (a larger file, or an endless
/// one — a pipe, a device — is refused with `too_big`, never read whole).
pub(crate) fn read_text(path: &std::path::Path, max: u64, too_big: &str) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
    let mut text = String::new();
    file.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read it as text: {e}"))?;
    match text.len() as u64 > max {
        true => Err(format!("over {max} bytes: {too_big}")),
        false => Ok(text),
    }
}

/// A TOML error in one line: what, and where (line and column).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let at = e.span().map_or(String::new(), |span| {
        let before = &text[..span.start.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
        format!(" (line {line}, column {column})")
    });
    format!(
        "not a workflow in TOML: {}{at}",
        e.message().trim().replace('\n', "; ")
    )
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    step: Vec<FileStep>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStep {
    name: String,
    #[serde(default)]
    after: Vec<String>,
    input_tokens: Option<NumOrText>,
    output_tokens: Option<NumOrText>,
    tool: Option<String>,
    fan_out: Option<NumOrText>,
    #[serde(default)]
    each: bool,
    join: Option<String>,
    #[serde(rename = "loop")]
    repeat: Option<FileLoop>,
    share_prefix: Option<bool>,
    #[serde(default)]
    dataset: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLoop {
    to: String,
    times: NumOrText,
}

/// `4` or `"uniform:2..6"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Num(u64),
    Text(String),
}

impl NumOrText {
    fn text(&self) -> String {
        match self {
            NumOrText::Num(n) => n.to_string(),
            NumOrText::Text(t) => t.clone(),
        }
    }
}

/// The file's steps checked and tied together.
fn build(file: File) -> Result<Workflow, String> {
    if file.step.is_empty() {
        return Err("no [[step]]: a workflow needs at least one".into());
    }
    if file.step.len() > MAX_STEPS {
        return Err(format!("{} steps, more than {MAX_STEPS}", file.step.len()));
    }
    let mut steps: Vec<Step> = Vec::with_capacity(file.step.len());
    for s in &file.step {
        let step = build_step(s, &steps)
            .map_err(|why| format!("step `{}`: {why}", s.name.escape_debug()))?;
        steps.push(step);
    }
    for (i, s) in file.step.iter().enumerate() {
        if let Some(l) = &s.repeat {
            let looped =
                build_loop(l, i, &steps).map_err(|why| format!("step `{}`: {why}", s.name))?;
            steps[i].repeat = Some(looped);
        }
    }
    if !steps.iter().any(|s| matches!(s.kind, StepKind::Llm { .. })) {
        return Err(
            "no step calls the model (every step is a `tool`): nothing would be sent".into(),
        );
    }
    let graph = Workflow { steps };
    check(&graph)?;
    Ok(graph)
}

fn build_step(s: &FileStep, above: &[Step]) -> Result<Step, String> {
    let chars = s.name.chars().count();
    if chars == 0 || chars > MAX_NAME || s.name.chars().any(char::is_control) {
        return Err(format!(
            "a name must be 1 to {MAX_NAME} printable characters"
        ));
    }
    if above.iter().any(|a| a.name == s.name) {
        return Err("a second step of this name".into());
    }
    if let Some(twice) = s
        .after
        .iter()
        .enumerate()
        .find_map(|(i, a)| s.after[..i].contains(a).then_some(a))
    {
        return Err(format!("`after` names `{}` twice", twice.escape_debug()));
    }
    let after = s
        .after
        .iter()
        .map(|n| match above.iter().position(|a| &a.name == n) {
            Some(step) => Ok(Dep {
                step,
                gap: Duration::ZERO,
            }),
            None => Err(format!(
                "`after` names `{}`, which is not a step above it",
                n.escape_debug()
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if s.dataset && (s.tool.is_some() || s.input_tokens.is_some()) {
        return Err("`dataset = true` takes the message and its length from a --dataset entry: no `tool` or `input_tokens`".into());
    }
    let kind = match &s.tool {
        Some(t) if s.input_tokens.is_some() || s.output_tokens.is_some() => {
            return Err(format!(
                "a tool (`tool = \"{t}\"`) sends no request: no token lengths"
            ))
        }
        Some(t) => StepKind::Tool {
            latency: t.parse()?,
        },
        None => StepKind::Llm {
            input: s
                .input_tokens
                .as_ref()
                .map(|n| n.text().parse())
                .transpose()?,
            output: s
                .output_tokens
                .as_ref()
                .map(|n| n.text().parse())
                .transpose()?,
            input_total: false,
        },
    };
    let fan_out = match &s.fan_out {
        Some(n) => Count::parse(&n.text(), MAX_FAN_OUT)?,
        None => Count::Fixed(1),
    };
    if matches!(fan_out, Count::Fixed(0) | Count::Uniform(0, _)) {
        return Err("a fan-out of 0 runs nothing (at least 1)".into());
    }
    if s.each && (after.len() != 1 || s.fan_out.is_some()) {
        return Err(
            "`each` follows the branches of one `after` step, and fans out no further".into(),
        );
    }
    let join = match s.join.as_deref() {
        None | Some("all") => Join::All,
        Some(j) => match j.strip_prefix("first:").map(str::parse::<u64>) {
            Some(Ok(k)) if k >= 1 => Join::First(k),
            _ => return Err(format!("join `{j}`: use all or first:K with K ≥ 1")),
        },
    };
    if s.each && join != Join::All {
        return Err("`each` waits for its one branch: no join".into());
    }
    Ok(Step {
        name: s.name.clone(),
        kind,
        after,
        fan_out,
        each: s.each,
        join,
        repeat: None,
        start_after: Duration::ZERO,
        share_prefix: s.share_prefix.unwrap_or(true),
        from_dataset: s.dataset,
    })
}

fn build_loop(l: &FileLoop, at: usize, steps: &[Step]) -> Result<Loop, String> {
    let to = steps[..=at]
        .iter()
        .position(|s| s.name == l.to)
        .ok_or_else(|| {
            format!(
                "loop `to = \"{}\"` is not this step or one above it",
                l.to.escape_debug()
            )
        })?;
    if steps[to].each {
        return Err(format!("loop `to = \"{}\"`: a loop goes back to a step that is not `each` (its branches are its parent's)", l.to.escape_debug()));
    }
    let times = Count::parse(&l.times.text(), MAX_LOOPS)?;
    // The body: steps from `to` that lead to this one.
    let body: Vec<usize> = (to..=at)
        .filter(|&i| i == to || i == at || (reaches(steps, to, i) && reaches(steps, i, at)))
        .collect();
    if to != at && !reaches(steps, to, at) {
        return Err(format!(
            "loop `to = \"{}\"`: this step does not come after it",
            l.to
        ));
    }
    Ok(Loop { to, times, body })
}

/// Whether step `to` comes (directly or not) after step `from`: a walk
/// back from `to` over the steps at or below `from`'s place, each once.
fn reaches(steps: &[Step], from: usize, to: usize) -> bool {
    let mut seen = vec![false; steps.len()];
    let mut stack = vec![to];
    while let Some(i) = stack.pop() {
        if i == from {
            return true;
        }
        for d in &steps[i].after {
            if d.step >= from && !std::mem::replace(&mut seen[d.step], true) {
                stack.push(d.step);
            }
        }
    }
    false
}

/// What holds for the whole graph: no step in two loops, and a bounded worst case.
pub fn check(graph: &Workflow) -> Result<(), String> {
    let mut in_loop = vec![false; graph.steps.len()];
    for s in &graph.steps {
        for &b in s.repeat.iter().flat_map(|l| &l.body) {
            if std::mem::replace(&mut in_loop[b], true) {
                return Err(format!(
                    "step `{}` is in two loops (loops may not overlap)",
                    graph.steps[b].name
                ));
            }
        }
    }
    let worst = worst_case(graph);
    if worst > MAX_INSTANCES {
        return Err(format!(
            "it could make {worst} calls and waits in one workflow (every fan-out and loop at its largest), more than {MAX_INSTANCES}"
        ));
    }
    Ok(())
}

/// The most instances one workflow could run: each step's instances
/// (its fan-out, or its parent's with `each`) times its loop's passes.
fn worst_case(graph: &Workflow) -> u64 {
    let mut per: Vec<u64> = Vec::with_capacity(graph.steps.len());
    let mut passes = vec![1u64; graph.steps.len()];
    for s in &graph.steps {
        for &b in s.repeat.iter().flat_map(|l| &l.body) {
            passes[b] = 1 + s.repeat.as_ref().map_or(0, |l| l.times.max());
        }
    }
    for s in &graph.steps {
        let n = match s.each {
            true => s.after.first().map_or(1, |d| per[d.step]),
            false => s.fan_out.max(),
        };
        per.push(n);
    }
    per.iter()
        .zip(&passes)
        .fold(0u64, |acc, (n, p)| acc.saturating_add(n.saturating_mul(*p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[[step]]
name = "plan"
input_tokens = 200
output_tokens = 40

[[step]]
name = "research"
after = ["plan"]
fan_out = "uniform:2..6"
output_tokens = "uniform:20..80"

[[step]]
name = "search"
after = ["research"]
each = true
tool = "uniform:100ms..300ms"

[[step]]
name = "write"
after = ["search"]
join = "first:2"
output_tokens = 120

[[step]]
name = "critic"
after = ["write"]
output_tokens = 20
loop = { to = "write", times = "uniform:0..2" }
"#;

    #[test]
    fn the_documented_example_reads() {
        let w = parse(EXAMPLE).unwrap();
        assert_eq!(w.steps.len(), 5);
        assert_eq!(w.steps[1].fan_out, Count::Uniform(2, 6));
        assert!(w.steps[2].each);
        assert!(matches!(w.steps[2].kind, StepKind::Tool { .. }));
        assert_eq!(w.steps[3].join, Join::First(2));
        let l = w.steps[4].repeat.as_ref().unwrap();
        assert_eq!((l.to, &l.body[..]), (3, &[3usize, 4][..]));
        // 1 + 6 + 6 + 3 + 3 at most.
        assert_eq!(worst_case(&w), 19);
    }

    #[test]
    fn names_are_counted_in_characters() {
        let name = "é".repeat(40);
        assert!(parse(&format!("[[step]]\nname = \"{name}\"")).is_ok());
    }

    #[test]
    fn json_reads_as_toml_does() {
        let json = r#"{"step": [{"name": "a", "output_tokens": 4},
            {"name": "b", "after": ["a"], "fan_out": 3, "output_tokens": "uniform:2..9"}]}"#;
        let w = parse(json).unwrap();
        assert_eq!(w.steps[1].fan_out, Count::Fixed(3));
    }

    #[test]
    fn bad_files_say_which_step_and_why() {
        let cases = [
            ("", "no [[step]]"),
            (
                "[[step]]\nname = \"a\"\nafter = [\"b\"]",
                "`after` names `b`",
            ),
            (
                "[[step]]\nname = \"a\"\n[[step]]\nname = \"a\"",
                "second step of this name",
            ),
            ("[[step]]\nname = \"a\"\nfan_out = 100000", "above 256"),
            ("[[step]]\nname = \"a\"\nfan_out = 0", "fan-out of 0"),
            (
                "[[step]]\nname = \"a\"\nfan_out = -1",
                "not a workflow in TOML",
            ),
            ("[[step]]\nname = \"a\"\njoin = \"first:0\"", "first:K"),
            (
                "[[step]]\nname = \"a\"\ntool = \"1s\"\noutput_tokens = 3",
                "no token lengths",
            ),
            (
                "[[step]]\nname = \"a\"\nloop = { to = \"b\", times = 1 }",
                "not this step or one above",
            ),
            (
                "[[step]]\nname = \"a\"\nloop = { to = \"a\", times = 99 }",
                "above 16",
            ),
            ("[[step]]\nname = \"a\"\nbogus = 1", "unknown field"),
            ("[[step]]\nname = \"a\"\neach = true", "`each` follows"),
            ("[[step]]\nname = \"\"", "1 to 64"),
            ("[[step]]\nname = \"a\\nb\"", "step `a\\nb`"),
            ("[[step]]\nname = \"a\"\n[[step]]\nname = \"b\"\nafter = [\"a\", \"a\"]", "names `a` twice"),
            ("[[step]]\nname = \"t\"\ntool = \"1s\"", "no step calls the model"),
            ("[[step]]\nname = \"a\"\nfan_out = 2\n[[step]]\nname = \"b\"\nafter = [\"a\"]\neach = true\nloop = { to = \"b\", times = 1 }", "not `each`"),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_graph_that_could_explode_is_refused_before_it_runs() {
        // 257 fan-outs of 256 branches each.
        let text: String = (0..257)
            .map(|i| format!("[[step]]\nname = \"s{i}\"\nfan_out = 256\n"))
            .collect();
        let err = parse(&text).unwrap_err();
        assert!(
            err.contains("65792 calls") && err.contains("more than 65536"),
            "{err}"
        );
    }

    #[test]
    fn overlapping_loops_are_refused() {
        let text = r#"
[[step]]
name = "a"
[[step]]
name = "b"
after = ["a"]
loop = { to = "a", times = 1 }
[[step]]
name = "c"
after = ["b"]
loop = { to = "b", times = 1 }
"#;
        assert!(parse(text).unwrap_err().contains("two loops"));
    }
}
