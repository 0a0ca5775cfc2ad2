//! How each API writes the tools a request offers and the choice it
//! gives the model (`--tools`, `--tool-choice`): one list in OpenAI chat's
//! form, turned into Responses' flat form and Anthropic's `input_schema`.

use serde_json::{json, Value};

/// `--tool-choice`: whether the model may, must or must not call a tool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides (every API's default).
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call one.
    None,
    /// The model must call this tool.
    Named(String),
}

impl std::str::FromStr for ToolChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            "none" => ToolChoice::None,
            "" => return Err("auto, required, none, or a tool's name".into()),
            name => ToolChoice::Named(name.to_string()),
        })
    }
}

impl ToolChoice {
    /// Whether an answer must hold a call.
    pub fn requires_a_call(&self) -> bool {
        matches!(self, ToolChoice::Required | ToolChoice::Named(_))
    }

    /// Its name in the run's config (`auto`, `required`, `none`, the tool's).
    pub fn label(&self) -> &str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
            ToolChoice::Named(n) => n,
        }
    }

    /// OpenAI chat's `tool_choice`.
    pub fn openai(&self) -> Value {
        match self {
            ToolChoice::Named(n) => json!({"type": "function", "function": {"name": n}}),
            other => json!(other.label()),
        }
    }

    /// OpenAI Responses' `tool_choice`.
    pub fn responses(&self) -> Value {
        match self {
            ToolChoice::Named(n) => json!({"type": "function", "name": n}),
            other => json!(other.label()),
        }
    }

    /// Anthropic's `tool_choice` (`any` is its word for required).
    pub fn anthropic(&self) -> Value {
        match self {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Named(n) => json!({"type": "tool", "name": n}),
        }
    }
}

/// A tool (OpenAI chat's form) as the Responses API takes it: flat.
pub fn responses_tool(tool: &Value) -> Value {
    let f = &tool["function"];
    json!({"type": "function", "name": f["name"], "description": f["description"],
        "parameters": f["parameters"]})
}

/// A tool (OpenAI chat's form) as Anthropic takes it.
pub fn anthropic_tool(tool: &Value) -> Value {
    let f = &tool["function"];
    let mut t = json!({"name": f["name"], "input_schema": f["parameters"]});
    if let Some(d) = f["description"].as_str() {
        t["description"] = json!(d);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Vec<Value> {
        tokenscope_workload::tools::normalize(&json!([{"name": "get_weather", "parameters":
            {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}]))
        .unwrap()
    }

    #[test]
    fn each_api_gets_the_tools_in_its_own_form() {
        let tools = weather();
        assert_eq!(responses_tool(&tools[0])["name"], "get_weather");
        assert_eq!(
            anthropic_tool(&tools[0])["input_schema"]["required"][0],
            "city"
        );
    }

    #[test]
    fn each_api_writes_the_choice_its_way() {
        let named = ToolChoice::Named("f".into());
        assert_eq!(named.openai()["function"]["name"], "f");
        assert_eq!(named.responses()["name"], "f");
        assert_eq!(named.anthropic(), json!({"type": "tool", "name": "f"}));
        assert_eq!(ToolChoice::Required.anthropic()["type"], "any");
        assert_eq!(ToolChoice::Required.openai(), "required");
        assert!("".parse::<ToolChoice>().is_err());
        assert_eq!("none".parse::<ToolChoice>().unwrap(), ToolChoice::None);
    }
}
