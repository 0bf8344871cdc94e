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
use hearth_models::{
    cache::PREFILL_WIDTH_STEP, BatchKv, BatchShape, CacheView, DecodeStep, Model, PrefillBatch,
    PrefillChunk,
};
use mlx_rs::{transforms, Array};

use super::{
    batch::{grown_shape, shape_bytes, Rows},
    memory_guard::{self, MemoryGuard},
    prefix_cache::{self, PrefixCache, Snapshot},
    trace::{StepStats, StepTrace},
    Command, Failure, FinishReason, JobEvent, JobSummary, Metrics, ModelInfo, SchedulerConfig,
    SchedulerHandle, Shared, Submission, GATHER_ROUNDS,
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
            if let Some(bytes) = thread_config.mlx_cache_bytes {
                match mlx_rs::memory::set_cache_limit(bytes) {
                    Ok(_) => tracing::info!(bytes, "MLX cache limit set"),
                    Err(e) => tracing::warn!(bytes, error = %e, "MLX cache limit not set"),
                }
            }
            if let Err(e) = crate::engine::fit::check(&path) {
                let _ = ready_tx.send(Err(anyhow::Error::new(e)));
                return;
            }
            let options = thread_config.cpu_weights.load_options_here();
            let loaded = match hearth_models::load_with_options(&path, options, &mut load_progress)
            {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::Error::new(e)));
                    return;
                }
            };
            crate::device::enable_cuda_kernels();
            let eos_token_ids = loaded.eos_token_ids();
            let model = loaded.model;
            let config_m = model.config.clone();
            let element_bytes = activation_bytes(&model);
            let kv_bytes_per_token = config_m.kv_bytes_per_token(element_bytes);
            let state_bytes_per_sequence = config_m.state_bytes_per_sequence(element_bytes);
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
            let ready = (info.clone(), tokenizer, kv_budget);
            let warmup = thread_config.warmup;
            let mut engine = EngineLoop::new(model, info, thread_config, kv_budget, thread_metrics);
            if warmup {
                match engine.warm_up() {
                    Ok((steps, took)) => tracing::info!(steps, ?took, "warmed up"),
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.context("warming up the model")));
                        return;
                    }
                }
            }
            if ready_tx.send(Ok(ready)).is_err() {
                return;
            }
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

/// Bytes per element of the KV cache, as a one-token forward stores it.
/// The declared activation type can understate it: GGUF files keep norm
/// weights in f32, which promotes f16 activations (SmolLM2 Q4_1 stores f32
/// keys: twice what the declared type gives). Falls back to the declared
/// type if the probe fails.
fn activation_bytes(model: &Model) -> usize {
    let size = |dtype: mlx_rs::Dtype| match dtype {
        mlx_rs::Dtype::Float32 | mlx_rs::Dtype::Int32 | mlx_rs::Dtype::Uint32 => 4,
        mlx_rs::Dtype::Float64 | mlx_rs::Dtype::Int64 | mlx_rs::Dtype::Uint64 => 8,
        _ => 2,
    };
    let probe = || -> Option<usize> {
        let mut caches = model.new_cache();
        let mut views: Vec<CacheView> = caches.iter_mut().map(CacheView::Single).collect();
        let ids = Array::from_slice(&[0i32], &[1, 1]);
        model.forward(&ids, &mut views, true).ok()?;
        drop(views);
        caches.iter().filter_map(|c| c.key_dtype()).map(size).max()
    };
    probe().unwrap_or_else(|| size(model.activation_dtype()))
}

/// Without a configured budget, KV caches may use 60% of the memory that is
/// available now (the weights are already loaded), at least 256 MiB. On
/// MLX's CUDA backend that is the lesser of the host's and the GPU's: the
/// GPU's free memory (other processes' use counted) plus what MLX's buffer
/// cache holds (it serves new buffers first).
fn default_kv_budget(_weight_bytes: usize) -> usize {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let mut available = sys.available_memory() as usize;
    if let Some(gpu_free) = crate::device::cuda_free_memory() {
        let cached = mlx_rs::memory::cache_memory().unwrap_or(0);
        available = available.min(gpu_free + cached);
    }
    (available / 10 * 6).max(256 << 20)
}

struct Sequence {
    sub: Box<Submission>,
    row: usize,
    prompt_len: usize,
    /// Prompt tokens already in the cache.
    prefilled: usize,
    /// Prompt tokens taken from the prefix cache.
    cached: usize,
    /// Positions whose KV (and recurrent state) the row's buffers hold,
    /// counting a token fed by a decode step still on the device.
    fed: usize,
    /// Tokens sampled so far, in order (a finished sequence's prompt and
    /// output become a prefix-cache entry).
    output: Vec<u32>,
    /// Recurrent-state snapshots taken while prefilling (Qwen3.5).
    snapshots: Vec<Snapshot>,
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

/// Chooses the next prefill pass from `waiting` prompts (sequence, tokens
/// left, job id) as (sequence, chunk) pairs: shortest remaining prompt
/// first, so short requests get their first token soon even while a long
/// prompt is being read, at most `most` tokens a chunk and `budget` in all.
/// With `batch`, further prompts join the pass, in the same order, while
/// the padded pass (rows × widest chunk, rounded up as [`PrefillBatch`]
/// pads it) stays within the budget: a pass reads the weights once however
/// many rows it has.
fn plan_prefill(
    mut waiting: Vec<(usize, usize, u64)>,
    most: usize,
    budget: usize,
    batch: bool,
) -> Vec<(usize, usize)> {
    waiting.sort_by_key(|&(_, remaining, id)| (remaining, id));
    let most = most.max(1);
    let mut chunks = Vec::new();
    let mut width = 0;
    for (i, remaining, _) in waiting {
        if chunks.is_empty() {
            width = remaining.min(most).min(budget);
            chunks.push((i, width));
            if !batch {
                break;
            }
            continue;
        }
        let chunk = remaining.min(most);
        let wider = width.max(chunk);
        if (chunks.len() + 1) * wider.next_multiple_of(PREFILL_WIDTH_STEP) > budget {
            break;
        }
        width = wider;
        chunks.push((i, chunk));
    }
    chunks
}

/// Rows `rows` of `logits` (`[n, vocab]`), in that order; no gather when
/// they are all of them in order.
fn take_rows(logits: Array, rows: &[i32]) -> anyhow::Result<Array> {
    let all =
        rows.len() as i32 == logits.dim(0) && rows.iter().enumerate().all(|(k, &r)| r == k as i32);
    Ok(if all {
        logits
    } else {
        logits.take_axis(Array::from_slice(rows, &[rows.len() as i32]), 0)?
    })
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
    /// The last decode step's inputs, which the next step of the same rows
    /// carries over on the device (`DecodeStep::next`).
    last_step: Option<DecodeStep>,
    /// The last device index of in-flight tokens into batch rows (when not
    /// every row's own), kept while the batch keeps its order.
    fed_index: Option<(Vec<i32>, Array)>,
    prefix: PrefixCache,
    trace: Option<StepTrace>,
    /// Commands from the handles (set while `run` runs).
    commands: Option<mpsc::Receiver<Command>>,
    /// A shutdown command arrived in the middle of a step.
    stop_requested: bool,
    /// MLX's cache may hold buffers this engine freed since it last
    /// returned them to the device (see [`EngineLoop::wait_idle`]).
    cache_held: bool,
    /// Where the current step's time goes, for the trace.
    phases: Phases,
    /// Keeps device memory free for other processes (CUDA).
    guard: MemoryGuard,
    /// Bytes of the KV buffers, counted where they change: after each step
    /// ([`Self::publish_kv`]), after a prefix-cache load, when freed.
    kv_bytes: usize,
}

/// Host time of a step's parts (each ends in a device sync or a launch, so
/// the split is honest; see [`StepStats`]).
#[derive(Debug, Default, Clone, Copy)]
struct Phases {
    prefill: Duration,
    first_tokens: Duration,
    decode: Duration,
    deliver: Duration,
    /// The part of `decode` in MLX's evaluation call (encoding and
    /// launching the kernels; in an unpipelined step also the wait).
    queue: Duration,
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
        let prefix = PrefixCache::new(
            config.prefix_cache_budget(kv_budget),
            prefix_cache::MIN_REUSE_TOKENS,
        );
        let engine = EngineLoop {
            model,
            info,
            kv_budget,
            metrics,
            kv,
            shape: BatchShape::default(),
            rows: Rows::default(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            in_flight: None,
            last_step: None,
            fed_index: None,
            prefix,
            trace: StepTrace::from_env(),
            commands: None,
            stop_requested: false,
            cache_held: false,
            phases: Phases::default(),
            guard: MemoryGuard::new(config.device_reserve_bytes, config.device_free_memory),
            kv_bytes: 0,
            config,
        };
        engine.publish_prefix();
        engine
    }

    fn run(&mut self, commands: mpsc::Receiver<Command>) {
        self.commands = Some(commands);
        loop {
            if self.running.is_empty() && self.waiting.is_empty() {
                self.release_kv();
                if let Some(trace) = &mut self.trace {
                    trace.idle();
                }
                match self.wait_idle() {
                    Some(cmd) => {
                        if !self.handle(cmd) {
                            break;
                        }
                        self.gather_burst();
                    }
                    None => break,
                }
            }
            self.take_commands();
            if self.stop_requested {
                break;
            }
            self.drop_cancelled();
            self.admit();
            if !self.running.is_empty() && self.guard.due(Instant::now()) {
                self.device_room(0);
            }
            if !self.running.is_empty() {
                if let Some(trace) = &mut self.trace {
                    trace.begin();
                }
                let started = Instant::now();
                let cache_bytes = if self.trace.is_some() {
                    mlx_rs::memory::cache_memory().unwrap_or(0)
                } else {
                    0
                };
                self.cache_held = true;
                self.phases = Phases::default();
                let stats = match self.measured_step() {
                    Ok(stats) => stats,
                    Err(e) => {
                        let message = format!("{e:#}");
                        let hint = crate::device::engine_error_hint(&message);
                        tracing::error!(error = %message, hint, "engine step failed");
                        if crate::device::device_unusable(&message) {
                            self.metrics.record_device_lost(&message);
                        }
                        self.fail_all(&format!("engine error: {e}"));
                        StepStats::default()
                    }
                };
                let ended = Instant::now();
                self.metrics.record_step(ended - started);
                if let Some(trace) = &mut self.trace {
                    let stats = StepStats {
                        prefill_us: (self.phases.prefill.saturating_sub(self.phases.first_tokens))
                            .as_micros() as u64,
                        first_tokens_us: self.phases.first_tokens.as_micros() as u64,
                        decode_us: (self.phases.decode.saturating_sub(self.phases.deliver))
                            .as_micros() as u64,
                        deliver_us: self.phases.deliver.as_micros() as u64,
                        queue_us: self.phases.queue.as_micros() as u64,
                        cache_mb: (cache_bytes >> 20) as u64,
                        ..stats
                    };
                    trace.record(started, ended, stats);
                }
                if self.stop_requested {
                    break;
                }
            } else if !self.waiting.is_empty() {
                // Nothing runs and the head does not fit: wait for commands.
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.cancel_everything();
        self.release_memory();
    }

    /// Runs synthetic jobs through the real step loop before serving: one
    /// round with a prompt of two chunks, then rounds of 2..=`max_running`
    /// concurrent short prompts, 4 tokens each, so every decode batch size
    /// and both prefill paths have run once. Where the memory guard is on
    /// (a GPU's free memory known), the last round's prompts are a whole
    /// chunk each instead, so the largest prompt pass a burst can make has
    /// run and its working memory is known before the first request. On
    /// MLX's CUDA backend each new kernel is compiled on first use
    /// (seconds); without this the first request at each new batch size
    /// stalls every stream in the batch (bench/results/h200-2026-11-29-s3).
    /// The counters of the real metrics are not touched; returns the steps
    /// run and the time taken.
    fn warm_up(&mut self) -> anyhow::Result<(usize, Duration)> {
        let real = std::mem::replace(&mut self.metrics, Arc::new(Metrics::default()));
        let started = Instant::now();
        let vocab = self.info.config.vocab_size.clamp(1, 4096);
        let mut steps = 0;
        let mut next_id = u64::MAX / 2;
        let mut result = Ok(());
        let most_rows = self.config.max_running.max(1);
        let burst = self.guard.active();
        'rounds: for rows in 1..=most_rows {
            let mut receivers = Vec::with_capacity(rows);
            for j in 0..rows {
                let len = if rows == 1 {
                    self.config.prefill_chunk + 5
                } else if burst && rows == most_rows {
                    self.config.prefill_chunk
                } else {
                    8 + j
                };
                let len = len.min(self.info.context_length.saturating_sub(8)).max(1);
                let prompt_tokens = (0..len).map(|i| ((i * 7 + j) % vocab) as u32).collect();
                let (events, rx) = tokio::sync::mpsc::unbounded_channel();
                receivers.push(rx);
                self.waiting.push_back(Box::new(Submission {
                    id: next_id,
                    job: super::Job {
                        prompt_tokens,
                        max_tokens: 4,
                        sampling: Default::default(),
                        stop_at_eos: false,
                    },
                    events,
                    cancelled: Default::default(),
                    submitted: Instant::now(),
                }));
                next_id += 1;
            }
            while !self.waiting.is_empty() || !self.running.is_empty() {
                self.admit();
                if self.running.is_empty() {
                    break 'rounds; // the KV budget admits no more rows
                }
                if let Err(e) = self.measured_step() {
                    result = Err(e);
                    break 'rounds;
                }
                steps += 1;
            }
        }
        self.in_flight = None;
        self.cancel_everything();
        // What the synthetic jobs left in the prefix cache goes (its copy
        // kernels have run once, which is the point).
        self.prefix = PrefixCache::new(
            self.config.prefix_cache_budget(self.kv_budget),
            prefix_cache::MIN_REUSE_TOKENS,
        );
        // The warm-up's buffers stay cached like a burst's (`wait_idle`).
        self.release_kv();
        self.cache_held = true;
        self.metrics = real;
        self.metrics.set_step_working(self.guard.step_working());
        self.publish_prefix();
        result.map(|()| (steps, started.elapsed()))
    }

    /// Returns false on shutdown.
    fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Submit(sub) => {
                self.waiting.push_back(sub);
                true
            }
            Command::Shutdown => {
                self.stop_requested = true;
                false
            }
        }
    }

    /// Takes the commands that arrived (without waiting); returns whether a
    /// job was submitted.
    fn take_commands(&mut self) -> bool {
        let mut submitted = false;
        while let Some(cmd) = self.commands.as_ref().and_then(|c| c.try_recv().ok()) {
            submitted |= matches!(cmd, Command::Submit(_));
            self.handle(cmd);
        }
        submitted
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
            // Growing the KV buffers allocates the new ones beside the old;
            // its steps need their working memory too.
            let kv_need = if target == self.shape { 0 } else { bytes };
            let need = kv_need + self.guard.step_working();
            if !self.device_room(need) && !self.evict_prefixes_for(need) {
                if !self.running.is_empty() {
                    break; // running sequences will free theirs
                }
                if let Some(sub) = self.waiting.pop_front() {
                    self.refuse_for_memory(&sub, kv_need);
                }
                continue;
            }
            let Some(sub) = self.waiting.pop_front() else {
                break;
            };
            // Look up before evicting for room (the hit holds its arrays);
            // cached prefixes give way to running sequences.
            let hit = self.prefix.lookup(&sub.job.prompt_tokens);
            self.prefix.shrink_to(self.kv_budget.saturating_sub(bytes));
            self.publish_prefix();
            let row = self.rows.acquire();
            self.shape = target;
            let cached = match hit {
                Some(hit) => match prefix_cache::load(&mut self.kv, self.shape, row, &hit) {
                    Ok(()) => {
                        self.count_kv();
                        hit.tokens
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "prefix cache load failed; prefilling all");
                        0
                    }
                },
                None => 0,
            };
            self.metrics.record_admitted(prompt_len);
            let now = Instant::now();
            let sampler = Sampler::new(sub.job.sampling.clone(), &sub.job.prompt_tokens);
            self.running.push(Sequence {
                row,
                prompt_len,
                prefilled: cached,
                cached,
                fed: cached,
                output: Vec::new(),
                snapshots: Vec::new(),
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

    /// [`Self::step`], then [`Self::publish_kv`], measuring the step's
    /// working memory for the guard ([`memory_guard::WorkingProbe`]). A step that grew KV buffers
    /// already in use held the old ones beside the new for a moment; that
    /// is not working memory and is not recorded (admission counts the
    /// growth itself).
    fn measured_step(&mut self) -> anyhow::Result<StepStats> {
        let kv_before = self.kv_bytes;
        let probe = memory_guard::WorkingProbe::start();
        let stats = self.step();
        let working = probe.finish();
        self.publish_kv();
        let stats = stats?;
        if (kv_before == 0 || self.kv_bytes == kv_before) && self.guard.record_step(working) {
            self.metrics.set_step_working(working);
        }
        Ok(stats)
    }

    /// Prompt chunks first, so a short prompt that completes here samples its
    /// first token before this step's decode pass (and joins it); the step
    /// takes as long either way.
    fn step(&mut self) -> anyhow::Result<StepStats> {
        let decoders = self.running.iter().filter(|s| s.decoding()).count();
        let normal = self
            .config
            .step_token_budget
            .saturating_sub(decoders)
            .max(MIN_PREFILL_PER_STEP);
        // Nothing decodes yet, so no one waits on this step: a burst's
        // prompts may be read in one pass, up to the burst budget, until
        // one of them is complete (then it waits on the step).
        let mut limit = if decoders == 0 {
            self.config.burst_token_budget.max(normal)
        } else {
            normal
        };
        let mut spent = 0;
        let mut prefill_tokens = 0;
        while spent < limit {
            let budget = limit - spent;
            // A request that arrived during the last chunk is admitted now:
            // it waits for one chunk of a long prompt, not the whole step.
            if prefill_tokens > 0 && self.take_commands() {
                self.admit();
            }
            let chunks = self.next_prefill(budget);
            let Some(&(i, chunk)) = chunks.first() else {
                break;
            };
            let t = Instant::now();
            self.metrics.record_prefill_pass();
            let cost = if chunks.len() == 1 {
                self.prefill_chunk(i, chunk)?;
                chunk
            } else {
                self.prefill_batch(&chunks)?
            };
            self.phases.prefill += t.elapsed();
            spent += cost;
            prefill_tokens += chunks.iter().map(|&(_, c)| c).sum::<usize>();
            if limit > normal && self.running.iter().any(|s| s.decoding()) {
                limit = normal;
            }
        }
        let t = Instant::now();
        let mut stats = self.decode_step()?;
        self.phases.decode += t.elapsed();
        stats.prefill_tokens = prefill_tokens;
        Ok(stats)
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
    fn decode_step(&mut self) -> anyhow::Result<StepStats> {
        let pipelined = self.config.pipeline_decode
            && self.running.iter().all(|s| !s.sampler.depends_on_history());
        if !pipelined {
            self.drain_in_flight()?;
        }
        let decoding: Vec<usize> = (0..self.running.len())
            .filter(|&i| self.running[i].wants_decode())
            .collect();
        if decoding.is_empty() {
            self.drain_in_flight()?;
            return Ok(StepStats::default());
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
        for (i, s) in self.running.iter_mut().enumerate() {
            positions[s.row] = s.next_position();
            if !decoding.contains(&i) {
                continue;
            }
            active[s.row] = true;
            s.fed = positions[s.row] + 1;
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
        let carry = hearth_models::lean::carry_inputs();
        let ids = match previous.as_ref() {
            // Every row's token is still on the device: no host-made array
            // (docs/cuda.md, "A step's inputs and outputs kept off managed
            // memory's migrations").
            Some(prev) if carry && from_device.iter().all(|&d| d) => {
                let fed = prev.pending.tokens().as_type::<i32>()?;
                let own = prev.ids.len() == span
                    && device_index.iter().enumerate().all(|(k, &j)| j == k as i32);
                if own {
                    fed
                } else {
                    fed.take_axis(self.fed_index_array(device_index), 0)?
                }
            }
            Some(prev) if from_device.iter().any(|&d| d) => {
                let host = Array::from_slice(&tokens, &[span as i32]);
                let fed = prev
                    .pending
                    .tokens()
                    .as_type::<i32>()?
                    .take_axis(Array::from_slice(&device_index, &[span as i32]), 0)?;
                mlx_rs::ops::select(Array::from_slice(&from_device, &[span as i32]), &fed, &host)?
            }
            _ => Array::from_slice(&tokens, &[span as i32]),
        }
        .reshape(&[span as i32, 1])?;
        let step = DecodeStep::next(
            self.shape,
            self.info.config.num_key_value_heads,
            positions,
            self.last_step.as_ref(),
        )
        .with_active_rows(&active);
        let mut views = BatchKv::decode_views(&mut self.kv, &step);
        let logits = self.model.forward(&ids, &mut views, true)?;
        drop(views);
        self.last_step = Some(step);
        let logits = logits.reshape(&[span as i32, -1])?;
        let rows: Vec<i32> = decoding
            .iter()
            .map(|&i| self.running[i].row as i32)
            .collect();
        let logits = take_rows(logits, &rows)?;
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
        let stats = StepStats {
            decode_rows: decoding.len(),
            prefill_tokens: 0,
            span,
            pipelined,
            ..StepStats::default()
        };
        if pipelined {
            let t = Instant::now();
            transforms::async_eval(pending.arrays())?;
            self.phases.queue += t.elapsed();
            if let Some(prev) = previous {
                self.deliver(prev)?;
            }
            for s in &mut self.running {
                if ids.contains(&s.sub.id) {
                    s.in_flight = true;
                }
            }
            self.in_flight = Some(InFlight { pending, ids });
        } else {
            let t = Instant::now();
            transforms::eval(pending.arrays())?;
            self.phases.queue += t.elapsed();
            self.deliver(InFlight { pending, ids })?;
        }
        Ok(stats)
    }

    /// `index` as a device array: the previous one while it is the same
    /// (then the host writes nothing this step).
    fn fed_index_array(&mut self, index: Vec<i32>) -> Array {
        match &self.fed_index {
            Some((same, array)) if *same == index => array.clone(),
            _ => {
                let array = Array::from_slice(&index, &[index.len() as i32]);
                self.fed_index = Some((index, array.clone()));
                array
            }
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
        let t = Instant::now();
        let sampled = step.pending.read()?;
        for (id, s) in step.ids.iter().zip(sampled) {
            let Some(i) = self.index_of(*id) else {
                continue;
            };
            let seq = &mut self.running[i];
            seq.in_flight = false;
            seq.sampler.record(s.token);
            self.emit(i, s);
        }
        self.phases.deliver += t.elapsed();
        Ok(())
    }

    /// The prompt chunks of the next prefill pass within `budget` tokens, as
    /// (sequence, tokens); see [`plan_prefill`].
    fn next_prefill(&self, budget: usize) -> Vec<(usize, usize)> {
        let waiting: Vec<(usize, usize, u64)> = self
            .running
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.decoding())
            .map(|(i, s)| (i, s.prompt_len - s.prefilled, s.sub.id))
            .collect();
        plan_prefill(
            waiting,
            self.config.prefill_chunk,
            budget,
            self.config.batch_prefill,
        )
    }

    /// One forward pass over prompt chunks of several sequences
    /// (`(sequence, tokens)`, see [`hearth_models::PrefillBatch`]); samples
    /// the first token of each whose prompt it completes. Returns the
    /// tokens the pass computed, padding included.
    fn prefill_batch(&mut self, chunks: &[(usize, usize)]) -> anyhow::Result<usize> {
        let parts: Vec<PrefillChunk> = chunks
            .iter()
            .map(|&(i, len)| PrefillChunk {
                row: self.running[i].row,
                start: self.running[i].prefilled,
                len,
            })
            .collect();
        let batch = PrefillBatch::new(self.shape, self.info.config.num_key_value_heads, parts)?;
        let width = batch.width();
        let mut ids = vec![0i32; chunks.len() * width];
        for (k, (&(i, _), part)) in chunks.iter().zip(batch.chunks()).enumerate() {
            let prompt = &self.running[i].sub.job.prompt_tokens[part.start..part.start + part.len];
            ids[k * width..k * width + part.len]
                .iter_mut()
                .zip(prompt)
                .for_each(|(slot, &t)| *slot = t as i32);
        }
        let ids = Array::from_slice(&ids, &[chunks.len() as i32, width as i32]);
        let mut views = BatchKv::prefill_batch_views(&mut self.kv, &batch);
        let logits = self.model.forward(&ids, &mut views, true)?;
        drop(views);
        let logits = logits.reshape(&[chunks.len() as i32, -1])?;
        let mut arrays: Vec<&Array> = self.kv.iter().flat_map(BatchKv::arrays).collect();
        arrays.push(&logits);
        transforms::eval(arrays)?;
        // Every chunk advances before any first token is emitted: emitting
        // may end a sequence, which moves others in `running`, so the
        // sequences are found by job id from there on.
        let mut completed = Vec::new();
        for (k, (&(i, _), part)) in chunks.iter().zip(batch.chunks()).enumerate() {
            let seq = &mut self.running[i];
            seq.prefilled += part.len;
            seq.fed = part.start + part.len;
            if seq.prefilled == seq.prompt_len {
                completed.push((k as i32, seq.sub.id));
            }
            self.prefix_snapshot(i, part.start)?;
        }
        if !completed.is_empty() {
            let t = Instant::now();
            self.first_tokens(&logits, &completed)?;
            self.phases.first_tokens += t.elapsed();
        }
        Ok(chunks.len() * width)
    }

    /// Samples the first tokens of the sequences whose prompts a batched
    /// pass completed (`(row of logits, job id)`), in one batch (one read
    /// back, not one per prompt), and emits them.
    fn first_tokens(&mut self, logits: &Array, completed: &[(i32, u64)]) -> anyhow::Result<()> {
        let ks: Vec<i32> = completed.iter().map(|&(k, _)| k).collect();
        let rows = take_rows(logits.clone(), &ks)?;
        let places = completed
            .iter()
            .map(|&(_, id)| {
                self.index_of(id)
                    .with_context(|| format!("job {id} left during its prefill pass"))
            })
            .collect::<anyhow::Result<Vec<usize>>>()?;
        let sampled = {
            let mut slots: Vec<Option<&mut Sampler>> = self
                .running
                .iter_mut()
                .map(|s| Some(&mut s.sampler))
                .collect();
            let mut samplers: Vec<&mut Sampler> = places
                .iter()
                .filter_map(|&p| slots.get_mut(p).and_then(Option::take))
                .collect();
            anyhow::ensure!(
                samplers.len() == places.len(),
                "a job appears twice in one prefill pass"
            );
            Sampler::sample_batch(&mut samplers, &rows)?
        };
        for (&(_, id), s) in completed.iter().zip(sampled) {
            if let Some(i) = self.index_of(id) {
                self.emit(i, s);
            }
        }
        Ok(())
    }

    /// Where the running sequence of job `id` is now (ending a sequence
    /// moves others).
    fn index_of(&self, id: u64) -> Option<usize> {
        self.running.iter().position(|s| s.sub.id == id)
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
        let mut views = BatchKv::prefill_views(&mut self.kv, self.shape, row, start);
        let logits = self.model.forward(&ids, &mut views, true)?;
        drop(views);
        self.running[i].prefilled += chunk;
        self.running[i].fed = start + chunk;
        self.prefix_snapshot(i, start)?;
        if last {
            // The pass itself runs in the sampler's read-back; when traced,
            // run it first, so the trace counts it as prefill.
            let logits = logits.reshape(&[1, -1])?;
            if self.trace.is_some() {
                logits.eval()?;
            }
            let t = Instant::now();
            let sampled = self.running[i].sampler.sample(&logits)?;
            self.emit(i, sampled);
            self.phases.first_tokens += t.elapsed();
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
        seq.output.push(sampled.token);
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
        let mut seq = self.running.swap_remove(i);
        if reason != FinishReason::Cancelled {
            self.donate(&mut seq);
        }
        self.rows.release(seq.row);
        let now = Instant::now();
        let summary = JobSummary {
            reason,
            prompt_tokens: seq.prompt_len,
            completion_tokens: seq.generated,
            cached_prompt_tokens: seq.cached,
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
        // A failed step's arrays are not carried into the next one.
        self.last_step = None;
        self.fed_index = None;
        for seq in self.running.drain(..) {
            let _ = seq
                .sub
                .events
                .send(JobEvent::Failed(Failure::engine(message)));
            self.rows.release(seq.row);
            self.metrics.record_finished(false);
        }
        self.release_memory();
    }

    fn cancel_everything(&mut self) {
        for sub in self.waiting.drain(..) {
            let _ = sub.events.send(JobEvent::Failed(Failure::engine(
                "the server is shutting down",
            )));
            self.metrics.record_dequeued();
        }
        while !self.running.is_empty() {
            self.finish(self.running.len() - 1, FinishReason::Cancelled);
        }
    }

    /// Whether `need` more bytes fit on the device with the reserve to
    /// spare (see [`MemoryGuard`]), returning MLX's cached buffers first
    /// if that makes room, or if there is none (others may need them). True
    /// where the free memory is unknown.
    fn device_room(&mut self, need: usize) -> bool {
        let cached = if self.cache_held {
            mlx_rs::memory::cache_memory().unwrap_or(0)
        } else {
            0
        };
        let Some((plan, free)) = self.guard.look(need, cached) else {
            return true;
        };
        if plan.release_cache {
            let (free_mib, cached_mib, need_mib) = (free >> 20, cached >> 20, need >> 20);
            let reserve_mib = self.guard.reserve() >> 20;
            let message = "GPU memory low: returning MLX's cached buffers to the device";
            if self.guard.warn_now() {
                tracing::warn!(free_mib, cached_mib, need_mib, reserve_mib, "{message}");
            } else {
                tracing::debug!(free_mib, cached_mib, need_mib, reserve_mib, "{message}");
            }
            // Not `release_cache`: that counts the idle engine's releases.
            let _ = mlx_rs::memory::clear_cache();
            self.cache_held = false;
            self.metrics.record_pressure_release();
        }
        plan.fits
    }

    /// When the device is short of memory: drops the prefix cache's entries
    /// (their buffers go to MLX's cache, which [`Self::device_room`] then
    /// returns to the device) and looks again. False if there were none.
    fn evict_prefixes_for(&mut self, need: usize) -> bool {
        if self.prefix.entry_count() == 0 {
            return false;
        }
        self.prefix.shrink_to(0);
        self.publish_prefix();
        self.cache_held = true;
        self.device_room(need)
    }

    /// Answers a job the device has no memory for while nothing else runs
    /// (503: other processes hold the memory; the client may retry).
    fn refuse_for_memory(&mut self, sub: &Submission, kv_need: usize) {
        let free = self.guard.last_free().unwrap_or(0);
        let detail = format!(
            "{} MiB free, {} MiB needed for its KV cache and {} MiB for a step's working memory, plus {} MiB kept free",
            free >> 20,
            kv_need >> 20,
            self.guard.step_working() >> 20,
            self.guard.reserve() >> 20
        );
        tracing::warn!(id = sub.id, detail, "request refused: GPU memory");
        self.metrics.record_memory_refusal();
        let _ = sub
            .events
            .send(JobEvent::Failed(Failure::device_memory(detail)));
    }

    /// Frees the KV buffers and returns MLX's cached allocations to the
    /// device (after an error and at shutdown).
    fn release_memory(&mut self) {
        self.release_kv();
        self.release_cache();
    }

    /// Drops the KV buffers (nothing runs): their memory goes to MLX's
    /// cache, where the next burst's buffers are found (see `wait_idle`).
    fn release_kv(&mut self) {
        self.in_flight = None;
        if self.shape != BatchShape::default() {
            for kv in &mut self.kv {
                kv.clear();
            }
            self.shape = BatchShape::default();
            self.rows = Rows::default();
        }
        self.publish_kv();
    }

    /// Returns the buffers MLX keeps cached to the device.
    fn release_cache(&mut self) {
        if std::mem::take(&mut self.cache_held) {
            let _ = mlx_rs::memory::clear_cache();
            self.metrics.record_cache_release();
        }
    }

    /// Waits for the next command while idle (`None`: the handles are
    /// gone). The buffers freed by the last burst stay in MLX's cache for
    /// `idle_release`, so a request arriving within it allocates nothing;
    /// after that the cache goes back to the device and the wait goes on.
    /// A burst that starts with an empty cache allocates every activation
    /// and KV buffer afresh (docs/scheduler.md, "Idle memory").
    fn wait_idle(&mut self) -> Option<Command> {
        let commands = self.commands.take()?;
        let cmd = if self.cache_held {
            match commands.recv_timeout(self.config.idle_release) {
                Ok(cmd) => Some(cmd),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.release_cache();
                    commands.recv().ok()
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            }
        } else {
            commands.recv().ok()
        };
        self.commands = Some(commands);
        cmd
    }

    /// After an idle engine's first request: takes the requests that follow
    /// it within `config.gather` of each other (at most [`GATHER_ROUNDS`]
    /// gaps in all), so that requests sent together share the first pass
    /// instead of the rest waiting for a pass over the first alone.
    fn gather_burst(&mut self) {
        let gap = self.config.gather;
        if gap.is_zero() || self.stop_requested {
            return;
        }
        let Some(commands) = self.commands.take() else {
            return;
        };
        let deadline = Instant::now() + gap * GATHER_ROUNDS;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match commands.recv_timeout(gap.min(left)) {
                Ok(cmd) => {
                    if !self.handle(cmd) {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        self.commands = Some(commands);
    }

    /// Prefix cache: after a prompt chunk of sequence `i` that started at
    /// `start`, keeps a copy of its recurrent state when one is due.
    fn prefix_snapshot(&mut self, i: usize, start: usize) -> anyhow::Result<()> {
        let seq = &self.running[i];
        if !self.prefix.enabled()
            || self.info.state_bytes_per_sequence == 0
            || !prefix_cache::snapshot_due(
                start,
                seq.fed,
                seq.prompt_len,
                self.config.prefill_chunk,
            )
        {
            return Ok(());
        }
        if let Some(snap) = prefix_cache::snapshot(&self.kv, seq.row, seq.fed)? {
            self.running[i].snapshots.push(snap);
        }
        Ok(())
    }

    /// Prefix cache: a finished sequence leaves its row's KV (prompt and
    /// output, as far as fed) and recurrent snapshots behind.
    fn donate(&mut self, seq: &mut Sequence) {
        if !self.prefix.enabled() || seq.fed == 0 {
            return;
        }
        let tokens: Vec<u32> = seq
            .sub
            .job
            .prompt_tokens
            .iter()
            .chain(&seq.output)
            .take(seq.fed)
            .copied()
            .collect();
        let snapshots = std::mem::take(&mut seq.snapshots);
        match prefix_cache::capture(&self.kv, seq.row, tokens, snapshots) {
            Ok(entry) => self.prefix.insert(entry),
            Err(e) => tracing::warn!(error = %e, "prefix cache capture failed"),
        }
        self.publish_prefix();
    }

    fn publish_prefix(&self) {
        self.metrics.set_prefix(
            self.prefix.stats,
            self.prefix.bytes(),
            self.prefix.entry_count(),
            self.prefix.budget(),
        );
    }

    /// Counts the KV buffers' bytes into [`Self::kv_bytes`].
    fn count_kv(&mut self) -> usize {
        self.kv_bytes = self.kv.iter().map(BatchKv::nbytes).sum();
        self.kv_bytes
    }

    fn publish_kv(&mut self) {
        let used: usize = self
            .running
            .iter()
            .map(|s| {
                (s.prefilled + s.generated) * self.info.kv_bytes_per_token
                    + self.info.state_bytes_per_sequence
            })
            .sum();
        let allocated = self.count_kv();
        self.metrics.set_kv(used, allocated);
    }
}

#[cfg(test)]
mod tests {
    use super::plan_prefill;

    #[test]
    fn prefill_passes_take_short_prompts_first_and_batch_within_the_budget() {
        // (sequence, tokens left, job id)
        let waiting = vec![
            (0, 300, 1),
            (1, 128, 2),
            (2, 120, 3),
            (3, 128, 0),
            (4, 5, 4),
        ];
        // One chunk a pass without batching: the shortest prompt.
        assert_eq!(plan_prefill(waiting.clone(), 512, 1024, false), [(4, 5)]);
        // Batched: shortest first (ties by job id), while rows × widest
        // chunk (padded to 16) fits 1024; the 300-token prompt would make
        // 5 × 304.
        assert_eq!(
            plan_prefill(waiting.clone(), 512, 1024, true),
            [(4, 5), (2, 120), (3, 128), (1, 128)]
        );
        // Chunks are capped at `most`, and the first at the budget.
        assert_eq!(plan_prefill(vec![(0, 900, 0)], 512, 1024, true), [(0, 512)]);
        assert_eq!(plan_prefill(vec![(0, 900, 0)], 512, 100, true), [(0, 100)]);
        assert_eq!(
            plan_prefill(vec![(0, 900, 0), (1, 700, 1)], 512, 1024, true),
            [(1, 512), (0, 512)]
        );
        // Seven 136-token prompts pad to 144: 7 × 144 fits, 8 would not.
        let seven: Vec<_> = (0..8).map(|i| (i, 136, i as u64)).collect();
        assert_eq!(plan_prefill(seven, 512, 1024, true).len(), 7);
        assert!(plan_prefill(Vec::new(), 512, 1024, true).is_empty());
    }
}
