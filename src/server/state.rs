//! The one piece of shared state every handler sees: the scheduler, the
//! settings, the served model's names, and a few HTTP-level counters.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Mutex,
    },
    time::{SystemTime, UNIX_EPOCH},
};

use super::{config::ServerSettings, error::ApiError, reasoning::ThinkTags};
use crate::scheduler::SchedulerHandle;

/// Shared by all handlers as `Arc<AppState>`.
pub struct AppState {
    pub scheduler: SchedulerHandle,
    pub settings: ServerSettings,
    /// The id the model is served as (`/v1/models`, the `model` of responses).
    pub model_id: String,
    /// Other accepted names: `default`, the id without `.gguf`, `--model`'s
    /// text, configured aliases.
    pub aliases: Vec<String>,
    /// Unix seconds when the server started (the model's `created`).
    pub created: u64,
    pub system_fingerprint: String,
    /// The think tags when the tokenizer has them (Qwen3-style models).
    pub think_tags: Option<ThinkTags>,
    shutting_down: AtomicBool,
    /// Responses by status class (index 1..=5 = 1xx..5xx).
    responses: [AtomicU64; 6],
    system: Mutex<sysinfo::System>,
    /// The web UI endpoints' state (`/api/*`), shared across model switches.
    pub ui: std::sync::Arc<super::api::UiState>,
    /// Structured output's grammar compiler for this model, built on first
    /// use (see [`super::structured`]).
    pub grammar: std::sync::OnceLock<
        Result<std::sync::Arc<crate::engine::constraint::GrammarCompiler>, String>,
    >,
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl AppState {
    pub fn new(scheduler: SchedulerHandle, settings: ServerSettings) -> Self {
        let model_id = scheduler.info().id.clone();
        let mut aliases = vec!["default".to_string()];
        if let Some(stem) = model_id.strip_suffix(".gguf") {
            aliases.push(stem.to_string());
        }
        if let Some(arg) = &settings.model {
            aliases.push(arg.clone());
        }
        aliases.extend(settings.aliases.iter().cloned());
        let mut seen = std::collections::HashSet::new();
        aliases.retain(|a| a != &model_id && seen.insert(a.clone()));
        let tokenizer = scheduler.tokenizer();
        let tags = ThinkTags::default();
        let think_tags = (tokenizer.token_to_id(&tags.open).is_some()
            && tokenizer.token_to_id(&tags.close).is_some())
        .then_some(tags);
        AppState {
            scheduler,
            settings,
            model_id,
            aliases,
            created: unix_now(),
            system_fingerprint: format!("hearth-{}", env!("CARGO_PKG_VERSION")),
            think_tags,
            shutting_down: AtomicBool::new(false),
            responses: Default::default(),
            system: Mutex::new(sysinfo::System::new()),
            ui: std::sync::Arc::new(super::api::UiState::new()),
            grammar: std::sync::OnceLock::new(),
        }
    }

    /// Shares `ui` (the model manager's) instead of a state of its own.
    pub fn with_ui(mut self, ui: std::sync::Arc<super::api::UiState>) -> Self {
        self.ui = ui;
        self
    }

    /// Checks a request's `model`: the served id, an alias, or absent.
    pub fn resolve_model(&self, requested: Option<&str>) -> Result<(), ApiError> {
        match requested.map(str::trim) {
            None | Some("") => Ok(()),
            Some(name) if name == self.model_id || self.aliases.iter().any(|a| a == name) => Ok(()),
            Some(name) => Err(ApiError::model_not_found(name, &self.model_id)),
        }
    }

    /// Whether `name` names the served model (for `GET /v1/models/{id}`).
    pub fn is_served_model(&self, name: &str) -> bool {
        self.resolve_model(Some(name)).is_ok() && !name.trim().is_empty()
    }

    /// Refuses new generation work while draining.
    pub fn check_accepting(&self) -> Result<(), ApiError> {
        if self.is_shutting_down() {
            Err(ApiError::shutting_down())
        } else {
            Ok(())
        }
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    pub fn record_response(&self, status: u16) {
        let class = usize::from(status / 100).min(5);
        self.responses[class].fetch_add(1, Ordering::Relaxed);
    }

    /// HTTP and process metrics in Prometheus text, appended to the
    /// scheduler's.
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write;
        let status = self.scheduler.status();
        let mut out = self
            .scheduler
            .metrics()
            .render_prometheus(status.kv_bytes_budget);
        let _ = writeln!(
            out,
            "# HELP hearth_http_responses_total HTTP responses by status class.\n\
             # TYPE hearth_http_responses_total counter"
        );
        for (class, count) in self.responses.iter().enumerate().skip(1) {
            let _ = writeln!(
                out,
                "hearth_http_responses_total{{class=\"{class}xx\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let mut gauge = |name: &str, help: &str, value: Option<usize>| {
            if let Some(value) = value {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
                );
            }
        };
        gauge(
            "hearth_process_resident_memory_bytes",
            "Resident memory of the server process.",
            self.resident_memory(),
        );
        gauge(
            "hearth_mlx_active_memory_bytes",
            "Memory MLX holds in live arrays.",
            mlx_rs::memory::active_memory().ok(),
        );
        gauge(
            "hearth_mlx_cache_memory_bytes",
            "Memory MLX keeps cached for reuse.",
            mlx_rs::memory::cache_memory().ok(),
        );
        gauge(
            "hearth_mlx_peak_memory_bytes",
            "Peak memory MLX has held.",
            crate::device::peak_memory(),
        );
        gauge(
            "hearth_model_weight_bytes",
            "Bytes of the loaded weights.",
            Some(self.scheduler.info().weight_bytes),
        );
        gauge(
            "hearth_model_context_length",
            "The served model's context length in tokens.",
            Some(self.scheduler.info().context_length),
        );
        let device = &self.scheduler.info().device;
        let _ = writeln!(
            out,
            "# HELP hearth_device_info The device MLX runs on (value 1).\n\
             # TYPE hearth_device_info gauge\n\
             hearth_device_info{{kind=\"{}\",backend=\"{}\"}} 1",
            device.kind, device.backend
        );
        out
    }

    fn resident_memory(&self) -> Option<usize> {
        let pid = sysinfo::get_current_pid().ok()?;
        let mut system = self.system.lock().ok()?;
        system.refresh_processes_specifics(
            sysinfo::ProcessesToUpdate::Some(&[pid]),
            true,
            sysinfo::ProcessRefreshKind::nothing().with_memory(),
        );
        let bytes = system.process(pid)?.memory();
        usize::try_from(bytes).ok()
    }
}
