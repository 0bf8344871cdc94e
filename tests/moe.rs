//! Qwen3-MoE against mlx-lm, live, on the same files: tiny random f32
//! checkpoints in Hugging Face layout (one tensor per expert) made by our
//! dummy-model tool, and their 4- and 8-bit `mlx_lm.convert -q` conversions
//! (stacked `switch_mlp` experts, 8-bit router). First-forward logits within 1e-4
//! relative error and 32 identical greedy tokens, for short prompts (the
//! unsorted gather path) and prompts spanning several 128-token prefill
//! chunks (tokens sorted by expert); and 4 concurrent prompts of different
//! lengths through the scheduler equal their sequential runs.

mod common;

use std::{ops::ControlFlow, path::Path, time::Duration};

use common::*;
use hearth::{
    engine::{Engine, EngineOptions, GenerateRequest, GenerationEvent},
    scheduler::{FinishReason, Job, JobEvent, SchedulerConfig, SchedulerHandle},
};
use mlx_rs::{Array, Dtype};

const GREEDY_TOKENS: usize = 32;

fn dummy_moe(dir: &Path, shape: &str, seed: u64) {
    write_dummy(dir, "qwen3_moe", shape, seed);
}

fn engine(path: &Path, prefill_chunk: usize) -> Engine {
    let model = hearth_models::load(path).unwrap_or_else(|e| panic!("load {path:?}: {e}"));
    assert_eq!(model.config().model_type, "qwen3_moe");
    Engine::new(model, EngineOptions { prefill_chunk })
}

/// Greedy tokens, not stopping at EOS (as mlx-lm's generate_step).
fn greedy(engine: &Engine, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut request = GenerateRequest::new(prompt.to_vec(), n);
    request.stop_at_eos = false;
    let mut tokens = Vec::new();
    engine
        .generate(&request, |event| {
            if let GenerationEvent::Token { sampled, .. } = event {
                tokens.push(sampled.token);
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    tokens
}

/// Logits for every prompt position from one forward pass, `[L, vocab]` f32.
fn logits(engine: &Engine, prompt: &[u32]) -> Array {
    let ids: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
    let ids = Array::from_slice(&ids, &[1, ids.len() as i32]);
    let mut cache = engine.model.model.new_cache();
    let mut views = hearth_models::KvCache::views(&mut cache);
    engine
        .model
        .model
        .forward(&ids, &mut views, false)
        .unwrap()
        .reshape(&[prompt.len() as i32, -1])
        .unwrap()
        .as_dtype(Dtype::Float32)
        .unwrap()
}

/// max |a - b| / max |b|
fn relative_error(a: &Array, b: &Array) -> f32 {
    assert_eq!(a.shape(), b.shape(), "logit shapes differ");
    let diff = a.subtract(b).unwrap().abs().unwrap().max(None).unwrap();
    let scale = b.abs().unwrap().max(None).unwrap();
    diff.item_cast::<f32>() / scale.item_cast::<f32>()
}

fn prompt_ids(n: usize, seed: u32) -> Vec<u32> {
    // Ordinary text-token ids of the Qwen3 vocabulary (below the specials).
    (0..n as u32)
        .map(|i| (i.wrapping_mul(7919).wrapping_add(seed * 104_729)) % 150_000 + 100)
        .collect()
}

fn assert_parity(model_dir: &Path, prompt: &[u32], prefill_chunk: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let logits_file = tmp.path().join("logits.npy");
    let reference = mlx_lm_reference(
        model_dir,
        Some(prompt),
        None,
        GREEDY_TOKENS,
        Some(&logits_file),
    );
    let engine = engine(model_dir, prefill_chunk);
    let expected = Array::load_numpy(&logits_file).unwrap();
    let err = relative_error(&logits(&engine, prompt), &expected);
    eprintln!(
        "{} ({} tokens): relative error {err:e}",
        model_dir.display(),
        prompt.len()
    );
    assert!(
        err <= 1e-4,
        "{}: first-forward logits differ from mlx-lm: relative error {err:e}",
        model_dir.display()
    );
    let tokens = greedy(&engine, prompt, GREEDY_TOKENS);
    assert_eq!(
        tokens,
        reference.tokens,
        "{}: greedy tokens differ from mlx-lm",
        model_dir.display()
    );
}

#[test]
fn qwen3_moe_f32_matches_mlx_lm() {
    // All layers sparse, renormalised top-k (Qwen3-30B-A3B's settings).
    let dir = tempfile::tempdir().unwrap();
    dummy_moe(dir.path(), "qwen3-moe-tiny", 7);
    assert_parity(dir.path(), &prompt_ids(23, 1), 512);

    // Dense and sparse layers mixed (decoder_sparse_step = 2: only layer 1 is
    // sparse), raw top-k weights.
    let dir = tempfile::tempdir().unwrap();
    dummy_moe(
        dir.path(),
        "qwen3-moe-tiny,layers=3,sparse_step=2,norm_topk=false,experts=6,top_k=3",
        11,
    );
    assert_parity(dir.path(), &prompt_ids(17, 4), 512);
}

#[test]
fn qwen3_moe_prompt_spanning_several_prefill_chunks_matches_mlx_lm() {
    let dir = tempfile::tempdir().unwrap();
    dummy_moe(dir.path(), "qwen3-moe-tiny,layers=3", 5);
    // 600 tokens in chunks of 128: four full chunks plus a remainder; each
    // chunk routes 256 token/expert pairs, so they are sorted by expert.
    assert_parity(dir.path(), &prompt_ids(600, 2), 128);
}

#[test]
fn qwen3_moe_mlx_lm_quantized_conversions_match() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("f32");
    // Input widths divisible by MLX's group size (64).
    dummy_moe(&source, "qwen3-moe-tiny,hidden=128,ffn=256,moe_ffn=64", 9);
    for bits in [4, 8] {
        let out = dir.path().join(format!("q{bits}"));
        run_python(&[
            "-m",
            "mlx_lm.convert",
            "--hf-path",
            source.to_str().unwrap(),
            "--mlx-path",
            out.to_str().unwrap(),
            "-q",
            "--q-bits",
            &bits.to_string(),
        ]);
        // mlx-lm stacks the experts and quantizes the router at 8 bits.
        let config = hearth_models::ModelConfig::from_dir(&out).unwrap();
        let q = config.quantization.as_ref().unwrap();
        assert_eq!(q.default.unwrap().bits, bits);
        assert_eq!(q.for_module("model.layers.0.mlp.gate").unwrap().bits, 8);
        let tensors = Array::load_safetensors(out.join("model.safetensors")).unwrap();
        let experts = tensors
            .get("model.layers.0.mlp.switch_mlp.gate_proj.weight")
            .expect("stacked experts");
        assert_eq!(experts.dtype(), Dtype::Uint32, "quantized experts");
        assert!(tensors.contains_key("model.layers.0.mlp.gate.scales"));
        // 19 tokens: 38 token/expert pairs, unsorted; 40 tokens: 80, sorted.
        assert_parity(&out, &prompt_ids(19, 3), 512);
        assert_parity(&out, &prompt_ids(40, 6), 512);
    }
}

fn collect(mut handle: hearth::scheduler::JobHandle) -> Vec<u32> {
    let mut tokens = Vec::new();
    loop {
        match handle.events.blocking_recv().expect("event") {
            JobEvent::Token(s) => tokens.push(s.token),
            JobEvent::Finished(summary) => {
                assert_eq!(summary.reason, FinishReason::Length);
                return tokens;
            }
            JobEvent::Failed(e) => panic!("job failed: {e}"),
        }
    }
}

#[test]
fn qwen3_moe_batched_equals_alone() {
    let dir = tempfile::tempdir().unwrap();
    dummy_moe(dir.path(), "qwen3-moe-tiny,layers=3", 3);
    let n = 24;
    let prompts: Vec<Vec<u32>> = [(5, 1), (37, 2), (90, 3), (150, 4)]
        .iter()
        .map(|&(len, seed)| prompt_ids(len, seed))
        .collect();
    let engine = engine(dir.path(), 512);
    let expected: Vec<Vec<u32>> = prompts.iter().map(|p| greedy(&engine, p, n)).collect();
    drop(engine);

    let config = SchedulerConfig {
        max_running: 4,
        prefill_chunk: 32,
        step_token_budget: 64,
        ..Default::default()
    };
    let scheduler = SchedulerHandle::start(dir.path().to_path_buf(), config).unwrap();
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| {
            let job = Job {
                prompt_tokens: p.clone(),
                max_tokens: n,
                sampling: Default::default(),
                stop_at_eos: false,
            };
            scheduler.submit(job).unwrap()
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(
            collect(h),
            expected[i],
            "prompt {i} ({} tokens): batched output differs from alone",
            prompts[i].len()
        );
    }
    scheduler.shutdown(Duration::from_secs(1));
}

/// The block alone against mlx-lm's `Qwen3NextSparseMoeBlock` (routed experts
/// plus a sigmoid-gated shared expert, as Qwen3.5-MoE uses): dense weights in
/// Hugging Face's fused `experts.gate_up_proj` layout, and the same block
/// quantized by MLX (4-bit experts, 8-bit router and shared-expert gate).
#[test]
fn shared_expert_block_matches_mlx_lm() {
    use hearth_models::{
        config::{QuantConfig, QuantParams},
        moe::{MoeConfig, SparseMoe},
        weights::WeightFormat,
        Weights,
    };
    let dir = tempfile::tempdir().unwrap();
    let out = run_python_json(&[
        repo_root()
            .join("tests/parity/moe_block_ref.py")
            .to_str()
            .unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out["gate_bits"], 8);
    assert_eq!(out["expert_bits"], 4);
    let moe = MoeConfig {
        num_experts: 8,
        top_k: 4,
        moe_intermediate_size: 64,
        norm_topk_prob: true,
        decoder_sparse_step: 1,
        mlp_only_layers: Vec::new(),
        shared_expert_intermediate_size: 128,
    };
    for (file, expected, quant) in [
        ("hf.safetensors", "dense", None),
        (
            "q.safetensors",
            "q",
            Some(QuantConfig {
                default: Some(QuantParams {
                    group_size: 64,
                    bits: 4,
                }),
                overrides: Default::default(),
            }),
        ),
    ] {
        let path = dir.path().join(file);
        let tensors = Array::load_safetensors(&path).unwrap();
        let mut weights = Weights::new(tensors, quant, WeightFormat::Safetensors, path.clone());
        let block = SparseMoe::load(&mut weights, "mlp", 128, &moe).unwrap();
        assert!(weights.leftover().is_empty(), "{:?}", weights.leftover());
        for i in 0..out["inputs"].as_u64().unwrap() {
            let x = Array::load_numpy(dir.path().join(format!("x{i}.npy"))).unwrap();
            let want = Array::load_numpy(dir.path().join(format!("{expected}{i}.npy"))).unwrap();
            let err = relative_error(&block.forward(&x).unwrap(), &want);
            eprintln!("{file} input {i} {:?}: relative error {err:e}", x.shape());
            assert!(err <= 1e-5, "{file} input {i}: relative error {err:e}");
        }
    }
}

/// Runs a reference script from the venv and parses its JSON stdout.
fn run_python_json(args: &[&str]) -> serde_json::Value {
    let output = std::process::Command::new(python())
        .args(args)
        .output()
        .expect("run python");
    assert!(
        output.status.success(),
        "python {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("reference JSON")
}
