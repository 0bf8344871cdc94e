//! From scheduler events to what a response shows, shared by both endpoints
//! and by streamed and whole responses.
//!
//! One [`ChoiceDecoder`] per choice turns each sampled token into a
//! [`TokenStep`]: the text it makes final (through
//! [`TextStream`](crate::engine::text::TextStream): no split characters, stop
//! strings held back and cut), split into reasoning and content when the
//! model thinks, and whether the choice is over (end-of-sequence, a stop
//! string, a stop token id). [`next_event`] merges the event channels of a
//! request's jobs fairly. [`TokenLabels`] names tokens for logprobs.
//!
//! Counting rule: every token the engine sampled for a choice counts, the
//! one that completes a stop string or is an end-of-sequence token included,
//! none after it. A streamed choice sends exactly one chunk per counted token
//! except a final end-of-sequence token, whose place is the finish chunk.

use std::{collections::HashMap, future::poll_fn, task::Poll};

use hearth_models::{tokenizer::TokenizerError, Tokenizer};

use super::{
    error::ApiError,
    privacy::OutputRestorer,
    reasoning::{ReasoningSplitter, SplitDelta},
    tool_parser::{CallPiece, ToolCall, ToolCallParser},
};
use crate::{
    engine::{
        constraint::{byte_fallback_byte as byte_fallback, byte_level_bytes},
        sampling::Sampled,
        text::TextStream,
    },
    scheduler::{Failure, FailureKind, FinishReason, JobEvent, JobHandle, JobSummary},
};

/// How a choice ended, in OpenAI's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChoiceEnd {
    /// End-of-sequence, a stop string or a stop token.
    Stop,
    /// `max_tokens` or the context filled up.
    Length,
    /// The model called tools (chat with `tools`).
    ToolCalls,
}

impl ChoiceEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            ChoiceEnd::Stop => "stop",
            ChoiceEnd::Length => "length",
            ChoiceEnd::ToolCalls => "tool_calls",
        }
    }

    /// How the engine ended a job. A job the engine cancelled itself (we
    /// drop handles, so that is a shutdown) was cut short: an error for the
    /// client, not a normal finish.
    pub fn from_summary(summary: &JobSummary) -> Result<Self, ApiError> {
        match summary.reason {
            FinishReason::Stop => Ok(ChoiceEnd::Stop),
            FinishReason::Length => Ok(ChoiceEnd::Length),
            FinishReason::Cancelled => Err(ApiError::shutting_down()
                .with_message("The server is shutting down; this generation was cut short.")),
        }
    }
}

/// The error for a `JobEvent::Failed`: the engine failed (500), the
/// device had no memory to spare for the job (503), or it stopped because
/// the server is shutting down (503).
pub fn failure(failure: &Failure, shutting_down: bool) -> ApiError {
    let message = &failure.message;
    if shutting_down {
        return ApiError::shutting_down()
            .with_message(format!("The server is shutting down: {message}."));
    }
    match failure.kind {
        FailureKind::Engine => ApiError::internal(format!("generation failed: {message}")),
        FailureKind::DeviceMemory => ApiError::device_memory(message),
    }
}

/// What one token adds to a choice.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TokenStep {
    /// Text made final by this token (split by channel when thinking).
    pub text: SplitDelta,
    /// The token ended the choice (end-of-sequence, stop string or stop
    /// token): no further token will be read.
    pub stopped: bool,
    /// The token is an end-of-sequence token that ended the choice: it is
    /// counted but has no text, logprobs entry or chunk of its own.
    pub is_eos: bool,
}

/// Per-choice decoding state.
pub struct ChoiceDecoder<'t> {
    text: TextStream<'t>,
    /// The stop strings (to name the one that ended the choice).
    stops: Vec<String>,
    reasoning: Option<ReasoningSplitter>,
    /// Tool calls are parsed out of the content (chat with `tools`).
    tools: Option<ToolCallParser>,
    /// Calls parsed and not yet taken ([`ChoiceDecoder::take_calls`]).
    new_calls: Vec<ToolCall>,
    /// Call pieces not yet taken ([`ChoiceDecoder::take_pieces`]).
    new_pieces: Vec<CallPiece>,
    /// Calls taken so far (the index of the next one).
    calls_taken: usize,
    eos_token_ids: &'t [u32],
    stop_at_eos: bool,
    stop_token_ids: &'t [u32],
    /// Puts masked values back (anonymized requests), after the stop and
    /// thinking logic, which work on the text the model wrote.
    restorer: Option<OutputRestorer>,
    /// Tokens received (the engine's count for this choice so far).
    pub tokens: usize,
    /// Set once the choice ended on our side (stop string, stop token, EOS).
    pub stopped: bool,
}

impl<'t> ChoiceDecoder<'t> {
    pub fn new(
        tokenizer: &'t Tokenizer,
        stops: &[String],
        stop_token_ids: &'t [u32],
        eos_token_ids: &'t [u32],
        stop_at_eos: bool,
        reasoning: Option<ReasoningSplitter>,
    ) -> Self {
        ChoiceDecoder {
            text: TextStream::new(tokenizer, stops),
            stops: stops.to_vec(),
            reasoning,
            tools: None,
            new_calls: Vec::new(),
            new_pieces: Vec::new(),
            calls_taken: 0,
            eos_token_ids,
            stop_at_eos,
            stop_token_ids,
            restorer: None,
            tokens: 0,
            stopped: false,
        }
    }

    /// Restores placeholders in everything this decoder emits.
    pub fn with_restorer(mut self, restorer: Option<OutputRestorer>) -> Self {
        self.restorer = restorer;
        self
    }

    /// Parses tool calls out of the content with `parser`.
    pub fn with_tools(mut self, parser: Option<ToolCallParser>) -> Self {
        self.tools = parser;
        self
    }

    /// Tool calls completed since the last call.
    /// Placeholders in their arguments are restored when the request was
    /// anonymized.
    pub fn take_calls(&mut self) -> Vec<ToolCall> {
        let mut calls = std::mem::take(&mut self.new_calls);
        // A whole response takes calls, not pieces.
        self.new_pieces.clear();
        self.calls_taken += calls.len();
        if let Some(restorer) = &mut self.restorer {
            for call in &mut calls {
                call.arguments = restorer.restore_arguments(&call.arguments);
            }
        }
        calls
    }

    /// The stop string that ended the choice, if one did.
    pub fn stop_sequence(&self) -> Option<&str> {
        let index = self.text.matched_stop()?;
        self.stops.get(index).map(String::as_str)
    }

    /// Streamed tool-call pieces since the last call (a stream takes these
    /// instead of [`ChoiceDecoder::take_calls`]). An anonymized request's
    /// calls go out whole when complete, restored: a placeholder cut
    /// across pieces could not be.
    pub fn take_pieces(&mut self) -> Vec<CallPiece> {
        if self.restorer.is_none() {
            self.new_calls.clear();
            return std::mem::take(&mut self.new_pieces);
        }
        let first = self.calls_taken;
        let calls = self.take_calls();
        self.new_pieces.clear();
        calls
            .into_iter()
            .enumerate()
            .map(|(k, call)| CallPiece {
                index: first + k,
                name: Some(call.name),
                arguments: call.arguments,
            })
            .collect()
    }

    /// Whether the choice made any tool call.
    pub fn made_calls(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| t.calls_seen() > 0)
    }

    /// How a choice that ended on `end` is reported: `tool_calls` when it
    /// stopped after calling tools.
    pub fn report_end(&self, end: ChoiceEnd) -> ChoiceEnd {
        if end == ChoiceEnd::Stop && self.made_calls() {
            ChoiceEnd::ToolCalls
        } else {
            end
        }
    }

    /// Feeds one sampled token. Call only while `!self.stopped`.
    pub fn push(&mut self, sampled: &Sampled) -> Result<TokenStep, TokenizerError> {
        let mut step = self.push_masked(sampled)?;
        if let Some(restorer) = &mut self.restorer {
            step.text = restorer.push(std::mem::take(&mut step.text));
            if step.stopped {
                let rest = restorer.finish();
                step.text.reasoning.push_str(&rest.reasoning);
                step.text.content.push_str(&rest.content);
            }
        }
        Ok(step)
    }

    /// [`Self::push`] before restoring: the text as the model wrote it.
    fn push_masked(&mut self, sampled: &Sampled) -> Result<TokenStep, TokenizerError> {
        self.tokens += 1;
        if self.stop_at_eos && self.eos_token_ids.contains(&sampled.token) {
            self.stopped = true;
            return Ok(TokenStep {
                text: self.flush()?,
                stopped: true,
                is_eos: true,
            });
        }
        let delta = self.text.push(sampled.token)?;
        let mut step = TokenStep {
            text: self.split(&delta.text),
            stopped: delta.stopped,
            is_eos: false,
        };
        if !delta.stopped && self.stop_token_ids.contains(&sampled.token) {
            step.stopped = true;
        }
        if self.tools.as_ref().is_some_and(ToolCallParser::done) {
            // A forced tool call is complete.
            step.stopped = true;
        }
        if step.stopped {
            self.stopped = true;
            let rest = self.flush()?;
            step.text.reasoning.push_str(&rest.reasoning);
            step.text.content.push_str(&rest.content);
        }
        Ok(step)
    }

    /// Everything still held back, once the engine says the job is over.
    pub fn finish(&mut self) -> Result<SplitDelta, TokenizerError> {
        let rest = self.flush()?;
        Ok(match &mut self.restorer {
            Some(restorer) => {
                let mut out = restorer.push(rest);
                let tail = restorer.finish();
                out.reasoning.push_str(&tail.reasoning);
                out.content.push_str(&tail.content);
                out
            }
            None => rest,
        })
    }

    /// Whether the output had a think block (for `reasoning_content`).
    pub fn saw_reasoning(&self) -> bool {
        self.reasoning.as_ref().is_some_and(|r| r.saw_reasoning())
    }

    /// Whether the text now goes to reasoning.
    pub fn in_reasoning(&self) -> bool {
        self.reasoning.as_ref().is_some_and(|r| r.in_reasoning())
    }

    fn split(&mut self, text: &str) -> SplitDelta {
        let mut out = match &mut self.reasoning {
            Some(splitter) => splitter.push(text),
            None => SplitDelta {
                reasoning: String::new(),
                content: text.to_string(),
            },
        };
        out.content = self.parse_tools(&out.content);
        out
    }

    /// Content through the tool-call parser, if any: the plain text back,
    /// the calls kept for [`ChoiceDecoder::take_calls`].
    fn parse_tools(&mut self, content: &str) -> String {
        match &mut self.tools {
            Some(parser) => {
                let delta = parser.push(content);
                self.new_calls.extend(delta.calls);
                self.new_pieces.extend(delta.pieces);
                delta.text
            }
            None => content.to_string(),
        }
    }

    fn flush(&mut self) -> Result<SplitDelta, TokenizerError> {
        let rest = self.text.finish()?;
        let mut out = self.split(&rest);
        if let Some(splitter) = &mut self.reasoning {
            let tail = splitter.finish();
            out.reasoning.push_str(&tail.reasoning);
            let content = self.parse_tools(&tail.content);
            out.content.push_str(&content);
        }
        if let Some(parser) = &mut self.tools {
            let tail = parser.finish();
            self.new_calls.extend(tail.calls);
            self.new_pieces.extend(tail.pieces);
            out.content.push_str(&tail.text);
        }
        Ok(out)
    }
}

/// The next event of any still-open job, taking the jobs in turn so that no
/// choice waits behind another. A job whose channel closed without a final
/// event yields `Failed`. `None` when no job is open.
pub async fn next_event(
    handles: &mut [Option<JobHandle>],
    turn: &mut usize,
) -> Option<(usize, JobEvent)> {
    poll_fn(|cx| {
        let count = handles.len();
        let mut open = false;
        for k in 0..count {
            let i = (*turn + k) % count;
            let Some(handle) = handles[i].as_mut() else {
                continue;
            };
            open = true;
            match handle.events.poll_recv(cx) {
                Poll::Ready(Some(event)) => {
                    *turn = (i + 1) % count;
                    return Poll::Ready(Some((i, event)));
                }
                Poll::Ready(None) => {
                    handles[i] = None;
                    return Poll::Ready(Some((
                        i,
                        JobEvent::Failed(Failure::engine(
                            "the engine stopped before finishing this request",
                        )),
                    )));
                }
                Poll::Pending => {}
            }
        }
        if open {
            Poll::Pending
        } else {
            Poll::Ready(None)
        }
    })
    .await
}

/// Token names and bytes for logprobs, memoised per request.
pub struct TokenLabels<'t> {
    tokenizer: &'t Tokenizer,
    byte_level: bool,
    cache: HashMap<u32, (String, Vec<u8>)>,
}

impl<'t> TokenLabels<'t> {
    pub fn new(tokenizer: &'t Tokenizer) -> Self {
        let byte_level = matches!(
            tokenizer.inner().get_decoder(),
            Some(tokenizers::DecoderWrapper::ByteLevel(_))
        );
        TokenLabels {
            tokenizer,
            byte_level,
            cache: HashMap::new(),
        }
    }

    /// The token's text (lossy where it is part of a character) and its
    /// exact bytes.
    pub fn label(&mut self, id: u32) -> (String, Vec<u8>) {
        if let Some(hit) = self.cache.get(&id) {
            return hit.clone();
        }
        let bytes = self.raw_bytes(id);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        self.cache.insert(id, (text.clone(), bytes.clone()));
        (text, bytes)
    }

    fn raw_bytes(&self, id: u32) -> Vec<u8> {
        let piece = self.tokenizer.id_to_token(id);
        if let Some(piece) = &piece {
            if self.byte_level && !self.tokenizer.is_special(id) {
                if let Some(bytes) = byte_level_bytes(piece) {
                    return bytes;
                }
            }
            if let Some(byte) = byte_fallback(piece) {
                return vec![byte];
            }
        }
        match self.tokenizer.decode(&[id], false) {
            Ok(text) => text.into_bytes(),
            Err(_) => piece.unwrap_or_default().into_bytes(),
        }
    }
}

/// Logprobs can be `-inf` (a banned token forced by a bias); JSON cannot
/// carry that, so clamp like OpenAI does.
pub fn finite_logprob(value: f32) -> f32 {
    if value.is_nan() {
        -9999.0
    } else {
        value.max(-9999.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_map_to_their_statuses() {
        use axum::http::StatusCode;
        let engine = Failure::engine("engine error: boom");
        assert_eq!(
            failure(&engine, false).status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
        let memory = Failure::device_memory("1 MiB free");
        let e = failure(&memory, false);
        assert_eq!(
            (e.status, e.code),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("insufficient_device_memory")
            )
        );
        // Draining wins over either.
        assert_eq!(failure(&engine, true).code, Some("shutting_down"));
        assert_eq!(failure(&memory, true).code, Some("shutting_down"));
    }

    #[test]
    fn byte_level_alphabet_round_trips() {
        assert_eq!(byte_level_bytes("Hello"), Some(b"Hello".to_vec()));
        // 'Ġ' (U+0120) is the space: the 33rd non-printable byte (0x20).
        assert_eq!(byte_level_bytes("Ġworld"), Some(b" world".to_vec()));
        // 'Ċ' (U+010A) is the newline.
        assert_eq!(byte_level_bytes("Ċ"), Some(b"\n".to_vec()));
        // A lone UTF-8 lead byte, e.g. 0xE4 ('ä' in the alphabet).
        assert_eq!(byte_level_bytes("ä"), Some(vec![0xE4]));
        assert_eq!(byte_level_bytes("€"), None);
    }

    #[test]
    fn byte_fallback_tokens() {
        assert_eq!(byte_fallback("<0x0A>"), Some(b'\n'));
        assert_eq!(byte_fallback("<0xZZ>"), None);
        assert_eq!(byte_fallback("<s>"), None);
    }

    #[test]
    fn logprobs_stay_finite() {
        assert_eq!(finite_logprob(f32::NEG_INFINITY), -9999.0);
        assert_eq!(finite_logprob(f32::NAN), -9999.0);
        assert_eq!(finite_logprob(-0.5), -0.5);
    }
}
