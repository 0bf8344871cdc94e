//! Opt-in PII anonymization for the generation endpoints (issue 6), and
//! `POST /api/privacy/preview`.
//!
//! A request opts in with the header `X-Hearth-Anonymize: true` (`1`, `yes`)
//! or with the model alias `<model>+private`. Then:
//!
//! 1. [`RequestPrivacy::anonymize_messages`] (or [`RequestPrivacy::anonymize_text`])
//!    masks every text part of the request, in order, with one
//!    [`Conversation`]: the same value gets the same placeholder in every
//!    message, so a resent history masks to the same prompt prefix.
//! 2. The model only ever sees the masked text; token counts (`usage`) are of
//!    that text. Stop strings that contain a masked value are rewritten to
//!    its placeholder, so they still match what the model writes.
//! 3. [`RequestPrivacy::restorer`] gives one [`OutputRestorer`] per choice
//!    (a [`StreamRestorer`] each for `content` and `reasoning_content`): the
//!    client receives the real values, also when a placeholder is cut across
//!    SSE chunks; only a possible placeholder prefix is held back.
//! 4. [`mark_response`] adds `X-Hearth-Anonymized: <spans masked>`.
//!
//! Another endpoint (Anthropic's `/v1/messages`) needs two calls: mask its
//! messages with `anonymize_messages` (or `anonymize_text` per part) and
//! hand `restorer()` to its [`ChoiceDecoder`](super::generation::ChoiceDecoder).
//!
//! The placeholder map lives only in this request's memory and is dropped
//! with it. Nothing here logs text; `Debug` of the privacy types prints counts.
//! The recognizers' word lists are loaded once, on first use
//! ([`Anonymizer::from_default_data`]); a server without them answers 503
//! to opt-in requests instead of sending clear text to the model.

use std::sync::OnceLock;

use axum::{
    http::{HeaderMap, HeaderValue, StatusCode},
    response::Response,
    Json,
};
use hearth_privacy::{Anonymizer, Conversation, RestoreMode, StreamRestorer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{error::ApiError, extract::ApiJson, reasoning::SplitDelta};

/// Request header that asks for anonymization.
pub const ANONYMIZE_HEADER: &str = "x-hearth-anonymize";
/// Response header with the number of spans masked.
pub const ANONYMIZED_HEADER: &str = "x-hearth-anonymized";
/// Model-name suffix that asks for anonymization (`default+private`).
pub const PRIVATE_SUFFIX: &str = "+private";

/// The shared, read-only recognizers (word lists loaded once).
static ANONYMIZER: OnceLock<Anonymizer> = OnceLock::new();

/// The anonymizer, loading its data on first use (off the async threads).
/// A failed load is not cached: running `privacy/fetch-data.sh` fixes a
/// running server.
pub async fn anonymizer() -> Result<Anonymizer, ApiError> {
    if let Some(anonymizer) = ANONYMIZER.get() {
        return Ok(anonymizer.clone());
    }
    let loaded = tokio::task::spawn_blocking(Anonymizer::from_default_data)
        .await
        .map_err(|e| ApiError::internal(format!("loading the anonymizer failed: {e}")))?;
    match loaded {
        Ok(anonymizer) => Ok(ANONYMIZER.get_or_init(|| anonymizer).clone()),
        Err(e) => {
            let mut error = ApiError::internal(format!(
                "Anonymization is not available on this server: {e}"
            ));
            error.status = StatusCode::SERVICE_UNAVAILABLE;
            error.code = Some("anonymization_unavailable");
            Err(error)
        }
    }
}

/// Splits a `+private` suffix off the requested model name: the name to
/// resolve, and whether the suffix was there.
pub fn split_model(model: Option<&str>) -> (Option<&str>, bool) {
    match model.map(str::trim) {
        Some(name) => match name.strip_suffix(PRIVATE_SUFFIX) {
            Some(base) => (Some(base), true),
            None => (Some(name), false),
        },
        None => (None, false),
    }
}

/// The served names with `+private` appended (for `/v1/models`).
pub fn private_aliases(model_id: &str, aliases: &[String]) -> Vec<String> {
    std::iter::once(model_id)
        .chain(aliases.iter().map(String::as_str))
        .map(|name| format!("{name}{PRIVATE_SUFFIX}"))
        .collect()
}

/// Whether the request headers ask for anonymization. A header value other
/// than true/1/yes/false/0/no (any case) is a 400: a typo must not silently
/// send clear text.
pub fn header_opt_in(headers: &HeaderMap) -> Result<bool, ApiError> {
    let Some(value) = headers.get(ANONYMIZE_HEADER) else {
        return Ok(false);
    };
    let text = value.to_str().map(|v| v.trim().to_ascii_lowercase());
    match text.as_deref() {
        Ok("true" | "1" | "yes" | "on") => Ok(true),
        Ok("false" | "0" | "no" | "off") => Ok(false),
        _ => Err(ApiError::invalid_param(
            "X-Hearth-Anonymize",
            "The X-Hearth-Anonymize header must be true, 1, yes, false, 0 or no.",
        )),
    }
}

/// Decides whether this request is anonymized (header or `+private` alias)
/// and, if so, starts its masking session.
pub async fn for_request(
    headers: &HeaderMap,
    private_alias: bool,
) -> Result<Option<RequestPrivacy>, ApiError> {
    if !(header_opt_in(headers)? || private_alias) {
        return Ok(None);
    }
    Ok(Some(RequestPrivacy::new(anonymizer().await?)))
}

/// One request's masking session: the placeholder map and the count of
/// masked spans.
pub struct RequestPrivacy {
    conversation: Conversation,
    masked: usize,
}

impl std::fmt::Debug for RequestPrivacy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestPrivacy")
            .field("conversation", &self.conversation)
            .field("masked", &self.masked)
            .finish()
    }
}

impl RequestPrivacy {
    pub fn new(anonymizer: Anonymizer) -> Self {
        RequestPrivacy {
            conversation: anonymizer.conversation(),
            masked: 0,
        }
    }

    /// Masks one text (the next part of the conversation, in order).
    pub fn anonymize_text(&mut self, text: &str) -> String {
        let masked = self.conversation.anonymize_with_spans(text);
        self.masked += masked.entities.len();
        masked.text
    }

    /// Masks the text parts of chat messages in order: string `content`,
    /// `{"type": "text"}` parts, `reasoning_content`, and the string values
    /// inside tool-call `arguments` (as an object, or as JSON text). Roles,
    /// names and ids are left alone.
    pub fn anonymize_messages(&mut self, messages: &mut [Value]) {
        for message in messages {
            let Some(message) = message.as_object_mut() else {
                continue;
            };
            for field in ["reasoning_content", "content"] {
                match message.get_mut(field) {
                    Some(Value::String(text)) => *text = self.anonymize_text(text),
                    Some(Value::Array(parts)) => {
                        for part in parts {
                            if let Some(Value::String(text)) = part.get_mut("text") {
                                *text = self.anonymize_text(text);
                            }
                        }
                    }
                    _ => {}
                }
            }
            if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
                for call in calls {
                    if let Some(arguments) = call
                        .get_mut("function")
                        .and_then(|f| f.get_mut("arguments"))
                    {
                        self.anonymize_arguments(arguments);
                    }
                }
            }
        }
    }

    /// Tool-call arguments: string values of a JSON object (keys stay), or
    /// JSON text parsed, masked and written back (plain text if not JSON).
    fn anonymize_arguments(&mut self, arguments: &mut Value) {
        if let Value::String(text) = arguments {
            if let Ok(mut parsed) = serde_json::from_str::<Value>(text) {
                if parsed.is_object() || parsed.is_array() {
                    let before = self.masked;
                    self.anonymize_json_strings(&mut parsed);
                    if self.masked != before {
                        *text = parsed.to_string();
                    }
                    return;
                }
            }
            *text = self.anonymize_text(text);
            return;
        }
        self.anonymize_json_strings(arguments);
    }

    fn anonymize_json_strings(&mut self, value: &mut Value) {
        match value {
            Value::String(text) => *text = self.anonymize_text(text),
            Value::Array(items) => items
                .iter_mut()
                .for_each(|v| self.anonymize_json_strings(v)),
            Value::Object(map) => map
                .values_mut()
                .for_each(|v| self.anonymize_json_strings(v)),
            _ => {}
        }
    }

    /// Rewrites masked values inside stop strings to their placeholders, so
    /// a stop the client wrote in clear text matches the model's output.
    pub fn mask_stops(&self, stops: &mut [String]) {
        let mut entries: Vec<(String, &str)> = self
            .conversation
            .map()
            .entries()
            .map(|(kind, number, value)| (hearth_privacy::format_placeholder(kind, number), value))
            .collect();
        // Longest values first, so a value inside a longer one does not win.
        entries.sort_by_key(|(_, value)| std::cmp::Reverse(value.len()));
        for stop in stops {
            for (placeholder, value) in &entries {
                if !value.is_empty() && stop.contains(value) {
                    *stop = stop.replace(value, placeholder);
                }
            }
        }
    }

    /// Restorers for one choice's output streams.
    pub fn restorer(&self) -> OutputRestorer {
        OutputRestorer {
            content: self.conversation.stream_restorer(),
            reasoning: self.conversation.stream_restorer(),
            arguments: self
                .conversation
                .stream_restorer_with_mode(RestoreMode::JsonString),
        }
    }

    /// Number of spans masked so far (occurrences, not distinct values).
    pub fn masked_count(&self) -> usize {
        self.masked
    }
}

/// Adds `X-Hearth-Anonymized: <spans masked>` to the response of an
/// anonymized request (`masked` from [`RequestPrivacy::masked_count`]).
pub fn mark_response(response: &mut Response, masked: Option<usize>) {
    if let Some(masked) = masked {
        response
            .headers_mut()
            .insert(ANONYMIZED_HEADER, HeaderValue::from(masked));
    }
}

/// Masks `messages` off the async threads (masking a long conversation takes
/// milliseconds). Without a session the messages come back untouched.
pub async fn anonymize_messages(
    privacy: Option<RequestPrivacy>,
    mut messages: Vec<Value>,
) -> Result<(Option<RequestPrivacy>, Vec<Value>), ApiError> {
    let Some(mut privacy) = privacy else {
        return Ok((None, messages));
    };
    tokio::task::spawn_blocking(move || {
        privacy.anonymize_messages(&mut messages);
        (Some(privacy), messages)
    })
    .await
    .map_err(|e| ApiError::internal(format!("anonymizing the messages failed: {e}")))
}

/// Puts original values back into one choice's text, per channel.
pub struct OutputRestorer {
    content: StreamRestorer,
    reasoning: StreamRestorer,
    /// Tool-call arguments (JSON text): values are written JSON-escaped.
    arguments: StreamRestorer,
}

impl OutputRestorer {
    /// The restored text of one step; a possible placeholder prefix at the
    /// end of either channel is held back until the next step.
    pub fn push(&mut self, delta: SplitDelta) -> SplitDelta {
        SplitDelta {
            reasoning: self.reasoning.push(&delta.reasoning),
            content: self.content.push(&delta.content),
        }
    }

    /// The arguments of one complete tool call (JSON text) with every
    /// placeholder restored; a value holding quotes or backslashes is
    /// escaped, so the JSON stays valid.
    pub fn restore_arguments(&mut self, arguments: &str) -> String {
        let mut out = self.arguments.push(arguments);
        out.push_str(&self.arguments.finish());
        out
    }

    /// Everything still held back (at the end of the choice).
    pub fn finish(&mut self) -> SplitDelta {
        SplitDelta {
            reasoning: self.reasoning.finish(),
            content: self.content.finish(),
        }
    }
}

/// `POST /api/privacy/preview` body.
#[derive(Debug, Deserialize)]
pub struct PreviewRequest {
    text: String,
}

#[derive(Debug, Serialize)]
pub struct PreviewEntity {
    kind: &'static str,
    placeholder: String,
    /// Byte offsets into the input text.
    start: usize,
    end: usize,
    text: String,
}

#[derive(Debug, Serialize)]
pub struct PreviewResponse {
    masked: String,
    entities: Vec<PreviewEntity>,
}

/// `POST /api/privacy/preview` `{"text"}` → `{"masked", "entities": [{"kind",
/// "placeholder", "start", "end", "text"}]}`, offsets in bytes of the input.
/// Nothing is kept after the response.
pub async fn preview(
    ApiJson(request): ApiJson<PreviewRequest>,
) -> Result<Json<PreviewResponse>, ApiError> {
    let anonymizer = anonymizer().await?;
    let response = tokio::task::spawn_blocking(move || {
        let text = request.text;
        let masked = anonymizer.conversation().anonymize_with_spans(&text);
        let entities = masked
            .entities
            .iter()
            .map(|entity| PreviewEntity {
                kind: entity.kind.label(),
                placeholder: masked.text[entity.masked.clone()].to_string(),
                start: entity.original.start,
                end: entity.original.end,
                text: text[entity.original.clone()].to_string(),
            })
            .collect();
        PreviewResponse {
            masked: masked.text,
            entities,
        }
    })
    .await
    .map_err(|e| ApiError::internal(format!("the preview failed: {e}")))?;
    Ok(Json(response))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hearth_privacy::{Analyzer, Gazetteer};
    use serde_json::json;

    use super::*;

    fn session() -> RequestPrivacy {
        let gazetteer = Gazetteer::from_lists(["Rachel"], ["Davis"]);
        RequestPrivacy::new(Anonymizer::new(Analyzer::new(Arc::new(gazetteer))))
    }

    #[test]
    fn tool_call_arguments_are_restored_as_json() {
        let mut privacy = session();
        let masked = privacy.anonymize_text(r#"Mail rachel@example.com about "Q3""#);
        assert!(masked.contains("[EMAIL_1]"), "{masked}");
        let mut restorer = privacy.restorer();
        let args = r#"{"to": "[EMAIL_1]", "cc": "[email_1]"}"#;
        let restored = restorer.restore_arguments(args);
        let value: serde_json::Value = serde_json::from_str(&restored).expect("valid JSON");
        assert_eq!(value["to"], "rachel@example.com");
        assert_eq!(value["cc"], "rachel@example.com");
        // The restorer holds nothing back between calls.
        assert_eq!(restorer.restore_arguments("{}"), "{}");
    }

    #[test]
    fn model_suffix_and_header_values() {
        assert_eq!(
            split_model(Some("default+private")),
            (Some("default"), true)
        );
        assert_eq!(split_model(Some("default")), (Some("default"), false));
        assert_eq!(split_model(None), (None, false));
        let mut headers = HeaderMap::new();
        assert!(!header_opt_in(&headers).unwrap());
        for (value, want) in [("true", true), ("YES", true), ("1", true), ("0", false)] {
            headers.insert(ANONYMIZE_HEADER, HeaderValue::from_static(value));
            assert_eq!(header_opt_in(&headers).unwrap(), want, "{value}");
        }
        for bad in ["maybe", ""] {
            headers.insert(ANONYMIZE_HEADER, HeaderValue::from_static(bad));
            assert_eq!(header_opt_in(&headers).unwrap_err().status, 400, "{bad:?}");
        }
        headers.insert(
            ANONYMIZE_HEADER,
            HeaderValue::from_bytes(b"tr\xfce").unwrap(),
        );
        assert_eq!(header_opt_in(&headers).unwrap_err().status, 400);
    }

    #[test]
    fn messages_share_placeholders_and_restore_per_channel() {
        let mut privacy = session();
        let mut messages = vec![
            json!({"role": "system", "content": "Write to rachel@example.com."}),
            json!({"role": "user", "content": [{"type": "text", "text": "Is rachel@example.com right?"}]}),
            json!({"role": "assistant", "content": "", "reasoning_content": "mail rachel@example.com",
                   "tool_calls": [{"function": {"name": "send",
                                   "arguments": "{\"to\": \"rachel@example.com\"}"}}]}),
            json!({"role": "tool", "content": "sent to rachel@example.com"}),
        ];
        privacy.anonymize_messages(&mut messages);
        let text = serde_json::to_string(&messages).unwrap();
        assert!(!text.contains("rachel@"), "{text}");
        assert_eq!(text.matches("[EMAIL_1]").count(), 5, "{text}");
        assert_eq!(privacy.masked_count(), 5);

        let mut stops = vec!["rachel@example.com".to_string(), "\n\n".to_string()];
        privacy.mask_stops(&mut stops);
        assert_eq!(stops, ["[EMAIL_1]", "\n\n"]);

        // A placeholder cut across steps, in both channels.
        let mut restorer = privacy.restorer();
        let mut out = SplitDelta::default();
        for (reasoning, content) in [("ask [EM", "to EMA"), ("AIL_1]", "IL_1"), ("", "] ok")] {
            let step = restorer.push(SplitDelta {
                reasoning: reasoning.into(),
                content: content.into(),
            });
            assert!(!step.content.contains("EMA") && !step.reasoning.contains("EM"));
            out.reasoning.push_str(&step.reasoning);
            out.content.push_str(&step.content);
        }
        let rest = restorer.finish();
        out.reasoning.push_str(&rest.reasoning);
        out.content.push_str(&rest.content);
        assert_eq!(out.reasoning, "ask rachel@example.com");
        assert_eq!(out.content, "to rachel@example.com ok");
        assert!(!format!("{privacy:?}").contains("rachel"));
    }

    /// Through the real decoder: Qwen3's tokenizer, a think block, token by
    /// token; both channels restored, no step shows a placeholder piece.
    #[test]
    fn choice_decoder_restores_reasoning_and_content() {
        use crate::{
            engine::sampling::Sampled,
            server::{
                generation::ChoiceDecoder,
                reasoning::{ReasoningSplitter, ThinkTags},
            },
        };
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(".hearth/fixtures/qwen3-tokenizer");
        let tokenizer = hearth_models::Tokenizer::from_dir(&dir)
            .expect("Qwen3 tokenizer fixture (run scripts/setup.sh)");
        let mut privacy = session();
        let masked = privacy.anonymize_text("rachel@example.com");
        assert_eq!(masked, "[EMAIL_1]");
        let reply = "<think>\nI will mail [EMAIL_1] now.\n</think>\n\nSent to [EMAIL_1].";
        let ids = tokenizer.encode(reply, false).expect("encode");
        let splitter = ReasoningSplitter::new(ThinkTags::default(), false);
        let mut decoder = ChoiceDecoder::new(&tokenizer, &[], &[], &[], false, Some(splitter))
            .with_restorer(Some(privacy.restorer()));
        let mut out = SplitDelta::default();
        for token in ids {
            let step = decoder
                .push(&Sampled {
                    token,
                    logprob: None,
                    top_logprobs: Vec::new(),
                })
                .expect("push");
            assert!(!step.text.content.contains("EMAIL") && !step.text.reasoning.contains("EMAIL"));
            out.reasoning.push_str(&step.text.reasoning);
            out.content.push_str(&step.text.content);
        }
        let rest = decoder.finish().expect("finish");
        out.reasoning.push_str(&rest.reasoning);
        out.content.push_str(&rest.content);
        assert_eq!(out.reasoning, "I will mail rachel@example.com now.");
        assert_eq!(out.content, "Sent to rachel@example.com.");
    }
}
