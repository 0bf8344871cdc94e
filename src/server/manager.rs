//! The model manager: which model is served, and switching it while the
//! server runs (load / unload / switch), for the web UI's Models page and
//! the menu-bar app.
//!
//! Shape: every loaded model gets its own [`AppState`] and [`router`] (the
//! OpenAI routes and the per-model `/api/*` routes, unchanged); the manager
//! keeps the current one and the top-level router ([`app`]) forwards each
//! request to it, so a handler never sees a model change under its feet. A
//! request already running keeps its `Arc<AppState>` until it ends. With no
//! model loaded the forwarded routes answer 503 (`code: model_not_loaded`).
//! The web UI's files, `/api/status`, `/api/memory`, `/api/models` and the
//! load/unload endpoints are answered by the manager itself, so they work in
//! every state.
//!
//! States: `stopped` (no model), `loading` (with the model's name, its size,
//! the seconds so far and the loader's progress: tensors and bytes read of
//! the total, [`LoadReport`]; kept after the load as the last load's report),
//! `ready` (loaded, idle), `serving` (requests running or queued). A switch
//! unloads first (running requests get the shutdown grace period to finish,
//! then are cancelled) so that two models never need memory at once.

use std::{
    convert::Infallible,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, RwLock,
    },
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    extract::Request,
    http::StatusCode,
    response::{IntoResponse, Response},
    Router,
};
use serde::Serialize;
use tower::ServiceExt;

use super::{api::UiState, config::ServerSettings, error::ApiError, router, state::AppState};
use crate::{home, scheduler::SchedulerHandle};

/// What the manager is doing.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Phase {
    Stopped,
    Loading {
        model: String,
        size_bytes: u64,
        #[serde(skip)]
        since: Instant,
    },
    Ready,
}

/// The answer of `GET /api/models/state` and part of `/api/status`.
#[derive(Debug, Clone, Serialize)]
pub struct ManagerStatus {
    /// `stopped`, `loading`, `ready` or `serving`.
    pub state: &'static str,
    /// The served model's id, or the one loading.
    pub model: Option<String>,
    /// While loading: seconds so far and the model's size on disk.
    pub loading_seconds: Option<f64>,
    pub loading_bytes: Option<u64>,
    /// Why the last load failed, until the next one succeeds.
    pub last_error: Option<String>,
    /// The load running now, else the last one (`null` before any).
    pub load: Option<LoadReport>,
}

/// Progress of a model load: the weights' tensors and bytes read into
/// memory of the total (from the loader, `hearth_models::load_with_progress`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    pub model: String,
    pub tensors_done: usize,
    pub tensors_total: usize,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Seconds since the load started (its whole time once done).
    pub seconds: f64,
    /// The load ended (loaded or failed).
    pub done: bool,
    #[serde(skip)]
    started: Option<Instant>,
}

impl LoadReport {
    fn snapshot(&self) -> LoadReport {
        let mut report = self.clone();
        if let (false, Some(started)) = (report.done, report.started) {
            report.seconds = started.elapsed().as_secs_f64();
        }
        report
    }
}

struct Served {
    state: Arc<AppState>,
    router: Router,
}

/// Owns the served model (see the module docs).
pub struct ModelManager {
    settings: ServerSettings,
    pub ui: Arc<UiState>,
    phase: Mutex<Phase>,
    served: RwLock<Option<Served>>,
    last_error: Mutex<Option<String>>,
    /// Written by the engine thread while it reads the weights.
    load_report: Arc<Mutex<Option<LoadReport>>>,
    /// Serializes load/unload.
    switching: tokio::sync::Mutex<()>,
    shutting_down: AtomicBool,
}

/// Why a load failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    NotFound(#[from] home::ModelLookupError),
    #[error("the server is shutting down")]
    ShuttingDown,
    /// Refused before unloading the served model: it keeps serving.
    #[error(transparent)]
    TooLarge(#[from] crate::engine::fit::TooLarge),
    #[error("cannot load the model {model}: {reason:#}")]
    Failed {
        model: String,
        reason: anyhow::Error,
    },
}

impl ModelManager {
    pub fn new(settings: ServerSettings, ui: Arc<UiState>) -> Self {
        Self {
            settings,
            ui,
            phase: Mutex::new(Phase::Stopped),
            served: RwLock::new(None),
            last_error: Mutex::new(None),
            load_report: Arc::new(Mutex::new(None)),
            switching: tokio::sync::Mutex::new(()),
            shutting_down: AtomicBool::new(false),
        }
    }

    pub fn settings(&self) -> &ServerSettings {
        &self.settings
    }

    /// The served model's state, if one is loaded.
    pub fn current(&self) -> Option<Arc<AppState>> {
        let served = self.served.read().ok()?;
        served.as_ref().map(|s| s.state.clone())
    }

    fn current_router(&self) -> Option<Router> {
        let served = self.served.read().ok()?;
        served.as_ref().map(|s| s.router.clone())
    }

    fn set_phase(&self, phase: Phase) {
        if let Ok(mut p) = self.phase.lock() {
            *p = phase;
        }
    }

    pub fn status(&self) -> ManagerStatus {
        let phase = self
            .phase
            .lock()
            .map(|p| p.clone())
            .unwrap_or(Phase::Stopped);
        let last_error = self.last_error.lock().ok().and_then(|e| e.clone());
        let load = self
            .load_report
            .lock()
            .ok()
            .and_then(|r| r.as_ref().map(LoadReport::snapshot));
        let current = self.current();
        match phase {
            Phase::Loading {
                model,
                size_bytes,
                since,
            } => ManagerStatus {
                state: "loading",
                model: Some(model),
                loading_seconds: Some(since.elapsed().as_secs_f64()),
                loading_bytes: Some(size_bytes),
                last_error,
                load,
            },
            Phase::Stopped | Phase::Ready => {
                let state = match &current {
                    None => "stopped",
                    Some(s) => {
                        let status = s.scheduler.status();
                        if status.running + status.queued > 0 {
                            "serving"
                        } else {
                            "ready"
                        }
                    }
                };
                ManagerStatus {
                    state,
                    model: current.map(|s| s.model_id.clone()),
                    loading_seconds: None,
                    loading_bytes: None,
                    last_error,
                    load,
                }
            }
        }
    }

    /// Loads `model` (a name in the models folder or a path; `None` = the
    /// default), unloading the current model first.
    pub async fn load(&self, model: Option<&str>) -> Result<Arc<AppState>, LoadError> {
        let _switching = self.switching.lock().await;
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err(LoadError::ShuttingDown);
        }
        let path = home::resolve_model(model)?;
        let freed = self
            .current()
            .map_or(0, |s| s.scheduler.info().weight_bytes as u64);
        if let Err(e) = crate::engine::fit::check_replacing(&path, freed) {
            if let Ok(mut last) = self.last_error.lock() {
                *last = Some(e.to_string());
            }
            return Err(e.into());
        }
        self.unload_locked().await;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let size_bytes = home::describe_model(&path).map_or(0, |m| m.size_bytes);
        self.set_phase(Phase::Loading {
            model: name.clone(),
            size_bytes,
            since: Instant::now(),
        });
        tracing::info!(model = %name, "loading");
        let started = Instant::now();
        if let Ok(mut report) = self.load_report.lock() {
            *report = Some(LoadReport {
                model: name.clone(),
                started: Some(started),
                ..LoadReport::default()
            });
        }
        let config = self.settings.scheduler_config();
        let load_path = path.clone();
        let report = self.load_report.clone();
        let progress = move |p: hearth_models::LoadProgress| {
            if let Ok(mut guard) = report.lock() {
                if let Some(r) = guard.as_mut() {
                    r.tensors_done = p.tensors_done;
                    r.tensors_total = p.tensors_total;
                    r.bytes_done = p.bytes_done;
                    r.bytes_total = p.bytes_total;
                }
            }
        };
        let loaded = tokio::task::spawn_blocking(move || {
            SchedulerHandle::start_with_progress(load_path, config, progress)
        })
        .await
        .map_err(|e| anyhow::anyhow!("the loading task failed: {e}"))
        .and_then(|r| r);
        if let Ok(mut guard) = self.load_report.lock() {
            if let Some(r) = guard.as_mut() {
                r.done = true;
                r.seconds = started.elapsed().as_secs_f64();
            }
        }
        let scheduler = match loaded {
            Ok(scheduler) => scheduler,
            Err(reason) => {
                self.set_phase(Phase::Stopped);
                if let Ok(mut e) = self.last_error.lock() {
                    *e = Some(format!("{name}: {reason:#}"));
                }
                return Err(LoadError::Failed {
                    model: name,
                    reason,
                });
            }
        };
        let mut settings = self.settings.clone();
        // Names given for the first model (--model, aliases) belong to it.
        if model != self.settings.model.as_deref() {
            settings.model = model.map(str::to_owned);
            settings.aliases.clear();
        }
        let state = Arc::new(AppState::new(scheduler, settings).with_ui(self.ui.clone()));
        let router = router(state.clone());
        if let Ok(mut served) = self.served.write() {
            *served = Some(Served {
                state: state.clone(),
                router,
            });
        }
        if let Ok(mut e) = self.last_error.lock() {
            *e = None;
        }
        self.set_phase(Phase::Ready);
        tracing::info!(model = %state.model_id, "loaded");
        Ok(state)
    }

    /// Unloads the served model (running requests get the grace period).
    pub async fn unload(&self) {
        let _switching = self.switching.lock().await;
        self.unload_locked().await;
    }

    async fn unload_locked(&self) {
        let old = self.served.write().ok().and_then(|mut s| s.take());
        self.set_phase(Phase::Stopped);
        if let Some(old) = old {
            tracing::info!(model = %old.state.model_id, "unloading");
            old.state.begin_shutdown();
            let grace = self.settings.shutdown_grace();
            let scheduler = old.state.scheduler.clone();
            let _ = tokio::task::spawn_blocking(move || scheduler.shutdown(grace)).await;
        }
    }

    /// Draining for shutdown: no more loads; the served model refuses new
    /// generation work.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
        if let Some(state) = self.current() {
            state.begin_shutdown();
        }
    }

    /// Stops the engine at once (cancelling anything still running) and
    /// frees the model: the end of `serve`.
    pub async fn stop_now(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
        let old = self.served.write().ok().and_then(|mut s| s.take());
        self.set_phase(Phase::Stopped);
        if let Some(old) = old {
            let scheduler = old.state.scheduler.clone();
            drop(old);
            let _ = tokio::task::spawn_blocking(move || scheduler.shutdown(Duration::ZERO)).await;
        }
    }

    /// Forwards a request to the served model's router, or answers 503.
    pub async fn dispatch(&self, request: Request<Body>) -> Response {
        match self.current_router() {
            Some(router) => match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            },
            None => self.not_loaded().into_response(),
        }
    }

    fn not_loaded(&self) -> ApiError {
        let status = self.status();
        let message = match status.state {
            "loading" => format!(
                "The model {} is loading; try again in a moment.",
                status.model.unwrap_or_default()
            ),
            _ => "No model is loaded. Load one from the web UI's Models page or with \
                  POST /api/models/load."
                .to_string(),
        };
        let mut e = ApiError::internal(message);
        e.status = StatusCode::SERVICE_UNAVAILABLE;
        e.code = Some("model_not_loaded");
        e.retry_after = Some(Duration::from_secs(1));
        e
    }
}

/// The service `serve` runs: the manager's own routes, then the served
/// model's router. The manager's routes (load, unload, download, status)
/// sit behind the same API-key gate as the model's routes (docs/api.md);
/// the model's router applies its own.
pub fn app(manager: Arc<ModelManager>) -> Router {
    let fallback_manager = manager.clone();
    let gate = Arc::new(super::auth::AuthGate::new(manager.settings()));
    super::api::manager_routes()
        .route_layer(axum::middleware::from_fn_with_state(
            gate,
            super::auth::check,
        ))
        .with_state(manager)
        .fallback(move |request: Request<Body>| {
            let manager = fallback_manager.clone();
            async move { Ok::<_, Infallible>(manager.dispatch(request).await) }
        })
}
