//! `POST /v1/completions` (legacy): one or several raw prompts (text or
//! token ids), `n` choices each (choice index = prompt index × n + k), legacy
//! logprobs (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`).
//!
//! Text prompts are encoded with the tokenizer's special tokens (BOS where
//! the model wants one), as OpenAI-compatible servers do. Streams send one
//! `text_completion` chunk per generated token (an end-of-sequence token
//! excepted), a final chunk per choice with `finish_reason`, the optional
//! usage chunk, then `data: [DONE]`.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
    Json,
};
use hearth_models::{tokenizer::TokenizerError, Tokenizer};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::{
    error::ApiError,
    extract::ApiJson,
    generation::{failure, finite_logprob, next_event, ChoiceDecoder, ChoiceEnd, TokenLabels},
    jobs::{
        log_done, sse_channel, sse_error_frame, sse_frame, submit_choices, total_usage,
        ChoiceCounts, StreamContext, SSE_DONE,
    },
    privacy::{self, RequestPrivacy},
    protocol::{
        Completion, CompletionChoice, CompletionChunk, CompletionRequest, LegacyLogprobs,
        PromptInput, Usage,
    },
    state::AppState,
    structured,
};
use crate::{
    engine::sampling::Sampled,
    scheduler::{JobEvent, JobHandle},
};

/// One prompt, ready to submit.
struct PreparedPrompt {
    tokens: Vec<u32>,
    /// The prompt's text for `echo`.
    echo: Option<String>,
}

struct CompletionJob {
    ctx: StreamContext,
    /// Prompt index and prompt length of each choice.
    choices: Vec<(usize, usize)>,
    /// Echo text per prompt.
    echoes: Vec<Option<String>>,
    /// Set when the request asked for anonymization.
    privacy: Option<RequestPrivacy>,
}

impl CompletionJob {
    fn decoder<'t>(&'t self, tokenizer: &'t Tokenizer) -> ChoiceDecoder<'t> {
        let options = &self.ctx.options;
        ChoiceDecoder::new(
            tokenizer,
            &options.stop,
            &options.stop_token_ids,
            &self.ctx.state.scheduler.info().eos_token_ids,
            options.stop_at_eos,
            None,
        )
        .with_restorer(self.privacy.as_ref().map(RequestPrivacy::restorer))
    }

    fn wants_logprobs(&self) -> bool {
        self.ctx.options.sampling.logprobs
    }

    fn echo_of(&self, choice: usize) -> Option<&str> {
        let (prompt, _) = self.choices[choice];
        self.echoes.get(prompt).and_then(|e| e.as_deref())
    }
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    state.check_accepting()?;
    let (model, private_alias) = privacy::split_model(request.model.as_deref());
    state.resolve_model(model)?;
    request.check_unsupported()?;
    let output_format =
        structured::parse_response_format(request.response_format.as_ref(), "response_format")?;
    let vocab_size = state.scheduler.info().config.vocab_size;
    let mut options = request
        .raw_options()?
        .validate(vocab_size, state.settings.max_n)?;
    structured::constrain(&state, output_format, &mut options).await?;
    let prompts = request.prompts()?;
    let echo = request.echo.unwrap_or(false);
    drop(request);

    for prompt in &prompts {
        if let PromptInput::Tokens(ids) = prompt {
            if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab_size) {
                return Err(ApiError::invalid_param(
                    "prompt",
                    format!("token id {bad} is outside the vocabulary (size {vocab_size})."),
                ));
            }
        }
    }
    let mut privacy = privacy::for_request(&headers, private_alias).await?;
    if privacy.is_some() && prompts.iter().any(|p| matches!(p, PromptInput::Tokens(_))) {
        return Err(ApiError::invalid_param(
            "prompt",
            "Anonymization needs text prompts: token-id prompts cannot be masked.",
        ));
    }
    let tokenizer = state.scheduler.tokenizer().clone();
    let (prepared, privacy) = tokio::task::spawn_blocking(move || -> Result<_, TokenizerError> {
        let prepared = prompts
            .into_iter()
            .map(|prompt| match prompt {
                PromptInput::Text(text) => {
                    // The model sees the masked text; `echo` gives the client its own.
                    let masked = privacy.as_mut().map(|p| p.anonymize_text(&text));
                    Ok(PreparedPrompt {
                        tokens: tokenizer.encode(masked.as_deref().unwrap_or(&text), true)?,
                        echo: echo.then_some(text),
                    })
                }
                PromptInput::Tokens(tokens) => Ok(PreparedPrompt {
                    echo: if echo {
                        Some(tokenizer.decode(&tokens, false)?)
                    } else {
                        None
                    },
                    tokens,
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((prepared, privacy))
    })
    .await
    .map_err(|e| ApiError::internal(format!("preparing the prompt failed: {e}")))?
    .map_err(|e| ApiError::internal(format!("tokenizer failed: {e}")))?;
    if let Some(privacy) = &privacy {
        privacy.mask_stops(&mut options.stop);
    }

    let n = options.n;
    let mut handles = Vec::with_capacity(prepared.len() * n);
    let mut choices = Vec::with_capacity(prepared.len() * n);
    for (p, prompt) in prepared.iter().enumerate() {
        handles.extend(submit_choices(
            &state,
            &prompt.tokens,
            &options,
            p * n,
            "prompt",
        )?);
        choices.extend(std::iter::repeat_n((p, prompt.tokens.len()), n));
    }
    let job = CompletionJob {
        choices,
        echoes: prepared.into_iter().map(|p| p.echo).collect(),
        privacy,
        ctx: StreamContext::new(state, "cmpl", options),
    };
    let masked = job.privacy.as_ref().map(RequestPrivacy::masked_count);
    let mut response = if job.ctx.options.stream {
        let (tx, response) = sse_channel();
        tokio::spawn(stream_completion(job, handles, tx));
        response
    } else {
        let completion = collect_completion(&job, handles).await?;
        Json(completion).into_response()
    };
    privacy::mark_response(&mut response, masked);
    Ok(response)
}

/// Appends one token to legacy logprobs; `offset` is the token's position
/// (in characters) in the choice's text and advances past it.
fn push_logprob(
    logprobs: &mut LegacyLogprobs,
    labels: &mut TokenLabels<'_>,
    sampled: &Sampled,
    offset: &mut usize,
) {
    let (token, _) = labels.label(sampled.token);
    let mut top = Map::new();
    for &(id, logprob) in &sampled.top_logprobs {
        let (name, _) = labels.label(id);
        top.entry(name)
            .or_insert_with(|| Value::from(finite_logprob(logprob)));
    }
    logprobs.text_offset.push(*offset);
    *offset += token.chars().count();
    logprobs.tokens.push(token);
    logprobs
        .token_logprobs
        .push(finite_logprob(sampled.logprob.unwrap_or(0.0)));
    logprobs.top_logprobs.push(top);
}

#[derive(Default)]
struct Collected {
    text: String,
    logprobs: LegacyLogprobs,
    offset: usize,
    end: Option<ChoiceEnd>,
    counts: ChoiceCounts,
}

async fn collect_completion(
    job: &CompletionJob,
    handles: Vec<JobHandle>,
) -> Result<Completion, ApiError> {
    let state = &job.ctx.state;
    let tokenizer = state.scheduler.tokenizer().clone();
    let mut labels = TokenLabels::new(&tokenizer);
    let mut handles: Vec<Option<JobHandle>> = handles.into_iter().map(Some).collect();
    let mut decoders: Vec<ChoiceDecoder<'_>> =
        handles.iter().map(|_| job.decoder(&tokenizer)).collect();
    let mut choices: Vec<Collected> = (0..handles.len())
        .map(|i| {
            let text = job.echo_of(i).unwrap_or_default().to_string();
            Collected {
                offset: text.chars().count(),
                text,
                ..Collected::default()
            }
        })
        .collect();
    let tokenizer_error = |e: TokenizerError| ApiError::internal(format!("detokenizing: {e}"));
    let mut turn = 0;
    while let Some((i, event)) = next_event(&mut handles, &mut turn).await {
        let (decoder, choice) = (&mut decoders[i], &mut choices[i]);
        let prompt_len = job.choices[i].1;
        match event {
            JobEvent::Token(sampled) => {
                if decoder.stopped {
                    continue;
                }
                let step = decoder.push(&sampled).map_err(tokenizer_error)?;
                choice.text.push_str(&step.text.content);
                if job.wants_logprobs() && !step.is_eos {
                    push_logprob(
                        &mut choice.logprobs,
                        &mut labels,
                        &sampled,
                        &mut choice.offset,
                    );
                }
                if step.stopped && !step.is_eos {
                    handles[i] = None;
                    choice.end = Some(ChoiceEnd::Stop);
                    choice.counts = ChoiceCounts::new(prompt_len, decoder.tokens, None);
                }
            }
            JobEvent::Finished(summary) => {
                handles[i] = None;
                if !decoder.stopped {
                    choice
                        .text
                        .push_str(&decoder.finish().map_err(tokenizer_error)?.content);
                }
                choice.end = Some(if decoder.stopped {
                    ChoiceEnd::Stop
                } else {
                    ChoiceEnd::from_summary(&summary)?
                });
                choice.counts = ChoiceCounts::new(prompt_len, decoder.tokens, Some(&summary));
            }
            JobEvent::Failed(message) => {
                return Err(failure(&message, state.is_shutting_down()));
            }
        }
    }
    let usage = total_usage(
        &choices
            .iter()
            .enumerate()
            .map(|(i, c)| (job.choices[i].0, c.counts))
            .collect::<Vec<_>>(),
    );
    log_done(&job.ctx, "completions", &usage);
    Ok(Completion {
        id: job.ctx.id.clone(),
        object: "text_completion",
        created: job.ctx.created,
        model: state.model_id.clone(),
        system_fingerprint: state.system_fingerprint.clone(),
        choices: choices
            .into_iter()
            .enumerate()
            .map(|(index, c)| CompletionChoice {
                index,
                text: c.text,
                logprobs: job.wants_logprobs().then_some(c.logprobs),
                finish_reason: Some(c.end.unwrap_or(ChoiceEnd::Length).as_str()),
            })
            .collect(),
        usage,
    })
}

fn chunk(ctx: &StreamContext, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> Bytes {
    sse_frame(&CompletionChunk {
        id: &ctx.id,
        object: "text_completion",
        created: ctx.created,
        model: &ctx.state.model_id,
        system_fingerprint: &ctx.state.system_fingerprint,
        choices,
        usage: ctx.options.include_usage.then_some(usage),
    })
}

fn choice_chunk(
    ctx: &StreamContext,
    index: usize,
    text: String,
    logprobs: Option<LegacyLogprobs>,
    finish_reason: Option<&'static str>,
) -> Bytes {
    chunk(
        ctx,
        vec![CompletionChoice {
            index,
            text,
            logprobs,
            finish_reason,
        }],
        None,
    )
}

async fn stream_completion(job: CompletionJob, handles: Vec<JobHandle>, tx: mpsc::Sender<Bytes>) {
    let ctx = &job.ctx;
    let tokenizer = ctx.state.scheduler.tokenizer().clone();
    let mut labels = TokenLabels::new(&tokenizer);
    let mut handles: Vec<Option<JobHandle>> = handles.into_iter().map(Some).collect();
    let mut decoders: Vec<ChoiceDecoder<'_>> =
        handles.iter().map(|_| job.decoder(&tokenizer)).collect();
    let mut counts: Vec<(usize, ChoiceCounts)> = job
        .choices
        .iter()
        .map(|&(p, _)| (p, ChoiceCounts::default()))
        .collect();
    let mut offsets: Vec<usize> = (0..handles.len())
        .map(|i| job.echo_of(i).map_or(0, |e| e.chars().count()))
        .collect();
    let mut pending: Vec<String> = vec![String::new(); handles.len()];

    macro_rules! send {
        ($frame:expr) => {
            if tx.send($frame).await.is_err() {
                tracing::debug!(id = %ctx.id, "client went away; cancelling");
                return;
            }
        };
    }
    macro_rules! fail {
        ($error:expr) => {{
            let _ = tx.send(sse_error_frame(&$error)).await;
            return;
        }};
    }

    for i in 0..handles.len() {
        if let Some(echo) = job.echo_of(i) {
            send!(choice_chunk(ctx, i, echo.to_string(), None, None));
        }
    }
    let mut turn = 0;
    loop {
        let next = tokio::select! {
            biased;
            _ = tx.closed() => {
                tracing::debug!(id = %ctx.id, "client went away; cancelling");
                return;
            }
            next = next_event(&mut handles, &mut turn) => next,
        };
        let Some((i, event)) = next else { break };
        let prompt_len = job.choices[i].1;
        match event {
            JobEvent::Token(sampled) => {
                let decoder = &mut decoders[i];
                if decoder.stopped {
                    continue;
                }
                let step = match decoder.push(&sampled) {
                    Ok(step) => step,
                    Err(e) => fail!(ApiError::internal(format!("detokenizing: {e}"))),
                };
                if step.is_eos {
                    pending[i].push_str(&step.text.content);
                    continue;
                }
                let logprobs = job.wants_logprobs().then(|| {
                    let mut lp = LegacyLogprobs::default();
                    push_logprob(&mut lp, &mut labels, &sampled, &mut offsets[i]);
                    lp
                });
                send!(choice_chunk(ctx, i, step.text.content, logprobs, None));
                if step.stopped {
                    handles[i] = None;
                    counts[i].1 = ChoiceCounts::new(prompt_len, decoder.tokens, None);
                    send!(choice_chunk(ctx, i, String::new(), None, Some("stop")));
                }
            }
            JobEvent::Finished(summary) => {
                handles[i] = None;
                let decoder = &mut decoders[i];
                let mut text = std::mem::take(&mut pending[i]);
                if !decoder.stopped {
                    match decoder.finish() {
                        Ok(rest) => text.push_str(&rest.content),
                        Err(e) => fail!(ApiError::internal(format!("detokenizing: {e}"))),
                    }
                }
                let end = if decoder.stopped {
                    ChoiceEnd::Stop
                } else {
                    match ChoiceEnd::from_summary(&summary) {
                        Ok(end) => end,
                        Err(error) => fail!(error),
                    }
                };
                counts[i].1 = ChoiceCounts::new(prompt_len, decoder.tokens, Some(&summary));
                send!(choice_chunk(ctx, i, text, None, Some(end.as_str())));
            }
            JobEvent::Failed(message) => {
                fail!(failure(&message, ctx.state.is_shutting_down()));
            }
        }
    }
    let usage = total_usage(&counts);
    if ctx.options.include_usage {
        send!(chunk(ctx, Vec::new(), Some(usage)));
    }
    send!(Bytes::from_static(SSE_DONE));
    log_done(ctx, "completions", &usage);
}
