//! Anthropic's Messages API: `POST /v1/messages` and
//! `POST /v1/messages/count_tokens`, on the same engine as the OpenAI routes.

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde_json::json;

use super::error::ApiError;

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
