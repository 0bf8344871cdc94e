//! Rendering a model's chat template the way Hugging Face `transformers` does.
//!
//! A chat template is a Jinja program shipped with the tokenizer (`tokenizer_config.json`,
//! `chat_template.jinja`, or the GGUF key `tokenizer.chat_template`) that turns a list of
//! OpenAI-style messages into the prompt text the model was trained on. The model only behaves
//! if the prompt is exactly right, so [`ChatTemplate::render`] aims to be byte-identical to
//! `transformers`' `apply_chat_template(..., tokenize=False)`:
//!
//! - The environment matches transformers': `trim_blocks` and `lstrip_blocks` on, loop controls
//!   (`break`/`continue`), no auto-escaping, a single trailing newline of the template dropped.
//! - The same globals: `messages`, `tools` (`none` when absent), `documents` (`none`),
//!   `add_generation_prompt`, the named special tokens (`bos_token`, `eos_token`, ...),
//!   `enable_thinking` only when the caller set it, the caller's extra variables,
//!   `raise_exception(msg)`, `strftime_now(fmt)`, `namespace(...)` and `dict(...)`.
//! - The same input clean-up: keys of a message whose value is `null` are dropped, and a message's
//!   reasoning given as `reasoning_content`, `thinking` or `reasoning` is visible under both
//!   `reasoning_content` and `thinking` (transformers 5's aliasing).
//! - Python semantics where Jinja2 inherits them: `tojson` is Python's
//!   `json.dumps(x, ensure_ascii=False)` (separators `", "`/`": "`, `indent=`, `sort_keys=`),
//!   printed values are Python's `str()` (`None`, `True`, `['a', 1.0]`), string/dict methods
//!   (`.startswith`, `.split`, `.strip`, `.items()` ...) come from `minijinja-contrib`'s pycompat,
//!   and `is sequence` is true for strings, lists and dicts as in Python.
//! - `{% generation %}` blocks (transformers' assistant-mask extension) render their body.
//!
//! Requires serde_json's `preserve_order` and minijinja's `preserve_order` features so that JSON
//! objects (tool schemas, tool-call arguments) keep the order the client sent them in.
//!
//! tests/tokenizer.rs checks all this against transformers' own Jinja2 sandbox, including ~70 real
//! models' templates. Known differences, none affecting those templates' successful renders:
//! Python tuples (`dict.items()`, `dictsort`) print as lists; a few rarely used methods and
//! filters (`str.center`, `str.zfill`, `str.swapcase`, `wordcount`) are missing; and where
//! Jinja2 fails (looping over `None`, `tojson` of a generator) minijinja renders. Like
//! transformers' sandbox, templates cannot mutate lists or dicts.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use minijinja::value::{from_args, Kwargs, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State, Value};
use serde_json::Value as Json;

/// The name the compiled template is registered under inside its environment.
const TEMPLATE_NAME: &str = "chat_template";

/// The fields transformers treats as a message's reasoning, the standard one first.
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// Template variables set by [`ChatTemplate::render`] itself, which extra variables may not replace.
const RESERVED_VARIABLES: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

/// Options for rendering a conversation, mirroring `apply_chat_template`'s keyword arguments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatTemplateOptions {
    /// Append the header that starts the assistant's reply.
    pub add_generation_prompt: bool,
    /// Tool (function) JSON schemas; `None` renders `tools` as `none`.
    pub tools: Option<Vec<Json>>,
    /// Qwen3-style thinking switch; passed to the template only when set.
    pub enable_thinking: Option<bool>,
    /// Further template variables (`reasoning_effort`, `builtin_tools`, ...).
    pub extra: serde_json::Map<String, Json>,
}

/// A chat template could not be compiled or rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template is not valid Jinja (or uses syntax minijinja lacks).
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    /// The template called `raise_exception(message)`, usually to reject the conversation.
    #[error("chat template rejected the conversation: {0}")]
    Raised(String),
    /// Rendering failed inside the template.
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// The messages or options cannot be passed to a template.
    #[error("invalid chat template input: {0}")]
    InvalidInput(String),
}

/// A compiled chat template.
#[derive(Clone)]
pub struct ChatTemplate {
    source: Arc<str>,
    env: Environment<'static>,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .finish_non_exhaustive()
    }
}

/// The error `raise_exception` produces, recognised again after rendering.
#[derive(Debug)]
struct RaisedByTemplate(String);

impl fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

impl ChatTemplate {
    /// Compiles `source`.
    pub fn new(source: impl Into<String>) -> Result<Self, ChatTemplateError> {
        let source: Arc<str> = Arc::from(source.into());
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(python_method);
        env.set_formatter(|out, _state, value| {
            let mut text = String::new();
            python_str(value, &mut text)?;
            out.write_str(&text).map_err(Error::from)
        });
        env.add_filter("tojson", tojson);
        env.add_filter("string", |value: Value| -> Result<String, Error> {
            let mut text = String::new();
            python_str(&value, &mut text)?;
            Ok(text)
        });
        env.add_test("sequence", |value: Value| {
            matches!(
                value.kind(),
                ValueKind::String | ValueKind::Seq | ValueKind::Map
            )
        });
        // minijinja counts `none` as iterable; Python does not (`tools is iterable` guards).
        env.add_test("iterable", |value: Value| {
            matches!(
                value.kind(),
                ValueKind::String | ValueKind::Seq | ValueKind::Map | ValueKind::Iterable
            )
        });
        env.add_function(
            "raise_exception",
            |message: String| -> Result<Value, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, message.clone())
                    .with_source(RaisedByTemplate(message)))
            },
        );
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, rewrite_generation_tags(&source))
            .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        Ok(ChatTemplate { source, env })
    }

    /// The template text as it was given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` (OpenAI-style JSON objects).
    ///
    /// `special_tokens` are the named special tokens the tokenizer defines, as
    /// `("bos_token", "<s>")` pairs; they are template variables unless `options.extra` sets the
    /// same name.
    pub fn render(
        &self,
        messages: &[Json],
        special_tokens: &[(&str, &str)],
        options: &ChatTemplateOptions,
    ) -> Result<String, ChatTemplateError> {
        if messages.is_empty() {
            return Err(ChatTemplateError::InvalidInput(
                "cannot apply a chat template to an empty conversation".into(),
            ));
        }
        let messages = messages
            .iter()
            .enumerate()
            .map(|(index, message)| prepare_message(index, message))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(name) = options
            .extra
            .keys()
            .find(|key| RESERVED_VARIABLES.contains(&key.as_str()))
        {
            return Err(ChatTemplateError::InvalidInput(format!(
                "extra template variable {name:?} would replace one the renderer sets"
            )));
        }

        let mut context: Vec<(String, Value)> = Vec::new();
        for (name, token) in special_tokens {
            context.push(((*name).to_owned(), Value::from(*token)));
        }
        for (name, value) in &options.extra {
            context.push((name.clone(), Value::from_serialize(value)));
        }
        if let Some(enable_thinking) = options.enable_thinking {
            context.push(("enable_thinking".into(), Value::from(enable_thinking)));
        }
        context.push(("messages".into(), Value::from_serialize(&messages)));
        context.push((
            "tools".into(),
            options
                .tools
                .as_ref()
                .map_or(Value::from(()), Value::from_serialize),
        ));
        context.push(("documents".into(), Value::from(())));
        context.push((
            "add_generation_prompt".into(),
            Value::from(options.add_generation_prompt),
        ));
        // Later entries win, so extra variables override special tokens as in transformers.
        let context: Value = context.into_iter().collect();

        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        template.render(context).map_err(|error| {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
            while let Some(current) = source {
                if let Some(raised) = current.downcast_ref::<RaisedByTemplate>() {
                    return ChatTemplateError::Raised(raised.0.clone());
                }
                source = current.source();
            }
            ChatTemplateError::Render(describe(&error))
        })
    }
}

/// Python methods on template values (`"text".startswith(...)`, `dict.items()`, ...): a few
/// string methods whose Python semantics pycompat does not follow exactly are handled here, the
/// rest by `minijinja_contrib::pycompat`.
fn python_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(text) = value.as_str() {
        let predicate = |test: fn(char) -> bool| -> Result<Value, Error> {
            let () = from_args(args)?;
            Ok(Value::from(!text.is_empty() && text.chars().all(test)))
        };
        // Python: True when every cased character has the case and there is at least one.
        let cased = |upper: bool| -> Result<Value, Error> {
            let () = from_args(args)?;
            let mut any_cased = false;
            for c in text.chars() {
                if c.is_uppercase() || c.is_lowercase() {
                    if c.is_uppercase() != upper {
                        return Ok(Value::from(false));
                    }
                    any_cased = true;
                }
            }
            Ok(Value::from(any_cased))
        };
        // Python's offsets count characters, not bytes.
        let char_offset = |found: Option<usize>| -> Value {
            Value::from(found.map_or(-1, |byte| text[..byte].chars().count() as i64))
        };
        match method {
            "isupper" => return cased(true),
            "islower" => return cased(false),
            "isspace" => return predicate(char::is_whitespace),
            "isdigit" | "isnumeric" => return predicate(char::is_numeric),
            "isdecimal" => return predicate(|c| c.is_ascii_digit()),
            "isalpha" => return predicate(char::is_alphabetic),
            "isalnum" => return predicate(char::is_alphanumeric),
            "find" => {
                let (needle,): (&str,) = from_args(args)?;
                return Ok(char_offset(text.find(needle)));
            }
            "rfind" => {
                let (needle,): (&str,) = from_args(args)?;
                return Ok(char_offset(text.rfind(needle)));
            }
            "removeprefix" => {
                let (prefix,): (&str,) = from_args(args)?;
                return Ok(Value::from(text.strip_prefix(prefix).unwrap_or(text)));
            }
            "removesuffix" => {
                let (suffix,): (&str,) = from_args(args)?;
                return Ok(Value::from(text.strip_suffix(suffix).unwrap_or(text)));
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// A minijinja error as one line: its kind, detail and template line.
fn describe(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        let _ = write!(text, ": {inner}");
        source = inner.source();
    }
    text
}

/// What transformers does to each message before the template sees it: null-valued keys are
/// dropped and reasoning fields are aliased.
fn prepare_message(index: usize, message: &Json) -> Result<Json, ChatTemplateError> {
    let Json::Object(fields) = message else {
        return Err(ChatTemplateError::InvalidInput(format!(
            "message {index} is not a JSON object"
        )));
    };
    let fields: serde_json::Map<String, Json> = fields
        .iter()
        .filter(|(_, value)| !value.is_null())
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let reasoning = REASONING_FIELDS
        .iter()
        .find_map(|field| fields.get(*field))
        .cloned();
    let Some(reasoning) = reasoning else {
        return Ok(Json::Object(fields));
    };
    // Python: {"thinking": reasoning, **message, "reasoning_content": reasoning}
    let mut aliased = serde_json::Map::with_capacity(fields.len() + 2);
    aliased.insert("thinking".into(), reasoning.clone());
    for (key, value) in fields {
        aliased.insert(key, value);
    }
    aliased.insert("reasoning_content".into(), reasoning);
    Ok(Json::Object(aliased))
}

/// Replaces `{% generation %}` / `{% endgeneration %}` (a transformers-only Jinja extension that
/// marks assistant text) with an always-true `if` block, keeping whitespace-control markers so the
/// output is unchanged.
fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            break;
        };
        let inner = &tag[2..end];
        let (open_marker, body) = match inner.chars().next() {
            Some(c @ ('-' | '+')) => (Some(c), &inner[1..]),
            _ => (None, inner),
        };
        let (body, close_marker) = match body.chars().last() {
            Some(c @ ('-' | '+')) => (&body[..body.len() - 1], Some(c)),
            _ => (body, None),
        };
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(statement) => {
                out.push_str("{%");
                out.extend(open_marker);
                out.push(' ');
                out.push_str(statement);
                out.push(' ');
                out.extend(close_marker);
                out.push_str("%}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// `strftime_now(format)`: the local time formatted like Python's `datetime.now().strftime`.
fn strftime_now(format: String) -> Result<String, Error> {
    use chrono::format::{Item, StrftimeItems};
    let items: Vec<Item<'_>> = StrftimeItems::new(&format).collect();
    if items.iter().any(|item| matches!(item, Item::Error)) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: unsupported format {format:?}"),
        ));
    }
    let mut text = String::new();
    write!(
        text,
        "{}",
        chrono::Local::now().format_with_items(items.into_iter())
    )
    .map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: cannot format {format:?}"),
        )
    })?;
    Ok(text)
}

/// Python's `str(value)` for a template value.
fn python_str(value: &Value, out: &mut String) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::String => {
            out.push_str(value.as_str().unwrap_or_default());
            Ok(())
        }
        _ => python_repr(value, out),
    }
}

/// Python's `repr(value)`.
fn python_repr(value: &Value, out: &mut String) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::None => {
            out.push_str("None");
            Ok(())
        }
        ValueKind::Bool => {
            out.push_str(if value.is_true() { "True" } else { "False" });
            Ok(())
        }
        ValueKind::Number => {
            python_number(value, out);
            Ok(())
        }
        ValueKind::String => {
            python_repr_str(value.as_str().unwrap_or_default(), out);
            Ok(())
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (index, item) in value.try_iter()?.enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                python_repr(&item, out)?;
            }
            out.push(']');
            Ok(())
        }
        ValueKind::Map => {
            out.push('{');
            for (index, key) in value.try_iter()?.enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                python_repr(&key, out)?;
                out.push_str(": ");
                python_repr(&value.get_item(&key)?, out)?;
            }
            out.push('}');
            Ok(())
        }
        _ => {
            let _ = write!(out, "{value}");
            Ok(())
        }
    }
}

/// A number as Python prints it: integers plainly, floats like `float.__repr__`.
fn python_number(value: &Value, out: &mut String) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
    } else {
        match f64::try_from(value.clone()) {
            Ok(number) => python_float(number, out, "inf", "nan"),
            Err(_) => {
                let _ = write!(out, "{value}");
            }
        }
    }
}

/// `float.__repr__`: the shortest round-tripping digits, positional for exponents in
/// `-4..16` (always with a fractional part), otherwise `d.ddde+XX`.
fn python_float(number: f64, out: &mut String, infinity: &str, nan: &str) {
    if number.is_nan() {
        out.push_str(nan);
        return;
    }
    if number.is_infinite() {
        if number < 0.0 {
            out.push('-');
        }
        out.push_str(infinity);
        return;
    }
    // `{:e}` gives the shortest round-tripping digits: "-1.2345e-7", "1e16", "0e0".
    let scientific = format!("{number:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    out.push_str(sign);
    if (-4..16).contains(&exponent) {
        if exponent < 0 {
            out.push_str("0.");
            for _ in 0..(-exponent - 1) {
                out.push('0');
            }
            out.push_str(&digits);
        } else {
            let point = exponent as usize + 1;
            if digits.len() <= point {
                out.push_str(&digits);
                for _ in digits.len()..point {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                out.push_str(&digits[..point]);
                out.push('.');
                out.push_str(&digits[point..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.abs()
        );
    }
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`, with Python's escapes.
fn python_repr_str(text: &str, out: &mut String) {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !is_python_printable(c) => {
                let code = u32::from(c);
                let _ = if code <= 0xff {
                    write!(out, "\\x{code:02x}")
                } else if code <= 0xffff {
                    write!(out, "\\u{code:04x}")
                } else {
                    write!(out, "\\U{code:08x}")
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// An approximation of Python's `str.isprintable` for one character: false for control and
/// format characters, separators other than the ASCII space, and private-use code points.
fn is_python_printable(c: char) -> bool {
    let code = u32::from(c);
    !(c.is_control()
        || matches!(
            code,
            0xa0 | 0xad
                | 0x600..=0x605
                | 0x61c
                | 0x6dd
                | 0x70f
                | 0x1680
                | 0x180e
                | 0x2000..=0x200f
                | 0x2028..=0x202f
                | 0x205f..=0x2064
                | 0x2066..=0x206f
                | 0x3000
                | 0xe000..=0xf8ff
                | 0xfeff
                | 0xfff9..=0xfffb
                | 0xf0000..
        ))
}

/// The `tojson` filter as transformers defines it:
/// `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: Value, kwargs: Kwargs) -> Result<String, Error> {
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;

    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(text) => text.to_owned(),
            None => {
                let width = i64::try_from(v.clone()).map_err(|_| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        format!("tojson: indent must be an integer or a string, not {v}"),
                    )
                })?;
                " ".repeat(usize::try_from(width.clamp(0, 64)).unwrap_or(0))
            }
        }),
    };
    let (item_separator, key_separator) = match separators {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [item, key] => match (item.as_str(), key.as_str()) {
                    (Some(item), Some(key)) => (item.to_owned(), key.to_owned()),
                    _ => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            "tojson: separators must be two strings",
                        ))
                    }
                },
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair",
                    ))
                }
            }
        }
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let writer = JsonWriter {
        ensure_ascii: ensure_ascii.unwrap_or(false),
        indent,
        item_separator,
        key_separator,
        sort_keys: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    writer.write(&value, 0, &mut out)?;
    Ok(out)
}

/// Python's `json.JSONEncoder` over template values.
struct JsonWriter {
    ensure_ascii: bool,
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
    sort_keys: bool,
}

impl JsonWriter {
    fn newline(&self, level: usize, out: &mut String) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(indent);
            }
        }
    }

    fn write(&self, value: &Value, level: usize, out: &mut String) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => {
                if value.is_integer() {
                    let _ = write!(out, "{value}");
                } else {
                    let number = f64::try_from(value.clone())?;
                    python_float(number, out, "Infinity", "NaN");
                }
            }
            ValueKind::String => self.write_str(value.as_str().unwrap_or_default(), out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push_str(&self.item_separator);
                    }
                    self.newline(level + 1, out);
                    self.write(item, level + 1, out)?;
                }
                self.newline(level, out);
                out.push(']');
            }
            ValueKind::Map => {
                let mut entries: Vec<(String, Value)> = Vec::new();
                for key in value.try_iter()? {
                    let item = value.get_item(&key)?;
                    entries.push((json_key(&key)?, item));
                }
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                if entries.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                out.push('{');
                for (index, (key, item)) in entries.iter().enumerate() {
                    if index > 0 {
                        out.push_str(&self.item_separator);
                    }
                    self.newline(level + 1, out);
                    self.write_str(key, out);
                    out.push_str(&self.key_separator);
                    self.write(item, level + 1, out)?;
                }
                self.newline(level, out);
                out.push('}');
            }
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: a value of kind {other} is not JSON serializable"),
                ))
            }
        }
        Ok(())
    }

    fn write_str(&self, text: &str, out: &mut String) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if u32::from(c) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c if self.ensure_ascii && !(' '..='~').contains(&c) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A map key as Python's json module writes it (keys that are not strings are converted).
fn json_key(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
        ValueKind::None => "null".to_owned(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.to_owned(),
        ValueKind::Number => {
            let mut text = String::new();
            if key.is_integer() {
                let _ = write!(text, "{key}");
            } else {
                python_float(f64::try_from(key.clone())?, &mut text, "Infinity", "NaN");
            }
            text
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: keys must be strings, not {other}"),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(template: &str, messages: Json, options: &ChatTemplateOptions) -> String {
        let messages = messages.as_array().cloned().unwrap_or_default();
        ChatTemplate::new(template)
            .expect("compiles")
            .render(&messages, &[("bos_token", "<s>")], options)
            .expect("renders")
    }

    fn one_user() -> Json {
        json!([{"role": "user", "content": "hi"}])
    }

    #[test]
    fn prints_values_like_python() {
        let out = render(
            "{{ none }}|{{ true }}|{{ [1, 'a', none, 1.5, {'k': false}] }}|{{ 1.0 }}|{{ 1e16 }}|{{ 0.00001 }}|{{ 'x' }}",
            one_user(),
            &ChatTemplateOptions::default(),
        );
        assert_eq!(
            out,
            "None|True|[1, 'a', None, 1.5, {'k': False}]|1.0|1e+16|1e-05|x"
        );
    }

    #[test]
    fn python_float_repr() {
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.5, "1.5"),
            (100.0, "100.0"),
            (123456789.125, "123456789.125"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.25e17, "1.25e+17"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (1.5e-7, "1.5e-07"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (number, expected) in cases {
            let mut out = String::new();
            python_float(number, &mut out, "inf", "nan");
            assert_eq!(out, expected, "{number:?}");
        }
    }

    #[test]
    fn python_string_repr() {
        let mut out = String::new();
        python_repr_str("it's \"q\"\n\u{7}é\u{200b}", &mut out);
        assert_eq!(out, "'it\\'s \"q\"\\n\\x07é\\u200b'");
        let mut out = String::new();
        python_repr_str("it's", &mut out);
        assert_eq!(out, "\"it's\"");
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let options = ChatTemplateOptions {
            tools: Some(vec![json!({
                "type": "function",
                "function": {"name": "f", "z": 1, "a": [1.0, 2, "é<>&\u{1}\"\\"], "e": {}, "l": []}
            })]),
            ..Default::default()
        };
        let out = render("{{ tools[0] | tojson }}", one_user(), &options);
        assert_eq!(
            out,
            r#"{"type": "function", "function": {"name": "f", "z": 1, "a": [1.0, 2, "é<>&\u0001\"\\"], "e": {}, "l": []}}"#
        );
        let out = render(
            "{{ tools[0].function | tojson(indent=2, sort_keys=true) }}",
            one_user(),
            &options,
        );
        assert_eq!(
            out,
            "{\n  \"a\": [\n    1.0,\n    2,\n    \"é<>&\\u0001\\\"\\\\\"\n  ],\n  \"e\": {},\n  \"l\": [],\n  \"name\": \"f\",\n  \"z\": 1\n}"
        );
        let out = render(
            "{{ {'a': 'é😀'} | tojson(ensure_ascii=true, separators=(',', ':')) }}",
            one_user(),
            &options,
        );
        assert_eq!(out, r#"{"a":"\u00e9\ud83d\ude00"}"#);
    }

    #[test]
    fn raise_exception_is_reported_as_such() {
        let template = ChatTemplate::new("{{ raise_exception('roles must alternate') }}").unwrap();
        let err = template
            .render(&[json!({"role": "user"})], &[], &Default::default())
            .unwrap_err();
        assert_eq!(
            err,
            ChatTemplateError::Raised("roles must alternate".into())
        );
    }

    #[test]
    fn messages_are_cleaned_like_transformers() {
        let messages = json!([{"role": "assistant", "content": null, "reasoning": "hmm", "x": 1}]);
        let out = render(
            "{{ messages[0] | tojson }}|{{ messages[0].content is defined }}",
            messages,
            &Default::default(),
        );
        assert_eq!(
            out,
            r#"{"thinking": "hmm", "role": "assistant", "reasoning": "hmm", "x": 1, "reasoning_content": "hmm"}|False"#
        );
    }

    #[test]
    fn variables_and_loop_controls() {
        let options = ChatTemplateOptions {
            add_generation_prompt: true,
            enable_thinking: Some(false),
            extra: [("custom".to_owned(), json!("v"))].into_iter().collect(),
            ..Default::default()
        };
        let template = "{% for m in messages %}{% if loop.index0 > 0 %}{% break %}{% endif %}{{ m.content.upper() }}{% endfor %}\n\
                        {{ bos_token }}{{ tools }}{{ custom }}{{ enable_thinking }}{{ add_generation_prompt }}{{ undefined_thing }}\n";
        let messages = json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]);
        assert_eq!(render(template, messages, &options), "A<s>NonevFalseTrue");
        let out = render(
            "{{ enable_thinking is defined }}",
            one_user(),
            &Default::default(),
        );
        assert_eq!(out, "False");
    }

    #[test]
    fn generation_blocks_render_their_body() {
        let out = render(
            "{%- for m in messages %}{% generation -%}\n  [{{ m.content }}]{%- endgeneration %}{% endfor %}",
            one_user(),
            &Default::default(),
        );
        assert_eq!(out, "[hi]");
    }

    #[test]
    fn strftime_now_formats_the_date() {
        let out = render(
            "{{ strftime_now('%Y') | length }}",
            one_user(),
            &Default::default(),
        );
        assert_eq!(out, "4");
        let template = ChatTemplate::new("{{ strftime_now('%Q') }}").unwrap();
        assert!(template
            .render(
                &one_user().as_array().unwrap().clone(),
                &[],
                &Default::default()
            )
            .is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        let template = ChatTemplate::new("{{ messages }}").unwrap();
        assert!(matches!(
            template.render(&[], &[], &Default::default()),
            Err(ChatTemplateError::InvalidInput(_))
        ));
        assert!(matches!(
            template.render(&[json!("hi")], &[], &Default::default()),
            Err(ChatTemplateError::InvalidInput(_))
        ));
        assert!(matches!(
            ChatTemplate::new("{% if %}"),
            Err(ChatTemplateError::Syntax(_))
        ));
    }
}
