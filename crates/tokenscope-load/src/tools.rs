//! Tool calls (`--tools FILE`, `--tool-choice`): the tools a request
//! offers, written in each API's form, the calls its answer makes put
//! together from their streamed pieces, and every call's arguments checked
//! against the tool's parameter schema — so a server whose tool calls break
//! under load is seen, not just timed.

pub use crate::protocol::tool_forms::ToolChoice;
use crate::protocol::ToolCallDelta;
use crate::structured::first_words;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokenscope_core::record::ToolCallMade;

pub use tokenscope_workload::tools::normalize;

/// What a run offers the model: its tools (`--tools`; a dataset entry's
/// own win), how it may use them, and the check of the calls made.
#[derive(Debug, Default)]
pub struct ToolUse {
    pub tools: Arc<Vec<Value>>,
    pub choice: ToolChoice,
    pub check: ToolCheck,
}

/// One call as its pieces came: the tool it names and its arguments' text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallSoFar {
    pub index: u32,
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

/// The most calls one answer may make (some thirty times what any agent
/// asks in one turn): past it the answer is malformed, and no piece costs
/// a search of more calls than this.
pub const MAX_CALLS: usize = 1024;

/// An answer that made more calls than [`MAX_CALLS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the answer made more than {MAX_CALLS} tool calls")]
pub struct TooManyCalls;

/// Adds one streamed piece to the call it belongs to. A piece that names
/// a tool under an id not seen at its index opens a new call, even at an
/// index already used (some servers send every call at index 0, each with
/// its id). Every other piece joins the latest call at its index: OpenAI
/// sends the id and name on a call's first piece only, and some servers
/// send a new (or empty) id on every piece of one call.
pub fn merge(calls: &mut Vec<CallSoFar>, d: ToolCallDelta<'_>) -> Result<(), TooManyCalls> {
    let latest = calls.iter().rposition(|c| c.index == d.index);
    let id = d.id.as_deref().filter(|id| !id.is_empty());
    let names = d.name.as_deref().is_some_and(|n| !n.is_empty());
    let found = match (id, latest) {
        (Some(id), Some(i)) if names => calls
            .iter()
            .rposition(|c| c.index == d.index && c.id.as_deref() == Some(id))
            // A call whose first piece had no id and no name yet takes both.
            .or(Some(i).filter(|&i| calls[i].id.is_none() && calls[i].name.is_empty())),
        _ => latest,
    };
    let i = match found {
        Some(i) => i,
        None if calls.len() >= MAX_CALLS => return Err(TooManyCalls),
        None => {
            calls.push(CallSoFar {
                index: d.index,
                ..CallSoFar::default()
            });
            calls.len() - 1
        }
    };
    let call = &mut calls[i];
    // A call keeps the first id it was given (a later, changed or empty
    // one is the same call's).
    if call.id.is_none() {
        call.id = id.map(str::to_owned);
    }
    // A name sent again on a later piece (some servers repeat it on every
    // one) is the same name, not more of it.
    if let Some(name) = d.name.filter(|n| *n != call.name) {
        call.name.push_str(&name);
    }
    call.arguments.push_str(&d.arguments);
    Ok(())
}

/// Checks calls against the tools offered. Each distinct parameter schema
/// is compiled once for the run (a dataset's entries may each bring their
/// own tools); the cache is shared by every request.
#[derive(Debug, Default)]
pub struct ToolCheck {
    compiled: Mutex<HashMap<String, Arc<Result<jsonschema::Validator, String>>>>,
}

impl ToolCheck {
    /// `call` judged against `tools`: it must name one of them, and its
    /// arguments must be a JSON object valid against that tool's
    /// `parameters`.
    pub fn judge(&self, tools: &[Value], call: &CallSoFar) -> ToolCallMade {
        let verdict = self.check(tools, call);
        ToolCallMade {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            valid: verdict.is_ok(),
            error: verdict.err(),
        }
    }

    fn check(&self, tools: &[Value], call: &CallSoFar) -> Result<(), String> {
        let tool = tools
            .iter()
            .find(|t| t["function"]["name"] == call.name.as_str())
            .ok_or_else(|| format!("no such tool: `{}`", first_words(&call.name)))?;
        // An empty argument string is an empty object (servers send `""`
        // for a call with no parameters).
        let text = match call.arguments.trim() {
            "" => "{}",
            t => t,
        };
        let args: Value = serde_json::from_str(text)
            .map_err(|e| format!("arguments not JSON: {}", first_words(&e.to_string())))?;
        if !args.is_object() {
            return Err("arguments are JSON, but not an object".into());
        }
        let validator = self.validator(&tool["function"]["parameters"]);
        let v = match validator.as_ref() {
            Ok(v) => v,
            Err(why) => return Err(why.clone()),
        };
        let first = v.iter_errors(&args).next().map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!(
                "arguments against the schema: at {at}: {}",
                first_words(&e.to_string())
            )
        });
        match first {
            None => Ok(()),
            Some(why) => Err(why),
        }
    }

    fn validator(&self, schema: &Value) -> Arc<Result<jsonschema::Validator, String>> {
        let key = schema.to_string();
        let mut compiled = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        compiled
            .entry(key)
            .or_insert_with(|| {
                Arc::new(
                    jsonschema::validator_for(schema)
                        .map_err(|e| format!("the tool's parameters are not a JSON Schema: {e}")),
                )
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Vec<Value> {
        normalize(
            &json!([{"name": "get_weather", "parameters": {"type": "object",
            "required": ["city"], "properties": {"city": {"type": "string"}}}}]),
        )
        .unwrap()
    }

    #[test]
    fn calls_are_put_together_from_their_pieces_by_index() {
        let mut calls = Vec::new();
        let piece = |index, name: Option<&'static str>, args: &'static str| ToolCallDelta {
            index,
            id: None,
            name: name.map(Into::into),
            arguments: args.into(),
        };
        let _ = merge(&mut calls, piece(0, Some("get_weather"), ""));
        let _ = merge(&mut calls, piece(0, None, "{\"city\":"));
        let _ = merge(&mut calls, piece(1, Some("f"), "{}"));
        let _ = merge(&mut calls, piece(0, None, "\"Oslo\"}"));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].arguments, r#"{"city":"Oslo"}"#);
        assert_eq!(calls[1].name, "f");
    }

    #[test]
    fn calls_with_their_own_ids_at_one_index_stay_apart() {
        let piece = |id: Option<&'static str>, name: Option<&'static str>, args: &'static str| {
            ToolCallDelta {
                index: 0,
                id: id.map(Into::into),
                name: name.map(Into::into),
                arguments: args.into(),
            }
        };
        // Two calls, both at index 0, each with its id (some servers do this).
        let mut calls = Vec::new();
        let _ = merge(&mut calls, piece(Some("a"), Some("get_weather"), ""));
        let _ = merge(&mut calls, piece(None, None, "{\"city\":\"Oslo\"}"));
        let _ = merge(&mut calls, piece(Some("b"), Some("get_time"), ""));
        let _ = merge(&mut calls, piece(None, None, "{}"));
        let named: Vec<_> = calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            named,
            [("get_weather", r#"{"city":"Oslo"}"#), ("get_time", "{}")]
        );
        // The id repeated on every piece, first given late, or new (or
        // empty) on every piece of one call: one call.
        let mut calls = Vec::new();
        let _ = merge(&mut calls, piece(None, Some("f"), "{"));
        let _ = merge(&mut calls, piece(Some("c"), None, "}"));
        let _ = merge(&mut calls, piece(Some("c"), None, ""));
        let _ = merge(&mut calls, piece(Some("d"), None, ""));
        let _ = merge(&mut calls, piece(Some(""), None, ""));
        let _ = merge(&mut calls, piece(Some("c"), Some("f"), ""));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "f", "a repeated name is not doubled");
        assert_eq!(
            (calls[0].id.as_deref(), calls[0].arguments.as_str()),
            (Some("c"), "{}")
        );
        // Past the cap: refused, never searched further.
        let mut calls = Vec::new();
        let named = |index| ToolCallDelta {
            index,
            id: None,
            name: Some("f".into()),
            arguments: "".into(),
        };
        for i in 0..MAX_CALLS as u32 {
            assert!(merge(&mut calls, named(i)).is_ok());
        }
        assert_eq!(merge(&mut calls, named(5000)), Err(TooManyCalls));
    }

    #[test]
    fn arguments_are_judged_against_the_named_tool() {
        let tools = weather();
        let check = ToolCheck::default();
        let call = |name: &str, args: &str| CallSoFar {
            name: name.into(),
            arguments: args.into(),
            ..CallSoFar::default()
        };
        assert!(
            check
                .judge(&tools, &call("get_weather", r#"{"city":"Oslo"}"#))
                .valid
        );
        let bad = check.judge(&tools, &call("get_weather", r#"{"city":"Oslo""#));
        assert!(!bad.valid && bad.error.unwrap().starts_with("arguments not JSON"));
        let wrong = check.judge(&tools, &call("get_weather", r#"{"city": 3}"#));
        assert!(wrong.error.unwrap().contains("/city"));
        let missing = check.judge(&tools, &call("get_weather", ""));
        assert!(missing.error.unwrap().contains("city"));
        let unknown = check.judge(&tools, &call("get_time", "{}"));
        assert!(unknown.error.unwrap().contains("no such tool"));
    }
}
