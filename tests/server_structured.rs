//! Structured output live: `response_format` json_object / json_schema on
//! `hearth serve` with the real SmolLM2 (a tiny model that rambles when
//! left alone). Every constrained reply must parse and validate against its
//! schema (Python `jsonschema`, tests/clients/validate_json.py), greedy and
//! sampled, streamed and not, batched together with unconstrained requests
//! whose replies must equal the same requests run alone.

mod server_support;

use std::{
    io::Write,
    process::{Command, Stdio},
};

use futures_util::future::join_all;
use serde_json::{json, Value};
use server_support::*;

/// `(label, prompt, schema)`; `None` schema: `json_object`.
fn cases() -> Vec<(&'static str, &'static str, Option<Value>)> {
    vec![
        (
            "required-fields",
            "Describe a person as JSON with a name and an age.",
            Some(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 24},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120}
                },
                "required": ["name", "age"],
                "additionalProperties": false
            })),
        ),
        (
            "enum",
            "What colour is the sky? Answer as JSON.",
            Some(json!({
                "type": "object",
                "properties": {"color": {"enum": ["red", "green", "blue"]}},
                "required": ["color"],
                "additionalProperties": false
            })),
        ),
        (
            "array",
            "List a few small numbers as a JSON array.",
            Some(json!({
                "type": "array",
                "items": {"type": "integer", "minimum": 1, "maximum": 9},
                "minItems": 2,
                "maxItems": 4
            })),
        ),
        (
            "nested",
            "Describe Paris as JSON: the city with its population, and some tags.",
            Some(json!({
                "type": "object",
                "properties": {
                    "city": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "maxLength": 16},
                            "population": {"type": "integer", "minimum": 0, "maximum": 100000000}
                        },
                        "required": ["name", "population"],
                        "additionalProperties": false
                    },
                    "tags": {
                        "type": "array",
                        "items": {"type": "string", "maxLength": 10},
                        "maxItems": 3
                    }
                },
                "required": ["city", "tags"],
                "additionalProperties": false
            })),
        ),
        (
            "number-range",
            "Give today's temperature in Oslo and whether it is freezing, as JSON.",
            Some(json!({
                "type": "object",
                "properties": {
                    "celsius": {"type": "number", "minimum": -50, "maximum": 60},
                    "freezing": {"type": "boolean"}
                },
                "required": ["celsius", "freezing"],
                "additionalProperties": false
            })),
        ),
        (
            "json-object",
            "Reply with the JSON object {\"ok\": true} and nothing else.",
            None,
        ),
    ]
}

fn response_format(schema: &Option<Value>) -> Value {
    match schema {
        Some(schema) => json!({"type": "json_schema",
            "json_schema": {"name": "reply", "schema": schema, "strict": true}}),
        None => json!({"type": "json_object"}),
    }
}

fn chat_body(prompt: &str, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 100,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

/// The reply text and finish reason of one chat request (streamed or not).
async fn chat(server: &TestServer, body: Value) -> (String, String) {
    if body["stream"] == json!(true) {
        let stream = post_sse(server, "/v1/chat/completions", &body).await;
        assert!(stream.done, "stream did not end: {:?}", stream.events);
        let mut text = String::new();
        let mut finish = String::new();
        for event in &stream.events {
            for choice in event["choices"].as_array().into_iter().flatten() {
                text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
                if let Some(reason) = choice["finish_reason"].as_str() {
                    finish = reason.to_string();
                }
            }
        }
        (text, finish)
    } else {
        let (status, reply) = post_json(server, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{reply}");
        let choice = &reply["choices"][0];
        (
            choice["message"]["content"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            choice["finish_reason"].as_str().unwrap_or("").to_string(),
        )
    }
}

/// Runs tests/clients/validate_json.py on `(label, schema, text)` items.
fn validate(items: &[(String, Value, String)]) {
    let list: Vec<Value> = items
        .iter()
        .map(|(label, schema, text)| json!({"label": label, "schema": schema, "text": text}))
        .collect();
    let mut child = Command::new(python())
        .arg(repo_root().join("tests/clients/validate_json.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run validate_json.py");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(Value::Array(list).to_string().as_bytes())
        .expect("write items");
    let output = child.wait_with_output().expect("validate_json.py output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "replies failed their schemas:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_replies_follow_their_schemas() {
    let server = TestServer::start(&smollm2(), &[]);
    let free = [
        chat_body(
            "The capital of France is",
            json!({"temperature": 0, "max_tokens": 24}),
        ),
        chat_body(
            "Write a short story about a robot.",
            json!({"temperature": 0.8, "seed": 7, "max_tokens": 24}),
        ),
    ];
    // Unconstrained requests alone first: batching them with constrained
    // ones must not change a token.
    let mut alone = Vec::new();
    for body in &free {
        alone.push(chat(&server, body.clone()).await);
    }

    let mut items = Vec::new();
    for round in 0..2 {
        let mut bodies = Vec::new();
        for (k, (label, prompt, schema)) in cases().into_iter().enumerate() {
            // Each schema once greedy and once sampled over the two rounds;
            // one reply of each round streamed.
            let greedy = (k + round) % 2 == 0;
            let sampling = if greedy {
                json!({"temperature": 0})
            } else {
                json!({"temperature": 0.9, "top_p": 0.95, "seed": 11 + k})
            };
            let mut body = chat_body(prompt, sampling);
            body["response_format"] = response_format(&schema);
            if k == round {
                body["stream"] = json!(true);
            }
            let mode = if greedy { "greedy" } else { "sampled" };
            bodies.push((format!("{label} ({mode})"), schema, body));
        }
        let constrained = join_all(
            bodies
                .iter()
                .map(|(_, _, body)| chat(&server, body.clone())),
        );
        let unconstrained = join_all(free.iter().map(|body| chat(&server, body.clone())));
        let (constrained, batched_free) = tokio::join!(constrained, unconstrained);
        assert_eq!(
            batched_free, alone,
            "unconstrained replies changed in a batch"
        );
        for ((label, schema, _), (text, finish)) in bodies.into_iter().zip(constrained) {
            assert_eq!(finish, "stop", "{label} did not finish: {text:?}");
            let schema = schema.unwrap_or_else(|| json!({"type": "object"}));
            items.push((label, schema, text));
        }
    }
    validate(&items);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_take_response_format_too() {
    let server = TestServer::start(&smollm2(), &[]);
    let schema = json!({"type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 20}},
        "required": ["answer"], "additionalProperties": false});
    let body = json!({
        "prompt": "Question: what is the capital of France?\nAnswer in JSON:",
        "max_tokens": 60, "temperature": 0,
        "response_format": response_format(&Some(schema.clone())),
    });
    let (status, reply) = post_json(&server, "/v1/completions", &body).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop", "{reply}");
    let text = reply["choices"][0]["text"]
        .as_str()
        .expect("text")
        .to_string();
    validate(&[("completion".into(), schema, text)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_response_formats_are_openai_400s() {
    let server = TestServer::start(&smollm2(), &[]);
    let bad = [
        json!({"type": "yaml"}),
        json!({"type": "json_schema", "json_schema": {"name": "x"}}),
        json!({"type": "json_schema",
               "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}}),
        json!({"type": "json_schema",
               "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/missing"}}}),
        json!({"type": "json_schema",
               "json_schema": {"name": "x", "schema": {"type": "integer",
                   "minimum": 5, "maximum": 1}}}),
    ];
    for format in bad {
        let body = chat_body("Hi", json!({"response_format": format}));
        let (status, reply) = post_json(&server, "/v1/chat/completions", &body).await;
        assert_eq!(status, 400, "{format} -> {reply}");
        assert_eq!(reply["error"]["type"], "invalid_request_error", "{reply}");
        assert_eq!(reply["error"]["param"], "response_format", "{reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{reply}"
        );
    }
    let body = chat_body(
        "Hi",
        json!({"response_format": {"type": "json_object"}, "ignore_eos": true}),
    );
    let (status, reply) = post_json(&server, "/v1/chat/completions", &body).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["param"], "ignore_eos", "{reply}");
    // Still serving.
    let (status, reply) = post_json(
        &server,
        "/v1/chat/completions",
        &chat_body("Hi", json!({"max_tokens": 4})),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
}
