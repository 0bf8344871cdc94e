//! `POST /v1/chat/completions`: messages through the chat template, `n`
//! jobs, then one JSON body or an SSE stream of `chat.completion.chunk`s.
//!
//! Stream shape (as OpenAI sends it): per choice a first chunk with
//! `delta.role` (and `content: ""`), one chunk per generated token with its
//! `content` or `reasoning_content` delta (empty while text is held back, so
//! chunks count tokens exactly), a last chunk per choice with an empty delta
//! (or the final held-back text) and `finish_reason`; with
//! `stream_options.include_usage` every chunk carries `usage: null` and one
//! more chunk with no choices carries the usage; then `data: [DONE]`.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
    Json,
};
use hearth_models::{tokenizer::TokenizerError, Tokenizer};
use tokio::sync::mpsc;

use super::{
    error::ApiError,
    extract::ApiJson,
    generation::{
        failure, finite_logprob, next_event, ChoiceDecoder, ChoiceEnd, TokenLabels, TokenStep,
    },
    jobs::{
        log_done, prompt_error, sse_channel, sse_error_frame, sse_frame, submit_choices,
        total_usage, ChoiceCounts, StreamContext, SSE_DONE,
    },
    privacy::{self, RequestPrivacy},
    protocol::{
        ChatChoice, ChatChunk, ChatChunkChoice, ChatCompletion, ChatCompletionRequest, ChatDelta,
        ChatLogprobs, ChatMessageOut, TokenLogprob, TopLogprob, Usage,
    },
    reasoning::{prompt_opens_reasoning, ReasoningSplitter},
    state::AppState,
    structured,
    tool_parser::{CallPiece, ToolCall},
    tools::{self, ToolCallDelta, ToolCallOut, ToolSetup},
};
use crate::{
    engine::sampling::Sampled,
    scheduler::{JobEvent, JobHandle},
};

/// Everything about one chat request after validation.
struct ChatJob {
    ctx: StreamContext,
    prompt_len: usize,
    /// `Some(starts_inside_think_block)` when the model thinks.
    reasoning: Option<bool>,
    /// Set when the request asked for anonymization.
    privacy: Option<RequestPrivacy>,
    /// Tool calls are parsed out of the reply (the request gave `tools`).
    tools: Option<ToolSetup>,
}

impl ChatJob {
    fn decoder<'t>(&'t self, tokenizer: &'t Tokenizer) -> ChoiceDecoder<'t> {
        let options = &self.ctx.options;
        let splitter = match (&self.ctx.state.think_tags, self.reasoning) {
            (Some(tags), Some(starts_inside)) => {
                Some(ReasoningSplitter::new(tags.clone(), starts_inside))
            }
            _ => None,
        };
        ChoiceDecoder::new(
            tokenizer,
            &options.stop,
            &options.stop_token_ids,
            &self.ctx.state.scheduler.info().eos_token_ids,
            options.stop_at_eos,
            splitter,
        )
        .with_restorer(self.privacy.as_ref().map(RequestPrivacy::restorer))
        .with_tools(self.tools.as_ref().map(ToolSetup::parser))
    }

    fn wants_logprobs(&self) -> bool {
        self.ctx.options.sampling.logprobs
    }
}

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let (_, private_alias) = privacy::split_model(request.model.as_deref());
    let privacy = privacy::for_request(&headers, private_alias).await?;
    let started = start_chat(state, request, privacy).await?;
    let masked = started.masked_count();
    let mut response = if started.job.ctx.options.stream {
        let (tx, response) = sse_channel();
        tokio::spawn(stream_chat(started.job, started.handles, tx));
        response
    } else {
        let completion = collect_chat(&started.job, started.handles).await?;
        Json(completion).into_response()
    };
    privacy::mark_response(&mut response, masked);
    Ok(response)
}

/// A chat request's prompt, rendered and encoded.
pub struct ChatPrompt {
    pub text: String,
    pub tokens: Vec<u32>,
    tools: Option<ToolSetup>,
}

/// Validates the conversation and tools and renders the prompt (also used
/// by Anthropic's `count_tokens`).
pub async fn chat_prompt(
    state: &AppState,
    request: &ChatCompletionRequest,
) -> Result<ChatPrompt, ApiError> {
    Ok(chat_prompt_with(state, request, None).await?.0)
}

/// [`chat_prompt`], anonymizing the conversation first when `privacy` is set
/// (all messages in order with one conversation, so a value keeps its
/// placeholder across turns); returns the privacy state for restoring.
async fn chat_prompt_with(
    state: &AppState,
    request: &ChatCompletionRequest,
    privacy: Option<RequestPrivacy>,
) -> Result<(ChatPrompt, Option<RequestPrivacy>), ApiError> {
    let mut messages = request.template_messages()?;
    let mut template_options = request.template_options();
    if structured::parse_response_format(request.response_format.as_ref(), "response_format")?
        .is_some()
    {
        // The grammar starts at the reply's first token: no think block.
        template_options.enable_thinking = Some(false);
    }
    let tool_choice = tools::parse_tool_choice(request.tool_choice.as_ref(), "tool_choice")?;
    let tokenizer = state.scheduler.tokenizer().clone();
    let template_source = tokenizer
        .named_chat_template("tool_use")
        .or(tokenizer.chat_template())
        .map(|t| t.source())
        .unwrap_or("");
    let (template_tools, tool_setup) = tools::plan(
        request.tools.as_deref(),
        &tool_choice,
        template_source,
        "tool_choice",
    )?;
    match template_tools {
        // A template that ignores `tools` gets them in the system prompt.
        Some(list) if !tools::template_takes_tools(template_source) => {
            tools::add_tools_to_system(&mut messages, &list);
            template_options.tools = None;
        }
        other => template_options.tools = other,
    }
    if !tools::template_takes_tools(template_source) {
        tools::calls_into_content(&mut messages);
    }
    let (privacy, messages) = privacy::anonymize_messages(privacy, messages).await?;

    let forced_prefix = tool_setup.as_ref().and_then(|t| t.forced_prefix.clone());
    let (text, tokens) = tokio::task::spawn_blocking(move || -> Result<_, TokenizerError> {
        let mut text = tokenizer.apply_chat_template(&messages, &template_options)?;
        // `tool_choice` required or named: the reply starts inside a call.
        text.push_str(forced_prefix.as_deref().unwrap_or(""));
        // The template already holds any BOS token.
        let ids = tokenizer.encode(&text, false)?;
        Ok((text, ids))
    })
    .await
    .map_err(|e| ApiError::internal(format!("preparing the prompt failed: {e}")))?
    .map_err(prompt_error)?;
    Ok((
        ChatPrompt {
            text,
            tokens,
            tools: tool_setup,
        },
        privacy,
    ))
}

/// A chat request whose jobs are queued.
pub struct StartedChat {
    job: ChatJob,
    handles: Vec<JobHandle>,
}

impl StartedChat {
    pub fn options(&self) -> &super::protocol::GenerationOptions {
        &self.job.ctx.options
    }

    pub fn prompt_tokens(&self) -> usize {
        self.job.prompt_len
    }

    /// Spans masked in the request (`None`: anonymization not asked for).
    pub fn masked_count(&self) -> Option<usize> {
        self.job.privacy.as_ref().map(RequestPrivacy::masked_count)
    }

    /// The whole response.
    pub async fn collect(self) -> Result<ChatCompletion, ApiError> {
        collect_chat(&self.job, self.handles).await
    }

    /// The OpenAI SSE frames, as [`chat_completions`] streams them.
    pub fn stream(self) -> mpsc::Receiver<Bytes> {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(stream_chat(self.job, self.handles, tx));
        rx
    }
}

/// Validates `request`, renders the prompt (anonymized when `privacy` is
/// set) and queues its choices.
pub async fn start_chat(
    state: Arc<AppState>,
    request: ChatCompletionRequest,
    privacy: Option<RequestPrivacy>,
) -> Result<StartedChat, ApiError> {
    state.check_accepting()?;
    let (model, _) = privacy::split_model(request.model.as_deref());
    state.resolve_model(model)?;
    request.check_unsupported()?;
    let output_format =
        structured::parse_response_format(request.response_format.as_ref(), "response_format")?;
    let vocab_size = state.scheduler.info().config.vocab_size;
    let mut options = request
        .raw_options()?
        .validate(vocab_size, state.settings.max_n)?;
    let (prompt, privacy) = chat_prompt_with(&state, &request, privacy).await?;
    drop(request);
    if let Some(privacy) = &privacy {
        privacy.mask_stops(&mut options.stop);
    }
    let reasoning = state
        .think_tags
        .as_ref()
        .map(|tags| prompt_opens_reasoning(&prompt.text, tags));

    if output_format.is_some()
        && prompt
            .tools
            .as_ref()
            .is_some_and(|t| t.forced_prefix.is_some())
    {
        return Err(ApiError::invalid_param(
            "response_format",
            "`response_format` cannot be combined with a forced `tool_choice`.",
        ));
    }
    structured::constrain(&state, output_format, &mut options).await?;
    let handles = submit_choices(&state, &prompt.tokens, &options, 0, "messages")?;
    let job = ChatJob {
        prompt_len: prompt.tokens.len(),
        reasoning,
        privacy,
        tools: prompt.tools,
        ctx: StreamContext::new(state, "chatcmpl", options),
    };
    Ok(StartedChat { job, handles })
}

/// The logprobs entry of one token.
fn token_logprob(labels: &mut TokenLabels<'_>, sampled: &Sampled) -> TokenLogprob {
    let (token, bytes) = labels.label(sampled.token);
    let top_logprobs = sampled
        .top_logprobs
        .iter()
        .map(|&(id, logprob)| {
            let (token, bytes) = labels.label(id);
            TopLogprob {
                token,
                logprob: finite_logprob(logprob),
                bytes,
            }
        })
        .collect();
    TokenLogprob {
        token,
        logprob: finite_logprob(sampled.logprob.unwrap_or(0.0)),
        bytes,
        top_logprobs,
    }
}

/// One choice of a whole (non-streamed) response.
#[derive(Default)]
struct Collected {
    content: String,
    reasoning: String,
    logprobs: Vec<TokenLogprob>,
    calls: Vec<ToolCall>,
    end: Option<ChoiceEnd>,
    counts: ChoiceCounts,
}

async fn collect_chat(job: &ChatJob, handles: Vec<JobHandle>) -> Result<ChatCompletion, ApiError> {
    let state = &job.ctx.state;
    let tokenizer = state.scheduler.tokenizer().clone();
    let mut labels = TokenLabels::new(&tokenizer);
    let mut handles: Vec<Option<JobHandle>> = handles.into_iter().map(Some).collect();
    let mut decoders: Vec<ChoiceDecoder<'_>> =
        handles.iter().map(|_| job.decoder(&tokenizer)).collect();
    let mut choices: Vec<Collected> = handles.iter().map(|_| Collected::default()).collect();
    let mut turn = 0;
    let tokenizer_error = |e: TokenizerError| ApiError::internal(format!("detokenizing: {e}"));

    while let Some((i, event)) = next_event(&mut handles, &mut turn).await {
        let (decoder, choice) = (&mut decoders[i], &mut choices[i]);
        match event {
            JobEvent::Token(sampled) => {
                if decoder.stopped {
                    continue;
                }
                let step = decoder.push(&sampled).map_err(tokenizer_error)?;
                choice.calls.extend(decoder.take_calls());
                choice.content.push_str(&step.text.content);
                choice.reasoning.push_str(&step.text.reasoning);
                if job.wants_logprobs() && !step.is_eos {
                    choice.logprobs.push(token_logprob(&mut labels, &sampled));
                }
                if step.stopped && !step.is_eos {
                    // A stop string or stop token: cancel the job now.
                    handles[i] = None;
                    choice.end = Some(decoder.report_end(ChoiceEnd::Stop));
                    choice.counts = ChoiceCounts::new(job.prompt_len, decoder.tokens, None);
                }
            }
            JobEvent::Finished(summary) => {
                handles[i] = None;
                if !decoder.stopped {
                    let rest = decoder.finish().map_err(tokenizer_error)?;
                    choice.calls.extend(decoder.take_calls());
                    choice.content.push_str(&rest.content);
                    choice.reasoning.push_str(&rest.reasoning);
                }
                choice.end = Some(decoder.report_end(if decoder.stopped {
                    ChoiceEnd::Stop
                } else {
                    ChoiceEnd::from_summary(&summary)?
                }));
                choice.counts = ChoiceCounts::new(job.prompt_len, decoder.tokens, Some(&summary));
            }
            JobEvent::Failed(message) => {
                return Err(failure(&message, state.is_shutting_down()));
            }
        }
    }

    let usage = total_usage(&choices.iter().map(|c| (0, c.counts)).collect::<Vec<_>>());
    let choices = choices
        .into_iter()
        .zip(&decoders)
        .enumerate()
        .map(|(index, (c, decoder))| ChatChoice {
            index,
            message: ChatMessageOut {
                role: "assistant",
                // With tool calls and no text, `content` is null (as OpenAI sends it).
                content: (c.calls.is_empty() || !c.content.trim().is_empty()).then_some(c.content),
                reasoning_content: decoder.saw_reasoning().then_some(c.reasoning),
                tool_calls: (!c.calls.is_empty())
                    .then(|| c.calls.into_iter().map(ToolCallOut::new).collect()),
            },
            logprobs: job.wants_logprobs().then_some(ChatLogprobs {
                content: c.logprobs,
            }),
            finish_reason: c.end.unwrap_or(ChoiceEnd::Length).as_str(),
            stop_reason: stop_reason(c.end, decoder),
        })
        .collect();
    log_done(&job.ctx, "chat", &usage);
    Ok(ChatCompletion {
        id: job.ctx.id.clone(),
        object: "chat.completion",
        created: job.ctx.created,
        model: state.model_id.clone(),
        system_fingerprint: state.system_fingerprint.clone(),
        choices,
        usage,
    })
}

/// Builds chunks of one request.
struct ChunkWriter<'a> {
    ctx: &'a StreamContext,
}

impl ChunkWriter<'_> {
    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> Bytes {
        let ctx = self.ctx;
        sse_frame(&ChatChunk {
            id: &ctx.id,
            object: "chat.completion.chunk",
            created: ctx.created,
            model: &ctx.state.model_id,
            system_fingerprint: &ctx.state.system_fingerprint,
            choices,
            usage: ctx.options.include_usage.then_some(usage),
        })
    }

    fn choice(&self, index: usize, delta: ChatDelta, logprobs: Option<ChatLogprobs>) -> Bytes {
        self.chunk(
            vec![ChatChunkChoice {
                index,
                delta,
                logprobs,
                finish_reason: None,
                stop_reason: None,
            }],
            None,
        )
    }

    fn finish(
        &self,
        index: usize,
        delta: ChatDelta,
        end: ChoiceEnd,
        decoder: &ChoiceDecoder<'_>,
    ) -> Bytes {
        self.chunk(
            vec![ChatChunkChoice {
                index,
                delta,
                logprobs: None,
                finish_reason: Some(end.as_str()),
                stop_reason: stop_reason(Some(end), decoder),
            }],
            None,
        )
    }
}

/// The stop string that ended a choice reported as `stop`.
fn stop_reason(end: Option<ChoiceEnd>, decoder: &ChoiceDecoder<'_>) -> Option<String> {
    (end == Some(ChoiceEnd::Stop))
        .then(|| decoder.stop_sequence().map(str::to_string))
        .flatten()
}

/// The delta of one token step: the non-empty channels, or an empty string
/// in the current channel when the token's text is held back.
fn step_delta(step: &TokenStep, in_reasoning: bool) -> ChatDelta {
    let (reasoning, content) = (&step.text.reasoning, &step.text.content);
    match (reasoning.is_empty(), content.is_empty()) {
        (true, true) if in_reasoning => ChatDelta {
            reasoning_content: Some(String::new()),
            ..ChatDelta::default()
        },
        (true, true) => ChatDelta {
            content: Some(String::new()),
            ..ChatDelta::default()
        },
        _ => ChatDelta {
            role: None,
            content: (!content.is_empty()).then(|| content.clone()),
            reasoning_content: (!reasoning.is_empty()).then(|| reasoning.clone()),
            tool_calls: None,
        },
    }
}

/// Adds tool-call pieces to a delta; an empty `content` placeholder gives
/// way to them.
fn add_calls(mut delta: ChatDelta, pieces: Vec<CallPiece>) -> ChatDelta {
    if pieces.is_empty() {
        return delta;
    }
    let mut merged: Vec<CallPiece> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match merged.last_mut() {
            Some(last) if last.index == piece.index && piece.name.is_none() => {
                last.arguments.push_str(&piece.arguments)
            }
            _ => merged.push(piece),
        }
    }
    let deltas: Vec<ToolCallDelta> = merged.into_iter().map(ToolCallDelta::from_piece).collect();
    if delta.content.as_deref() == Some("") {
        delta.content = None;
    }
    delta.tool_calls = Some(deltas);
    delta
}

/// A delta holding the given text, or an empty one.
fn text_delta(reasoning: String, content: String) -> ChatDelta {
    ChatDelta {
        role: None,
        content: (!content.is_empty()).then_some(content),
        reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
        tool_calls: None,
    }
}

/// Pumps job events into SSE frames until every choice is done or the
/// client is gone (then the handles drop here and the jobs are cancelled).
async fn stream_chat(job: ChatJob, handles: Vec<JobHandle>, tx: mpsc::Sender<Bytes>) {
    let tokenizer = job.ctx.state.scheduler.tokenizer().clone();
    let mut labels = TokenLabels::new(&tokenizer);
    let writer = ChunkWriter { ctx: &job.ctx };
    let mut handles: Vec<Option<JobHandle>> = handles.into_iter().map(Some).collect();
    let mut decoders: Vec<ChoiceDecoder<'_>> =
        handles.iter().map(|_| job.decoder(&tokenizer)).collect();
    let mut counts: Vec<(usize, ChoiceCounts)> = handles
        .iter()
        .map(|_| (0, ChoiceCounts::default()))
        .collect();
    // Text flushed by an end-of-sequence token, sent with the finish chunk.
    let mut pending: Vec<(String, String)> = handles.iter().map(|_| Default::default()).collect();
    let mut pending_calls: Vec<Vec<CallPiece>> = handles.iter().map(|_| Vec::new()).collect();

    macro_rules! send {
        ($frame:expr) => {
            if tx.send($frame).await.is_err() {
                tracing::debug!(id = %job.ctx.id, "client went away; cancelling");
                return;
            }
        };
    }

    for index in 0..handles.len() {
        let first = ChatDelta {
            role: Some("assistant"),
            content: Some(String::new()),
            reasoning_content: None,
            tool_calls: None,
        };
        send!(writer.choice(index, first, None));
    }

    let mut turn = 0;
    loop {
        let next = tokio::select! {
            biased;
            _ = tx.closed() => {
                tracing::debug!(id = %job.ctx.id, "client went away; cancelling");
                return;
            }
            next = next_event(&mut handles, &mut turn) => next,
        };
        let Some((i, event)) = next else { break };
        match event {
            JobEvent::Token(sampled) => {
                let decoder = &mut decoders[i];
                if decoder.stopped {
                    continue;
                }
                let step = match decoder.push(&sampled) {
                    Ok(step) => step,
                    Err(e) => {
                        let _ = tx
                            .send(sse_error_frame(&ApiError::internal(format!(
                                "detokenizing: {e}"
                            ))))
                            .await;
                        return;
                    }
                };
                let calls = decoder.take_pieces();
                if step.is_eos {
                    // Counted; its place is the finish chunk.
                    let slot = &mut pending[i];
                    slot.0.push_str(&step.text.reasoning);
                    slot.1.push_str(&step.text.content);
                    pending_calls[i].extend(calls);
                    continue;
                }
                let logprobs = job.wants_logprobs().then(|| ChatLogprobs {
                    content: vec![token_logprob(&mut labels, &sampled)],
                });
                let delta = step_delta(&step, decoder.in_reasoning());
                let delta = add_calls(delta, calls);
                send!(writer.choice(i, delta, logprobs));
                if step.stopped {
                    handles[i] = None;
                    counts[i].1 = ChoiceCounts::new(job.prompt_len, decoder.tokens, None);
                    let end = decoder.report_end(ChoiceEnd::Stop);
                    send!(writer.finish(i, ChatDelta::default(), end, decoder));
                }
            }
            JobEvent::Finished(summary) => {
                handles[i] = None;
                let decoder = &mut decoders[i];
                let (mut reasoning, mut content) = std::mem::take(&mut pending[i]);
                let mut calls = std::mem::take(&mut pending_calls[i]);
                if !decoder.stopped {
                    match decoder.finish() {
                        Ok(rest) => {
                            reasoning.push_str(&rest.reasoning);
                            content.push_str(&rest.content);
                            calls.extend(decoder.take_pieces());
                        }
                        Err(e) => {
                            let _ = tx
                                .send(sse_error_frame(&ApiError::internal(format!(
                                    "detokenizing: {e}"
                                ))))
                                .await;
                            return;
                        }
                    }
                }
                let end = if decoder.stopped {
                    ChoiceEnd::Stop
                } else {
                    match ChoiceEnd::from_summary(&summary) {
                        Ok(end) => end,
                        Err(error) => {
                            let _ = tx.send(sse_error_frame(&error)).await;
                            return;
                        }
                    }
                };
                let end = decoder.report_end(end);
                counts[i].1 = ChoiceCounts::new(job.prompt_len, decoder.tokens, Some(&summary));
                let delta = add_calls(text_delta(reasoning, content), calls);
                send!(writer.finish(i, delta, end, decoder));
            }
            JobEvent::Failed(message) => {
                let error = failure(&message, job.ctx.state.is_shutting_down());
                let _ = tx.send(sse_error_frame(&error)).await;
                return;
            }
        }
    }

    let usage = total_usage(&counts);
    if job.ctx.options.include_usage {
        send!(writer.chunk(Vec::new(), Some(usage)));
    }
    send!(Bytes::from_static(SSE_DONE));
    log_done(&job.ctx, "chat", &usage);
}
