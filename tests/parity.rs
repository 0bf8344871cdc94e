//! Hearth against mlx-lm, live, on the same files: first-forward logits within
//! 1e-4 relative error and 32 identical greedy tokens, for every dense
//! architecture (f32 dummy checkpoints made by our own tool), for MLX 4- and
//! 8-bit quantization done by `mlx_lm.convert`, for prompts spanning several
//! prefill chunks, and for the real SmolLM2 weights (GGUF loaded directly vs
//! the folder `hearth convert` writes, loaded by mlx-lm).

mod common;

use std::{ops::ControlFlow, path::Path};

use common::*;
use hearth::engine::{Engine, EngineOptions, GenerateRequest, GenerationEvent};
use mlx_rs::{Array, Dtype};

const GREEDY_TOKENS: usize = 32;

fn dummy(arch: &str, dir: &Path, shape: &str) {
    write_dummy(dir, arch, shape, 7);
}

fn engine(path: &Path, prefill_chunk: usize) -> Engine {
    let model = hearth_models::load(path).unwrap_or_else(|e| panic!("load {path:?}: {e}"));
    Engine::new(model, EngineOptions { prefill_chunk })
}

/// Greedy tokens from Hearth, not stopping at EOS (as mlx-lm's generate_step).
fn hearth_greedy(engine: &Engine, prompt: &[u32], n: usize) -> Vec<u32> {
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

/// Hearth's logits for every prompt position, `[L, vocab]` f32.
fn hearth_logits(engine: &Engine, prompt: &[u32]) -> Array {
    let ids: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
    let ids = Array::from_slice(&ids, &[1, ids.len() as i32]);
    let mut cache = engine.model.model.new_cache();
    let mut views = hearth_models::KvCache::views(&mut cache);
    let logits = engine.model.model.forward(&ids, &mut views, false).unwrap();
    logits
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

fn assert_parity(model_dir: &Path, prompt: &[u32], prefill_chunk: usize, check_logits: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let logits_file = tmp.path().join("logits.npy");
    let reference = mlx_lm_reference(
        model_dir,
        Some(prompt),
        None,
        GREEDY_TOKENS,
        check_logits.then_some(logits_file.as_path()),
    );
    let engine = engine(model_dir, prefill_chunk);
    if check_logits {
        let expected = Array::load_numpy(&logits_file).unwrap();
        let ours = hearth_logits(&engine, prompt);
        let err = relative_error(&ours, &expected);
        assert!(
            err <= 1e-4,
            "{}: first-forward logits differ from mlx-lm: relative error {err:e}",
            model_dir.display()
        );
    }
    let tokens = hearth_greedy(&engine, prompt, GREEDY_TOKENS);
    assert_eq!(
        tokens,
        reference.tokens,
        "{}: greedy tokens differ from mlx-lm",
        model_dir.display()
    );
}

/// The same checkpoint with its quantized weights expanded to float32 at
/// load (`QuantizedWeights::Float32`, what `hearth serve` does on a CPU when
/// they fit): first-forward logits within 1e-3 relative error of the
/// quantized model's and the same greedy tokens. Not 1e-4: MLX's quantized
/// product and a dense float32 one on the same values round differently,
/// and through SmolLM2's 30 layers that comes to 6.5e-4, the same in mlx-lm
/// itself (its `QuantizedLinear`/`QuantizedEmbedding` swapped for
/// `Linear`/`Embedding` of the dequantized weights, docs/mlx-on-linux.md).
fn assert_float32_matches_quantized(path: &Path, prompt: &[u32], prefill_chunk: usize) {
    let quantized = engine(path, prefill_chunk);
    let options = hearth_models::LoadOptions {
        quantized: hearth_models::QuantizedWeights::Float32,
    };
    let model = hearth_models::load_with_options(path, options, &mut |_| {})
        .unwrap_or_else(|e| panic!("load {path:?} as float32: {e}"));
    let expanded = Engine::new(model, EngineOptions { prefill_chunk });
    let (q_bytes, f_bytes) = (
        quantized.model.model.nbytes(),
        expanded.model.model.nbytes(),
    );
    assert!(
        f_bytes >= 3 * q_bytes,
        "{}: float32 weights take {f_bytes} B, quantized {q_bytes} B: not expanded",
        path.display()
    );
    let err = relative_error(
        &hearth_logits(&expanded, prompt),
        &hearth_logits(&quantized, prompt),
    );
    assert!(
        err <= 1e-3,
        "{}: float32 weights' logits differ from the quantized model's: relative error {err:e}",
        path.display()
    );
    assert_eq!(
        hearth_greedy(&expanded, prompt, GREEDY_TOKENS),
        hearth_greedy(&quantized, prompt, GREEDY_TOKENS),
        "{}: float32 weights' greedy tokens differ from the quantized model's",
        path.display()
    );
}

#[test]
fn dense_architectures_match_mlx_lm() {
    for arch in ["llama", "qwen2", "qwen3"] {
        let dir = tempfile::tempdir().unwrap();
        dummy(arch, dir.path(), "tiny");
        assert_parity(dir.path(), &prompt_ids(23, 1), 512, true);
    }
}

#[test]
fn prompt_spanning_several_prefill_chunks_matches_mlx_lm() {
    let dir = tempfile::tempdir().unwrap();
    dummy("qwen3", dir.path(), "tiny,layers=3");
    // 700 tokens in chunks of 128: six chunks plus a remainder, and past the
    // KV cache's first growth step.
    assert_parity(dir.path(), &prompt_ids(700, 2), 128, true);
}

#[test]
fn mlx_lm_quantized_models_match() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("f32");
    // hidden 128: MLX quantization needs rows divisible by the group size (64).
    dummy("qwen3", &source, "tiny,hidden=128,ffn=256");
    for bits in ["4", "8"] {
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
            bits,
        ]);
        let config = hearth_models::ModelConfig::from_dir(&out).unwrap();
        let q = config
            .quantization
            .as_ref()
            .and_then(|q| q.default)
            .unwrap();
        assert_eq!(q.bits.to_string(), bits);
        assert_parity(&out, &prompt_ids(19, 3), 512, true);
        assert_float32_matches_quantized(&out, &prompt_ids(19, 3), 512);
    }
}

#[test]
fn smollm2_gguf_matches_mlx_lm_on_converted_folder() {
    let gguf = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("smollm2-mlx");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["convert", "--model"])
        .arg(&gguf)
        .arg("--out")
        .arg(&folder)
        .status()
        .unwrap();
    assert!(status.success(), "hearth convert failed");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["quantization"]["group_size"], 32);
    assert_eq!(config["quantization"]["bits"], 4);

    let prompt = "The capital of France is";
    let reference = mlx_lm_reference(&folder, None, Some(prompt), GREEDY_TOKENS, None);
    // Hearth reads the GGUF itself (not the converted folder).
    let engine = engine(&gguf, 512);
    let ids = engine.model.tokenizer.encode(prompt, true).unwrap();
    assert_eq!(ids, reference.prompt_ids, "prompt tokenization differs");
    let tokens = hearth_greedy(&engine, &ids, GREEDY_TOKENS);
    assert_eq!(tokens, reference.tokens, "greedy tokens differ from mlx-lm");
    let text = engine.model.tokenizer.decode(&tokens, true).unwrap();
    assert!(
        text.trim_start().starts_with("Paris"),
        "expected ' Paris', got {text:?}"
    );
    // The converted folder loads in Hearth too, with the same result.
    let from_folder = engine_tokens(&folder, &ids);
    assert_eq!(from_folder, tokens);
    assert_float32_matches_quantized(&gguf, &ids, 512);
}

fn engine_tokens(path: &Path, ids: &[u32]) -> Vec<u32> {
    hearth_greedy(&engine(path, 512), ids, GREEDY_TOKENS)
}

/// Qwen3.5 dense (Gated DeltaNet + gated attention, 3:1): a short prompt, and
/// a long one in prefill chunks of 128 (chunks cross the delta rule's
/// 64-token blocks, with a remainder that needs padding; the recurrent and
/// conv states are carried from chunk to chunk).
#[test]
fn qwen3_5_matches_mlx_lm() {
    let dir = tempfile::tempdir().unwrap();
    dummy("qwen3_5", dir.path(), "qwen3.5-tiny");
    assert_parity(dir.path(), &prompt_ids(23, 4), 512, true);
    assert_parity(dir.path(), &prompt_ids(300, 5), 128, true);
}

/// Qwen3.5-MoE: the same hybrid stack with a routed top-k MoE and a gated
/// shared expert in every layer.
#[test]
fn qwen3_5_moe_matches_mlx_lm() {
    let dir = tempfile::tempdir().unwrap();
    dummy("qwen3_5_moe", dir.path(), "qwen3.5-moe-tiny");
    assert_parity(dir.path(), &prompt_ids(150, 7), 64, true);
}

#[test]
fn qwen3_5_quantized_matches_mlx_lm() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("f32");
    dummy("qwen3_5", &source, "qwen3.5-tiny,hidden=128,ffn=256");
    let out = dir.path().join("q4");
    run_python(&[
        "-m",
        "mlx_lm.convert",
        "--hf-path",
        source.to_str().unwrap(),
        "--mlx-path",
        out.to_str().unwrap(),
        "-q",
        "--q-bits",
        "4",
    ]);
    assert_parity(&out, &prompt_ids(40, 6), 16, true);
    assert_float32_matches_quantized(&out, &prompt_ids(40, 6), 16);
    // MoE: mlx-lm keeps the router and shared-expert gate at 8 bits.
    let source = dir.path().join("moe-f32");
    dummy(
        "qwen3_5_moe",
        &source,
        "qwen3.5-moe-tiny,hidden=128,moe_ffn=64,shared_ffn=64",
    );
    let out = dir.path().join("moe-q4");
    run_python(&[
        "-m",
        "mlx_lm.convert",
        "--hf-path",
        source.to_str().unwrap(),
        "--mlx-path",
        out.to_str().unwrap(),
        "-q",
        "--q-bits",
        "4",
    ]);
    let config = hearth_models::ModelConfig::from_dir(&out).unwrap();
    let q = config.quantization.as_ref().unwrap();
    assert_eq!(
        q.for_module("language_model.model.layers.0.mlp.gate")
            .unwrap()
            .bits,
        8
    );
    assert_parity(&out, &prompt_ids(40, 8), 16, true);
    assert_float32_matches_quantized(&out, &prompt_ids(40, 8), 16);
}
