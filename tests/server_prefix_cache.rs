//! The prefix cache over real HTTP: an agent-style second turn (the whole
//! conversation resent) reports `usage.prompt_tokens_details.cached_tokens`,
//! answers exactly what a server without the cache answers, and `/metrics`
//! and `/api/status` count the hit.

mod server_support;

use serde_json::{json, Value};
use server_support::*;

fn chat(messages: &[Value]) -> Value {
    json!({"model": "default", "messages": messages, "max_tokens": 16, "temperature": 0})
}

async fn ask(server: &TestServer, messages: &[Value]) -> (String, Value) {
    let (status, body) = post_json(server, "/v1/chat/completions", &chat(messages)).await;
    assert_eq!(status, 200, "{body}");
    let text = body["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string();
    (text, body["usage"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_turn_reports_cached_tokens_and_matches_an_uncached_server() {
    let model = smollm2();
    let cached = TestServer::start(&model, &[]);
    let plain = TestServer::start(&model, &["--prefix-cache-mb", "0"]);
    let system = "You are a helpful assistant for a small software team. \
                  Answer in one short sentence. "
        .repeat(5);
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": "What is a unit test?"}),
    ];
    let (first, usage) = ask(&cached, &messages).await;
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"], 0,
        "{usage}"
    );
    let (first_plain, _) = ask(&plain, &messages).await;
    assert_eq!(first, first_plain);

    messages.push(json!({"role": "assistant", "content": first}));
    messages.push(json!({"role": "user", "content": "And an integration test?"}));
    let (second, usage) = ask(&cached, &messages).await;
    let reused = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens");
    let prompt = usage["prompt_tokens"].as_u64().expect("prompt_tokens");
    assert!(
        reused > 60 && reused < prompt,
        "turn 2 reused {reused} of {prompt} prompt tokens"
    );
    let (second_plain, plain_usage) = ask(&plain, &messages).await;
    assert_eq!(second, second_plain, "the cache changed the answer");
    assert_eq!(plain_usage["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(plain_usage["prompt_tokens"], prompt);

    let text = get_text(&cached, "/metrics").await;
    assert_eq!(metric(&text, "hearth_prefix_cache_hits_total"), 1.0);
    assert_eq!(metric(&text, "hearth_prefix_cache_misses_total"), 1.0);
    assert_eq!(
        metric(&text, "hearth_prefix_cache_reused_tokens_total"),
        reused as f64
    );
    let bytes = metric(&text, "hearth_prefix_cache_bytes");
    assert!(bytes > 0.0 && bytes <= metric(&text, "hearth_prefix_cache_budget_bytes"));
    let (status, body) = get_json(&cached, "/api/status").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["prefix_cache"]["hits"], 1, "{body}");
    assert_eq!(body["prefix_cache"]["reused_tokens"], reused, "{body}");

    let text = client()
        .get(plain.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body");
    assert_eq!(metric(&text, "hearth_prefix_cache_budget_bytes"), 0.0);
    assert_eq!(metric(&text, "hearth_prefix_cache_hits_total"), 0.0);
}
