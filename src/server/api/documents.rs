//! `POST /api/extract?filename=NAME` (body: the file's bytes): the text of a
//! document attached in chat ([`crate::documents`]), its size in tokens
//! under the served model's tokenizer, and whether it fits the context.

use std::{collections::HashMap, sync::Arc};

use axum::{
    body::Bytes,
    extract::{Query, State},
    Json,
};
use serde::Serialize;

use crate::{
    documents::{self, DocumentError, DocumentKind},
    server::{error::ApiError, state::AppState},
};

#[derive(Debug, Serialize)]
pub struct ExtractBody {
    pub name: String,
    pub kind: DocumentKind,
    pub text: String,
    pub chars: usize,
    /// Tokens of `text` under the served model's tokenizer.
    pub tokens: usize,
    pub context_length: usize,
    /// Whether `text` alone fits the model's context.
    pub fits: bool,
}

pub async fn extract(
    State(state): State<Arc<AppState>>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Json<ExtractBody>, ApiError> {
    let name = query
        .get("filename")
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "document".into());
    let file_name = name.clone();
    let tokenizer = state.scheduler.tokenizer().clone();
    let (extracted, tokens) = tokio::task::spawn_blocking(move || {
        let extracted = documents::extract(&file_name, &body)?;
        let tokens = tokenizer
            .encode(&extracted.text, false)
            .map(|ids| ids.len())
            .unwrap_or(0);
        Ok::<_, DocumentError>((extracted, tokens))
    })
    .await
    .map_err(|e| ApiError::internal(format!("The extraction task failed: {e}")))?
    .map_err(|e| {
        ApiError::invalid(format!("{name}: {e}."))
            .with_param("file")
            .with_code("unsupported_document")
    })?;
    let context_length = state.scheduler.info().context_length;
    Ok(Json(ExtractBody {
        name,
        kind: extracted.kind,
        chars: extracted.text.chars().count(),
        text: extracted.text,
        tokens,
        context_length,
        fits: tokens <= context_length,
    }))
}
