//! The small endpoints: `GET /v1/models`, `GET /v1/models/{model}`,
//! `GET /health`, `GET /metrics`, and the OpenAI-shaped 404/405 fallbacks.

use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::{header, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
    Json,
};
use serde_json::json;

use super::{
    error::ApiError,
    privacy,
    protocol::{ModelCard, ModelList},
    state::AppState,
};

fn model_card(state: &AppState) -> ModelCard {
    ModelCard {
        id: state.model_id.clone(),
        object: "model",
        created: state.created,
        owned_by: "hearth",
        context_length: state.scheduler.info().context_length,
        aliases: state
            .aliases
            .iter()
            .cloned()
            .chain(privacy::private_aliases(&state.model_id, &state.aliases))
            .collect(),
        device: state.scheduler.info().device.label(),
    }
}

pub async fn list_models(State(state): State<Arc<AppState>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![model_card(&state)],
    })
}

pub async fn get_model(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    let (name, _) = privacy::split_model(Some(&model));
    if name.is_some_and(|name| state.is_served_model(name)) {
        Ok(Json(model_card(&state)))
    } else {
        Err(ApiError::model_not_found(&model, &state.model_id))
    }
}

/// 200 with the scheduler's status while serving; 503 while draining.
pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    let status = state.scheduler.status();
    let (code, body) = health_body(
        &status,
        state.is_shutting_down(),
        &state.model_id,
        &state.scheduler.info().device.label(),
    );
    (code, Json(body)).into_response()
}

/// `/health`'s status and body: 503 while draining or once the device is
/// unusable (a lost CUDA context: a supervisor should restart the server),
/// else 200.
fn health_body(
    status: &crate::scheduler::SchedulerStatus,
    draining: bool,
    model: &str,
    device: &str,
) -> (StatusCode, serde_json::Value) {
    let state = if draining {
        "shutting_down"
    } else if status.device_lost.is_some() {
        "device_lost"
    } else {
        "ok"
    };
    let mut body = json!({
        "status": state,
        "model": model,
        "device": device,
        "queued": status.queued,
        "running": status.running,
        "kv_bytes_used": status.kv_bytes_used,
        "kv_bytes_budget": status.kv_bytes_budget,
    });
    if let Some(error) = &status.device_lost {
        body["error"] = json!(format!(
            "the device is unusable after an engine error ({error}): restart the server"
        ));
    }
    let code = if state == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, body)
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let text = state.render_metrics();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::route_not_found(method.as_str(), uri.path())
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::Metrics;

    #[test]
    fn health_is_503_once_the_device_is_lost() {
        let metrics = Metrics::default();
        let (code, body) = health_body(&metrics.status(100), false, "m", "gpu (cuda)");
        assert_eq!(code, StatusCode::OK);
        assert_eq!(body["status"], "ok");
        assert!(body.get("error").is_none());
        assert_eq!(body["kv_bytes_budget"], 100);
        let (code, body) = health_body(&metrics.status(100), true, "m", "gpu (cuda)");
        assert_eq!(
            (code, &body["status"]),
            (StatusCode::SERVICE_UNAVAILABLE, &json!("shutting_down"))
        );
        metrics.record_device_lost("unspecified launch failure");
        let (code, body) = health_body(&metrics.status(100), false, "m", "gpu (cuda)");
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["status"], "device_lost");
        let error = body["error"].as_str().expect("an error");
        assert!(error.contains("unspecified launch failure") && error.contains("restart"));
    }
}
