//! Starting and stopping the server inside another program (the menu-bar
//! app): the same server `hearth serve` runs (the [`ModelManager`] and its
//! routes, the web UI), as a value with a start and a stop.
//!
//! [`ServerHandle::start`] binds the port, starts serving at once and loads
//! the model in the background: while it loads, `/api/status` and
//! [`ServerHandle::status`] say `loading` (with the seconds so far) and the
//! model routes answer 503. [`ServerHandle::stop`] stops accepting
//! connections, lets running requests finish for the grace period, cancels
//! what is left, unloads the model, returns MLX's cached buffers to the
//! system and closes the listener: the port is free when it returns.
//!
//! [`ServerControl`] keeps at most one running server and serializes start
//! and stop, for callers (menu items, window buttons) that may click twice.

use std::{
    future::IntoFuture,
    net::{IpAddr, SocketAddr},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use serde::Serialize;
use tokio::{sync::watch, task::JoinHandle};

use super::{
    api,
    config::ServerSettings,
    manager::{self, ModelManager},
    ServeError,
};
use crate::home;

/// A running server (see the module docs).
pub struct ServerHandle {
    manager: Arc<ModelManager>,
    local: SocketAddr,
    stop_tx: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    loader: JoinHandle<()>,
    /// True until the background load has ended (either way).
    loading: Arc<AtomicBool>,
    grace: Duration,
}

/// What [`ServerHandle::stop`] did.
#[derive(Debug, Clone, Serialize)]
pub struct StopReport {
    /// Whether every connection ended within the grace period (otherwise the
    /// rest were closed).
    pub drained: bool,
    pub seconds: f64,
}

impl ServerHandle {
    /// Validates the settings, finds the model, binds and starts serving;
    /// the model loads in the background. Fails at once on a bad setting,
    /// a model that does not exist or a port in use.
    pub async fn start(settings: ServerSettings) -> Result<Self, ServeError> {
        settings.validate()?;
        let addr = settings.socket_addr()?;
        home::resolve_model(settings.model.as_deref())?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        let local = listener.local_addr()?;
        let grace = settings.shutdown_grace();
        let model = settings.model.clone();
        let manager = Arc::new(ModelManager::new(settings, Arc::new(api::UiState::new())));
        api::start(&manager, local);
        let loading = Arc::new(AtomicBool::new(true));
        let (loader_manager, loader_flag) = (manager.clone(), loading.clone());
        let loader = tokio::spawn(async move {
            if let Err(e) = loader_manager.load(model.as_deref()).await {
                tracing::warn!("{e}");
            }
            loader_flag.store(false, Ordering::Relaxed);
        });
        // Serve only once the load has begun, so no client sees `stopped`.
        while loading.load(Ordering::Relaxed) && manager.status().state == "stopped" {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let app = manager::app(manager.clone());
        let server = tokio::spawn(
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.wait_for(|&stop| stop).await;
                })
                .into_future(),
        );
        tracing::info!(%local, "serving; the model is loading");
        Ok(Self {
            manager,
            local,
            stop_tx,
            server,
            loader,
            loading,
            grace,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The base URL a browser on this machine opens (a wildcard bind is
    /// reached through loopback).
    pub fn url(&self) -> String {
        let ip = match self.local.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::from([127, 0, 0, 1]),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
            ip => ip,
        };
        format!("http://{}", SocketAddr::new(ip, self.local.port()))
    }

    pub fn manager(&self) -> &Arc<ModelManager> {
        &self.manager
    }

    /// The state, model, load progress, speed and memory, right now.
    pub fn status(&self) -> ServerStatus {
        running_status(&self.manager, self.url(), &self.loading)
    }

    /// Waits until the model is loaded (`Ok`) or its load failed (`Err`
    /// with the reason), at most `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.status();
            match status.state {
                "ready" | "serving" => return Ok(()),
                "failed" => return Err(status.error.unwrap_or_default()),
                _ if self.loader.is_finished() && self.manager.current().is_none() => {
                    return Err(status
                        .error
                        .unwrap_or_else(|| "the model did not load".into()))
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(format!("the model did not load within {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops accepting, drains for the grace period, cancels the rest,
    /// unloads the model and frees its memory, closes the listener.
    pub async fn stop(self) -> StopReport {
        let started = Instant::now();
        let Self {
            manager,
            stop_tx,
            mut server,
            loader,
            grace,
            ..
        } = self;
        // Stop accepting (axum drops the listener) and refuse new work.
        let _ = stop_tx.send(true);
        manager.begin_shutdown();
        let drained = tokio::time::timeout(grace, &mut server).await.is_ok();
        if !drained {
            tracing::warn!("grace period over; closing the remaining connections");
            server.abort();
            let _ = server.await;
        }
        // A load in flight cannot be interrupted; let it end, then unload.
        let _ = loader.await;
        manager.stop_now().await;
        drop(manager);
        let _ = mlx_rs::memory::clear_cache();
        tracing::info!("stopped");
        StopReport {
            drained,
            seconds: started.elapsed().as_secs_f64(),
        }
    }
}

/// The status of a running server's manager.
fn running_status(manager: &ModelManager, url: String, loading: &AtomicBool) -> ServerStatus {
    let m = manager.status();
    let state = match manager.current() {
        Some(s) if s.is_shutting_down() => "stopping",
        _ if m.state == "stopped" && m.last_error.is_some() => "failed",
        // The load task has not reached the manager yet.
        None if m.state == "stopped" && loading.load(Ordering::Relaxed) => "loading",
        _ => m.state,
    };
    ServerStatus {
        state,
        model: m.model,
        url: Some(url),
        loading_seconds: m.loading_seconds,
        loading_bytes: m.loading_bytes,
        error: m.last_error,
        tokens_per_second: manager.ui.memory.latest_tokens_per_second(),
        memory: ProcessMemory::now(),
    }
}

/// This process's memory: resident set and MLX's active and cached buffers.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessMemory {
    pub rss_bytes: Option<u64>,
    pub mlx_active_bytes: Option<usize>,
    pub mlx_cache_bytes: Option<usize>,
}

impl ProcessMemory {
    pub fn now() -> Self {
        let rss_bytes = sysinfo::get_current_pid().ok().and_then(|pid| {
            let mut system = sysinfo::System::new();
            system.refresh_processes_specifics(
                sysinfo::ProcessesToUpdate::Some(&[pid]),
                true,
                sysinfo::ProcessRefreshKind::nothing().with_memory(),
            );
            system.process(pid).map(|p| p.memory())
        });
        Self {
            rss_bytes,
            mlx_active_bytes: mlx_rs::memory::active_memory().ok(),
            mlx_cache_bytes: mlx_rs::memory::cache_memory().ok(),
        }
    }
}

/// What a status line shows.
#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    /// `stopped`, `starting`, `loading`, `ready`, `serving`, `stopping` or
    /// `failed` (the load failed; `error` says why).
    pub state: &'static str,
    pub model: Option<String>,
    /// The server's base URL (`/v1` is the OpenAI base URL).
    pub url: Option<String>,
    pub loading_seconds: Option<f64>,
    pub loading_bytes: Option<u64>,
    pub error: Option<String>,
    pub tokens_per_second: f64,
    pub memory: ProcessMemory,
}

impl ServerStatus {
    fn idle(state: &'static str, error: Option<String>) -> Self {
        Self {
            state,
            model: None,
            url: None,
            loading_seconds: None,
            loading_bytes: None,
            error,
            tokens_per_second: 0.0,
            memory: ProcessMemory::now(),
        }
    }

    /// One line: `ready · SmolLM2… · 12.3 tok/s · 420 MB`.
    pub fn line(&self) -> String {
        let mut parts = vec![self.state.to_string()];
        if let Some(model) = &self.model {
            parts.push(model.clone());
        }
        match self.state {
            "loading" => {
                if let Some(s) = self.loading_seconds {
                    parts.push(format!("{s:.0} s"));
                }
            }
            "ready" | "serving" => parts.push(format!("{:.1} tok/s", self.tokens_per_second)),
            "failed" => parts.push(self.error.clone().unwrap_or_default()),
            _ => {}
        }
        if let Some(rss) = self.memory.rss_bytes {
            parts.push(format!("{} MB", rss / 1_000_000));
        }
        parts.join(" · ")
    }
}

/// The running server's manager, URL and loading flag.
type Running = (Arc<ModelManager>, String, Arc<AtomicBool>);

/// At most one server, started and stopped one operation at a time.
#[derive(Default)]
pub struct ServerControl {
    /// Serializes start and stop.
    slot: tokio::sync::Mutex<Option<ServerHandle>>,
    /// `starting` / `stopping` while one runs, for [`Self::status`].
    transition: Mutex<Option<&'static str>>,
    /// The last start's error, until the next start.
    error: Mutex<Option<String>>,
    /// The running server's manager, URL and loading flag, for status
    /// without waiting.
    current: Mutex<Option<Running>>,
}

impl ServerControl {
    pub fn new() -> Self {
        Self::default()
    }

    fn set_transition(&self, t: Option<&'static str>) {
        if let Ok(mut slot) = self.transition.lock() {
            *slot = t;
        }
    }

    /// Starts a server with `settings` unless one runs; returns its URL.
    pub async fn start(&self, settings: ServerSettings) -> Result<String, String> {
        let mut slot = self.slot.lock().await;
        if let Some(handle) = slot.as_ref() {
            return Ok(handle.url());
        }
        self.set_transition(Some("starting"));
        let started = ServerHandle::start(settings).await;
        self.set_transition(None);
        match started {
            Ok(handle) => {
                let url = handle.url();
                if let Ok(mut current) = self.current.lock() {
                    *current = Some((
                        handle.manager().clone(),
                        url.clone(),
                        handle.loading.clone(),
                    ));
                }
                if let Ok(mut e) = self.error.lock() {
                    *e = None;
                }
                *slot = Some(handle);
                Ok(url)
            }
            Err(e) => {
                let message = e.to_string();
                if let Ok(mut slot) = self.error.lock() {
                    *slot = Some(message.clone());
                }
                Err(message)
            }
        }
    }

    /// Stops the running server, if any (see [`ServerHandle::stop`]).
    pub async fn stop(&self) -> Option<StopReport> {
        let mut slot = self.slot.lock().await;
        let handle = slot.take()?;
        self.set_transition(Some("stopping"));
        if let Ok(mut current) = self.current.lock() {
            *current = None;
        }
        let report = handle.stop().await;
        self.set_transition(None);
        Some(report)
    }

    /// Waits for the running server's model (see [`ServerHandle::wait_ready`]).
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), String> {
        let slot = self.slot.lock().await;
        match slot.as_ref() {
            Some(handle) => handle.wait_ready(timeout).await,
            None => Err("the server is not running".into()),
        }
    }

    /// The base URL of the running server.
    pub fn url(&self) -> Option<String> {
        let current = self.current.lock().ok()?;
        current.as_ref().map(|(_, url, _)| url.clone())
    }

    pub fn status(&self) -> ServerStatus {
        if let Some(t) = self.transition.lock().ok().and_then(|t| *t) {
            return ServerStatus::idle(t, None);
        }
        let current = self.current.lock().ok().and_then(|c| c.clone());
        match current {
            Some((manager, url, loading)) => running_status(&manager, url, &loading),
            None => {
                let error = self.error.lock().ok().and_then(|e| e.clone());
                let state = if error.is_some() { "failed" } else { "stopped" };
                ServerStatus::idle(state, error)
            }
        }
    }
}
