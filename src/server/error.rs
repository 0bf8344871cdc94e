//! API errors in OpenAI's shape:
//! `{"error": {"message", "type", "param", "code"}}` with the matching HTTP
//! status.
//!
//! Every failure a handler can meet becomes an [`ApiError`]; nothing on a
//! request path panics or answers with a bare status. 500 is reserved for
//! real bugs and engine failures; everything the client can fix is 4xx.

use std::time::Duration;

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Serialize;

use crate::scheduler::SubmitError;

/// When to retry a request refused for want of GPU memory.
const DEVICE_MEMORY_RETRY: Duration = Duration::from_secs(5);

/// One error response.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `not_found_error`, ...
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`, ...).
    pub code: Option<&'static str>,
    /// For 429 and 503: when to try again.
    pub retry_after: Option<Duration>,
}

/// The JSON body of an error.
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Debug, Serialize)]
pub struct ErrorDetail<'a> {
    pub message: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub param: Option<&'a str>,
    pub code: Option<&'a str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is wrong in a way the client can fix.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the field at fault.
    pub fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::invalid(message).with_param(param)
    }

    /// 404 for a model this server does not serve.
    pub fn model_not_found(requested: &str, served: &str) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "The model `{requested}` does not exist on this server. It serves `{served}` \
                 (also reachable as `default`)."
            ),
        )
        .with_param("model");
        e.code = Some("model_not_found");
        e
    }

    /// 404 for an unknown route.
    pub fn route_not_found(method: &str, path: &str) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("Unknown request URL: {method} {path}."),
        );
        e.code = Some("unknown_url");
        e
    }

    /// 405 for a known route called with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        let mut e = Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("Method {method} is not allowed on {path}."),
        );
        e.code = Some("method_not_allowed");
        e
    }

    /// 413 for a body over the configured limit.
    pub fn body_too_large(limit: usize) -> Self {
        let mut e = Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("The request body is larger than this server's limit of {limit} bytes."),
        );
        e.code = Some("request_too_large");
        e
    }

    /// 503 while the server drains before exiting.
    pub fn shutting_down() -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "The server is shutting down.",
        );
        e.code = Some("shutting_down");
        e
    }

    /// 503: the device is unusable (a lost CUDA context) until a restart.
    pub fn device_lost(error: &str) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            format!(
                "The server's GPU is unusable after an engine error ({error}). Every request \
                 fails until the server is restarted."
            ),
        );
        e.code = Some("device_lost");
        e
    }

    /// 503: the GPU had too little free memory for the request while
    /// nothing else ran on this server (other processes hold it).
    pub fn device_memory(detail: &str) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            format!(
                "The GPU has too little free memory for this request right now ({detail}). \
                 Other processes are using it; retry later, or free GPU memory."
            ),
        );
        e.code = Some("insufficient_device_memory");
        e.retry_after = Some(DEVICE_MEMORY_RETRY);
        e
    }

    /// 500: a bug or an engine failure; the message says what failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// Maps a scheduler refusal. `prompt_param` names the request field the
    /// prompt came from (`messages` or `prompt`).
    pub fn from_submit(error: SubmitError, prompt_param: &str) -> Self {
        match error {
            SubmitError::QueueFull {
                queued,
                retry_after,
            } => {
                let mut e = Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    format!(
                        "The server is at capacity ({queued} requests waiting). Retry after {} s.",
                        retry_after_seconds(retry_after)
                    ),
                );
                e.code = Some("rate_limit_exceeded");
                e.retry_after = Some(retry_after);
                e
            }
            SubmitError::PromptTooLong { prompt, context } => Self::invalid(format!(
                "This model's maximum context length is {context} tokens. However, your \
                 request has {prompt} prompt tokens. Please shorten the {prompt_param}."
            ))
            .with_param(prompt_param)
            .with_code("context_length_exceeded"),
            SubmitError::TooLargeForMemory { needed, budget } => Self::invalid(format!(
                "This request needs {needed} bytes of KV cache (prompt plus max_tokens) but \
                 the server's KV memory budget is {budget} bytes. Lower max_tokens or shorten \
                 the {prompt_param}."
            ))
            .with_param("max_tokens")
            .with_code("insufficient_memory"),
            SubmitError::Invalid(message) => Self::invalid(message),
            SubmitError::ShuttingDown => Self::shutting_down(),
            SubmitError::DeviceLost(error) => Self::device_lost(&error),
        }
    }

    /// The JSON body, also used for errors sent inside an SSE stream.
    pub fn body(&self) -> ErrorBody<'_> {
        ErrorBody {
            error: ErrorDetail {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        }
    }
}

/// Whole seconds for `Retry-After`, at least 1.
fn retry_after_seconds(d: Duration) -> u64 {
    d.as_secs_f64().ceil().max(1.0) as u64
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = %self.status, message = %self.message, "request failed");
        } else {
            tracing::debug!(status = %self.status, message = %self.message, "request refused");
        }
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(retry) = self.retry_after {
            if let Ok(value) = HeaderValue::from_str(&retry_after_seconds(retry).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_full_is_429_with_retry_after() {
        let e = ApiError::from_submit(
            SubmitError::QueueFull {
                queued: 3,
                retry_after: Duration::from_millis(1500),
            },
            "messages",
        );
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        let response = e.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn prompt_too_long_names_both_numbers() {
        let e = ApiError::from_submit(
            SubmitError::PromptTooLong {
                prompt: 9000,
                context: 8192,
            },
            "messages",
        );
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("9000") && e.message.contains("8192"));
        assert_eq!(e.param.as_deref(), Some("messages"));
        assert_eq!(e.code, Some("context_length_exceeded"));
    }

    #[test]
    fn a_lost_device_is_503_and_says_restart() {
        let e = ApiError::from_submit(
            SubmitError::DeviceLost("an illegal memory access was encountered".into()),
            "messages",
        );
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.code, Some("device_lost"));
        assert!(e.message.contains("illegal memory access") && e.message.contains("restarted"));
    }

    #[test]
    fn no_gpu_memory_is_503_with_retry_after() {
        let e = ApiError::device_memory("100 MiB free, 300 MiB needed");
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.code, Some("insufficient_device_memory"));
        assert!(e.message.contains("100 MiB free"), "{}", e.message);
        let response = e.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
    }

    #[test]
    fn body_is_openai_shaped() {
        let e = ApiError::invalid_param("temperature", "too hot");
        let json = serde_json::to_value(e.body()).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"error": {
                "message": "too hot", "type": "invalid_request_error",
                "param": "temperature", "code": null
            }})
        );
    }
}
