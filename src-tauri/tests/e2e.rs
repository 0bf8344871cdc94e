//! End to end through the real app window: `tauri-driver` +
//! `WebKitWebDriver` drive the control window of this build's `hearth-app`
//! on a private Xvfb display and D-Bus session bus (the single-instance
//! lock). Start → ready → a real OpenAI request → status line and dashboard
//! → Stop (MLX memory and RSS fall) → Quit; then no process of ours remains
//! and the port binds. Then `kill -9` of a running app leaves nothing that
//! blocks the next start. Screenshots go to target/app-e2e/.
//!
//! Needs what scripts/setup.sh installs (Xvfb, dbus-daemon, WebKitWebDriver,
//! `cargo install tauri-driver`) and the SmolLM2 fixture; fails with that
//! instruction otherwise. Every WebDriver call has a time-out.

use std::{
    future::Future,
    io::{BufRead, BufReader},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::{json, Value};

const APP: &str = env!("CARGO_BIN_EXE_hearth-app");

/// Runs a request on a private runtime (the test itself is synchronous:
/// plain waits between WebDriver calls).
fn block<F: Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

fn need(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "missing {} — run scripts/setup.sh",
        path.display()
    );
    path
}

fn tool(name: &str) -> PathBuf {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|d| d.join("bin").join(name));
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push("/usr/bin".into());
    dirs.iter()
        .map(|d| d.join(name))
        .chain(cargo_bin)
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("missing {name} — run scripts/setup.sh"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A child killed (and reaped) when dropped, so a failing test leaves
/// nothing behind; `signal` sends another signal first (tauri-driver needs
/// SIGTERM to stop its WebKitWebDriver).
struct Guard {
    child: Child,
    signal: &'static str,
}

impl Guard {
    fn new(child: Child, signal: &'static str) -> Self {
        Self { child, signal }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args([&format!("-{}", self.signal), &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Processes running this build's app binary.
fn app_pids() -> Vec<u32> {
    let target = std::fs::canonicalize(APP).expect("app binary");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if std::fs::read_link(entry.path().join("exe")).is_ok_and(|exe| exe == target) {
            pids.push(pid);
        }
    }
    pids
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

fn port_binds(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn health_ok(http: &reqwest::Client, port: u16) -> bool {
    block(
        http.get(format!("http://127.0.0.1:{port}/v1/models"))
            .send(),
    )
    .is_ok_and(|r| r.status().is_success())
}

/// The private desktop: Xvfb and a D-Bus session bus.
struct Desktop {
    display: String,
    dbus: String,
    _xvfb: Guard,
    _bus: Guard,
}

impl Desktop {
    fn start() -> Self {
        let n = (100 + std::process::id() % 400..1000)
            .find(|n| {
                !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
                    && !Path::new(&format!("/tmp/.X{n}-lock")).exists()
            })
            .expect("a free X display");
        let display = format!(":{n}");
        let xvfb = Command::new(tool("Xvfb"))
            .args([&display, "-screen", "0", "1280x900x24", "-nolisten", "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start Xvfb");
        let xvfb = Guard::new(xvfb, "TERM");
        let socket = PathBuf::from(format!("/tmp/.X11-unix/X{n}"));
        wait_until("Xvfb", Duration::from_secs(20), || {
            socket.exists().then_some(())
        });
        let mut bus = Command::new(tool("dbus-daemon"))
            .args(["--session", "--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dbus-daemon");
        let mut line = String::new();
        BufReader::new(bus.stdout.take().expect("dbus stdout"))
            .read_line(&mut line)
            .expect("dbus address");
        Self {
            display,
            dbus: line.trim().to_string(),
            _xvfb: xvfb,
            _bus: Guard::new(bus, "TERM"),
        }
    }

    fn env(&self, cmd: &mut Command, home: &Path) {
        cmd.env("DISPLAY", &self.display)
            .env("DBUS_SESSION_BUS_ADDRESS", &self.dbus)
            .env("HEARTH_CONFIG", home.join("config/hearth/config.toml"))
            .env("HEARTH_HOME", home.join("hearth"))
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("GDK_BACKEND", "x11")
            // The web UI's Intl calls reject WebKit's language under the C
            // locale ("invalid language tag: C").
            .env("LANG", "en_US.UTF-8")
            .env("LC_ALL", "en_US.UTF-8")
            .env("WEBKIT_DISABLE_COMPOSITING_MODE", "1")
            .env_remove("WAYLAND_DISPLAY");
    }
}

/// A W3C WebDriver session over plain HTTP.
struct Session {
    http: reqwest::Client,
    base: String,
}

impl Session {
    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method.clone(), &url);
        if let Some(body) = body {
            req = req.json(&body);
        } else if method == reqwest::Method::POST {
            req = req.json(&json!({}));
        }
        let response = block(req.send()).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status();
        let value: Value = block(response.json()).unwrap_or(Value::Null);
        assert!(status.is_success(), "{method} {path}: {status} {value}");
        value["value"].clone()
    }

    fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body))
    }

    fn get(&self, path: &str) -> Value {
        self.call(reqwest::Method::GET, path, None)
    }

    fn element(&self, css: &str) -> String {
        let v = self.post("/element", json!({"using": "css selector", "value": css}));
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_string()
    }

    fn click(&self, css: &str) {
        let id = self.element(css);
        self.post(&format!("/element/{id}/click"), json!({}));
    }

    fn script(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
    }

    /// The app's own status (the `status` command the window polls).
    fn app_status(&self) -> Value {
        self.post(
            "/execute/async",
            json!({
                "script": "const done = arguments[arguments.length - 1];\
                           window.__TAURI__.core.invoke('status').then(done, (e) => done({error: String(e)}));",
                "args": []
            }),
        )
    }

    fn state(&self) -> String {
        self.script("return document.getElementById('status').dataset.state;")
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn wait_state(&self, want: &[&str], timeout: Duration) -> String {
        wait_until(&format!("state {want:?}"), timeout, || {
            let s = self.state();
            want.contains(&s.as_str()).then_some(s)
        })
    }

    fn screenshot(&self, name: &str) {
        use base64::Engine as _;
        let data = self.get("/screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().expect("screenshot base64"))
            .expect("screenshot decodes");
        let dir = repo_root().join("target/app-e2e");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }
}

#[test]
fn window_start_chat_stop_quit_and_kill9_restart() {
    // reqwest's futures need the runtime's context when they are made.
    let _runtime = runtime().enter();
    let model = need(
        std::env::var_os("HEARTH_FIXTURES")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join(".hearth/fixtures"))
            .join("SmolLM2-135M-Instruct.Q4_1.gguf"),
    );
    let webkit_driver = need(PathBuf::from("/usr/bin/WebKitWebDriver"));
    let tauri_driver = tool("tauri-driver");
    assert!(
        app_pids().is_empty(),
        "another hearth-app of this build is running"
    );

    let home = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    // The settings file the app reads (the same format as `hearth serve --config`).
    let config = home.path().join("config/hearth/config.toml");
    std::fs::create_dir_all(config.parent().expect("dir")).expect("config dir");
    std::fs::write(
        &config,
        format!(
            "port = {port}\nmodel = {:?}\nshutdown-grace-seconds = 5\n",
            model.display().to_string()
        ),
    )
    .expect("write config");

    let desktop = Desktop::start();
    let driver_port = free_port();
    let native_port = free_port();
    let mut cmd = Command::new(&tauri_driver);
    cmd.args([
        "--port",
        &driver_port.to_string(),
        "--native-port",
        &native_port.to_string(),
        "--native-driver",
    ])
    .arg(&webkit_driver)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    desktop.env(&mut cmd, home.path());
    let driver = Guard::new(cmd.spawn().expect("start tauri-driver"), "TERM");
    // Both tauri-driver and the WebKitWebDriver behind it must listen.
    wait_until("tauri-driver", Duration::from_secs(20), || {
        (TcpStream::connect(("127.0.0.1", driver_port)).is_ok()
            && TcpStream::connect(("127.0.0.1", native_port)).is_ok())
        .then_some(())
    });

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let created = block(
        http.post(format!("http://127.0.0.1:{driver_port}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "tauri:options": {"application": APP, "args": ["--window"]}
            }}}))
            .send(),
    )
    .expect("new session");
    let created: Value = block(created.json()).expect("session json");
    let id = created["value"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {created}"))
        .to_string();
    let session = Session {
        http: http.clone(),
        base: format!("http://127.0.0.1:{driver_port}/session/{id}"),
    };
    session.post(
        "/timeouts",
        json!({"script": 30_000, "pageLoad": 30_000, "implicit": 5_000}),
    );
    let pids = app_pids();
    assert_eq!(pids.len(), 1, "one app process: {pids:?}");
    let pid = pids[0];

    // Launched stopped: Start enabled, Stop disabled, the port free.
    session.wait_state(&["stopped"], Duration::from_secs(20));
    assert!(port_binds(port), "nothing listens before Start");
    session.screenshot("1-stopped");
    let idle = session.app_status();
    let rss_idle = rss_bytes(pid);

    session.click("#start");
    let state = session.wait_state(&["ready", "serving"], Duration::from_secs(180));
    assert_eq!(state, "ready");
    let line = session.script("return document.getElementById('status').textContent;");
    let line = line.as_str().unwrap_or_default().to_string();
    assert!(
        line.starts_with("Ready · SmolLM2-135M-Instruct.Q4_1.gguf · ") && line.contains(" tok/s"),
        "status line: {line}"
    );
    assert_eq!(
        session.script("return document.getElementById('start').disabled;"),
        json!(true)
    );

    // The OpenAI endpoint, from here, over real HTTP.
    let answer = block(
        http.post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
            .json(&json!({
                "model": "default",
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
                "max_tokens": 12,
                "temperature": 0
            }))
            .send(),
    )
    .expect("chat request");
    let answer: Value = block(answer.json()).expect("chat json");
    let text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("Paris"), "{answer}");

    // The dashboard: the server's web UI in the window, showing the model
    // and the request just served.
    session.element("#web");
    // The only frame of the page (by index: WebKitWebDriver refuses the
    // element form here).
    session.screenshot("2-ready");
    session.post("/frame", json!({"id": 0}));
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let text = session.script("return document.body ? document.body.innerText : '';");
        let seen = text.as_str().unwrap_or_default().to_string();
        if seen.contains("SmolLM2-135M-Instruct") {
            break seen;
        }
        assert!(Instant::now() < deadline, "the dashboard shows: {seen:?}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(body.contains("Status"), "{body}");
    session.post("/frame/parent", json!({}));
    let loaded = session.app_status();
    assert_eq!(loaded["state"], "ready", "{loaded}");
    assert_eq!(loaded["url"], format!("http://127.0.0.1:{port}"));
    let rss_loaded = rss_bytes(pid);
    session.screenshot("3-dashboard");

    session.click("#open-chat");
    let src = session.script("return document.getElementById('web').getAttribute('src');");
    assert_eq!(src, json!(format!("http://127.0.0.1:{port}/#/chat")));
    session.screenshot("4-chat");

    // Stop: unloads the model, frees its memory and the port.
    session.click("#stop");
    session.wait_state(&["stopped"], Duration::from_secs(60));
    let stopped = session.app_status();
    let mlx = |v: &Value| v["memory"]["mlx_active_bytes"].as_u64().unwrap_or(u64::MAX);
    let (mlx_idle, mlx_loaded, mlx_stopped) = (mlx(&idle), mlx(&loaded), mlx(&stopped));
    assert!(
        mlx_loaded > mlx_idle + 50_000_000 && mlx_stopped < mlx_idle + 5_000_000,
        "MLX active memory: idle {mlx_idle}, loaded {mlx_loaded}, stopped {mlx_stopped}"
    );
    let rss_stopped = rss_bytes(pid);
    eprintln!(
        "app RSS: idle {} MB, loaded {} MB, stopped {} MB; MLX active: loaded {} MB, stopped {} MB",
        rss_idle / 1_000_000,
        rss_loaded / 1_000_000,
        rss_stopped / 1_000_000,
        mlx_loaded / 1_000_000,
        mlx_stopped / 1_000_000
    );
    // MLX's buffers are the model (checked above); RSS falls by less, as
    // the allocator keeps some pages (seen: 337 -> 309 MB).
    assert!(
        rss_stopped < rss_loaded,
        "RSS falls after Stop: loaded {rss_loaded}, stopped {rss_stopped}"
    );
    assert!(port_binds(port), "the port is free after Stop");
    assert!(!health_ok(&http, port));
    assert_eq!(
        session.script("return document.getElementById('start').disabled;"),
        json!(false)
    );
    session.screenshot("5-stopped-again");

    // Start again, then Quit while serving: the app stops the server and exits.
    session.click("#start");
    session.wait_state(&["ready"], Duration::from_secs(180));
    assert!(health_ok(&http, port));
    // The click's own reply may never come: the app exits under it.
    let quit_id = session.element("#quit");
    let _ = block(
        http.post(format!("{}/element/{quit_id}/click", session.base))
            .timeout(Duration::from_secs(10))
            .json(&json!({}))
            .send(),
    );
    wait_until("the app to exit", Duration::from_secs(60), || {
        app_pids().is_empty().then_some(())
    });
    let _ = block(
        http.delete(&session.base)
            .timeout(Duration::from_secs(10))
            .send(),
    );
    drop(driver);
    assert!(app_pids().is_empty(), "no app process remains");
    assert!(port_binds(port), "the port is free after Quit");

    // kill -9 leaves no stale lock: the next launch runs and serves.
    let launch = |args: &[&str]| {
        let mut cmd = Command::new(APP);
        cmd.args(args).stdout(Stdio::null()).stderr(Stdio::null());
        desktop.env(&mut cmd, home.path());
        cmd.spawn().expect("launch the app")
    };
    let first = Guard::new(launch(&["--start"]), "KILL");
    wait_until("the first app to serve", Duration::from_secs(180), || {
        health_ok(&http, port).then_some(())
    });
    // A second launch hands over to the first and exits (single instance).
    let mut second = launch(&[]);
    let status = wait_until("the second launch to exit", Duration::from_secs(30), || {
        second.try_wait().ok().flatten()
    });
    assert!(status.success(), "second launch: {status}");
    assert_eq!(app_pids().len(), 1, "still one app");
    drop(first); // SIGKILL
    wait_until("the killed app to go", Duration::from_secs(20), || {
        app_pids().is_empty().then_some(())
    });
    let again = Guard::new(launch(&["--start"]), "KILL");
    wait_until(
        "a new app to serve after kill -9",
        Duration::from_secs(180),
        || health_ok(&http, port).then_some(()),
    );
    assert_eq!(app_pids().len(), 1, "the new app runs alone");
    // `--quit` asks the running instance to stop and exit cleanly.
    let mut quitter = launch(&["--quit"]);
    wait_until("--quit to hand over", Duration::from_secs(30), || {
        quitter.try_wait().ok().flatten()
    });
    wait_until("the app to quit", Duration::from_secs(60), || {
        app_pids().is_empty().then_some(())
    });
    drop(again);
    assert!(port_binds(port), "the port is free at the end");
}
