//! What the tray menu and the window's buttons do: one function per action,
//! shared by both so they cannot disagree.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
};

use hearth::server::{
    config::default_config_path,
    lifecycle::{ServerControl, ServerStatus},
    ServerSettings,
};
use tauri::{AppHandle, Emitter, Manager, WebviewUrl, WebviewWindowBuilder};

/// The app's state: the server control and the settings it starts with.
pub struct AppState {
    pub control: ServerControl,
    pub settings: Mutex<ServerSettings>,
    /// Where the settings live (shared with `hearth serve`).
    pub config_path: Option<PathBuf>,
    /// Why the settings file could not be read, shown until it is saved.
    pub settings_error: Mutex<Option<String>>,
    quitting: AtomicBool,
}

impl AppState {
    /// Reads the settings file; a broken file leaves the defaults (and says so).
    pub fn load() -> Self {
        let (settings, error) = match ServerSettings::load_default() {
            Ok(s) => (s, None),
            Err(e) => {
                tracing::warn!("{e}");
                (ServerSettings::default(), Some(e.to_string()))
            }
        };
        Self {
            control: ServerControl::new(),
            settings: Mutex::new(settings),
            config_path: default_config_path(),
            settings_error: Mutex::new(error),
            quitting: AtomicBool::new(false),
        }
    }

    pub fn settings(&self) -> ServerSettings {
        self.settings.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn status(&self) -> ServerStatus {
        self.control.status()
    }

    pub fn quitting(&self) -> bool {
        self.quitting.load(Ordering::Relaxed)
    }
}

/// A view of the control window: the dashboard, the chat, the settings.
pub const VIEWS: [&str; 3] = ["dashboard", "chat", "settings"];

/// Shows (creating it if needed) and focuses the control window, on `view`
/// when given.
pub fn show_window(app: &AppHandle, view: Option<&str>) {
    let window = match app.get_webview_window("main") {
        Some(w) => w,
        None => {
            // The page starts on this view (the event below may come before
            // its listener exists).
            let script = format!(
                "window.__HEARTH_VIEW__ = {:?};",
                view.unwrap_or("dashboard")
            );
            match WebviewWindowBuilder::new(app, "main", WebviewUrl::App("index.html".into()))
                .initialization_script(&script)
                .title("Hearth")
                .inner_size(1000.0, 760.0)
                .build()
            {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!("cannot open the window: {e}");
                    return;
                }
            }
        }
    };
    let _ = window.show();
    let _ = window.unminimize();
    let _ = window.set_focus();
    if let Some(view) = view {
        let _ = app.emit_to("main", "hearth://view", view);
    }
}

/// Starts the server in the background with the saved settings.
pub fn start(app: AppHandle) {
    tauri::async_runtime::spawn(async move {
        let _ = start_now(&app).await;
    });
}

pub async fn start_now(app: &AppHandle) -> Result<String, String> {
    let state = app.state::<AppState>();
    let settings = state.settings();
    let result = state.control.start(settings).await;
    if let Err(e) = &result {
        tracing::warn!("cannot start the server: {e}");
    }
    crate::tray::refresh(app);
    result
}

pub async fn stop_now(app: &AppHandle) {
    let state = app.state::<AppState>();
    if let Some(report) = state.control.stop().await {
        tracing::info!(
            drained = report.drained,
            seconds = report.seconds,
            "server stopped"
        );
    }
    crate::tray::refresh(app);
}

pub fn stop(app: AppHandle) {
    tauri::async_runtime::spawn(async move { stop_now(&app).await });
}

/// Stops the server (drain, unload, free the port), then exits.
pub async fn quit_now(app: &AppHandle) {
    app.state::<AppState>()
        .quitting
        .store(true, Ordering::Relaxed);
    stop_now(app).await;
    app.exit(0);
}

pub fn quit(app: AppHandle) {
    tauri::async_runtime::spawn(async move { quit_now(&app).await });
}

/// The OpenAI base URL of the running server, else of the saved settings.
pub fn endpoint_url(app: &AppHandle) -> String {
    let state = app.state::<AppState>();
    match state.control.url() {
        Some(url) => format!("{url}/v1"),
        None => {
            let s = state.settings();
            let host = if s.is_loopback() || s.host == "0.0.0.0" {
                "127.0.0.1".to_string()
            } else {
                s.host
            };
            format!("http://{host}:{}/v1", s.port)
        }
    }
}

pub fn copy_url(app: &AppHandle) -> Result<String, String> {
    use tauri_plugin_clipboard_manager::ClipboardExt;
    let url = endpoint_url(app);
    app.clipboard()
        .write_text(url.clone())
        .map_err(|e| e.to_string())?;
    Ok(url)
}
