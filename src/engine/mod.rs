//! The inference engine: a loaded model and the loop that turns one prompt
//! into a stream of tokens.
//!
//! [`Engine::generate`] runs a single sequence end to end: chunked prefill
//! (at most [`EngineOptions::prefill_chunk`] tokens per forward, so memory for
//! attention scores stays bounded on long prompts), then decode steps until
//! an end-of-sequence token, a stop string or the token limit. Every step is
//! reported through a callback as a [`GenerationEvent`], carrying the token
//! ids and the text they complete; the final event carries exact usage and
//! timings measured where they happen.
//!
//! The engine never knows about HTTP: the server and the CLI are callers.

pub mod constraint;
pub mod fit;
pub mod sampling;
pub mod stop;
pub mod text;

use std::{
    ops::ControlFlow,
    time::{Duration, Instant},
};

use hearth_models::{KvCache, LoadedModel, ModelError};
use mlx_rs::{transforms, Array};

use self::{
    sampling::{Sampled, Sampler, SamplingError, SamplingParams},
    text::TextStream,
};

/// Tunables of the engine itself (not of a request).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Most prompt tokens per prefill forward pass.
    pub prefill_chunk: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { prefill_chunk: 512 }
    }
}

/// One generation request, already tokenized.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompt_tokens: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// Stop at the model's end-of-sequence tokens (on by default).
    pub stop_at_eos: bool,
}

impl GenerateRequest {
    pub fn new(prompt_tokens: Vec<u32>, max_tokens: usize) -> Self {
        GenerateRequest {
            prompt_tokens,
            max_tokens,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            stop_at_eos: true,
        }
    }
}

/// Why generation ended (the CLI loop and the scheduler alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// End-of-sequence token or stop string.
    Stop,
    /// `max_tokens` or the model's context reached.
    Length,
    /// The caller asked to stop (or went away).
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Counts and timings of one finished generation.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Tokens sampled, including a final end-of-sequence token.
    pub completion_tokens: usize,
    pub prefill_time: Duration,
    pub decode_time: Duration,
    /// Time from the call to the first sampled token.
    pub time_to_first_token: Duration,
    pub peak_memory_bytes: usize,
    pub finish_reason: FinishReason,
}

impl GenerationStats {
    pub fn prefill_tokens_per_second(&self) -> f64 {
        rate(self.prompt_tokens, self.prefill_time)
    }

    /// Decode speed over the tokens after the first (which prefill produced).
    pub fn decode_tokens_per_second(&self) -> f64 {
        rate(self.completion_tokens.saturating_sub(1), self.decode_time)
    }
}

fn rate(tokens: usize, time: Duration) -> f64 {
    let secs = time.as_secs_f64();
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}

/// What the callback of [`Engine::generate`] sees.
#[derive(Debug, Clone)]
pub enum GenerationEvent {
    /// One sampled token and the text it completes (may be empty while a
    /// multi-byte character or a possible stop string is pending).
    Token { sampled: Sampled, text: String },
    /// The end, with any text held back until now.
    Finished {
        text: String,
        stats: GenerationStats,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("prompt is empty")]
    EmptyPrompt,
    #[error("prompt has {prompt} tokens but the model's context is {context} tokens")]
    PromptTooLong { prompt: usize, context: usize },
    #[error("invalid sampling parameters: {0}")]
    Sampling(#[from] SamplingError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
}

impl From<mlx_rs::error::Exception> for EngineError {
    fn from(e: mlx_rs::error::Exception) -> Self {
        EngineError::Model(e.into())
    }
}

/// A loaded model ready to generate.
pub struct Engine {
    pub model: LoadedModel,
    pub options: EngineOptions,
    eos: Vec<u32>,
}

impl Engine {
    pub fn new(model: LoadedModel, options: EngineOptions) -> Self {
        let eos = model.eos_token_ids();
        Engine {
            model,
            options,
            eos,
        }
    }

    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos
    }

    /// Maximum total tokens (prompt + completion) of one sequence.
    pub fn context_length(&self) -> usize {
        self.model.config().max_position_embeddings
    }

    /// Runs prompt tokens through the model in chunks, filling `cache`, and
    /// returns the logits of the last position (`[1, vocab]`).
    pub fn prefill(&self, tokens: &[u32], cache: &mut [KvCache]) -> Result<Array, EngineError> {
        let chunk = self.options.prefill_chunk.max(1);
        let mut logits = None;
        let mut rest = tokens;
        while !rest.is_empty() {
            let n = rest.len().min(chunk);
            let (now, later) = rest.split_at(n);
            let last = later.is_empty();
            let out = self.forward(now, cache, last)?;
            if last {
                logits = Some(out);
            } else {
                // Materialise the cache so each chunk's graph stays small;
                // the chunk's own logits are never needed.
                eval_cache(cache)?;
            }
            rest = later;
        }
        let logits = logits.ok_or(EngineError::EmptyPrompt)?;
        Ok(logits.reshape(&[1, -1])?)
    }

    /// One forward pass of `tokens` for a single sequence.
    fn forward(
        &self,
        tokens: &[u32],
        cache: &mut [KvCache],
        last_only: bool,
    ) -> Result<Array, EngineError> {
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let ids = Array::from_slice(&ids, &[1, ids.len() as i32]);
        let mut views = KvCache::views(cache);
        Ok(self.model.model.forward(&ids, &mut views, last_only)?)
    }

    /// Generates a completion for `request`, calling `on_event` for every
    /// token and once at the end. Returning `ControlFlow::Break` from the
    /// callback cancels the generation.
    pub fn generate(
        &self,
        request: &GenerateRequest,
        mut on_event: impl FnMut(GenerationEvent) -> ControlFlow<()>,
    ) -> Result<GenerationStats, EngineError> {
        let started = Instant::now();
        let prompt = &request.prompt_tokens;
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let context = self.context_length();
        if prompt.len() >= context {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                context,
            });
        }
        request.sampling.validate(self.model.config().vocab_size)?;
        let max_tokens = request.max_tokens.min(context - prompt.len());

        crate::device::restart_peak();
        let mut sampler = Sampler::new(request.sampling.clone(), prompt);
        let mut text = TextStream::new(&self.model.tokenizer, &request.stop);
        let mut cache = self.model.model.new_cache();

        let logits = self.prefill(prompt, &mut cache)?;
        let mut sampled = sampler.sample(&logits)?;
        let prefill_time = started.elapsed();
        let time_to_first_token = prefill_time;
        let decode_started = Instant::now();

        let mut completion = 0usize;
        let finish_reason = loop {
            completion += 1;
            let token = sampled.token;
            let is_eos = request.stop_at_eos && self.eos.contains(&token);
            let delta = if is_eos {
                Default::default()
            } else {
                text.push(token)
                    .map_err(|e| EngineError::Tokenizer(e.to_string()))?
            };
            let flow = on_event(GenerationEvent::Token {
                sampled: sampled.clone(),
                text: delta.text,
            });
            if is_eos || delta.stopped {
                break FinishReason::Stop;
            }
            if flow.is_break() {
                break FinishReason::Cancelled;
            }
            if completion >= max_tokens {
                break FinishReason::Length;
            }
            let logits = self.forward(&[token], &mut cache, true)?;
            sampled = sampler.sample(&logits.reshape(&[1, -1])?)?;
        };

        // Text held back for a possible stop string or an unfinished
        // character is still owed to the caller, unless a stop string ended it.
        let tail = text
            .finish()
            .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        let stats = GenerationStats {
            prompt_tokens: prompt.len(),
            completion_tokens: completion,
            prefill_time,
            decode_time: decode_started.elapsed(),
            time_to_first_token,
            peak_memory_bytes: mlx_rs::memory::peak_memory().unwrap_or(0),
            finish_reason,
        };
        let _ = on_event(GenerationEvent::Finished {
            text: tail,
            stats: stats.clone(),
        });
        Ok(stats)
    }
}

/// Evaluates every layer's cache buffers.
fn eval_cache(cache: &[KvCache]) -> Result<(), EngineError> {
    let arrays: Vec<&Array> = cache.iter().flat_map(KvCache::arrays).collect();
    transforms::eval(arrays)?;
    Ok(())
}
