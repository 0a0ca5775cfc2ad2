//! What the built-in servers answer besides filler words, so a client's
//! checks have a ground truth: JSON where JSON was asked, a tool call where
//! tools were offered (its arguments valid against the tool's schema), the
//! right number to a question of `builtin:arithmetic` — and, by the fault
//! shares, broken JSON, broken arguments, wrong numbers, and answers that
//! change above a load.

use crate::faults::Faults;
use crate::openai::{prompt_words, Ask, Call, Dialect, Writer};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What was done to one answer, for the exact server's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shaped {
    pub broken_json: bool,
    pub tool_call: bool,
    pub broken_args: bool,
    pub graded: bool,
    pub wrong: bool,
    pub diverged: bool,
    /// The conversation ended with tool results (an agent's next turn).
    pub after_tools: bool,
}

/// One request's answer, in its context.
pub struct Context<'a> {
    pub body: &'a Value,
    pub ask: &'a Ask,
    pub dialect: Dialect,
    pub faults: &'a Faults,
    pub seed: u64,
    /// The request's arrival index (what the fault draws key on).
    pub n: u64,
    /// The answer's length in tokens, and of those the reasoning's.
    pub tokens: u64,
    pub reasoning: u64,
    /// Requests in flight at its arrival, itself counted.
    pub in_flight: u64,
}

/// Sets the writer's answer for the request: its JSON, its tool call, its
/// number, its divergence.
pub fn shape(writer: &mut Writer, c: &Context<'_>) -> Shaped {
    let mut done = Shaped {
        after_tools: after_tool_results(c.body, c.dialect),
        ..Shaped::default()
    };
    if c.ask.wants_json {
        done.broken_json = c.faults.breaks_json(c.seed, c.n);
        writer.set_json(c.tokens, done.broken_json);
    }
    if let Some(mut call) = tool_call(c.body, c.dialect, c.n) {
        call.total = c.tokens;
        call.broken = c.faults.breaks_tool_args(c.seed, c.n);
        (done.tool_call, done.broken_args) = (true, call.broken);
        writer.set_call(call);
    }
    let prompt: Vec<&str> = prompt_words(c.body, c.dialect).collect();
    if let Some(right) = tokenscope_workload::arithmetic::answer(&prompt.join(" ")) {
        done.graded = true;
        done.wrong = c.faults.answers_wrong(c.seed, c.n);
        writer.set_word(c.tokens - 1, format!(" {}", right + i64::from(done.wrong)));
    }
    let hash = fnv(&prompt);
    if c.faults.diverges(c.seed, hash, c.in_flight) {
        // One answer word, the same for the same prompt, changes.
        let answer = c.tokens - c.reasoning.min(c.tokens);
        let at = c.tokens - answer + hash % answer.max(1);
        if answer > 0 && !writer.has_word(at) {
            writer.set_word(at, " changed".into());
            done.diverged = true;
        }
    }
    done
}

/// One request counted in a server's in-flight gauge while it lives.
pub struct InFlight {
    gauge: Arc<AtomicU64>,
    /// Requests in flight when it arrived, itself counted.
    pub at_arrival: u64,
}

impl InFlight {
    pub fn enter(gauge: &Arc<AtomicU64>) -> InFlight {
        let at_arrival = gauge.fetch_add(1, Ordering::Relaxed) + 1;
        InFlight {
            gauge: gauge.clone(),
            at_arrival,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.fetch_sub(1, Ordering::Relaxed);
    }
}

/// FNV-1a over the prompt's words, a space after each.
fn fnv(words: &[&str]) -> u64 {
    tokenscope_core::hash::fnv1a(words.iter().flat_map(|w| w.bytes().chain([b' '])))
}

/// The tool call request `n` answers with, when it offers tools and does
/// not forbid calls: the named tool, else tool `n` mod their number.
pub fn tool_call(body: &Value, dialect: Dialect, n: u64) -> Option<Call> {
    let tools = body["tools"].as_array().filter(|t| !t.is_empty())?;
    // Each API's form: chat's `function`, Responses' flat, Anthropic's `input_schema`.
    let schema_of = |t: &Value| match dialect {
        Dialect::Chat => t["function"]["parameters"].clone(),
        Dialect::Messages => t["input_schema"].clone(),
        _ => t["parameters"].clone(),
    };
    let choice = &body["tool_choice"];
    let forbidden = choice == "none" || choice["type"] == "none";
    if forbidden || !dialect.has_messages() || after_tool_results(body, dialect) {
        return None;
    }
    let named = choice["function"]["name"]
        .as_str()
        .or(choice["name"].as_str());
    let tool = match named {
        Some(name) => tools.iter().find(|t| name_of(t) == Some(name))?,
        None => &tools[(n % tools.len() as u64) as usize],
    };
    let (open, close, spaces) = arguments_around(&schema_of(tool));
    Some(Call {
        id: format!("call_{n}"),
        name: name_of(tool)?.to_string(),
        open,
        close,
        spaces,
        total: 0,
        broken: false,
    })
}

/// Whether the conversation ends with tool results: the model has what it
/// called for, and answers (an agent's task ends) rather than calling again.
fn after_tool_results(body: &Value, dialect: Dialect) -> bool {
    let last = |key: &str| body[key].as_array().and_then(|l| l.last()).cloned();
    match dialect {
        Dialect::Chat => last("messages").is_some_and(|m| m["role"] == "tool"),
        Dialect::Responses => last("input").is_some_and(|i| i["type"] == "function_call_output"),
        Dialect::Messages => last("messages").is_some_and(|m| {
            m["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|p| p["type"] == "tool_result"))
        }),
        _ => false,
    }
}

/// A tool's name, in chat's form (`function.name`) or the flat ones.
fn name_of(t: &Value) -> Option<&str> {
    t["function"]["name"].as_str().or(t["name"].as_str())
}

/// The arguments' opening and closing, valid against `schema`: every
/// required property a value of its type, the first free string among
/// them left open to carry the answer's words. Without one, the words are
/// spaces (`spaces`) before the closing brace.
fn arguments_around(schema: &Value) -> (String, String, bool) {
    let props = schema["properties"].as_object();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let prop = |k: &str| props.and_then(|p| p.get(k)).cloned().unwrap_or(Value::Null);
    let free_string =
        |p: &Value| p["type"] == "string" && p.get("enum").is_none() && p.get("const").is_none();
    let carrier = required.iter().copied().find(|k| free_string(&prop(k)));
    let mut fields: Vec<String> = required
        .iter()
        .filter(|k| Some(**k) != carrier)
        .map(|k| format!("{}:{}", Value::from(*k), example(&prop(k))))
        .collect();
    match carrier {
        Some(k) => {
            fields.push(format!("{}:\"", Value::from(k)));
            (format!("{{{}", fields.join(",")), "\"}".into(), false)
        }
        None => (format!("{{{}", fields.join(",")), "}".into(), true),
    }
}

/// A value valid against a property's schema (the common keywords).
fn example(p: &Value) -> Value {
    if let Some(v) = p.get("const") {
        return v.clone();
    }
    if let Some(first) = p["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let kind = match &p["type"] {
        Value::Array(kinds) => kinds
            .iter()
            .find(|k| *k != "null")
            .cloned()
            .unwrap_or(Value::Null),
        k => k.clone(),
    };
    let at_least = |d: f64| p["minimum"].as_f64().unwrap_or(d);
    match kind.as_str() {
        Some("string") => {
            Value::from("x".repeat(p["minLength"].as_u64().unwrap_or(1).max(1) as usize))
        }
        Some("integer") => Value::from(at_least(1.0).ceil() as i64),
        Some("number") => Value::from(at_least(1.0)),
        Some("boolean") => Value::Bool(true),
        Some("array") => {
            let n = p["minItems"].as_u64().unwrap_or(0) as usize;
            Value::Array(vec![example(&p["items"]); n])
        }
        Some("object") => {
            let (open, close, spaces) = arguments_around(p);
            let text = match spaces {
                true => format!("{open}{close}"),
                false => format!("{open}x{close}"),
            };
            serde_json::from_str(&text).unwrap_or(Value::Object(Default::default()))
        }
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_satisfy_their_schema_around_the_words() {
        let schema = json!({"type": "object", "required": ["unit", "city", "days", "opts"],
            "properties": {"unit": {"type": "string", "enum": ["celsius", "kelvin"]},
                "city": {"type": "string"}, "days": {"type": "integer", "minimum": 3},
                "opts": {"type": "object", "required": ["deep"],
                    "properties": {"deep": {"type": "boolean"}}}}});
        let (open, close, spaces) = arguments_around(&schema);
        assert!(!spaces);
        let args: Value = serde_json::from_str(&format!("{open} the of{close}")).unwrap();
        assert_eq!(
            args,
            json!({"unit": "celsius", "city": " the of", "days": 3,
            "opts": {"deep": true}})
        );
        let (open, close, spaces) = arguments_around(&json!({"type": "object",
            "required": ["n"], "properties": {"n": {"type": "number"}}}));
        assert!(spaces);
        let args: Value = serde_json::from_str(&format!("{open}   {close}")).unwrap();
        assert_eq!(args, json!({"n": 1.0}));
    }

    #[test]
    fn the_call_is_the_named_tool_or_drawn_and_none_when_forbidden() {
        let tools = json!([{"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "b"}}]);
        let body = |choice: Value| json!({"tools": tools, "tool_choice": choice});
        let name = |b: &Value, n| tool_call(b, Dialect::Chat, n).map(|c| c.name);
        assert_eq!(name(&body(json!("auto")), 1).as_deref(), Some("b"));
        assert_eq!(name(&body(json!("none")), 1), None);
        let named = body(json!({"type": "function", "function": {"name": "a"}}));
        assert_eq!(name(&named, 1).as_deref(), Some("a"));
        let anthropic = json!({"tools": [{"name": "t", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"}});
        assert_eq!(
            tool_call(&anthropic, Dialect::Messages, 0).unwrap().name,
            "t"
        );
        assert!(tool_call(&json!({"tools": []}), Dialect::Chat, 0).is_none());
        let answered = json!({"tools": tools, "messages": [{"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "r"}]});
        assert!(
            tool_call(&answered, Dialect::Chat, 0).is_none(),
            "the results are read"
        );
    }
}
