//! One streaming completion request: body, SSE consumption, raw timings.
//!
//! The request is built the same way for every server (temperature 0,
//! `max_tokens`, `stream_options.include_usage`, optional `ignore_eos`). The
//! response is consumed event by event; every event that carries generated
//! text (`delta.content`, `delta.reasoning_content`/`reasoning`, or
//! completions' `text`) is a *content event* and gets a timestamp measured
//! from the moment the request was written. Nothing here counts tokens: the
//! caller tokenizes the received text afterwards, off the timed path
//! (see [`super::check`]).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{
    config::Api,
    error::RequestError,
    http::Connection,
    sse::{SseEvent, SseParser},
};

/// What to send.
#[derive(Debug, Clone)]
pub struct CompletionRequest<'a> {
    pub api: Api,
    pub model: &'a str,
    pub prompt: &'a str,
    pub max_tokens: usize,
    pub ignore_eos: bool,
}

impl CompletionRequest<'_> {
    /// The JSON body (OpenAI fields plus the widely supported `ignore_eos`).
    pub fn body(&self) -> Value {
        let mut body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        match self.api {
            Api::Chat => body["messages"] = json!([{"role": "user", "content": self.prompt}]),
            Api::Completions => body["prompt"] = json!(self.prompt),
        }
        if self.ignore_eos {
            body["ignore_eos"] = json!(true);
        }
        body
    }

    /// Serialise now, so nothing but the write happens after a gate opens.
    pub fn prepare(&self) -> PreparedRequest {
        PreparedRequest {
            path: self.api.path(),
            body: serde_json::to_vec(&self.body()).expect("a JSON value serialises"),
        }
    }
}

/// A request ready to be written.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    pub path: &'static str,
    pub body: Vec<u8>,
}

/// Everything observed while one response streamed in.
#[derive(Debug, Default)]
pub struct StreamRecord {
    /// Arrival of each content event, measured from the request write.
    pub content_times: Vec<Duration>,
    /// All generated text, in order.
    pub text: String,
    /// The text of each content event (parallel to `content_times`).
    pub pieces: Vec<String>,
    /// SSE events seen (any kind, `[DONE]` included).
    pub events: usize,
    pub comments: u64,
    pub usage_prompt_tokens: Option<u64>,
    pub usage_completion_tokens: Option<u64>,
    pub finish_reason: Option<String>,
    pub done_marker: bool,
    /// The body was plain JSON: the server ignored `stream: true`.
    pub not_streamed: bool,
    /// The stream ended inside an event (no closing blank line).
    pub unterminated_event: bool,
    /// Events whose data was neither JSON nor `[DONE]`.
    pub unparsable_events: usize,
    /// From the request write to the end of the body (or the failure).
    pub end: Option<Duration>,
    pub error: Option<RequestError>,
}

/// Write `request` on `connection` (already open) and consume the stream.
/// `on_content` is called with the running count of content events (the
/// interference scenario uses it to time its next request). Returns the
/// instant the request was written and the record; failures are recorded,
/// not returned.
pub async fn stream_completion(
    connection: Connection,
    request: PreparedRequest,
    api_key: Option<&str>,
    timeout: Duration,
    mut on_content: impl FnMut(usize),
) -> (Instant, StreamRecord) {
    let sent = Instant::now();
    let mut record = StreamRecord::default();
    let outcome = tokio::time::timeout(
        timeout,
        consume(
            connection,
            request.path,
            request.body,
            api_key,
            sent,
            &mut record,
            &mut on_content,
        ),
    )
    .await;
    record.end = Some(sent.elapsed());
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => record.error = Some(e),
        Err(_) => record.error = Some(RequestError::Timeout(timeout.as_secs_f64())),
    }
    (sent, record)
}

async fn consume(
    connection: Connection,
    path: &str,
    body: Vec<u8>,
    api_key: Option<&str>,
    sent: Instant,
    record: &mut StreamRecord,
    on_content: &mut impl FnMut(usize),
) -> Result<(), RequestError> {
    let mut response = connection.send(path, body, api_key).await?;
    if response.status != 200 {
        let status = response.status;
        let text = response.text(2_000).await.unwrap_or_default();
        return Err(RequestError::Status {
            status,
            body: text.trim().to_owned(),
        });
    }
    if response.content_type.starts_with("application/json") {
        // The server answered in one piece: record it, flag it.
        let at = Instant::now();
        let text = response.text(64 * 1024 * 1024).await?;
        record.not_streamed = true;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| RequestError::Http(format!("JSON body: {e}")))?;
        apply_payload(&value, at.max(sent) - sent, record, on_content)?;
        return Ok(());
    }
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    while let Some((at, bytes)) = response.next_chunk().await? {
        parser.feed(&bytes, &mut events);
        for event in events.drain(..) {
            if apply_event(&event, at - sent, record, on_content)? {
                record.comments = parser.comments();
                return Ok(());
            }
        }
    }
    record.comments = parser.comments();
    if let Some(event) = parser.finish() {
        record.unterminated_event = true;
        apply_event(&event, sent.elapsed(), record, on_content)?;
    }
    Ok(())
}

/// Apply one SSE event; `Ok(true)` after `[DONE]`.
fn apply_event(
    event: &SseEvent,
    at: Duration,
    record: &mut StreamRecord,
    on_content: &mut impl FnMut(usize),
) -> Result<bool, RequestError> {
    record.events += 1;
    let data = event.data.trim();
    if data == "[DONE]" {
        record.done_marker = true;
        return Ok(true);
    }
    let Ok(value) = serde_json::from_str::<Value>(data) else {
        record.unparsable_events += 1;
        return Ok(false);
    };
    if event.event.as_deref() == Some("error") && value.get("error").is_none() {
        return Err(RequestError::Stream(data.chars().take(500).collect()));
    }
    apply_payload(&value, at, record, on_content)?;
    Ok(false)
}

/// Fold one chunk (or a whole non-streamed response) into the record.
fn apply_payload(
    value: &Value,
    at: Duration,
    record: &mut StreamRecord,
    on_content: &mut impl FnMut(usize),
) -> Result<(), RequestError> {
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string());
        return Err(RequestError::Stream(message));
    }
    let mut piece = String::new();
    for choice in value
        .get("choices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let parts = [
            choice.pointer("/delta/reasoning_content"),
            choice.pointer("/delta/reasoning"),
            choice.pointer("/delta/content"),
            choice.pointer("/message/reasoning_content"),
            choice.pointer("/message/content"),
            choice.get("text"),
        ];
        for part in parts.into_iter().flatten() {
            if let Some(text) = part.as_str() {
                piece.push_str(text);
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            record.finish_reason = Some(reason.to_owned());
        }
    }
    if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
        if let Some(n) = usage.get("prompt_tokens").and_then(Value::as_u64) {
            record.usage_prompt_tokens = Some(n);
        }
        if let Some(n) = usage.get("completion_tokens").and_then(Value::as_u64) {
            record.usage_completion_tokens = Some(n);
        }
    }
    if !piece.is_empty() {
        record.text.push_str(&piece);
        record.pieces.push(piece);
        record.content_times.push(at);
        on_content(record.content_times.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply_all(datas: &[&str]) -> StreamRecord {
        let mut record = StreamRecord::default();
        for (i, data) in datas.iter().enumerate() {
            let event = SseEvent {
                data: (*data).to_owned(),
                ..Default::default()
            };
            let done = apply_event(
                &event,
                Duration::from_millis(i as u64),
                &mut record,
                &mut |_| {},
            )
            .unwrap();
            if done {
                break;
            }
        }
        record
    }

    #[test]
    fn chat_chunks_usage_and_done() {
        let record = apply_all(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#,
            "[DONE]",
            r#"{"choices":[{"delta":{"content":"after done"}}]}"#,
        ]);
        assert_eq!(record.text, "Hello");
        assert_eq!(record.content_times.len(), 2);
        assert_eq!(record.finish_reason.as_deref(), Some("length"));
        assert_eq!(record.usage_prompt_tokens, Some(9));
        assert_eq!(record.usage_completion_tokens, Some(2));
        assert!(record.done_marker);
        assert_eq!(record.events, 7);
    }

    #[test]
    fn completions_and_reasoning_count_as_content() {
        let record = apply_all(&[
            r#"{"choices":[{"text":"a"}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning":"more"}}]}"#,
            "not json",
        ]);
        assert_eq!(record.text, "athinkmore");
        assert_eq!(record.content_times.len(), 3);
        assert_eq!(record.unparsable_events, 1);
        assert!(!record.done_marker);
    }

    #[test]
    fn error_payload_is_an_error() {
        let mut record = StreamRecord::default();
        let event = SseEvent {
            data: r#"{"error":{"message":"boom","type":"server_error"}}"#.into(),
            ..Default::default()
        };
        let err = apply_event(&event, Duration::ZERO, &mut record, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("boom"));
    }

    #[test]
    fn body_shapes() {
        let chat = CompletionRequest {
            api: Api::Chat,
            model: "m",
            prompt: "hi",
            max_tokens: 5,
            ignore_eos: true,
        }
        .body();
        assert_eq!(chat["messages"][0]["content"], "hi");
        assert_eq!(chat["stream_options"]["include_usage"], true);
        assert_eq!(chat["ignore_eos"], true);
        assert_eq!(chat["temperature"], 0.0);
        let completion = CompletionRequest {
            api: Api::Completions,
            model: "m",
            prompt: "hi",
            max_tokens: 5,
            ignore_eos: false,
        }
        .body();
        assert_eq!(completion["prompt"], "hi");
        assert!(completion.get("ignore_eos").is_none());
        assert!(completion.get("messages").is_none());
    }
}
