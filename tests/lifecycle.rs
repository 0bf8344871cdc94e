//! The in-process server handle (src/server/lifecycle.rs) the menu-bar app
//! drives: start serves at once and loads the real SmolLM2 in the
//! background, a real HTTP client gets an answer, stop drains a running
//! stream, unloads the model (MLX's active memory falls back), frees the
//! port, and the same control starts again. Also the settings file shared
//! with `hearth serve`.

mod common;

use std::{net::TcpListener, time::Duration};

use hearth::server::{
    lifecycle::{ProcessMemory, ServerControl, ServerHandle},
    ServerSettings,
};
use serde_json::{json, Value};

fn settings(port: u16) -> ServerSettings {
    ServerSettings {
        port,
        model: Some(
            common::fixture("SmolLM2-135M-Instruct.Q4_1.gguf")
                .display()
                .to_string(),
        ),
        // Generous: the stream below must end inside it on a loaded CI box.
        shutdown_grace_seconds: 60.0,
        ..ServerSettings::default()
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

async fn chat(client: &reqwest::Client, url: &str) -> Value {
    let response = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({
            "model": "default",
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 12,
            "temperature": 0
        }))
        .send()
        .await
        .expect("chat request");
    assert_eq!(response.status(), 200);
    response.json().await.expect("chat json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn start_serve_stop_frees_model_and_port_then_starts_again() {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let port = free_port();
    let before = ProcessMemory::now().mlx_active_bytes.expect("mlx memory");

    let handle = ServerHandle::start(settings(port))
        .await
        .expect("start binds");
    let url = handle.url();
    assert_eq!(url, format!("http://127.0.0.1:{port}"));
    // Serving before the model is ready: the status route answers at once.
    let status: Value = client
        .get(format!("{url}/api/status"))
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("status json");
    assert!(
        ["loading", "ready"].contains(&status["state"].as_str().unwrap_or("")),
        "{status}"
    );
    handle
        .wait_ready(Duration::from_secs(120))
        .await
        .expect("model loads");
    let ready = handle.status();
    assert_eq!(ready.state, "ready");
    assert_eq!(
        ready.model.as_deref(),
        Some("SmolLM2-135M-Instruct.Q4_1.gguf")
    );
    let loaded = ready.memory.mlx_active_bytes.expect("mlx memory");
    assert!(
        loaded > before + 50_000_000,
        "the model's weights are in MLX memory: {before} -> {loaded}"
    );
    assert!(
        ready.line().starts_with("ready · SmolLM2"),
        "{}",
        ready.line()
    );

    let answer = chat(&client, &url).await;
    let text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("Paris"), "{answer}");

    // A stream running when stop begins is allowed to finish (drained).
    let stream = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({
            "model": "default",
            "messages": [{"role": "user", "content": "Count from one to twenty."}],
            "max_tokens": 16,
            "temperature": 0,
            "stream": true
        }))
        .send()
        .await
        .expect("stream starts");
    assert_eq!(stream.status(), 200);
    let reader = tokio::spawn(async move { stream.text().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = handle.stop().await;
    assert!(report.drained, "{report:?}");
    let body = reader.await.expect("reader").expect("stream body");
    assert!(body.contains("[DONE]"), "{body}");

    // Unloaded: MLX's active memory is back near where it was.
    let after = ProcessMemory::now().mlx_active_bytes.expect("mlx memory");
    assert!(
        after < before + 5_000_000,
        "the model's memory is freed: before {before}, loaded {loaded}, after {after}"
    );
    // The port is free at once, and nothing answers on it.
    let rebind = TcpListener::bind(("127.0.0.1", port)).expect("the port is free after stop");
    drop(rebind);
    assert!(client.get(format!("{url}/health")).send().await.is_err());

    // The control (what the app holds) starts and stops the same way.
    let control = ServerControl::new();
    assert_eq!(control.status().state, "stopped");
    let url = control.start(settings(port)).await.expect("starts again");
    // Starting twice returns the running server.
    assert_eq!(control.start(settings(port)).await, Ok(url.clone()));
    control
        .wait_ready(Duration::from_secs(120))
        .await
        .expect("ready again");
    assert_eq!(control.status().state, "ready");
    let answer = chat(&client, &url).await;
    assert!(answer["choices"][0]["message"]["content"]
        .as_str()
        .is_some_and(|t| t.contains("Paris")));
    assert!(control.stop().await.is_some());
    assert!(control.stop().await.is_none(), "nothing left to stop");
    assert_eq!(control.status().state, "stopped");
    TcpListener::bind(("127.0.0.1", port)).expect("the port is free after the second stop");
}

#[tokio::test]
async fn start_reports_bad_model_and_busy_port() {
    let control = ServerControl::new();
    let missing = ServerSettings {
        model: Some("/nonexistent/model.gguf".into()),
        ..settings(0)
    };
    let err = control.start(missing).await.expect_err("missing model");
    assert!(err.contains("model"), "{err}");
    let status = control.status();
    assert_eq!(status.state, "failed");
    assert_eq!(status.error.as_deref(), Some(err.as_str()));

    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let err = control
        .start(settings(port))
        .await
        .expect_err("port in use");
    assert!(err.contains("cannot listen"), "{err}");
}
