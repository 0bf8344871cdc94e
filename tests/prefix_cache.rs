//! The prefix cache is invisible in the output: a prompt that reuses a
//! cached prefix (KV, and for Qwen3.5 a recurrent-state snapshot) generates
//! exactly what it generates with nothing cached, reports how many prompt
//! tokens it reused, and the cache stays within its byte budget (LRU).

mod common;

use std::time::Duration;

use common::{fixture, write_dummy};
use hearth::{
    engine::{sampling::SamplingParams, Engine, EngineOptions, GenerateRequest, GenerationEvent},
    scheduler::{FinishReason, Job, JobEvent, JobHandle, SchedulerConfig, SchedulerHandle},
};

/// Greedy output of `prompt` on the plain engine (no batching, no cache).
fn alone(engine: &Engine, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut request = GenerateRequest::new(prompt.to_vec(), n);
    request.stop_at_eos = false;
    request.sampling = SamplingParams::default();
    let mut out = Vec::new();
    engine
        .generate(&request, |e| {
            if let GenerationEvent::Token { sampled, .. } = e {
                out.push(sampled.token);
            }
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    out
}

struct Done {
    tokens: Vec<u32>,
    cached: usize,
}

fn submit(s: &SchedulerHandle, prompt: &[u32], n: usize) -> JobHandle {
    s.submit(Job {
        prompt_tokens: prompt.to_vec(),
        max_tokens: n,
        sampling: SamplingParams::default(),
        stop_at_eos: false,
    })
    .unwrap()
}

fn collect(mut h: JobHandle) -> Done {
    let mut tokens = Vec::new();
    loop {
        match h.events.blocking_recv().expect("event") {
            JobEvent::Token(t) => tokens.push(t.token),
            JobEvent::Finished(s) => {
                assert_eq!(s.reason, FinishReason::Length);
                assert_eq!(s.completion_tokens, tokens.len());
                assert!(s.cached_prompt_tokens < s.prompt_tokens);
                return Done {
                    tokens,
                    cached: s.cached_prompt_tokens,
                };
            }
            JobEvent::Failed(e) => panic!("job failed: {e}"),
        }
    }
}

fn run(s: &SchedulerHandle, prompt: &[u32], n: usize) -> Done {
    collect(submit(s, prompt, n))
}

/// A three-turn conversation in token ids: each turn's prompt is the
/// previous prompt, its output, and a new message.
fn conversation(tokenizer: &hearth_models::Tokenizer) -> Vec<Vec<u32>> {
    let system = "You are a careful assistant. Answer briefly. ".repeat(6);
    let first = tokenizer
        .encode(
            &format!("{system}User: What is the capital of France?\nAssistant:"),
            true,
        )
        .unwrap();
    let more = |t: &str| tokenizer.encode(t, false).unwrap();
    vec![
        first,
        more("\nUser: And of Italy? Please think about it step by step.\nAssistant:"),
        more("\nUser: Thanks. Now list three rivers.\nAssistant:"),
    ]
}

/// Turns of [`conversation`] through the scheduler: every later turn reuses
/// what the previous one left and equals the plain engine's output.
/// Returns the cached token counts per turn.
fn check_conversation(model: &std::path::Path, config: SchedulerConfig, n: usize) -> Vec<usize> {
    let engine = Engine::new(
        hearth_models::load(model).unwrap(),
        EngineOptions::default(),
    );
    let parts = conversation(&engine.model.tokenizer);
    let scheduler = SchedulerHandle::start(model.to_path_buf(), config).unwrap();
    let mut prompt: Vec<u32> = Vec::new();
    let mut cached = Vec::new();
    for (turn, part) in parts.iter().enumerate() {
        prompt.extend(part);
        let expected = alone(&engine, &prompt, n);
        let got = run(&scheduler, &prompt, n);
        assert_eq!(
            got.tokens, expected,
            "turn {turn}: output differs with the cache"
        );
        cached.push(got.cached);
        prompt.extend(&got.tokens);
    }
    // The same prompt again: all but the last token may be reused.
    let again = run(&scheduler, &prompt[..prompt.len() - n], n);
    assert!(again.cached > 0, "identical prompt: no reuse");
    assert_eq!(again.tokens, alone(&engine, &prompt[..prompt.len() - n], n));
    let status = scheduler.status();
    let p = &status.prefix_cache;
    assert_eq!(
        p.hits as usize,
        cached.iter().filter(|&&c| c > 0).count() + 1
    );
    assert_eq!(
        p.reused_tokens as usize,
        cached.iter().sum::<usize>() + again.cached
    );
    assert!(
        p.entries >= 1 && p.bytes > 0 && p.bytes <= p.budget_bytes,
        "{p:?}"
    );
    scheduler.shutdown(Duration::from_secs(1));
    cached
}

#[test]
fn real_model_later_turns_reuse_the_conversation() {
    let config = SchedulerConfig {
        prefill_chunk: 16,
        step_token_budget: 48,
        pipeline_decode: true, // a token may be fed by a step still in flight
        ..Default::default()
    };
    let cached = check_conversation(&fixture("SmolLM2-135M-Instruct.Q4_1.gguf"), config, 12);
    assert_eq!(cached[0], 0, "nothing cached before the first turn");
    // Turn 2 reuses turn 1's prompt and all but its last output token
    // (whose KV was never computed).
    assert!(cached[1] > 60 && cached[2] > cached[1], "{cached:?}");
}

fn dummy_qwen3_5(dir: &std::path::Path) {
    write_dummy(dir, "qwen3_5", "qwen3.5-tiny", 5);
}

/// Qwen3.5: attention KV plus DeltaNet states, reused only at a snapshot
/// position (prompt chunk boundaries every 4 chunks, a prompt's end, a
/// finished sequence's end).
#[test]
fn dummy_qwen3_5_later_turns_reuse_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    dummy_qwen3_5(dir.path());
    let config = SchedulerConfig {
        prefill_chunk: 8,
        step_token_budget: 20,
        ..Default::default()
    };
    let cached = check_conversation(dir.path(), config, 10);
    assert_eq!(cached[0], 0);
    assert!(cached[1] > 60 && cached[2] > cached[1], "{cached:?}");
}

/// Two requests sharing a long prefix at once (nothing cached yet), then
/// two more at once that both reuse it: every output equals the plain
/// engine's.
#[test]
fn concurrent_requests_with_a_shared_prefix() {
    let model = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    let engine = Engine::new(
        hearth_models::load(&model).unwrap(),
        EngineOptions::default(),
    );
    let tok = &engine.model.tokenizer;
    let shared = "Here is a long shared system prompt about geography. ".repeat(8);
    let prompts: Vec<Vec<u32>> = [
        "Name a river.",
        "Name a mountain.",
        "Name a lake.",
        "Name a sea.",
    ]
    .iter()
    .map(|q| tok.encode(&format!("{shared}{q}"), true).unwrap())
    .collect();
    let n = 10;
    let expected: Vec<Vec<u32>> = prompts.iter().map(|p| alone(&engine, p, n)).collect();
    let config = SchedulerConfig {
        prefill_chunk: 16,
        step_token_budget: 48,
        pipeline_decode: true,
        ..Default::default()
    };
    let scheduler = SchedulerHandle::start(model, config).unwrap();
    for pair in [[0, 1], [2, 3]] {
        let handles: Vec<JobHandle> = pair
            .iter()
            .map(|&i| submit(&scheduler, &prompts[i], n))
            .collect();
        for (h, &i) in handles.into_iter().zip(&pair) {
            let done = collect(h);
            assert_eq!(done.tokens, expected[i], "prompt {i}");
            if i >= 2 {
                assert!(done.cached > 60, "prompt {i} reused only {}", done.cached);
            }
        }
    }
    scheduler.shutdown(Duration::from_secs(1));
}

/// A budget that holds about one conversation: older entries are evicted
/// (least recently used first), the cache never exceeds its budget, and an
/// evicted prompt is simply prefilled again, with the same output.
#[test]
fn tiny_budget_evicts_least_recently_used() {
    let model = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    let engine = Engine::new(
        hearth_models::load(&model).unwrap(),
        EngineOptions::default(),
    );
    let tok = &engine.model.tokenizer;
    let a = tok
        .encode(&"Apples are red and sweet. ".repeat(10), true)
        .unwrap();
    let b = tok
        .encode(&"Bananas are long and yellow. ".repeat(10), true)
        .unwrap();
    let n = 8;
    // Entry sizes, measured with the default budget.
    let probe = SchedulerHandle::start(model.clone(), SchedulerConfig::default()).unwrap();
    run(&probe, &a, n);
    let size_a = probe.status().prefix_cache.bytes;
    run(&probe, &b, n);
    let size_b = probe.status().prefix_cache.bytes - size_a;
    probe.shutdown(Duration::from_secs(1));
    assert!(size_a > 0 && size_b > 0);
    // Room for either entry but not both.
    let budget = size_a.max(size_b) + size_a.min(size_b) / 2;
    let config = SchedulerConfig {
        prefix_cache_bytes: Some(budget),
        ..Default::default()
    };
    let scheduler = SchedulerHandle::start(model, config).unwrap();
    let first_a = run(&scheduler, &a, n);
    assert_eq!(first_a.tokens, alone(&engine, &a, n));
    let again_a = run(&scheduler, &a, n);
    assert_eq!(again_a.cached, a.len() - 1);
    assert_eq!(again_a.tokens, first_a.tokens);
    let first_b = run(&scheduler, &b, n); // evicts a
    assert_eq!(first_b.cached, 0);
    let status = scheduler.status().prefix_cache;
    assert_eq!((status.entries, status.evictions), (1, 1), "{status:?}");
    assert!(status.bytes <= budget, "{status:?}");
    let third_a = run(&scheduler, &a, n);
    assert_eq!(third_a.cached, 0, "a was evicted");
    assert_eq!(third_a.tokens, first_a.tokens);
    let status = scheduler.status().prefix_cache;
    assert_eq!((status.entries, status.evictions), (1, 2), "{status:?}");
    assert_eq!(
        run(&scheduler, &a, n).cached,
        a.len() - 1,
        "budget {budget}"
    );
    scheduler.shutdown(Duration::from_secs(1));

    // 0 turns it off.
    let off = SchedulerConfig {
        prefix_cache_bytes: Some(0),
        ..Default::default()
    };
    let scheduler =
        SchedulerHandle::start(fixture("SmolLM2-135M-Instruct.Q4_1.gguf"), off).unwrap();
    run(&scheduler, &a, n);
    assert_eq!(run(&scheduler, &a, n).cached, 0);
    let p = scheduler.status().prefix_cache;
    assert_eq!((p.hits, p.misses, p.entries, p.bytes), (0, 0, 0, 0));
    scheduler.shutdown(Duration::from_secs(1));
}
