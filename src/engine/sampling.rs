//! Token sampling: turns one decode step's logits into the next token.
//!
//! A [`Sampler`] holds everything one sequence needs across steps: its
//! [`SamplingParams`], its random stream, and the token history that the
//! penalties look at. The engine calls [`Sampler::sample`] (one sequence) or
//! [`Sampler::sample_batch`] (one row of a `[B, vocab]` logits array per
//! sequence) once per decode step.
//!
//! # Pipeline
//!
//! Per row, in this order:
//! 1. the logits are cast to `f32`;
//! 2. logprobs, when asked for, are the log-softmax of these *raw* model
//!    logits (vLLM's default `raw_logprobs`): they describe what the model
//!    predicted, before any penalty, bias, temperature or truncation;
//! 3. the repetition penalty (HF/CTRL: positive logits are divided by it,
//!    negative ones multiplied) over the last `repetition_window` tokens of
//!    prompt + output, then the presence and frequency penalties (OpenAI:
//!    `logit -= presence * [count > 0] + frequency * count`) over the output
//!    tokens, then `logit_bias` is added;
//! 4. a row with a grammar ([`SamplingParams::grammar`], structured output)
//!    has every token the grammar does not allow next set to `-inf`: the
//!    allowed set is computed on the host (llguidance, see
//!    [`super::constraint`]) while the device runs the forward pass;
//! 5. greedy rows (temperature below [`GREEDY_TEMPERATURE`]) take the argmax
//!    here; the others are divided by the temperature, truncated by top-k,
//!    then top-p (nucleus, over the top-k survivors renormalised), then min-p
//!    (relative to the most likely token), and one token is drawn from what
//!    is left with the Gumbel-max trick (`argmax(logits + Gumbel noise)`,
//!    which is how MLX's own `random::categorical` draws).
//!
//! The truncations are thresholds on the logit value: each row keeps the
//! tokens whose logit is at least the row's cut-off, so a token tied with the
//! last kept one is kept too.
//!
//! # Invariants
//!
//! * All vocab-sized work happens in MLX ops on the default device; the host
//!   only builds arrays as small as the penalised token set or the batch.
//! * One evaluation per step: the chosen tokens and any logprobs are
//!   evaluated together and then read back. A greedy row with no penalties,
//!   bias or logprobs is a single `argmax`; a batch of such rows is a single
//!   `argmax` over `[B, vocab]`.
//! * Reproducibility: a seeded sampler derives the key of its `n`-th draw from
//!   `(seed, n)` only, so the same seed and the same logits give the same
//!   tokens, alone or in any batch. Unseeded samplers draw their seed from
//!   the operating system's random source.
//! * Nothing here panics on a bad shape, dtype or parameter; those are
//!   [`SamplingError`]s. Call [`SamplingParams::validate`] when accepting a
//!   request so that users get the parameter errors up front.

use std::collections::{BTreeMap, HashMap, VecDeque};

use mlx_rs::ops::indexing::{argmax_axis, TryIndexOp};
use mlx_rs::ops::{argpartition_axis, maximum, select, softmax_axis, sort_axis, zeros};
use mlx_rs::{random, transforms, Array, Dtype};

use super::constraint::{CompiledGrammar, TokenConstraint};

/// Temperatures below this are treated as greedy decoding (vLLM uses the same
/// cut-off): dividing by a smaller value would overflow `f32` logits.
pub const GREEDY_TEMPERATURE: f32 = 1e-5;

/// The most alternatives [`SamplingParams::top_logprobs`] may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Default number of recent tokens the repetition penalty looks at (llama.cpp's default).
pub const DEFAULT_REPETITION_WINDOW: usize = 64;

/// How one sequence chooses its tokens. [`Default`] is greedy with every
/// option off.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; below [`GREEDY_TEMPERATURE`] (e.g. `0.0`) means greedy.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; `0` (or at least the vocabulary size) is off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches
    /// `top_p` (always at least one); `1.0` is off. Range `(0, 1]`.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the most likely
    /// token's; `0.0` is off. Range `[0, 1]`.
    pub min_p: f32,
    /// HF/CTRL repetition penalty over the last `repetition_window` tokens of
    /// prompt + output: positive logits are divided by it, negative ones
    /// multiplied. `1.0` is off; must be positive.
    pub repetition_penalty: f32,
    /// How many recent tokens the repetition penalty sees; `0` means the whole context.
    pub repetition_window: usize,
    /// OpenAI presence penalty over output tokens, `[-2, 2]`; `0.0` is off.
    pub presence_penalty: f32,
    /// OpenAI frequency penalty over output tokens, `[-2, 2]`; `0.0` is off.
    pub frequency_penalty: f32,
    /// Added to the logits of these tokens after the penalties. `-inf` bans a
    /// token; a large positive value (e.g. `100`) forces it. Repeated ids add up.
    pub logit_bias: Vec<(u32, f32)>,
    /// Seed for reproducible sampling; `None` draws a fresh random seed.
    pub seed: Option<u64>,
    /// Report the chosen token's logprob (of the raw model distribution).
    pub logprobs: bool,
    /// Also report this many most likely tokens with their logprobs,
    /// `0..=`[`MAX_TOP_LOGPROBS`]. A non-zero value implies `logprobs`.
    pub top_logprobs: usize,
    /// Structured output: every sampled token must keep the text valid
    /// for this grammar; `None` is unconstrained.
    pub grammar: Option<CompiledGrammar>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repetition_window: DEFAULT_REPETITION_WINDOW,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
            logprobs: false,
            top_logprobs: 0,
            grammar: None,
        }
    }
}

impl SamplingParams {
    /// Checks every field against its documented range and every
    /// `logit_bias` id against `vocab_size`.
    pub fn validate(&self, vocab_size: usize) -> Result<(), SamplingError> {
        fn invalid(name: &'static str, reason: String) -> SamplingError {
            SamplingError::InvalidParameter { name, reason }
        }
        if vocab_size == 0 {
            return Err(invalid("vocab_size", "must be positive".into()));
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(invalid(
                "temperature",
                format!("must be a finite number >= 0, got {}", self.temperature),
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(invalid(
                "top_p",
                format!("must be in (0, 1], got {}", self.top_p),
            ));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(invalid(
                "min_p",
                format!("must be in [0, 1], got {}", self.min_p),
            ));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(invalid(
                "repetition_penalty",
                format!(
                    "must be a finite number > 0, got {}",
                    self.repetition_penalty
                ),
            ));
        }
        for (name, value) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&value) {
                return Err(invalid(name, format!("must be in [-2, 2], got {value}")));
            }
        }
        if self.top_logprobs > MAX_TOP_LOGPROBS {
            return Err(invalid(
                "top_logprobs",
                format!(
                    "must be at most {MAX_TOP_LOGPROBS}, got {}",
                    self.top_logprobs
                ),
            ));
        }
        for &(token, bias) in &self.logit_bias {
            if token_index(token) >= vocab_size {
                return Err(SamplingError::TokenOutOfVocabulary { token, vocab_size });
            }
            // -inf bans a token; NaN and +inf would poison the softmax.
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(invalid(
                    "logit_bias",
                    format!("bias for token {token} must be a number or -inf, got {bias}"),
                ));
            }
        }
        Ok(())
    }
}

/// One sampled token.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    /// The chosen token id.
    pub token: u32,
    /// Its logprob under the raw model distribution, when logprobs were requested.
    pub logprob: Option<f32>,
    /// The most likely tokens under the raw model distribution with their
    /// logprobs, most likely first (ties by lower id); empty unless requested.
    pub top_logprobs: Vec<(u32, f32)>,
}

/// Why a sampling step failed.
#[derive(Debug, thiserror::Error)]
pub enum SamplingError {
    /// A parameter is outside its documented range.
    #[error("invalid sampling parameter `{name}`: {reason}")]
    InvalidParameter {
        /// The field of [`SamplingParams`].
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A `logit_bias` token id does not exist in the model's vocabulary.
    #[error("logit_bias token id {token} is outside the vocabulary (size {vocab_size})")]
    TokenOutOfVocabulary {
        /// The offending id.
        token: u32,
        /// The vocabulary size it was checked against.
        vocab_size: usize,
    },
    /// The logits array does not have the shape the call needs.
    #[error("logits have shape {shape:?}, expected {expected}")]
    BadShape {
        /// The shape received.
        shape: Vec<i32>,
        /// The shape the call needs, in words.
        expected: String,
    },
    /// The logits are not floating point.
    #[error("logits have dtype {dtype:?}, expected a floating-point dtype")]
    BadDtype {
        /// The dtype received.
        dtype: Dtype,
    },
    /// An MLX operation failed.
    #[error("MLX failed while {context}")]
    Mlx {
        /// The step that failed.
        context: &'static str,
        /// MLX's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Attaches a context to MLX results.
trait MlxContext<T> {
    fn context(self, context: &'static str) -> Result<T, SamplingError>;
}

impl<T, E> MlxContext<T> for Result<T, E>
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn context(self, context: &'static str) -> Result<T, SamplingError> {
        self.map_err(|source| SamplingError::Mlx {
            context,
            source: Box::new(source),
        })
    }
}

/// A token id as an index; `u32` always fits in `usize` on the targets we build for.
fn token_index(token: u32) -> usize {
    usize::try_from(token).unwrap_or(usize::MAX)
}

/// Per-sequence sampling state: parameters, random stream and penalty history.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    /// `logit_bias` with repeated ids summed, sorted by id.
    logit_bias: Vec<(u32, f32)>,
    seed: u64,
    /// Number of random draws made so far; the next draw's key derives from it.
    draws: u64,
    /// The repetition window's tokens in order (only when the window is
    /// bounded and the repetition penalty is on).
    recent: VecDeque<u32>,
    /// How often each token occurs in the repetition window (empty when the
    /// repetition penalty is off).
    recent_counts: HashMap<u32, u32>,
    /// How often each token occurs in the output (empty when the presence
    /// and frequency penalties are off).
    output_counts: HashMap<u32, u32>,
    /// This sequence's grammar state (structured output).
    constraint: Option<TokenConstraint>,
}

/// What one row contributes to the truncation step (each field is already
/// the "off" value for rows that don't use it).
#[derive(Clone, Copy, Debug)]
struct RowFilter {
    /// Position in the descending sort of the last token top-k keeps.
    top_k_last: u32,
    top_k_on: bool,
    /// Nucleus mass; `+inf` when off.
    top_p: f32,
    /// `ln(min_p)`; `-inf` when off.
    log_min_p: f32,
}

impl Sampler {
    /// A sampler for one sequence whose prompt is `prompt_tokens` (they feed
    /// the repetition penalty's window).
    pub fn new(params: SamplingParams, prompt_tokens: &[u32]) -> Self {
        let mut merged: BTreeMap<u32, f32> = BTreeMap::new();
        for &(token, bias) in &params.logit_bias {
            *merged.entry(token).or_insert(0.0) += bias;
        }
        let seed = params.seed.unwrap_or_else(rand::random);
        let mut sampler = Self {
            logit_bias: merged.into_iter().collect(),
            seed,
            draws: 0,
            recent: VecDeque::new(),
            recent_counts: HashMap::new(),
            output_counts: HashMap::new(),
            constraint: params.grammar.as_ref().map(CompiledGrammar::start),
            params,
        };
        if sampler.repetition_on() {
            let window = sampler.params.repetition_window;
            let start = if window == 0 {
                0
            } else {
                prompt_tokens.len().saturating_sub(window)
            };
            for &token in &prompt_tokens[start..] {
                sampler.remember_in_window(token);
            }
        }
        sampler
    }

    /// The parameters this sampler was built with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Records `token` as generated: it enters the repetition window and the
    /// output counts. [`Sampler::sample`] calls this itself; call it directly
    /// only for tokens the engine forces without sampling.
    pub fn record(&mut self, token: u32) {
        if self.repetition_on() {
            self.remember_in_window(token);
        }
        if self.params.presence_penalty != 0.0 || self.params.frequency_penalty != 0.0 {
            *self.output_counts.entry(token).or_insert(0) += 1;
        }
        if let Some(constraint) = &mut self.constraint {
            constraint.advance(token);
        }
    }

    /// Samples the next token from one sequence's logits, shaped `[vocab]`
    /// or `[1, vocab]`, of any floating dtype.
    pub fn sample(&mut self, logits: &Array) -> Result<Sampled, SamplingError> {
        let shape = logits.shape();
        let single_row = match shape {
            [vocab] => *vocab > 0,
            [1, vocab] => *vocab > 0,
            _ => false,
        };
        if !single_row {
            return Err(SamplingError::BadShape {
                shape: shape.to_vec(),
                expected: "[vocab] or [1, vocab] with vocab > 0".into(),
            });
        }
        check_dtype(logits)?;
        if self.is_plain_greedy() {
            // Fast path: one argmax, one sync.
            let token = mlx_rs::ops::indexing::argmax(logits, false)
                .context("taking the argmax of the logits")?
                .try_item_cast::<u32>()
                .context("reading the argmax back")?;
            self.record(token);
            return Ok(Sampled {
                token,
                logprob: None,
                top_logprobs: Vec::new(),
            });
        }
        let row = logits
            .reshape(&[1, -1])
            .context("reshaping the logits to one row")?;
        let mut sampled = Self::sample_batch(&mut [self], &row)?;
        sampled.pop().ok_or_else(|| SamplingError::BadShape {
            shape: row.shape().to_vec(),
            expected: "one row".into(),
        })
    }

    /// Samples one token per row of `logits` (`[B, vocab]`, any floating
    /// dtype): row `i` uses `samplers[i]`. Each row's result equals what
    /// [`Sampler::sample`] would give for that row alone.
    pub fn sample_batch(
        samplers: &mut [&mut Sampler],
        logits: &Array,
    ) -> Result<Vec<Sampled>, SamplingError> {
        let pending = Self::prepare_batch(samplers, logits)?;
        transforms::eval(pending.arrays()).context("evaluating the sampling step")?;
        let results = pending.read()?;
        for (sampler, sampled) in samplers.iter_mut().zip(&results) {
            sampler.record(sampled.token);
        }
        Ok(results)
    }

    /// The device half of [`Sampler::sample_batch`]: builds the sampled tokens
    /// (and logprob outputs) as lazy arrays without waiting for them, so an
    /// engine can start the next forward pass on [`PendingBatch::tokens`]
    /// before reading this one back. Random draws advance here; tokens enter
    /// the samplers' histories only when the caller records them after
    /// [`PendingBatch::read`], so a sampler
    /// that [`depends_on_history`](Sampler::depends_on_history) must be read
    /// before its next batch is prepared.
    pub fn prepare_batch(
        samplers: &mut [&mut Sampler],
        logits: &Array,
    ) -> Result<PendingBatch, SamplingError> {
        let (batch, vocab) = match logits.shape() {
            &[batch, vocab] if usize::try_from(batch).ok() == Some(samplers.len()) => {
                (batch, vocab)
            }
            shape => {
                return Err(SamplingError::BadShape {
                    shape: shape.to_vec(),
                    expected: format!("[{}, vocab] (one row per sampler)", samplers.len()),
                })
            }
        };
        if vocab <= 0 {
            return Err(SamplingError::BadShape {
                shape: logits.shape().to_vec(),
                expected: "a positive vocabulary dimension".into(),
            });
        }
        check_dtype(logits)?;
        let constrained = samplers.iter().any(|s| s.constraint.is_some());
        if constrained {
            // Start the forward pass now; the grammar masks are computed on
            // the host meanwhile.
            transforms::async_eval([logits]).context("starting the forward pass")?;
        }
        let mut pending = PendingBatch {
            tokens: Array::from_slice::<u32>(&[], &[0]),
            pieces: Vec::new(),
            chosen: None,
            top: None,
            top_n: 0,
            batch,
            vocab,
            rows: samplers
                .iter()
                .map(|s| (s.wants_logprobs(), s.params.top_logprobs))
                .collect(),
        };
        if batch == 0 {
            return Ok(pending);
        }

        if samplers.iter().all(|s| s.is_plain_greedy()) {
            // Fast path: one argmax over [B, vocab].
            pending.tokens =
                argmax_axis(logits, -1, false).context("taking the argmax of the logits")?;
            return pending.with_host_pieces();
        }

        let raw = logits
            .as_type::<f32>()
            .context("casting the logits to f32")?;
        let logprobs = if samplers.iter().any(|s| s.wants_logprobs()) {
            let norm = raw
                .logsumexp_axis(-1, true)
                .context("normalising the logits")?;
            Some(raw.subtract(&norm).context("normalising the logits")?)
        } else {
            None
        };

        let mut adjusted = apply_adjustments(&raw, samplers, vocab)?;
        if constrained {
            adjusted = apply_grammar_masks(&adjusted, samplers, batch, vocab)?;
        }
        pending.tokens = if samplers.iter().all(|s| s.is_greedy()) {
            argmax_axis(&adjusted, -1, false).context("taking the argmax of the logits")?
        } else {
            draw(&adjusted, samplers, vocab)?
        };

        // Logprob outputs, evaluated together with the tokens.
        pending.top_n = samplers
            .iter()
            .filter(|s| s.wants_logprobs())
            .map(|s| s.params.top_logprobs)
            .max()
            .unwrap_or(0)
            .min(usize::try_from(vocab).unwrap_or(usize::MAX));
        if let Some(logprobs) = &logprobs {
            let chosen = pending
                .tokens
                .reshape(&[batch, 1])
                .and_then(|t| logprobs.take_along_axis(&t, -1))
                .context("gathering the chosen tokens' logprobs")?;
            pending.chosen = Some(chosen);
            if pending.top_n > 0 {
                pending.top = Some(top_entries(logprobs, pending.top_n)?);
            }
        }
        pending.with_host_pieces()
    }

    /// True when the next draw depends on the tokens generated so far
    /// (repetition, presence or frequency penalty): such a sampler's previous
    /// token must be read back before its next batch is prepared.
    pub fn depends_on_history(&self) -> bool {
        self.repetition_on()
            || self.params.presence_penalty != 0.0
            || self.params.frequency_penalty != 0.0
            || self.constraint.is_some()
    }

    /// Whether this sequence's grammar is complete: only an end-of-sequence
    /// token may follow (`false` when unconstrained).
    pub fn grammar_complete(&self) -> bool {
        self.constraint
            .as_ref()
            .is_some_and(TokenConstraint::is_complete)
    }

    fn is_greedy(&self) -> bool {
        // A NaN temperature (rejected by `validate`) counts as greedy.
        self.params.temperature.is_nan() || self.params.temperature < GREEDY_TEMPERATURE
    }

    fn wants_logprobs(&self) -> bool {
        self.params.logprobs || self.params.top_logprobs > 0
    }

    fn has_adjustments(&self) -> bool {
        !self.logit_bias.is_empty()
            || !self.recent_counts.is_empty()
            || !self.output_counts.is_empty()
    }

    /// Greedy with nothing to compute but the argmax.
    fn is_plain_greedy(&self) -> bool {
        self.is_greedy()
            && !self.wants_logprobs()
            && !self.has_adjustments()
            && self.constraint.is_none()
    }

    fn repetition_on(&self) -> bool {
        self.params.repetition_penalty != 1.0
    }

    fn remember_in_window(&mut self, token: u32) {
        *self.recent_counts.entry(token).or_insert(0) += 1;
        let window = self.params.repetition_window;
        if window == 0 {
            return;
        }
        self.recent.push_back(token);
        if self.recent.len() > window {
            if let Some(old) = self.recent.pop_front() {
                if let Some(count) = self.recent_counts.get_mut(&old) {
                    *count -= 1;
                    if *count == 0 {
                        self.recent_counts.remove(&old);
                    }
                }
            }
        }
    }

    /// This row's logit edits as `(token, repetition factor, additive delta)`,
    /// sorted by token. History tokens outside the vocabulary are skipped (no
    /// logit to edit); a `logit_bias` id outside it is an error.
    fn adjustments(&self, vocab: usize) -> Result<Vec<(u32, f32, f32)>, SamplingError> {
        let mut edits: BTreeMap<u32, (f32, f32)> = BTreeMap::new();
        for &token in self.recent_counts.keys() {
            if token_index(token) < vocab {
                edits.entry(token).or_insert((1.0, 0.0)).0 = self.params.repetition_penalty;
            }
        }
        for (&token, &count) in &self.output_counts {
            if token_index(token) < vocab {
                // Counts of a sequence's tokens stay far below f32's exact-integer range.
                let penalty =
                    self.params.presence_penalty + self.params.frequency_penalty * count as f32;
                edits.entry(token).or_insert((1.0, 0.0)).1 -= penalty;
            }
        }
        for &(token, bias) in &self.logit_bias {
            if token_index(token) >= vocab {
                return Err(SamplingError::TokenOutOfVocabulary {
                    token,
                    vocab_size: vocab,
                });
            }
            edits.entry(token).or_insert((1.0, 0.0)).1 += bias;
        }
        Ok(edits
            .into_iter()
            .map(|(token, (factor, delta))| (token, factor, delta))
            .collect())
    }

    /// The PRNG key for this sampler's next draw, derived from `(seed, draws)`.
    fn next_key(&mut self) -> Result<Array, SamplingError> {
        let key = random::key(mix_seed(self.seed, self.draws)).context("creating a PRNG key")?;
        self.draws += 1;
        Ok(key)
    }

    fn row_filter(&self, vocab: i32) -> RowFilter {
        let vocab_len = usize::try_from(vocab).unwrap_or(0);
        let top_k = self.params.top_k;
        let top_k_on = !self.is_greedy() && top_k > 0 && top_k < vocab_len;
        let top_p = self.params.top_p;
        let top_p_on = !self.is_greedy() && top_p < 1.0;
        let min_p = self.params.min_p;
        let min_p_on = !self.is_greedy() && min_p > 0.0;
        RowFilter {
            top_k_last: if top_k_on {
                // top_k < vocab <= i32::MAX, so it fits.
                u32::try_from(top_k - 1).unwrap_or(u32::MAX)
            } else {
                u32::try_from(vocab - 1).unwrap_or(0)
            },
            top_k_on,
            // A non-positive top_p would drop every token; keep the top one instead.
            top_p: if top_p_on {
                top_p.max(f32::MIN_POSITIVE)
            } else {
                f32::INFINITY
            },
            log_min_p: if min_p_on {
                min_p.ln()
            } else {
                f32::NEG_INFINITY
            },
        }
    }
}

/// Sampled tokens of one batch not yet read back: see
/// [`Sampler::prepare_batch`].
pub struct PendingBatch {
    tokens: Array,
    /// The tokens again in copies of at most two (8 bytes), which the host
    /// reads instead of `tokens` (empty: it reads `tokens`); see
    /// [`PendingBatch::with_host_pieces`].
    pieces: Vec<Array>,
    chosen: Option<Array>,
    top: Option<(Array, Array)>,
    top_n: usize,
    batch: i32,
    vocab: i32,
    /// Per row: logprobs wanted, how many top logprobs.
    rows: Vec<(bool, usize)>,
}

impl PendingBatch {
    /// The sampled token ids, `[B]` (lazy).
    pub fn tokens(&self) -> &Array {
        &self.tokens
    }

    /// On MLX's CUDA backend a buffer of more than 8 bytes is managed
    /// memory: the host reading the sampled tokens moves their page to the
    /// host, and the next kernel that touches that page (it holds other small
    /// buffers) moves it back, ~100 µs of GPU time a step from 3 rows on
    /// (docs/cuda.md). Buffers of up to 8 bytes live in a pool the host reads
    /// in place, so the host reads copies of at most two tokens each; the
    /// next step reads `tokens` on the device. Only with
    /// [`hearth_models::lean::carry_inputs`] (a one- or two-row batch's
    /// tokens are in that pool already).
    fn with_host_pieces(mut self) -> Result<Self, SamplingError> {
        if hearth_models::lean::carry_inputs() {
            self.pieces = host_pieces(&self.tokens).context("copying the tokens for the host")?;
        }
        Ok(self)
    }

    /// Every output array, to hand to `eval`/`async_eval`.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut arrays = vec![&self.tokens];
        arrays.extend(&self.pieces);
        arrays.extend(&self.chosen);
        if let Some((ids, values)) = &self.top {
            arrays.push(ids);
            arrays.push(values);
        }
        arrays
    }

    /// Reads the batch back (waiting for it), one result per row. The
    /// caller records each token in its sampler ([`Sampler::record`]).
    pub fn read(self) -> Result<Vec<Sampled>, SamplingError> {
        let (batch, vocab, top_n) = (self.batch, self.vocab, self.top_n);
        if batch == 0 {
            return Ok(Vec::new());
        }
        let tokens = if self.pieces.is_empty() {
            self.tokens
                .to_vec_cast::<u32>()
                .context("reading the sampled tokens back")?
        } else {
            read_host_pieces(&self.pieces).context("reading the sampled tokens back")?
        };
        let chosen = match &self.chosen {
            Some(chosen) => chosen
                .to_vec_cast::<f32>()
                .context("reading the logprobs back")?,
            None => Vec::new(),
        };
        let (top_ids, top_values) = match &self.top {
            Some((ids, values)) => (
                ids.to_vec_cast::<u32>()
                    .context("reading the top logprobs back")?,
                values
                    .to_vec_cast::<f32>()
                    .context("reading the top logprobs back")?,
            ),
            None => (Vec::new(), Vec::new()),
        };

        let mut results = Vec::with_capacity(self.rows.len());
        for (row, (&(wants_logprobs, top_logprobs), &token)) in
            self.rows.iter().zip(&tokens).enumerate()
        {
            let mut sampled = Sampled {
                token,
                logprob: None,
                top_logprobs: Vec::new(),
            };
            if wants_logprobs {
                sampled.logprob = chosen.get(row).copied();
                let wanted = top_logprobs.min(top_n);
                if wanted > 0 {
                    let span = row * top_n..(row + 1) * top_n;
                    let (Some(ids), Some(values)) =
                        (top_ids.get(span.clone()), top_values.get(span))
                    else {
                        return Err(SamplingError::BadShape {
                            shape: vec![batch, vocab],
                            expected: "top logprobs for every row".into(),
                        });
                    };
                    let mut pairs: Vec<(u32, f32)> =
                        ids.iter().copied().zip(values.iter().copied()).collect();
                    pairs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                    pairs.truncate(wanted);
                    sampled.top_logprobs = pairs;
                }
            }
            results.push(sampled);
        }
        if results.len() != self.rows.len() {
            return Err(SamplingError::BadShape {
                shape: vec![batch, vocab],
                expected: "one sampled token per row".into(),
            });
        }
        Ok(results)
    }
}

/// Sampled token ids (`[B]`) copied for the host to read, at most two (8
/// bytes) a copy; none for one or two rows (read those as they are).
///
/// On MLX's CUDA backend a buffer of more than 8 bytes is managed memory:
/// the host reading it moves its page to the host, and the next kernel that
/// touches that page (it holds other small buffers) moves it back, ~100 µs of
/// GPU time a step (docs/cuda.md). Buffers of up to 8 bytes live in a pool
/// the host reads in place; the next step reads the tokens themselves on the
/// device. The copies are conversions (int32 <-> uint32): a slice or a copy
/// of the same type would share the tokens' buffer.
pub fn host_pieces(tokens: &Array) -> Result<Vec<Array>, mlx_rs::error::Exception> {
    let n = tokens.size() as i32;
    if n <= 2 {
        return Ok(Vec::new());
    }
    let to = if tokens.dtype() == Dtype::Int32 {
        Dtype::Uint32
    } else {
        Dtype::Int32
    };
    let flat = tokens.reshape(&[-1])?;
    (0..n)
        .step_by(2)
        .map(|k| flat.try_index(k..(k + 2).min(n))?.as_dtype(to))
        .collect()
}

/// The tokens of [`host_pieces`] (evaluated), in order; each read as it is
/// (a cast would be another evaluation).
pub fn read_host_pieces(pieces: &[Array]) -> Result<Vec<u32>, mlx_rs::error::AsSliceError> {
    let mut tokens = Vec::with_capacity(pieces.len() * 2);
    for piece in pieces {
        if piece.dtype() == Dtype::Int32 {
            tokens.extend(piece.try_as_slice::<i32>()?.iter().map(|&t| t as u32));
        } else {
            tokens.extend(piece.try_as_slice::<u32>()?);
        }
    }
    Ok(tokens)
}

fn check_dtype(logits: &Array) -> Result<(), SamplingError> {
    let dtype = logits.dtype();
    if dtype.is_float() {
        Ok(())
    } else {
        Err(SamplingError::BadDtype { dtype })
    }
}

/// SplitMix64 finaliser over `seed` and the draw counter: decorrelates the
/// per-draw seeds handed to MLX's key derivation.
fn mix_seed(seed: u64, draw: u64) -> u64 {
    let mut z = seed.wrapping_add(draw.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Applies penalties and logit bias of every row with one gather and one
/// scatter over the flattened `[B * vocab]` logits.
fn apply_adjustments(
    logits: &Array,
    samplers: &[&mut Sampler],
    vocab: i32,
) -> Result<Array, SamplingError> {
    let vocab_len = usize::try_from(vocab).unwrap_or(0);
    let mut indices: Vec<u32> = Vec::new();
    let mut factors: Vec<f32> = Vec::new();
    let mut deltas: Vec<f32> = Vec::new();
    for (row, sampler) in samplers.iter().enumerate() {
        if !sampler.has_adjustments() {
            continue;
        }
        for (token, factor, delta) in sampler.adjustments(vocab_len)? {
            let flat = (row as u64) * (vocab_len as u64) + u64::from(token);
            let flat = u32::try_from(flat).map_err(|_| SamplingError::BadShape {
                shape: logits.shape().to_vec(),
                expected: "fewer than 2^32 logits in the batch".into(),
            })?;
            indices.push(flat);
            factors.push(factor);
            deltas.push(delta);
        }
    }
    if indices.is_empty() {
        return Ok(logits.clone());
    }
    let edited = || -> Result<Array, mlx_rs::error::Exception> {
        let count = i32::try_from(indices.len()).unwrap_or(i32::MAX);
        let index = Array::from_slice(&indices, &[count]);
        let factor = Array::from_slice(&factors, &[count]);
        let delta = Array::from_slice(&deltas, &[count]);
        let flat = logits.reshape(&[-1])?;
        let current = flat.take_axis(&index, 0)?;
        let penalised = select(
            current.gt(Array::from_f32(0.0))?,
            current.divide(&factor)?,
            current.multiply(&factor)?,
        )?
        .add(&delta)?;
        flat.put_along_axis(&index, &penalised, 0)?
            .reshape(logits.shape())
    };
    edited().context("applying penalties and logit bias")
}

/// Sets the logits of tokens a row's grammar does not allow to `-inf`;
/// rows without a grammar keep every logit as it is.
fn apply_grammar_masks(
    logits: &Array,
    samplers: &mut [&mut Sampler],
    batch: i32,
    vocab: i32,
) -> Result<Array, SamplingError> {
    let vocab_len = usize::try_from(vocab).unwrap_or(0);
    let mut allowed = vec![true; samplers.len() * vocab_len];
    for (row, sampler) in samplers.iter_mut().enumerate() {
        if let Some(constraint) = &mut sampler.constraint {
            constraint.fill_allowed(&mut allowed[row * vocab_len..(row + 1) * vocab_len]);
        }
    }
    let masked = || -> Result<Array, mlx_rs::error::Exception> {
        let allowed = Array::from_slice(&allowed, &[batch, vocab]);
        select(&allowed, logits, Array::from_f32(f32::NEG_INFINITY))
    };
    masked().context("applying the grammar masks")
}

/// Temperature, truncation and the Gumbel-max draw for a batch with at least
/// one sampling row; greedy rows get temperature 1, no truncation and no noise.
fn draw(logits: &Array, samplers: &mut [&mut Sampler], vocab: i32) -> Result<Array, SamplingError> {
    let batch = i32::try_from(samplers.len()).unwrap_or(i32::MAX);
    let inverse_temperature: Vec<f32> = samplers
        .iter()
        .map(|s| {
            if s.is_greedy() {
                1.0
            } else {
                s.params.temperature.recip()
            }
        })
        .collect();
    let filters: Vec<RowFilter> = samplers.iter().map(|s| s.row_filter(vocab)).collect();

    let mut noise_rows = Vec::with_capacity(samplers.len());
    for sampler in samplers.iter_mut() {
        let row = if sampler.is_greedy() {
            zeros::<f32>(&[1, vocab]).context("building the noise of a greedy row")?
        } else {
            let key = sampler.next_key()?;
            random::gumbel::<f32>(&[1, vocab][..], &key).context("drawing Gumbel noise")?
        };
        noise_rows.push(row);
    }

    let sampled = || -> Result<Array, mlx_rs::error::Exception> {
        let scaled = logits.multiply(Array::from_slice(&inverse_temperature, &[batch, 1]))?;
        let truncated = truncate(&scaled, &filters, batch)?;
        let noise = match noise_rows.as_slice() {
            [single] => single.clone(),
            rows => mlx_rs::ops::concatenate(rows, 0)?,
        };
        argmax_axis(truncated.add(&noise)?, -1, false)
    };
    sampled().context("sampling from the truncated distribution")
}

/// Sets every logit below its row's cut-off (top-k, then top-p, then min-p)
/// to `-inf`. Rows are `[B, vocab]`, already divided by their temperature.
fn truncate(
    scaled: &Array,
    filters: &[RowFilter],
    batch: i32,
) -> Result<Array, mlx_rs::error::Exception> {
    let any_top_k = filters.iter().any(|f| f.top_k_on);
    let any_top_p = filters.iter().any(|f| f.top_p.is_finite());
    let any_min_p = filters.iter().any(|f| f.log_min_p.is_finite());
    if !(any_top_k || any_top_p || any_min_p) {
        return Ok(scaled.clone());
    }
    let negative_infinity = Array::from_f32(f32::NEG_INFINITY);
    let mut cutoff: Option<Array> = None;

    if any_top_k || any_top_p {
        // Descending sort of each row's values (indices are never needed).
        let descending = sort_axis(scaled.negative()?, -1)?.negative()?;
        let last_kept: Vec<u32> = filters.iter().map(|f| f.top_k_last).collect();
        let top_k_cutoff =
            descending.take_along_axis(Array::from_slice(&last_kept, &[batch, 1]), -1)?;
        let mut row_cutoff = top_k_cutoff;
        if any_top_p {
            // Nucleus over the top-k survivors: keep a sorted position while
            // the mass strictly before it is below top_p (so the first stays).
            let survivors = select(descending.ge(&row_cutoff)?, &descending, &negative_infinity)?;
            let probabilities = softmax_axis(&survivors, -1, true)?;
            let mass_before = probabilities.cumsum(-1, false, false)?;
            let top_p: Vec<f32> = filters.iter().map(|f| f.top_p).collect();
            let in_nucleus = mass_before.lt(Array::from_slice(&top_p, &[batch, 1]))?;
            let top_p_cutoff = select(&in_nucleus, &descending, Array::from_f32(f32::INFINITY))?
                .min_axis(-1, true)?;
            row_cutoff = maximum(&row_cutoff, &top_p_cutoff)?;
        }
        cutoff = Some(row_cutoff);
    }

    if any_min_p {
        let log_min_p: Vec<f32> = filters.iter().map(|f| f.log_min_p).collect();
        let min_p_cutoff = scaled
            .max_axis(-1, true)?
            .add(Array::from_slice(&log_min_p, &[batch, 1]))?;
        cutoff = Some(match cutoff {
            Some(previous) => maximum(&previous, &min_p_cutoff)?,
            None => min_p_cutoff,
        });
    }

    match cutoff {
        Some(cutoff) => select(scaled.ge(&cutoff)?, scaled, &negative_infinity),
        None => Ok(scaled.clone()),
    }
}

/// The `count` largest entries of each row of `logprobs` (`[B, vocab]`), in
/// no particular order: `(ids [B, count], values [B, count])`.
fn top_entries(logprobs: &Array, count: usize) -> Result<(Array, Array), SamplingError> {
    let count = i32::try_from(count).map_err(|_| SamplingError::InvalidParameter {
        name: "top_logprobs",
        reason: format!("{count} does not fit in i32"),
    })?;
    let entries = || -> Result<(Array, Array), mlx_rs::error::Exception> {
        let partitioned = argpartition_axis(logprobs.negative()?, count - 1, -1)?;
        let ids = partitioned.try_index((.., ..count))?.contiguous()?;
        let values = logprobs.take_along_axis(&ids, -1)?;
        Ok((ids, values))
    };
    entries().context("selecting the top logprobs")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens come back through copies of at most two (each its own buffer,
    /// of the other int type), in order; one or two rows need none.
    #[test]
    fn host_pieces_hold_the_tokens_two_at_a_time() {
        for n in 0..8u32 {
            let values: Vec<u32> = (0..n).map(|i| 1000 * i + 7).collect();
            let signed: Vec<i32> = values.iter().map(|&v| v as i32).collect();
            for tokens in [
                Array::from_slice(&values, &[n as i32]),
                Array::from_slice(&signed, &[n as i32]),
            ] {
                let pieces = host_pieces(&tokens).unwrap();
                if n <= 2 {
                    assert!(pieces.is_empty());
                    continue;
                }
                assert_eq!(pieces.len(), n.div_ceil(2) as usize);
                for p in &pieces {
                    assert!(p.size() <= 2 && p.dtype() != tokens.dtype());
                }
                transforms::eval(pieces.iter()).unwrap();
                assert_eq!(read_host_pieces(&pieces).unwrap(), values);
            }
        }
    }

    fn row(values: &[f32]) -> Array {
        Array::from_slice(values, &[values.len() as i32])
    }

    fn sampling(temperature: f32, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature,
            seed: Some(seed),
            ..SamplingParams::default()
        }
    }

    fn log_softmax_f64(values: &[f32]) -> Vec<f64> {
        let max = values
            .iter()
            .map(|&v| f64::from(v))
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = values.iter().map(|&v| (f64::from(v) - max).exp()).sum();
        values
            .iter()
            .map(|&v| f64::from(v) - max - sum.ln())
            .collect()
    }

    /// Logits whose softmax is exactly `probabilities`.
    fn logits_for(probabilities: &[f32]) -> Vec<f32> {
        probabilities.iter().map(|p| p.ln()).collect()
    }

    fn draw_many(params: SamplingParams, logits: &Array, draws: usize) -> Vec<u32> {
        let mut sampler = Sampler::new(params, &[]);
        (0..draws)
            .map(|_| sampler.sample(logits).expect("sample").token)
            .collect()
    }

    #[test]
    fn greedy_picks_argmax() {
        let logits = row(&[0.1, 2.5, -1.0, 2.4, 0.0]);
        let mut sampler = Sampler::new(SamplingParams::default(), &[]);
        assert_eq!(sampler.sample(&logits).expect("sample").token, 1);
        let two_d = logits.reshape(&[1, 5]).expect("reshape");
        assert_eq!(sampler.sample(&two_d).expect("sample").token, 1);
    }

    #[test]
    fn greedy_accepts_half_precision() {
        let logits = row(&[0.1, -2.0, 3.0, 1.0])
            .as_dtype(Dtype::Bfloat16)
            .expect("cast");
        let params = SamplingParams {
            logprobs: true,
            ..SamplingParams::default()
        };
        let mut sampler = Sampler::new(params, &[]);
        let sampled = sampler.sample(&logits).expect("sample");
        assert_eq!(sampled.token, 2);
        assert!(sampled.logprob.is_some());
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        let logits = row(&[0.3, 1.0, 0.9, -0.5, 0.95, 0.2]);
        for temperature in [0.5, 1.0, 5.0, 100.0] {
            let params = SamplingParams {
                top_k: 1,
                ..sampling(temperature, 7)
            };
            let tokens = draw_many(params, &logits, 50);
            assert!(tokens.iter().all(|&t| t == 1), "{temperature}: {tokens:?}");
        }
    }

    #[test]
    fn top_k_keeps_only_the_k_most_likely() {
        let logits = row(&[0.0, 3.0, 2.9, 2.8, 0.1, 0.2]);
        let params = SamplingParams {
            top_k: 2,
            ..sampling(10.0, 3)
        };
        let tokens = draw_many(params, &logits, 300);
        assert!(tokens.iter().all(|&t| t == 1 || t == 2), "{tokens:?}");
        assert!(tokens.contains(&1) && tokens.contains(&2));
    }

    #[test]
    fn top_p_only_returns_nucleus_tokens() {
        // Sorted: 0.5 (id 2), 0.3 (id 0), 0.15 (id 3), 0.05 (id 1).
        // top_p = 0.7: mass before id 0 is 0.5 < 0.7 (kept), before id 3 is 0.8 (dropped).
        let logits = row(&logits_for(&[0.3, 0.05, 0.5, 0.15]));
        let params = SamplingParams {
            top_p: 0.7,
            ..sampling(1.0, 11)
        };
        let tokens = draw_many(params, &logits, 1000);
        assert!(tokens.iter().all(|&t| t == 2 || t == 0), "{tokens:?}");
        assert!(tokens.contains(&2) && tokens.contains(&0));
    }

    #[test]
    fn tiny_top_p_keeps_the_most_likely_token() {
        let logits = row(&logits_for(&[0.3, 0.05, 0.5, 0.15]));
        let params = SamplingParams {
            top_p: 1e-6,
            ..sampling(1.0, 5)
        };
        assert!(draw_many(params, &logits, 100).iter().all(|&t| t == 2));
    }

    #[test]
    fn top_p_applies_to_top_k_survivors() {
        // Top-2 renormalised: 0.4/0.7 = 0.571 (id 0), 0.3/0.7 = 0.429 (id 1).
        // With top_p = 0.5 the mass before id 1 is 0.571 >= 0.5, so only id 0
        // stays; over the full distribution it would be 0.4 < 0.5 and id 1
        // would stay too.
        let logits = row(&logits_for(&[0.4, 0.3, 0.2, 0.1]));
        let with_top_k = SamplingParams {
            top_k: 2,
            top_p: 0.5,
            ..sampling(1.0, 9)
        };
        assert!(draw_many(with_top_k, &logits, 200).iter().all(|&t| t == 0));
        let without_top_k = SamplingParams {
            top_p: 0.5,
            ..sampling(1.0, 9)
        };
        let tokens = draw_many(without_top_k, &logits, 400);
        assert!(tokens.iter().all(|&t| t < 2), "{tokens:?}");
        assert!(tokens.contains(&1), "{tokens:?}");
    }

    #[test]
    fn min_p_excludes_unlikely_tokens() {
        // min_p = 0.3 of the top 0.5 → threshold 0.15: ids 0 (0.4) and 2 (0.5) stay.
        let logits = row(&logits_for(&[0.4, 0.05, 0.5, 0.05]));
        let params = SamplingParams {
            min_p: 0.3,
            ..sampling(1.0, 13)
        };
        let tokens = draw_many(params, &logits, 1000);
        assert!(tokens.iter().all(|&t| t == 0 || t == 2), "{tokens:?}");
        assert!(tokens.contains(&0) && tokens.contains(&2));
    }

    #[test]
    fn seeded_sampling_is_reproducible() {
        let logits = row(&[0.5, 0.4, 0.3, 0.2, 0.1, 0.0, -0.1, -0.2]);
        let first = draw_many(sampling(1.0, 42), &logits, 64);
        let second = draw_many(sampling(1.0, 42), &logits, 64);
        assert_eq!(first, second);
    }

    #[test]
    fn different_seeds_differ() {
        let logits = row(&[0.0; 16]);
        let first = draw_many(sampling(1.0, 1), &logits, 64);
        let second = draw_many(sampling(1.0, 2), &logits, 64);
        assert_ne!(first, second);
        let unseeded = SamplingParams {
            temperature: 1.0,
            ..SamplingParams::default()
        };
        assert_ne!(
            draw_many(unseeded.clone(), &logits, 64),
            draw_many(unseeded, &logits, 64)
        );
    }

    #[test]
    fn empirical_frequencies_match_probabilities() {
        let probabilities = [0.1f32, 0.2, 0.3, 0.4];
        let logits = row(&logits_for(&probabilities));
        let draws = 2000;
        let tokens = draw_many(sampling(1.0, 2024), &logits, draws);
        for (token, &p) in probabilities.iter().enumerate() {
            let seen = tokens.iter().filter(|&&t| t as usize == token).count();
            let frequency = seen as f64 / draws as f64;
            // Four standard deviations of a binomial proportion at n = 2000.
            let tolerance = 4.0 * (f64::from(p) * (1.0 - f64::from(p)) / draws as f64).sqrt();
            assert!(
                (frequency - f64::from(p)).abs() < tolerance,
                "token {token}: frequency {frequency}, probability {p}"
            );
        }
    }

    #[test]
    fn temperature_flattens_the_distribution() {
        // At temperature 2 the probabilities are proportional to sqrt(p).
        let logits = row(&logits_for(&[0.1, 0.9]));
        let tokens = draw_many(sampling(2.0, 77), &logits, 2000);
        let expected = 0.1f64.sqrt() / (0.1f64.sqrt() + 0.9f64.sqrt());
        let seen = tokens.iter().filter(|&&t| t == 0).count() as f64 / 2000.0;
        assert!((seen - expected).abs() < 0.04, "{seen} vs {expected}");
    }

    #[test]
    fn presence_penalty_breaks_a_tie() {
        let logits = row(&[1.0, 1.0, 0.0]);
        let mut sampler = Sampler::new(
            SamplingParams {
                presence_penalty: 0.5,
                ..SamplingParams::default()
            },
            &[],
        );
        // Argmax of a tie is the lower id; once generated, it is penalised.
        assert_eq!(sampler.sample(&logits).expect("sample").token, 0);
        assert_eq!(sampler.sample(&logits).expect("sample").token, 1);
        // Both penalised once: tie again, lower id wins.
        assert_eq!(sampler.sample(&logits).expect("sample").token, 0);
    }

    #[test]
    fn frequency_penalty_scales_with_count() {
        // Token 0's logit drops by 0.6 per use: 2.5 → 1.9 → 1.3 → 0.7, so
        // token 1 (1.0) wins at the fourth step; a presence penalty could not
        // do that without also deciding the second step.
        let logits = row(&[2.5, 1.0, 0.0]);
        let mut sampler = Sampler::new(
            SamplingParams {
                frequency_penalty: 0.6,
                ..SamplingParams::default()
            },
            &[],
        );
        let tokens: Vec<u32> = (0..4)
            .map(|_| sampler.sample(&logits).expect("sample").token)
            .collect();
        assert_eq!(tokens, vec![0, 0, 0, 1]);
    }

    #[test]
    fn presence_and_frequency_ignore_the_prompt() {
        let logits = row(&[1.0, 1.0]);
        let mut sampler = Sampler::new(
            SamplingParams {
                presence_penalty: 1.0,
                frequency_penalty: 1.0,
                ..SamplingParams::default()
            },
            &[0, 0, 0],
        );
        assert_eq!(sampler.sample(&logits).expect("sample").token, 0);
    }

    #[test]
    fn repetition_penalty_uses_prompt_window_and_sign() {
        // Positive tie: the prompt's token 0 is divided by 2 → token 1 wins.
        let mut sampler = Sampler::new(
            SamplingParams {
                repetition_penalty: 2.0,
                ..SamplingParams::default()
            },
            &[0],
        );
        assert_eq!(sampler.sample(&row(&[1.0, 1.0])).expect("sample").token, 1);
        // Negative values are multiplied: -1 * 2 = -2 for both seen tokens 0
        // and 1 now, while unseen token 2 at -1.5 wins.
        assert_eq!(
            sampler
                .sample(&row(&[-1.0, -1.0, -1.5]))
                .expect("sample")
                .token,
            2
        );
    }

    #[test]
    fn repetition_window_forgets_old_tokens() {
        // Window of 2 over prompt [0, 1, 2]: only 1 and 2 are penalised.
        let mut sampler = Sampler::new(
            SamplingParams {
                repetition_penalty: 2.0,
                repetition_window: 2,
                ..SamplingParams::default()
            },
            &[0, 1, 2],
        );
        assert_eq!(
            sampler
                .sample(&row(&[1.0, 1.2, 1.2]))
                .expect("sample")
                .token,
            0
        );
    }

    #[test]
    fn logit_bias_bans_and_forces() {
        let logits = row(&[3.0, 1.0, 0.0, 2.0]);
        let banned = SamplingParams {
            logit_bias: vec![(0, f32::NEG_INFINITY)],
            ..SamplingParams::default()
        };
        assert_eq!(
            Sampler::new(banned.clone(), &[])
                .sample(&logits)
                .expect("sample")
                .token,
            3
        );
        let banned_sampled = SamplingParams {
            temperature: 5.0,
            seed: Some(1),
            ..banned
        };
        assert!(draw_many(banned_sampled, &logits, 300)
            .iter()
            .all(|&t| t != 0));
        let forced = SamplingParams {
            logit_bias: vec![(2, 100.0)],
            ..sampling(1.0, 8)
        };
        assert!(draw_many(forced, &logits, 100).iter().all(|&t| t == 2));
    }

    #[test]
    fn logprobs_match_host_log_softmax() {
        let values = [1.5f32, -0.25, 3.0, 0.0, 2.75, -4.0, 0.5];
        let expected = log_softmax_f64(&values);
        for temperature in [0.0, 0.7] {
            let params = SamplingParams {
                logprobs: true,
                top_logprobs: 3,
                // Logprobs describe the raw model distribution, not the biased one.
                logit_bias: vec![(5, 10.0)],
                ..sampling(temperature, 21)
            };
            let mut sampler = Sampler::new(params, &[]);
            let sampled = sampler.sample(&row(&values)).expect("sample");
            let logprob = f64::from(sampled.logprob.expect("logprob requested"));
            let token = sampled.token as usize;
            assert!((logprob - expected[token]).abs() < 1e-5, "{logprob}");

            let mut order: Vec<usize> = (0..values.len()).collect();
            order.sort_by(|&a, &b| expected[b].total_cmp(&expected[a]));
            assert_eq!(sampled.top_logprobs.len(), 3);
            for (&(id, value), &want) in sampled.top_logprobs.iter().zip(&order) {
                assert_eq!(id as usize, want);
                assert!((f64::from(value) - expected[want]).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn top_logprobs_are_sorted_and_can_cover_the_vocabulary() {
        let values = [0.3f32, 0.1, 0.2];
        let params = SamplingParams {
            top_logprobs: 20,
            ..SamplingParams::default()
        };
        let sampled = Sampler::new(params, &[])
            .sample(&row(&values))
            .expect("sample");
        let ids: Vec<u32> = sampled.top_logprobs.iter().map(|&(id, _)| id).collect();
        assert_eq!(ids, vec![0, 2, 1]);
        assert!(sampled
            .top_logprobs
            .windows(2)
            .all(|pair| pair[0].1 >= pair[1].1));
        assert!(sampled.logprob.is_some(), "top_logprobs implies logprobs");
    }

    fn batch_logits() -> (Vec<Vec<f32>>, Array) {
        let rows: Vec<Vec<f32>> = (0..4)
            .map(|r| {
                (0..32)
                    .map(|i| ((i * 7 + r * 13) % 11) as f32 * 0.3 - (i as f32) * 0.01)
                    .collect()
            })
            .collect();
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        let array = Array::from_slice(&flat, &[4, 32]);
        (rows, array)
    }

    fn assert_batch_matches_rows(params: Vec<SamplingParams>) {
        let (rows, array) = batch_logits();
        let mut batch: Vec<Sampler> = params
            .iter()
            .map(|p| Sampler::new(p.clone(), &[3]))
            .collect();
        let mut single: Vec<Sampler> = params
            .iter()
            .map(|p| Sampler::new(p.clone(), &[3]))
            .collect();
        for _step in 0..5 {
            let mut refs: Vec<&mut Sampler> = batch.iter_mut().collect();
            let batched = Sampler::sample_batch(&mut refs, &array).expect("batch");
            for (i, sampler) in single.iter_mut().enumerate() {
                let alone = sampler.sample(&row(&rows[i])).expect("sample");
                assert_eq!(batched[i], alone, "row {i}");
            }
        }
    }

    #[test]
    fn batch_rows_equal_single_rows_greedy() {
        assert_batch_matches_rows(vec![SamplingParams::default(); 4]);
    }

    #[test]
    fn batch_rows_equal_single_rows_mixed() {
        assert_batch_matches_rows(vec![
            SamplingParams {
                top_k: 5,
                top_p: 0.9,
                ..sampling(0.8, 1)
            },
            SamplingParams {
                presence_penalty: 0.7,
                logprobs: true,
                top_logprobs: 2,
                ..SamplingParams::default()
            },
            SamplingParams {
                min_p: 0.2,
                repetition_penalty: 1.3,
                top_logprobs: 4,
                ..sampling(1.5, 2)
            },
            sampling(1.0, 3),
        ]);
    }

    #[test]
    fn batch_rejects_mismatched_rows() {
        let (_, array) = batch_logits();
        let mut samplers = [
            Sampler::new(SamplingParams::default(), &[]),
            Sampler::new(SamplingParams::default(), &[]),
        ];
        let mut refs: Vec<&mut Sampler> = samplers.iter_mut().collect();
        assert!(matches!(
            Sampler::sample_batch(&mut refs, &array),
            Err(SamplingError::BadShape { .. })
        ));
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mut sampler = Sampler::new(SamplingParams::default(), &[]);
        let three_d = Array::from_slice(&[0.0f32; 8], &[2, 2, 2]);
        assert!(matches!(
            sampler.sample(&three_d),
            Err(SamplingError::BadShape { .. })
        ));
        let two_rows = Array::from_slice(&[0.0f32; 8], &[2, 4]);
        assert!(matches!(
            sampler.sample(&two_rows),
            Err(SamplingError::BadShape { .. })
        ));
        let ints = Array::from_slice(&[1i32, 2, 3], &[3]);
        assert!(matches!(
            sampler.sample(&ints),
            Err(SamplingError::BadDtype { .. })
        ));
        let out_of_vocab = SamplingParams {
            logit_bias: vec![(9, 1.0)],
            ..SamplingParams::default()
        };
        assert!(matches!(
            Sampler::new(out_of_vocab, &[]).sample(&row(&[0.0, 1.0])),
            Err(SamplingError::TokenOutOfVocabulary { token: 9, .. })
        ));
    }

    #[test]
    fn validate_checks_ranges() {
        let ok = SamplingParams::default();
        assert!(ok.validate(10).is_ok());
        let cases = [
            SamplingParams {
                temperature: -1.0,
                ..ok.clone()
            },
            SamplingParams {
                temperature: f32::NAN,
                ..ok.clone()
            },
            SamplingParams {
                top_p: 0.0,
                ..ok.clone()
            },
            SamplingParams {
                top_p: 1.5,
                ..ok.clone()
            },
            SamplingParams {
                min_p: f32::NAN,
                ..ok.clone()
            },
            SamplingParams {
                repetition_penalty: 0.0,
                ..ok.clone()
            },
            SamplingParams {
                presence_penalty: 2.5,
                ..ok.clone()
            },
            SamplingParams {
                frequency_penalty: f32::NAN,
                ..ok.clone()
            },
            SamplingParams {
                top_logprobs: 21,
                ..ok.clone()
            },
            SamplingParams {
                logit_bias: vec![(10, 1.0)],
                ..ok.clone()
            },
            SamplingParams {
                logit_bias: vec![(1, f32::NAN)],
                ..ok.clone()
            },
            SamplingParams {
                logit_bias: vec![(1, f32::INFINITY)],
                ..ok.clone()
            },
        ];
        for params in cases {
            assert!(params.validate(10).is_err(), "{params:?}");
        }
        let banned = SamplingParams {
            logit_bias: vec![(1, f32::NEG_INFINITY)],
            ..ok.clone()
        };
        assert!(banned.validate(10).is_ok());
        assert!(ok.validate(0).is_err());
    }
}
