//! Constrained decoding inside the scheduler, with pipelined decode on (the
//! GPU default): constrained rows make their steps synchronous, their
//! replies parse as JSON of the right shape, and unconstrained rows batched
//! with them produce exactly the tokens they produce with no constrained
//! row around. Real SmolLM2 weights and tokenizer.

mod common;

use std::time::Duration;

use common::fixture;
use hearth::{
    engine::{
        constraint::{GrammarCompiler, OutputFormat},
        sampling::SamplingParams,
    },
    scheduler::{FinishReason, Job, JobEvent, JobHandle, SchedulerConfig, SchedulerHandle},
};
use serde_json::{json, Value};

fn collect(mut handle: JobHandle) -> (Vec<u32>, FinishReason) {
    let mut tokens = Vec::new();
    loop {
        match handle.events.blocking_recv().expect("event") {
            JobEvent::Token(s) => tokens.push(s.token),
            JobEvent::Finished(summary) => return (tokens, summary.reason),
            JobEvent::Failed(e) => panic!("job failed: {e}"),
        }
    }
}

fn free_jobs(scheduler: &SchedulerHandle) -> Vec<Job> {
    let tokenizer = scheduler.tokenizer();
    ["The capital of France is", "def fibonacci(n):"]
        .iter()
        .enumerate()
        .map(|(i, text)| Job {
            prompt_tokens: tokenizer.encode(text, true).unwrap(),
            max_tokens: 20,
            sampling: SamplingParams {
                temperature: if i == 0 { 0.0 } else { 0.8 },
                seed: Some(5),
                ..SamplingParams::default()
            },
            stop_at_eos: false,
        })
        .collect()
}

#[test]
fn constrained_rows_in_a_pipelined_batch() {
    let config = SchedulerConfig {
        max_running: 8,
        pipeline_decode: true,
        ..Default::default()
    };
    let scheduler =
        SchedulerHandle::start(fixture("SmolLM2-135M-Instruct.Q4_1.gguf"), config).unwrap();
    let info = scheduler.info().clone();
    let tokenizer = scheduler.tokenizer().clone();

    let expected: Vec<Vec<u32>> = free_jobs(&scheduler)
        .into_iter()
        .map(|job| collect(scheduler.submit(job).unwrap()).0)
        .collect();

    let compiler = GrammarCompiler::new(
        tokenizer.clone(),
        info.config.vocab_size,
        &info.eos_token_ids,
    )
    .unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "rank": {"type": "integer", "minimum": 1, "maximum": 5}
        },
        "required": ["city", "rank"],
        "additionalProperties": false
    });
    let grammar = compiler.compile(&OutputFormat::JsonSchema(schema)).unwrap();
    let prompt = tokenizer
        .encode("A city and its rank, as JSON:", true)
        .unwrap();
    let constrained: Vec<Job> = (0..3)
        .map(|k| Job {
            prompt_tokens: prompt.clone(),
            max_tokens: 60,
            sampling: SamplingParams {
                temperature: if k == 0 { 0.0 } else { 1.0 },
                seed: Some(k),
                grammar: Some(grammar.clone()),
                ..SamplingParams::default()
            },
            stop_at_eos: true,
        })
        .collect();

    // Free jobs first so they are decoding (pipelined) when the constrained
    // ones join; then the batch runs in synchronous steps.
    let free: Vec<JobHandle> = free_jobs(&scheduler)
        .into_iter()
        .map(|job| scheduler.submit(job).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let constrained: Vec<JobHandle> = constrained
        .into_iter()
        .map(|job| scheduler.submit(job).unwrap())
        .collect();

    for (k, handle) in constrained.into_iter().enumerate() {
        let (tokens, reason) = collect(handle);
        assert_eq!(reason, FinishReason::Stop, "constrained job {k}");
        let last = *tokens.last().unwrap();
        assert!(info.eos_token_ids.contains(&last), "ends with EOS");
        let text = tokenizer
            .decode(&tokens[..tokens.len() - 1], false)
            .unwrap();
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("job {k}: {text:?} is not JSON: {e}"));
        let object = value.as_object().expect("an object");
        assert_eq!(object.len(), 2, "{text}");
        assert!(
            object["city"]
                .as_str()
                .is_some_and(|c| c.chars().count() <= 12),
            "{text}"
        );
        assert!(
            object["rank"]
                .as_i64()
                .is_some_and(|r| (1..=5).contains(&r)),
            "{text}"
        );
    }
    for (i, handle) in free.into_iter().enumerate() {
        let (tokens, reason) = collect(handle);
        assert_eq!(reason, FinishReason::Length);
        assert_eq!(
            tokens, expected[i],
            "free job {i} changed next to constrained rows"
        );
    }
    scheduler.shutdown(Duration::from_secs(1));
}

#[test]
fn masks_follow_the_schema_token_by_token() {
    let loaded = hearth_models::load(&fixture("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let eos = loaded.eos_token_ids();
    let vocab = loaded.model.config.vocab_size;
    let tokenizer = std::sync::Arc::new(loaded.tokenizer);
    let started = std::time::Instant::now();
    let compiler = GrammarCompiler::new(tokenizer.clone(), vocab, &eos).unwrap();
    println!("vocabulary indexed in {:?}", started.elapsed());
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "object", "properties": {
                "name": {"type": "string", "maxLength": 16},
                "population": {"type": "integer", "minimum": 0}},
                "required": ["name", "population"], "additionalProperties": false},
            "tags": {"type": "array", "items": {"enum": ["big", "old", "river"]}}
        },
        "required": ["city", "tags"],
        "additionalProperties": false
    });
    let started = std::time::Instant::now();
    let grammar = compiler.compile(&OutputFormat::JsonSchema(schema)).unwrap();
    println!("schema compiled in {:?}", started.elapsed());
    let text = r#"{"city":{"name":"Paris","population":2100000},"tags":["big","old","river"]}"#;
    let tokens = tokenizer.encode(text, false).unwrap();

    let mut allowed = vec![false; vocab];
    // The cost of a mask: the fastest of several walks over the reply (the
    // test machine is shared; the fastest walk is the least disturbed).
    let mut fastest = std::time::Duration::MAX;
    let mut first = None;
    for _ in 0..10 {
        let mut constraint = grammar.start();
        let started = std::time::Instant::now();
        for &token in &tokens {
            constraint.fill_allowed(&mut allowed);
            constraint.advance(token);
        }
        fastest = fastest.min(started.elapsed());
        first.get_or_insert(started.elapsed());
    }

    let mut constraint = grammar.start();
    for (i, &token) in tokens.iter().enumerate() {
        constraint.fill_allowed(&mut allowed);
        assert!(
            allowed[token as usize],
            "token {i} ({token}) of a valid reply banned"
        );
        assert!(
            !eos.iter().any(|&e| allowed[e as usize]),
            "EOS allowed before the value is complete (token {i})"
        );
        if i == 1 {
            // After `{"`, only property names of the schema may start.
            let banned = tokenizer.encode("zzz", false).unwrap()[0];
            assert!(
                !allowed[banned as usize],
                "a key outside the schema is allowed"
            );
        }
        constraint.advance(token);
    }
    constraint.fill_allowed(&mut allowed);
    let open: Vec<usize> = (0..vocab).filter(|&t| allowed[t]).collect();
    assert!(
        !open.is_empty() && open.iter().all(|&t| eos.contains(&(t as u32))),
        "after a complete value only EOS may follow, got {open:?}"
    );
    assert!(constraint.is_complete());
    let per_token_us = fastest.as_secs_f64() * 1e6 / tokens.len() as f64;
    let cold_us = first.unwrap_or_default().as_secs_f64() * 1e6 / tokens.len() as f64;
    println!(
        "mask + advance: {} tokens, {per_token_us:.0} µs per token warm, {cold_us:.0} µs on the \
         first walk (vocabulary {vocab})",
        tokens.len()
    );
    // A generous bound: a mask costs well under a millisecond here.
    assert!(per_token_us < 20_000.0, "{per_token_us} µs per mask");
}
