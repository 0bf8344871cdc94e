//! Tool calls out of a model's streamed text.
//!
//! Two formats, chosen from the chat template ([`ToolFormat::for_template`]):
//!
//! * [`ToolFormat::Json`] (Qwen3, Hermes): `<tool_call>\n{"name": "f",
//!   "arguments": {...}}\n</tool_call>`.
//! * [`ToolFormat::Xml`] (Qwen3-Coder, Qwen3.5): `<tool_call>\n<function=f>\n
//!   <parameter=p>\nvalue\n</parameter>\n</function>\n</tool_call>`; values
//!   are typed with the tool's JSON schema (strings stay strings, other
//!   types are read as JSON when they parse).
//!
//! [`ToolCallParser`] takes text in arbitrary pieces (a tag may be cut
//! anywhere) and gives back the plain text and the completed calls. Text is
//! released as soon as it cannot be the start of `<tool_call>`; a call is
//! released whole when its block closes, so no markup ever reaches
//! `content`. The result depends only on the whole text, never on how it
//! was cut (the tests feed every cut of real template renderings). A block
//! that does not parse is given back as text, so nothing the model wrote is
//! lost. Whitespace between calls and after the last one is dropped.
//!
//! A *forced* parser (`tool_choice` required or named: the server wrote the
//! opening of the call into the prompt) starts inside a block and reports
//! [`ToolCallParser::done`] as soon as the call is complete (the JSON object
//! closes, or `</function>`), so that generation can stop there.

use std::collections::HashMap;

use serde_json::{Map, Value};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    Json,
    Xml,
}

impl ToolFormat {
    /// The format a chat template teaches: XML when it writes
    /// `<function=`, else JSON.
    pub fn for_template(source: &str) -> ToolFormat {
        if source.contains("<function=") {
            ToolFormat::Xml
        } else {
            ToolFormat::Json
        }
    }

    /// What the server appends to the prompt to force a call (of `name`,
    /// or of any tool when `None`).
    pub fn forced_prefix(self, name: Option<&str>) -> String {
        match (self, name) {
            (ToolFormat::Json, None) => format!("{OPEN}\n{{\"name\": \""),
            (ToolFormat::Json, Some(name)) => {
                let quoted = Value::String(name.to_string()).to_string();
                format!("{OPEN}\n{{\"name\": {quoted}, \"arguments\": {{")
            }
            (ToolFormat::Xml, None) => format!("{OPEN}\n<function="),
            (ToolFormat::Xml, Some(name)) => format!("{OPEN}\n<function={name}>\n"),
        }
    }
}

/// One parsed call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as JSON text (an object).
    pub arguments: String,
}

/// What one piece of text gave.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ToolDelta {
    pub text: String,
    pub calls: Vec<ToolCall>,
}

/// Parameter types per function, from the tools' JSON schemas (for XML).
pub type ParamTypes = HashMap<String, HashMap<String, String>>;

/// The parameter types of `tools` (OpenAI `[{"type": "function",
/// "function": {"name", "parameters": {"properties": {p: {"type"}}}}}]`).
pub fn param_types(tools: &[Value]) -> ParamTypes {
    let mut out = ParamTypes::new();
    for tool in tools {
        let function = tool.get("function").unwrap_or(tool);
        let Some(name) = function.get("name").and_then(Value::as_str) else {
            continue;
        };
        let mut params = HashMap::new();
        let schema = function
            .get("parameters")
            .or_else(|| function.get("input_schema"));
        if let Some(props) = schema
            .and_then(|p| p.get("properties"))
            .and_then(Value::as_object)
        {
            for (param, spec) in props {
                let kind = match spec.get("type") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(kinds)) => kinds
                        .iter()
                        .filter_map(Value::as_str)
                        .find(|k| *k != "null")
                        .unwrap_or("string")
                        .to_string(),
                    _ => "string".to_string(),
                };
                params.insert(param.clone(), kind);
            }
        }
        out.insert(name.to_string(), params);
    }
    out
}

/// Streaming tool-call parser for one choice.
#[derive(Debug, Clone)]
pub struct ToolCallParser {
    format: ToolFormat,
    types: ParamTypes,
    /// Inside a `<tool_call>` block.
    inside: bool,
    /// Outside: a possible prefix of `<tool_call>`; inside: the block so far.
    held: String,
    /// Whitespace after a call, dropped unless text follows.
    pending_space: String,
    forced: bool,
    done: bool,
    calls_seen: usize,
}

impl ToolCallParser {
    pub fn new(format: ToolFormat, types: ParamTypes) -> Self {
        ToolCallParser {
            format,
            types,
            inside: false,
            held: String::new(),
            pending_space: String::new(),
            forced: false,
            done: false,
            calls_seen: 0,
        }
    }

    /// A parser whose input continues `prefix`, which the server put at the
    /// end of the prompt ([`ToolFormat::forced_prefix`]).
    pub fn forced(format: ToolFormat, types: ParamTypes, prefix: &str) -> Self {
        let mut parser = Self::new(format, types);
        parser.forced = true;
        let _ = parser.push(prefix);
        parser
    }

    /// A forced call is complete: nothing more should be generated.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Calls parsed so far.
    pub fn calls_seen(&self) -> usize {
        self.calls_seen
    }

    /// Feeds one piece of text.
    pub fn push(&mut self, piece: &str) -> ToolDelta {
        let mut out = ToolDelta::default();
        if self.done {
            return out;
        }
        self.held.push_str(piece);
        loop {
            if self.inside {
                if let Some(end) = self.block_end() {
                    let block: String = self.held.drain(..end.consumed).collect();
                    self.inside = false;
                    self.close_block(&block[..end.body], &mut out);
                    if self.forced {
                        self.done = true;
                        self.held.clear();
                        return out;
                    }
                    continue;
                }
                return out;
            }
            match self.held.find(OPEN) {
                Some(at) => {
                    let before: String = self.held.drain(..at).collect();
                    self.emit_text(&before, &mut out);
                    self.held.drain(..OPEN.len());
                    self.inside = true;
                    self.pending_space.clear();
                }
                None => {
                    let keep = partial_tag_len(&self.held, OPEN);
                    let cut = self.held.len() - keep;
                    let text: String = self.held.drain(..cut).collect();
                    self.emit_text(&text, &mut out);
                    return out;
                }
            }
        }
    }

    /// The end of generation: an unclosed block is parsed if it can be
    /// (the model ran out of tokens or stopped right after the call), else
    /// given back as text.
    pub fn finish(&mut self) -> ToolDelta {
        let mut out = ToolDelta::default();
        let rest = std::mem::take(&mut self.held);
        if self.inside {
            self.inside = false;
            self.close_block(&rest, &mut out);
        } else {
            self.emit_text(&rest, &mut out);
        }
        self.pending_space.clear();
        out
    }

    fn emit_text(&mut self, text: &str, out: &mut ToolDelta) {
        if text.is_empty() {
            return;
        }
        if self.calls_seen > 0 && text.trim().is_empty() {
            self.pending_space.push_str(text);
            return;
        }
        out.text.push_str(&std::mem::take(&mut self.pending_space));
        out.text.push_str(text);
    }

    /// Where the current block ends: `(body length, bytes consumed)`.
    fn block_end(&self) -> Option<BlockEnd> {
        if let Some(at) = self.held.find(CLOSE) {
            return Some(BlockEnd {
                body: at,
                consumed: at + CLOSE.len(),
            });
        }
        if !self.forced {
            return None;
        }
        match self.format {
            ToolFormat::Json => json_object_end(&self.held).map(|end| BlockEnd {
                body: end,
                consumed: end,
            }),
            ToolFormat::Xml => self.held.find("</function>").map(|at| BlockEnd {
                body: at + "</function>".len(),
                consumed: at + "</function>".len(),
            }),
        }
    }

    fn close_block(&mut self, body: &str, out: &mut ToolDelta) {
        let parsed = match self.format {
            ToolFormat::Json => parse_json_call(body),
            ToolFormat::Xml => parse_xml_call(body, &self.types),
        };
        match parsed {
            Some(call) => {
                self.calls_seen += 1;
                self.pending_space.clear();
                out.calls.push(call);
            }
            None => {
                // Not a call after all: give the model's text back.
                let text = format!("{OPEN}{body}");
                self.emit_text(&text, out);
            }
        }
    }
}

struct BlockEnd {
    body: usize,
    consumed: usize,
}

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_tag_len(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && text.ends_with(&tag[..n]))
        .unwrap_or(0)
}

/// The byte just past the first complete JSON object in `text` (strings and
/// escapes respected), if it is complete.
fn json_object_end(text: &str) -> Option<usize> {
    let start = text.find('{')?;
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in text[start..].char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(start + i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `{"name": ..., "arguments": {...}}` (also `parameters` for arguments,
/// and arguments given as a JSON string).
fn parse_json_call(body: &str) -> Option<ToolCall> {
    let body = body.trim();
    let end = json_object_end(body)?;
    if !body[end..].trim().is_empty() || !body.starts_with('{') {
        return None;
    }
    let value: Value = serde_json::from_str(&body[..end]).ok()?;
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = match value.get("arguments").or_else(|| value.get("parameters")) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_object)?,
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return None,
    };
    Some(ToolCall {
        name,
        arguments: arguments.to_string(),
    })
}

/// `<function=NAME> <parameter=P>VALUE</parameter>... </function>`; a
/// missing `</parameter>` or `</function>` is tolerated.
fn parse_xml_call(body: &str, types: &ParamTypes) -> Option<ToolCall> {
    let rest = body.trim_start().strip_prefix("<function=")?;
    let name_end = rest.find('>')?;
    let name = rest[..name_end].trim().to_string();
    if name.is_empty() || name.contains('<') {
        return None;
    }
    let mut rest = &rest[name_end + 1..];
    if let Some(at) = rest.find("</function>") {
        if !rest[at + "</function>".len()..].trim().is_empty() {
            return None;
        }
        rest = &rest[..at];
    }
    let param_types = types.get(&name);
    let mut arguments = Map::new();
    let mut pieces = rest.split("<parameter=");
    if !pieces.next().unwrap_or("").trim().is_empty() {
        return None;
    }
    for piece in pieces {
        let key_end = piece.find('>')?;
        let key = piece[..key_end].trim().to_string();
        let mut value = &piece[key_end + 1..];
        if let Some(at) = value.find("</parameter>") {
            value = &value[..at];
        }
        let value = value.strip_prefix('\n').unwrap_or(value);
        let value = value.strip_suffix('\n').unwrap_or(value);
        let kind = param_types
            .and_then(|t| t.get(&key))
            .map(String::as_str)
            .unwrap_or("");
        arguments.insert(key, typed_value(value, kind));
    }
    Some(ToolCall {
        name,
        arguments: Value::Object(arguments).to_string(),
    })
}

/// A parameter's text as the JSON type its schema names.
fn typed_value(text: &str, kind: &str) -> Value {
    if kind == "string" {
        return Value::String(text.to_string());
    }
    // Templates write values with Python's `str()`: `True`, `False`, `None`.
    if kind == "boolean" {
        match text.trim() {
            "True" | "true" => return Value::Bool(true),
            "False" | "false" => return Value::Bool(false),
            _ => {}
        }
    }
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(v) if kind.is_empty() && v.is_string() => v,
        Ok(v) => v,
        Err(_) => Value::String(text.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Feeds `text` cut at `cuts` and returns all text and calls.
    fn run(parser: &mut ToolCallParser, text: &str, cuts: &[usize]) -> ToolDelta {
        let mut all = ToolDelta::default();
        let mut last = 0;
        for &cut in cuts.iter().chain(std::iter::once(&text.len())) {
            let d = parser.push(&text[last..cut]);
            all.text.push_str(&d.text);
            all.calls.extend(d.calls);
            last = cut;
        }
        let d = parser.finish();
        all.text.push_str(&d.text);
        all.calls.extend(d.calls);
        all
    }

    /// Every single cut and every pair of cuts give the same result as the
    /// whole text, and no piece of markup ever shows in the text.
    fn check_every_cut(make: impl Fn() -> ToolCallParser, text: &str) -> ToolDelta {
        let whole = run(&mut make(), text, &[]);
        let bounds: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for &a in &bounds {
            assert_eq!(run(&mut make(), text, &[a]), whole, "cut at {a}");
            for &b in bounds.iter().filter(|&&b| b > a).step_by(7) {
                assert_eq!(run(&mut make(), text, &[a, b]), whole, "cuts {a},{b}");
            }
        }
        // Token-sized pieces: nothing emitted before it is final.
        let mut parser = make();
        for (i, c) in text.char_indices() {
            let d = parser.push(&text[i..i + c.len_utf8()]);
            assert!(!d.text.contains('<') || whole.text.contains('<'));
        }
        whole
    }

    fn weather_tools() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"},
                "metric": {"type": "boolean"}, "zip": {"type": "string"}}}}}),
        ]
    }

    #[test]
    fn json_calls_with_text_and_parallel_calls() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
                    {\"city\": \"Paris <3 </x>\", \"days\": 2}}\n</tool_call>\n<tool_call>\n\
                    {\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n";
        let out = check_every_cut(
            || ToolCallParser::new(ToolFormat::Json, ParamTypes::new()),
            text,
        );
        assert_eq!(out.text, "Let me check.\n");
        assert_eq!(out.calls.len(), 2);
        assert_eq!(out.calls[0].name, "get_weather");
        let args: Value = serde_json::from_str(&out.calls[0].arguments).expect("json");
        assert_eq!(args, json!({"city": "Paris <3 </x>", "days": 2}));
        assert_eq!(out.calls[1].arguments, "{}");
    }

    #[test]
    fn bad_blocks_and_lookalikes_stay_text() {
        let text = "a <tool_cal> b <tool_call>not json</tool_call> c <tool";
        let out = check_every_cut(
            || ToolCallParser::new(ToolFormat::Json, ParamTypes::new()),
            text,
        );
        assert_eq!(out.text, text.replace("</tool_call>", ""));
        assert!(out.calls.is_empty());
    }

    #[test]
    fn xml_calls_typed_by_schema() {
        let text =
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n\
                    <parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n\
                    <parameter=zip>\n10001\n</parameter>\n</function>\n</tool_call>";
        let types = param_types(&weather_tools());
        let out = check_every_cut(|| ToolCallParser::new(ToolFormat::Xml, types.clone()), text);
        assert_eq!(out.text, "");
        let args: Value = serde_json::from_str(&out.calls[0].arguments).expect("json");
        assert_eq!(
            args,
            json!({"city": "New York", "days": 3, "metric": true, "zip": "10001"})
        );
    }

    #[test]
    fn forced_calls_end_when_complete() {
        let prefix = ToolFormat::Json.forced_prefix(Some("get_weather"));
        let mut p = ToolCallParser::forced(ToolFormat::Json, ParamTypes::new(), &prefix);
        let d = p.push("\"city\": \"Pa");
        assert!(d.calls.is_empty() && !p.done());
        let d = p.push("ris\"}} and more");
        assert!(p.done());
        assert_eq!(d.calls[0].name, "get_weather");
        assert_eq!(d.calls[0].arguments, r#"{"city":"Paris"}"#);
        assert!(d.text.is_empty());

        let prefix = ToolFormat::Xml.forced_prefix(None);
        let mut p = ToolCallParser::forced(ToolFormat::Xml, ParamTypes::new(), &prefix);
        let d = p.push("f>\n<parameter=x>\n[1, 2]\n</parameter>\n</function>\nrest");
        assert!(p.done());
        assert_eq!(d.calls[0].arguments, r#"{"x":[1,2]}"#);
    }

    #[test]
    fn unclosed_block_at_the_end() {
        let mut p = ToolCallParser::new(ToolFormat::Json, ParamTypes::new());
        let out = run(
            &mut p,
            "<tool_call>{\"name\": \"f\", \"arguments\": {}}",
            &[],
        );
        assert_eq!(out.calls.len(), 1);
        let mut p = ToolCallParser::new(ToolFormat::Json, ParamTypes::new());
        let out = run(&mut p, "<tool_call>{\"name\": \"f\", \"argu", &[]);
        assert_eq!(out.text, "<tool_call>{\"name\": \"f\", \"argu");
    }

    /// Renders an assistant turn with tool calls through a real chat
    /// template, and parses the rendering back, cut everywhere.
    fn round_trip(template_path: &str, format: ToolFormat) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = root.join(".hearth/fixtures").join(template_path);
        let source = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} ({e}): run scripts/setup.sh", path.display()));
        let source = match serde_json::from_str::<Value>(&source) {
            Ok(config) => config["chat_template"]
                .as_str()
                .expect("chat_template")
                .to_string(),
            Err(_) => source,
        };
        assert_eq!(ToolFormat::for_template(&source), format);
        let template = hearth_models::chat_template::ChatTemplate::new(source).expect("template");
        let tools = weather_tools();
        let calls = json!([
            {"id": "a", "type": "function", "function": {"name": "get_weather",
                "arguments": {"city": "Paris", "days": 2, "metric": false, "zip": "75001"}}},
            {"id": "b", "type": "function", "function": {"name": "get_weather",
                "arguments": {"city": "Lyon", "days": 1, "metric": true, "zip": "69001"}}}
        ]);
        let messages = vec![
            json!({"role": "user", "content": "Weather?"}),
            json!({"role": "assistant", "content": "Checking both.", "tool_calls": calls}),
        ];
        let options = hearth_models::chat_template::ChatTemplateOptions {
            tools: Some(tools.clone()),
            ..Default::default()
        };
        let rendered = template.render(&messages, &[], &options).expect("render");
        // The assistant's own text: after the last "assistant\n" header.
        let start = rendered.rfind("assistant\n").expect("assistant turn") + "assistant\n".len();
        let turn = &rendered[start..];
        let turn = &turn[..turn.find("<|im_end|>").unwrap_or(turn.len())];
        let turn = turn.split("</think>").last().unwrap_or(turn);
        let types = param_types(&tools);
        let out = check_every_cut(|| ToolCallParser::new(format, types.clone()), turn);
        assert_eq!(out.text.trim(), "Checking both.", "{turn:?}");
        assert_eq!(out.calls.len(), 2, "{turn:?}");
        for (call, expected) in out.calls.iter().zip(calls.as_array().expect("calls")) {
            assert_eq!(call.name, "get_weather");
            let args: Value = serde_json::from_str(&call.arguments).expect("json");
            assert_eq!(args, expected["function"]["arguments"], "{turn:?}");
        }
    }

    #[test]
    fn qwen3_template_round_trip() {
        round_trip("qwen3-tokenizer/tokenizer_config.json", ToolFormat::Json);
    }

    #[test]
    fn qwen35_template_round_trip() {
        round_trip("llama.cpp/templates/Qwen3.5-4B.jinja", ToolFormat::Xml);
    }

    #[test]
    fn qwen3_coder_template_round_trip() {
        round_trip("llama.cpp/templates/Qwen3-Coder.jinja", ToolFormat::Xml);
    }
}
