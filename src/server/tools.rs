//! Tool calling on the request side: `tools` and `tool_choice` checked and
//! turned into a [`ToolSetup`] (what the chat template gets, which parser
//! reads the reply, what is written into the prompt to force a call), and
//! the response shapes of calls (`tool_calls` with ids).
//!
//! `tool_choice`: `auto` (default with tools) lets the model choose; `none`
//! hides the tools from the template and parses nothing; `required` and a
//! named function (`{"type": "function", "function": {"name": ...}}`) write
//! the opening of a call into the prompt (the assistant turn is prefilled
//! with `<tool_call>` and, when named, the function name), so even a model
//! that would not call a tool does; the call then ends as soon as it is
//! complete. The parsers are in [`super::tool_parser`].

use serde::Serialize;
use serde_json::Value;

use super::{
    error::ApiError,
    tool_parser::{param_types, CallPiece, ParamTypes, ToolCall, ToolCallParser, ToolFormat},
};

/// How one chat request uses tools.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSetup {
    pub format: ToolFormat,
    pub types: ParamTypes,
    /// Appended to the rendered prompt to force a call.
    pub forced_prefix: Option<String>,
}

impl ToolSetup {
    /// A parser for one choice.
    pub fn parser(&self) -> ToolCallParser {
        match &self.forced_prefix {
            Some(prefix) => ToolCallParser::forced(self.format, self.types.clone(), prefix),
            None => ToolCallParser::new(self.format, self.types.clone()),
        }
    }
}

/// `tool_choice`, read.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Named(String),
}

/// Reads `tool_choice` (OpenAI's shapes; `param` names the field in errors).
pub fn parse_tool_choice(value: Option<&Value>, param: &str) -> Result<ToolChoice, ApiError> {
    let bad = || {
        ApiError::invalid_param(
            param,
            format!(
                "`{param}` must be \"auto\", \"none\", \"required\" or {{\"type\": \"function\", \
                 \"function\": {{\"name\": ...}}}}."
            ),
        )
    };
    match value {
        None | Some(Value::Null) => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" | "any" => Ok(ToolChoice::Required),
            _ => Err(bad()),
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(bad)?;
            Ok(ToolChoice::Named(name.to_string()))
        }
        Some(_) => Err(bad()),
    }
}

/// The function name of each tool; every tool must be a function with a name.
pub fn tool_names(tools: &[Value]) -> Result<Vec<String>, ApiError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let function = tool.get("function").unwrap_or(tool);
            let kind = tool
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("function");
            match (kind, function.get("name").and_then(Value::as_str)) {
                ("function", Some(name)) if !name.trim().is_empty() => Ok(name.to_string()),
                _ => Err(ApiError::invalid_param(
                    format!("tools[{i}]"),
                    format!(
                        "tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": \
                         ..., \"parameters\": {{...}}}}}}."
                    ),
                )),
            }
        })
        .collect()
}

/// Checks `tools` with `choice` and decides how the request uses them:
/// `(tools for the template, setup)`; both `None` when no tools apply.
pub fn plan(
    tools: Option<&[Value]>,
    choice: &ToolChoice,
    template_source: &str,
    choice_param: &str,
) -> Result<(Option<Vec<Value>>, Option<ToolSetup>), ApiError> {
    let tools = tools.unwrap_or(&[]);
    let names = tool_names(tools)?;
    if tools.is_empty() || *choice == ToolChoice::None {
        return match choice {
            ToolChoice::Required | ToolChoice::Named(_) => Err(ApiError::invalid_param(
                choice_param,
                format!("`{choice_param}` asks for a tool call but no tools were given."),
            )),
            _ => Ok((None, None)),
        };
    }
    let format = ToolFormat::for_template(template_source);
    let forced_prefix = match choice {
        ToolChoice::Auto | ToolChoice::None => None,
        // With one tool, "required" can only mean that one.
        ToolChoice::Required if names.len() == 1 => Some(format.forced_prefix(Some(&names[0]))),
        ToolChoice::Required => Some(format.forced_prefix(None)),
        ToolChoice::Named(name) => {
            if !names.contains(name) {
                return Err(ApiError::invalid_param(
                    choice_param,
                    format!("`{choice_param}` names `{name}`, which is not one of the tools."),
                ));
            }
            Some(format.forced_prefix(Some(name)))
        }
    };
    Ok((
        Some(tools.to_vec()),
        Some(ToolSetup {
            format,
            types: param_types(tools),
            forced_prefix,
        }),
    ))
}

/// Whether a chat template renders `tools` itself.
pub fn template_takes_tools(source: &str) -> bool {
    source.contains("tools")
}

/// For templates that ignore `tools`: a system-prompt section that
/// describes the tools and the JSON call format the parser reads.
pub fn tools_system_prompt(tools: &[Value]) -> String {
    let mut out = String::from(
        "# Tools\n\nYou may call one or more functions to help with the user's request. \
         The functions are described in JSON schema inside <tools></tools>:\n<tools>",
    );
    for tool in tools {
        out.push('\n');
        out.push_str(&tool.to_string());
    }
    out.push_str(
        "\n</tools>\n\nTo call a function, write a JSON object with its name and arguments \
         inside <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \
         \"arguments\": <args-json-object>}\n</tool_call>",
    );
    out
}

/// Adds [`tools_system_prompt`] to the system message (or a new one first).
pub fn add_tools_to_system(messages: &mut Vec<Value>, tools: &[Value]) {
    let section = tools_system_prompt(tools);
    if let Some(first) = messages.first_mut() {
        if first.get("role").and_then(Value::as_str) == Some("system") {
            let text = first.get("content").and_then(Value::as_str).unwrap_or("");
            let joined = if text.is_empty() {
                section
            } else {
                format!("{text}\n\n{section}")
            };
            first["content"] = Value::String(joined);
            return;
        }
    }
    messages.insert(0, serde_json::json!({"role": "system", "content": section}));
}

/// For templates that ignore `tools`: assistant `tool_calls` written into
/// the content in the JSON call format, so the model sees its earlier calls.
pub fn calls_into_content(messages: &mut [Value]) {
    for message in messages.iter_mut() {
        let Some(object) = message.as_object_mut() else {
            continue;
        };
        let Some(Value::Array(calls)) = object.remove("tool_calls") else {
            continue;
        };
        let mut text = object
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        for call in &calls {
            let function = call.get("function").unwrap_or(call);
            let name = function.get("name").cloned().unwrap_or(Value::Null);
            let arguments = function.get("arguments").cloned().unwrap_or(Value::Null);
            let body = serde_json::json!({"name": name, "arguments": arguments});
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!("<tool_call>\n{body}\n</tool_call>"));
        }
        object.insert("content".into(), Value::String(text));
    }
}

/// A new call id (`call_` + 24 hex digits).
pub fn call_id(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..24]
    )
}

/// `function` of a call in OpenAI's shapes.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionOut {
    pub name: String,
    pub arguments: String,
}

/// `message.tool_calls[]`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionOut,
}

/// `delta.tool_calls[]`: a call's first delta has its `id`, `type` and
/// `function.name`; every delta has a piece of `function.arguments`, and
/// the pieces of one `index` add up to the call's arguments.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

/// `delta.tool_calls[].function`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

impl ToolCallDelta {
    /// The delta of a streamed piece; a first piece (with the name) gets a
    /// fresh `call_` id.
    pub fn from_piece(piece: CallPiece) -> Self {
        let first = piece.name.is_some();
        ToolCallDelta {
            index: piece.index,
            id: first.then(|| call_id("call_")),
            kind: first.then_some("function"),
            function: FunctionDelta {
                name: piece.name,
                arguments: piece.arguments,
            },
        }
    }
}

impl ToolCallOut {
    pub fn new(call: ToolCall) -> Self {
        ToolCallOut {
            id: call_id("call_"),
            kind: "function",
            function: FunctionOut {
                name: call.name,
                arguments: call.arguments,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_choice_shapes() {
        assert_eq!(parse_tool_choice(None, "tool_choice"), Ok(ToolChoice::Auto));
        assert_eq!(
            parse_tool_choice(Some(&json!("required")), "tool_choice"),
            Ok(ToolChoice::Required)
        );
        assert_eq!(
            parse_tool_choice(
                Some(&json!({"type": "function", "function": {"name": "f"}})),
                "tool_choice"
            ),
            Ok(ToolChoice::Named("f".into()))
        );
        assert!(parse_tool_choice(Some(&json!("sometimes")), "tool_choice").is_err());
        assert!(parse_tool_choice(Some(&json!(3)), "tool_choice").is_err());
    }

    #[test]
    fn plans() {
        let tools = vec![json!({"type": "function", "function": {"name": "f"}})];
        let (t, setup) =
            plan(Some(&tools), &ToolChoice::Auto, "hermes", "tool_choice").expect("auto");
        assert_eq!(t.map(|t| t.len()), Some(1));
        assert_eq!(setup.expect("setup").forced_prefix, None);
        let (t, setup) = plan(Some(&tools), &ToolChoice::None, "", "tool_choice").expect("none");
        assert!(t.is_none() && setup.is_none());
        let (_, setup) = plan(
            Some(&tools),
            &ToolChoice::Named("f".into()),
            "<function=",
            "tool_choice",
        )
        .expect("named");
        let setup = setup.expect("setup");
        assert_eq!(setup.format, ToolFormat::Xml);
        assert_eq!(
            setup.forced_prefix.as_deref(),
            Some("<tool_call>\n<function=f>\n")
        );
        let e = plan(
            Some(&tools),
            &ToolChoice::Named("g".into()),
            "",
            "tool_choice",
        );
        assert_eq!(e.err().and_then(|e| e.param), Some("tool_choice".into()));
        let e = plan(None, &ToolChoice::Required, "", "tool_choice");
        assert!(e.is_err());
        let bad = vec![json!({"type": "function", "function": {}})];
        let e = plan(Some(&bad), &ToolChoice::Auto, "", "tool_choice");
        assert_eq!(e.err().and_then(|e| e.param), Some("tools[0]".into()));
    }
}
