//! OpenAI wire types: the request bodies of `/v1/chat/completions` and
//! `/v1/completions`, their validation into engine terms, and the response
//! and stream-chunk bodies.
//!
//! Parsing is lenient where OpenAI clients send extra fields (unknown fields
//! are ignored, `null` means "not given") and strict where a value would
//! change the result (wrong types and out-of-range values are 400s naming the
//! field). Validation produces a [`GenerationOptions`]: everything a handler
//! needs to build scheduler jobs, with no HTTP or JSON left in it.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::engine::sampling::{SamplingParams, MAX_TOP_LOGPROBS};

/// Most stop strings one request may give.
pub const MAX_STOP_STRINGS: usize = 16;

/// `stop`: one string or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<Value>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub logit_bias: Option<HashMap<String, f32>>,
    #[serde(default)]
    pub stop: Option<StopField>,
    /// Extension (vLLM): token ids that end the choice like a stop string.
    #[serde(default)]
    pub stop_token_ids: Option<Vec<u32>>,
    /// Extension (vLLM): keep generating past end-of-sequence tokens.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Accepted and ignored (OpenAI's end-user id).
    #[serde(default)]
    pub user: Option<String>,
    /// Passed to the chat template; calls are parsed out of the reply (tools.rs).
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub response_format: Option<Value>,
    /// Extra chat-template variables (`enable_thinking`, ...).
    #[serde(default)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// Shortcut for `chat_template_kwargs.enable_thinking`.
    #[serde(default)]
    pub enable_thinking: Option<bool>,
}

/// `prompt` of `/v1/completions`: text or token ids, one or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PromptField {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

/// One prompt of a completions request.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// `POST /v1/completions` (legacy).
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: PromptField,
    /// Structured output, as on chat (see [`super::structured`]).
    #[serde(default)]
    pub response_format: Option<Value>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub best_of: Option<u32>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    /// Legacy: how many top alternatives to report per token (0 = only the chosen one).
    #[serde(default)]
    pub logprobs: Option<u32>,
    #[serde(default)]
    pub logit_bias: Option<HashMap<String, f32>>,
    #[serde(default)]
    pub stop: Option<StopField>,
    #[serde(default)]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    #[serde(default)]
    pub user: Option<String>,
}

/// The sampling and stopping fields both endpoints share, borrowed from a
/// parsed request.
#[derive(Debug, Clone, Default)]
pub struct RawOptions<'a> {
    pub stream: Option<bool>,
    pub stream_options: Option<&'a StreamOptions>,
    pub n: Option<u32>,
    /// `(field name, value)` of the token limit the client gave.
    pub max_tokens: Option<(&'static str, u64)>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub seed: Option<i64>,
    pub logprobs: bool,
    pub top_logprobs: usize,
    pub logit_bias: Option<&'a HashMap<String, f32>>,
    pub stop: Option<&'a StopField>,
    pub stop_token_ids: Option<&'a [u32]>,
    pub ignore_eos: Option<bool>,
}

/// A validated request's generation settings, in engine terms.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationOptions {
    pub stream: bool,
    pub include_usage: bool,
    /// Choices per prompt.
    pub n: usize,
    /// The client's token limit; `None` = up to the context (or memory) limit.
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub stop_at_eos: bool,
}

impl GenerationOptions {
    /// Sampling parameters of choice `index`: with a seed, each choice gets
    /// its own (`seed + index`) so that `n > 1` gives different samples that
    /// are still reproducible.
    pub fn sampling_for_choice(&self, index: usize) -> SamplingParams {
        let mut params = self.sampling.clone();
        if let Some(seed) = params.seed {
            params.seed = Some(seed.wrapping_add(index as u64));
        }
        params
    }
}

fn check_range(name: &str, value: f32, lo: f32, hi: f32) -> Result<f32, ApiError> {
    if value.is_finite() && (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::invalid_param(
            name,
            format!("`{name}` must be between {lo} and {hi}, got {value}."),
        ))
    }
}

impl RawOptions<'_> {
    /// Checks every field and builds [`GenerationOptions`]. `vocab_size`
    /// bounds `logit_bias` and `stop_token_ids`; `max_n` bounds `n`.
    pub fn validate(&self, vocab_size: usize, max_n: usize) -> Result<GenerationOptions, ApiError> {
        let stream = self.stream.unwrap_or(false);
        let include_usage = self
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        if self.stream_options.is_some() && !stream {
            return Err(ApiError::invalid_param(
                "stream_options",
                "`stream_options` is only allowed when `stream` is true.",
            ));
        }

        let n = self.n.unwrap_or(1) as usize;
        if n == 0 || n > max_n {
            return Err(ApiError::invalid_param(
                "n",
                format!("`n` must be between 1 and {max_n}, got {n}."),
            ));
        }

        let max_tokens = match self.max_tokens {
            Some((name, 0)) => {
                return Err(ApiError::invalid_param(
                    name,
                    format!("`{name}` must be at least 1, got 0."),
                ))
            }
            Some((_, v)) => Some(usize::try_from(v).unwrap_or(usize::MAX)),
            None => None,
        };

        // OpenAI's default temperature is 1 (sampling), as in its API.
        let mut sampling = SamplingParams {
            temperature: check_range("temperature", self.temperature.unwrap_or(1.0), 0.0, 2.0)?,
            ..SamplingParams::default()
        };
        if let Some(top_p) = self.top_p {
            if !(top_p.is_finite() && top_p > 0.0 && top_p <= 1.0) {
                return Err(ApiError::invalid_param(
                    "top_p",
                    format!("`top_p` must be greater than 0 and at most 1, got {top_p}."),
                ));
            }
            sampling.top_p = top_p;
        }
        if let Some(top_k) = self.top_k {
            sampling.top_k = match top_k {
                -1 | 0 => 0,
                k if k > 0 => usize::try_from(k).unwrap_or(usize::MAX),
                k => {
                    return Err(ApiError::invalid_param(
                        "top_k",
                        format!("`top_k` must be -1 or 0 (off) or positive, got {k}."),
                    ))
                }
            };
        }
        if let Some(min_p) = self.min_p {
            sampling.min_p = check_range("min_p", min_p, 0.0, 1.0)?;
        }
        if let Some(rp) = self.repetition_penalty {
            if !(rp.is_finite() && rp > 0.0 && rp <= 10.0) {
                return Err(ApiError::invalid_param(
                    "repetition_penalty",
                    format!(
                        "`repetition_penalty` must be greater than 0 and at most 10, got {rp}."
                    ),
                ));
            }
            sampling.repetition_penalty = rp;
        }
        if let Some(p) = self.presence_penalty {
            sampling.presence_penalty = check_range("presence_penalty", p, -2.0, 2.0)?;
        }
        if let Some(p) = self.frequency_penalty {
            sampling.frequency_penalty = check_range("frequency_penalty", p, -2.0, 2.0)?;
        }
        // Any 64-bit integer is a valid seed; negative ones keep their bits.
        sampling.seed = self.seed.map(|s| s as u64);
        if self.top_logprobs > MAX_TOP_LOGPROBS {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                format!(
                    "`top_logprobs` must be at most {MAX_TOP_LOGPROBS}, got {}.",
                    self.top_logprobs
                ),
            ));
        }
        sampling.logprobs = self.logprobs;
        sampling.top_logprobs = self.top_logprobs;

        if let Some(bias) = self.logit_bias {
            let mut pairs = Vec::with_capacity(bias.len());
            for (key, &value) in bias {
                let token = key
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&t| (t as usize) < vocab_size);
                let Some(token) = token else {
                    return Err(ApiError::invalid_param(
                        "logit_bias",
                        format!(
                            "`logit_bias` keys must be token ids below the vocabulary size \
                             {vocab_size}, got `{key}`."
                        ),
                    ));
                };
                let value = check_range("logit_bias", value, -100.0, 100.0)?;
                pairs.push((token, value));
            }
            pairs.sort_by_key(|&(t, _)| t);
            sampling.logit_bias = pairs;
        }

        let stop = match self.stop {
            None => Vec::new(),
            Some(StopField::One(s)) => vec![s.clone()],
            Some(StopField::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOP_STRINGS {
            return Err(ApiError::invalid_param(
                "stop",
                format!(
                    "`stop` may hold at most {MAX_STOP_STRINGS} strings, got {}.",
                    stop.len()
                ),
            ));
        }
        let stop: Vec<String> = stop.into_iter().filter(|s| !s.is_empty()).collect();

        let stop_token_ids = self.stop_token_ids.map(<[u32]>::to_vec).unwrap_or_default();
        if let Some(&bad) = stop_token_ids.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(ApiError::invalid_param(
                "stop_token_ids",
                format!("token id {bad} is outside the vocabulary (size {vocab_size})."),
            ));
        }

        sampling
            .validate(vocab_size)
            .map_err(|e| ApiError::invalid(e.to_string()))?;

        Ok(GenerationOptions {
            stream,
            include_usage,
            n,
            max_tokens,
            sampling,
            stop,
            stop_token_ids,
            stop_at_eos: !self.ignore_eos.unwrap_or(false),
        })
    }
}

impl ChatCompletionRequest {
    pub fn raw_options(&self) -> Result<RawOptions<'_>, ApiError> {
        let top_logprobs = self.top_logprobs.unwrap_or(0) as usize;
        let logprobs = self.logprobs.unwrap_or(false);
        if top_logprobs > 0 && !logprobs {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                "`top_logprobs` requires `logprobs` to be true.",
            ));
        }
        let max_tokens = match (self.max_completion_tokens, self.max_tokens) {
            (Some(v), _) => Some(("max_completion_tokens", v)),
            (None, Some(v)) => Some(("max_tokens", v)),
            (None, None) => None,
        };
        Ok(RawOptions {
            stream: self.stream,
            stream_options: self.stream_options.as_ref(),
            n: self.n,
            max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed,
            logprobs,
            top_logprobs,
            logit_bias: self.logit_bias.as_ref(),
            stop: self.stop.as_ref(),
            stop_token_ids: self.stop_token_ids.as_deref(),
            ignore_eos: self.ignore_eos,
        })
    }

    /// Rejects features this server does not offer rather than ignoring
    /// them (`response_format` is read by [`super::structured`]).
    pub fn check_unsupported(&self) -> Result<(), ApiError> {
        super::structured::parse_response_format(self.response_format.as_ref(), "response_format")?;
        Ok(())
    }

    /// The messages as the chat template wants them: every message an object
    /// with a string `role`; `developer` read as `system`; content given as
    /// a list of text parts joined into one string.
    pub fn template_messages(&self) -> Result<Vec<Value>, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid_param(
                "messages",
                "`messages` must hold at least one message.",
            ));
        }
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| normalize_message(i, m))
            .collect()
    }

    /// Template variables from `chat_template_kwargs` and `enable_thinking`.
    pub fn template_options(&self) -> hearth_models::tokenizer::ChatTemplateOptions {
        let mut extra = self.chat_template_kwargs.clone().unwrap_or_default();
        let from_kwargs = extra.remove("enable_thinking").and_then(|v| v.as_bool());
        for reserved in ["messages", "tools", "documents", "add_generation_prompt"] {
            extra.remove(reserved);
        }
        hearth_models::tokenizer::ChatTemplateOptions {
            add_generation_prompt: true,
            tools: self.tools.clone().filter(|t| !t.is_empty()),
            enable_thinking: self.enable_thinking.or(from_kwargs),
            extra,
        }
    }
}

const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

fn normalize_message(index: usize, message: &Value) -> Result<Value, ApiError> {
    let param = |field: &str| format!("messages[{index}]{field}");
    let Some(object) = message.as_object() else {
        return Err(ApiError::invalid_param(
            param(""),
            format!("messages[{index}] must be an object with `role` and `content`."),
        ));
    };
    let role = match object.get("role").and_then(Value::as_str) {
        Some(role) if ROLES.contains(&role) => role,
        Some(role) => {
            return Err(ApiError::invalid_param(
                param(".role"),
                format!(
                    "messages[{index}].role `{role}` is not one of system, developer, user, \
                     assistant, tool."
                ),
            ))
        }
        None => {
            return Err(ApiError::invalid_param(
                param(".role"),
                format!("messages[{index}].role is missing or not a string."),
            ))
        }
    };
    let mut out = object.clone();
    if let Some(Value::Array(calls)) = out.get_mut("tool_calls") {
        // Clients send `arguments` as JSON text; templates iterate it as a
        // mapping (Qwen3.5) or print it (Qwen3): give them the object.
        for call in calls.iter_mut() {
            if let Some(function) = call.get_mut("function").and_then(Value::as_object_mut) {
                let parsed = match function.get("arguments") {
                    Some(Value::String(text)) => serde_json::from_str::<Value>(text)
                        .ok()
                        .filter(Value::is_object),
                    _ => None,
                };
                if let Some(args) = parsed {
                    function.insert("arguments".into(), args);
                }
            }
        }
    }
    if role == "developer" {
        out.insert("role".into(), Value::String("system".into()));
    }
    match object.get("content") {
        None | Some(Value::Null) => {
            if role == "assistant" {
                // An empty assistant turn (or one with only `tool_calls`) is
                // harmless: render it as "" (templates concatenate `content`).
                out.insert("content".into(), Value::String(String::new()));
            } else {
                return Err(ApiError::invalid_param(
                    param(".content"),
                    format!("messages[{index}].content is missing."),
                ));
            }
        }
        Some(Value::String(_)) => {}
        Some(Value::Array(parts)) => {
            let mut text = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str);
                match (kind, part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push(t.to_string()),
                    (Some("text"), None) => {
                        return Err(ApiError::invalid_param(
                            param(&format!(".content[{j}].text")),
                            format!("messages[{index}].content[{j}].text must be a string."),
                        ))
                    }
                    (Some(other), _) => {
                        return Err(ApiError::invalid_param(
                            param(&format!(".content[{j}].type")),
                            format!(
                                "Content parts of type `{other}` are not supported: this model \
                                 takes text only."
                            ),
                        ))
                    }
                    (None, _) => {
                        return Err(ApiError::invalid_param(
                            param(&format!(".content[{j}]")),
                            format!(
                                "messages[{index}].content[{j}] must be an object with a `type`."
                            ),
                        ))
                    }
                }
            }
            out.insert("content".into(), Value::String(text.join("\n")));
        }
        Some(_) => {
            return Err(ApiError::invalid_param(
                param(".content"),
                format!("messages[{index}].content must be a string or a list of text parts."),
            ))
        }
    }
    Ok(Value::Object(out))
}

impl CompletionRequest {
    pub fn raw_options(&self) -> Result<RawOptions<'_>, ApiError> {
        let top_logprobs = self.logprobs.map(|n| n as usize);
        Ok(RawOptions {
            stream: self.stream,
            stream_options: self.stream_options.as_ref(),
            n: self.n,
            max_tokens: self.max_tokens.map(|v| ("max_tokens", v)),
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed,
            logprobs: top_logprobs.is_some(),
            top_logprobs: top_logprobs.unwrap_or(0),
            logit_bias: self.logit_bias.as_ref(),
            stop: self.stop.as_ref(),
            stop_token_ids: self.stop_token_ids.as_deref(),
            ignore_eos: self.ignore_eos,
        })
    }

    pub fn check_unsupported(&self) -> Result<(), ApiError> {
        if self.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid_param(
                "suffix",
                "`suffix` (fill-in-the-middle) is not supported.",
            ));
        }
        if let Some(best_of) = self.best_of {
            if best_of != self.n.unwrap_or(1) {
                return Err(ApiError::invalid_param(
                    "best_of",
                    "`best_of` other than `n` is not supported.",
                ));
            }
        }
        if self.echo == Some(true) && self.logprobs.is_some() {
            return Err(ApiError::invalid_param(
                "echo",
                "`echo` together with `logprobs` is not supported (no prompt logprobs).",
            ));
        }
        Ok(())
    }

    /// The prompts, in order; at least one, none empty.
    pub fn prompts(&self) -> Result<Vec<PromptInput>, ApiError> {
        let prompts: Vec<PromptInput> = match &self.prompt {
            PromptField::Text(t) => vec![PromptInput::Text(t.clone())],
            PromptField::Texts(v) => v.iter().cloned().map(PromptInput::Text).collect(),
            PromptField::Tokens(v) => vec![PromptInput::Tokens(v.clone())],
            PromptField::TokenLists(v) => v.iter().cloned().map(PromptInput::Tokens).collect(),
        };
        if prompts.is_empty() {
            return Err(ApiError::invalid_param(
                "prompt",
                "`prompt` must not be an empty list.",
            ));
        }
        for (i, p) in prompts.iter().enumerate() {
            let empty = match p {
                PromptInput::Text(t) => t.is_empty(),
                PromptInput::Tokens(t) => t.is_empty(),
            };
            if empty {
                return Err(ApiError::invalid_param(
                    "prompt",
                    format!("prompt {i} is empty."),
                ));
            }
        }
        Ok(prompts)
    }
}

// ---------------------------------------------------------------- responses

/// Token counts of a response, from the engine's own counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}

/// One alternative token in chat logprobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// One generated token in chat logprobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<TokenLogprob>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatMessageOut {
    pub role: &'static str,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<super::tools::ToolCallOut>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ChatMessageOut,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: &'static str,
    /// The stop string that ended the choice (vLLM's extension; absent
    /// otherwise). The Anthropic API reports it as `stop_sequence`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<super::tools::ToolCallDelta>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
    /// As [`ChatChoice::stop_reason`], on the finish chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

/// One SSE chunk of a streamed chat completion.
#[derive(Debug, Clone, Serialize)]
pub struct ChatChunk<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub system_fingerprint: &'a str,
    pub choices: Vec<ChatChunkChoice>,
    /// Absent without `include_usage`; `null` on every chunk but the last with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// Legacy completions logprobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LegacyLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<Map<String, Value>>,
    pub text_offset: Vec<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<LegacyLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Completion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<CompletionChoice>,
    pub usage: Usage,
}

/// One SSE chunk of a streamed completion.
#[derive(Debug, Clone, Serialize)]
pub struct CompletionChunk<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub system_fingerprint: &'a str,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// `GET /v1/models` entry.
#[derive(Debug, Clone, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// Extension: the model's context length in tokens.
    pub context_length: usize,
    /// Extension: other names this model answers to.
    pub aliases: Vec<String>,
    /// Extension: where it runs, e.g. `gpu (cuda)`, `gpu (metal)`, `cpu (cpu)`.
    pub device: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(body: Value) -> ChatCompletionRequest {
        serde_json::from_value(body).expect("parses")
    }

    fn options(body: Value) -> Result<GenerationOptions, ApiError> {
        let req = chat(body);
        req.raw_options()?.validate(1000, 8)
    }

    #[test]
    fn defaults_follow_openai() {
        let o = options(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
            .expect("valid");
        assert!(!o.stream && !o.include_usage);
        assert_eq!(o.n, 1);
        assert_eq!(o.max_tokens, None);
        assert_eq!(o.sampling.temperature, 1.0);
        assert!(o.stop.is_empty() && o.stop_at_eos);
    }

    #[test]
    fn accepts_every_documented_field() {
        let o = options(json!({
            "model": "m", "messages": [{"role": "user", "content": "hi"}],
            "stream": true, "stream_options": {"include_usage": true}, "n": 2,
            "max_tokens": 5, "max_completion_tokens": 7, "temperature": 0.0, "top_p": 0.9,
            "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.5,
            "frequency_penalty": -0.5, "seed": -1, "logprobs": true, "top_logprobs": 3,
            "logit_bias": {"12": -100, "7": 5.5}, "stop": ["a", ""], "user": "u",
            "stop_token_ids": [3], "ignore_eos": true
        }))
        .expect("valid");
        assert!(o.stream && o.include_usage);
        assert_eq!(o.n, 2);
        assert_eq!(o.max_tokens, Some(7));
        assert_eq!(o.sampling.top_k, 40);
        assert_eq!(o.sampling.seed, Some(u64::MAX));
        assert_eq!(o.sampling.logit_bias, vec![(7, 5.5), (12, -100.0)]);
        assert_eq!(o.sampling.top_logprobs, 3);
        assert_eq!(o.stop, vec!["a".to_string()]);
        assert_eq!(o.stop_token_ids, vec![3]);
        assert!(!o.stop_at_eos);
        assert_eq!(o.sampling_for_choice(1).seed, Some(0));
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let cases = [
            ("temperature", json!(2.5)),
            ("top_p", json!(0.0)),
            ("top_k", json!(-3)),
            ("min_p", json!(1.5)),
            ("presence_penalty", json!(3)),
            ("frequency_penalty", json!(-2.1)),
            ("n", json!(0)),
            ("n", json!(9)),
            ("max_tokens", json!(0)),
            ("top_logprobs", json!(21)),
            ("logit_bias", json!({"abc": 1})),
            ("logit_bias", json!({"1000": 1})),
            ("logit_bias", json!({"1": 101})),
            ("stop_token_ids", json!([1000])),
        ];
        for (field, value) in cases {
            let mut body = base.clone();
            body[field] = value.clone();
            if field == "top_logprobs" {
                body["logprobs"] = json!(true);
            }
            let err = options(body).expect_err(field);
            assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
            assert_eq!(err.param.as_deref(), Some(field), "{field}={value}: {err}");
        }
    }

    #[test]
    fn top_logprobs_needs_logprobs_and_stream_options_needs_stream() {
        let err = options(json!({"messages": [], "top_logprobs": 2})).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("top_logprobs"));
        let err = options(json!({"messages": [], "stream_options": {"include_usage": true}}))
            .unwrap_err();
        assert_eq!(err.param.as_deref(), Some("stream_options"));
    }

    #[test]
    fn messages_are_normalized() {
        let req = chat(json!({"messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "x"}]},
            {"role": "assistant", "content": null},
        ]}));
        let m = req.template_messages().expect("valid");
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[1]["content"], "a\nb");
        assert_eq!(m[2]["content"], "");
        assert_eq!(m[3]["content"], "");
    }

    #[test]
    fn bad_messages_are_400s() {
        for (messages, param) in [
            (json!([]), "messages"),
            (json!(["hi"]), "messages[0]"),
            (json!([{"content": "x"}]), "messages[0].role"),
            (
                json!([{"role": "wizard", "content": "x"}]),
                "messages[0].role",
            ),
            (json!([{"role": "user"}]), "messages[0].content"),
            (
                json!([{"role": "user", "content": 5}]),
                "messages[0].content",
            ),
            (
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
                "messages[0].content[0].type",
            ),
        ] {
            let err = chat(json!({ "messages": messages }))
                .template_messages()
                .unwrap_err();
            assert_eq!(err.param.as_deref(), Some(param), "{messages}");
        }
    }

    #[test]
    fn thinking_switch_from_either_place() {
        let req = chat(
            json!({"messages": [], "chat_template_kwargs": {"enable_thinking": false, "x": 1}}),
        );
        let o = req.template_options();
        assert_eq!(o.enable_thinking, Some(false));
        assert_eq!(o.extra.get("x"), Some(&json!(1)));
        assert!(o.add_generation_prompt);
        let req = chat(json!({"messages": [], "enable_thinking": true,
                              "chat_template_kwargs": {"enable_thinking": false}}));
        assert_eq!(req.template_options().enable_thinking, Some(true));
    }

    #[test]
    fn completion_prompts_in_all_shapes() {
        let parse = |prompt: Value| -> CompletionRequest {
            serde_json::from_value(json!({"model": "m", "prompt": prompt})).expect("parses")
        };
        assert_eq!(
            parse(json!("hi")).prompts().expect("ok"),
            vec![PromptInput::Text("hi".into())]
        );
        assert_eq!(parse(json!(["a", "b"])).prompts().expect("ok").len(), 2);
        assert_eq!(
            parse(json!([1, 2])).prompts().expect("ok"),
            vec![PromptInput::Tokens(vec![1, 2])]
        );
        assert_eq!(parse(json!([[1], [2, 3]])).prompts().expect("ok").len(), 2);
        assert!(parse(json!("")).prompts().is_err());
        assert!(parse(json!([])).prompts().is_err());
        let req = parse(json!("x"));
        let mut req2 = req.clone();
        req2.logprobs = Some(2);
        let o = req2
            .raw_options()
            .expect("ok")
            .validate(10, 4)
            .expect("valid");
        assert!(o.sampling.logprobs);
        assert_eq!(o.sampling.top_logprobs, 2);
    }

    #[test]
    fn chunk_usage_field_is_tri_state() {
        let chunk = |usage| ChatChunk {
            id: "c",
            object: "chat.completion.chunk",
            created: 1,
            model: "m",
            system_fingerprint: "f",
            choices: vec![],
            usage,
        };
        let v = serde_json::to_value(chunk(None)).expect("json");
        assert!(v.get("usage").is_none());
        let v = serde_json::to_value(chunk(Some(None))).expect("json");
        assert!(v["usage"].is_null());
        let v = serde_json::to_value(chunk(Some(Some(Usage::new(3, 4, 0))))).expect("json");
        assert_eq!(v["usage"]["total_tokens"], 7);
    }
}
