//! The sparse mixture-of-experts feed-forward block (Qwen3-MoE, and with a
//! shared expert, Qwen3-Next / Qwen3.5-MoE).
//!
//! Per token: a router (`mlp.gate`) scores every expert, softmax, the top-k
//! experts are kept (their weights renormalised when `norm_topk_prob`), each
//! runs a SwiGLU MLP and the outputs are summed with those weights. Experts
//! are stored stacked as `[E, out, in]` and run with MLX's gathered matmuls
//! (`gather_mm` dense, `gather_qmm` quantized): one kernel per projection for
//! all tokens, never a loop over experts. With many tokens (prefill) the
//! token/expert pairs are sorted by expert first so each expert's weights are
//! read once, as mlx-lm does.
//!
//! Weight layouts accepted under `{prefix}` (e.g. `model.layers.3.mlp`):
//! - MLX / mlx-community: `switch_mlp.{gate,up,down}_proj.{weight,scales,biases}`
//!   already stacked, dense or quantized;
//! - Hugging Face: `experts.{i}.{gate,up,down}_proj.weight`, stacked at load;
//! - Hugging Face fused (Qwen3.5-MoE): `experts.gate_up_proj` `[E, 2I, H]` and
//!   `experts.down_proj` `[E, H, I]`.
//!
//! Quantized router / expert / shared-expert-gate tensors may use a bit width
//! other than the config's default (mlx-lm quantizes `mlp.gate` at 8 bits):
//! bits and group size are read off each tensor's shapes, since the input
//! width of every projection here is known.

use mlx_rs::{
    ops::{self, indexing::Ellipsis, indexing::IndexOp},
    Array, Dtype,
};
use serde_json::Value;

use crate::{
    config::{ModelConfig, QuantParams},
    error::{ModelError, Result},
    layers::{Linear, Mlp},
    weights::Weights,
};

/// From how many token/expert pairs on they are sorted by expert, so each
/// expert's weights are read once for all its tokens: 64 (mlx-lm's rule) or
/// twice the number of experts, whichever is larger. Sorting only saves reads
/// when pairs share experts; below that its extra ops cost more than they
/// save. On an H200 with 256 experts, decode steps of 8 and 16 rows took
/// 7.6 and 10.2 ms sorted against 4.9 and 5.8 ms unsorted
/// (bench/results/h200-2026-11-30.md, run 5). `HEARTH_MOE_SORT_MIN`
/// overrides it.
fn sort_threshold(num_experts: usize) -> i32 {
    static MIN: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
    let env = *MIN.get_or_init(|| {
        std::env::var("HEARTH_MOE_SORT_MIN")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    env.unwrap_or_else(|| 64.max(2 * num_experts as i32))
}

/// The MoE part of a model config (`config.json` names).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// `num_experts`
    pub num_experts: usize,
    /// `num_experts_per_tok`
    pub top_k: usize,
    /// `moe_intermediate_size`: hidden width of each expert.
    pub moe_intermediate_size: usize,
    /// `norm_topk_prob`: renormalise the kept experts' weights to sum to 1.
    pub norm_topk_prob: bool,
    /// `decoder_sparse_step`: layer `i` is sparse when `(i + 1) % step == 0`.
    pub decoder_sparse_step: usize,
    /// `mlp_only_layers`: layers that stay dense whatever the step says.
    pub mlp_only_layers: Vec<usize>,
    /// `shared_expert_intermediate_size`; 0 means no shared expert.
    pub shared_expert_intermediate_size: usize,
}

impl MoeConfig {
    /// Reads the MoE fields of `config.raw` (or of its `text_config` for
    /// multimodal checkpoints). `Ok(None)` when the model has no experts.
    /// `norm_topk_prob_default` is used when config.json omits the field
    /// (Hugging Face's Qwen3-MoE default is false, Qwen3.5's true).
    pub fn from_config(config: &ModelConfig, norm_topk_prob_default: bool) -> Result<Option<Self>> {
        let raw = &config.raw;
        let obj = match raw.get("text_config") {
            Some(text) if raw.get("hidden_size").is_none() => text,
            _ => raw,
        };
        let path = std::path::Path::new("config.json");
        let num = |k: &str| obj.get(k).and_then(Value::as_u64).map(|v| v as usize);
        let num_experts = num("num_experts").unwrap_or(0);
        if num_experts == 0 {
            return Ok(None);
        }
        let top_k = num("num_experts_per_tok")
            .filter(|&k| k > 0)
            .ok_or_else(|| ModelError::config(path, "missing or invalid `num_experts_per_tok`"))?;
        if top_k > num_experts {
            return Err(ModelError::config(
                path,
                format!("num_experts_per_tok ({top_k}) exceeds num_experts ({num_experts})"),
            ));
        }
        let moe_intermediate_size =
            num("moe_intermediate_size")
                .filter(|&v| v > 0)
                .ok_or_else(|| {
                    ModelError::config(path, "missing or invalid `moe_intermediate_size`")
                })?;
        let mlp_only_layers = match obj.get("mlp_only_layers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_u64().map(|v| v as usize))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ModelError::config(path, "`mlp_only_layers` must be a list of layer indices")
                })?,
            Some(_) => {
                return Err(ModelError::config(
                    path,
                    "`mlp_only_layers` must be a list of layer indices",
                ))
            }
        };
        Ok(Some(MoeConfig {
            num_experts,
            top_k,
            moe_intermediate_size,
            norm_topk_prob: obj
                .get("norm_topk_prob")
                .and_then(Value::as_bool)
                .unwrap_or(norm_topk_prob_default),
            decoder_sparse_step: num("decoder_sparse_step").unwrap_or(1).max(1),
            mlp_only_layers,
            shared_expert_intermediate_size: num("shared_expert_intermediate_size").unwrap_or(0),
        }))
    }

    /// Whether layer `layer` (0-based) has a sparse MoE block.
    pub fn is_sparse_layer(&self, layer: usize) -> bool {
        !self.mlp_only_layers.contains(&layer)
            && (layer + 1).is_multiple_of(self.decoder_sparse_step)
    }
}

/// A decoder layer's feed-forward: the dense SwiGLU MLP or a sparse MoE block.
#[derive(Debug)]
pub enum FeedForward {
    Dense(Mlp),
    Sparse(Box<SparseMoe>),
}

impl FeedForward {
    /// Loads `{prefix}` (`model.layers.{layer}.mlp`): sparse when `moe` says
    /// layer `layer` is, dense (`intermediate_size`) otherwise.
    pub fn load(
        weights: &mut Weights,
        prefix: &str,
        config: &ModelConfig,
        moe: Option<&MoeConfig>,
        layer: usize,
    ) -> Result<Self> {
        match moe {
            Some(moe) if moe.is_sparse_layer(layer) => Ok(FeedForward::Sparse(Box::new(
                SparseMoe::load(weights, prefix, config.hidden_size, moe)?,
            ))),
            _ => Ok(FeedForward::Dense(Mlp::load(
                weights,
                prefix,
                config.mlp_bias,
            )?)),
        }
    }

    /// `x: [B, L, hidden]` → `[B, L, hidden]`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            FeedForward::Dense(m) => m.forward(x),
            FeedForward::Sparse(m) => m.forward(x),
        }
    }

    pub fn nbytes(&self) -> usize {
        match self {
            FeedForward::Dense(m) => m.nbytes(),
            FeedForward::Sparse(m) => m.nbytes(),
        }
    }
}

/// Router + routed experts (+ optional gated shared expert).
#[derive(Debug)]
pub struct SparseMoe {
    /// `mlp.gate`: hidden → num_experts logits.
    gate: Linear,
    experts: SwitchGlu,
    /// `shared_expert` MLP and its `shared_expert_gate` (hidden → 1).
    shared: Option<(Mlp, Linear)>,
    top_k: i32,
    norm_topk_prob: bool,
}

impl SparseMoe {
    /// Loads the block at `prefix` (e.g. `model.layers.0.mlp`) for inputs of
    /// width `hidden_size`.
    pub fn load(
        weights: &mut Weights,
        prefix: &str,
        hidden_size: usize,
        moe: &MoeConfig,
    ) -> Result<Self> {
        let gate = load_linear(weights, &format!("{prefix}.gate"), hidden_size)?;
        let experts = SwitchGlu::load(weights, prefix, hidden_size, moe)?;
        let shared = if moe.shared_expert_intermediate_size > 0 {
            let mlp = Mlp::load(weights, &format!("{prefix}.shared_expert"), false)?;
            let gate = load_linear(
                weights,
                &format!("{prefix}.shared_expert_gate"),
                hidden_size,
            )?;
            Some((mlp, gate))
        } else {
            None
        };
        Ok(SparseMoe {
            gate,
            experts,
            shared,
            top_k: moe.top_k as i32,
            norm_topk_prob: moe.norm_topk_prob,
        })
    }

    /// `x: [B, L, hidden]` → `[B, L, hidden]`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let logits = self.gate.forward(x)?;
        let (k, norm) = (self.top_k, self.norm_topk_prob);
        let (inds, scores) =
            match crate::cuda_moe::route(&logits, k, norm, |l| route_ops(l, k, norm))? {
                Some(route) => route,
                None => route_ops(&logits, k, norm)?,
            };
        let y = self.experts.forward(x, &inds)?;
        let shared = match &self.shared {
            Some((mlp, gate)) => Some((gate.forward(x)?, mlp.forward(x)?)),
            None => None,
        };
        match crate::cuda_moe::combine(&y, &scores, shared.as_ref(), combine_ops)? {
            Some(out) => Ok(out),
            None => combine_ops(&y, &scores, shared.as_ref()),
        }
    }

    /// Bytes held by the parameters (all experts).
    pub fn nbytes(&self) -> usize {
        self.gate.nbytes()
            + self.experts.nbytes()
            + self
                .shared
                .as_ref()
                .map_or(0, |(mlp, gate)| mlp.nbytes() + gate.nbytes())
    }
}

/// The router's MLX ops: `logits: [.., E]` → the top `k` experts `[.., k]`
/// (uint32, in no order) and their softmax scores, renormalised to sum to
/// 1 when `normalise`.
fn route_ops(logits: &Array, k: i32, normalise: bool) -> Result<(Array, Array)> {
    let gates = ops::softmax_axis(logits, -1, true)?;
    let n_experts = gates.dim(-1);
    let inds = ops::argpartition_axis(&gates, -k, -1)?.index((Ellipsis, (n_experts - k)..));
    let mut scores = gates.take_along_axis(&inds, -1)?;
    if normalise {
        scores = scores.divide(scores.sum_axis(-1, true)?)?;
    }
    Ok((inds, scores))
}

/// The combination's MLX ops: the experts' outputs `y: [.., k, H]`
/// weighted by `scores: [.., k]` and summed, plus `sigmoid(gate) · out` of
/// the shared expert (`gate: [.., 1]`, `out: [.., H]`).
fn combine_ops(y: &Array, scores: &Array, shared: Option<&(Array, Array)>) -> Result<Array> {
    let dtype = y.dtype();
    let mut y = y
        .multiply(scores.expand_dims(-1)?)?
        .sum_axis(-2, false)?
        .as_dtype(dtype)?;
    if let Some((gate, out)) = shared {
        y = y.add(ops::sigmoid(gate)?.multiply(out)?)?;
    }
    Ok(y)
}

/// The routed experts: three stacked projections run as a SwiGLU.
#[derive(Debug)]
pub struct SwitchGlu {
    gate_proj: SwitchLinear,
    up_proj: SwitchLinear,
    down_proj: SwitchLinear,
    /// [`sort_threshold`] for this block's number of experts.
    sort_min: i32,
}

impl SwitchGlu {
    fn load(
        weights: &mut Weights,
        prefix: &str,
        hidden_size: usize,
        moe: &MoeConfig,
    ) -> Result<Self> {
        let (e, h, i) = (moe.num_experts, hidden_size, moe.moe_intermediate_size);
        let fused = format!("{prefix}.experts.gate_up_proj");
        if weights.contains(&fused) {
            // Qwen3.5-MoE's Hugging Face layout: gate and up rows concatenated.
            let gate_up = weights.take(&fused)?;
            let down = weights.take(&format!("{prefix}.experts.down_proj"))?;
            check_shape(weights, &fused, &gate_up, &[e, 2 * i, h])?;
            check_shape(
                weights,
                &format!("{prefix}.experts.down_proj"),
                &down,
                &[e, h, i],
            )?;
            let mid = i as i32;
            let gate = gate_up.index((.., ..mid, ..));
            let up = gate_up.index((.., mid.., ..));
            return Ok(SwitchGlu {
                gate_proj: SwitchLinear::Dense(materialize(gate)?),
                up_proj: SwitchLinear::Dense(materialize(up)?),
                down_proj: SwitchLinear::Dense(down),
                sort_min: sort_threshold(e),
            });
        }
        let proj = |w: &mut Weights, name: &str, out: usize, inp: usize| {
            SwitchLinear::load(w, prefix, name, e, out, inp)
        };
        Ok(SwitchGlu {
            gate_proj: proj(weights, "gate_proj", i, h)?,
            up_proj: proj(weights, "up_proj", i, h)?,
            down_proj: proj(weights, "down_proj", h, i)?,
            sort_min: sort_threshold(e),
        })
    }

    /// `x: [B, L, hidden]`, `indices: [B, L, k]` → `[B, L, k, hidden]`:
    /// at decode sizes on CUDA two kernels of [`crate::cuda_experts`] where
    /// they are in force, else [`SwitchGlu::forward_ops`].
    fn forward(&self, x: &Array, indices: &Array) -> Result<Array> {
        if let (SwitchLinear::Dense(g), SwitchLinear::Dense(u), SwitchLinear::Dense(d)) =
            (&self.gate_proj, &self.up_proj, &self.down_proj)
        {
            let reference = |x: &Array, idx: &Array| self.forward_ops(x, idx);
            if let Some(y) = crate::cuda_experts::glu(x, indices, g, u, d, reference)? {
                return Ok(y);
            }
        }
        self.forward_ops(x, indices)
    }

    /// [`SwitchGlu::forward`] with MLX's gathered matmuls.
    fn forward_ops(&self, x: &Array, indices: &Array) -> Result<Array> {
        let x = x.expand_dims_axes(&[-2, -3])?; // [B, L, 1, 1, H]
        let sort = indices.size() as i32 >= self.sort_min;
        let (x, idx, inv_order) = if sort {
            let k = indices.dim(-1);
            let flat = indices.flatten(None, None)?;
            let order = ops::argsort_axis(&flat, 0)?;
            let inv_order = ops::argsort_axis(&order, 0)?;
            let tokens = order.floor_divide(Array::from_int(k).as_dtype(order.dtype())?)?;
            let x = x.flatten(0, -3)?.take_axis(&tokens, 0)?; // [N*k, 1, H]
            (x, flat.take_axis(&order, 0)?, Some(inv_order))
        } else {
            (x, indices.clone(), None)
        };
        let up = self.up_proj.forward(&x, &idx, sort)?;
        let gate = self.gate_proj.forward(&x, &idx, sort)?;
        let h = crate::fused::swiglu(&gate, &up)?;
        let mut y = self.down_proj.forward(&h, &idx, sort)?;
        if let Some(inv_order) = inv_order {
            y = ops::unflatten(y.take_axis(&inv_order, 0)?, 0, indices.shape())?;
        }
        Ok(y.squeeze_axes(&[-2])?)
    }

    fn nbytes(&self) -> usize {
        self.gate_proj.nbytes() + self.up_proj.nbytes() + self.down_proj.nbytes()
    }
}

/// One projection of every expert, stacked `[E, out, in]`.
#[derive(Debug)]
pub enum SwitchLinear {
    Dense(Array),
    Quantized {
        weight: Array,
        scales: Array,
        biases: Array,
        group_size: i32,
        bits: i32,
    },
}

impl SwitchLinear {
    /// Loads `{prefix}.switch_mlp.{name}` or stacks `{prefix}.experts.{i}.{name}`.
    fn load(
        weights: &mut Weights,
        prefix: &str,
        name: &str,
        experts: usize,
        out: usize,
        inp: usize,
    ) -> Result<Self> {
        let stacked = format!("{prefix}.switch_mlp.{name}");
        let per_expert = !weights.contains(&format!("{stacked}.weight"))
            && weights.contains(&format!("{prefix}.experts.0.{name}.weight"));
        let mut take = |suffix: &str| -> Result<Option<Array>> {
            if !per_expert {
                return Ok(weights.take_optional(&format!("{stacked}.{suffix}")));
            }
            // Hugging Face layout: one tensor per expert, stacked here.
            let names: Vec<String> = (0..experts)
                .map(|e| format!("{prefix}.experts.{e}.{name}.{suffix}"))
                .collect();
            if !weights.contains(&names[0]) {
                return Ok(None);
            }
            let parts = names
                .iter()
                .map(|n| weights.take(n))
                .collect::<Result<Vec<_>>>()?;
            Ok(Some(materialize(ops::stack(&parts, 0)?)?))
        };
        let (weight, scales, biases) = (take("weight")?, take("scales")?, take("biases")?);
        let weight_name = format!("{stacked}.weight");
        let weight = weight.ok_or_else(|| ModelError::MissingTensor {
            path: weights.source().to_path_buf(),
            name: weight_name.clone(),
        })?;
        if weight.ndim() != 3 || weight.dim(0) as usize != experts || weight.dim(1) as usize != out
        {
            return Err(ModelError::bad_tensor(
                weights.source(),
                weight_name,
                format!(
                    "shape {:?} is not [num_experts={experts}, {out}, ..]",
                    weight.shape()
                ),
            ));
        }
        let quant = quant_params(
            weights,
            &stacked,
            &weight,
            scales.as_ref(),
            biases.is_some(),
            inp,
        )?;
        match (quant, scales, biases) {
            (Some(q), Some(scales), Some(biases)) if weights.expand_quantized() => {
                Ok(SwitchLinear::Dense(crate::layers::expand_to_float32(
                    &weight, &scales, &biases, q,
                )?))
            }
            (Some(q), Some(scales), Some(biases)) => Ok(SwitchLinear::Quantized {
                weight,
                scales,
                biases,
                group_size: q.group_size,
                bits: q.bits,
            }),
            _ => {
                check_shape(weights, &weight_name, &weight, &[experts, out, inp])?;
                Ok(SwitchLinear::Dense(weight))
            }
        }
    }

    /// `x: [.., 1, in]` gathered by `indices` → `[.., 1, out]`.
    fn forward(&self, x: &Array, indices: &Array, sorted: bool) -> Result<Array> {
        Ok(match self {
            SwitchLinear::Dense(w) => {
                ops::gather_mm(x, w.swap_axes(-1, -2)?, None, indices, sorted)?
            }
            SwitchLinear::Quantized {
                weight,
                scales,
                biases,
                group_size,
                bits,
            } => ops::gather_qmm(
                x,
                weight,
                scales,
                biases,
                None,
                indices,
                true,
                *group_size,
                *bits,
                sorted,
            )?,
        })
    }

    fn nbytes(&self) -> usize {
        match self {
            SwitchLinear::Dense(w) => w.nbytes(),
            SwitchLinear::Quantized {
                weight,
                scales,
                biases,
                ..
            } => weight.nbytes() + scales.nbytes() + biases.nbytes(),
        }
    }
}

/// Loads a bias-free linear layer whose input width is known, reading its
/// quantization (if any) off the tensor shapes.
fn load_linear(weights: &mut Weights, prefix: &str, in_features: usize) -> Result<Linear> {
    let weight = weights.take(&format!("{prefix}.weight"))?;
    let scales = weights.take_optional(&format!("{prefix}.scales"));
    let biases = weights.take_optional(&format!("{prefix}.biases"));
    let quant = quant_params(
        weights,
        prefix,
        &weight,
        scales.as_ref(),
        biases.is_some(),
        in_features,
    )?;
    match (quant, scales, biases) {
        (Some(q), Some(scales), Some(biases)) => Ok(Linear::Quantized {
            weight,
            scales,
            biases,
            bias: None,
            group_size: q.group_size,
            bits: q.bits,
        }),
        _ => Ok(Linear::dense(weight, None)),
    }
}

/// Quantization of `{prefix}.weight` from its shapes, given its input width:
/// packed columns give the bits, scale columns the group size. `None` for a
/// dense weight; an error when `scales`/`biases` are missing or do not fit.
fn quant_params(
    weights: &Weights,
    prefix: &str,
    weight: &Array,
    scales: Option<&Array>,
    has_biases: bool,
    in_features: usize,
) -> Result<Option<QuantParams>> {
    let name = format!("{prefix}.weight");
    let missing = |what: &str| ModelError::MissingTensor {
        path: weights.source().to_path_buf(),
        name: format!("{prefix}.{what}"),
    };
    let Some(scales) = scales else {
        if weight.dtype() == Dtype::Uint32 {
            return Err(missing("scales"));
        }
        return Ok(None);
    };
    if weight.dtype() != Dtype::Uint32 {
        return Err(ModelError::bad_tensor(
            weights.source(),
            name,
            format!(
                "has `.scales` but dtype {:?} (quantized weights are packed uint32)",
                weight.dtype()
            ),
        ));
    }
    if !has_biases {
        return Err(missing("biases"));
    }
    let packed = weight.dim(-1) as usize * 32;
    let groups = scales.dim(-1) as usize;
    let fits = in_features > 0
        && groups > 0
        && packed.is_multiple_of(in_features)
        && in_features.is_multiple_of(groups)
        && scales.shape()[..scales.ndim() - 1] == weight.shape()[..weight.ndim() - 1];
    let (bits, group_size) = if fits {
        (packed / in_features, in_features / groups)
    } else {
        (0, 0)
    };
    if ![2, 3, 4, 5, 6, 8].contains(&bits) || ![32, 64, 128].contains(&group_size) {
        return Err(ModelError::bad_tensor(
            weights.source(),
            name,
            format!(
                "quantized shape {:?} with scales {:?} does not fit {in_features} input features",
                weight.shape(),
                scales.shape()
            ),
        ));
    }
    Ok(Some(QuantParams {
        group_size: group_size as i32,
        bits: bits as i32,
    }))
}

fn check_shape(weights: &Weights, name: &str, array: &Array, expected: &[usize]) -> Result<()> {
    let expected: Vec<i32> = expected.iter().map(|&d| d as i32).collect();
    if array.shape() != expected.as_slice() {
        return Err(ModelError::bad_tensor(
            weights.source(),
            name,
            format!("shape {:?}, expected {:?}", array.shape(), expected),
        ));
    }
    Ok(())
}

/// Evaluates a load-time transform (stack, slice) so the sources can be freed
/// and forward passes do not redo it.
fn materialize(a: Array) -> Result<Array> {
    a.eval()?;
    Ok(a)
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, path::Path};

    use super::*;
    use crate::weights::WeightFormat;

    #[test]
    fn decode_sized_batches_of_many_experts_stay_unsorted() {
        if std::env::var_os("HEARTH_MOE_SORT_MIN").is_some() {
            return;
        }
        // Few experts: mlx-lm's 64 pairs. 256 experts (Qwen3.5-35B-A3B):
        // 16 decode rows x top-8 = 128 pairs stay unsorted, a 64-token
        // prefill chunk (512 pairs) is sorted.
        assert_eq!(sort_threshold(8), 64);
        assert_eq!(sort_threshold(256), 512);
    }

    fn config(extra: Value) -> ModelConfig {
        let mut raw = serde_json::json!({
            "model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        });
        if let (Some(r), Some(e)) = (raw.as_object_mut(), extra.as_object()) {
            r.extend(e.clone());
        }
        ModelConfig::from_json(&raw, Path::new("config.json")).unwrap()
    }

    #[test]
    fn reads_moe_fields_and_picks_sparse_layers() {
        assert_eq!(
            MoeConfig::from_config(&config(Value::Null), false).unwrap(),
            None
        );
        let c = config(
            serde_json::json!({"num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "decoder_sparse_step": 2, "mlp_only_layers": [3]}),
        );
        let moe = MoeConfig::from_config(&c, true).unwrap().unwrap();
        assert!(moe.norm_topk_prob, "default used when the field is absent");
        let sparse: Vec<usize> = (0..4).filter(|&i| moe.is_sparse_layer(i)).collect();
        assert_eq!(
            sparse,
            vec![1],
            "step 2 gives layers 1 and 3; 3 is mlp-only"
        );

        let bad = config(
            serde_json::json!({"num_experts": 4, "num_experts_per_tok": 8,
            "moe_intermediate_size": 32}),
        );
        let e = MoeConfig::from_config(&bad, false).unwrap_err();
        assert!(e.to_string().contains("exceeds num_experts"), "{e}");
        let bad = config(serde_json::json!({"num_experts": 4, "num_experts_per_tok": 2}));
        let e = MoeConfig::from_config(&bad, false).unwrap_err();
        assert!(e.to_string().contains("moe_intermediate_size"), "{e}");
    }

    #[test]
    fn quantization_is_read_off_shapes() {
        let w = Weights::new(HashMap::new(), None, WeightFormat::Safetensors, "m".into());
        // 8-bit, group 64, 256 inputs: 64 packed columns, 4 groups.
        let weight = Array::zeros::<u32>(&[8, 64]).unwrap();
        let scales = Array::zeros::<f32>(&[8, 4]).unwrap();
        let q = quant_params(&w, "gate", &weight, Some(&scales), true, 256).unwrap();
        assert_eq!(
            q,
            Some(QuantParams {
                group_size: 64,
                bits: 8
            })
        );
        // The same tensors cannot be 4-bit experts of 256 inputs... but are of 512.
        let q = quant_params(&w, "gate", &weight, Some(&scales), true, 512).unwrap();
        assert_eq!(
            q,
            Some(QuantParams {
                group_size: 128,
                bits: 4
            })
        );
        // Stacked experts: leading dims must agree.
        let weight = Array::zeros::<u32>(&[4, 8, 32]).unwrap();
        let scales = Array::zeros::<f32>(&[4, 8, 4]).unwrap();
        let q = quant_params(&w, "e", &weight, Some(&scales), true, 256).unwrap();
        assert_eq!(
            q,
            Some(QuantParams {
                group_size: 64,
                bits: 4
            })
        );
        let e = quant_params(&w, "e", &weight, Some(&scales), true, 100).unwrap_err();
        assert!(
            e.to_string().contains("does not fit 100 input features"),
            "{e}"
        );
        let e = quant_params(&w, "e", &weight, Some(&scales), false, 256).unwrap_err();
        assert!(e.to_string().contains("e.biases"), "{e}");
        let e = quant_params(&w, "e", &weight, None, false, 256).unwrap_err();
        assert!(e.to_string().contains("e.scales"), "{e}");
        let dense = Array::zeros::<f32>(&[8, 256]).unwrap();
        assert_eq!(
            quant_params(&w, "d", &dense, None, false, 256).unwrap(),
            None
        );
    }
}
