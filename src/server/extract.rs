//! The request-body extractor: JSON parsed with OpenAI-shaped errors.
//!
//! axum's own `Json` extractor answers bad input with plain-text bodies and
//! requires a JSON content type; [`ApiJson`] accepts any content type (curl
//! users forget it), enforces the configured body limit (413) and turns every
//! parse failure into a 400 [`ApiError`] naming the field at fault.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::{rejection::JsonRejection, FromRequest, Request},
    http::StatusCode,
    Json,
};
use serde::de::DeserializeOwned;

use super::{error::ApiError, state::AppState};

/// A JSON request body of type `T`.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T> FromRequest<Arc<AppState>> for ApiJson<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let limit = state.settings.max_body_bytes;
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::body_too_large(limit)
            } else {
                ApiError::invalid(format!("Could not read the request body: {rejection}"))
            }
        })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses `bytes` as a `T`, with OpenAI-style errors.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "The request body is empty; expected a JSON object.",
        ));
    }
    match Json::<T>::from_bytes(bytes) {
        Ok(Json(value)) => Ok(value),
        Err(JsonRejection::JsonSyntaxError(e)) => Err(ApiError::invalid(format!(
            "We could not parse the JSON body of your request: {}. The body must be a JSON \
             object.",
            inner_message(&e.body_text())
        ))),
        Err(JsonRejection::JsonDataError(e)) => Err(data_error(&inner_message(&e.body_text()))),
        Err(other) => Err(ApiError::invalid(format!(
            "Invalid request body: {}",
            other.body_text()
        ))),
    }
}

/// The serde message without axum's generic prefix.
fn inner_message(body_text: &str) -> String {
    match body_text.split_once(": ") {
        Some((prefix, rest)) if prefix.starts_with("Failed to") => rest.to_string(),
        _ => body_text.to_string(),
    }
}

/// A type error, with the field named when serde's path says which one
/// (`temperature: invalid type: ...`) or the message quotes it
/// (``missing field `messages` ``).
fn data_error(message: &str) -> ApiError {
    let looks_like_path = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '-'))
    };
    if let Some((path, rest)) = message.split_once(": ") {
        if looks_like_path(path) && path != "." {
            return ApiError::invalid_param(path, format!("Invalid value for `{path}`: {rest}"));
        }
    }
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|r| r.split('`').next())
    {
        return ApiError::invalid_param(field, format!("Missing required parameter: `{field}`."));
    }
    ApiError::invalid(format!("Invalid request body: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::protocol::ChatCompletionRequest;

    fn err(body: &str) -> ApiError {
        parse_json::<ChatCompletionRequest>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn syntax_errors_are_400() {
        for body in ["", "   ", "{", "{\"model\": }", "not json", "{} trailing"] {
            let e = err(body);
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.kind, "invalid_request_error");
        }
    }

    #[test]
    fn type_errors_name_the_field() {
        let e = err(r#"{"messages": [], "temperature": "hot"}"#);
        assert_eq!(e.param.as_deref(), Some("temperature"), "{e}");
        let e = err(r#"{"messages": [], "n": 1.5}"#);
        assert_eq!(e.param.as_deref(), Some("n"), "{e}");
        let e = err(r#"{"messages": [], "max_tokens": -1}"#);
        assert_eq!(e.param.as_deref(), Some("max_tokens"), "{e}");
        let e = err(r#"{"model": "m"}"#);
        assert_eq!(e.param.as_deref(), Some("messages"), "{e}");
        let e = err(r#"[1, 2]"#);
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
    }

    proptest::proptest! {
        /// Arbitrary bodies never panic: they parse, or fail with a 400.
        #[test]
        fn arbitrary_bodies_never_panic(body in ".{0,200}") {
            if let Err(e) = parse_json::<ChatCompletionRequest>(body.as_bytes()) {
                proptest::prop_assert_eq!(e.status, StatusCode::BAD_REQUEST);
            }
        }

        /// Arbitrary values of the numeric fields validate or fail with a 400.
        #[test]
        fn arbitrary_parameters_never_panic(
            temperature in proptest::num::f32::ANY,
            top_p in proptest::num::f32::ANY,
            top_k in proptest::num::i64::ANY,
            n in proptest::num::u32::ANY,
            max_tokens in proptest::num::u64::ANY,
            top_logprobs in proptest::num::u32::ANY,
            bias in proptest::num::f32::ANY,
        ) {
            let body = serde_json::json!({
                "messages": [{"role": "user", "content": "x"}],
                "temperature": temperature, "top_p": top_p, "top_k": top_k, "n": n,
                "max_tokens": max_tokens, "logprobs": true, "top_logprobs": top_logprobs,
                "logit_bias": {"5": bias},
            });
            if let Ok(request) = parse_json::<ChatCompletionRequest>(body.to_string().as_bytes()) {
                let result = request.raw_options().and_then(|raw| raw.validate(100, 16));
                if let Err(e) = result {
                    proptest::prop_assert_eq!(e.status, StatusCode::BAD_REQUEST);
                }
            }
        }
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let r: ChatCompletionRequest =
            parse_json(br#"{"messages": [], "store": true, "metadata": {"a": 1}}"#)
                .expect("parses");
        assert!(r.messages.is_empty());
    }
}
