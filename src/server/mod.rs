//! The OpenAI-compatible HTTP API (`hearth serve`), on axum and tokio.
//!
//! Shape: [`router`] declares every route in one place; handlers parse and
//! validate ([`protocol`], [`extract`]), turn the request into scheduler
//! jobs, and encode what comes back as JSON or SSE; shared state is one
//! `Arc<`[`AppState`]`>`. Nothing HTTP reaches the scheduler: it sees
//! [`crate::scheduler::Job`]s and answers with token ids, which
//! [`generation`] turns into text (stop strings, thinking split) here.
//!
//! | route | handler |
//! |---|---|
//! | `POST /v1/chat/completions` | [`chat`] |
//! | `POST /v1/completions` | [`completions`] |
//! | `GET /v1/models`, `GET /v1/models/{model}` | [`info`] |
//! | `GET /health`, `GET /metrics` | [`info`] |
//! | `POST /api/privacy/preview` | [`privacy`] (also the anonymization opt-in of chat/completions) |
//! | `GET /`, `/assets/*` (the web UI) | [`ui`] |
//! | `/api/*` (the web UI's endpoints) | [`api`] |
//!
//! [`serve`] puts a [`manager::ModelManager`] in front: it owns the served
//! model (load / unload / switch) and forwards requests to that model's
//! [`router`]; with no model loaded they get a 503.
//!
//! The same routes answer without the `/v1` prefix. Errors are OpenAI's
//! JSON shape ([`error`]). A client that disconnects drops its response,
//! which drops the job handles and so cancels the jobs at the next engine
//! step. On SIGINT/SIGTERM the server stops accepting connections, lets
//! running requests finish for a grace period, closes what is left, then
//! stops the engine. See docs/api.md.

pub mod anthropic;
pub mod api;
pub mod auth;
pub mod chat;
pub mod completions;
pub mod config;
pub mod discovery;
pub mod error;
pub mod extract;
pub mod generation;
pub mod info;
pub mod jobs;
pub mod lifecycle;
pub mod manager;
pub mod privacy;
pub mod protocol;
pub mod reasoning;
pub mod state;
pub mod structured;
pub mod tool_parser;
pub mod tools;
pub mod ui;

use std::{
    future::{Future, IntoFuture},
    io::Write,
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use axum::{
    extract::{DefaultBodyLimit, Request, State},
    middleware::{self, Next},
    response::Response,
    routing::{get, post},
    Router,
};
use tower_http::{
    cors::{AllowOrigin, Any, CorsLayer},
    trace::TraceLayer,
};

pub use self::{
    config::{ConfigError, ServerSettings},
    error::ApiError,
    state::AppState,
};
use crate::home;

/// Every route of the API.
pub fn router(state: Arc<AppState>) -> Router {
    let body_limit = state.settings.max_body_bytes;
    let cors = cors_layer(&state.settings.cors_origins);
    let gate = Arc::new(auth::AuthGate::new(&state.settings));
    let api = Router::new()
        .route("/chat/completions", post(chat::chat_completions))
        .route("/completions", post(completions::completions))
        .route("/messages", post(anthropic::messages))
        .route("/messages/count_tokens", post(anthropic::count_tokens))
        .route("/models", get(info::list_models))
        .route("/models/{model}", get(info::get_model));
    Router::new()
        .nest("/v1", api.clone())
        .merge(api)
        .route("/health", get(info::health))
        .route("/metrics", get(info::metrics))
        .route("/api/privacy/preview", post(privacy::preview))
        .route("/", get(ui::index))
        .route("/index.html", get(ui::index))
        .route("/favicon.svg", get(ui::favicon))
        .route("/assets/{*path}", get(ui::asset))
        .merge(api::routes())
        .fallback(info::not_found)
        .method_not_allowed_fallback(info::method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(gate, auth::check))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_responses,
        ))
        .layer(tower::util::option_layer(cors))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let layer = CorsLayer::new().allow_methods(Any).allow_headers(Any);
    if origins.iter().any(|o| o == "*") {
        return Some(layer.allow_origin(Any));
    }
    let values: Vec<_> = origins.iter().filter_map(|o| o.parse().ok()).collect();
    Some(layer.allow_origin(AllowOrigin::list(values)))
}

async fn count_responses(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    state.record_response(response.status().as_u16());
    response
}

/// Why the server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Model(#[from] home::ModelLookupError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot load the model {}: {reason:#}", path.display())]
    Load {
        path: PathBuf,
        reason: anyhow::Error,
    },
    #[error("the HTTP server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Binds, loads the model, serves until `shutdown` resolves, drains (up to
/// the grace period), stops the engine. Prints
/// `hearth serve: listening on http://ADDR` on stdout once requests are
/// served (tests and scripts wait for that line; with port 0 it names the
/// port picked).
pub async fn serve(
    settings: ServerSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    settings.validate()?;
    let addr = settings.socket_addr()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let local = listener.local_addr()?;
    let path = home::resolve_model(settings.model.as_deref())?;

    let grace = settings.shutdown_grace();
    let ui = Arc::new(api::UiState::new());
    let manager = Arc::new(manager::ModelManager::new(settings.clone(), ui));
    let state = manager
        .load(settings.model.as_deref())
        .await
        .map_err(|e| match e {
            manager::LoadError::NotFound(e) => ServeError::Model(e),
            manager::LoadError::Failed { reason, .. } => ServeError::Load {
                path: path.clone(),
                reason,
            },
            manager::LoadError::TooLarge(e) => ServeError::Load {
                path: path.clone(),
                reason: anyhow::Error::new(e),
            },
            manager::LoadError::ShuttingDown => ServeError::Load {
                path: path.clone(),
                reason: anyhow::anyhow!("the server is shutting down"),
            },
        })?;
    let app = manager::app(manager.clone());
    api::start(&manager, local);

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|&stop| stop).await;
    };

    tracing::info!(model = %state.model_id, %local, "serving");
    if let Some(blas) = crate::blas::sgemm_provider() {
        tracing::info!(blas = %blas.display(), "MLX's CPU products run on this BLAS");
    }
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "hearth serve: listening on http://{local} (model {}; OpenAI base URL http://{local}/v1)",
            state.model_id
        );
        let _ = out.flush();
    }
    let advertiser = advertise(&settings, local, &state.model_id);

    let server = axum::serve(listener, app)
        .with_graceful_shutdown(stopped(stop_rx.clone()))
        .into_future();
    let drain_manager = manager.clone();
    let deadline = async move {
        stopped(stop_rx).await;
        drain_manager.begin_shutdown();
        tracing::info!(
            grace_seconds = grace.as_secs_f64(),
            "shutting down: draining"
        );
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        result = server => result?,
        () = deadline => tracing::warn!("grace period over; closing the remaining connections"),
    }
    // The listener is closed here; stop the engine (cancelling anything
    // still running) and free the model.
    if let Some(advertiser) = advertiser {
        advertiser.stop();
    }
    drop(state);
    manager.stop_now().await;
    tracing::info!("stopped");
    Ok(())
}

/// LAN mode (a non-loopback address) with `mdns` on: announces the server
/// with mDNS/DNS-SD. A failure is logged, never fatal.
fn advertise(
    settings: &ServerSettings,
    local: SocketAddr,
    model: &str,
) -> Option<discovery::Advertiser> {
    if settings.is_loopback() || !settings.mdns {
        return None;
    }
    let ad = discovery::Advertisement {
        ip: local.ip(),
        port: local.port(),
        model: model.to_string(),
    };
    match discovery::Advertiser::start(&ad) {
        Ok(advertiser) => Some(advertiser),
        Err(e) => {
            tracing::warn!(error = %e, "not advertised on the LAN");
            None
        }
    }
}

/// Resolves on the first SIGINT or SIGTERM; a second one exits at once.
pub async fn shutdown_signal() {
    wait_for_signal().await;
    tokio::spawn(async {
        wait_for_signal().await;
        eprintln!("hearth serve: second signal, exiting now");
        std::process::exit(130);
    });
}

async fn wait_for_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    () = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

/// `hearth serve` flags; each overrides the same key of `--config`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// Config file (TOML or JSON) whose keys are these flags' names [default: the menu-bar
    /// app's settings file, $HEARTH_CONFIG or <config dir>/hearth/config.toml, if it exists].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to bind [default: 127.0.0.1].
    #[arg(long)]
    pub host: Option<String>,
    /// Port to bind; 0 picks a free one [default: 8000].
    #[arg(long)]
    pub port: Option<u16>,
    /// Model path or name in $HEARTH_HOME/models [default: the default model].
    #[arg(long, env = "HEARTH_MODEL")]
    pub model: Option<String>,
    /// Another name the model answers to (repeatable; `default` always works).
    #[arg(long = "alias")]
    pub aliases: Vec<String>,
    /// Most sequences running at once [default: 8].
    #[arg(long)]
    pub max_running: Option<usize>,
    /// Most requests waiting; beyond it requests get 429 [default: 64].
    #[arg(long)]
    pub max_queue: Option<usize>,
    /// Tokens per engine step, decodes plus prompt chunks [default: by device: CPU 256, Metal 512, CUDA 1024].
    #[arg(long)]
    pub step_token_budget: Option<usize>,
    /// Most prompt tokens of one sequence per forward pass [default: by device: CPU 128, Metal 256, CUDA 512].
    #[arg(long)]
    pub prefill_chunk: Option<usize>,
    /// Prompt tokens a step may read while nothing decodes, so a burst of requests is read in one pass [default: 4x the step budget] (docs/scheduler.md).
    #[arg(long)]
    pub burst_token_budget: Option<usize>,
    /// Milliseconds an idle server waits for more requests of a burst before its first pass; 0 starts at once [default: 2].
    #[arg(long)]
    pub gather_ms: Option<f64>,
    /// Decode synchronously instead of pipelined [default: pipelined on a GPU, synchronous on a CPU] (docs/scheduler.md).
    #[arg(long)]
    pub no_pipeline_decode: bool,
    /// Skip the warm-up batches at load [default: warm up on a GPU, not on a CPU] (docs/scheduler.md).
    #[arg(long)]
    pub no_warmup: bool,
    /// Read each prompt chunk in its own forward pass instead of batching several prompts' chunks into one (docs/scheduler.md).
    #[arg(long)]
    pub no_batch_prefill: bool,
    /// Seconds an idle server keeps freed buffers cached for the next request before returning them to the device; 0 returns them at once [default: 30].
    #[arg(long)]
    pub idle_release_seconds: Option<f64>,
    /// KV cache memory budget in bytes [default: derived from system memory].
    #[arg(long)]
    pub kv_memory_budget: Option<usize>,
    /// Prefix cache size in MiB, inside the KV budget; 0 turns it off [default: a quarter of the KV budget].
    #[arg(long)]
    pub prefix_cache_mb: Option<usize>,
    /// Most MiB of freed buffers MLX keeps cached for reuse; 0 keeps none. Set it when other
    /// processes share the GPU [default: MLX's own limit, about all of a GPU's memory] (docs/scheduler.md).
    #[arg(long)]
    pub mlx_cache_mb: Option<usize>,
    /// MiB of GPU memory to keep free, other processes' use counted: short of it the server returns
    /// its cached buffers, holds back requests that would grow the KV cache, and with nothing
    /// running answers them 503; 0 turns it off. CUDA only [default: 1024] (docs/scheduler.md).
    #[arg(long)]
    pub gpu_reserve_mb: Option<usize>,
    /// How a quantized model's weights are held on MLX's CPU backend: float32 runs on BLAS, many
    /// times faster than MLX's scalar quantized product, at 8x the memory of 4-bit weights;
    /// `auto` expands when that takes at most a quarter of the free memory. Metal and CUDA keep
    /// them quantized [default: auto] (docs/mlx-on-linux.md).
    #[arg(long, value_enum)]
    pub cpu_weights: Option<crate::device::CpuWeights>,
    /// Largest request body in bytes; larger ones get 413 [default: 16 MiB].
    #[arg(long)]
    pub max_body_bytes: Option<usize>,
    /// Most choices (`n`) per request [default: 16].
    #[arg(long)]
    pub max_n: Option<usize>,
    /// Seconds running requests get to finish on SIGINT/SIGTERM [default: 10].
    #[arg(long)]
    pub shutdown_grace_seconds: Option<f64>,
    /// Origin allowed by CORS (repeatable; `*` for any) [default: only the server's own].
    #[arg(long = "cors-origin")]
    pub cors_origins: Vec<String>,
    /// API key clients must send (repeatable; plaintext or `sha256:HEX`); needed to bind a
    /// non-loopback address.
    #[arg(long = "api-key", env = "HEARTH_API_KEY", hide_env_values = true)]
    pub api_keys: Vec<String>,
    /// Most requests in flight per API key; more get 429 [default: no limit].
    #[arg(long)]
    pub key_max_concurrent: Option<usize>,
    /// Most requests per minute per API key; more get 429 [default: no limit].
    #[arg(long)]
    pub key_requests_per_minute: Option<u32>,
    /// Do not advertise the server with mDNS/DNS-SD in LAN mode (non-loopback --host).
    #[arg(long)]
    pub no_mdns: bool,
}

impl ServeArgs {
    /// Defaults, then the config file, then the flags given.
    pub fn into_settings(self) -> Result<ServerSettings, ConfigError> {
        let mut s = match &self.config {
            Some(path) => ServerSettings::from_file(path)?,
            None => ServerSettings::load_default()?,
        };
        if let Some(v) = self.host {
            s.host = v;
        }
        if let Some(v) = self.port {
            s.port = v;
        }
        if let Some(v) = self.model {
            s.model = Some(v);
        }
        if !self.aliases.is_empty() {
            s.aliases = self.aliases;
        }
        if let Some(v) = self.max_running {
            s.max_running = v;
        }
        if let Some(v) = self.max_queue {
            s.max_queue = v;
        }
        if let Some(v) = self.step_token_budget {
            s.step_token_budget = v;
        }
        if let Some(v) = self.prefill_chunk {
            s.prefill_chunk = v;
        }
        if let Some(v) = self.burst_token_budget {
            s.burst_token_budget = v;
        }
        if let Some(v) = self.gather_ms {
            s.gather_ms = v;
        }
        if self.no_pipeline_decode {
            s.pipeline_decode = false;
        }
        if self.no_warmup {
            s.warmup = false;
        }
        if self.no_batch_prefill {
            s.batch_prefill = false;
        }
        if let Some(v) = self.idle_release_seconds {
            s.idle_release_seconds = v;
        }
        if let Some(v) = self.kv_memory_budget {
            s.kv_memory_budget = Some(v);
        }
        if let Some(v) = self.prefix_cache_mb {
            s.prefix_cache_mb = Some(v);
        }
        if let Some(v) = self.mlx_cache_mb {
            s.mlx_cache_mb = Some(v);
        }
        if let Some(v) = self.gpu_reserve_mb {
            s.gpu_reserve_mb = v;
        }
        if let Some(v) = self.cpu_weights {
            s.cpu_weights = v;
        }
        if let Some(v) = self.max_body_bytes {
            s.max_body_bytes = v;
        }
        if let Some(v) = self.max_n {
            s.max_n = v;
        }
        if let Some(v) = self.shutdown_grace_seconds {
            s.shutdown_grace_seconds = v;
        }
        if !self.cors_origins.is_empty() {
            s.cors_origins = self.cors_origins;
        }
        if !self.api_keys.is_empty() {
            s.api_keys = self.api_keys;
        }
        if let Some(v) = self.key_max_concurrent {
            s.key_max_concurrent = v;
        }
        if let Some(v) = self.key_requests_per_minute {
            s.key_requests_per_minute = v;
        }
        if self.no_mdns {
            s.mdns = false;
        }
        s.validate()?;
        Ok(s)
    }
}

/// `hearth serve`: runs the server on its own tokio runtime until SIGINT or
/// SIGTERM.
pub fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    let settings = args.into_settings()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("hearth-http")
        .build()?;
    runtime.block_on(serve(settings, shutdown_signal()))?;
    // Connection tasks still open after the grace period end with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
