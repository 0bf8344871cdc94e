//! The web UI's own endpoints under `/api/*` (docs/api.md, "UI endpoints"):
//! server status, memory with a short history, benchmark runs, local models
//! and settings. The UI uses these plus the public OpenAI routes; nothing
//! here is needed by API clients.
//!
//! Two groups: [`manager_routes`] answer in every state of the
//! [`ModelManager`] (no model, loading, serving); [`routes`] belong to a
//! loaded model's router and answer 503 while none is loaded.
//!
//! | route | handler |
//! |---|---|
//! | `GET /api/status` | [`status`] (manager) |
//! | `GET /api/memory` | [`memory`] (manager) |
//! | `GET /api/models`, `POST /api/models/load`, `POST /api/models/unload` | [`models`] (manager) |
//! | `POST /api/models/download`, `POST /api/models/download/cancel`, `GET /api/models/downloads` | [`download`] (manager) |
//! | `GET /api/settings` | [`models::settings`] |
//! | `POST /api/extract` | [`documents`] |
//! | `GET, POST /api/bench`, `DELETE /api/bench/current`, `GET /api/bench/runs/{id}[/markdown,/html]` | [`bench`] |

pub mod bench;
pub mod documents;
pub mod download;
pub mod memory;
pub mod models;
pub mod status;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, OnceLock},
    time::Instant,
};

use axum::{
    routing::{delete, get, post},
    Router,
};

use super::{error::ApiError, info, manager::ModelManager, state::AppState, ui};

/// What the UI endpoints keep between requests; shared by the manager and
/// every loaded model's [`AppState`] (so history survives a model switch).
pub struct UiState {
    started: Instant,
    local_addr: OnceLock<SocketAddr>,
    pub memory: memory::MemoryHistory,
    pub bench: bench::BenchRuns,
    pub downloads: download::Downloads,
    /// The served model's facts, computed once per model.
    model_summary: Mutex<Option<status::ModelSummary>>,
}

impl Default for UiState {
    fn default() -> Self {
        Self::new()
    }
}

impl UiState {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            local_addr: OnceLock::new(),
            memory: memory::MemoryHistory::default(),
            bench: bench::BenchRuns::new(crate::home::hearth_home().join("bench-runs")),
            downloads: download::Downloads::default(),
            model_summary: Mutex::new(None),
        }
    }

    /// The address the server listens on (the benchmark's target).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr.get().copied()
    }

    pub fn uptime_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// Called by `serve` once listening: records the address and starts the
/// memory sampler (it stops when the manager is dropped).
pub fn start(manager: &Arc<ModelManager>, local: SocketAddr) {
    let _ = manager.ui.local_addr.set(local);
    memory::spawn_sampler(Arc::downgrade(manager));
}

/// Routes the manager answers itself, in every state; the web UI's files too.
pub fn manager_routes() -> Router<Arc<ModelManager>> {
    Router::new()
        .route("/", get(ui::index))
        .route("/index.html", get(ui::index))
        .route("/favicon.svg", get(ui::favicon))
        .route("/assets/{*path}", get(ui::asset))
        .route("/api/status", get(status::status))
        .route("/api/memory", get(memory::memory))
        .route("/api/models", get(models::list))
        .route("/api/models/load", post(models::load))
        .route("/api/models/unload", post(models::unload))
        .route("/api/models/download", post(download::start))
        .route("/api/models/download/cancel", post(download::cancel))
        .route("/api/models/downloads", get(download::list))
        .method_not_allowed_fallback(info::method_not_allowed)
}

/// The `/api` routes of a loaded model (merged into its router).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/settings", get(models::settings))
        .route("/api/extract", post(documents::extract))
        .route("/api/bench", get(bench::overview).post(bench::start))
        .route("/api/bench/current", delete(bench::cancel))
        .route("/api/bench/runs/{id}", get(bench::report_json))
        .route("/api/bench/runs/{id}/markdown", get(bench::report_markdown))
        .route("/api/bench/runs/{id}/html", get(bench::report_html))
}

/// 404 for an unknown resource under `/api`.
fn not_found(what: &str) -> ApiError {
    let mut e = ApiError::invalid(format!("{what} was not found."));
    e.status = axum::http::StatusCode::NOT_FOUND;
    e.kind = "not_found_error";
    e.code = Some("not_found");
    e
}
