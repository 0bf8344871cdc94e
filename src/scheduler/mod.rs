//! Continuous batching: one engine thread owns MLX and the model; async
//! request handlers talk to it through [`SchedulerHandle`].
//!
//! A submitted [`Job`] waits in a bounded queue, is admitted when a slot and
//! KV memory are free, has its prompt prefilled in chunks interleaved with
//! the decode steps of running jobs (under a per-step token budget, shortest
//! remaining prompt first), then joins the decode batch: every step runs one
//! batched forward pass for all decoding sequences and samples one token for
//! each. Tokens flow back as [`JobEvent`]s; dropping the [`JobHandle`]
//! cancels the job and frees its slot at the next step.
//!
//! The scheduler works in token ids only: detokenization and stop strings are
//! the caller's (see [`crate::engine::text::TextStream`]), which keeps the
//! engine step lean. See docs/scheduler.md for the design.

mod batch;
mod engine_loop;
mod memory_guard;
pub mod metrics;
mod prefix_cache;
mod trace;

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc,
    },
    time::Duration,
};

use hearth_models::{ModelConfig, Tokenizer};
use tokio::sync::mpsc as tokio_mpsc;

pub use self::memory_guard::WorkingProbe;
pub use self::metrics::{Metrics, SchedulerStatus};
use crate::engine::sampling::{Sampled, SamplingParams};
pub use crate::engine::FinishReason;

/// Limits and budgets of the scheduler (admission rules live here, as data).
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Most sequences prefilling or decoding at once.
    pub max_running: usize,
    /// Most jobs waiting for admission; beyond it `submit` answers `QueueFull`.
    pub max_queue: usize,
    /// Tokens processed per engine step: one per decoding sequence, the
    /// rest for prompt chunks.
    pub step_token_budget: usize,
    /// Most prompt tokens of one sequence per forward pass.
    pub prefill_chunk: usize,
    /// Prompt tokens a step may read while no sequence is decoding (nobody
    /// waits on the step): a burst of requests is read in one batched pass
    /// instead of in `step_token_budget`-sized pieces. The step falls back
    /// to `step_token_budget` as soon as one of its prompts is complete
    /// (docs/scheduler.md, "Bursts"). Less than `step_token_budget` (0, or
    /// `HEARTH_BURST_BUDGET=off`) is `step_token_budget`: no burst budget.
    pub burst_token_budget: usize,
    /// After an idle engine receives a request, how long it goes on taking
    /// requests before its first pass, while each arrives within this long
    /// of the last (at most [`GATHER_ROUNDS`] times this in all): requests
    /// sent together share the first pass. Zero: start at once.
    pub gather: Duration,
    /// Bytes the KV caches may use; `None` = derived from system memory.
    pub kv_memory_budget: Option<usize>,
    /// Overlap each decode step's device work with the host work around it:
    /// the next step is queued on the sampled tokens before they are read
    /// back (docs/scheduler.md). On by default on a GPU, off on a CPU.
    pub pipeline_decode: bool,
    /// Run synthetic batches of 1..=`max_running` rows once at load, so the
    /// backend compiles its kernels then rather than in the middle of the
    /// first requests (MLX's CUDA backend JIT-compiles each new kernel: a
    /// second or more each). On by default on a GPU.
    pub warmup: bool,
    /// Bytes the prefix cache may hold (docs/prefix-cache.md); `None` =
    /// [`DEFAULT_PREFIX_CACHE_FRACTION`] of the KV budget, `Some(0)` = off.
    /// Counted inside the KV budget: entries are evicted when running
    /// sequences need the memory.
    pub prefix_cache_bytes: Option<usize>,
    /// Prompt chunks of several sequences share one forward pass (rows
    /// right-padded to the widest chunk) while the padded pass fits the
    /// step's token budget, instead of a pass per chunk: each pass reads
    /// all the weights, so on a GPU 8 prompts of 128 tokens cost about one
    /// pass instead of eight (docs/scheduler.md). On by default;
    /// `HEARTH_BATCH_PREFILL=off` turns it off (for A/B runs).
    pub batch_prefill: bool,
    /// How long an idle engine keeps MLX's freed buffers (its activations
    /// and the KV buffers, dropped as soon as nothing runs) cached for the
    /// next request before returning them to the device; a burst that
    /// finds the cache empty allocates every buffer afresh
    /// (docs/scheduler.md, "Idle memory"). Default 30 s;
    /// `HEARTH_IDLE_RELEASE=SECONDS` overrides it (0: release at once).
    pub idle_release: Duration,
    /// Most bytes of freed buffers MLX keeps cached for reuse (its cache
    /// limit, process-wide); `None` leaves MLX's own: about all the device
    /// memory on CUDA (so two servers on one GPU can run each other out of
    /// memory), more than the recommended working set on a Mac, 32 MiB on a
    /// CPU (docs/scheduler.md, "Idle memory").
    pub mlx_cache_bytes: Option<usize>,
    /// Bytes of GPU memory the engine keeps free, counting other processes
    /// (MLX's CUDA backend; 0 = off): short of it MLX's cached buffers go
    /// back to the device, and a request that would grow the KV buffers
    /// waits for running ones, or with nothing running is refused with a
    /// 503 (docs/scheduler.md, "Sharing a GPU"). Default 1 GiB;
    /// `HEARTH_GPU_RESERVE_MB` overrides it.
    pub device_reserve_bytes: usize,
    /// The device's free memory in bytes, `None` where unknown (CPU,
    /// Metal: the reserve then does nothing). The CUDA driver's count by
    /// default; a field so that tests can stand in for a GPU.
    pub device_free_memory: fn() -> Option<usize>,
    /// How a quantized model's weights are held on MLX's CPU backend
    /// (float32 when they fit, by default; docs/mlx-on-linux.md).
    pub cpu_weights: crate::device::CpuWeights,
}

/// GPU memory the engine keeps free by default.
pub const DEFAULT_DEVICE_RESERVE: usize = 1 << 30;

/// A setting in seconds as a duration: `None` unless finite and `>= 0`;
/// at most a day.
pub fn seconds(s: f64) -> Option<Duration> {
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(86_400.0)))
}

/// The longest an idle engine gathers a burst: this many `gather` gaps.
pub const GATHER_ROUNDS: u32 = 4;

/// How long an idle engine waits for the next request of a burst by default.
pub const DEFAULT_GATHER: Duration = Duration::from_millis(2);

/// A number from the environment for A/B runs: `off` is 0, a finite
/// number `>= 0` is itself, anything else (or unset) `None`.
fn env_number(name: &str) -> Option<f64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    if v.eq_ignore_ascii_case("off") {
        return Some(0.0);
    }
    v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0)
}

/// How long an idle engine keeps freed buffers cached by default.
pub const DEFAULT_IDLE_RELEASE: Duration = Duration::from_secs(30);

/// Share of the KV budget the prefix cache may hold by default.
pub const DEFAULT_PREFIX_CACHE_FRACTION: f64 = 0.25;

impl SchedulerConfig {
    /// The prefix cache's byte budget given the KV budget.
    pub fn prefix_cache_budget(&self, kv_budget: usize) -> usize {
        match self.prefix_cache_bytes {
            Some(b) => b.min(kv_budget),
            None => (kv_budget as f64 * DEFAULT_PREFIX_CACHE_FRACTION) as usize,
        }
    }
}

impl Default for SchedulerConfig {
    /// Prompt chunks sized for the device: a short request arriving behind a
    /// long prompt waits for at most one chunk, so chunks should take about
    /// as long as a short prompt's own prefill. On a CPU that is ~128 tokens;
    /// a GPU reads the weights once per forward whatever the chunk, so small
    /// chunks would waste it (docs/scheduler.md).
    fn default() -> Self {
        let backend = crate::device::DeviceInfo::detect().backend;
        let (prefill_chunk, step_token_budget) = match backend {
            "cuda" => (512, 1024),
            "metal" => (256, 512),
            _ => (128, 256),
        };
        SchedulerConfig {
            max_running: 8,
            max_queue: 64,
            step_token_budget,
            prefill_chunk,
            // `HEARTH_BURST_BUDGET=off` (or a token count) and
            // `HEARTH_GATHER_MS=0` give the scheduler of before, for A/B runs.
            burst_token_budget: env_number("HEARTH_BURST_BUDGET")
                .map_or(4 * step_token_budget, |v| v as usize),
            gather: env_number("HEARTH_GATHER_MS").map_or(DEFAULT_GATHER, |ms| {
                Duration::from_secs_f64(ms.min(1000.0) / 1e3)
            }),
            kv_memory_budget: None,
            // On a GPU the host work hides behind the device's; on a CPU
            // both compete for the same cores: pipelining measured worse
            // there (bench/results/serve-2026-11-29-quiet.md).
            pipeline_decode: backend != "cpu",
            warmup: backend != "cpu",
            prefix_cache_bytes: None,
            batch_prefill: std::env::var("HEARTH_BATCH_PREFILL").map_or(true, |v| v != "off"),
            idle_release: std::env::var("HEARTH_IDLE_RELEASE")
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
                .and_then(seconds)
                .unwrap_or(DEFAULT_IDLE_RELEASE),
            mlx_cache_bytes: None,
            device_reserve_bytes: env_number("HEARTH_GPU_RESERVE_MB")
                .map_or(DEFAULT_DEVICE_RESERVE, |mb| {
                    (mb * (1 << 20) as f64) as usize
                }),
            device_free_memory: crate::device::cuda_free_memory,
            cpu_weights: crate::device::CpuWeights::default(),
        }
    }
}

/// One generation job, already tokenized and validated by the caller.
#[derive(Debug, Clone)]
pub struct Job {
    pub prompt_tokens: Vec<u32>,
    /// Most tokens to generate (clamped to the context left).
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// End the job at the model's end-of-sequence tokens.
    pub stop_at_eos: bool,
}

/// Exact counts and timings of a finished job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSummary {
    pub reason: FinishReason,
    pub prompt_tokens: usize,
    /// Tokens sampled (including a final end-of-sequence token).
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache (not recomputed).
    pub cached_prompt_tokens: usize,
    /// Submission to first token.
    pub time_to_first_token: Duration,
    pub queue_time: Duration,
    pub total_time: Duration,
}

/// What a job's receiver sees, in order: tokens, then exactly one
/// `Finished` or `Failed`.
#[derive(Debug, Clone)]
pub enum JobEvent {
    Token(Sampled),
    Finished(JobSummary),
    Failed(Failure),
}

/// Why a job ended without finishing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub message: String,
    pub kind: FailureKind,
}

/// What kind of failure ended a job (the HTTP status it maps to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The engine failed: a bug or a device error (500).
    Engine,
    /// Nothing else ran and the device still had too little free memory
    /// for the job: other processes hold it (503, worth retrying;
    /// docs/scheduler.md, "Sharing a GPU").
    DeviceMemory,
}

impl Failure {
    pub fn engine(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            kind: FailureKind::Engine,
        }
    }

    pub fn device_memory(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            kind: FailureKind::DeviceMemory,
        }
    }
}

/// Why a job was not accepted.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum SubmitError {
    #[error("server at capacity: {queued} requests queued; retry after {retry_after:?}")]
    QueueFull {
        queued: usize,
        retry_after: Duration,
    },
    #[error(
        "this request needs {prompt} prompt tokens but the model's context is {context} tokens"
    )]
    PromptTooLong { prompt: usize, context: usize },
    #[error("this request needs {needed} bytes of KV cache but the budget is {budget} bytes")]
    TooLargeForMemory { needed: usize, budget: usize },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The device is unusable (a lost CUDA context) until the server
    /// restarts; the engine error that made it so.
    #[error("the device is unusable after an engine error ({0}); restart the server")]
    DeviceLost(String),
}

/// The caller's end of one job.
#[derive(Debug)]
pub struct JobHandle {
    pub id: u64,
    pub events: tokio_mpsc::UnboundedReceiver<JobEvent>,
    cancelled: Arc<AtomicBool>,
}

impl JobHandle {
    /// Asks the engine to stop this job at its next step (also on drop).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// Static facts about the served model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// Name the model is served as (file or folder name).
    pub id: String,
    pub path: PathBuf,
    pub config: ModelConfig,
    pub context_length: usize,
    pub eos_token_ids: Vec<u32>,
    /// Bytes of the loaded weights.
    pub weight_bytes: usize,
    /// KV cache bytes per token of one sequence.
    pub kv_bytes_per_token: usize,
    /// Fixed recurrent-state bytes of one sequence (Qwen3.5's linear
    /// attention layers; 0 for plain transformers).
    pub state_bytes_per_sequence: usize,
    /// Where the model runs.
    pub device: crate::device::DeviceInfo,
}

pub(crate) enum Command {
    Submit(Box<Submission>),
    Shutdown,
}

pub(crate) struct Submission {
    pub id: u64,
    pub job: Job,
    pub events: tokio_mpsc::UnboundedSender<JobEvent>,
    pub cancelled: Arc<AtomicBool>,
    pub submitted: std::time::Instant,
}

/// Cheap to clone; all clones talk to the same engine thread.
#[derive(Clone)]
pub struct SchedulerHandle {
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub info: ModelInfo,
    pub tokenizer: Arc<Tokenizer>,
    pub config: SchedulerConfig,
    pub kv_budget: usize,
    pub metrics: Arc<Metrics>,
    pub next_id: std::sync::atomic::AtomicU64,
    pub shutting_down: AtomicBool,
    pub thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl SchedulerHandle {
    /// Loads the model at `path` on a new engine thread and starts serving.
    /// Returns once the model is loaded (or failed to load).
    pub fn start(path: PathBuf, config: SchedulerConfig) -> anyhow::Result<Self> {
        engine_loop::start(path, config, Box::new(|_| {}))
    }

    /// [`SchedulerHandle::start`], calling `progress` (on the engine thread)
    /// as the weights are read: tensors and bytes of the total.
    pub fn start_with_progress(
        path: PathBuf,
        config: SchedulerConfig,
        progress: impl FnMut(hearth_models::LoadProgress) + Send + 'static,
    ) -> anyhow::Result<Self> {
        engine_loop::start(path, config, Box::new(progress))
    }

    pub fn info(&self) -> &ModelInfo {
        &self.shared.info
    }

    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.shared.tokenizer
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.shared.config
    }

    /// Counters and gauges for `/metrics` and the status API.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    pub fn status(&self) -> SchedulerStatus {
        self.shared.metrics.status(self.shared.kv_budget)
    }

    /// Queues a job. Fails fast (no waiting) when it can never run or the
    /// queue is full.
    pub fn submit(&self, job: Job) -> Result<JobHandle, SubmitError> {
        if self.shared.shutting_down.load(Ordering::Relaxed) {
            return Err(SubmitError::ShuttingDown);
        }
        if let Some(error) = self.shared.metrics.device_lost() {
            return Err(SubmitError::DeviceLost(error.to_string()));
        }
        let info = &self.shared.info;
        if job.prompt_tokens.is_empty() {
            return Err(SubmitError::Invalid("the prompt is empty".into()));
        }
        if job.prompt_tokens.len() >= info.context_length {
            return Err(SubmitError::PromptTooLong {
                prompt: job.prompt_tokens.len(),
                context: info.context_length,
            });
        }
        job.sampling
            .validate(info.config.vocab_size)
            .map_err(|e| SubmitError::Invalid(e.to_string()))?;
        let total = (job.prompt_tokens.len() + job.max_tokens.max(1)).min(info.context_length);
        let needed = total * info.kv_bytes_per_token + info.state_bytes_per_sequence;
        if needed > self.shared.kv_budget {
            return Err(SubmitError::TooLargeForMemory {
                needed,
                budget: self.shared.kv_budget,
            });
        }
        let queued = self.shared.metrics.queued();
        if queued >= self.shared.config.max_queue {
            self.shared.metrics.record_rejected();
            return Err(SubmitError::QueueFull {
                queued,
                retry_after: Duration::from_secs(1),
            });
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio_mpsc::unbounded_channel();
        let cancelled = Arc::new(AtomicBool::new(false));
        self.shared.metrics.record_submitted();
        let submission = Submission {
            id,
            job,
            events: tx,
            cancelled: cancelled.clone(),
            submitted: std::time::Instant::now(),
        };
        self.commands
            .send(Command::Submit(Box::new(submission)))
            .map_err(|_| SubmitError::ShuttingDown)?;
        Ok(JobHandle {
            id,
            events: rx,
            cancelled,
        })
    }

    /// Stops admitting, lets running jobs finish (cancelling them after
    /// `grace`), then stops the engine thread and frees the model.
    pub fn shutdown(&self, grace: Duration) {
        self.shared.shutting_down.store(true, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline
            && (self.shared.metrics.running() > 0 || self.shared.metrics.queued() > 0)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.commands.send(Command::Shutdown);
        if let Some(thread) = self.shared.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny dummy checkpoint (qwen3 shape `tiny`, f32) in a temp dir.
    fn tiny_model(seed: u64) -> tempfile::TempDir {
        use crate::tools::dummy::{write_dummy_model, DummyShape, DummySpec};
        let dir = tempfile::tempdir().expect("temp dir");
        let fixtures = std::env::var_os("HEARTH_FIXTURES")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".hearth/fixtures"));
        let spec = DummySpec {
            arch: "qwen3".into(),
            shape: DummyShape::parse("tiny").expect("shape"),
            tokenizer: fixtures.join("qwen3-tokenizer/tokenizer.json"),
            dtype: mlx_rs::Dtype::Float32,
            seed,
        };
        write_dummy_model(&spec, dir.path()).expect("dummy model");
        dir
    }

    /// A prompt long enough for the prefix cache to keep.
    fn short_job() -> Job {
        Job {
            prompt_tokens: (5..5 + prefix_cache::MIN_REUSE_TOKENS as u32 + 4).collect(),
            max_tokens: 2,
            sampling: Default::default(),
            stop_at_eos: false,
        }
    }

    /// Runs a job to its end: `Ok(tokens)` or the failure.
    fn run_job(scheduler: &SchedulerHandle) -> std::result::Result<usize, Failure> {
        let mut handle = scheduler.submit(short_job()).expect("submitted");
        while let Some(event) = handle.events.blocking_recv() {
            match event {
                JobEvent::Finished(summary) => return Ok(summary.completion_tokens),
                JobEvent::Failed(f) => return Err(f),
                JobEvent::Token(_) => {}
            }
        }
        panic!("the job's events ended without a result");
    }

    /// The free GPU memory the stand-in device reports.
    static FREE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

    /// With a stand-in GPU whose free memory is below the reserve, a request
    /// that arrives while nothing runs is refused as `DeviceMemory` (a 503
    /// in the API) and counted; once memory is free again the next one runs:
    /// the server itself is unharmed. With the reserve at 0 the guard is off.
    #[test]
    fn a_gpu_without_free_memory_refuses_requests_instead_of_failing_steps() {
        let dir = tiny_model(4);
        let config = SchedulerConfig {
            device_reserve_bytes: 64 << 20,
            device_free_memory: || Some(FREE.load(Ordering::Relaxed)),
            ..SchedulerConfig::default()
        };
        let scheduler = SchedulerHandle::start(dir.path().to_path_buf(), config).expect("start");
        FREE.store(usize::MAX, Ordering::Relaxed);
        assert_eq!(run_job(&scheduler), Ok(2));
        assert_eq!(scheduler.status().prefix_cache.entries, 1);
        FREE.store(1 << 20, Ordering::Relaxed);
        let refused = run_job(&scheduler).expect_err("no room on the device");
        // The prefix cache gave its memory up first.
        assert_eq!(scheduler.status().prefix_cache.entries, 0);
        assert_eq!(refused.kind, FailureKind::DeviceMemory);
        assert!(
            refused.message.contains("1 MiB free"),
            "{}",
            refused.message
        );
        assert!(
            refused.message.contains("64 MiB kept free"),
            "{}",
            refused.message
        );
        let status = scheduler.status();
        assert_eq!(
            (status.gpu_memory_refusals, status.queued, status.running),
            (1, 0, 0)
        );
        // The first job's steps (and on a GPU the warm-up's) measured what
        // a step works in beyond its buffers.
        let working = status.step_working_bytes;
        assert!(working > 0, "no step working memory measured");
        // The job's KV buffers: one row holding its prompt and output.
        let job = short_job();
        let info = scheduler.info();
        let shape = batch::grown_shape(
            hearth_models::BatchShape::default(),
            0,
            job.prompt_tokens.len() + job.max_tokens,
            SchedulerConfig::default().max_running,
        );
        let kv = batch::shape_bytes(shape, info.kv_bytes_per_token)
            + shape.rows * info.state_bytes_per_sequence;
        assert!(
            refused.message.contains(&format!(
                "{} MiB needed for its KV cache and {} MiB for a step's working memory",
                kv >> 20,
                working >> 20
            )),
            "{}",
            refused.message
        );
        let text = scheduler.metrics().render_prometheus(0);
        assert!(
            text.contains("\nhearth_gpu_memory_refusals_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("\nhearth_step_working_memory_bytes {working}\n")),
            "{text}"
        );
        // Room for the KV cache and the reserve is not enough: the step's
        // working memory must fit too. (The MLX cache went back with the
        // refusal, so only FREE counts now.)
        let kv_and_reserve = kv + (64 << 20);
        FREE.store(kv_and_reserve + working / 2, Ordering::Relaxed);
        let refused = run_job(&scheduler).expect_err("no room to work in");
        assert_eq!(refused.kind, FailureKind::DeviceMemory);
        assert_eq!(scheduler.status().gpu_memory_refusals, 2);
        FREE.store(kv_and_reserve + working, Ordering::Relaxed);
        assert_eq!(run_job(&scheduler), Ok(2));
        FREE.store(usize::MAX, Ordering::Relaxed);
        assert_eq!(run_job(&scheduler), Ok(2));
        scheduler.shutdown(Duration::from_secs(1));

        let off = SchedulerConfig {
            device_reserve_bytes: 0,
            device_free_memory: || Some(0),
            ..SchedulerConfig::default()
        };
        let scheduler = SchedulerHandle::start(dir.path().to_path_buf(), off).expect("start");
        assert_eq!(run_job(&scheduler), Ok(2));
        assert_eq!(scheduler.status().gpu_memory_refusals, 0);
        scheduler.shutdown(Duration::from_secs(1));
    }

    /// Once an engine error has lost the device (a CUDA context), a new job
    /// is refused at once with that error, and the status says so; before,
    /// the same job runs.
    #[test]
    fn a_lost_device_refuses_new_jobs() {
        let dir = tiny_model(3);
        let scheduler =
            SchedulerHandle::start(dir.path().to_path_buf(), SchedulerConfig::default())
                .expect("start");
        assert_eq!(run_job(&scheduler), Ok(2), "a working device takes jobs");
        assert_eq!(scheduler.status().device_lost, None);
        let lost = "an illegal memory access was encountered";
        scheduler.metrics().record_device_lost(lost);
        scheduler.metrics().record_device_lost("a later error");
        match scheduler.submit(short_job()) {
            Err(SubmitError::DeviceLost(e)) => assert_eq!(e, lost),
            other => panic!("want DeviceLost, got {other:?}"),
        }
        assert_eq!(scheduler.status().device_lost.as_deref(), Some(lost));
        let text = scheduler.metrics().render_prometheus(0);
        assert!(text.contains("\nhearth_device_lost 1\n"), "{text}");
        scheduler.shutdown(Duration::from_secs(1));
    }
}
