//! Hearth's menu-bar app: a thin Tauri 2 shell. The server (model loading,
//! HTTP API, web UI) is the core library's, run in this process through
//! [`hearth::server::lifecycle::ServerControl`]; this crate only wires the
//! tray menu, the control window and their commands (docs/app.md).
//!
//! Command line: `--window` opens the control window at launch (menu-bar
//! apps start without one; on Linux, where a tray may be missing, a second
//! launch opens it too); `--start` starts the server at launch (what the
//! start-at-login entry passes); `--quit` tells the running instance to
//! stop the server and quit (a launch without a running instance just exits).

// No console window for the app on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod actions;
mod commands;
mod tray;

use tauri::{Manager, RunEvent};

fn main() {
    // The engine runs in this process: MLX's BLAS and settings before any
    // thread (src/blas.rs may start the app again with OpenBLAS preloaded).
    hearth::blas::prefer_system_blas();
    hearth::device::apply_mlx_env_defaults();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,hearth=info,hearth_app=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().collect();
    let open_window = args.iter().any(|a| a == "--window");
    let start_now = args.iter().any(|a| a == "--start");
    let quit_only = args.iter().any(|a| a == "--quit");

    let app = tauri::Builder::default()
        // First: a second launch hands its arguments to this one and exits.
        // `hearth-app --quit` asks the running one to quit.
        .plugin(tauri_plugin_single_instance::init(|app, argv, _cwd| {
            if argv.iter().any(|a| a == "--quit") {
                actions::quit(app.clone());
            } else {
                actions::show_window(app, None);
            }
        }))
        .plugin(tauri_plugin_autostart::init(
            tauri_plugin_autostart::MacosLauncher::LaunchAgent,
            Some(vec!["--start"]),
        ))
        .plugin(tauri_plugin_clipboard_manager::init())
        .manage(actions::AppState::load())
        .invoke_handler(tauri::generate_handler![
            commands::status,
            commands::start,
            commands::stop,
            commands::quit,
            commands::copy_url,
            commands::get_settings,
            commands::save_settings,
            commands::set_autostart,
        ])
        .setup(move |app| {
            if quit_only {
                // No instance was running to hand `--quit` to.
                app.handle().exit(0);
                return Ok(());
            }
            #[cfg(target_os = "macos")]
            app.set_activation_policy(tauri::ActivationPolicy::Accessory);
            tray::create(app.handle())?;
            if open_window {
                actions::show_window(app.handle(), None);
            }
            if start_now {
                actions::start(app.handle().clone());
            }
            Ok(())
        })
        .build(tauri::generate_context!());
    let app = match app {
        Ok(app) => app,
        Err(e) => {
            eprintln!("hearth-app: {e}");
            std::process::exit(1);
        }
    };
    app.run(|app, event| {
        if let RunEvent::ExitRequested { code, api, .. } = event {
            // Closing the last window keeps the menu-bar app running; only
            // Quit (which stops the server first) exits.
            if code.is_none() && !app.state::<actions::AppState>().quitting() {
                api.prevent_exit();
            }
        }
    });
}
