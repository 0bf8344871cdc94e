//! Scheduler counters, gauges and latency histograms, updated where things
//! happen (the engine step, submission) and read lock-free by `/metrics` and
//! the status API.

use std::{
    fmt::Write,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Mutex,
    },
    time::Duration,
};

use serde::Serialize;

/// Bucket upper bounds in seconds shared by the latency histograms.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A Prometheus-style cumulative histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    inner: Mutex<HistogramState>,
}

#[derive(Debug, Default, Clone)]
struct HistogramState {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn observe(&self, value: Duration) {
        let v = value.as_secs_f64();
        if let Ok(mut s) = self.inner.lock() {
            if s.counts.is_empty() {
                s.counts = vec![0; BUCKETS.len()];
            }
            for (i, &b) in BUCKETS.iter().enumerate() {
                if v <= b {
                    s.counts[i] += 1;
                }
            }
            s.sum += v;
            s.count += 1;
        }
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let s = self.inner.lock().map(|s| s.clone()).unwrap_or_default();
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let c = s.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", s.count);
        let _ = writeln!(out, "{name}_sum {}", s.sum);
        let _ = writeln!(out, "{name}_count {}", s.count);
    }
}

/// Everything `/metrics` reports.
#[derive(Debug, Default)]
pub struct Metrics {
    requests_total: AtomicU64,
    requests_rejected: AtomicU64,
    requests_finished: AtomicU64,
    requests_cancelled: AtomicU64,
    prompt_tokens_total: AtomicU64,
    generated_tokens_total: AtomicU64,
    queued: AtomicUsize,
    running: AtomicUsize,
    kv_bytes_used: AtomicUsize,
    kv_bytes_allocated: AtomicUsize,
    steps_total: AtomicU64,
    prefill_passes: AtomicU64,
    cache_releases: AtomicU64,
    memory_releases: AtomicU64,
    memory_refusals: AtomicU64,
    step_working_bytes: AtomicUsize,
    prefix_hits: AtomicU64,
    prefix_misses: AtomicU64,
    prefix_reused_tokens: AtomicU64,
    prefix_evictions: AtomicU64,
    prefix_bytes: AtomicUsize,
    prefix_entries: AtomicUsize,
    prefix_budget: AtomicUsize,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub step_time: Histogram,
    /// The engine error after which the device is unusable (a lost CUDA
    /// context), once there was one.
    device_lost: std::sync::OnceLock<String>,
}

/// A snapshot for status pages.
#[derive(Debug, Clone, Serialize)]
pub struct SchedulerStatus {
    pub queued: usize,
    pub running: usize,
    pub requests_total: u64,
    pub prompt_tokens_total: u64,
    pub generated_tokens_total: u64,
    /// Forward passes over prompt chunks: prompt tokens per pass is how
    /// well prompts of concurrent requests were batched.
    pub prefill_passes: u64,
    pub kv_bytes_used: usize,
    pub kv_bytes_allocated: usize,
    pub kv_bytes_budget: usize,
    /// Times an idle engine returned MLX's cached buffers to the device
    /// (after `idle_release`, docs/scheduler.md).
    pub cache_releases: u64,
    /// Times the engine returned MLX's cached buffers to the device because
    /// the GPU's free memory fell below the reserve (docs/scheduler.md,
    /// "Sharing a GPU").
    pub gpu_memory_releases: u64,
    /// Requests answered 503 because the GPU had too little free memory
    /// for them while nothing else ran.
    pub gpu_memory_refusals: u64,
    /// The most memory one engine step has worked in beyond what stays
    /// allocated (activations, attention scores, logits); a request is
    /// admitted on a GPU only if this fits beside its KV cache.
    pub step_working_bytes: usize,
    pub prefix_cache: PrefixCacheStatus,
    /// The error that made the device unusable (a lost CUDA context): every
    /// request fails until the server restarts. `None` while it works.
    pub device_lost: Option<String>,
}

/// The prefix cache's part of [`SchedulerStatus`].
#[derive(Debug, Clone, Serialize)]
pub struct PrefixCacheStatus {
    pub hits: u64,
    pub misses: u64,
    /// Prompt tokens served from the cache instead of being recomputed.
    pub reused_tokens: u64,
    pub evictions: u64,
    pub entries: usize,
    pub bytes: usize,
    pub budget_bytes: usize,
}

impl Metrics {
    pub(crate) fn record_submitted(&self) {
        self.requests_total.fetch_add(1, Ordering::Relaxed);
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_rejected(&self) {
        self.requests_rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_admitted(&self, prompt_tokens: usize) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
        self.running.fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens_total
            .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
    }

    /// A job left the queue without running (cancelled while waiting).
    pub(crate) fn record_dequeued(&self) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
        self.requests_cancelled.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_finished(&self, cancelled: bool) {
        self.running.fetch_sub(1, Ordering::Relaxed);
        self.requests_finished.fetch_add(1, Ordering::Relaxed);
        if cancelled {
            self.requests_cancelled.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Marks the device unusable (the first error that did so is kept).
    pub(crate) fn record_device_lost(&self, message: &str) {
        let _ = self.device_lost.set(message.to_string());
    }

    /// The error that made the device unusable, if one did.
    pub fn device_lost(&self) -> Option<&str> {
        self.device_lost.get().map(String::as_str)
    }

    pub(crate) fn record_tokens(&self, n: usize) {
        self.generated_tokens_total
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn record_step(&self, time: Duration) {
        self.steps_total.fetch_add(1, Ordering::Relaxed);
        self.step_time.observe(time);
    }

    pub(crate) fn record_prefill_pass(&self) {
        self.prefill_passes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_cache_release(&self) {
        self.cache_releases.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_pressure_release(&self) {
        self.memory_releases.fetch_add(1, Ordering::Relaxed);
    }

    /// A job left the queue refused for want of GPU memory.
    pub(crate) fn record_memory_refusal(&self) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
        self.requests_finished.fetch_add(1, Ordering::Relaxed);
        self.memory_refusals.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_step_working(&self, bytes: usize) {
        self.step_working_bytes.store(bytes, Ordering::Relaxed);
    }

    pub(crate) fn set_kv(&self, used: usize, allocated: usize) {
        self.kv_bytes_used.store(used, Ordering::Relaxed);
        self.kv_bytes_allocated.store(allocated, Ordering::Relaxed);
    }

    pub(crate) fn set_prefix(
        &self,
        stats: super::prefix_cache::Stats,
        bytes: usize,
        entries: usize,
        budget: usize,
    ) {
        self.prefix_hits.store(stats.hits, Ordering::Relaxed);
        self.prefix_misses.store(stats.misses, Ordering::Relaxed);
        self.prefix_reused_tokens
            .store(stats.reused_tokens, Ordering::Relaxed);
        self.prefix_evictions
            .store(stats.evictions, Ordering::Relaxed);
        self.prefix_bytes.store(bytes, Ordering::Relaxed);
        self.prefix_entries.store(entries, Ordering::Relaxed);
        self.prefix_budget.store(budget, Ordering::Relaxed);
    }

    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    pub fn status(&self, kv_budget: usize) -> SchedulerStatus {
        SchedulerStatus {
            queued: self.queued(),
            running: self.running(),
            requests_total: self.requests_total.load(Ordering::Relaxed),
            prompt_tokens_total: self.prompt_tokens_total.load(Ordering::Relaxed),
            generated_tokens_total: self.generated_tokens_total.load(Ordering::Relaxed),
            prefill_passes: self.prefill_passes.load(Ordering::Relaxed),
            kv_bytes_used: self.kv_bytes_used.load(Ordering::Relaxed),
            kv_bytes_allocated: self.kv_bytes_allocated.load(Ordering::Relaxed),
            kv_bytes_budget: kv_budget,
            cache_releases: self.cache_releases.load(Ordering::Relaxed),
            gpu_memory_releases: self.memory_releases.load(Ordering::Relaxed),
            gpu_memory_refusals: self.memory_refusals.load(Ordering::Relaxed),
            step_working_bytes: self.step_working_bytes.load(Ordering::Relaxed),
            prefix_cache: PrefixCacheStatus {
                hits: self.prefix_hits.load(Ordering::Relaxed),
                misses: self.prefix_misses.load(Ordering::Relaxed),
                reused_tokens: self.prefix_reused_tokens.load(Ordering::Relaxed),
                evictions: self.prefix_evictions.load(Ordering::Relaxed),
                entries: self.prefix_entries.load(Ordering::Relaxed),
                bytes: self.prefix_bytes.load(Ordering::Relaxed),
                budget_bytes: self.prefix_budget.load(Ordering::Relaxed),
            },
            device_lost: self.device_lost().map(str::to_string),
        }
    }

    /// Prometheus text exposition of every metric.
    pub fn render_prometheus(&self, kv_budget: usize) -> String {
        let mut out = String::new();
        let mut line = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        let g = |a: &AtomicUsize| a.load(Ordering::Relaxed).to_string();
        line(
            "hearth_device_lost",
            "gauge",
            "1 once the device is unusable (a lost CUDA context): restart the server.",
            u8::from(self.device_lost().is_some()).to_string(),
        );
        line(
            "hearth_requests_total",
            "counter",
            "Requests submitted.",
            c(&self.requests_total),
        );
        line(
            "hearth_requests_rejected_total",
            "counter",
            "Requests refused at capacity (429).",
            c(&self.requests_rejected),
        );
        line(
            "hearth_requests_finished_total",
            "counter",
            "Requests that ended.",
            c(&self.requests_finished),
        );
        line(
            "hearth_requests_cancelled_total",
            "counter",
            "Requests cancelled by the client.",
            c(&self.requests_cancelled),
        );
        line(
            "hearth_prompt_tokens_total",
            "counter",
            "Prompt tokens processed.",
            c(&self.prompt_tokens_total),
        );
        line(
            "hearth_generated_tokens_total",
            "counter",
            "Tokens generated.",
            c(&self.generated_tokens_total),
        );
        line(
            "hearth_engine_steps_total",
            "counter",
            "Engine steps run.",
            c(&self.steps_total),
        );
        line(
            "hearth_prefill_passes_total",
            "counter",
            "Forward passes over prompt chunks (several prompts may share one).",
            c(&self.prefill_passes),
        );
        line(
            "hearth_cache_releases_total",
            "counter",
            "Times the idle engine returned its cached buffers to the device.",
            c(&self.cache_releases),
        );
        line(
            "hearth_gpu_memory_releases_total",
            "counter",
            "Times the engine returned its cached buffers because the GPU's free memory fell below the reserve.",
            c(&self.memory_releases),
        );
        line(
            "hearth_gpu_memory_refusals_total",
            "counter",
            "Requests answered 503 because the GPU had too little free memory for them.",
            c(&self.memory_refusals),
        );
        line(
            "hearth_step_working_memory_bytes",
            "gauge",
            "The most memory one engine step has worked in beyond what stays allocated.",
            g(&self.step_working_bytes),
        );
        line(
            "hearth_queue_depth",
            "gauge",
            "Requests waiting for admission.",
            g(&self.queued),
        );
        line(
            "hearth_running_sequences",
            "gauge",
            "Sequences prefilling or decoding.",
            g(&self.running),
        );
        line(
            "hearth_kv_cache_used_bytes",
            "gauge",
            "KV cache bytes holding tokens.",
            g(&self.kv_bytes_used),
        );
        line(
            "hearth_kv_cache_allocated_bytes",
            "gauge",
            "KV cache bytes allocated.",
            g(&self.kv_bytes_allocated),
        );
        line(
            "hearth_kv_cache_budget_bytes",
            "gauge",
            "KV cache memory budget.",
            kv_budget.to_string(),
        );
        line(
            "hearth_prefix_cache_hits_total",
            "counter",
            "Prompts that reused a cached prefix.",
            c(&self.prefix_hits),
        );
        line(
            "hearth_prefix_cache_misses_total",
            "counter",
            "Prompts that found no reusable cached prefix.",
            c(&self.prefix_misses),
        );
        line(
            "hearth_prefix_cache_reused_tokens_total",
            "counter",
            "Prompt tokens served from the prefix cache instead of recomputed.",
            c(&self.prefix_reused_tokens),
        );
        line(
            "hearth_prefix_cache_evictions_total",
            "counter",
            "Prefix cache entries evicted (LRU, budget or room for running sequences).",
            c(&self.prefix_evictions),
        );
        line(
            "hearth_prefix_cache_entries",
            "gauge",
            "Token sequences held by the prefix cache.",
            g(&self.prefix_entries),
        );
        line(
            "hearth_prefix_cache_bytes",
            "gauge",
            "Bytes held by the prefix cache (inside the KV budget).",
            g(&self.prefix_bytes),
        );
        line(
            "hearth_prefix_cache_budget_bytes",
            "gauge",
            "Most bytes the prefix cache may hold.",
            g(&self.prefix_budget),
        );
        self.time_to_first_token.render(
            &mut out,
            "hearth_time_to_first_token_seconds",
            "Submission to first token.",
        );
        self.inter_token_latency.render(
            &mut out,
            "hearth_inter_token_latency_seconds",
            "Time between consecutive tokens of a sequence.",
        );
        self.step_time.render(
            &mut out,
            "hearth_engine_step_seconds",
            "Engine step duration.",
        );
        out
    }
}
