//! `GET /api/status`: the Status page's data — the served model, the
//! server's state (the [`ModelManager`]'s), the endpoint URL, running and queued requests, live
//! tok/s (from the memory sampler's last second).

use std::sync::Arc;

use axum::{
    extract::State,
    http::{header, HeaderMap},
    Json,
};
use hearth_models::config::ModelConfig;
use serde::Serialize;

use crate::{
    home,
    server::{
        manager::{ManagerStatus, ModelManager},
        state::AppState,
    },
};

/// Static facts about the served model, computed once.
#[derive(Debug, Clone, Serialize)]
pub struct ModelSummary {
    pub id: String,
    pub path: String,
    pub format: &'static str,
    pub architecture: String,
    pub quantization: String,
    /// Parameter count from the config's shapes (dense transformer layout).
    pub parameters: u64,
    pub context_length: usize,
    pub weight_bytes: usize,
    pub kv_bytes_per_token: usize,
    pub device: String,
}

/// The whole answer of `/api/status`.
#[derive(Debug, Serialize)]
pub struct StatusBody {
    pub hearth_version: &'static str,
    /// `stopped` (no model), `loading`, `ready` (idle), `serving` (requests
    /// running or queued) or `stopping` (draining for shutdown).
    pub state: &'static str,
    /// The served model; `null` while none is loaded.
    pub model: Option<ModelSummary>,
    /// The manager's view: the model loading, seconds so far, the last
    /// load error.
    pub manager: ManagerStatus,
    /// OpenAI base URL as the browser reached this server.
    pub endpoint: String,
    /// LAN mode: base URLs other machines can use (src/server/discovery.rs); empty on loopback.
    pub lan_endpoints: Vec<String>,
    pub running: usize,
    pub queued: usize,
    pub max_running: usize,
    pub max_queue: usize,
    pub requests_total: u64,
    pub prompt_tokens_total: u64,
    pub generated_tokens_total: u64,
    /// Generated tokens per second over the sampler's last interval.
    pub tokens_per_second: f64,
    pub uptime_s: f64,
    /// Prefix cache hits, misses, reused tokens and bytes; `null` while no
    /// model is loaded (docs/prefix-cache.md).
    pub prefix_cache: Option<crate::scheduler::metrics::PrefixCacheStatus>,
}

pub async fn status(
    State(manager): State<Arc<ModelManager>>,
    headers: HeaderMap,
) -> Json<StatusBody> {
    let ui = &manager.ui;
    let settings = manager.settings();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| ui.local_addr().map(|a| a.to_string()))
        .unwrap_or_else(|| format!("{}:{}", settings.host, settings.port));
    let manager_status = manager.status();
    let current = manager.current();
    let scheduler = current.as_ref().map(|s| s.scheduler.status());
    let state = match &current {
        Some(s) if s.is_shutting_down() => "stopping",
        _ => manager_status.state,
    };
    Json(StatusBody {
        hearth_version: env!("CARGO_PKG_VERSION"),
        state,
        model: current.as_deref().map(model_summary),
        manager: manager_status,
        endpoint: format!("http://{host}/v1"),
        lan_endpoints: ui
            .local_addr()
            .map(|local| crate::server::discovery::lan_base_urls(settings, local))
            .unwrap_or_default(),
        running: scheduler.as_ref().map_or(0, |s| s.running),
        queued: scheduler.as_ref().map_or(0, |s| s.queued),
        max_running: settings.max_running,
        max_queue: settings.max_queue,
        requests_total: scheduler.as_ref().map_or(0, |s| s.requests_total),
        prompt_tokens_total: scheduler.as_ref().map_or(0, |s| s.prompt_tokens_total),
        generated_tokens_total: scheduler.as_ref().map_or(0, |s| s.generated_tokens_total),
        tokens_per_second: ui.memory.latest_tokens_per_second(),
        uptime_s: ui.uptime_s(),
        prefix_cache: scheduler.map(|s| s.prefix_cache),
    })
}

/// The served model's facts (cached per model).
pub fn model_summary(state: &AppState) -> ModelSummary {
    let info = state.scheduler.info();
    if let Ok(cache) = state.ui.model_summary.lock() {
        if let Some(summary) = cache.as_ref().filter(|s| s.id == info.id) {
            return summary.clone();
        }
    }
    let entry = home::describe_model(&info.path);
    let quantization = entry
        .as_ref()
        .map(|e| e.quantization.clone())
        .filter(|q| !q.is_empty())
        .unwrap_or_else(
            || match info.config.quantization.as_ref().and_then(|q| q.default) {
                Some(q) => format!("{}-bit (group {})", q.bits, q.group_size),
                None => "none".into(),
            },
        );
    let summary = ModelSummary {
        id: info.id.clone(),
        path: info.path.display().to_string(),
        format: entry.as_ref().map_or("unknown", |e| e.format),
        architecture: info.config.model_type.clone(),
        quantization,
        parameters: parameter_count(&info.config),
        context_length: info.context_length,
        weight_bytes: info.weight_bytes,
        kv_bytes_per_token: info.kv_bytes_per_token,
        device: info.device.label(),
    };
    if let Ok(mut cache) = state.ui.model_summary.lock() {
        *cache = Some(summary.clone());
    }
    summary
}

/// Parameters of a dense decoder from its shapes: embeddings, per layer the
/// attention projections (with biases when the config has them), the gated
/// MLP and two norms, the final norm, and the output head unless tied.
pub fn parameter_count(c: &ModelConfig) -> u64 {
    let [hidden, inter, vocab, heads, kv_heads, head_dim, layers] = [
        c.hidden_size,
        c.intermediate_size,
        c.vocab_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.num_hidden_layers,
    ]
    .map(|v| v as u64);
    let q = heads * head_dim;
    let kv = kv_heads * head_dim;
    let mut attention = hidden * q + 2 * hidden * kv + q * hidden;
    if c.attention_bias {
        attention += q + 2 * kv;
    }
    if c.qk_norm {
        attention += 2 * head_dim;
    }
    let mut mlp = 3 * hidden * inter;
    if c.mlp_bias {
        mlp += 2 * inter + hidden;
    }
    let per_layer = attention + mlp + 2 * hidden;
    let embeddings = vocab * hidden;
    let head = if c.tie_word_embeddings {
        0
    } else {
        vocab * hidden
    };
    embeddings + layers * per_layer + hidden + head
}
