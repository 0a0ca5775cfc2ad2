//! Agent traces replayed (`--replay-trace FILE --trace-format otlp-json`):
//! OpenTelemetry spans in OTLP JSON — one `ExportTraceServiceRequest`
//! object, or one per line as the Collector's file exporter writes them —
//! become workflows of the same shape.
//!
//! In each trace, a span whose `gen_ai.operation.name` is a model call
//! (`chat`, `text_completion`, `generate_content`) is an LLM step with the
//! lengths of its `gen_ai.usage.input_tokens` and `output_tokens`; every
//! other span (a tool's `execute_tool`, an agent's `invoke_agent`) is time
//! between calls. A call comes after the calls that ended before it
//! started, and is sent the gap after them it was in the trace; the calls
//! that overlapped ran in parallel, and run so again. A trace starts at its
//! first span, and the traces keep their starts (scaled by `--replay-speed`).
//!
//! Ids may be hex (the OTLP JSON encoding) or base64 (protobuf's JSON
//! mapping, what a generic encoder writes); 64-bit numbers strings or numbers.

use crate::lengths::LengthSpec;
use crate::workflow::{
    Count, Dep, Join, Step, StepKind, Workflow, WorkflowError, Workflows, MAX_STEPS,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The largest trace file read.
pub const MAX_FILE_BYTES: u64 = 256 << 20;
/// Spans read at most (all traces).
pub const MAX_SPANS: usize = 2_000_000;
/// Traces read at most.
pub const MAX_TRACES: usize = 100_000;

/// Calls a call waits for, at most: the latest to end of those that
/// ended before it (a layer of hundreds after a layer of hundreds would
/// otherwise tie every pair).
pub const MAX_WAITED: usize = 16;
/// The longest gap or start offset replayed (past it, a broken clock).
const MAX_GAP_NS: u64 = 24 * 3600 * 1_000_000_000;

/// The operation names of a model call.
const LLM_OPERATIONS: &[&str] = &["chat", "text_completion", "generate_content"];

/// Reads an OTLP JSON trace file into workflows, one per trace that holds
/// a model call, in the order the traces started.
pub fn read(path: &std::path::Path) -> Result<Workflows, WorkflowError> {
    let fail = |why: String| WorkflowError {
        path: path.display().to_string(),
        why,
    };
    let text = crate::workflow::read_text(
        path,
        MAX_FILE_BYTES,
        "more than a trace file tokenscope reads",
    )
    .map_err(fail)?;
    let spans = spans(&text).map_err(fail)?;
    let mut w = workflows(spans).map_err(fail)?;
    w.source = path.display().to_string();
    Ok(w)
}

/// Every span of the text: one JSON document, else one per line.
fn spans(text: &str) -> Result<Vec<Span>, String> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut add = |doc: Request| -> Result<(), String> {
        for s in doc.resource_spans.into_iter().flat_map(|r| r.scope_spans) {
            for span in s.spans {
                if out.len() >= MAX_SPANS {
                    return Err(format!("more than {MAX_SPANS} spans"));
                }
                let span = span.read()?;
                // A span written twice (an exporter's retry) is one call.
                if seen.insert((span.trace.clone(), span.id)) {
                    out.push(span);
                }
            }
        }
        Ok(())
    };
    match serde_json::from_str::<Request>(text) {
        Ok(doc) => add(doc)?,
        Err(whole) => {
            let lines: Vec<(usize, &str)> = text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .collect();
            // One document per line, as the Collector writes them, when
            // the first line is a whole document; else the file's error.
            let jsonl =
                lines.len() >= 2 && serde_json::from_str::<serde_json::Value>(lines[0].1).is_ok();
            if !jsonl {
                return Err(format!("not OTLP JSON traces: {whole}"));
            }
            for (i, line) in lines {
                let doc = serde_json::from_str::<Request>(line)
                    .map_err(|e| format!("line {}: not OTLP JSON traces: {e}", i + 1))?;
                add(doc)?;
            }
        }
    }
    if out.is_empty() {
        return Err("no spans (an OTLP JSON file holds `resourceSpans`)".into());
    }
    Ok(out)
}

/// `ExportTraceServiceRequest` as OTLP JSON writes it: only what is read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSpans {
    #[serde(default)]
    scope_spans: Vec<ScopeSpans>,
}

#[derive(Deserialize)]
struct ScopeSpans {
    #[serde(default)]
    spans: Vec<RawSpan>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSpan {
    trace_id: String,
    span_id: String,
    #[serde(default)]
    name: String,
    start_time_unix_nano: Number,
    end_time_unix_nano: Number,
    #[serde(default)]
    attributes: Vec<Attribute>,
}

#[derive(Deserialize)]
struct Attribute {
    key: String,
    #[serde(default)]
    value: AnyValue,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct AnyValue {
    string_value: Option<String>,
    int_value: Option<Number>,
    double_value: Option<f64>,
}

/// A 64-bit number as protobuf's JSON writes it (a string) or as a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Int(u64),
    Text(String),
    Float(f64),
}

impl Number {
    fn get(&self) -> Option<u64> {
        match self {
            Number::Int(n) => Some(*n),
            Number::Text(t) => t.trim().parse().ok(),
            Number::Float(f) if f.is_finite() && *f >= 0.0 && *f < 1.8e19 => Some(*f as u64),
            Number::Float(_) => None,
        }
    }
}

/// One span, read: what the replay needs.
#[derive(Debug, Clone)]
struct Span {
    trace: Vec<u8>,
    id: u64,
    start_ns: u64,
    end_ns: u64,
    /// A model call's lengths (`None` lengths: the usage was not recorded).
    llm: Option<(Option<u64>, Option<u64>)>,
}

impl RawSpan {
    fn read(self) -> Result<Span, String> {
        let name = || format!("span `{}` ({})", self.name, self.span_id);
        let trace = decode_id(&self.trace_id, 16).ok_or_else(|| {
            format!(
                "{}: trace id `{}` is neither 16 bytes of hex nor of base64",
                name(),
                self.trace_id
            )
        })?;
        let id = decode_id(&self.span_id, 8)
            .map(|b| b.iter().fold(0u64, |n, x| n << 8 | *x as u64))
            .ok_or_else(|| {
                format!(
                    "{}: span id `{}` is neither 8 bytes of hex nor of base64",
                    name(),
                    self.span_id
                )
            })?;
        let (start_ns, end_ns) = match (
            self.start_time_unix_nano.get(),
            self.end_time_unix_nano.get(),
        ) {
            (Some(a), Some(b)) if b >= a => (a, b),
            _ => {
                return Err(format!(
                    "{}: its end is before its start, or a time is not a number",
                    name()
                ))
            }
        };
        let attr = |keys: &[&str]| {
            self.attributes
                .iter()
                .find(|a| keys.contains(&a.key.as_str()))
                .map(|a| &a.value)
        };
        let tokens = |keys: &[&str]| {
            attr(keys).and_then(|v| {
                v.int_value
                    .as_ref()
                    .and_then(Number::get)
                    .or_else(|| {
                        v.double_value
                            .filter(|d| d.is_finite() && *d >= 0.0)
                            .map(|d| d as u64)
                    })
                    .or_else(|| v.string_value.as_ref().and_then(|s| s.parse().ok()))
            })
        };
        let operation = attr(&["gen_ai.operation.name"]).and_then(|v| v.string_value.as_deref());
        let llm = operation.filter(|op| LLM_OPERATIONS.contains(op)).map(|_| {
            let input = tokens(&["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"]);
            let output = tokens(&[
                "gen_ai.usage.output_tokens",
                "gen_ai.usage.completion_tokens",
            ]);
            let sane =
                |n: Option<u64>| n.filter(|&n| (1..=crate::lengths::MAX_LENGTH).contains(&n));
            (sane(input), sane(output))
        });
        Ok(Span {
            trace,
            id,
            start_ns,
            end_ns,
            llm,
        })
    }
}

/// An id of `bytes` bytes, in hex or base64.
fn decode_id(text: &str, bytes: usize) -> Option<Vec<u8>> {
    use base64::Engine;
    let t = text.trim();
    if t.len() == bytes * 2 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return (0..bytes)
            .map(|i| u8::from_str_radix(&t[2 * i..2 * i + 2], 16).ok())
            .collect();
    }
    base64::engine::general_purpose::STANDARD
        .decode(t)
        .ok()
        .filter(|v| v.len() == bytes)
}

/// The traces' workflows and their starts.
fn workflows(spans: Vec<Span>) -> Result<Workflows, String> {
    let mut traces: BTreeMap<Vec<u8>, Vec<Span>> = BTreeMap::new();
    for s in spans {
        if traces.len() >= MAX_TRACES && !traces.contains_key(&s.trace) {
            return Err(format!("more than {MAX_TRACES} traces"));
        }
        traces.entry(s.trace.clone()).or_default().push(s);
    }
    let mut started: Vec<(u64, Workflow)> = Vec::new();
    for (id, spans) in traces {
        let start = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
        if let Some(graph) =
            trace_graph(&spans, start).map_err(|why| format!("trace {}: {why}", hex(&id)))?
        {
            started.push((start, graph));
        }
    }
    if started.is_empty() {
        return Err(format!(
            "no span is a model call (`gen_ai.operation.name` one of {})",
            LLM_OPERATIONS.join(", ")
        ));
    }
    started.sort_by_key(|(start, _)| *start);
    let first = started[0].0;
    let offsets_s = started
        .iter()
        .map(|(s, _)| (s - first) as f64 / 1e9)
        .collect();
    Ok(Workflows {
        graphs: started.into_iter().map(|(_, g)| g).collect(),
        offsets_s: Some(offsets_s),
        source: String::new(),
    })
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// One trace's calls as a graph (`None`: it holds no model call): each
/// call after the calls that ended before it started, none of them
/// before another of them (the latest only), with the gap it left.
fn trace_graph(spans: &[Span], start_ns: u64) -> Result<Option<Workflow>, String> {
    let mut calls: Vec<&Span> = spans.iter().filter(|s| s.llm.is_some()).collect();
    if calls.is_empty() {
        return Ok(None);
    }
    if calls.len() > MAX_STEPS {
        return Err(format!(
            "{} model calls, more than {MAX_STEPS} a workflow may hold",
            calls.len()
        ));
    }
    calls.sort_by_key(|s| (s.start_ns, s.end_ns));
    let mut steps: Vec<Step> = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter().enumerate() {
        let before: Vec<usize> = (0..i).filter(|&p| calls[p].end_ns <= c.start_ns).collect();
        // The latest: no other of them started after it ended. The two
        // latest starts among them tell it for each in one pass.
        let mut starts: Vec<(u64, usize)> =
            before.iter().map(|&p| (calls[p].start_ns, p)).collect();
        starts.sort_unstable_by(|a, b| b.cmp(a));
        let latest_other = |p: usize| starts.iter().find(|(_, q)| *q != p).map(|(s, _)| *s);
        let mut latest: Vec<usize> = before
            .iter()
            .copied()
            .filter(|&p| latest_other(p).is_none_or(|s| calls[p].end_ns > s))
            .collect();
        latest.sort_by_key(|&p| std::cmp::Reverse(calls[p].end_ns));
        latest.truncate(MAX_WAITED);
        latest.sort_unstable();
        let mut after = Vec::with_capacity(latest.len());
        for p in latest {
            let gap = c.start_ns - calls[p].end_ns;
            if gap > MAX_GAP_NS {
                return Err(format!("call {} starts {:.0} s after the call before it: more than a day, a broken clock", i + 1, gap as f64 / 1e9));
            }
            after.push(Dep {
                step: p,
                gap: Duration::from_nanos(gap),
            });
        }
        if after.is_empty() && c.start_ns - start_ns > MAX_GAP_NS {
            return Err(format!(
                "call {} starts more than a day after its trace",
                i + 1
            ));
        }
        let (input, output) = c.llm.unwrap_or_default();
        steps.push(Step {
            name: format!("call {}", i + 1),
            kind: StepKind::Llm {
                input: input.map(LengthSpec::Fixed),
                output: output.map(LengthSpec::Fixed),
                input_total: true,
            },
            start_after: match after.is_empty() {
                true => Duration::from_nanos(c.start_ns - start_ns),
                false => Duration::ZERO,
            },
            after,
            fan_out: Count::Fixed(1),
            each: false,
            join: Join::All,
            repeat: None,
            share_prefix: true,
            from_dataset: false,
        });
    }
    Ok(Some(Workflow { steps }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(trace: &str, id: &str, op: &str, (a, b): (u64, u64), tokens: (u64, u64)) -> String {
        let id = match id.len() {
            2 => format!("{id:0>16}"),
            _ => id.to_string(),
        };
        format!(
            r#"{{"traceId":"{trace}","spanId":"{id}","name":"{op}","startTimeUnixNano":"{a}","endTimeUnixNano":"{b}",
            "attributes":[{{"key":"gen_ai.operation.name","value":{{"stringValue":"{op}"}}}},
            {{"key":"gen_ai.usage.input_tokens","value":{{"intValue":"{}"}}}},
            {{"key":"gen_ai.usage.output_tokens","value":{{"intValue":{}}}}}]}}"#,
            tokens.0, tokens.1
        )
        .replace(['\n', ' '], "")
    }

    fn doc(spans: &[String]) -> String {
        format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
            spans.join(",")
        )
    }

    const T: &str = "0af7651916cd43dd8448eb211c80319c";
    const MS: u64 = 1_000_000;

    #[test]
    fn a_fan_out_and_join_is_read_with_its_lengths_and_gaps() {
        // plan 0–100 ms; tool 100–150; three calls in parallel 150–300
        // (one ends at 250); join at 320.
        let text = doc(&[
            span(T, "01", "chat", (0, 100 * MS), (50, 10)),
            span(T, "02", "execute_tool", (100 * MS, 150 * MS), (0, 0)),
            span(T, "03", "chat", (150 * MS, 300 * MS), (60, 20)),
            span(T, "04", "chat", (150 * MS, 250 * MS), (61, 21)),
            span(T, "05", "chat", (151 * MS, 300 * MS), (62, 22)),
            span(T, "06", "chat", (320 * MS, 400 * MS), (200, 30)),
        ]);
        let w = workflows(spans(&text).unwrap()).unwrap();
        let g = &w.graphs[0];
        assert_eq!(g.steps.len(), 5);
        let deps = |i: usize| {
            g.steps[i]
                .after
                .iter()
                .map(|d| (d.step, d.gap.as_millis() as u64))
                .collect::<Vec<_>>()
        };
        assert_eq!(deps(0), vec![]);
        assert_eq!(deps(1), vec![(0, 50)]);
        assert_eq!(deps(3), vec![(0, 51)]);
        // Sorted by start then end: the call ending at 250 ms is call 2.
        assert_eq!(deps(4), vec![(1, 70), (2, 20), (3, 20)]);
        assert!(matches!(
            g.steps[4].kind,
            StepKind::Llm {
                input: Some(LengthSpec::Fixed(200)),
                output: Some(LengthSpec::Fixed(30)),
                input_total: true
            }
        ));
        assert_eq!(w.offsets_s, Some(vec![0.0]));
    }

    #[test]
    fn traces_keep_their_starts_and_lines_read_as_the_collector_writes_them() {
        let u = "1af7651916cd43dd8448eb211c80319c";
        let a = doc(&[span(T, "01", "chat", (5_000 * MS, 5_100 * MS), (5, 5))]);
        let b = doc(&[span(
            u,
            "01",
            "text_completion",
            (7_500 * MS, 7_600 * MS),
            (5, 5),
        )]);
        let w = workflows(spans(&format!("{b}\n{a}\n")).unwrap()).unwrap();
        assert_eq!(w.offsets_s, Some(vec![0.0, 2.5]));
    }

    #[test]
    fn base64_ids_and_number_forms_are_read() {
        // 16 bytes of base64 for the trace id.
        let text = doc(&[span(
            "CvdlGRbNQ92ESOshHIAxnA==",
            "AQIDBAUGBwg=",
            "chat",
            (0, 10),
            (3, 4),
        )]);
        let w = workflows(spans(&text).unwrap()).unwrap();
        assert_eq!(w.graphs.len(), 1);
    }

    #[test]
    fn hostile_traces_say_what_and_where() {
        let cases = [
            (String::from("{}"), "not OTLP JSON"),
            (String::from(r#"{"resourceSpans":[]}"#), "no spans"),
            (
                doc(&[span("zz", "01", "chat", (0, 1), (1, 1))]),
                "neither 16 bytes",
            ),
            (
                doc(&[span(T, "01", "chat", (10, 1), (1, 1))]),
                "end is before its start",
            ),
            (
                doc(&[span(T, "01", "execute_tool", (0, 1), (1, 1))]),
                "no span is a model call",
            ),
            (
                String::from("{\"resourceSpans\": [\n{}\n"),
                "not OTLP JSON traces: EOF while parsing a list at line 3",
            ),
            (
                doc(&[span(T, "zzzz", "chat", (0, 1), (1, 1))]),
                "span id `zzzz`",
            ),
            (
                doc(&[
                    span(T, "01", "chat", (0, 1), (1, 1)),
                    span(
                        T,
                        "02",
                        "chat",
                        (MAX_GAP_NS * 2, MAX_GAP_NS * 2 + 1),
                        (1, 1),
                    ),
                ]),
                "more than a day",
            ),
        ];
        for (text, want) in cases {
            let err = spans(&text).and_then(workflows).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn a_span_written_twice_is_one_call_and_a_dense_layer_keeps_its_latest() {
        let text = doc(&[
            span(T, "01", "chat", (0, 10), (3, 4)),
            span(T, "01", "chat", (0, 10), (3, 4)),
        ]);
        assert_eq!(
            workflows(spans(&text).unwrap()).unwrap().graphs[0]
                .steps
                .len(),
            1
        );
        // 40 calls in parallel, then one: it waits for the 16 latest to end.
        let mut layer: Vec<String> = (0..40u64)
            .map(|i| span(T, &format!("{:016x}", i + 1), "chat", (0, 100 + i), (3, 4)))
            .collect();
        layer.push(span(T, "00000000000000ff", "chat", (200, 300), (3, 4)));
        let w = workflows(spans(&doc(&layer)).unwrap()).unwrap();
        let last = w.graphs[0].steps.last().unwrap();
        assert_eq!(last.after.len(), MAX_WAITED);
        assert!(last.after.iter().all(|d| d.step >= 24), "the latest to end");
    }

    #[test]
    fn absurd_usage_falls_back_to_the_runs_lengths() {
        let text = doc(&[span(T, "01", "chat", (0, 10), (u64::MAX, 0))]);
        let w = workflows(spans(&text).unwrap()).unwrap();
        assert!(matches!(
            w.graphs[0].steps[0].kind,
            StepKind::Llm {
                input: None,
                output: None,
                ..
            }
        ));
    }

    #[test]
    fn a_trace_of_too_many_calls_is_refused_by_name() {
        let many: Vec<String> = (0..=MAX_STEPS as u64)
            .map(|i| {
                span(
                    T,
                    &format!("{:016x}", i + 1),
                    "chat",
                    (i * 10, i * 10 + 5),
                    (1, 1),
                )
            })
            .collect();
        let err = spans(&doc(&many)).and_then(workflows).unwrap_err();
        assert!(
            err.contains("trace 0af7") && err.contains("more than 1024"),
            "{err}"
        );
    }
}
