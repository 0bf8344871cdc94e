//! Live tests of `hearth serve` over HTTP (reqwest): the OpenAI wire format,
//! exact usage, errors, admission (429), cancellation on disconnect and
//! graceful shutdown. Each test starts its own server subprocess on a free
//! port (see tests/server_support).

mod server_support;

use std::time::Duration;

use serde_json::{json, Value};
use server_support::*;

/// Chunks of one choice that carry a generated token: everything but the
/// first (role) chunk and the finish chunk.
fn token_chunks(events: &[Value], index: u64) -> Vec<&Value> {
    events
        .iter()
        .filter_map(|e| {
            e["choices"]
                .as_array()?
                .iter()
                .find(|c| c["index"] == index)
        })
        .filter(|c| c["finish_reason"].is_null() && c["delta"].get("role").is_none())
        .collect()
}

fn stream_text(events: &[Value], index: u64, field: &str) -> String {
    events
        .iter()
        .filter_map(|e| e["choices"].as_array())
        .flatten()
        .filter(|c| c["index"] == index)
        .filter_map(|c| c["delta"][field].as_str().or_else(|| c[field].as_str()))
        .collect()
}

fn finish_reason(events: &[Value], index: u64) -> String {
    let reasons: Vec<&str> = events
        .iter()
        .filter_map(|e| e["choices"].as_array())
        .flatten()
        .filter(|c| c["index"] == index)
        .filter_map(|c| c["finish_reason"].as_str())
        .collect();
    assert_eq!(reasons.len(), 1, "one finish chunk per choice: {reasons:?}");
    reasons[0].to_string()
}

fn assert_openai_error(body: &Value, kind: &str) {
    let error = &body["error"];
    assert!(error["message"].is_string(), "error message: {body}");
    assert_eq!(error["type"], kind, "{body}");
    assert!(
        error.get("param").is_some() && error.get("code").is_some(),
        "{body}"
    );
}

fn chat(content: &str) -> Value {
    json!({"model": "default", "messages": [{"role": "user", "content": content}]})
}

fn with(mut body: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_model_chat_completions_and_errors() {
    let model = smollm2();
    let server = TestServer::start(&model, &[]);
    let model_id = "SmolLM2-135M-Instruct.Q4_1.gguf";

    // Models.
    let (status, models) = get_json(&server, "/v1/models").await;
    assert_eq!(status, 200);
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], model_id);
    assert_eq!(models["data"][0]["context_length"], 8192);
    // The device MLX runs on: the CPU backend on our test machines.
    assert_eq!(models["data"][0]["device"], "cpu (cpu)", "{models}");
    assert_eq!(get_json(&server, "/v1/models/default").await.0, 200);
    let (status, body) = get_json(&server, "/v1/models/gpt-4").await;
    assert_eq!(status, 404);
    assert_openai_error(&body, "invalid_request_error");
    let (status, health) = get_json(&server, "/health").await;
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    assert_eq!(health["device"], "cpu (cpu)", "{health}");

    // Non-streamed chat: the real model answers.
    let question = chat("What is the capital of France?");
    let greedy = with(
        question.clone(),
        json!({"temperature": 0, "max_tokens": 40}),
    );
    let (status, whole) = post_json(&server, "/v1/chat/completions", &greedy).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["model"], model_id);
    assert!(whole["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("chatcmpl-")));
    let choice = &whole["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let answer = choice["message"]["content"].as_str().expect("content");
    assert!(answer.contains("Paris"), "{answer}");
    assert_eq!(choice["finish_reason"], "stop");
    assert!(choice["message"].get("reasoning_content").is_none());
    let usage = &whole["usage"];
    let completion_tokens = usage["completion_tokens"].as_u64().expect("usage");
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().expect("prompt") + completion_tokens)
    );

    // The same request streamed: same text, exact chunk count, usage chunk.
    let streamed = post_sse(
        &server,
        "/v1/chat/completions",
        &with(
            greedy.clone(),
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        ),
    )
    .await;
    assert!(streamed.done, "stream ends with [DONE]");
    assert!(streamed.content_type.starts_with("text/event-stream"));
    let first = &streamed.events[0];
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(stream_text(&streamed.events, 0, "content"), answer);
    assert_eq!(finish_reason(&streamed.events, 0), "stop");
    let last = streamed.events.last().expect("usage chunk");
    assert_eq!(last["choices"], json!([]));
    // Same counts; the repeat's prompt is served from the prefix cache (all
    // but its last token, which is always computed).
    for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(last["usage"][key], usage[key], "{key}");
    }
    let prompt_tokens = usage["prompt_tokens"].as_u64().unwrap_or(0);
    assert_eq!(
        last["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(),
        Some(prompt_tokens - 1),
        "{}",
        last["usage"]
    );
    for event in &streamed.events[..streamed.events.len() - 1] {
        assert!(event["usage"].is_null(), "usage is null before the end");
    }
    // Finished by end-of-sequence: one chunk per token, the EOS token's
    // place being the finish chunk.
    assert_eq!(
        token_chunks(&streamed.events, 0).len() as u64,
        completion_tokens - 1
    );

    // Without include_usage there is no usage field at all.
    let plain = post_sse(
        &server,
        "/v1/chat/completions",
        &with(greedy.clone(), json!({"stream": true, "max_tokens": 3})),
    )
    .await;
    assert!(plain.events.iter().all(|e| e.get("usage").is_none()));
    assert_eq!(finish_reason(&plain.events, 0), "length");
    assert_eq!(token_chunks(&plain.events, 0).len(), 3);

    // Stop strings end the text before the stop and finish with "stop".
    let (_, stopped) = post_json(
        &server,
        "/v1/chat/completions",
        &with(greedy.clone(), json!({"stop": "Paris"})),
    )
    .await;
    let text = stopped["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    assert!(
        !text.contains("Paris") && answer.starts_with(text),
        "{text}"
    );
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    assert!(stopped["usage"]["completion_tokens"].as_u64() < Some(completion_tokens));

    // Completions, with stop and max_tokens.
    let prompt = json!({"model": model_id, "prompt": "The capital of France is", "temperature": 0});
    let (status, completion) = post_json(
        &server,
        "/v1/completions",
        &with(prompt.clone(), json!({"max_tokens": 6})),
    )
    .await;
    assert_eq!(status, 200, "{completion}");
    assert_eq!(completion["object"], "text_completion");
    assert!(completion["choices"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("Paris")));
    assert_eq!(completion["usage"]["completion_tokens"], 6);
    assert_eq!(completion["choices"][0]["finish_reason"], "length");
    let (_, stopped) = post_json(
        &server,
        "/v1/completions",
        &with(prompt.clone(), json!({"max_tokens": 20, "stop": ["."]})),
    )
    .await;
    assert_eq!(stopped["choices"][0]["text"], " Paris");
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    let streamed = post_sse(
        &server,
        "/v1/completions",
        &with(
            prompt.clone(),
            json!({"max_tokens": 20, "stop": ["."], "stream": true}),
        ),
    )
    .await;
    assert!(streamed.done);
    assert_eq!(stream_text(&streamed.events, 0, "text"), " Paris");
    assert_eq!(finish_reason(&streamed.events, 0), "stop");

    // Chat logprobs: one entry per token, top alternatives sorted.
    let (_, with_logprobs) = post_json(
        &server,
        "/v1/chat/completions",
        &with(
            greedy.clone(),
            json!({"max_tokens": 4, "logprobs": true, "top_logprobs": 3}),
        ),
    )
    .await;
    let entries = with_logprobs["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("logprobs.content");
    assert_eq!(entries.len(), 4);
    let mut rebuilt = Vec::new();
    for entry in entries {
        let top = entry["top_logprobs"].as_array().expect("top_logprobs");
        assert_eq!(top.len(), 3);
        let values: Vec<f64> = top.iter().filter_map(|t| t["logprob"].as_f64()).collect();
        assert!(values.windows(2).all(|w| w[0] >= w[1]), "{values:?}");
        // Greedy: the chosen token is the most likely one.
        assert_eq!(entry["token"], top[0]["token"]);
        assert!(entry["logprob"].as_f64().is_some_and(|l| l <= 0.0));
        rebuilt.extend(
            entry["bytes"]
                .as_array()
                .expect("bytes")
                .iter()
                .filter_map(|b| b.as_u64().map(|b| b as u8)),
        );
    }
    assert_eq!(
        String::from_utf8(rebuilt).expect("utf-8"),
        with_logprobs["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
    );

    // Legacy completions logprobs.
    let (_, legacy) = post_json(
        &server,
        "/v1/completions",
        &with(prompt.clone(), json!({"max_tokens": 3, "logprobs": 2})),
    )
    .await;
    let lp = &legacy["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(3));
    assert_eq!(lp["token_logprobs"].as_array().map(Vec::len), Some(3));
    assert_eq!(lp["top_logprobs"][0].as_object().map(|m| m.len()), Some(2));
    assert_eq!(lp["text_offset"][0], 0);

    // n = 2: two choices, indexed, usage summed over both.
    let (_, two) = post_json(
        &server,
        "/v1/chat/completions",
        &with(
            question.clone(),
            json!({"n": 2, "max_tokens": 5, "temperature": 1.0, "seed": 7, "ignore_eos": true}),
        ),
    )
    .await;
    let choices = two["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 2);
    assert_eq!(
        (choices[0]["index"].as_u64(), choices[1]["index"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(two["usage"]["completion_tokens"], 10);
    let streamed = post_sse(
        &server,
        "/v1/chat/completions",
        &with(
            question.clone(),
            json!({"n": 2, "max_tokens": 4, "stream": true, "ignore_eos": true}),
        ),
    )
    .await;
    for index in 0..2 {
        assert_eq!(token_chunks(&streamed.events, index).len(), 4);
        assert_eq!(finish_reason(&streamed.events, index), "length");
    }

    // Errors, all OpenAI-shaped.
    let client = client();
    let response = client
        .post(server.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{\"messages\": [")
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 400);
    assert_openai_error(
        &response.json().await.expect("json"),
        "invalid_request_error",
    );

    let (status, body) = post_json(
        &server,
        "/v1/chat/completions",
        &with(question.clone(), json!({"model": "gpt-4o"})),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "model_not_found");

    let (status, body) = post_json(
        &server,
        "/v1/chat/completions",
        &with(question.clone(), json!({"temperature": "hot"})),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "temperature");
    let (status, body) = post_json(
        &server,
        "/v1/chat/completions",
        &with(question.clone(), json!({"top_p": 7})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].as_str()),
        (400, Some("top_p"))
    );
    let (status, body) = post_json(
        &server,
        "/v1/chat/completions",
        &json!({"model": "default"}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].as_str()),
        (400, Some("messages"))
    );

    let long = "hello ".repeat(9000);
    let (status, body) = post_json(&server, "/v1/chat/completions", &chat(&long)).await;
    assert_eq!(status, 400);
    let message = body["error"]["message"].as_str().expect("message");
    assert!(message.contains("8192"), "{message}");
    let prompt_tokens: u64 = message
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .find(|&n: &u64| n > 8192)
        .expect("the prompt's token count in the message");
    assert!(prompt_tokens >= 9000, "{message}");
    assert_eq!(body["error"]["code"], "context_length_exceeded");

    let response = client
        .get(server.url("/v1/embeddings"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 404);
    assert_openai_error(
        &response.json().await.expect("json"),
        "invalid_request_error",
    );
    let response = client
        .get(server.url("/v1/chat/completions"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 405);
    assert_openai_error(
        &response.json().await.expect("json"),
        "invalid_request_error",
    );

    // Metrics: Prometheus text with scheduler and process gauges.
    let metrics = get_text(&server, "/metrics").await;
    for name in [
        "hearth_requests_total",
        "hearth_queue_depth",
        "hearth_running_sequences",
        "hearth_generated_tokens_total",
        "hearth_time_to_first_token_seconds_bucket",
        "hearth_inter_token_latency_seconds_bucket",
        "hearth_kv_cache_used_bytes",
        "hearth_process_resident_memory_bytes",
        "hearth_http_responses_total{class=\"4xx\"}",
        "hearth_device_info{kind=\"cpu\",backend=\"cpu\"} 1",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }

    // No prompt text in the log at the default level.
    assert!(!server.log_text().contains("capital of France"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dummy_model_exact_usage_thinking_and_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dummy_qwen3(dir.path());
    let server = TestServer::start(
        &model,
        &["--max-body-bytes", "65536", "--alias", "my-model"],
    );

    // Streamed chat that ends on max_tokens: one chunk per generated token,
    // and the same text as the non-streamed answer.
    let request = json!({
        "model": "my-model", "messages": [{"role": "user", "content": "Count to ten."}],
        "temperature": 0, "max_tokens": 17, "ignore_eos": true,
        "chat_template_kwargs": {"enable_thinking": false},
    });
    let streamed = post_sse(
        &server,
        "/v1/chat/completions",
        &with(
            request.clone(),
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        ),
    )
    .await;
    assert!(streamed.done);
    assert_eq!(finish_reason(&streamed.events, 0), "length");
    let usage = &streamed.events.last().expect("usage chunk")["usage"];
    assert_eq!(usage["completion_tokens"], 17);
    assert_eq!(token_chunks(&streamed.events, 0).len(), 17);
    let (_, whole) = post_json(&server, "/v1/chat/completions", &request).await;
    assert_eq!(whole["usage"], *usage);
    assert_eq!(
        whole["choices"][0]["message"]["content"].as_str(),
        Some(stream_text(&streamed.events, 0, "content").as_str())
    );

    // max_completion_tokens wins over max_tokens.
    let (_, limited) = post_json(
        &server,
        "/v1/chat/completions",
        &with(request.clone(), json!({"max_completion_tokens": 5})),
    )
    .await;
    assert_eq!(limited["usage"]["completion_tokens"], 5);

    // Completions from token ids, streamed: same exact count.
    let streamed = post_sse(
        &server,
        "/v1/completions",
        &json!({"model": "default", "prompt": [9707, 11, 1879], "max_tokens": 9,
                "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(token_chunks(&streamed.events, 0).len(), 9);
    let usage = &streamed.events.last().expect("usage chunk")["usage"];
    assert_eq!(
        (
            usage["prompt_tokens"].as_u64(),
            usage["completion_tokens"].as_u64()
        ),
        (Some(3), Some(9))
    );

    // Thinking: force `<think>` (id 151667) so the output opens a think
    // block; its text is reasoning_content, not content.
    let think_id = "151667";
    let thinking = json!({
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0,
        "logit_bias": {think_id: 100}, "ignore_eos": true,
    });
    let (_, body) = post_json(&server, "/v1/chat/completions", &thinking).await;
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], "");
    assert_eq!(message["reasoning_content"], "<think><think><think>");
    let streamed = post_sse(
        &server,
        "/v1/chat/completions",
        &with(thinking.clone(), json!({"stream": true})),
    )
    .await;
    assert_eq!(
        stream_text(&streamed.events, 0, "reasoning_content"),
        "<think><think><think>"
    );
    assert_eq!(stream_text(&streamed.events, 0, "content"), "");
    assert_eq!(token_chunks(&streamed.events, 0).len(), 4);

    // Stop token ids end a choice like a stop string.
    let (_, body) = post_json(
        &server,
        "/v1/chat/completions",
        &with(
            thinking.clone(),
            json!({"stop_token_ids": [151667], "max_tokens": 10}),
        ),
    )
    .await;
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["completion_tokens"], 1);

    // Prompt over the context (4096): 400 with both numbers.
    let ids: Vec<u32> = (0..5000).map(|i| 100 + i % 1000).collect();
    let (status, body) = post_json(
        &server,
        "/v1/completions",
        &json!({"model": "default", "prompt": ids, "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 400);
    let message = body["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("4096") && message.contains("5000"),
        "{message}"
    );
    assert_eq!(body["error"]["param"], "prompt");

    // Token ids outside the vocabulary are a 400, not a crash.
    let (status, body) = post_json(
        &server,
        "/v1/completions",
        &json!({"prompt": [999999999], "max_tokens": 1}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].as_str()),
        (400, Some("prompt"))
    );

    // Body over --max-body-bytes: 413 in OpenAI's shape.
    let big = chat(&"x".repeat(70_000));
    let (status, body) = post_json(&server, "/v1/chat/completions", &big).await;
    assert_eq!(status, 413);
    assert_openai_error(&body, "invalid_request_error");

    // Nothing left running.
    wait_idle(&server, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_full_is_429_with_retry_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dummy_qwen3(dir.path());
    let server = TestServer::start(&model, &["--max-running", "1", "--max-queue", "1"]);
    let long = json!({"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": true, "stream": true});

    // One running, then one queued: hold both streams open.
    let mut open = Vec::new();
    for (running, queued) in [(1, 0), (1, 1)] {
        let response = client()
            .post(server.url("/v1/completions"))
            .json(&long)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status().as_u16(), 200);
        open.push(response);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (_, health) = get_json(&server, "/health").await;
            if health["running"] == running && health["queued"] == queued {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{health}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let (status, headers, body) = post_json_with_headers(&server, "/v1/completions", &long).await;
    assert_eq!(status, 429, "{body}");
    let retry_after: u64 = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After seconds");
    assert!(retry_after >= 1);
    assert_openai_error(&body, "rate_limit_error");
    let metrics = get_text(&server, "/metrics").await;
    assert!(
        metrics.contains("hearth_requests_rejected_total 1"),
        "{metrics}"
    );

    // Hanging up frees both slots.
    drop(open);
    wait_idle(&server, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_cancels_the_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dummy_qwen3(dir.path());
    let server = TestServer::start(&model, &[]);
    let long = json!({"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true});

    // Streaming: read a few chunks, then hang up.
    let response = client()
        .post(server.url("/v1/completions"))
        .json(&with(long.clone(), json!({"stream": true})))
        .send()
        .await
        .expect("request");
    let mut bytes = futures_util::StreamExt::boxed(response.bytes_stream());
    for _ in 0..3 {
        futures_util::StreamExt::next(&mut bytes)
            .await
            .expect("a chunk")
            .expect("chunk bytes");
    }
    let (_, health) = get_json(&server, "/health").await;
    assert_eq!(health["running"], 1);
    drop(bytes);
    let health = wait_idle(&server, Duration::from_secs(5)).await;
    assert_eq!(health["kv_bytes_used"], 0, "KV memory back to baseline");

    // Non-streaming: a client that times out is gone too.
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_millis(1500))
        .build()
        .expect("client");
    let result = quick
        .post(server.url("/v1/completions"))
        .json(&long)
        .send()
        .await;
    assert!(result.is_err(), "the request should have timed out");
    wait_idle(&server, Duration::from_secs(5)).await;
    let metrics = get_text(&server, "/metrics").await;
    assert!(
        metrics.contains("hearth_requests_cancelled_total 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_running_streams_then_exits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dummy_qwen3(dir.path());
    let mut server = TestServer::start(&model, &["--shutdown-grace-seconds", "60"]);
    let addr = server.addr;
    let request = json!({"prompt": "Hello", "max_tokens": 60, "ignore_eos": true, "stream": true});
    let response = client()
        .post(server.url("/v1/completions"))
        .json(&request)
        .send()
        .await
        .expect("request");
    let mut bytes = futures_util::StreamExt::boxed(response.bytes_stream());
    let mut text = String::new();
    let first = futures_util::StreamExt::next(&mut bytes)
        .await
        .expect("a chunk")
        .expect("bytes");
    text.push_str(&String::from_utf8_lossy(&first));

    server.signal("TERM");
    // The running stream still completes.
    while let Some(chunk) = futures_util::StreamExt::next(&mut bytes).await {
        text.push_str(&String::from_utf8_lossy(&chunk.expect("bytes")));
    }
    assert!(text.ends_with("data: [DONE]\n\n"), "stream was cut: {text}");
    assert!(text.contains("\"finish_reason\":\"length\""));

    let status = server
        .wait_exit(Duration::from_secs(30))
        .expect("server exits after draining");
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        server.log_text()
    );
    // The port is free again.
    std::net::TcpListener::bind(addr).expect("port released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_grace_period_bounds_the_drain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dummy_qwen3(dir.path());
    let mut server = TestServer::start(&model, &["--shutdown-grace-seconds", "0.5"]);
    let request =
        json!({"prompt": "Hello", "max_tokens": 4000, "ignore_eos": true, "stream": true});
    let response = client()
        .post(server.url("/v1/completions"))
        .json(&request)
        .send()
        .await
        .expect("request");
    let mut bytes = futures_util::StreamExt::boxed(response.bytes_stream());
    futures_util::StreamExt::next(&mut bytes)
        .await
        .expect("a chunk")
        .expect("bytes");
    let started = std::time::Instant::now();
    server.signal("INT");
    let status = server
        .wait_exit(Duration::from_secs(20))
        .expect("server exits after its grace period");
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        server.log_text()
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    // The stream was closed without [DONE].
    let mut rest = String::new();
    while let Some(Ok(chunk)) = futures_util::StreamExt::next(&mut bytes).await {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!rest.contains("[DONE]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_greedy_requests_match_sequential_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dummy_qwen3(dir.path());
    let server = TestServer::start(&model, &[]);
    // Different prompt lengths, so prefills and decodes overlap in batches.
    let bodies: Vec<Value> = (0..8)
        .map(|i| {
            json!({"prompt": format!("Prompt {i}: {}", "word ".repeat(i * 9)),
                   "max_tokens": 24, "temperature": 0, "ignore_eos": true})
        })
        .collect();
    let mut sequential = Vec::new();
    for body in &bodies {
        let (status, response) = post_json(&server, "/v1/completions", body).await;
        assert_eq!(status, 200, "{response}");
        sequential.push(response["choices"][0]["text"].clone());
    }
    let concurrent = futures_util::future::join_all(
        bodies
            .iter()
            .map(|body| post_json(&server, "/v1/completions", body)),
    )
    .await;
    for (i, ((status, response), alone)) in concurrent.iter().zip(&sequential).enumerate() {
        assert_eq!(*status, 200, "{response}");
        assert_eq!(&response["choices"][0]["text"], alone, "prompt {i}");
        assert_eq!(response["usage"]["completion_tokens"], 24);
    }
}

/// Switching to a model larger than memory is refused up front with 507
/// and both numbers; the served model keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_to_a_model_larger_than_memory_keeps_the_served_one() {
    let home = tempfile::tempdir().expect("tempdir");
    let models = home.path().join("models");
    std::fs::create_dir_all(&models).expect("models dir");
    let model = dummy_qwen3(&models);
    let huge = models.join("huge");
    std::fs::create_dir_all(&huge).expect("huge dir");
    std::fs::copy(model.join("config.json"), huge.join("config.json")).expect("config");
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    let sparse = std::fs::File::create(huge.join("model.safetensors")).expect("weights");
    sparse
        .set_len(system.total_memory() * 2)
        .expect("sparse file");
    let server = TestServer::start_with_env(&model, &[], &[("HEARTH_HOME", home.path())]);

    let (status, body) = post_json(&server, "/api/models/load", &json!({"model": "huge"})).await;
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"]["code"], "model_too_large", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("huge does not fit in memory"), "{message}");
    assert!(message.contains("GiB is available"), "{message}");

    let (code, reply) = post_json(
        &server,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 3, "ignore_eos": true}),
    )
    .await;
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["model"], "qwen3-tiny");
    assert_eq!(reply["usage"]["completion_tokens"], 3);
}

/// `--mlx-cache-mb 0`: the freed buffers of a finished request go back at
/// once instead of staying in MLX's cache for the idle grace, while a server
/// without it keeps them cached (MLX's own limit, 32 MiB on a CPU).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mlx_cache_limit_bounds_the_cached_buffers() {
    let mut cached = Vec::new();
    for extra in [&[][..], &["--mlx-cache-mb", "0"][..]] {
        let mut args = vec!["--idle-release-seconds", "600"];
        args.extend_from_slice(extra);
        let server = TestServer::start(&smollm2(), &args);
        let (status, body) = post_json(
            &server,
            "/v1/chat/completions",
            &with(chat("Hi"), json!({"max_tokens": 8})),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        wait_idle(&server, Duration::from_secs(10)).await;
        let metrics = get_text(&server, "/metrics").await;
        assert!(
            metric(&metrics, "hearth_mlx_active_memory_bytes") > 0.0,
            "the weights"
        );
        cached.push(metric(&metrics, "hearth_mlx_cache_memory_bytes"));
    }
    assert!(
        cached[0] > 0.0,
        "MLX's default keeps freed buffers: {cached:?}"
    );
    assert_eq!(cached[1], 0.0, "--mlx-cache-mb 0 keeps none: {cached:?}");
}
