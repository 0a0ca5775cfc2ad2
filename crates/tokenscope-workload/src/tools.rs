//! Tools a request offers the model (`--tools FILE`, a dataset entry's
//! `tools`): one list form for all, OpenAI chat's, which each API's writer
//! turns into its own.

use serde_json::{json, Value};

/// A tools list in OpenAI chat's form: each `{"type": "function",
/// "function": {"name", "description", "parameters"}}`. A bare function
/// (`{"name", "parameters"}`, as BFCL writes them) is put in that form; an
/// entry without a name is refused.
pub fn normalize(tools: &Value) -> Result<Vec<Value>, String> {
    let list = tools
        .as_array()
        .ok_or("a JSON list of tools is needed ([{\"type\": \"function\", \"function\": {…}}])")?;
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let function = match t.get("function") {
                Some(f) => f,
                None => t,
            };
            if !function["name"].is_string() {
                return Err(format!("tool {} has no `name`", i + 1));
            }
            let mut function = function.clone();
            if function.get("parameters").is_none() {
                function["parameters"] = json!({"type": "object", "properties": {}});
            }
            Ok(json!({"type": "function", "function": function}))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_functions_are_put_in_openai_form_and_nameless_ones_refused() {
        let tools =
            normalize(&json!([{"name": "get_weather", "parameters": {"type": "object"}}])).unwrap();
        assert_eq!(tools[0]["type"], "function");
        assert_eq!(tools[0]["function"]["name"], "get_weather");
        let no_params = normalize(&json!([{"type": "function", "function": {"name": "f"}}]));
        assert_eq!(
            no_params.unwrap()[0]["function"]["parameters"]["type"],
            "object"
        );
        let nameless = normalize(&json!([{"description": "x"}])).unwrap_err();
        assert!(nameless.contains("tool 1"), "{nameless}");
        assert!(normalize(&json!({"name": "f"})).is_err());
    }
}
