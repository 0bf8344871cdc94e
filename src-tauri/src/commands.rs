//! The control window's commands (`window.__TAURI__.core.invoke`): the same
//! actions as the tray menu ([`crate::actions`]), plus the settings form.

use hearth::server::{lifecycle::ServerStatus, ServerSettings};
use serde::{Deserialize, Serialize};
use tauri::{AppHandle, State};
use tauri_plugin_autostart::ManagerExt;

use crate::actions::{self, AppState};

#[tauri::command]
pub fn status(state: State<'_, AppState>) -> ServerStatus {
    state.status()
}

#[tauri::command]
pub async fn start(app: AppHandle) -> Result<String, String> {
    actions::start_now(&app).await
}

#[tauri::command]
pub async fn stop(app: AppHandle) {
    actions::stop_now(&app).await
}

#[tauri::command]
pub async fn quit(app: AppHandle) {
    actions::quit_now(&app).await
}

#[tauri::command]
pub fn copy_url(app: AppHandle) -> Result<String, String> {
    actions::copy_url(&app)
}

/// The part of the settings the form edits (the rest of the file is kept).
#[derive(Debug, Serialize, Deserialize)]
pub struct SettingsForm {
    /// Model name in the models folder, or a path; empty = the default model.
    pub model: String,
    pub port: u16,
    /// Listen on every interface (needs an API key) instead of loopback.
    pub lan: bool,
    /// Empty = keep the keys already set (the form never shows them).
    pub api_key: String,
    pub has_api_key: bool,
    pub max_running: usize,
    pub max_queue: usize,
    pub autostart: bool,
    /// Where the file lives, and why it could not be read (read-only).
    pub path: Option<String>,
    pub error: Option<String>,
}

#[tauri::command]
pub fn get_settings(app: AppHandle, state: State<'_, AppState>) -> SettingsForm {
    let s = state.settings();
    SettingsForm {
        model: s.model.clone().unwrap_or_default(),
        port: s.port,
        lan: !s.is_loopback(),
        api_key: String::new(),
        has_api_key: !s.api_keys.is_empty(),
        max_running: s.max_running,
        max_queue: s.max_queue,
        autostart: app.autolaunch().is_enabled().unwrap_or(false),
        path: state.config_path.as_ref().map(|p| p.display().to_string()),
        error: state.settings_error.lock().ok().and_then(|e| e.clone()),
    }
}

/// Validates and writes the settings file; they apply at the next start.
#[tauri::command]
pub fn save_settings(state: State<'_, AppState>, form: SettingsForm) -> Result<String, String> {
    let mut s: ServerSettings = state.settings();
    let model = form.model.trim();
    s.model = (!model.is_empty()).then(|| model.to_string());
    s.port = form.port;
    s.host = if form.lan { "0.0.0.0" } else { "127.0.0.1" }.into();
    let key = form.api_key.trim();
    if !key.is_empty() {
        s.api_keys = vec![key.to_string()];
    }
    s.max_running = form.max_running;
    s.max_queue = form.max_queue;
    s.validate().map_err(|e| e.to_string())?;
    let path = state
        .config_path
        .clone()
        .ok_or("this platform has no config folder; set HEARTH_CONFIG")?;
    s.save(&path).map_err(|e| e.to_string())?;
    if let Ok(mut current) = state.settings.lock() {
        *current = s;
    }
    if let Ok(mut e) = state.settings_error.lock() {
        *e = None;
    }
    Ok(format!("Saved to {}", path.display()))
}

#[tauri::command]
pub fn set_autostart(app: AppHandle, enabled: bool) -> Result<bool, String> {
    let launcher = app.autolaunch();
    let result = if enabled {
        launcher.enable()
    } else {
        launcher.disable()
    };
    result.map_err(|e| e.to_string())?;
    launcher.is_enabled().map_err(|e| e.to_string())
}
