//! Structured outputs (`--response-format json|schema:FILE`): what each
//! request asks for, and every answer checked against it — valid JSON, and
//! valid against the schema — so a server that breaks its JSON under load
//! is seen, not just timed. The schema is compiled once for the run.

use serde_json::Value;

/// The answer format a run asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object (OpenAI's `json_object`).
    Json,
    /// An answer valid against this JSON Schema, named `name` where the API
    /// wants a name (OpenAI's `json_schema`).
    Schema { name: String, schema: Value },
}

impl ResponseFormat {
    /// Its JSON Schema (JSON mode: any object), for the APIs that take
    /// only a schema.
    pub fn schema(&self) -> Value {
        match self {
            ResponseFormat::Json => serde_json::json!({"type": "object"}),
            ResponseFormat::Schema { schema, .. } => schema.clone(),
        }
    }

    /// OpenAI chat's and completions' `response_format`.
    pub fn openai(&self) -> Value {
        match self {
            ResponseFormat::Json => serde_json::json!({"type": "json_object"}),
            ResponseFormat::Schema { name, schema } => serde_json::json!({"type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": true}}),
        }
    }

    /// OpenAI Responses' `text.format`.
    pub fn responses(&self) -> Value {
        match self {
            ResponseFormat::Json => serde_json::json!({"type": "json_object"}),
            ResponseFormat::Schema { name, schema } => serde_json::json!({"type": "json_schema",
                "name": name, "schema": schema, "strict": true}),
        }
    }

    /// What the results call it (`json`, `schema:NAME`).
    pub fn label(&self) -> String {
        match self {
            ResponseFormat::Json => "json".into(),
            ResponseFormat::Schema { name, .. } => format!("schema:{name}"),
        }
    }
}

/// Checks answers against the run's format: JSON mode (any object) has
/// no schema to compile.
#[derive(Debug)]
pub struct AnswerCheck {
    validator: Option<jsonschema::Validator>,
}

impl AnswerCheck {
    /// The check of `format`; an error when its schema is not one.
    pub fn new(format: &ResponseFormat) -> Result<AnswerCheck, String> {
        let validator = match format {
            ResponseFormat::Json => None,
            ResponseFormat::Schema { schema, .. } => Some(
                jsonschema::validator_for(schema)
                    .map_err(|e| format!("not a valid JSON Schema: {e}"))?,
            ),
        };
        Ok(AnswerCheck { validator })
    }

    /// `Ok` for a valid answer; else why not, in one short line (the
    /// first violation, where in the answer).
    pub fn check(&self, answer: &str) -> Result<(), String> {
        let doc: Value = serde_json::from_str(answer.trim())
            .map_err(|e| format!("not JSON: {}", first_words(&e.to_string())))?;
        let Some(v) = &self.validator else {
            return match doc.is_object() {
                true => Ok(()),
                false => Err("JSON, but not an object".into()),
            };
        };
        let first = v.iter_errors(&doc).next().map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("schema: at {at}: {}", first_words(&e.to_string()))
        });
        match first {
            None => Ok(()),
            Some(why) => Err(why),
        }
    }
}

/// A message cut to its first 100 characters, one line.
pub(crate) fn first_words(s: &str) -> String {
    s.lines().next().unwrap_or("").chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_mode_wants_an_object_and_schema_mode_its_schema() {
        let json = AnswerCheck::new(&ResponseFormat::Json).unwrap();
        assert!(json.check(r#" {"a": 1} "#).is_ok());
        assert!(json.check("[1]").unwrap_err().contains("not an object"));
        assert!(json.check(r#"{"a": "#).unwrap_err().starts_with("not JSON"));
        let schema = json!({"type": "object", "required": ["answer"],
            "properties": {"answer": {"type": "string"}}});
        let s = AnswerCheck::new(&ResponseFormat::Schema {
            name: "a".into(),
            schema,
        })
        .unwrap();
        assert!(s.check(r#"{"answer": "the river"}"#).is_ok());
        let why = s.check(r#"{"answer": 3}"#).unwrap_err();
        assert!(why.contains("/answer"), "{why}");
        assert!(s.check(r#"{}"#).unwrap_err().contains("answer"));
        let bad = ResponseFormat::Schema {
            name: "x".into(),
            schema: json!({"type": 7}),
        };
        assert!(AnswerCheck::new(&bad).is_err());
    }
}
