//! Anthropic's Messages API: `POST /v1/messages` and
//! `POST /v1/messages/count_tokens`, on the same engine as the OpenAI routes.
//!
//! A Messages request is translated into the chat request of
//! [`super::chat`] (system string or text blocks → a system message;
//! `tool_use` blocks → assistant `tool_calls`; `tool_result` blocks → `tool`
//! messages; `stop_sequences` → `stop`; `tools[].input_schema` →
//! `parameters`; `tool_choice` auto/any/tool/none; `thinking.type` →
//! `enable_thinking`), which renders, validates, queues and decodes it
//! (reasoning split, tool-call parsing). The reply is translated back:
//! `thinking`, `text` and `tool_use` content blocks, `stop_reason`
//! end_turn/max_tokens/tool_use, usage in input/output tokens; streamed as
//! Anthropic's event sequence. Errors use Anthropic's shape
//! `{"type": "error", "error": {"type", "message"}}`.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::State,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{
    chat,
    error::ApiError,
    extract::ApiJson,
    jobs::sse_channel,
    privacy,
    protocol::{ChatCompletion, ChatCompletionRequest},
    state::AppState,
};

/// Whether `path` is one of the Anthropic routes (whose clients expect
/// Anthropic's error shape).
pub fn is_anthropic_path(path: &str) -> bool {
    let path = path.strip_prefix("/v1").unwrap_or(path);
    path == "/messages" || path.starts_with("/messages/")
}

/// Anthropic's `error.type` for an HTTP status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 405 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// `{"type": "error", "error": {"type", "message"}}`, the JSON of an error.
pub fn error_json(error: &ApiError) -> serde_json::Value {
    json!({
        "type": "error",
        "error": {"type": error_type(error.status), "message": error.message},
    })
}

/// An [`ApiError`] as Anthropic's error response (same status and
/// `Retry-After`).
pub fn error_response(error: ApiError) -> Response {
    let mut response = (error.status, Json(error_json(&error))).into_response();
    if let Some(retry) = error.retry_after {
        let seconds = retry.as_secs_f64().ceil().max(1.0) as u64;
        if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }
    response
}

// ------------------------------------------------------------ the routes

/// `POST /v1/messages`.
pub async fn messages(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    request: Result<ApiJson<Value>, ApiError>,
) -> Response {
    match messages_inner(state, &headers, request).await {
        Ok(response) => response,
        Err(error) => error_response(error),
    }
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the prompt as
/// `/v1/messages` would render it.
pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    request: Result<ApiJson<Value>, ApiError>,
) -> Response {
    let result = async {
        let ApiJson(body) = request?;
        let chat = to_chat_request(&body, true)?;
        state.resolve_model(privacy::split_model(chat.model.as_deref()).0)?;
        let prompt = chat::chat_prompt(&state, &chat).await?;
        Ok::<_, ApiError>(Json(json!({"input_tokens": prompt.tokens.len()})).into_response())
    }
    .await;
    result.unwrap_or_else(error_response)
}

async fn messages_inner(
    state: Arc<AppState>,
    headers: &HeaderMap,
    request: Result<ApiJson<Value>, ApiError>,
) -> Result<Response, ApiError> {
    let ApiJson(body) = request?;
    let chat = to_chat_request(&body, false)?;
    let stream = chat.stream == Some(true);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(&state.model_id)
        .to_string();
    // Anonymization opt-in, as on the OpenAI routes (docs/privacy.md).
    let (_, private_alias) = privacy::split_model(chat.model.as_deref());
    let privacy = privacy::for_request(headers, private_alias).await?;
    let started = chat::start_chat(state, chat, privacy).await?;
    let masked = started.masked_count();
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    if stream {
        let input_tokens = started.prompt_tokens();
        let frames = started.stream();
        let (tx, mut response) = sse_channel();
        tokio::spawn(translate_stream(frames, tx, id, model, input_tokens));
        privacy::mark_response(&mut response, masked);
        Ok(response)
    } else {
        let completion = started.collect().await?;
        let mut response = Json(message_from_completion(&completion, id, model)).into_response();
        privacy::mark_response(&mut response, masked);
        Ok(response)
    }
}

// ------------------------------------------------------------ request

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid_param(param, message)
}

/// Text of a `system` field or a `tool_result` content: a string or a list
/// of text blocks.
fn blocks_text(value: &Value, param: &str) -> Result<String, ApiError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(blocks) => {
            let mut parts = Vec::new();
            for (i, block) in blocks.iter().enumerate() {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => parts.push(
                        block
                            .get("text")
                            .and_then(Value::as_str)
                            .ok_or_else(|| {
                                invalid(param, format!("{param}[{i}].text must be a string."))
                            })?
                            .to_string(),
                    ),
                    other => {
                        return Err(invalid(
                            param,
                            format!(
                                "{param}[{i}]: blocks of type {other:?} are not supported here \
                                 (text only)."
                            ),
                        ))
                    }
                }
            }
            Ok(parts.join("\n"))
        }
        _ => Err(invalid(
            param,
            format!("`{param}` must be a string or a list of blocks."),
        )),
    }
}

/// One Anthropic message as OpenAI-style messages (a user turn with tool
/// results becomes `tool` messages first, then the user's text).
fn convert_message(index: usize, message: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let param = format!("messages[{index}]");
    let role = message.get("role").and_then(Value::as_str);
    let role = match role {
        Some(r @ ("user" | "assistant")) => r,
        _ => {
            return Err(invalid(
                &format!("{param}.role"),
                format!("{param}.role must be \"user\" or \"assistant\"."),
            ))
        }
    };
    let content = message.get("content").unwrap_or(&Value::Null);
    let blocks = match content {
        Value::String(s) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        _ => {
            return Err(invalid(
                &format!("{param}.content"),
                format!("{param}.content must be a string or a list of content blocks."),
            ))
        }
    };
    let mut text = Vec::new();
    let mut tool_calls = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let bparam = format!("{param}.content[{j}]");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(&bparam, format!("{bparam}.text must be a string.")))?
                    .to_string(),
            ),
            // Earlier thinking is not shown to the model again.
            Some("thinking" | "redacted_thinking") => {}
            Some("tool_use") if role == "assistant" => {
                let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(&bparam, format!("{bparam}.name must be a string.")))?;
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                tool_calls.push(json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}}));
            }
            Some("tool_result") if role == "user" => {
                let id = block
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let result = blocks_text(block.get("content").unwrap_or(&Value::Null), &bparam)?;
                out.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
            }
            other => {
                return Err(invalid(
                    &bparam,
                    format!("Content blocks of type {other:?} are not supported in a {role} turn."),
                ))
            }
        }
    }
    if !text.is_empty() || !tool_calls.is_empty() || role == "assistant" {
        let mut m = json!({"role": role, "content": text.join("\n")});
        if !tool_calls.is_empty() {
            m["tool_calls"] = Value::Array(tool_calls);
        }
        out.push(m);
    }
    Ok(())
}

/// An Anthropic Messages request as the chat request the engine path takes.
/// `count_only`: `max_tokens` is not required (count_tokens).
fn to_chat_request(body: &Value, count_only: bool) -> Result<ChatCompletionRequest, ApiError> {
    let Some(object) = body.as_object() else {
        return Err(ApiError::invalid("The request body must be a JSON object."));
    };
    let max_tokens = match object.get("max_tokens") {
        Some(v) => Some(v.as_u64().filter(|&n| n >= 1).ok_or_else(|| {
            invalid(
                "max_tokens",
                "`max_tokens` must be an integer of at least 1.",
            )
        })?),
        None if count_only => None,
        None => return Err(invalid("max_tokens", "`max_tokens` is required.")),
    };
    let mut messages = Vec::new();
    if let Some(system) = object.get("system") {
        let text = blocks_text(system, "system")?;
        if !text.is_empty() {
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    let Some(list) = object.get("messages").and_then(Value::as_array) else {
        return Err(invalid("messages", "`messages` must be a list."));
    };
    if list.is_empty() {
        return Err(invalid(
            "messages",
            "`messages` must hold at least one message.",
        ));
    }
    for (i, m) in list.iter().enumerate() {
        convert_message(i, m, &mut messages)?;
    }
    let mut chat = json!({"messages": messages});
    for key in ["model", "temperature", "top_p", "top_k", "stream"] {
        if let Some(v) = object.get(key).filter(|v| !v.is_null()) {
            chat[key] = v.clone();
        }
    }
    if let Some(n) = max_tokens {
        chat["max_tokens"] = json!(n);
    }
    if chat["stream"] == json!(true) {
        // The final usage feeds `message_delta.usage`.
        chat["stream_options"] = json!({"include_usage": true});
    }
    // Anthropic's default temperature is 1, like OpenAI's.
    if let Some(stops) = object.get("stop_sequences").filter(|v| !v.is_null()) {
        chat["stop"] = stops.clone();
    }
    if let Some(tools) = object.get("tools").and_then(Value::as_array) {
        let converted: Result<Vec<Value>, ApiError> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let name = t.get("name").and_then(Value::as_str).ok_or_else(|| {
                    invalid(&format!("tools[{i}].name"), "Every tool needs a `name`.")
                })?;
                Ok(json!({"type": "function", "function": {
                    "name": name,
                    "description": t.get("description").cloned().unwrap_or(Value::Null),
                    "parameters": t.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"})),
                }}))
            })
            .collect();
        chat["tools"] = Value::Array(converted?);
    }
    if let Some(choice) = object.get("tool_choice").filter(|v| !v.is_null()) {
        chat["tool_choice"] = match choice.get("type").and_then(Value::as_str) {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => json!({"type": "function", "function": {"name":
                choice.get("name").cloned().unwrap_or(Value::Null)}}),
            _ => {
                return Err(invalid(
                    "tool_choice",
                    "`tool_choice.type` must be auto, any, tool or none.",
                ))
            }
        };
    }
    if let Some(thinking) = object.get("thinking").and_then(|t| t.get("type")) {
        chat["enable_thinking"] = json!(thinking == "enabled");
    }
    serde_json::from_value(chat).map_err(|e| ApiError::invalid(format!("Invalid request: {e}")))
}

// ------------------------------------------------------------ responses

/// Anthropic's `stop_reason` and `stop_sequence` for the chat path's
/// `finish_reason` and `stop_reason` (the stop string that matched).
fn stop_reason(finish: &str, stop_string: Option<&str>) -> (&'static str, Value) {
    match (finish, stop_string) {
        ("length", _) => ("max_tokens", Value::Null),
        ("tool_calls", _) => ("tool_use", Value::Null),
        ("stop", Some(stop)) => ("stop_sequence", Value::String(stop.to_string())),
        _ => ("end_turn", Value::Null),
    }
}

/// `toolu_` ids for calls (the OpenAI path made `call_` ones).
fn tool_use_id(openai_id: &str) -> String {
    format!("toolu_{}", openai_id.trim_start_matches("call_"))
}

fn tool_input(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| json!({}))
}

fn message_from_completion(completion: &ChatCompletion, id: String, model: String) -> Value {
    let mut content = Vec::new();
    let mut finish = "stop";
    let mut stop_string = None;
    if let Some(choice) = completion.choices.first() {
        finish = choice.finish_reason;
        stop_string = choice.stop_reason.as_deref();
        let m = &choice.message;
        if let Some(thinking) = m.reasoning_content.as_deref().filter(|t| !t.is_empty()) {
            content.push(json!({"type": "thinking", "thinking": thinking, "signature": ""}));
        }
        if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty()) {
            content.push(json!({"type": "text", "text": text}));
        }
        for call in m.tool_calls.iter().flatten() {
            content.push(json!({"type": "tool_use", "id": tool_use_id(&call.id),
                "name": call.function.name, "input": tool_input(&call.function.arguments)}));
        }
    }
    let (reason, sequence) = stop_reason(finish, stop_string);
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": {
            "input_tokens": completion.usage.prompt_tokens,
            "output_tokens": completion.usage.completion_tokens,
        },
    })
}

fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// The open content block of a streamed message.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Thinking,
    Text,
    /// The tool call of this OpenAI `tool_calls[].index`.
    ToolUse(u64),
}

/// Re-encodes the OpenAI chunk stream of the chat path as Anthropic's
/// events: `message_start`, `ping`, per block `content_block_start` /
/// `content_block_delta` (`thinking_delta`, `text_delta`,
/// `input_json_delta`, one per streamed piece of a call's arguments) /
/// `content_block_stop`, then `message_delta` (stop reason, usage) and
/// `message_stop`.
async fn translate_stream(
    mut frames: mpsc::Receiver<Bytes>,
    tx: mpsc::Sender<Bytes>,
    id: String,
    model: String,
    input_tokens: usize,
) {
    macro_rules! send {
        ($frame:expr) => {
            if tx.send($frame).await.is_err() {
                return;
            }
        };
    }
    send!(event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0}}})
    ));
    send!(event("ping", &json!({"type": "ping"})));
    let mut index = 0usize;
    let mut open: Option<Block> = None;
    let mut finish: Option<String> = None;
    let mut stop_string: Option<String> = None;
    let mut output_tokens = 0usize;
    while let Some(frame) = frames.recv().await {
        let text = String::from_utf8_lossy(&frame);
        let Some(data) = text.trim().strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(error) = chunk.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error");
            send!(event(
                "error",
                &json!({"type": "error", "error": {"type": "api_error", "message": message}})
            ));
            return;
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            let pieces = [
                (Block::Thinking, delta["reasoning_content"].as_str()),
                (Block::Text, delta["content"].as_str()),
            ];
            for (kind, piece) in pieces {
                let Some(piece) = piece.filter(|p| !p.is_empty()) else {
                    continue;
                };
                if open != Some(kind) {
                    if open.is_some() {
                        send!(event(
                            "content_block_stop",
                            &json!({"type": "content_block_stop", "index": index})
                        ));
                        index += 1;
                    }
                    let block = match kind {
                        Block::Thinking => {
                            json!({"type": "thinking", "thinking": "", "signature": ""})
                        }
                        Block::Text | Block::ToolUse(_) => json!({"type": "text", "text": ""}),
                    };
                    send!(event(
                        "content_block_start",
                        &json!({"type": "content_block_start",
                        "index": index, "content_block": block})
                    ));
                    open = Some(kind);
                }
                let delta = match kind {
                    Block::Thinking => json!({"type": "thinking_delta", "thinking": piece}),
                    Block::Text | Block::ToolUse(_) => json!({"type": "text_delta", "text": piece}),
                };
                send!(event(
                    "content_block_delta",
                    &json!({"type": "content_block_delta",
                    "index": index, "delta": delta})
                ));
            }
            // A call's first delta (with its id) opens a `tool_use` block;
            // every piece of its arguments is an `input_json_delta`.
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let call_index = call["index"].as_u64().unwrap_or(0);
                if let Some(openai_id) = call["id"].as_str() {
                    if open.take().is_some() {
                        send!(event(
                            "content_block_stop",
                            &json!({"type": "content_block_stop", "index": index})
                        ));
                        index += 1;
                    }
                    send!(event(
                        "content_block_start",
                        &json!({"type": "content_block_start",
                        "index": index, "content_block": {"type": "tool_use",
                        "id": tool_use_id(openai_id),
                        "name": call["function"]["name"], "input": {}}})
                    ));
                    open = Some(Block::ToolUse(call_index));
                }
                let arguments = call["function"]["arguments"].as_str().unwrap_or("");
                if !arguments.is_empty() && open == Some(Block::ToolUse(call_index)) {
                    send!(event(
                        "content_block_delta",
                        &json!({"type": "content_block_delta",
                        "index": index, "delta": {"type": "input_json_delta",
                        "partial_json": arguments}})
                    ));
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                finish = Some(reason.to_string());
                stop_string = choice["stop_reason"].as_str().map(str::to_string);
            }
        }
        if let Some(n) = chunk["usage"]["completion_tokens"].as_u64() {
            output_tokens = n as usize;
        }
    }
    if open.is_some() {
        send!(event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index})
        ));
    }
    let (reason, stop_sequence) =
        stop_reason(finish.as_deref().unwrap_or("stop"), stop_string.as_deref());
    send!(event(
        "message_delta",
        &json!({"type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": stop_sequence},
        "usage": {"output_tokens": output_tokens}})
    ));
    send!(event("message_stop", &json!({"type": "message_stop"})));
}
