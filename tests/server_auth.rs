//! API keys, LAN mode, per-key limits and the origin check, over real HTTP
//! against `hearth serve` subprocesses (see src/server/auth.rs).

mod server_support;

use std::{process::Command, time::Duration};

use futures_util::StreamExt;
use serde_json::{json, Value};
use server_support::*;

async fn get_with(server: &TestServer, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = client().get(server.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body: Value = response.json().await.expect("JSON body");
    if let Some(retry) = retry {
        body["retry_after_header"] = json!(retry);
    }
    (status, body)
}

#[test]
fn lan_bind_without_a_key_refuses_to_start() {
    let output = Command::new(serve_bin())
        .args(["serve", "--host", "0.0.0.0", "--port", "0", "--model"])
        .arg(smollm2())
        .env_remove("HEARTH_API_KEY")
        .output()
        .expect("run hearth serve");
    assert!(!output.status.success(), "it started without a key");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("0.0.0.0") && stderr.contains("--api-key"),
        "the message should say why and what to do: {stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("listening"),
        "it must not listen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_on_a_lan_bind() {
    let server = TestServer::start_on(
        "0.0.0.0",
        &smollm2(),
        &["--api-key", "key-one", "--api-key", "key-two"],
    );

    // Missing and wrong keys: 401 in OpenAI's shape.
    let (status, body) = get_with(&server, "/v1/models", &[]).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("Bearer"));
    let (status, body) = get_with(&server, "/v1/models", &[("authorization", "Bearer nope")]).await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = get_with(
        &server,
        "/v1/models",
        &[("authorization", "Bearer key-one-")],
    )
    .await;
    assert_eq!(status, 401);

    // Both headers, both keys.
    let (status, body) = get_with(
        &server,
        "/v1/models",
        &[("authorization", "Bearer key-one")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = get_with(&server, "/v1/models", &[("x-api-key", "key-two")]).await;
    assert_eq!(status, 200);

    // Generation needs the key too; health does not.
    let response = client()
        .post(server.url("/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 401);
    let response = client()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth("key-two")
        .json(&json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 200);
    let (status, _) = get_with(&server, "/health", &[]).await;
    assert_eq!(status, 200);
    let (status, _) = get_with(&server, "/metrics-nope", &[("x-api-key", "key-one")]).await;
    assert_eq!(status, 404);

    // Anthropic's route answers in Anthropic's error shape.
    let response = client()
        .post(server.url("/v1/messages"))
        .json(&json!({}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 401);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_requests_per_minute() {
    let server = TestServer::start(
        &smollm2(),
        &[
            "--api-key",
            "a",
            "--api-key",
            "b",
            "--key-requests-per-minute",
            "2",
        ],
    );
    for _ in 0..2 {
        let (status, body) = get_with(&server, "/v1/models", &[("x-api-key", "a")]).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = get_with(&server, "/v1/models", &[("x-api-key", "a")]).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    let retry: u64 = body["retry_after_header"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("Retry-After header");
    // One request comes back every 30 s.
    assert!((1..=30).contains(&retry), "Retry-After {retry}");
    // The other key has its own budget.
    let (status, _) = get_with(&server, "/v1/models", &[("x-api-key", "b")]).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_concurrency_holds_while_a_stream_runs() {
    let server = TestServer::start(&smollm2(), &["--api-key", "k", "--key-max-concurrent", "1"]);
    let body = json!({
        "messages": [{"role": "user", "content": "Count to one hundred."}],
        "max_tokens": 48, "ignore_eos": true, "temperature": 0, "stream": true
    });
    let response = client()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth("k")
        .json(&body)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 200);
    let mut stream = response.bytes_stream();
    // The stream has started: the slot is taken.
    let first = stream.next().await.expect("a first chunk").expect("bytes");
    assert!(!first.is_empty());
    let (status, body) = get_with(&server, "/v1/models", &[("x-api-key", "k")]).await;
    assert_eq!(status, 429, "{body}");
    assert!(body["retry_after_header"].is_string(), "{body}");
    // Read it to the end: the slot is free again.
    while let Some(chunk) = stream.next().await {
        chunk.expect("bytes");
    }
    drop(stream);
    let mut ok = false;
    for _ in 0..20 {
        let (status, _) = get_with(&server, "/v1/models", &[("x-api-key", "k")]).await;
        if status == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "the slot was not released after the stream ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_origin_pages_are_refused_unless_allowed() {
    let server = TestServer::start(&smollm2(), &["--cors-origin", "http://ui.example"]);
    let own = format!("http://{}", server.addr);
    let (status, _) = get_with(&server, "/v1/models", &[("origin", &own)]).await;
    assert_eq!(status, 200, "same origin");
    let (status, _) = get_with(&server, "/v1/models", &[("origin", "http://ui.example")]).await;
    assert_eq!(status, 200, "configured origin");
    let (status, body) =
        get_with(&server, "/v1/models", &[("origin", "http://evil.example")]).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "origin_not_allowed");
    // No Origin (curl, SDKs): served.
    let (status, _) = get_with(&server, "/v1/models", &[]).await;
    assert_eq!(status, 200);
}
