//! Serves the embedded web UI ([`crate::webui`]): `GET /` is the app's
//! `index.html`, `GET /assets/...` and the other top-level files are the
//! built files, `/favicon.svg` the icon. Hashed files under `assets/` are cached for a year
//! (`immutable`); the rest revalidate (`no-cache`) so a new binary's UI is
//! picked up at once. Without `ui/dist` at build time `/` explains how to
//! build the UI.

use axum::{
    extract::Path,
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};

use super::error::ApiError;
use crate::webui;

/// `GET /` (and `/index.html`).
pub async fn index() -> Response {
    match webui::asset("index.html") {
        Some(asset) => asset_response(asset),
        None => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            webui::MISSING_UI_PAGE,
        )
            .into_response(),
    }
}

/// `GET /assets/{*path}`.
pub async fn asset(Path(path): Path<String>) -> Response {
    let full = format!("assets/{path}");
    match webui::asset(&full) {
        Some(asset) => asset_response(asset),
        None => ApiError::route_not_found("GET", &format!("/{full}")).into_response(),
    }
}

/// `GET /favicon.svg`.
pub async fn favicon() -> Response {
    match webui::asset("favicon.svg") {
        Some(asset) => asset_response(asset),
        None => ApiError::route_not_found("GET", "/favicon.svg").into_response(),
    }
}

fn asset_response(asset: webui::Asset) -> Response {
    let cache = if asset.is_immutable() {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let mut response = asset.bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type()),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
