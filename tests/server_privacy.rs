//! Anonymization opt-in on a live `hearth serve` with the real default model
//! (SmolLM2), over HTTP (reqwest) and the official `openai` Python client.
//!
//! How the tests know what the model saw, without any debug hook: greedy
//! decoding is deterministic, so a request with `X-Hearth-Anonymize: true`
//! and clear text must behave exactly like a plain request whose text
//! already holds the placeholders: the same `usage.prompt_tokens` (and a
//! different count from the clear text), and the same tokens, which the
//! anonymized response shows restored. A prompt that repeats a placeholder
//! makes the model write it, so restoration is seen in whole responses and
//! in streams (where the placeholder spans several token chunks).

mod server_support;

use std::process::Command;

use futures_util::StreamExt;
use hearth_privacy::{restore, EntityKind, PlaceholderMap};
use serde_json::{json, Value};
use server_support::*;

const EMAIL: &str = "anna.berg@example.org";
const HEADER: (&str, &str) = ("X-Hearth-Anonymize", "true");

/// A prompt where the model continues a list of e-mail lines.
fn list_prompt(value: &str) -> String {
    format!("Contact list:\nEmail: {value}\nEmail: {value}\nEmail: {value}\nEmail:")
}

/// The model's text with `[EMAIL_1]` (and the variants the restorer
/// accepts) replaced by `EMAIL`, by the privacy crate's own restore.
fn restored(text: &str) -> String {
    let mut map = PlaceholderMap::new();
    assert_eq!(map.number_for(EntityKind::Email, EMAIL), 1);
    restore(&map, text)
}

/// POSTs JSON with extra headers: status, response headers, body.
async fn post(
    server: &TestServer,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = client().post(server.url(path)).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let response_headers = response.headers().clone();
    let text = response.text().await.expect("body");
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("response to {path} is not JSON ({e}): {text}"));
    (status, response_headers, value)
}

/// POSTs a streaming request; returns the response headers and the JSON of
/// each `data:` event (checking that `[DONE]` ends it).
async fn post_stream(
    server: &TestServer,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (reqwest::header::HeaderMap, Vec<Value>) {
    let mut request = client().post(server.url(path)).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request");
    assert_eq!(response.status().as_u16(), 200);
    let response_headers = response.headers().clone();
    let mut body = String::new();
    let mut bytes = response.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        body.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
    }
    let mut events = Vec::new();
    let mut done = false;
    for frame in body.split("\n\n").filter(|f| !f.trim().is_empty()) {
        let data = frame.strip_prefix("data: ").expect("data frame");
        assert!(!done, "data after [DONE]");
        if data == "[DONE]" {
            done = true;
        } else {
            events.push(serde_json::from_str(data).expect("event JSON"));
        }
    }
    assert!(done, "stream did not end with [DONE]: {body}");
    (response_headers, events)
}

/// The text deltas of choice `index`, one entry per event that has one.
fn deltas(events: &[Value], index: u64, field: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["choices"].as_array())
        .flatten()
        .filter(|c| c["index"] == index)
        .filter_map(|c| c["delta"][field].as_str().or_else(|| c[field].as_str()))
        .map(str::to_string)
        .collect()
}

fn header(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|v| v.to_str().expect("ASCII header").to_string())
}

fn completion_body(prompt: &str, extra: Value) -> Value {
    let mut body = json!({"prompt": prompt, "max_tokens": 24, "temperature": 0});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymized_requests_mask_the_prompt_and_restore_the_answer() {
    let server = TestServer::start(&smollm2(), &[]);
    let clear = list_prompt(EMAIL);
    let masked = list_prompt("[EMAIL_1]");

    // --- /v1/completions, whole responses ------------------------------------
    let (status, _, plain_masked) = post(
        &server,
        "/v1/completions",
        &[],
        &completion_body(&masked, json!({})),
    )
    .await;
    assert_eq!(status, 200, "{plain_masked}");
    let model_text = plain_masked["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        model_text.contains("[EMAIL_1]"),
        "precondition: the model continues the list with the placeholder: {model_text:?}"
    );
    let (_, _, plain_clear) = post(
        &server,
        "/v1/completions",
        &[],
        &completion_body(&clear, json!({})),
    )
    .await;

    let (status, headers, anonymized) = post(
        &server,
        "/v1/completions",
        &[HEADER],
        &completion_body(&clear, json!({})),
    )
    .await;
    assert_eq!(status, 200, "{anonymized}");
    assert_eq!(
        header(&headers, "x-hearth-anonymized").as_deref(),
        Some("3")
    );
    // The model saw the placeholders: same prompt tokens as the masked text,
    // not the clear text's count.
    let prompt_tokens = &anonymized["usage"]["prompt_tokens"];
    assert_eq!(prompt_tokens, &plain_masked["usage"]["prompt_tokens"]);
    assert_ne!(prompt_tokens, &plain_clear["usage"]["prompt_tokens"]);
    for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(
            anonymized["usage"][key], plain_masked["usage"][key],
            "usage is of what the model saw ({key})"
        );
    }
    // The prompt was token for token the masked one sent before: the prefix
    // cache served all of it but the last token.
    assert_eq!(
        anonymized["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(),
        prompt_tokens.as_u64().map(|n| n - 1),
        "{}",
        anonymized["usage"]
    );
    // ... and wrote the same tokens, which come back restored.
    let text = anonymized["choices"][0]["text"].as_str().unwrap();
    assert_eq!(text, restored(&model_text));
    assert!(text.contains(EMAIL) && !text.contains("EMAIL_"), "{text:?}");
    // A plain request is not touched and has no header.
    let (_, headers, _) = post(
        &server,
        "/v1/completions",
        &[],
        &completion_body(&clear, json!({"max_tokens": 1})),
    )
    .await;
    assert_eq!(header(&headers, "x-hearth-anonymized"), None);

    // The `+private` model alias does the same.
    let (status, headers, aliased) = post(
        &server,
        "/v1/completions",
        &[],
        &completion_body(&clear, json!({"model": "default+private"})),
    )
    .await;
    assert_eq!(status, 200, "{aliased}");
    assert_eq!(
        header(&headers, "x-hearth-anonymized").as_deref(),
        Some("3")
    );
    assert_eq!(
        aliased["choices"][0]["text"],
        anonymized["choices"][0]["text"]
    );

    // n = 2 (greedy: both choices the same) and echo (the client's own prompt).
    let (_, _, two) = post(
        &server,
        "/v1/completions",
        &[HEADER],
        &completion_body(&clear, json!({"n": 2, "echo": true})),
    )
    .await;
    for choice in two["choices"].as_array().unwrap() {
        assert_eq!(choice["text"].as_str().unwrap(), format!("{clear}{text}"));
    }

    // A stop string written in clear text stops at the placeholder.
    let cut = model_text.find("[EMAIL_1]").unwrap();
    let (_, _, stopped) = post(
        &server,
        "/v1/completions",
        &[HEADER],
        &completion_body(&clear, json!({"stop": [EMAIL]})),
    )
    .await;
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        stopped["choices"][0]["text"].as_str().unwrap(),
        restored(&model_text[..cut])
    );

    // --- /v1/completions, streamed: the placeholder spans token chunks --------
    let (_, plain_events) = post_stream(
        &server,
        "/v1/completions",
        &[],
        &completion_body(&masked, json!({"stream": true})),
    )
    .await;
    let plain_chunks = deltas(&plain_events, 0, "text");
    assert!(
        plain_chunks
            .iter()
            .any(|c| c.contains("EMAIL") && !c.contains("[EMAIL_1]")),
        "precondition: the placeholder is cut across chunks: {plain_chunks:?}"
    );
    for body in [
        completion_body(&clear, json!({"stream": true, "n": 2})),
        completion_body(&clear, json!({"stream": true, "model": "default+private"})),
    ] {
        let private = body["model"].is_string();
        let headers_in: &[(&str, &str)] = if private { &[] } else { &[HEADER] };
        let (headers, events) = post_stream(&server, "/v1/completions", headers_in, &body).await;
        assert_eq!(
            header(&headers, "x-hearth-anonymized").as_deref(),
            Some("3")
        );
        for index in 0..body["n"].as_u64().unwrap_or(1) {
            let chunks = deltas(&events, index, "text");
            assert_eq!(chunks.concat(), text, "streamed choice {index}");
            assert!(chunks.iter().all(|c| !c.contains("EMAIL")), "{chunks:?}");
            // Still one chunk per token (held-back text makes empty deltas).
            assert_eq!(chunks.len(), plain_chunks.len());
        }
    }

    // --- /v1/chat/completions -------------------------------------------------
    let chat = |content: &str, extra: Value| {
        let mut body = json!({
            "messages": [
                {"role": "system", "content": format!("The user is {EMAIL}.")},
                {"role": "user", "content": format!("My e-mail is {content}. Repeat my e-mail.")}
            ],
            "max_tokens": 24, "temperature": 0
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let mut plain_chat = chat("[EMAIL_1]", json!({}));
    plain_chat["messages"][0]["content"] = json!("The user is [EMAIL_1].");
    let (_, _, plain) = post(&server, "/v1/chat/completions", &[], &plain_chat).await;
    let (_, _, plain_clear) = post(
        &server,
        "/v1/chat/completions",
        &[],
        &chat(EMAIL, json!({})),
    )
    .await;
    let (status, headers, private) = post(
        &server,
        "/v1/chat/completions",
        &[HEADER],
        &chat(EMAIL, json!({})),
    )
    .await;
    assert_eq!(status, 200, "{private}");
    assert_eq!(
        header(&headers, "x-hearth-anonymized").as_deref(),
        Some("2")
    );
    for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(private["usage"][key], plain["usage"][key], "{key}");
    }
    // Token for token the masked prompt sent before: served from the prefix
    // cache but for its last token.
    assert_eq!(
        private["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(),
        plain["usage"]["prompt_tokens"].as_u64().map(|n| n - 1),
        "{}",
        private["usage"]
    );
    assert_ne!(
        private["usage"]["prompt_tokens"],
        plain_clear["usage"]["prompt_tokens"]
    );
    let model_reply = plain["choices"][0]["message"]["content"].as_str().unwrap();
    let reply = private["choices"][0]["message"]["content"]
        .as_str()
        .unwrap();
    assert_eq!(reply, restored(model_reply));
    eprintln!("chat reply the model wrote: {model_reply:?}; the client got: {reply:?}");
    let (headers, events) = post_stream(
        &server,
        "/v1/chat/completions",
        &[HEADER],
        &chat(EMAIL, json!({"stream": true})),
    )
    .await;
    assert_eq!(
        header(&headers, "x-hearth-anonymized").as_deref(),
        Some("2")
    );
    assert_eq!(deltas(&events, 0, "content").concat(), reply);

    // --- errors -----------------------------------------------------------------
    let (status, _, error) = post(
        &server,
        "/v1/chat/completions",
        &[("X-Hearth-Anonymize", "perhaps")],
        &chat(EMAIL, json!({})),
    )
    .await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "X-Hearth-Anonymize");
    let (status, _, error) = post(
        &server,
        "/v1/completions",
        &[HEADER],
        &json!({"prompt": [1, 2, 3], "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "prompt");
    let (status, _, error) = post(
        &server,
        "/v1/completions",
        &[],
        &json!({"prompt": "x", "model": "nope+private"}),
    )
    .await;
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (404, Some("model_not_found"))
    );

    // --- /v1/models lists the alias -------------------------------------------------
    let (_, models) = get_json(&server, "/v1/models").await;
    let aliases = models["data"][0]["aliases"].as_array().unwrap();
    assert!(aliases.contains(&json!("default+private")), "{models}");
    let (status, _) = get_json(&server, "/v1/models/default+private").await;
    assert_eq!(status, 200);

    // --- the official Python client with extra_headers ---------------------------
    let script = repo_root().join("tests/clients/openai_privacy.py");
    let output = Command::new(python())
        .arg(&script)
        .args(["--base-url", &server.url("/v1"), "--email", EMAIL])
        .output()
        .expect("run openai_privacy.py");
    println!("{}", String::from_utf8_lossy(&output.stdout));
    assert!(
        output.status.success(),
        "openai_privacy.py failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    // --- nothing in clear text reached the log -----------------------------------------
    let log = server.log_text();
    assert!(
        log.contains("request done"),
        "the log has request lines: {log}"
    );
    assert!(
        !log.contains(EMAIL) && !log.contains("anna.berg"),
        "clear text in the log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privacy_preview_gives_byte_offsets() {
    let server = TestServer::start(&smollm2(), &[]);
    let text = "Grüße! Schreib an anna.berg@example.org oder ruf +49 30 901820 an. \
                Mr. John Smith wrote; IBAN DE89 3704 0044 0532 0130 00. anna.berg@example.org";
    let (status, _, preview) =
        post(&server, "/api/privacy/preview", &[], &json!({"text": text})).await;
    assert_eq!(status, 200, "{preview}");
    let entities = preview["entities"].as_array().unwrap();
    let kinds: Vec<&str> = entities
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for kind in ["EMAIL", "PERSON", "IBAN"] {
        assert!(kinds.contains(&kind), "{kind} missing: {preview}");
    }
    // Offsets are bytes into the input; rebuilding the masked text from them
    // gives the `masked` field.
    let mut rebuilt = String::new();
    let mut at = 0;
    for entity in entities {
        let (start, end) = (
            entity["start"].as_u64().unwrap() as usize,
            entity["end"].as_u64().unwrap() as usize,
        );
        assert_eq!(&text[start..end], entity["text"].as_str().unwrap());
        rebuilt.push_str(&text[at..start]);
        rebuilt.push_str(entity["placeholder"].as_str().unwrap());
        at = end;
    }
    rebuilt.push_str(&text[at..]);
    assert_eq!(preview["masked"].as_str().unwrap(), rebuilt);
    assert_eq!(
        preview["masked"]
            .as_str()
            .unwrap()
            .matches("[EMAIL_1]")
            .count(),
        2
    );

    let (status, _, error) = post(&server, "/api/privacy/preview", &[], &json!({"txt": 1})).await;
    assert_eq!(status, 400, "{error}");
    assert!(error["error"]["message"].is_string());
}

/// Anthropic's `/v1/messages` takes the same opt-in: the model sees the
/// masked conversation (same `input_tokens` as a request that already holds
/// the placeholders, not the clear text's) and the answer comes back with
/// the values restored (the masked request's answer, restored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_messages_take_the_opt_in() {
    let server = TestServer::start(&smollm2(), &[]);
    let body = |text: &str| {
        json!({
            "model": "default",
            "max_tokens": 16,
            "temperature": 0,
            "messages": [{"role": "user", "content": list_prompt(text)}],
        })
    };
    let (status, _, plain_masked) = post(&server, "/v1/messages", &[], &body("[EMAIL_1]")).await;
    assert_eq!(status, 200, "{plain_masked}");
    let (_, _, plain_clear) = post(&server, "/v1/messages", &[], &body(EMAIL)).await;
    let (status, headers, anonymized) =
        post(&server, "/v1/messages", &[HEADER], &body(EMAIL)).await;
    assert_eq!(status, 200, "{anonymized}");
    assert_eq!(
        header(&headers, "x-hearth-anonymized").as_deref(),
        Some("3")
    );
    let input = |v: &Value| v["usage"]["input_tokens"].as_u64().unwrap();
    assert_eq!(input(&anonymized), input(&plain_masked));
    assert_ne!(input(&anonymized), input(&plain_clear));
    let text = |v: &Value| v["content"][0]["text"].as_str().unwrap_or("").to_string();
    assert_eq!(text(&anonymized), restored(&text(&plain_masked)));

    // The model alias works the same way.
    let mut aliased = body(EMAIL);
    aliased["model"] = json!("default+private");
    let (status, headers, via_alias) = post(&server, "/v1/messages", &[], &aliased).await;
    assert_eq!(status, 200, "{via_alias}");
    assert_eq!(
        header(&headers, "x-hearth-anonymized").as_deref(),
        Some("3")
    );
    assert_eq!(input(&via_alias), input(&plain_masked));
}
