//! End-to-end tests of the harness against a genuine HTTP peer: a small axum
//! server in the test that streams OpenAI-style SSE (chunked transfer
//! encoding, CRLF line ends, keep-alive comments) and can be told to lie.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    extract::State,
    http::header,
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::{
    check::FlagKind,
    config::{BenchConfig, InterferenceConfig, Preset, SingleConfig, SweepConfig, Target},
    prompt::tests::word_level_json,
    report::{Role, Scenario},
    run_with_progress,
};

/// How the fake server misbehaves.
#[derive(Clone, Copy, Default)]
struct Fake {
    /// usage.completion_tokens = real count * this.
    usage_factor: u64,
    /// Send every character of a word as its own event.
    split_words: bool,
    /// Omit the usage chunk.
    no_usage: bool,
    /// Each event (one token in usage) holds two words: a sampled token
    /// whose text the tokenizer encodes longer, as random tokens of dummy
    /// weights often are.
    word_pairs: bool,
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}))
}

async fn chat(State(fake): State<Arc<Fake>>, Json(body): Json<Value>) -> Response {
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(16) as usize;
    let prompt = body["messages"][0]["content"].as_str().unwrap_or_default();
    let prompt_tokens = prompt.split_whitespace().count() + prompt.matches('.').count() + 5; // + "template"
    assert_eq!(body["stream_options"]["include_usage"], true);
    let words = ["the", "and", "of", "water", "river"];
    let mut events: Vec<String> = vec![
        ": keep-alive\r\n\r\n".into(),
        format!(
            "data: {}\r\n\r\n",
            json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        ),
    ];
    for i in 0..max_tokens {
        let word = if fake.word_pairs {
            format!(
                " {} {}",
                words[i % words.len()],
                words[(i + 1) % words.len()]
            )
        } else {
            format!(" {}", words[i % words.len()])
        };
        let pieces: Vec<String> = if fake.split_words {
            word.chars().map(String::from).collect()
        } else {
            vec![word]
        };
        for piece in pieces {
            let chunk = json!({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
            events.push(format!("data: {chunk}\r\n\r\n"));
        }
    }
    events.push(format!(
        "data: {}\r\n\r\n",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    ));
    if !fake.no_usage {
        let usage = json!({"choices": [], "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": max_tokens as u64 * fake.usage_factor.max(1),
            "total_tokens": 0}});
        events.push(format!("data: {usage}\r\n\r\n"));
    }
    events.push("data: [DONE]\r\n\r\n".into());
    // One event per body chunk, 1 ms apart: prefill "cost" before the first.
    let stream =
        futures_util::stream::iter(events.into_iter().enumerate()).then(|(i, e)| async move {
            tokio::time::sleep(Duration::from_millis(if i == 1 { 5 } else { 1 })).await;
            Ok::<_, std::convert::Infallible>(Bytes::from(e))
        });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

async fn serve(fake: Fake) -> SocketAddr {
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .with_state(Arc::new(fake));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn small_config(urls: &[(&str, SocketAddr)], tokenizer: &std::path::Path) -> BenchConfig {
    let targets = urls
        .iter()
        .map(|(name, addr)| Target::parse(&format!("{name}=http://{addr}/v1"), name).unwrap())
        .collect();
    BenchConfig {
        repeats: 2,
        warmup: 1,
        tokenizer: Some(tokenizer.to_path_buf()),
        single: Some(SingleConfig {
            prompt_tokens: vec![8, 40],
            max_tokens: 12,
        }),
        sweep: Some(SweepConfig {
            concurrency: vec![1, 2, 4],
            prompt_tokens: 16,
            max_tokens: 10,
        }),
        interference: Some(InterferenceConfig {
            long_prompt_tokens: 64,
            short_prompt_tokens: 8,
            short_max_tokens: 4,
            running_max_tokens: 30,
            running_warm_chunks: 3,
            probe_delay_ms: 2,
        }),
        request_timeout_s: 30.0,
        ..BenchConfig::preset(Preset::Quick, targets)
    }
}

fn tokenizer_file() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), word_level_json()).unwrap();
    file
}

#[tokio::test]
async fn honest_server_end_to_end() {
    let tokenizer = tokenizer_file();
    let addr = serve(Fake::default()).await;
    let config = small_config(&[("fake", addr)], tokenizer.path());
    let progress = std::sync::Mutex::new(Vec::new());
    let report = run_with_progress(config, |p| progress.lock().unwrap().push(p))
        .await
        .unwrap();
    let summary = report.summary("fake").unwrap();
    assert_eq!(report.targets[0].model, "fake-model");
    assert_eq!(summary.failed, 0, "{:?}", summary.errors);
    assert!(!summary.suspect, "{:?}", summary.flags);
    assert!(summary.flags.is_empty(), "{:?}", summary.flags);
    // Every measured request generated exactly max_tokens, counted by us.
    for s in report.samples.iter() {
        assert_eq!(s.text_tokens, s.max_tokens, "{s:?}");
        assert_eq!(s.tokens, s.max_tokens, "{s:?}");
        assert_eq!(s.token_source, super::check::TokenSource::Usage);
        assert_eq!(s.usage_completion_tokens, Some(s.max_tokens as u64));
        assert!(s.done_marker);
    }
    // The gate releases a batch together.
    for s in report
        .samples
        .iter()
        .filter(|s| s.scenario == Scenario::Sweep)
    {
        assert!(
            s.sent_at_s < 0.05,
            "request written {} s after its batch",
            s.sent_at_s
        );
    }
    assert_eq!(summary.single.len(), 2);
    assert_eq!(summary.sweep.len(), 3);
    assert_eq!(summary.sweep[0].speedup, Some(1.0));
    assert!(summary.double_speedup().is_some());
    let interference = summary.interference.as_ref().unwrap();
    assert_eq!(interference.repeats_ok, 2);
    assert!(interference.ttft_ratio.is_some());
    assert!(report
        .samples
        .iter()
        .any(|s| s.role == Role::Running && s.content_times_s.len() == 30));
    // Progress: a start and an end per step, ending at total.
    let progress = progress.into_inner().unwrap();
    let last = progress.last().unwrap();
    assert_eq!(last.done, last.total);
    assert_eq!(last.total, 1 + 2 * (2 + 3 + 1));
    let md = report.to_markdown();
    for section in [
        "Parallel streams",
        "Single requests",
        "interference",
        "Token accounting",
    ] {
        assert!(md.contains(section), "missing {section}:\n{md}");
    }
    assert!(md.contains("all counts agree"));
    // The JSON report round-trips.
    let json = serde_json::to_string(&report).unwrap();
    let back: super::Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back.samples.len(), report.samples.len());
}

#[tokio::test]
async fn usage_that_disagrees_with_the_text_is_flagged() {
    let tokenizer = tokenizer_file();
    let honest = serve(Fake::default()).await;
    let liar = serve(Fake {
        usage_factor: 10,
        ..Fake::default()
    })
    .await;
    let mut config = small_config(&[("honest", honest), ("liar", liar)], tokenizer.path());
    config.interference = None;
    config.repeats = 1;
    let report = super::run(config).await.unwrap();
    let liar = report.summary("liar").unwrap();
    assert!(liar.suspect);
    assert!(liar.flags.iter().any(|f| f.kind == FlagKind::UsageMismatch));
    assert!(liar
        .flags
        .iter()
        .any(|f| f.kind == FlagKind::OverGeneration));
    assert!(!report.summary("honest").unwrap().suspect);
    // Throughput comes from our count, so the lie does not inflate it:
    // both servers generate the same text at the same pace.
    let wall = |name: &str| report.summary(name).unwrap().sweep[0].wall_tps_p50.unwrap();
    assert!(wall("liar") < 3.0 * wall("honest"));
    // Ratios are against the first target.
    assert_eq!(report.baseline, "honest");
    assert!(!report.comparison.is_empty());
    assert!(report.to_markdown().contains("MISMATCH"));
}

#[tokio::test]
async fn sub_token_events_and_missing_usage_are_flagged() {
    let tokenizer = tokenizer_file();
    let addr = serve(Fake {
        split_words: true,
        no_usage: true,
        ..Fake::default()
    })
    .await;
    let mut config = small_config(&[("split", addr)], tokenizer.path());
    config.interference = None;
    config.sweep = None;
    config.repeats = 1;
    let report = super::run(config).await.unwrap();
    let summary = report.summary("split").unwrap();
    let kinds: Vec<FlagKind> = summary.flags.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&FlagKind::ChunkSurplus), "{kinds:?}");
    assert!(kinds.contains(&FlagKind::MissingUsage), "{kinds:?}");
    // The text is still counted right.
    assert!(report
        .samples
        .iter()
        .all(|s| s.tokens == s.max_tokens && s.text_tokens == s.max_tokens));
}

#[tokio::test]
async fn unreachable_target_is_a_clear_error() {
    let tokenizer = tokenizer_file();
    // Bind then drop to get a port nobody listens on.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let config = small_config(&[("gone", addr)], tokenizer.path());
    let err = super::run(config).await.unwrap_err();
    assert!(err.to_string().contains("gone"), "{err}");
}

#[test]
fn run_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let config = BenchConfig::preset(Preset::Quick, Vec::new());
    let future = super::run(config);
    assert_send(&future);
}

#[tokio::test]
async fn text_that_re_encodes_longer_counts_the_confirmed_usage() {
    let tokenizer = tokenizer_file();
    let addr = serve(Fake {
        word_pairs: true,
        ..Fake::default()
    })
    .await;
    let mut config = small_config(&[("pairs", addr)], tokenizer.path());
    config.interference = None;
    config.repeats = 1;
    let report = super::run(config).await.unwrap();
    let summary = report.summary("pairs").unwrap();
    let kinds: Vec<FlagKind> = summary.flags.iter().map(|f| f.kind).collect();
    assert!(
        kinds.contains(&FlagKind::RetokenizationSurplus),
        "{kinds:?}"
    );
    assert!(!kinds.contains(&FlagKind::UsageMismatch), "{kinds:?}");
    assert!(!summary.suspect);
    // The smaller count, usage (one token an event), not the re-encoding.
    assert!(!report.samples.is_empty());
    for s in &report.samples {
        assert_eq!(s.tokens, s.max_tokens);
        assert_eq!(s.text_tokens, 2 * s.max_tokens);
    }
}
