//! Live-server helpers shared by tests/server_*.rs: start `hearth serve` as a
//! subprocess on a free port, talk to it with reqwest, read SSE streams,
//! stop it with a signal.
//!
//! The server is started with `--port 0` and prints the address it bound on
//! stdout (`hearth serve: listening on http://ADDR ...`), so tests never race
//! for ports. A [`TestServer`] is killed when dropped, so a failing test
//! leaves no process behind.

#![allow(dead_code)]

pub mod netns;

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use futures_util::StreamExt;
use serde_json::Value;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn hearth_bin() -> &'static str {
    env!("CARGO_BIN_EXE_hearth")
}

/// The binary whose `serve` subcommand is tested: this build's `hearth`,
/// or `$HEARTH_SERVE_BIN` to test another build.
pub fn serve_bin() -> PathBuf {
    std::env::var_os("HEARTH_SERVE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(hearth_bin()))
}

/// The real default model (SmolLM2-135M-Instruct, answers "Paris").
pub fn smollm2() -> PathBuf {
    let dir = std::env::var_os("HEARTH_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".hearth/fixtures"));
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.exists(),
        "missing fixture {} — run scripts/setup.sh",
        path.display()
    );
    path
}

/// A tiny random-weight Qwen3 (Qwen3 tokenizer and chat template, context
/// 4096) written into `dir`.
pub fn dummy_qwen3(dir: &Path) -> PathBuf {
    let tokenizer = smollm2()
        .parent()
        .map(|d| d.join("qwen3-tokenizer/tokenizer.json"))
        .expect("fixtures dir");
    assert!(
        tokenizer.exists(),
        "missing fixture {} — run scripts/setup.sh",
        tokenizer.display()
    );
    let out = dir.join("qwen3-tiny");
    let status = Command::new(hearth_bin())
        .args(["dev", "dummy-model", "--arch", "qwen3", "--shape", "tiny"])
        .arg("--tokenizer")
        .arg(&tokenizer)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run hearth dev dummy-model");
    assert!(status.success(), "hearth dev dummy-model failed");
    out
}

/// A running `hearth serve`.
pub struct TestServer {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub addr: std::net::SocketAddr,
    pub log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts `hearth serve --port 0 --model MODEL EXTRA...` and waits until
    /// it serves (model loaded).
    pub fn start(model: &Path, extra: &[&str]) -> TestServer {
        Self::start_with_env(model, extra, &[])
    }

    /// [`TestServer::start`] with extra environment variables.
    pub fn start_with_env(model: &Path, extra: &[&str], env: &[(&str, &Path)]) -> TestServer {
        Self::start_on_with_env("127.0.0.1", model, extra, env)
    }

    /// Like [`TestServer::start`], bound to `host` (requests still go to
    /// 127.0.0.1 when `host` is a wildcard address).
    pub fn start_on(host: &str, model: &Path, extra: &[&str]) -> TestServer {
        Self::start_on_with_env(host, model, extra, &[])
    }

    /// Like [`TestServer::start_on`], inside the network namespace `ns`
    /// (bound to its address: a LAN server seen from this side).
    pub fn start_in_netns(ns: &netns::NetNs, model: &Path, extra: &[&str]) -> TestServer {
        let host = ns.inside_ip.to_string();
        Self::start_wrapped(&ns.exec_prefix(), &host, model, extra, &[])
    }

    fn start_on_with_env(
        host: &str,
        model: &Path,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> TestServer {
        Self::start_wrapped(&[], host, model, extra, env)
    }

    /// Starts the server through `prefix` (a program that runs its
    /// arguments, e.g. `ip netns exec NS`; empty = directly).
    fn start_wrapped(
        prefix: &[String],
        host: &str,
        model: &Path,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> TestServer {
        let log_dir = tempfile::tempdir().expect("tempdir");
        let log = log_dir.path().join("server.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut command = match prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(serve_bin());
                c
            }
            None => Command::new(serve_bin()),
        };
        let mut child = command
            .args(["serve", "--host", host, "--port", "0", "--model"])
            .arg(model)
            .args(extra)
            .envs(env.iter().copied())
            .env("RUST_LOG", "hearth=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("spawn hearth serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(180)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "hearth serve did not start; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        };
        let mut addr: std::net::SocketAddr = addr.parse().expect("listen address");
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        TestServer {
            child: Some(child),
            base: format!("http://{addr}"),
            addr,
            log,
            _log_dir: log_dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (e.g. "TERM", "INT") to the server.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("http client")
}

/// POSTs `body` as JSON; returns the status and the parsed body.
pub async fn post_json(server: &TestServer, path: &str, body: &Value) -> (u16, Value) {
    let (status, _, value) = post_json_with_headers(server, path, body).await;
    (status, value)
}

/// POSTs `body` as JSON; returns status, headers and the parsed body.
pub async fn post_json_with_headers(
    server: &TestServer,
    path: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = client()
        .post(server.url(path))
        .json(body)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("response to {path} is not JSON ({e}): {text}"));
    (status, headers, value)
}

pub async fn get_json(server: &TestServer, path: &str) -> (u16, Value) {
    let response = client()
        .get(server.url(path))
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let value = response.json().await.expect("JSON body");
    (status, value)
}

/// The body of `GET path` as text (e.g. `/metrics`).
pub async fn get_text(server: &TestServer, path: &str) -> String {
    client()
        .get(server.url(path))
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("text body")
}

/// The value of the sample `name` (with its labels, if any) in Prometheus
/// text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
}

/// A whole SSE response: the JSON of each `data:` event, and whether
/// `data: [DONE]` ended it.
#[derive(Debug, Default)]
pub struct SseStream {
    pub events: Vec<Value>,
    pub done: bool,
    pub content_type: String,
}

/// POSTs a streaming request and reads the events to the end.
pub async fn post_sse(server: &TestServer, path: &str, body: &Value) -> SseStream {
    let response = client()
        .post(server.url(path))
        .json(body)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 200, "stream status");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut stream = SseStream {
        content_type,
        ..SseStream::default()
    };
    let mut buffer = String::new();
    let mut bytes = response.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        buffer.push_str(&String::from_utf8_lossy(&chunk.expect("stream chunk")));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            parse_frame(&frame, &mut stream);
        }
    }
    assert!(
        buffer.trim().is_empty(),
        "unterminated SSE frame: {buffer:?}"
    );
    stream
}

fn parse_frame(frame: &str, stream: &mut SseStream) {
    for line in frame.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            assert!(
                line.is_empty() || line.starts_with(':'),
                "unexpected SSE line {line:?}"
            );
            continue;
        };
        assert!(!stream.done, "data after [DONE]: {data}");
        if data == "[DONE]" {
            stream.done = true;
        } else {
            stream
                .events
                .push(serde_json::from_str(data).expect("event JSON"));
        }
    }
}

/// Polls `/health` until `running` and `queued` are both zero.
pub async fn wait_idle(server: &TestServer, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let (_, health) = get_json(server, "/health").await;
        if health["running"] == 0 && health["queued"] == 0 {
            return health;
        }
        assert!(
            Instant::now() < deadline,
            "server still busy after {timeout:?}: {health}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The venv's Python (with the `openai` package), from scripts/setup.sh.
pub fn python() -> PathBuf {
    let py = std::env::var_os("HEARTH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/python"));
    assert!(
        py.exists(),
        "missing {} — run scripts/setup.sh",
        py.display()
    );
    py
}
