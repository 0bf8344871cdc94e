//! Tool calls live: the official `openai` Python client
//! (tests/clients/tools_python.py) and raw SSE checks against `hearth serve`
//! on the real default model. The parsers themselves are tested on every
//! cut of real template renderings in src/server/tool_parser.rs.

mod server_support;

use std::process::Command;

use serde_json::{json, Value};
use server_support::*;

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}}])
}

#[test]
fn openai_python_client_tool_calls() {
    let server = TestServer::start(&smollm2(), &[]);
    let clients = repo_root().join("tests/clients");
    let output = Command::new(python())
        .arg(clients.join("tools_python.py"))
        .args(["--base-url", &server.url("/v1")])
        .output()
        .expect("run tools_python.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "tools_python.py failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        server.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_tool_call_shape_and_token_count() {
    let server = TestServer::start(&smollm2(), &[]);
    let body = json!({
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": tools(), "tool_choice": "required", "temperature": 0,
        "max_tokens": 100, "stream": true, "stream_options": {"include_usage": true}
    });
    let stream = post_sse(&server, "/v1/chat/completions", &body).await;
    assert!(stream.done);
    let mut calls = Vec::new();
    let mut finish = Vec::new();
    let mut token_chunks = 0;
    for event in &stream.events {
        for choice in event["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            assert!(
                !delta["content"].as_str().unwrap_or("").contains('<'),
                "markup in content: {event}"
            );
            if let Some(list) = delta["tool_calls"].as_array() {
                calls.extend(list.iter().cloned());
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                finish.push(reason.to_string());
            } else if delta.get("role").is_none() {
                token_chunks += 1;
            }
        }
    }
    assert_eq!(finish, ["tool_calls"], "{:?}", stream.events);
    // One call, its arguments streamed in pieces as the model wrote them:
    // the first delta has the id, type and name, the others only a piece.
    assert!(
        calls.len() >= 2,
        "arguments not streamed in pieces: {calls:?}"
    );
    let first = &calls[0];
    assert_eq!(first["index"], 0);
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["name"], "get_weather");
    assert!(first["id"].as_str().unwrap_or("").starts_with("call_"));
    let mut arguments = String::new();
    for piece in &calls {
        assert_eq!(piece["index"], 0, "{piece}");
        if piece != first {
            assert!(piece.get("id").is_none() && piece["function"].get("name").is_none());
        }
        let text = piece["function"]["arguments"].as_str().expect("arguments");
        assert!(!text.contains("tool_call>"), "markup in arguments: {piece}");
        arguments.push_str(text);
    }
    let args: Value = serde_json::from_str(&arguments).expect("arguments are JSON");
    assert!(args.is_object(), "{args}");
    // One chunk per generated token still holds (the call ended the choice
    // like a stop string, so every token had its chunk).
    let usage = &stream.events.last().expect("usage chunk")["usage"];
    assert_eq!(usage["completion_tokens"], token_chunks, "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_choice_errors() {
    let server = TestServer::start(&smollm2(), &[]);
    let ask = json!([{"role": "user", "content": "hi"}]);
    for (extra, param) in [
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tools": tools(), "tool_choice": "sometimes"}),
            "tool_choice",
        ),
        (
            json!({"tools": [{"type": "function", "function": {}}]}),
            "tools[0]",
        ),
    ] {
        let mut body = json!({"messages": ask, "max_tokens": 2});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        let (status, error) = post_json(&server, "/v1/chat/completions", &body).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["error"]["param"], param, "{error}");
    }
}
