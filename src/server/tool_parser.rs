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
//! anywhere) and gives back the plain text, the completed calls (for whole
//! responses) and [`CallPiece`]s (for streams). Text is released as soon as
//! it cannot be the start of `<tool_call>`, so no markup ever reaches
//! `content`. The result depends only on the whole text, never on how it
//! was cut (the tests feed every cut of real template renderings). A block
//! that does not parse is given back as text, so nothing the model wrote is
//! lost. Whitespace between calls and after the last one is dropped.
//!
//! Streaming arguments (JSON format): once a block reads `{"name": "f",
//! "arguments": {` the call is committed: a piece with its name goes out,
//! then the arguments object's text as it arrives (never past its closing
//! brace, so none of the surrounding markup), and the completed call's
//! `arguments` is exactly that text as the model wrote it, so the streamed
//! pieces always add up to it. A committed call stays a call even if its
//! arguments are cut short (`max_tokens`) or malformed, as in OpenAI's API.
//! Other blocks (XML, keys in another order, arguments as a string) go out
//! as one piece when they close.
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

/// A streamed piece of call `index` (numbered from 0 per choice): the
/// first piece of a call has its `name`; the `arguments` of all its pieces
/// add up to the completed call's.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPiece {
    pub index: usize,
    pub name: Option<String>,
    pub arguments: String,
}

/// What one piece of text gave.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ToolDelta {
    pub text: String,
    /// Calls completed by this piece.
    pub calls: Vec<ToolCall>,
    /// Call pieces, consecutive pieces of one call merged.
    pub pieces: Vec<CallPiece>,
}

impl ToolDelta {
    fn piece(&mut self, index: usize, name: Option<String>, arguments: &str) {
        match self.pieces.last_mut() {
            Some(last) if last.index == index && name.is_none() => {
                last.arguments.push_str(arguments)
            }
            _ => self.pieces.push(CallPiece {
                index,
                name,
                arguments: arguments.to_string(),
            }),
        }
    }

    #[cfg(test)]
    fn absorb(&mut self, other: ToolDelta) {
        self.text.push_str(&other.text);
        self.calls.extend(other.calls);
        for piece in other.pieces {
            self.piece(piece.index, piece.name, &piece.arguments);
        }
    }
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
    /// The current block's call, once committed (JSON header read).
    streaming: Option<ArgsStream>,
    /// The current block does not start with a JSON call header: it is
    /// parsed whole when it closes.
    whole_block: bool,
    /// Pieces made while reading a forced prefix, sent with the next push.
    pending: ToolDelta,
}

/// A committed call whose arguments are being streamed; offsets are into
/// the block's text (`held`).
#[derive(Debug, Clone)]
struct ArgsStream {
    name: String,
    /// Where the arguments object starts (its `{`).
    start: usize,
    /// Bytes of the arguments sent so far, from `start`.
    sent: usize,
    scan: JsonScan,
    /// Past the arguments' closing brace, once seen.
    end: Option<usize>,
    /// Markup (`<` outside a string) where the arguments should go on: no
    /// more is sent; the block ends at `</tool_call>`.
    broken: bool,
}

/// Brace depth and string state of a JSON text read so far.
#[derive(Debug, Clone, Copy, Default)]
struct JsonScan {
    depth: usize,
    in_string: bool,
    escaped: bool,
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
            streaming: None,
            whole_block: false,
            pending: ToolDelta::default(),
        }
    }

    /// A parser whose input continues `prefix`, which the server put at the
    /// end of the prompt ([`ToolFormat::forced_prefix`]).
    pub fn forced(format: ToolFormat, types: ParamTypes, prefix: &str) -> Self {
        let mut parser = Self::new(format, types);
        parser.forced = true;
        let mut first = parser.push(prefix);
        // The prefix is the server's, not the model's: only its call pieces
        // (a forced name) are passed on.
        first.text.clear();
        parser.pending = first;
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
        let mut out = std::mem::take(&mut self.pending);
        if self.done {
            return out;
        }
        self.held.push_str(piece);
        loop {
            if self.inside {
                if self.format == ToolFormat::Json && !self.whole_block && self.streaming.is_none()
                {
                    match json_call_header(&self.held) {
                        Header::Partial => return out,
                        Header::NoMatch => self.whole_block = true,
                        Header::Complete { name, args_start } => {
                            out.piece(self.calls_seen, Some(name.clone()), "");
                            self.streaming = Some(ArgsStream {
                                name,
                                start: args_start,
                                sent: 0,
                                scan: JsonScan::default(),
                                end: None,
                                broken: false,
                            });
                        }
                    }
                }
                if self.streaming.is_some() {
                    if self.stream_arguments(&mut out) {
                        if self.end_if_forced() {
                            return out;
                        }
                        continue;
                    }
                    return out;
                }
                if let Some(end) = self.block_end() {
                    let block: String = self.held.drain(..end.consumed).collect();
                    self.inside = false;
                    self.close_block(&block[..end.body], &mut out);
                    if self.end_if_forced() {
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
                    self.whole_block = false;
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
        if self.streaming.is_some() {
            // Cut short (every byte was already scanned by `push`): the call
            // is what was sent, the rest of the block is dropped.
            self.finish_streamed_call(&mut out);
            self.held.clear();
        }
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
                out.piece(self.calls_seen, Some(call.name.clone()), &call.arguments);
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

impl ToolCallParser {
    /// After a complete call: a forced call (`tool_choice` required or
    /// named) is the whole answer, so the rest of the text is dropped.
    /// Returns whether it was.
    fn end_if_forced(&mut self) -> bool {
        if self.forced {
            self.done = true;
            self.held.clear();
        }
        self.forced
    }

    /// Sends the arguments text that arrived; true once the block is over
    /// (the call completed and the block's text consumed).
    fn stream_arguments(&mut self, out: &mut ToolDelta) -> bool {
        let Some(stream) = self.streaming.as_mut() else {
            return false;
        };
        if stream.end.is_none() && !stream.broken {
            let from = stream.start + stream.sent;
            let mut upto = from;
            for (i, c) in self.held[from..].char_indices() {
                let at = from + i;
                match stream.scan.step(c) {
                    Step::Markup => {
                        stream.broken = true;
                        break;
                    }
                    Step::Closed => {
                        upto = at + c.len_utf8();
                        stream.end = Some(upto);
                        break;
                    }
                    Step::Inside => upto = at + c.len_utf8(),
                }
            }
            if upto > from {
                out.piece(self.calls_seen, None, &self.held[from..upto]);
                stream.sent = upto - stream.start;
            }
        }
        // Where the block ends: the outer object's close (forced), or
        // `</tool_call>` after the arguments.
        let search_from = stream.start + stream.sent;
        let consumed = if stream.end.is_some() && self.forced {
            json_object_end(&self.held)
        } else if stream.end.is_some() || stream.broken {
            self.held[search_from..]
                .find(CLOSE)
                .map(|at| search_from + at + CLOSE.len())
        } else {
            None
        };
        let Some(consumed) = consumed else {
            return false;
        };
        self.finish_streamed_call(out);
        self.held.drain(..consumed);
        true
    }

    /// Completes the committed call with the arguments sent so far (the
    /// block's text is still in `held`).
    fn finish_streamed_call(&mut self, out: &mut ToolDelta) {
        let Some(stream) = self.streaming.take() else {
            return;
        };
        let arguments = self.held[stream.start..stream.start + stream.sent].to_string();
        self.inside = false;
        self.calls_seen += 1;
        self.pending_space.clear();
        out.calls.push(ToolCall {
            name: stream.name,
            arguments,
        });
    }
}

/// What one character did to a [`JsonScan`].
enum Step {
    Inside,
    /// The outermost object or array closed.
    Closed,
    /// `<` outside a string: markup, not JSON.
    Markup,
}

impl JsonScan {
    fn step(&mut self, c: char) -> Step {
        if self.in_string {
            match (self.escaped, c) {
                (true, _) => self.escaped = false,
                (false, '\\') => self.escaped = true,
                (false, '"') => self.in_string = false,
                _ => {}
            }
            return Step::Inside;
        }
        match c {
            '"' => self.in_string = true,
            '{' | '[' => self.depth += 1,
            '}' | ']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    return Step::Closed;
                }
            }
            '<' => return Step::Markup,
            _ => {}
        }
        Step::Inside
    }
}

/// How far a block's text matches `{"name": "F", "arguments": {`.
enum Header {
    /// Could still become one.
    Partial,
    /// Cannot.
    NoMatch,
    /// Complete; the arguments object starts at `args_start`.
    Complete { name: String, args_start: usize },
}

/// Reads the head of a JSON call block (whitespace anywhere JSON allows
/// it; `parameters` is accepted for `arguments`).
fn json_call_header(text: &str) -> Header {
    let mut at = 0;
    let skip_ws = |at: &mut usize| {
        *at += text[*at..].len() - text[*at..].trim_start().len();
    };
    // Each literal must match fully or be cut by the end of the text.
    let literal = |at: &mut usize, lit: &str| -> Option<bool> {
        let rest = &text[*at..];
        if rest.starts_with(lit) {
            *at += lit.len();
            Some(true)
        } else if lit.starts_with(rest) {
            None
        } else {
            Some(false)
        }
    };
    macro_rules! expect {
        ($lit:expr) => {
            skip_ws(&mut at);
            match literal(&mut at, $lit) {
                None => return Header::Partial,
                Some(false) => return Header::NoMatch,
                Some(true) => {}
            }
        };
    }
    expect!("{");
    expect!("\"name\"");
    expect!(":");
    skip_ws(&mut at);
    // The name: a complete JSON string.
    let rest = &text[at..];
    if rest.is_empty() {
        return Header::Partial;
    }
    if !rest.starts_with('"') {
        return Header::NoMatch;
    }
    let mut scan = JsonScan {
        in_string: true,
        ..JsonScan::default()
    };
    let mut name_end = None;
    for (i, c) in rest.char_indices().skip(1) {
        scan.step(c);
        if !scan.in_string {
            name_end = Some(i + 1);
            break;
        }
    }
    let Some(name_end) = name_end else {
        return Header::Partial;
    };
    let Ok(name) = serde_json::from_str::<String>(&rest[..name_end]) else {
        return Header::NoMatch;
    };
    at += name_end;
    expect!(",");
    skip_ws(&mut at);
    let rest = &text[at..];
    let key = ["\"arguments\"", "\"parameters\""]
        .into_iter()
        .find(|k| rest.starts_with(k) || k.starts_with(rest));
    match key {
        None => return Header::NoMatch,
        Some(k) if rest.len() < k.len() => return Header::Partial,
        Some(k) => at += k.len(),
    }
    expect!(":");
    skip_ws(&mut at);
    match text[at..].chars().next() {
        None => Header::Partial,
        Some('{') => Header::Complete {
            name,
            args_start: at,
        },
        Some(_) => Header::NoMatch,
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

    /// Feeds `text` cut at `cuts` and returns all text and calls (pieces
    /// checked against the calls, then left out: they depend on the cuts).
    fn run(parser: &mut ToolCallParser, text: &str, cuts: &[usize]) -> ToolDelta {
        let mut all = ToolDelta::default();
        let mut last = 0;
        for &cut in cuts.iter().chain(std::iter::once(&text.len())) {
            all.absorb(parser.push(&text[last..cut]));
            last = cut;
        }
        all.absorb(parser.finish());
        check_pieces(&all);
        all.pieces.clear();
        all
    }

    /// The streamed pieces of each call: its name first, then arguments
    /// that add up to the completed call's, and no markup.
    fn check_pieces(all: &ToolDelta) {
        for (index, call) in all.calls.iter().enumerate() {
            let pieces: Vec<&CallPiece> = all.pieces.iter().filter(|p| p.index == index).collect();
            assert_eq!(
                pieces.len(),
                1,
                "merged pieces of call {index}: {:?}",
                all.pieces
            );
            assert_eq!(pieces[0].name.as_deref(), Some(call.name.as_str()));
            assert_eq!(pieces[0].arguments, call.arguments, "call {index}");
        }
        assert!(
            all.pieces.iter().all(|p| p.index < all.calls.len()),
            "{all:?}"
        );
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
        assert_eq!(d.calls[0].arguments, r#"{"city": "Paris"}"#);
        assert!(d.text.is_empty());

        let prefix = ToolFormat::Xml.forced_prefix(None);
        let mut p = ToolCallParser::forced(ToolFormat::Xml, ParamTypes::new(), &prefix);
        let d = p.push("f>\n<parameter=x>\n[1, 2]\n</parameter>\n</function>\nrest");
        assert!(p.done());
        assert_eq!(d.calls[0].arguments, r#"{"x":[1,2]}"#);
    }

    /// Token-sized pieces of a JSON call: the name goes out as soon as the
    /// header is read, the arguments while they are written, and the
    /// pieces add up to the call.
    #[test]
    fn json_arguments_stream_as_they_are_written() {
        let text = "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
                    {\"city\": \"Paris </tool_call> {x}\", \"days\": [1, {\"a\": 2}]}}\n\
                    </tool_call>";
        let mut parser = ToolCallParser::new(ToolFormat::Json, ParamTypes::new());
        let mut all = ToolDelta::default();
        let mut before_close = Vec::new();
        for (i, c) in text.char_indices() {
            let d = parser.push(&text[i..i + c.len_utf8()]);
            if d.calls.is_empty() {
                before_close.extend(d.pieces.iter().map(|p| p.arguments.clone()));
            }
            all.absorb(d);
        }
        all.absorb(parser.finish());
        check_pieces(&all);
        assert_eq!(all.text, "Sure.");
        let args = &all.calls[0].arguments;
        assert_eq!(
            args,
            r#"{"city": "Paris </tool_call> {x}", "days": [1, {"a": 2}]}"#
        );
        // All of it went out before the block closed, piece by piece.
        assert_eq!(before_close.concat(), *args);
        assert!(before_close.iter().filter(|p| !p.is_empty()).count() > 10);
    }

    /// A real model's forced call (the prefix in the prompt), every cut.
    #[test]
    fn forced_json_call_pieces_under_every_cut() {
        let prefix = ToolFormat::Json.forced_prefix(Some("get_weather"));
        let make = || ToolCallParser::forced(ToolFormat::Json, ParamTypes::new(), &prefix);
        let out = check_every_cut(make, "\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>");
        assert_eq!(out.calls.len(), 1);
        assert_eq!(out.calls[0].arguments, r#"{"city": "Oslo", "days": 3}"#);
        assert_eq!(out.text, "");
        // The name is known from the prefix: it goes out with the first push.
        let mut parser = make();
        let first = parser.push("\"");
        assert_eq!(first.pieces.len(), 1, "{first:?}");
        assert_eq!(first.pieces[0].name.as_deref(), Some("get_weather"));
        assert_eq!(first.pieces[0].arguments, "{\"");
    }

    #[test]
    fn committed_calls_cut_short_or_malformed() {
        // max_tokens in the middle of the arguments: the call is what was sent.
        let out = check_every_cut(
            || ToolCallParser::new(ToolFormat::Json, ParamTypes::new()),
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1, \"b",
        );
        assert_eq!(out.calls[0].arguments, r#"{"a": 1, "b"#);
        assert_eq!(out.text, "");
        // Markup where the arguments go on: nothing past it is sent.
        let out = check_every_cut(
            || ToolCallParser::new(ToolFormat::Json, ParamTypes::new()),
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": <b>}}</tool_call> done",
        );
        assert_eq!(out.calls[0].arguments, r#"{"a": "#);
        assert_eq!(out.text, " done");
        // Keys in another order, arguments as a string: parsed whole.
        let out = check_every_cut(
            || ToolCallParser::new(ToolFormat::Json, ParamTypes::new()),
            "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"}</tool_call>\
             <tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": 2}\"}</tool_call>",
        );
        assert_eq!(out.calls[0].arguments, r#"{"a":1}"#);
        assert_eq!(out.calls[1].arguments, r#"{"b":2}"#);
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
