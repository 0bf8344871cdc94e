//! The engine thread: the only code that touches MLX while serving.
//!
//! Each iteration: take new commands, drop cancelled jobs, admit waiting jobs
//! that fit (a row, KV memory), then run one step: a batched decode forward
//! over all rows with a decoding sequence (others ride along, ignored),
//! sampling one token per decoding sequence, then prompt chunks of
//! prefilling sequences (shortest remaining first) within the step's token
//! budget. When nothing is running the KV buffers are freed.

use std::{
    collections::VecDeque,
    path::PathBuf,
    sync::{atomic::Ordering, mpsc, Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;
use hearth_models::{BatchKv, BatchShape, CacheView, DecodeStep, Model};
use mlx_rs::{transforms, Array};

use super::{
    batch::{grown_shape, shape_bytes, Rows},
    Command, FinishReason, JobEvent, JobSummary, Metrics, ModelInfo, SchedulerConfig,
    SchedulerHandle, Shared, Submission,
};
use crate::engine::sampling::{PendingBatch, Sampled, Sampler};

/// Prompt tokens a step processes even when decoders use the whole budget,
/// so prefills always progress.
const MIN_PREFILL_PER_STEP: usize = 32;

pub(super) fn start(
    path: PathBuf,
    config: SchedulerConfig,
    mut load_progress: Box<dyn FnMut(hearth_models::LoadProgress) + Send>,
) -> anyhow::Result<SchedulerHandle> {
    let (commands, command_rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let metrics = Arc::new(Metrics::default());
    let thread_metrics = metrics.clone();
    let thread_config = config.clone();
    let thread = std::thread::Builder::new()
        .name("hearth-engine".into())
        .spawn(move || {
            let loaded = match hearth_models::load_with_progress(&path, &mut load_progress) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::Error::new(e)));
                    return;
                }
            };
            enable_cuda_gemv();
            let eos_token_ids = loaded.eos_token_ids();
            let model = loaded.model;
            let config_m = model.config.clone();
            let kv_bytes_per_token = config_m.kv_bytes_per_token(activation_bytes(&model));
            let state_bytes_per_sequence =
                config_m.state_bytes_per_sequence(activation_bytes(&model));
            let info = ModelInfo {
                id: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "model".into()),
                path: path.clone(),
                context_length: config_m.max_position_embeddings,
                eos_token_ids: eos_token_ids.clone(),
                weight_bytes: model.nbytes(),
                kv_bytes_per_token,
                state_bytes_per_sequence,
                device: crate::device::DeviceInfo::detect(),
                config: config_m,
            };
            let kv_budget = thread_config
                .kv_memory_budget
                .unwrap_or_else(|| default_kv_budget(info.weight_bytes));
            let tokenizer = Arc::new(loaded.tokenizer);
            if ready_tx
                .send(Ok((info.clone(), tokenizer, kv_budget)))
                .is_err()
            {
                return;
            }
            let mut engine = EngineLoop::new(model, info, thread_config, kv_budget, thread_metrics);
            engine.run(command_rx);
        })
        .context("spawning the engine thread")?;
    let (info, tokenizer, kv_budget) = ready_rx
        .recv()
        .context("the engine thread died while loading the model")??;
    let shared = Arc::new(Shared {
        info,
        tokenizer,
        config,
        kv_budget,
        metrics,
        next_id: 1.into(),
        shutting_down: false.into(),
        thread: Mutex::new(Some(thread)),
    });
    Ok(SchedulerHandle { commands, shared })
}

/// On MLX's CUDA backend, decode steps of a few rows use Hearth's
/// small-batch GEMV kernel (models/src/cuda_gemv.rs) once it passes its
/// self-check, when `HEARTH_CUDA_GEMV=MIN-MAX` (rows) asks for it. Off by
/// default: `1-8` measured 1.97x at two streams on the H200 but a slower
/// single stream, and a `2-2` build collapsed at two streams for reasons
/// not found yet (bench/results/h200-2026-11-29-gemv.md).
fn enable_cuda_gemv() {
    use hearth_models::cuda_gemv;
    if crate::device::DeviceInfo::detect().backend != "cuda" {
        return;
    }
    let setting = std::env::var("HEARTH_CUDA_GEMV").unwrap_or_else(|_| "off".into());
    if setting == "off" {
        cuda_gemv::disable();
        return;
    }
    let range = setting
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
    let Some((min, max)) = range else {
        tracing::warn!(%setting, "HEARTH_CUDA_GEMV must be `off` or `MIN-MAX`; kernel off");
        return;
    };
    match cuda_gemv::enable(min, max) {
        Ok(err) => tracing::info!(min, max, max_rel_error = err, "small-batch GEMV kernel on"),
        Err(e) => tracing::warn!(error = %e, "small-batch GEMV kernel off"),
    }
}

/// Bytes per element of the activations (and so of the KV cache).
fn activation_bytes(model: &Model) -> usize {
    match model.activation_dtype() {
        mlx_rs::Dtype::Float32 => 4,
        _ => 2,
    }
}

/// Without a configured budget, KV caches may use 60% of the memory that is
/// available now (the weights are already loaded), at least 256 MiB.
fn default_kv_budget(_weight_bytes: usize) -> usize {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let available = sys.available_memory() as usize;
    (available / 10 * 6).max(256 << 20)
}

struct Sequence {
    sub: Box<Submission>,
    row: usize,
    prompt_len: usize,
    /// Prompt tokens already in the cache.
    prefilled: usize,
    /// Tokens sampled so far.
    generated: usize,
    /// Most tokens to sample (request's max, clamped to the context).
    max_tokens: usize,
    sampler: Sampler,
    /// The last sampled token read back, fed at the next decode step.
    last_token: u32,
    /// One more token is sampled on the device but not read back yet
    /// (pipelined decode); it is fed from the device.
    in_flight: bool,
    admitted: Instant,
    first_token_at: Option<Instant>,
    last_token_at: Instant,
}

impl Sequence {
    fn decoding(&self) -> bool {
        self.generated > 0
    }

    /// Position the next fed token is written at.
    fn next_position(&self) -> usize {
        if self.decoding() {
            self.prompt_len + self.generated + usize::from(self.in_flight) - 1
        } else {
            self.prefilled
        }
    }

    /// Whether this sequence takes part in the next decode step: it has a
    /// token to feed and still may sample another.
    fn wants_decode(&self) -> bool {
        self.decoding() && self.generated + usize::from(self.in_flight) < self.max_tokens
    }
}

/// A decode step whose sampled tokens are still on the device.
struct InFlight {
    pending: PendingBatch,
    /// Job id of each row of `pending`, in order.
    ids: Vec<u64>,
}

struct EngineLoop {
    model: Model,
    info: ModelInfo,
    config: SchedulerConfig,
    kv_budget: usize,
    metrics: Arc<Metrics>,
    kv: Vec<BatchKv>,
    shape: BatchShape,
    rows: Rows,
    waiting: VecDeque<Box<Submission>>,
    running: Vec<Sequence>,
    in_flight: Option<InFlight>,
}

impl EngineLoop {
    fn new(
        model: Model,
        info: ModelInfo,
        config: SchedulerConfig,
        kv_budget: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        let kv = (0..model.num_layers()).map(|_| BatchKv::new()).collect();
        EngineLoop {
            model,
            info,
            config,
            kv_budget,
            metrics,
            kv,
            shape: BatchShape::default(),
            rows: Rows::default(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            in_flight: None,
        }
    }

    fn run(&mut self, commands: mpsc::Receiver<Command>) {
        loop {
            if self.running.is_empty() && self.waiting.is_empty() {
                self.release_memory();
                match commands.recv() {
                    Ok(cmd) => {
                        if !self.handle(cmd) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            let mut stop = false;
            while let Ok(cmd) = commands.try_recv() {
                if !self.handle(cmd) {
                    stop = true;
                }
            }
            if stop {
                break;
            }
            self.drop_cancelled();
            self.admit();
            if !self.running.is_empty() {
                let started = Instant::now();
                if let Err(e) = self.step() {
                    tracing::error!(error = %e, "engine step failed");
                    self.fail_all(&format!("engine error: {e}"));
                }
                self.metrics.record_step(started.elapsed());
                self.publish_kv();
            } else if !self.waiting.is_empty() {
                // Nothing runs and the head does not fit: wait for commands.
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.cancel_everything();
        self.release_memory();
    }

    /// Returns false on shutdown.
    fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit(sub) => {
                self.waiting.push_back(sub);
                true
            }
            Command::Shutdown => false,
        }
    }

    fn drop_cancelled(&mut self) {
        let metrics = &self.metrics;
        self.waiting.retain(|s| {
            let cancelled = s.cancelled.load(Ordering::Relaxed) || s.events.is_closed();
            if cancelled {
                metrics.record_dequeued();
            }
            !cancelled
        });
        let cancelled: Vec<usize> = self
            .running
            .iter()
            .enumerate()
            .filter(|(_, s)| s.sub.cancelled.load(Ordering::Relaxed) || s.sub.events.is_closed())
            .map(|(i, _)| i)
            .collect();
        for i in cancelled.into_iter().rev() {
            self.finish(i, FinishReason::Cancelled);
        }
    }

    /// Admits waiting jobs in order while a row and KV memory are free.
    fn admit(&mut self) {
        while self.running.len() < self.config.max_running {
            let Some(sub) = self.waiting.front() else {
                break;
            };
            let prompt_len = sub.job.prompt_tokens.len();
            let max_tokens = sub
                .job
                .max_tokens
                .max(1)
                .min(self.info.context_length.saturating_sub(prompt_len));
            let row = self.rows.next_free();
            let needed = prompt_len + max_tokens;
            let target = grown_shape(self.shape, row, needed, self.config.max_running);
            let bytes = shape_bytes(target, self.info.kv_bytes_per_token)
                + target.rows * self.info.state_bytes_per_sequence;
            if bytes > self.kv_budget && !self.running.is_empty() {
                break; // wait for running sequences to finish
            }
            let Some(sub) = self.waiting.pop_front() else {
                break;
            };
            let row = self.rows.acquire();
            self.shape = target;
            self.metrics.record_admitted(prompt_len);
            let now = Instant::now();
            let sampler = Sampler::new(sub.job.sampling.clone(), &sub.job.prompt_tokens);
            self.running.push(Sequence {
                row,
                prompt_len,
                prefilled: 0,
                generated: 0,
                max_tokens,
                sampler,
                last_token: 0,
                in_flight: false,
                admitted: now,
                first_token_at: None,
                last_token_at: now,
                sub,
            });
        }
    }

    /// Prompt chunks first, so a short prompt that completes here samples its
    /// first token before this step's decode pass (and joins it); the step
    /// takes as long either way.
    fn step(&mut self) -> anyhow::Result<()> {
        let decoders = self.running.iter().filter(|s| s.decoding()).count();
        let mut budget = self
            .config
            .step_token_budget
            .saturating_sub(decoders)
            .max(MIN_PREFILL_PER_STEP);
        while budget > 0 {
            // Shortest remaining prompt first: short requests get their
            // first token soon even while a long prompt is being read.
            let Some(i) = self
                .running
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.decoding())
                .min_by_key(|(_, s)| (s.prompt_len - s.prefilled, s.sub.id))
                .map(|(i, _)| i)
            else {
                break;
            };
            let remaining = self.running[i].prompt_len - self.running[i].prefilled;
            let chunk = remaining.min(self.config.prefill_chunk.max(1)).min(budget);
            self.prefill_chunk(i, chunk)?;
            budget -= chunk;
        }
        self.decode_step()
    }

    /// One batched decode forward over every decoding sequence.
    ///
    /// Pipelined (the default when no sampler needs its token history): the
    /// step is built on the previous step's sampled tokens while they are
    /// still on the device and queued with `async_eval`; only then are the
    /// previous tokens read back and sent, so the host work of a step
    /// (sending, detokenizing in the server, admitting, building the next
    /// graph) overlaps the device's work. A sequence that ends on a token
    /// read this way has one extra token computed, which is dropped.
    fn decode_step(&mut self) -> anyhow::Result<()> {
        let pipelined = self.config.pipeline_decode
            && self.running.iter().all(|s| !s.sampler.depends_on_history());
        if !pipelined {
            self.drain_in_flight()?;
        }
        let decoding: Vec<usize> = (0..self.running.len())
            .filter(|&i| self.running[i].wants_decode())
            .collect();
        if decoding.is_empty() {
            return self.drain_in_flight();
        }
        let previous = self.in_flight.take();
        let span = self.rows.span();
        let mut positions = vec![0usize; span];
        let mut tokens = vec![0i32; span];
        // Rows whose token comes from the previous step's device output.
        let mut from_device = vec![false; span];
        let mut device_index = vec![0i32; span];
        // Rows that decode this step; the others (free, mid-prefill, or
        // waiting for their last in-flight token) keep their recurrent state.
        let mut active = vec![false; span];
        for (i, s) in self.running.iter().enumerate() {
            positions[s.row] = s.next_position();
            if !decoding.contains(&i) {
                continue;
            }
            active[s.row] = true;
            match previous.as_ref().filter(|_| s.in_flight) {
                Some(prev) => {
                    let k = prev.ids.iter().position(|&id| id == s.sub.id);
                    let Some(k) = k else {
                        anyhow::bail!("in-flight token of job {} is missing", s.sub.id);
                    };
                    from_device[s.row] = true;
                    device_index[s.row] = k as i32;
                }
                None => tokens[s.row] = s.last_token as i32,
            }
        }
        let host = Array::from_slice(&tokens, &[span as i32]);
        let ids = match previous.as_ref() {
            Some(prev) if from_device.iter().any(|&d| d) => {
                let fed = prev
                    .pending
                    .tokens()
                    .as_type::<i32>()?
                    .take_axis(Array::from_slice(&device_index, &[span as i32]), 0)?;
                mlx_rs::ops::select(Array::from_slice(&from_device, &[span as i32]), &fed, &host)?
            }
            _ => host,
        }
        .reshape(&[span as i32, 1])?;
        let step = DecodeStep::new(self.shape, self.info.config.num_key_value_heads, positions)
            .with_active_rows(&active);
        let mut views: Vec<CacheView> = self
            .kv
            .iter_mut()
            .map(|kv| CacheView::Decode { kv, step: &step })
            .collect();
        let logits = self.model.forward(&ids, &mut views, true)?;
        drop(views);
        let logits = logits.reshape(&[span as i32, -1])?;
        let rows: Vec<i32> = decoding
            .iter()
            .map(|&i| self.running[i].row as i32)
            .collect();
        let contiguous = rows.iter().enumerate().all(|(k, &r)| r == k as i32) && rows.len() == span;
        let logits = if contiguous {
            logits
        } else {
            logits.take_axis(Array::from_slice(&rows, &[rows.len() as i32]), 0)?
        };
        let pending = {
            let mut samplers: Vec<&mut Sampler> = Vec::with_capacity(decoding.len());
            let mut k = 0;
            for (i, s) in self.running.iter_mut().enumerate() {
                if decoding.get(k) == Some(&i) {
                    samplers.push(&mut s.sampler);
                    k += 1;
                }
            }
            Sampler::prepare_batch(&mut samplers, &logits)?
        };
        let ids: Vec<u64> = decoding.iter().map(|&i| self.running[i].sub.id).collect();
        if pipelined {
            transforms::async_eval(pending.arrays())?;
            if let Some(prev) = previous {
                self.deliver(prev)?;
            }
            for s in &mut self.running {
                if ids.contains(&s.sub.id) {
                    s.in_flight = true;
                }
            }
            self.in_flight = Some(InFlight { pending, ids });
            Ok(())
        } else {
            transforms::eval(pending.arrays())?;
            self.deliver(InFlight { pending, ids })
        }
    }

    /// Reads back and sends the tokens of the step in flight, if any.
    fn drain_in_flight(&mut self) -> anyhow::Result<()> {
        match self.in_flight.take() {
            Some(prev) => self.deliver(prev),
            None => Ok(()),
        }
    }

    /// Reads a step's sampled tokens and emits each to its job, skipping jobs
    /// that have ended since (their row's extra token is dropped).
    fn deliver(&mut self, step: InFlight) -> anyhow::Result<()> {
        let sampled = step.pending.read()?;
        for (id, s) in step.ids.iter().zip(sampled) {
            let Some(i) = self.running.iter().position(|q| q.sub.id == *id) else {
                continue;
            };
            let seq = &mut self.running[i];
            seq.in_flight = false;
            seq.sampler.record(s.token);
            self.emit(i, s);
        }
        Ok(())
    }

    /// Feeds `chunk` prompt tokens of sequence `i`; samples its first token
    /// when the prompt is complete.
    fn prefill_chunk(&mut self, i: usize, chunk: usize) -> anyhow::Result<()> {
        let seq = &self.running[i];
        let (start, row) = (seq.prefilled, seq.row);
        let ids: Vec<i32> = seq.sub.job.prompt_tokens[start..start + chunk]
            .iter()
            .map(|&t| t as i32)
            .collect();
        let last = start + chunk == seq.prompt_len;
        let ids = Array::from_slice(&ids, &[1, chunk as i32]);
        let shape = self.shape;
        let mut views: Vec<CacheView> = self
            .kv
            .iter_mut()
            .map(|kv| CacheView::Prefill {
                kv,
                row,
                start,
                shape,
            })
            .collect();
        let logits = self.model.forward(&ids, &mut views, true)?;
        drop(views);
        self.running[i].prefilled += chunk;
        if last {
            let logits = logits.reshape(&[1, -1])?;
            let sampled = self.running[i].sampler.sample(&logits)?;
            self.emit(i, sampled);
        } else {
            let arrays: Vec<&Array> = self.kv.iter().flat_map(BatchKv::arrays).collect();
            transforms::eval(arrays)?;
        }
        Ok(())
    }

    /// Sends one sampled token of sequence `i` and ends it if it is done.
    fn emit(&mut self, i: usize, sampled: Sampled) {
        let now = Instant::now();
        let seq = &mut self.running[i];
        seq.generated += 1;
        seq.last_token = sampled.token;
        if seq.first_token_at.is_none() {
            seq.first_token_at = Some(now);
            self.metrics
                .time_to_first_token
                .observe(now - seq.sub.submitted);
        } else {
            self.metrics
                .inter_token_latency
                .observe(now - seq.last_token_at);
        }
        seq.last_token_at = now;
        self.metrics.record_tokens(1);
        let is_eos = seq.sub.job.stop_at_eos && self.info.eos_token_ids.contains(&sampled.token);
        let delivered = seq.sub.events.send(JobEvent::Token(sampled)).is_ok();
        let reason = if !delivered {
            Some(FinishReason::Cancelled)
        } else if is_eos {
            Some(FinishReason::Stop)
        } else if seq.generated >= seq.max_tokens {
            Some(FinishReason::Length)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.finish(i, reason);
        }
    }

    fn finish(&mut self, i: usize, reason: FinishReason) {
        let seq = self.running.swap_remove(i);
        self.rows.release(seq.row);
        let now = Instant::now();
        let summary = JobSummary {
            reason,
            prompt_tokens: seq.prompt_len,
            completion_tokens: seq.generated,
            cached_prompt_tokens: 0,
            time_to_first_token: seq
                .first_token_at
                .map(|t| t - seq.sub.submitted)
                .unwrap_or_default(),
            queue_time: seq.admitted - seq.sub.submitted,
            total_time: now - seq.sub.submitted,
        };
        let _ = seq.sub.events.send(JobEvent::Finished(summary));
        self.metrics
            .record_finished(reason == FinishReason::Cancelled);
    }

    fn fail_all(&mut self, message: &str) {
        self.in_flight = None;
        for seq in self.running.drain(..) {
            let _ = seq.sub.events.send(JobEvent::Failed(message.to_string()));
            self.rows.release(seq.row);
            self.metrics.record_finished(false);
        }
        self.release_memory();
    }

    fn cancel_everything(&mut self) {
        for sub in self.waiting.drain(..) {
            let _ = sub
                .events
                .send(JobEvent::Failed("the server is shutting down".into()));
            self.metrics.record_dequeued();
        }
        while !self.running.is_empty() {
            self.finish(self.running.len() - 1, FinishReason::Cancelled);
        }
    }

    /// Frees the KV buffers and MLX's cached allocations (when idle).
    fn release_memory(&mut self) {
        self.in_flight = None;
        if self.shape != BatchShape::default() {
            for kv in &mut self.kv {
                kv.clear();
            }
            self.shape = BatchShape::default();
            self.rows = Rows::default();
            let _ = mlx_rs::memory::clear_cache();
        }
        self.publish_kv();
    }

    fn publish_kv(&self) {
        let used: usize = self
            .running
            .iter()
            .map(|s| {
                (s.prefilled + s.generated) * self.info.kv_bytes_per_token
                    + self.info.state_bytes_per_sequence
            })
            .sum();
        let allocated: usize = self.kv.iter().map(BatchKv::nbytes).sum();
        self.metrics.set_kv(used, allocated);
    }
}
