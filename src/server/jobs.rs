//! Turning a validated request into scheduler jobs, and the pieces both
//! endpoints use around them: the SSE body and the token-count bookkeeping.

use std::{convert::Infallible, sync::Arc};

use axum::{
    body::{Body, Bytes},
    http::{header, HeaderValue, StatusCode},
    response::Response,
};
use futures_util::stream;
use hearth_models::tokenizer::TokenizerError;
use serde::Serialize;
use tokio::sync::mpsc;

use super::{
    error::ApiError,
    protocol::{GenerationOptions, Usage},
    state::AppState,
};
use crate::scheduler::{Job, JobHandle, JobSummary, SubmitError};

/// Frames buffered between a streaming task and the connection.
const SSE_BUFFER: usize = 64;

/// Submits `options.n` jobs for one prompt; choice `k` gets
/// `options.sampling_for_choice(first_choice + k)`. All or nothing: on a
/// refusal the jobs already queued are cancelled (their handles dropped).
///
/// Without a client `max_tokens`, a job may run to the end of the context;
/// if that much KV memory can never be had, it is retried with the most
/// tokens that fit.
pub fn submit_choices(
    state: &AppState,
    prompt_tokens: &[u32],
    options: &GenerationOptions,
    first_choice: usize,
    prompt_param: &str,
) -> Result<Vec<JobHandle>, ApiError> {
    let info = state.scheduler.info();
    let room = info
        .context_length
        .saturating_sub(prompt_tokens.len())
        .max(1);
    let mut handles = Vec::with_capacity(options.n);
    for k in 0..options.n {
        let mut job = Job {
            prompt_tokens: prompt_tokens.to_vec(),
            max_tokens: options.max_tokens.unwrap_or(room),
            sampling: options.sampling_for_choice(first_choice + k),
            stop_at_eos: options.stop_at_eos,
        };
        let handle = match state.scheduler.submit(job.clone()) {
            Err(SubmitError::TooLargeForMemory { needed, budget })
                if options.max_tokens.is_none() && info.kv_bytes_per_token > 0 =>
            {
                let fits = (budget.saturating_sub(info.state_bytes_per_sequence)
                    / info.kv_bytes_per_token)
                    .saturating_sub(prompt_tokens.len());
                if fits == 0 {
                    Err(SubmitError::TooLargeForMemory { needed, budget })
                } else {
                    job.max_tokens = fits;
                    state.scheduler.submit(job)
                }
            }
            other => other,
        };
        handles.push(handle.map_err(|e| ApiError::from_submit(e, prompt_param))?);
    }
    Ok(handles)
}

/// Maps a tokenizer failure while preparing a prompt: template problems are
/// the request's fault (400), anything else is ours (500).
pub fn prompt_error(error: TokenizerError) -> ApiError {
    match error {
        TokenizerError::ChatTemplate { source, .. } => {
            ApiError::invalid_param("messages", source.to_string())
        }
        TokenizerError::NoChatTemplate { .. } => ApiError::invalid_param(
            "messages",
            "This model has no chat template; use /v1/completions with a plain prompt.",
        ),
        other => ApiError::internal(format!("tokenizer failed: {other}")),
    }
}

/// Token counts of one finished choice: the engine's summary when it sent
/// one, else what this side counted (a choice ended by a stop string is
/// cancelled, so its summary is not waited for).
#[derive(Debug, Clone, Copy, Default)]
pub struct ChoiceCounts {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
}

impl ChoiceCounts {
    pub fn new(prompt_len: usize, counted: usize, summary: Option<&JobSummary>) -> Self {
        match summary {
            Some(s) => {
                if s.completion_tokens != counted {
                    tracing::warn!(
                        engine = s.completion_tokens,
                        received = counted,
                        "token count mismatch between the engine and the stream"
                    );
                }
                ChoiceCounts {
                    prompt_tokens: s.prompt_tokens,
                    completion_tokens: s.completion_tokens,
                    cached_tokens: s.cached_prompt_tokens,
                }
            }
            None => ChoiceCounts {
                prompt_tokens: prompt_len,
                completion_tokens: counted,
                cached_tokens: 0,
            },
        }
    }
}

/// Usage of a request: each distinct prompt counted once (as OpenAI does
/// for `n > 1`), completions summed over all choices.
pub fn total_usage(choices: &[(usize, ChoiceCounts)]) -> Usage {
    let mut prompt_seen = std::collections::BTreeMap::new();
    let mut completion = 0;
    for (prompt_index, counts) in choices {
        prompt_seen
            .entry(*prompt_index)
            .or_insert((counts.prompt_tokens, counts.cached_tokens));
        completion += counts.completion_tokens;
    }
    let (prompt, cached) = prompt_seen
        .values()
        .fold((0, 0), |(p, c), &(pp, cc)| (p + pp, c + cc));
    Usage::new(prompt, completion, cached)
}

/// One `data:` frame.
pub fn sse_frame<T: Serialize>(value: &T) -> Bytes {
    match serde_json::to_vec(value) {
        Ok(json) => {
            let mut frame = Vec::with_capacity(json.len() + 8);
            frame.extend_from_slice(b"data: ");
            frame.extend_from_slice(&json);
            frame.extend_from_slice(b"\n\n");
            Bytes::from(frame)
        }
        Err(e) => sse_error_frame(&ApiError::internal(format!("encoding a chunk failed: {e}"))),
    }
}

/// An error inside a stream (after the 200 status went out).
pub fn sse_error_frame(error: &ApiError) -> Bytes {
    if error.status.is_server_error() {
        tracing::error!(status = %error.status, message = %error.message, "stream ended by an error");
    }
    let json = serde_json::to_string(&error.body()).unwrap_or_else(|_| {
        r#"{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}"#
            .to_string()
    });
    Bytes::from(format!("data: {json}\n\n"))
}

pub const SSE_DONE: &[u8] = b"data: [DONE]\n\n";

/// A channel whose receiving end is the body of an SSE response. When the
/// client goes away the body is dropped, and the sender sees it closed.
pub fn sse_channel() -> (mpsc::Sender<Bytes>, Response) {
    let (tx, rx) = mpsc::channel::<Bytes>(SSE_BUFFER);
    let body = stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|frame| (Ok::<_, Infallible>(frame), rx))
    });
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    (tx, response)
}

/// What a streaming task needs to know about its request.
pub struct StreamContext {
    pub state: Arc<AppState>,
    pub id: String,
    pub created: u64,
    pub options: GenerationOptions,
    pub started: std::time::Instant,
}

impl StreamContext {
    /// A fresh response context; `id_prefix` is `chatcmpl` or `cmpl`.
    pub fn new(state: Arc<AppState>, id_prefix: &str, options: GenerationOptions) -> Self {
        StreamContext {
            state,
            id: format!("{id_prefix}-{}", uuid::Uuid::new_v4().simple()),
            created: super::state::unix_now(),
            options,
            started: std::time::Instant::now(),
        }
    }
}

/// The one log line per finished request (counts and timing, never text).
pub fn log_done(ctx: &StreamContext, endpoint: &'static str, usage: &Usage) {
    tracing::info!(
        id = %ctx.id,
        endpoint,
        n = ctx.options.n,
        stream = ctx.options.stream,
        prompt_tokens = usage.prompt_tokens,
        completion_tokens = usage.completion_tokens,
        elapsed_ms = ctx.started.elapsed().as_millis() as u64,
        "request done"
    );
}
