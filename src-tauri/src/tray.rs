//! The tray icon and its menu. A status line (state, model, tok/s, memory)
//! and Start/Stop follow the server's real state: [`refresh`] runs after
//! every action and once a second.

use std::time::Duration;

use tauri::{
    image::Image,
    menu::{Menu, MenuItem, PredefinedMenuItem},
    tray::TrayIconBuilder,
    AppHandle, Manager, Wry,
};

use crate::actions::{self, AppState};

/// The menu items whose text or enabled state changes.
pub struct TrayItems {
    status: MenuItem<Wry>,
    start: MenuItem<Wry>,
    stop: MenuItem<Wry>,
}

fn icon() -> Image<'static> {
    // macOS: a black template the menu bar tints; Linux panels are mostly
    // dark, so the white glyph (tray-light.png is the one for light panels).
    if cfg!(target_os = "macos") {
        tauri::include_image!("icons/tray-template.png")
    } else {
        tauri::include_image!("icons/tray-dark.png")
    }
}

pub fn create(app: &AppHandle) -> tauri::Result<()> {
    let status = MenuItem::with_id(app, "status", "Stopped", false, None::<&str>)?;
    let start = MenuItem::with_id(app, "start", "Start server", true, None::<&str>)?;
    let stop = MenuItem::with_id(app, "stop", "Stop server", false, None::<&str>)?;
    let dashboard = MenuItem::with_id(app, "dashboard", "Open dashboard", true, None::<&str>)?;
    let chat = MenuItem::with_id(app, "chat", "Open chat", true, None::<&str>)?;
    let copy = MenuItem::with_id(app, "copy", "Copy endpoint URL", true, None::<&str>)?;
    let settings = MenuItem::with_id(app, "settings", "Settings…", true, None::<&str>)?;
    let quit = MenuItem::with_id(app, "quit", "Quit Hearth", true, None::<&str>)?;
    let menu = Menu::with_items(
        app,
        &[
            &status,
            &PredefinedMenuItem::separator(app)?,
            &start,
            &stop,
            &PredefinedMenuItem::separator(app)?,
            &dashboard,
            &chat,
            &copy,
            &PredefinedMenuItem::separator(app)?,
            &settings,
            &quit,
        ],
    )?;
    TrayIconBuilder::with_id("hearth")
        .icon(icon())
        .icon_as_template(cfg!(target_os = "macos"))
        .tooltip("Hearth")
        .menu(&menu)
        .show_menu_on_left_click(true)
        .on_menu_event(|app, event| on_menu(app, event.id().as_ref()))
        .build(app)?;
    app.manage(TrayItems {
        status,
        start,
        stop,
    });
    let handle = app.clone();
    std::thread::Builder::new()
        .name("hearth-tray".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            refresh(&handle);
        })?;
    Ok(())
}

fn on_menu(app: &AppHandle, id: &str) {
    match id {
        "start" => actions::start(app.clone()),
        "stop" => actions::stop(app.clone()),
        "quit" => actions::quit(app.clone()),
        "copy" => {
            if let Err(e) = actions::copy_url(app) {
                tracing::warn!("cannot copy the endpoint URL: {e}");
            }
        }
        view if actions::VIEWS.contains(&view) => actions::show_window(app, Some(view)),
        _ => {}
    }
}

/// Brings the status line and Start/Stop in line with the server.
pub fn refresh(app: &AppHandle) {
    let Some(items) = app.try_state::<TrayItems>() else {
        return;
    };
    let status = app.state::<AppState>().status();
    let idle = matches!(status.state, "stopped" | "failed");
    let busy = matches!(status.state, "starting" | "stopping");
    let _ = items.status.set_text(status.line());
    let _ = items.start.set_enabled(idle);
    let _ = items.stop.set_enabled(!idle && !busy);
}
