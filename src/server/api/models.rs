//! Models: `GET /api/models` lists `$HEARTH_HOME/models` with size,
//! architecture, quantization and whether each fits in memory;
//! `POST /api/models/load` `{"model": NAME}` switches the served model (202:
//! the load runs in the background, `/api/status` shows it);
//! `POST /api/models/unload` stops serving; `GET /api/settings` is the
//! server's settings.
//!
//! "Fits" means the files, plus a fifth for the KV cache and activations,
//! are no more than the memory available now plus what the served model's
//! weights would free when it is swapped out.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    Json,
};
use serde::{Deserialize, Serialize};

use super::not_found;
use crate::{
    home,
    server::{
        config::ServerSettings,
        error::ApiError,
        extract::parse_json,
        manager::{ManagerStatus, ModelManager},
        state::AppState,
    },
};

#[derive(Debug, Serialize)]
pub struct LocalModel {
    #[serde(flatten)]
    pub entry: home::ModelEntry,
    pub fits_in_memory: bool,
    /// Whether this is the model being served.
    pub served: bool,
}

#[derive(Debug, Serialize)]
pub struct ModelsBody {
    pub models_dir: String,
    /// The served model's id (`null` when none is loaded).
    pub served: Option<String>,
    pub system_available_bytes: u64,
    pub models: Vec<LocalModel>,
}

pub use crate::engine::fit::fits;

pub async fn list(State(manager): State<Arc<ModelManager>>) -> Json<ModelsBody> {
    let dir = home::models_dir();
    let current = manager.current();
    let served_path = current.as_ref().map(|s| {
        let path = &s.scheduler.info().path;
        std::fs::canonicalize(path).unwrap_or_else(|_| path.clone())
    });
    let freed = current
        .as_ref()
        .map_or(0, |s| s.scheduler.info().weight_bytes as u64);
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    let available = system.available_memory();
    let listed_dir = dir.clone();
    let models = tokio::task::spawn_blocking(move || home::list_models(&listed_dir))
        .await
        .unwrap_or_default();
    let models = models
        .into_iter()
        .map(|entry| {
            let served = served_path.as_ref().is_some_and(|served| {
                std::fs::canonicalize(&entry.path).is_ok_and(|p| &p == served)
            });
            LocalModel {
                fits_in_memory: fits(entry.size_bytes, available + freed),
                served,
                entry,
            }
        })
        .collect();
    Json(ModelsBody {
        models_dir: dir.display().to_string(),
        served: current.map(|s| s.model_id.clone()),
        system_available_bytes: available,
        models,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadRequest {
    /// A name in the models folder, or a path.
    pub model: String,
}

/// `POST /api/models/load`: 202 and the load starts; 404 for an unknown
/// model; 507 when it does not fit in memory (the served model keeps
/// serving); 409 while another load runs.
pub async fn load(
    State(manager): State<Arc<ModelManager>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: LoadRequest = parse_json(&body)?;
    let name = request.model.trim().to_string();
    if name.is_empty() {
        return Err(ApiError::invalid_param("model", "`model` is empty."));
    }
    if let Err(e) = home::resolve_model(Some(&name)) {
        let mut error = not_found(&format!("The model `{name}`"));
        error.message = e.to_string();
        error.param = Some("model".into());
        error.code = Some("model_not_found");
        return Err(error);
    }
    let freed = manager
        .current()
        .map_or(0, |s| s.scheduler.info().weight_bytes as u64);
    if let Ok(path) = home::resolve_model(Some(&name)) {
        if let Err(too_large) = crate::engine::fit::check_replacing(&path, freed) {
            let mut e = ApiError::invalid(too_large.to_string());
            e.status = StatusCode::INSUFFICIENT_STORAGE;
            e.code = Some("model_too_large");
            e.param = Some("model".into());
            return Err(e);
        }
    }
    if manager.status().state == "loading" {
        let mut e = ApiError::invalid("Another model is loading; wait for it to finish.");
        e.status = StatusCode::CONFLICT;
        e.code = Some("model_loading");
        return Err(e);
    }
    let task_manager = manager.clone();
    tokio::spawn(async move {
        if let Err(e) = task_manager.load(Some(&name)).await {
            tracing::warn!(error = %e, "model load failed");
        }
    });
    // Let the task mark the phase before answering, so a status poll right
    // after this response already sees `loading`.
    for _ in 0..50 {
        if manager.status().state == "loading" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Ok((StatusCode::ACCEPTED, Json(manager.status())).into_response())
}

/// `POST /api/models/unload`: stops serving (running requests get the
/// shutdown grace period); the OpenAI routes answer 503 until a load.
pub async fn unload(State(manager): State<Arc<ModelManager>>) -> Json<ManagerStatus> {
    manager.unload().await;
    Json(manager.status())
}

pub async fn settings(State(state): State<Arc<AppState>>) -> Json<ServerSettings> {
    Json(state.settings.clone())
}
