//! `hearth dev dummy-model`: checkpoints with random weights at real shapes.
//!
//! Throughput does not depend on weight values, so benchmarks and tests use
//! seeded random weights with a real tokenizer instead of downloads. The
//! output is an ordinary Hugging Face / MLX folder (config.json, sharded
//! safetensors with an index when large, tokenizer files) that both Hearth and
//! mlx-lm load.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use mlx_rs::{random, Array, Dtype};
use serde_json::json;

/// Shards are cut at this many bytes (like the hub's 5 GB shards).
const SHARD_BYTES: usize = 4 << 30;

/// Dimensions of a decoder (dense, or sparse MoE when `num_experts > 0`).
#[derive(Debug, Clone, PartialEq)]
pub struct DummyShape {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub intermediate_size: usize,
    /// `None`: the tokenizer's vocabulary size.
    pub vocab_size: Option<usize>,
    pub tie_word_embeddings: bool,
    pub rope_theta: f64,
    pub max_position_embeddings: usize,
    /// Experts per sparse layer; 0 for a dense model.
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    /// Layer `i` is sparse when `(i + 1) % decoder_sparse_step == 0`.
    pub decoder_sparse_step: usize,
    pub norm_topk_prob: bool,
    /// Qwen3.5's linear-attention dimensions, for `qwen3_5*` archs.
    pub hybrid: Option<DummyHybrid>,
}

/// Gated DeltaNet dimensions of a Qwen3.5 shape (every 4th layer is full
/// attention) and, when it has experts, its shared expert's width.
#[derive(Debug, Clone, PartialEq)]
pub struct DummyHybrid {
    pub linear_key_heads: usize,
    pub linear_value_heads: usize,
    pub linear_key_dim: usize,
    pub linear_value_dim: usize,
    pub conv_kernel: usize,
    pub shared_expert_intermediate_size: usize,
}

/// Every `FULL_ATTENTION_INTERVAL`-th layer of a Qwen3.5 shape is full attention.
pub const FULL_ATTENTION_INTERVAL: usize = 4;

/// Named shapes: real models' dimensions, plus tiny ones for tests.
pub const PRESETS: &[&str] = &[
    "tiny",
    "qwen3-0.6b",
    "qwen3-1.7b",
    "qwen3-8b",
    "smollm2-135m",
    "llama-3.2-1b",
    "qwen3.5-tiny",
    "qwen3.5-moe-tiny",
    "qwen3.5-35b-a3b",
    "qwen3-moe-tiny",
    "qwen3-30b-a3b",
];

impl DummyShape {
    pub fn preset(name: &str) -> Option<Self> {
        let s = |h, l, nh, kv, hd, ffn, vocab, tie, theta, ctx| DummyShape {
            hidden_size: h,
            num_hidden_layers: l,
            num_attention_heads: nh,
            num_key_value_heads: kv,
            head_dim: hd,
            intermediate_size: ffn,
            vocab_size: vocab,
            tie_word_embeddings: tie,
            rope_theta: theta,
            max_position_embeddings: ctx,
            num_experts: 0,
            num_experts_per_tok: 0,
            moe_intermediate_size: 0,
            decoder_sparse_step: 1,
            norm_topk_prob: true,
            hybrid: None,
        };
        let moe = |dense: DummyShape, experts, top_k, moe_ffn| DummyShape {
            num_experts: experts,
            num_experts_per_tok: top_k,
            moe_intermediate_size: moe_ffn,
            ..dense
        };
        let hybrid = |mut shape: DummyShape, (kh, vh, kd, vd), shared| {
            shape.hybrid = Some(DummyHybrid {
                linear_key_heads: kh,
                linear_value_heads: vh,
                linear_key_dim: kd,
                linear_value_dim: vd,
                conv_kernel: 4,
                shared_expert_intermediate_size: shared,
            });
            shape
        };
        Some(match name {
            "tiny" => s(64, 2, 4, 2, 16, 128, None, true, 10000.0, 4096),
            "qwen3-0.6b" => s(1024, 28, 16, 8, 128, 3072, Some(151936), true, 1e6, 40960),
            "qwen3-1.7b" => s(2048, 28, 16, 8, 128, 6144, Some(151936), true, 1e6, 40960),
            "qwen3-8b" => s(4096, 36, 32, 8, 128, 12288, Some(151936), false, 1e6, 40960),
            "smollm2-135m" => s(576, 30, 9, 3, 64, 1536, Some(49152), true, 1e5, 8192),
            "llama-3.2-1b" => s(2048, 16, 32, 8, 64, 8192, Some(128256), true, 5e5, 131072),
            "qwen3-moe-tiny" => moe(s(64, 2, 4, 2, 16, 128, None, true, 10000.0, 4096), 8, 2, 32),
            "qwen3-30b-a3b" => moe(
                s(2048, 48, 32, 4, 128, 6144, Some(151936), false, 1e6, 40960),
                128,
                8,
                768,
            ),
            "qwen3.5-tiny" => hybrid(
                s(64, 4, 4, 2, 16, 128, None, true, 1e7, 4096),
                (2, 4, 16, 16),
                0,
            ),
            "qwen3.5-moe-tiny" => hybrid(
                moe(s(64, 4, 4, 2, 16, 0, None, true, 1e7, 4096), 8, 2, 32),
                (2, 4, 16, 16),
                32,
            ),
            // transformers 5.24's Qwen3_5MoeTextConfig defaults.
            "qwen3.5-35b-a3b" => hybrid(
                moe(
                    s(2048, 40, 16, 2, 256, 0, Some(248320), false, 1e7, 262144),
                    256,
                    8,
                    512,
                ),
                (16, 32, 128, 128),
                512,
            ),
            _ => return None,
        })
    }

    /// Parses a preset name, optionally followed by `,key=value` overrides
    /// (`tiny,layers=4,vocab=1000`), or only overrides on top of `tiny`.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut parts = spec.split(',').map(str::trim).filter(|p| !p.is_empty());
        let first = parts.next().unwrap_or("tiny");
        let (mut shape, overrides): (DummyShape, Vec<&str>) = if first.contains('=') {
            (
                Self::preset("tiny").expect("tiny preset"),
                std::iter::once(first).chain(parts).collect(),
            )
        } else {
            let shape = Self::preset(first).with_context(|| {
                format!(
                    "unknown shape preset `{first}` (known: {})",
                    PRESETS.join(", ")
                )
            })?;
            (shape, parts.collect())
        };
        for kv in overrides {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("shape override `{kv}` is not key=value"))?;
            let n = || -> Result<usize> {
                v.parse()
                    .with_context(|| format!("shape override `{kv}`: not a number"))
            };
            match k {
                "hidden" | "hidden_size" => shape.hidden_size = n()?,
                "layers" | "num_hidden_layers" => shape.num_hidden_layers = n()?,
                "heads" | "num_attention_heads" => shape.num_attention_heads = n()?,
                "kv_heads" | "num_key_value_heads" => shape.num_key_value_heads = n()?,
                "head_dim" => shape.head_dim = n()?,
                "ffn" | "intermediate_size" => shape.intermediate_size = n()?,
                "vocab" | "vocab_size" => shape.vocab_size = Some(n()?),
                "context" | "max_position_embeddings" => shape.max_position_embeddings = n()?,
                "tie" => shape.tie_word_embeddings = v == "true" || v == "1",
                "experts" | "num_experts" => shape.num_experts = n()?,
                "top_k" | "num_experts_per_tok" => shape.num_experts_per_tok = n()?,
                "moe_ffn" | "moe_intermediate_size" => shape.moe_intermediate_size = n()?,
                "sparse_step" | "decoder_sparse_step" => shape.decoder_sparse_step = n()?,
                "norm_topk" | "norm_topk_prob" => shape.norm_topk_prob = v == "true" || v == "1",
                "shared_ffn" => {
                    let Some(hy) = shape.hybrid.as_mut() else {
                        bail!("`{k}` needs a qwen3.5 shape");
                    };
                    hy.shared_expert_intermediate_size = n()?;
                }
                _ => bail!("unknown shape key `{k}`"),
            }
        }
        if shape.num_key_value_heads == 0
            || shape.num_attention_heads % shape.num_key_value_heads != 0
        {
            bail!("heads must be a multiple of kv_heads");
        }
        if shape.num_experts > 0
            && (shape.num_experts_per_tok == 0
                || shape.num_experts_per_tok > shape.num_experts
                || shape.moe_intermediate_size == 0
                || shape.decoder_sparse_step == 0)
        {
            bail!("an MoE shape needs 0 < top_k <= experts, moe_ffn > 0 and sparse_step > 0");
        }
        Ok(shape)
    }
}

/// What to write.
#[derive(Debug, Clone)]
pub struct DummySpec {
    pub arch: String,
    pub shape: DummyShape,
    /// A `tokenizer.json`; its sibling `tokenizer_config.json` is copied too.
    pub tokenizer: PathBuf,
    pub dtype: Dtype,
    pub seed: u64,
}

/// Parses `f32`, `f16`/`float16`, `bf16`/`bfloat16`.
pub fn parse_dtype(s: &str) -> Result<Dtype> {
    Ok(match s {
        "f32" | "float32" => Dtype::Float32,
        "f16" | "float16" => Dtype::Float16,
        "bf16" | "bfloat16" => Dtype::Bfloat16,
        _ => bail!("unknown dtype `{s}` (f32, f16, bf16)"),
    })
}

fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::Float16 => "float16",
        Dtype::Bfloat16 => "bfloat16",
        _ => "float32",
    }
}

/// Writes the checkpoint to `out` and returns the parameter count.
pub fn write_dummy_model(spec: &DummySpec, out: &Path) -> Result<usize> {
    let known = [
        "llama",
        "qwen2",
        "qwen3",
        "qwen3_moe",
        "qwen3_5",
        "qwen3_5_moe",
    ];
    if !known.contains(&spec.arch.as_str()) {
        bail!(
            "unknown architecture `{}` ({})",
            spec.arch,
            known.join(", ")
        );
    }
    let moe = spec.arch == "qwen3_moe" || spec.arch == "qwen3_5_moe";
    if moe != (spec.shape.num_experts > 0) {
        bail!(
            "architecture `{}` needs {} shape (e.g. {})",
            spec.arch,
            if moe { "an MoE" } else { "a dense" },
            if moe { "qwen3-moe-tiny" } else { "tiny" }
        );
    }
    let hybrid_arch = spec.arch.starts_with("qwen3_5");
    if hybrid_arch != spec.shape.hybrid.is_some() {
        bail!("qwen3.5-* shapes go with --arch qwen3_5 / qwen3_5_moe, and only they");
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let tokenizer_vocab = copy_tokenizer(&spec.tokenizer, out)?;
    let s = &spec.shape;
    let vocab = s.vocab_size.unwrap_or(tokenizer_vocab);
    if vocab < tokenizer_vocab {
        bail!("vocab_size {vocab} is smaller than the tokenizer's {tokenizer_vocab} tokens");
    }

    // Deterministic tensor list: name, shape, kind.
    let (h, hd, ffn) = (
        s.hidden_size as i32,
        s.head_dim as i32,
        s.intermediate_size as i32,
    );
    let (nh, kv) = (s.num_attention_heads as i32, s.num_key_value_heads as i32);
    let mut tensors: Vec<(String, Vec<i32>, Init)> = vec![(
        "model.embed_tokens.weight".into(),
        vec![vocab as i32, h],
        Init::Normal,
    )];
    for i in 0..s.num_hidden_layers {
        let p = format!("model.layers.{i}");
        if let Some(hy) = &s.hybrid {
            hybrid_layer_tensors(&mut tensors, &p, i, s, hy);
            continue;
        }
        let mut push = |name: &str, shape: Vec<i32>, init: Init| {
            tensors.push((format!("{p}.{name}"), shape, init))
        };
        push("input_layernorm.weight", vec![h], Init::Ones);
        push("post_attention_layernorm.weight", vec![h], Init::Ones);
        push("self_attn.q_proj.weight", vec![nh * hd, h], Init::Normal);
        push("self_attn.k_proj.weight", vec![kv * hd, h], Init::Normal);
        push("self_attn.v_proj.weight", vec![kv * hd, h], Init::Normal);
        push("self_attn.o_proj.weight", vec![h, nh * hd], Init::Normal);
        if spec.arch == "qwen2" {
            push("self_attn.q_proj.bias", vec![nh * hd], Init::Normal);
            push("self_attn.k_proj.bias", vec![kv * hd], Init::Normal);
            push("self_attn.v_proj.bias", vec![kv * hd], Init::Normal);
        }
        if spec.arch == "qwen3" || moe {
            push("self_attn.q_norm.weight", vec![hd], Init::Ones);
            push("self_attn.k_norm.weight", vec![hd], Init::Ones);
        }
        if moe && (i + 1) % s.decoder_sparse_step == 0 {
            // Hugging Face layout: a router and one tensor per expert.
            let (e, mf) = (s.num_experts as i32, s.moe_intermediate_size as i32);
            push("mlp.gate.weight", vec![e, h], Init::Normal);
            for x in 0..e {
                push(
                    &format!("mlp.experts.{x}.gate_proj.weight"),
                    vec![mf, h],
                    Init::Normal,
                );
                push(
                    &format!("mlp.experts.{x}.up_proj.weight"),
                    vec![mf, h],
                    Init::Normal,
                );
                push(
                    &format!("mlp.experts.{x}.down_proj.weight"),
                    vec![h, mf],
                    Init::Normal,
                );
            }
        } else {
            push("mlp.gate_proj.weight", vec![ffn, h], Init::Normal);
            push("mlp.up_proj.weight", vec![ffn, h], Init::Normal);
            push("mlp.down_proj.weight", vec![h, ffn], Init::Normal);
        }
    }
    tensors.push(("model.norm.weight".into(), vec![h], Init::Ones));
    if !s.tie_word_embeddings {
        tensors.push(("lm_head.weight".into(), vec![vocab as i32, h], Init::Normal));
    }

    // Generate and write shard by shard so peak memory stays near one shard.
    let item = match spec.dtype {
        Dtype::Float32 => 4,
        _ => 2,
    };
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let mut bytes = 0usize;
    for (i, (_, shape, _)) in tensors.iter().enumerate() {
        let n: usize = shape.iter().map(|&d| d as usize).product::<usize>() * item;
        if bytes + n > SHARD_BYTES && !shards.last().expect("a shard").is_empty() {
            shards.push(Vec::new());
            bytes = 0;
        }
        bytes += n;
        shards.last_mut().expect("a shard").push(i);
    }
    let total_shards = shards.len();
    let mut weight_map = serde_json::Map::new();
    let mut params = 0usize;
    for (shard_index, members) in shards.iter().enumerate() {
        let file = if total_shards == 1 {
            "model.safetensors".to_string()
        } else {
            format!(
                "model-{:05}-of-{:05}.safetensors",
                shard_index + 1,
                total_shards
            )
        };
        let mut arrays: HashMap<String, Array> = HashMap::new();
        for &i in members {
            let (name, shape, init) = &tensors[i];
            let array = init.make(shape, spec.seed.wrapping_add(i as u64), spec.dtype)?;
            params += array.size();
            weight_map.insert(name.clone(), file.clone().into());
            arrays.insert(name.clone(), array);
        }
        let mut metadata = HashMap::new();
        metadata.insert("format".to_string(), "mlx".to_string());
        Array::save_safetensors(&arrays, &metadata, out.join(&file))
            .with_context(|| format!("writing {}", out.join(&file).display()))?;
    }
    if total_shards > 1 {
        let index = json!({"metadata": {"total_size": params * item}, "weight_map": weight_map});
        std::fs::write(
            out.join("model.safetensors.index.json"),
            serde_json::to_string_pretty(&index)?,
        )?;
    }

    let (bos, eos) = special_ids(&spec.tokenizer)?;
    let architecture = match spec.arch.as_str() {
        "qwen3_5" | "qwen3_5_moe" => "Qwen3_5ForConditionalGeneration",
        "llama" => "LlamaForCausalLM",
        "qwen2" => "Qwen2ForCausalLM",
        "qwen3_moe" => "Qwen3MoeForCausalLM",
        _ => "Qwen3ForCausalLM",
    };
    let mut config = json!({
        "architectures": [architecture],
        "model_type": spec.arch,
        "vocab_size": vocab,
        "hidden_size": s.hidden_size,
        "intermediate_size": s.intermediate_size,
        "num_hidden_layers": s.num_hidden_layers,
        "num_attention_heads": s.num_attention_heads,
        "num_key_value_heads": s.num_key_value_heads,
        "head_dim": s.head_dim,
        "rms_norm_eps": 1e-6,
        "rope_theta": s.rope_theta,
        "max_position_embeddings": s.max_position_embeddings,
        "tie_word_embeddings": s.tie_word_embeddings,
        "attention_bias": spec.arch == "qwen2",
        "hidden_act": "silu",
        "torch_dtype": dtype_name(spec.dtype),
        "bos_token_id": bos,
        "eos_token_id": eos,
        "hearth_dummy": {"seed": spec.seed},
    });
    if moe {
        let extra = json!({
            "num_experts": s.num_experts,
            "num_experts_per_tok": s.num_experts_per_tok,
            "moe_intermediate_size": s.moe_intermediate_size,
            "decoder_sparse_step": s.decoder_sparse_step,
            "mlp_only_layers": [],
            "norm_topk_prob": s.norm_topk_prob,
        });
        if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
    }
    if let Some(hy) = &s.hybrid {
        let extra = json!({
            "architectures": [if moe {
                "Qwen3_5MoeForConditionalGeneration"
            } else {
                "Qwen3_5ForConditionalGeneration"
            }],
            "linear_num_key_heads": hy.linear_key_heads,
            "linear_num_value_heads": hy.linear_value_heads,
            "linear_key_head_dim": hy.linear_key_dim,
            "linear_value_head_dim": hy.linear_value_dim,
            "linear_conv_kernel_dim": hy.conv_kernel,
            "full_attention_interval": FULL_ATTENTION_INTERVAL,
            "rope_parameters": {"type": "default", "rope_theta": s.rope_theta,
                                "partial_rotary_factor": 0.25},
            "shared_expert_intermediate_size": hy.shared_expert_intermediate_size,
        });
        if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
    }
    std::fs::write(
        out.join("config.json"),
        serde_json::to_string_pretty(&config)?,
    )?;
    Ok(params)
}

/// Tensors of one Qwen3.5 layer (MLX layout: conv1d `[C, K, 1]`, plain
/// norm weights, experts stacked as `switch_mlp`).
fn hybrid_layer_tensors(
    tensors: &mut Vec<(String, Vec<i32>, Init)>,
    p: &str,
    layer: usize,
    s: &DummyShape,
    hy: &DummyHybrid,
) {
    let h = s.hidden_size as i32;
    let (nh, kv, hd) = (
        s.num_attention_heads as i32,
        s.num_key_value_heads as i32,
        s.head_dim as i32,
    );
    let mut push = |name: &str, shape: Vec<i32>, init: Init| {
        tensors.push((format!("{p}.{name}"), shape, init))
    };
    push("input_layernorm.weight", vec![h], Init::Ones);
    push("post_attention_layernorm.weight", vec![h], Init::Ones);
    if (layer + 1).is_multiple_of(FULL_ATTENTION_INTERVAL) {
        push(
            "self_attn.q_proj.weight",
            vec![2 * nh * hd, h],
            Init::Normal,
        );
        push("self_attn.k_proj.weight", vec![kv * hd, h], Init::Normal);
        push("self_attn.v_proj.weight", vec![kv * hd, h], Init::Normal);
        push("self_attn.o_proj.weight", vec![h, nh * hd], Init::Normal);
        push("self_attn.q_norm.weight", vec![hd], Init::Ones);
        push("self_attn.k_norm.weight", vec![hd], Init::Ones);
    } else {
        let key = (hy.linear_key_heads * hy.linear_key_dim) as i32;
        let value = (hy.linear_value_heads * hy.linear_value_dim) as i32;
        let vh = hy.linear_value_heads as i32;
        let conv = 2 * key + value;
        push(
            "linear_attn.in_proj_qkv.weight",
            vec![conv, h],
            Init::Normal,
        );
        push("linear_attn.in_proj_z.weight", vec![value, h], Init::Normal);
        push("linear_attn.in_proj_b.weight", vec![vh, h], Init::Normal);
        push("linear_attn.in_proj_a.weight", vec![vh, h], Init::Normal);
        push(
            "linear_attn.conv1d.weight",
            vec![conv, hy.conv_kernel as i32, 1],
            Init::Wide,
        );
        push("linear_attn.dt_bias", vec![vh], Init::Ones);
        push("linear_attn.A_log", vec![vh], Init::LogDecayRate);
        push(
            "linear_attn.norm.weight",
            vec![hy.linear_value_dim as i32],
            Init::Ones,
        );
        push("linear_attn.out_proj.weight", vec![h, value], Init::Normal);
    }
    if s.num_experts > 0 {
        let (e, ffn, shared) = (
            s.num_experts as i32,
            s.moe_intermediate_size as i32,
            hy.shared_expert_intermediate_size as i32,
        );
        push("mlp.gate.weight", vec![e, h], Init::Normal);
        push(
            "mlp.switch_mlp.gate_proj.weight",
            vec![e, ffn, h],
            Init::Normal,
        );
        push(
            "mlp.switch_mlp.up_proj.weight",
            vec![e, ffn, h],
            Init::Normal,
        );
        push(
            "mlp.switch_mlp.down_proj.weight",
            vec![e, h, ffn],
            Init::Normal,
        );
        push(
            "mlp.shared_expert.gate_proj.weight",
            vec![shared, h],
            Init::Normal,
        );
        push(
            "mlp.shared_expert.up_proj.weight",
            vec![shared, h],
            Init::Normal,
        );
        push(
            "mlp.shared_expert.down_proj.weight",
            vec![h, shared],
            Init::Normal,
        );
        push("mlp.shared_expert_gate.weight", vec![1, h], Init::Normal);
    } else {
        let ffn = s.intermediate_size as i32;
        push("mlp.gate_proj.weight", vec![ffn, h], Init::Normal);
        push("mlp.up_proj.weight", vec![ffn, h], Init::Normal);
        push("mlp.down_proj.weight", vec![h, ffn], Init::Normal);
    }
}

#[derive(Debug, Clone, Copy)]
enum Init {
    Normal,
    Ones,
    /// Normal with std 0.5 (convolution taps).
    Wide,
    /// `A_log` around -3 (std 1): per-token decays from ~0.8 to ~0.99, so
    /// the recurrent state remembers tens to hundreds of tokens.
    LogDecayRate,
}

impl Init {
    fn make(self, shape: &[i32], seed: u64, dtype: Dtype) -> Result<Array> {
        let a = match self {
            Init::Ones => mlx_rs::ops::ones::<f32>(shape)?,
            Init::Normal => {
                let key = random::key(seed)?;
                random::normal::<f32>(shape, 0.0, 0.02, &key)?
            }
            Init::Wide => {
                let key = random::key(seed)?;
                random::normal::<f32>(shape, 0.0, 0.5, &key)?
            }
            Init::LogDecayRate => {
                let key = random::key(seed)?;
                random::normal::<f32>(shape, -3.0, 1.0, &key)?
            }
        };
        let a = a.as_dtype(dtype)?;
        a.eval()?;
        Ok(a)
    }
}

/// Copies tokenizer.json (+ tokenizer_config.json) and returns the vocab size
/// (highest token id + 1, counting added tokens).
fn copy_tokenizer(tokenizer: &Path, out: &Path) -> Result<usize> {
    let tok = tokenizers::Tokenizer::from_file(tokenizer)
        .map_err(|e| anyhow::anyhow!("{}: {e}", tokenizer.display()))?;
    std::fs::copy(tokenizer, out.join("tokenizer.json"))
        .with_context(|| format!("copying {}", tokenizer.display()))?;
    if let Some(dir) = tokenizer.parent() {
        for extra in [
            "tokenizer_config.json",
            "special_tokens_map.json",
            "chat_template.jinja",
        ] {
            let src = dir.join(extra);
            if src.exists() {
                std::fs::copy(&src, out.join(extra))?;
            }
        }
    }
    let max_id = tok.get_vocab(true).values().copied().max().unwrap_or(0) as usize;
    Ok(max_id + 1)
}

/// BOS/EOS ids named by tokenizer_config.json next to `tokenizer`.
fn special_ids(tokenizer: &Path) -> Result<(Option<u32>, Option<u32>)> {
    let tok = tokenizers::Tokenizer::from_file(tokenizer)
        .map_err(|e| anyhow::anyhow!("{}: {e}", tokenizer.display()))?;
    let config = tokenizer
        .parent()
        .map(|d| d.join("tokenizer_config.json"))
        .filter(|p| p.exists());
    let Some(config) = config else {
        return Ok((None, None));
    };
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config)?)?;
    let id = |key: &str| {
        let v = json.get(key)?;
        let text = v.as_str().or_else(|| v.get("content")?.as_str())?;
        tok.token_to_id(text)
    };
    Ok((id("bos_token"), id("eos_token")))
}
