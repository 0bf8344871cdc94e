//! Continuous batching is invisible in the output: greedy generations of many
//! concurrent prompts (different lengths, joining at different times,
//! prompts longer than a prefill chunk) equal the same prompts run alone; a
//! cancelled job frees its row and the KV memory returns to zero; an idle
//! engine returns its cached buffers after the grace.

mod common;

use std::{path::Path, time::Duration};

use common::{fixture, write_dummy};
use hearth::{
    engine::{sampling::SamplingParams, Engine, EngineOptions, GenerateRequest, GenerationEvent},
    scheduler::{FinishReason, Job, JobEvent, SchedulerConfig, SchedulerHandle},
};
use hearth_models::{BatchKv, BatchShape, CacheView, DecodeStep, PrefillBatch, PrefillChunk};
use mlx_rs::{ops::indexing::IndexOp, Array};

fn alone(engine: &Engine, prompt: &[u32], n: usize, sampling: SamplingParams) -> Vec<u32> {
    let mut request = GenerateRequest::new(prompt.to_vec(), n);
    request.stop_at_eos = false;
    request.sampling = sampling;
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

fn collect(mut handle: hearth::scheduler::JobHandle) -> (Vec<u32>, FinishReason, usize) {
    let mut tokens = Vec::new();
    loop {
        match handle.events.blocking_recv().expect("event") {
            JobEvent::Token(s) => tokens.push(s.token),
            JobEvent::Finished(summary) => {
                return (tokens, summary.reason, summary.completion_tokens)
            }
            JobEvent::Failed(e) => panic!("job failed: {e}"),
        }
    }
}

fn prompts(tokenizer: &hearth_models::Tokenizer) -> Vec<Vec<u32>> {
    let texts = [
        "The capital of France is",
        "Write a haiku about the sea.",
        "1, 2, 3, 4,",
        "Once upon a time, in a land far away, there lived a",
        "def fibonacci(n):",
        "The quick brown fox",
        "Hello",
        "In 1969, the first humans",
    ];
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            // Vary lengths a lot: repeat some prompts to span prefill chunks.
            let text = t.repeat(1 + (i % 3) * 6);
            tokenizer.encode(&text, true).unwrap()
        })
        .collect()
}

/// A dummy checkpoint of `arch` at `shape` (f32, the Qwen3 tokenizer) in `dir`.
fn dummy(dir: &Path, arch: &str, shape: &str, seed: u64) {
    write_dummy(dir, arch, shape, seed);
}

fn check_batched_equals_alone(model: &Path, config: SchedulerConfig, n: usize) {
    check_batched_equals_alone_with(model, config, n, |_| SamplingParams::default());
}

/// Like [`check_batched_equals_alone`], with prompt `i` sampled by `sampling(i)`.
fn check_batched_equals_alone_with(
    model: &Path,
    config: SchedulerConfig,
    n: usize,
    sampling: impl Fn(usize) -> SamplingParams,
) {
    let engine = Engine::new(
        hearth_models::load(model).unwrap(),
        EngineOptions::default(),
    );
    let prompts = prompts(&engine.model.tokenizer);
    let expected: Vec<Vec<u32>> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| alone(&engine, p, n, sampling(i)))
        .collect();
    drop(engine);

    let scheduler = SchedulerHandle::start(model.to_path_buf(), config).unwrap();
    // A warm-up at load (when configured) leaves no counts and no memory.
    let status = scheduler.status();
    assert_eq!(
        (status.requests_total, status.generated_tokens_total),
        (0, 0)
    );
    assert_eq!((status.running, status.kv_bytes_allocated), (0, 0));
    // Submit with staggered starts so sequences join a running batch.
    let mut handles = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let job = Job {
            prompt_tokens: p.clone(),
            max_tokens: n,
            sampling: sampling(i),
            stop_at_eos: false,
        };
        handles.push(scheduler.submit(job).unwrap());
        if i % 3 == 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    for (i, h) in handles.into_iter().enumerate() {
        let (tokens, reason, count) = collect(h);
        assert_eq!(reason, FinishReason::Length);
        assert_eq!(count, tokens.len(), "usage counts the streamed tokens");
        assert_eq!(
            tokens, expected[i],
            "prompt {i}: batched output differs from alone"
        );
    }
    scheduler.shutdown(Duration::from_secs(1));
}

#[test]
fn real_model_batched_equals_alone() {
    // Pipelined decode (the GPU default) is what this checks; `mixed_*`
    // below covers its switching to synchronous steps.
    let config = SchedulerConfig {
        max_running: 8,
        prefill_chunk: 16,
        step_token_budget: 48,
        pipeline_decode: true,
        ..Default::default()
    };
    check_batched_equals_alone(&fixture("SmolLM2-135M-Instruct.Q4_1.gguf"), config, 24);
}

#[test]
fn dummy_qwen3_batched_equals_alone() {
    let dir = tempfile::tempdir().unwrap();
    dummy(dir.path(), "qwen3", "tiny,layers=3", 3);
    let config = SchedulerConfig {
        max_running: 4, // fewer rows than jobs: some wait in the queue
        prefill_chunk: 8,
        step_token_budget: 20,
        // The GPU default: batches of 1..=4 rows run once before serving.
        warmup: true,
        ..Default::default()
    };
    check_batched_equals_alone(dir.path(), config, 16);
}

/// Seeded sampling and penalties under batching: rows with a presence
/// penalty need their last token read back before the next step, so steps
/// switch between pipelined and synchronous decode as such jobs come and go;
/// both must give what each job gives alone. (A real model: a tiny dummy one
/// barely attends, so it would not notice a token written at a wrong
/// position.)
#[test]
fn real_model_mixed_sampling_batched_equals_alone() {
    let sampling = |i: usize| {
        let mut p = SamplingParams {
            temperature: 0.0,
            ..Default::default()
        };
        match i % 3 {
            0 => {}
            1 => {
                p.temperature = 0.9;
                p.seed = Some(100 + i as u64);
            }
            _ => p.presence_penalty = 0.7,
        }
        p
    };
    let config = SchedulerConfig {
        max_running: 4,
        prefill_chunk: 16,
        step_token_budget: 40,
        pipeline_decode: true,
        ..Default::default()
    };
    let model = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    check_batched_equals_alone_with(&model, config, 10, sampling);
}

/// Qwen3.5's linear-attention layers carry a recurrent state per row: rows
/// mid-prefill ride along in decode steps without changing it, prompts are
/// read in 8-token chunks with the state carried, and rows freed by
/// finished jobs are reused (more jobs than rows).
#[test]
fn dummy_qwen3_5_batched_equals_alone() {
    let dir = tempfile::tempdir().unwrap();
    dummy(dir.path(), "qwen3_5", "qwen3.5-tiny", 5);
    let config = SchedulerConfig {
        max_running: 4,
        prefill_chunk: 8,
        step_token_budget: 20,
        ..Default::default()
    };
    check_batched_equals_alone(dir.path(), config, 16);
}

#[test]
fn cancelling_frees_the_row_and_memory() {
    let scheduler = SchedulerHandle::start(
        fixture("SmolLM2-135M-Instruct.Q4_1.gguf"),
        SchedulerConfig::default(),
    )
    .unwrap();
    let tokens = scheduler
        .tokenizer()
        .encode("Tell me a long story.", true)
        .unwrap();
    let job = |n| Job {
        prompt_tokens: tokens.clone(),
        max_tokens: n,
        sampling: Default::default(),
        stop_at_eos: false,
    };
    let keep = scheduler.submit(job(8)).unwrap();
    let mut cancel = scheduler.submit(job(10_000)).unwrap();
    // Wait for the cancelled one to be decoding, then drop it.
    match cancel.events.blocking_recv() {
        Some(JobEvent::Token(_)) => {}
        other => panic!("expected a token, got {other:?}"),
    }
    // Status is published at the end of each engine step.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while scheduler.status().kv_bytes_allocated == 0 {
        assert!(std::time::Instant::now() < deadline, "KV never allocated");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(cancel);
    let (tokens, reason, _) = collect(keep);
    assert_eq!((tokens.len(), reason), (8, FinishReason::Length));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = scheduler.status();
        if status.running == 0 && status.kv_bytes_allocated == 0 && status.kv_bytes_used == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not freed: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    scheduler.shutdown(Duration::from_secs(1));
}

/// Prompts that end on their first token (`max_tokens: 1`) while sharing
/// one batched prefill pass: each gets its token and ends, and the pass's
/// other sequences carry on. (Ending one sequence moves others in the
/// engine's list; the first version kept indexing the list by the pass's
/// old positions and took the engine down with an out-of-bounds index.)
#[test]
fn prompts_ending_on_their_first_token_in_one_batched_pass() {
    let scheduler = SchedulerHandle::start(
        fixture("SmolLM2-135M-Instruct.Q4_1.gguf"),
        SchedulerConfig::default(),
    )
    .unwrap();
    let job = |text: &str, max_tokens| Job {
        prompt_tokens: scheduler.tokenizer().encode(text, true).unwrap(),
        max_tokens,
        sampling: Default::default(),
        stop_at_eos: false,
    };
    let mut long = scheduler
        .submit(job("Tell me a long story about a lighthouse.", 24))
        .unwrap();
    // While it decodes, the next prompts arrive within one step: they are
    // admitted together and read in one pass, shortest first, behind it.
    match long.events.blocking_recv() {
        Some(JobEvent::Token(_)) => {}
        other => panic!("expected a token, got {other:?}"),
    }
    let short: Vec<_> = [
        ("Hi.", 1),
        ("What is two plus two?", 1),
        ("Name three colours of the rainbow, please.", 1),
        ("Write one sentence about the sea and the wind.", 3),
    ]
    .into_iter()
    .map(|(text, n)| scheduler.submit(job(text, n)).unwrap())
    .collect();
    for (handle, want) in short.into_iter().zip([1, 1, 1, 3]) {
        let (tokens, reason, _) = collect(handle);
        assert_eq!((tokens.len(), reason), (want, FinishReason::Length));
    }
    let (rest, reason, _) = collect(long);
    assert_eq!((rest.len() + 1, reason), (24, FinishReason::Length));
    scheduler.shutdown(Duration::from_secs(1));
}

/// Runs five short prompts as a burst, each sent `apart` after
/// the last to an idle engine; returns the prompt passes taken, after
/// checking that each job gives what it gives alone.
fn burst_passes(config: SchedulerConfig, apart: Duration) -> u64 {
    let model = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    let engine = Engine::new(
        hearth_models::load(&model).unwrap(),
        EngineOptions::default(),
    );
    let prompts: Vec<Vec<u32>> = [
        "The capital of France is",
        "Write a haiku about the sea.",
        "1, 2, 3, 4,",
        "def fibonacci(n):",
        "In 1969, the first humans",
    ]
    .iter()
    .map(|t| engine.model.tokenizer.encode(t, true).unwrap())
    .collect();
    let expected: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| alone(&engine, p, 6, SamplingParams::default()))
        .collect();
    drop(engine);
    let scheduler = SchedulerHandle::start(model, config).unwrap();
    let mut handles = Vec::new();
    for p in &prompts {
        let job = Job {
            prompt_tokens: p.clone(),
            max_tokens: 6,
            sampling: SamplingParams::default(),
            stop_at_eos: false,
        };
        handles.push(scheduler.submit(job).unwrap());
        std::thread::sleep(apart);
    }
    for (handle, want) in handles.into_iter().zip(expected) {
        let (tokens, reason, _) = collect(handle);
        assert_eq!(reason, FinishReason::Length);
        assert_eq!(tokens, want, "a burst's job gives what it gives alone");
    }
    let passes = scheduler.status().prefill_passes;
    scheduler.shutdown(Duration::from_secs(1));
    passes
}

/// Requests sent together to an idle engine share its first prompt pass:
/// it gathers those that arrive within `gather` of each other, and while
/// nothing decodes, a step reads up to `burst_token_budget` prompt tokens,
/// past its own budget (here smaller than the five prompts). With neither
/// (the scheduler of before), the same burst takes several passes.
#[test]
fn a_burst_of_requests_shares_one_prompt_pass() {
    let config = |burst: usize, gather: Duration| SchedulerConfig {
        max_running: 8,
        prefill_chunk: 64,
        step_token_budget: 40,
        burst_token_budget: burst,
        gather,
        ..Default::default()
    };
    let apart = Duration::from_millis(15);
    let together = burst_passes(config(1024, Duration::from_millis(250)), apart);
    assert_eq!(together, 1, "one pass for the whole burst");
    let before = burst_passes(config(40, Duration::ZERO), apart);
    assert!(
        before >= 2,
        "{before} passes without gathering or the burst budget"
    );
}

/// An idle engine keeps the freed buffers cached for `idle_release`, so a
/// request arriving within it allocates nothing, then returns them to the
/// device once; a request after that still runs. The grace must outlast a
/// request: on a slow 2-core box, with the other tests of this file running
/// beside it, a 4-token request of SmolLM2 took over 2 s.
#[test]
fn idle_engine_returns_cached_buffers_after_the_grace() {
    let grace = Duration::from_secs(12);
    let scheduler = SchedulerHandle::start(
        fixture("SmolLM2-135M-Instruct.Q4_1.gguf"),
        SchedulerConfig {
            idle_release: grace,
            ..SchedulerConfig::default()
        },
    )
    .unwrap();
    let tokens = scheduler.tokenizer().encode("Hello there.", true).unwrap();
    let job = || Job {
        prompt_tokens: tokens.clone(),
        max_tokens: 4,
        sampling: Default::default(),
        stop_at_eos: false,
    };
    let (first, _, _) = collect(scheduler.submit(job()).unwrap());
    let idle_since = std::time::Instant::now();
    assert_eq!(scheduler.status().cache_releases, 0, "released at once");
    // A request within the grace: served, and the cache is still held.
    let (again, _, _) = collect(scheduler.submit(job()).unwrap());
    assert_eq!(again.len(), first.len());
    let idle_since_again = std::time::Instant::now();
    assert_eq!(scheduler.status().cache_releases, 0);
    assert!(idle_since.elapsed() < grace, "the test itself was too slow");
    let deadline = idle_since_again + grace + Duration::from_secs(20);
    while scheduler.status().cache_releases == 0 {
        assert!(std::time::Instant::now() < deadline, "never released");
        std::thread::sleep(Duration::from_millis(20));
    }
    let waited = idle_since_again.elapsed();
    assert!(
        waited >= grace - Duration::from_millis(300),
        "after {waited:?}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        scheduler.status().cache_releases,
        1,
        "released once per idle spell"
    );
    let (late, reason, _) = collect(scheduler.submit(job()).unwrap());
    assert_eq!((late.len(), reason), (4, FinishReason::Length));
    scheduler.shutdown(Duration::from_secs(1));
}

/// Runs the model on `ids` (`[n, L]`) through `views`, returning logits `[n, vocab]`.
fn pass(model: &hearth_models::Model, ids: &[i32], n: i32, views: &mut [CacheView]) -> Array {
    let l = ids.len() as i32 / n;
    let logits = model
        .forward(&Array::from_slice(ids, &[n, l]), views, true)
        .unwrap();
    let logits = logits.reshape(&[n, -1]).unwrap();
    logits.eval().unwrap();
    logits
}

/// Largest difference between `a` and `b`, relative to `a`'s largest magnitude.
fn relative_gap(a: &Array, b: &Array) -> f32 {
    let gap = a.subtract(b).unwrap().abs().unwrap().max(None).unwrap();
    let scale = a.abs().unwrap().max(None).unwrap();
    gap.item_cast::<f32>() / scale.item_cast::<f32>().max(1e-6)
}

/// One batched prefill pass over chunks of several rows (one mid-prompt,
/// one in a row a finished sequence used, different lengths, so padding)
/// gives each row the logits and the cache (KV and recurrent state: the
/// decode step after reads both) that a pass per chunk gives.
fn check_prefill_batch_matches_a_pass_per_chunk(path: &Path) {
    let model = hearth_models::load(path).unwrap().model;
    let kv_heads = model.config.num_key_value_heads;
    let shape = BatchShape {
        rows: 4,
        capacity: 256,
    };
    let vocab = model.config.vocab_size.min(4000) as i32;
    let prompt = |seed: i32, len: usize| -> Vec<i32> {
        (0..len as i32)
            .map(|i| (i * 37 + seed * 101) % vocab)
            .collect()
    };
    let (p0, p1, p3, stale) = (prompt(1, 13), prompt(2, 20), prompt(3, 7), prompt(4, 9));
    // Both worlds: row 1 has read 9 tokens, row 3 holds a finished
    // sequence's cache.
    let world = || -> Vec<BatchKv> {
        let mut kv: Vec<BatchKv> = (0..model.num_layers()).map(|_| BatchKv::new()).collect();
        for (row, ids) in [(1, &p1[..9]), (3, &stale[..])] {
            let mut views = BatchKv::prefill_views(&mut kv, shape, row, 0);
            pass(&model, ids, 1, &mut views);
        }
        kv
    };
    // A pass per chunk.
    let mut one = world();
    let mut expected = Vec::new();
    for (row, start, ids) in [(0, 0, &p0[..]), (1, 9, &p1[9..]), (3, 0, &p3[..])] {
        let mut views = BatchKv::prefill_views(&mut one, shape, row, start);
        expected.push(pass(&model, ids, 1, &mut views));
    }
    // One pass, rows right-padded.
    let mut batched = world();
    let chunks = vec![
        PrefillChunk {
            row: 1,
            start: 9,
            len: 11,
        },
        PrefillChunk {
            row: 3,
            start: 0,
            len: 7,
        },
        PrefillChunk {
            row: 0,
            start: 0,
            len: 13,
        },
    ];
    let batch = PrefillBatch::new(shape, kv_heads, chunks).unwrap();
    // The widest chunk, 13, rounded up to a multiple of 16.
    assert_eq!((batch.rows(), batch.width()), (3, 16));
    let mut ids = vec![0i32; 3 * 16];
    for (k, part) in [&p1[9..], &p3[..], &p0[..]].iter().enumerate() {
        ids[k * 16..k * 16 + part.len()].copy_from_slice(part);
    }
    let mut views = BatchKv::prefill_batch_views(&mut batched, &batch);
    let got = pass(&model, &ids, 3, &mut views);
    drop(views);
    // Batch order: row 1, row 3, row 0.
    for (k, want) in [&expected[1], &expected[2], &expected[0]]
        .into_iter()
        .enumerate()
    {
        let row = got.index(k as i32..k as i32 + 1);
        let gap = relative_gap(want, &row);
        assert!(gap < 1e-3, "chunk {k}: logits differ by {gap}");
    }
    // A decode step over rows 0..4 (row 2 idle) reads what each wrote.
    let step_logits = |kv: &mut Vec<BatchKv>| -> Array {
        let step = DecodeStep::new(shape, kv_heads, vec![13, 20, 0, 7])
            .with_active_rows(&[true, true, false, true]);
        let mut views = BatchKv::decode_views(kv, &step);
        pass(&model, &[5, 6, 0, 7], 4, &mut views)
    };
    let (want, got) = (step_logits(&mut one), step_logits(&mut batched));
    for row in [0, 1, 3] {
        let gap = relative_gap(&want.index(row..row + 1), &got.index(row..row + 1));
        assert!(gap < 1e-3, "row {row}: next step's logits differ by {gap}");
    }
}

#[test]
fn real_model_prefill_batch_matches_a_pass_per_chunk() {
    check_prefill_batch_matches_a_pass_per_chunk(&fixture("SmolLM2-135M-Instruct.Q4_1.gguf"));
}

#[test]
fn dummy_qwen3_5_prefill_batch_matches_a_pass_per_chunk() {
    let dir = tempfile::tempdir().unwrap();
    dummy(dir.path(), "qwen3_5", "qwen3.5-tiny", 6);
    check_prefill_batch_matches_a_pass_per_chunk(dir.path());
}

type Ops = std::collections::BTreeMap<String, usize>;

/// Three decode steps of rows prefilled to `lens` under the plain and the
/// lean decode graphs (hearth_models::lean): the logits must agree; returns
/// the primitives of each one's first step and the model's layer count.
fn lean_and_plain_steps(path: &Path, lens: &[usize]) -> (Ops, Ops, usize) {
    // The switch is process-wide: one test flips it at a time.
    static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    let model = hearth_models::load(path).unwrap().model;
    let kv_heads = model.config.num_key_value_heads;
    let layers = model.num_layers();
    let shape = BatchShape {
        rows: 4,
        capacity: 256,
    };
    let run = |plain: bool| -> (Vec<Array>, Ops) {
        hearth_models::lean::set_plain(plain);
        let mut kv: Vec<BatchKv> = (0..layers).map(|_| BatchKv::new()).collect();
        for (row, &len) in lens.iter().enumerate() {
            let ids: Vec<i32> = (0..len as i32).map(|i| 100 + i * 13 + row as i32).collect();
            let mut views = BatchKv::prefill_views(&mut kv, shape, row, 0);
            pass(&model, &ids, 1, &mut views);
        }
        let mut positions = lens.to_vec();
        let mut logits = Vec::new();
        let mut ops = Ops::new();
        for step in 0..3 {
            let decode = DecodeStep::new(shape, kv_heads, positions.clone());
            let mut views = BatchKv::decode_views(&mut kv, &decode);
            let ids: Vec<i32> = (0..lens.len() as i32).map(|r| 7 + step + 300 * r).collect();
            let ids = Array::from_slice(&ids, &[lens.len() as i32, 1]);
            let out = model.forward(&ids, &mut views, true).unwrap();
            drop(views);
            if step == 0 {
                ops = hearth::tools::step_ops::count_primitives(&[&out]).unwrap();
            }
            out.eval().unwrap();
            logits.push(out);
            positions.iter_mut().for_each(|p| *p += 1);
        }
        hearth_models::lean::set_plain(false);
        (logits, ops)
    };
    let (plain, plain_ops) = run(true);
    let (lean, lean_ops) = run(false);
    for (step, (p, l)) in plain.iter().zip(&lean).enumerate() {
        let gap = relative_gap(p, l);
        assert!(gap < 1e-6, "step {step}: logits differ by {gap}");
    }
    (plain_ops, lean_ops, layers)
}

fn count(ops: &Ops, op: &str) -> usize {
    ops.get(op).copied().unwrap_or(0)
}

/// The lean decode graph computes what the plain one does, from caches
/// written the same way, with fewer nodes: per layer, one scatter and one
/// reshape per KV buffer instead of a scatter between three reshapes, and
/// one reshape of the attention output instead of a transpose and a
/// reshape (a real quantized model, three rows).
#[test]
fn lean_decode_graph_has_fewer_nodes_and_the_same_logits() {
    let path = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    let (plain, lean, layers) = lean_and_plain_steps(&path, &[5, 11, 8]);
    let (p, l): (usize, usize) = (plain.values().sum(), lean.values().sum());
    let shown = format!("plain {p} nodes {plain:?}, lean {l} nodes {lean:?}");
    assert!(
        count(&plain, "Reshape") >= count(&lean, "Reshape") + 4 * layers,
        "{shown}"
    );
    assert_eq!(
        count(&plain, "Transpose"),
        count(&lean, "Transpose") + layers,
        "{shown}"
    );
    // The step's one row index (a view of a padded buffer) is all it adds.
    assert!(p >= l + 5 * layers - 1, "{shown}");
    assert_eq!(count(&lean, "Scatter"), 2 * layers, "{shown}");
}

/// A one-row step of a dense model: each dense product is one node (no
/// transpose, flatten and unflatten around MLX's matmul), same logits.
#[test]
fn lean_one_row_dense_products_are_one_node_each() {
    let dir = tempfile::tempdir().unwrap();
    dummy(dir.path(), "qwen3", "tiny,layers=3", 11);
    let (plain, lean, layers) = lean_and_plain_steps(dir.path(), &[9]);
    let shown = format!("plain {plain:?}, lean {lean:?}");
    // q/k/v, o, gate/up and down: four products a layer.
    assert!(
        count(&plain, "Unflatten") >= count(&lean, "Unflatten") + 4 * layers,
        "{shown}"
    );
    assert!(
        count(&plain, "Flatten") >= count(&lean, "Flatten") + 4 * layers,
        "{shown}"
    );
    assert!(
        count(&plain, "Transpose") >= count(&lean, "Transpose") + 5 * layers,
        "{shown}"
    );
    assert_eq!(count(&plain, "Matmul"), count(&lean, "Matmul"), "{shown}");
}
