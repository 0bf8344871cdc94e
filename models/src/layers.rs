//! Building blocks shared by every architecture: dense and quantized linear
//! and embedding layers, RMSNorm, rotary embeddings, grouped-query attention
//! over a [`KvCache`](crate::cache::KvCache), and the SwiGLU MLP.
//!
//! Layers hold their weights as plain MLX arrays under the checkpoint's own
//! names (see [`crate::weights::Weights`]); nothing here knows about files.

use mlx_rs::{
    fast::{self, ScaledDotProductAttentionMask},
    ops::{self, indexing::Ellipsis, indexing::IndexOp},
    Array,
};

use crate::{
    cache::{CacheView, RopeOffset},
    config::{ModelConfig, RopeScaling},
    error::Result,
    weights::Weights,
};

/// A linear layer `y = x W^T (+ b)`, dense or MLX-affine-quantized.
#[derive(Debug)]
pub enum Linear {
    Dense {
        weight: Array,
        bias: Option<Array>,
        /// Views of `W^T` (no copies), made at first use: what a product
        /// multiplies by in one graph node (see [`dense_matmul_t`]).
        views: TransposedViews,
    },
    Quantized {
        weight: Array,
        scales: Array,
        biases: Array,
        bias: Option<Array>,
        group_size: i32,
        bits: i32,
    },
}

impl Linear {
    /// Loads `{prefix}.weight` (+ `.scales`/`.biases` when quantized, `.bias` if `bias`).
    pub fn load(weights: &mut Weights, prefix: &str, bias: bool) -> Result<Self> {
        let bias = if bias {
            Some(weights.take(&format!("{prefix}.bias"))?)
        } else {
            weights.take_optional(&format!("{prefix}.bias"))
        };
        let weight = weights.take(&format!("{prefix}.weight"))?;
        match weights.quantization_of(prefix, &weight)? {
            Some(q) if weights.expand_quantized() => Ok(Linear::dense(
                take_expanded(weights, prefix, &weight, q)?,
                bias,
            )),
            Some(q) => Ok(Linear::Quantized {
                weight,
                scales: weights.take(&format!("{prefix}.scales"))?,
                biases: weights.take(&format!("{prefix}.biases"))?,
                bias,
                group_size: q.group_size,
                bits: q.bits,
            }),
            None => Ok(Linear::dense(weight, bias)),
        }
    }

    /// A dense layer of `weight` (`[out, in]`) and an optional bias.
    pub fn dense(weight: Array, bias: Option<Array>) -> Self {
        Linear::Dense {
            weight,
            bias,
            views: TransposedViews::default(),
        }
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        let y = match self {
            Linear::Dense { weight, views, .. } => dense_matmul_t(x, weight, Some(views))?,
            Linear::Quantized {
                weight,
                scales,
                biases,
                group_size,
                bits,
                ..
            } => ops::quantized_matmul(x, weight, scales, biases, true, *group_size, *bits)?,
        };
        match self.bias() {
            Some(b) => Ok(y.add(b)?),
            None => Ok(y),
        }
    }

    fn bias(&self) -> Option<&Array> {
        match self {
            Linear::Dense { bias, .. } | Linear::Quantized { bias, .. } => bias.as_ref(),
        }
    }

    /// Layers that read the same input, as one whose outputs are theirs side
    /// by side (weights, scales, biases and bias concatenated along the output
    /// axis, evaluated now so the parts' memory is freed): one matrix product
    /// instead of several per step. `parts` come back unchanged when they
    /// cannot be joined (dense mixed with quantized, different quantization,
    /// bias on some only).
    pub fn concat_outputs(parts: Vec<Linear>) -> Result<std::result::Result<Linear, Vec<Linear>>> {
        let biased = parts.iter().filter(|p| p.bias().is_some()).count();
        let joinable = !parts.is_empty()
            && (biased == 0 || biased == parts.len())
            && parts.iter().all(|p| match (p, &parts[0]) {
                (Linear::Dense { .. }, Linear::Dense { .. }) => true,
                (
                    Linear::Quantized {
                        group_size: g,
                        bits: b,
                        ..
                    },
                    Linear::Quantized {
                        group_size: g0,
                        bits: b0,
                        ..
                    },
                ) => g == g0 && b == b0,
                _ => false,
            });
        if !joinable {
            return Ok(Err(parts));
        }
        let bias = concat_part(&parts, |p| p.bias())?;
        let joined = match &parts[0] {
            Linear::Dense { .. } => Linear::dense(
                concat_part(&parts, |p| match p {
                    Linear::Dense { weight, .. } => Some(weight),
                    _ => None,
                })?
                .ok_or_else(|| crate::ModelError::Mlx("dense parts without weights".into()))?,
                bias,
            ),
            Linear::Quantized {
                group_size, bits, ..
            } => {
                let part = |pick: fn(&Linear) -> Option<&Array>| -> Result<Array> {
                    concat_part(&parts, pick)?
                        .ok_or_else(|| crate::ModelError::Mlx("quantized parts differ".into()))
                };
                Linear::Quantized {
                    weight: part(|p| match p {
                        Linear::Quantized { weight, .. } => Some(weight),
                        _ => None,
                    })?,
                    scales: part(|p| match p {
                        Linear::Quantized { scales, .. } => Some(scales),
                        _ => None,
                    })?,
                    biases: part(|p| match p {
                        Linear::Quantized { biases, .. } => Some(biases),
                        _ => None,
                    })?,
                    bias,
                    group_size: *group_size,
                    bits: *bits,
                }
            }
        };
        Ok(Ok(joined))
    }

    /// Width of the output (rows of the weight).
    pub fn out_features(&self) -> i32 {
        match self {
            Linear::Dense { weight, .. } | Linear::Quantized { weight, .. } => weight.dim(0),
        }
    }

    /// Bytes held by this layer's parameters.
    pub fn nbytes(&self) -> usize {
        let b = self.bias().map_or(0, Array::nbytes);
        match self {
            Linear::Dense { weight, .. } => weight.nbytes() + b,
            Linear::Quantized {
                weight,
                scales,
                biases,
                ..
            } => weight.nbytes() + scales.nbytes() + biases.nbytes() + b,
        }
    }
}

/// Linear layers over the same input, run as one matrix product when their
/// storage allows ([`Linear::concat_outputs`]): one kernel per token instead
/// of one per layer, which on a GPU is host work saved on every step
/// (docs/cuda.md). Outputs come back in the order the layers were named.
#[derive(Debug)]
pub enum LinearGroup {
    /// The layers side by side, and each one's output width.
    Joined(Linear, Vec<i32>),
    Separate(Vec<Linear>),
}

impl LinearGroup {
    /// Loads `{prefix}.{name}` for each name and joins them if it can.
    pub fn load(weights: &mut Weights, prefix: &str, names: &[&str], bias: bool) -> Result<Self> {
        let mut parts = Vec::with_capacity(names.len());
        for name in names {
            parts.push(Linear::load(weights, &format!("{prefix}.{name}"), bias)?);
        }
        Self::new(parts)
    }

    /// `parts` joined if they can be, kept apart otherwise.
    pub fn new(parts: Vec<Linear>) -> Result<Self> {
        let widths: Vec<i32> = parts.iter().map(Linear::out_features).collect();
        Ok(match Linear::concat_outputs(parts)? {
            Ok(joined) => LinearGroup::Joined(joined, widths),
            Err(parts) => LinearGroup::Separate(parts),
        })
    }

    /// `x: [..., in]` → each layer's `[..., out_i]`.
    pub fn forward(&self, x: &Array) -> Result<Vec<Array>> {
        match self {
            LinearGroup::Joined(linear, widths) => Ok(split(&linear.forward(x)?, widths)),
            LinearGroup::Separate(parts) => parts.iter().map(|p| p.forward(x)).collect(),
        }
    }

    /// `x: [..., in]` → the joined product `[..., Σ out_i]` (the layers'
    /// outputs side by side), or `None` when they are kept apart.
    pub fn joined_forward(&self, x: &Array) -> Result<Option<Array>> {
        match self {
            LinearGroup::Joined(linear, _) => Ok(Some(linear.forward(x)?)),
            LinearGroup::Separate(_) => Ok(None),
        }
    }

    /// [`LinearGroup::joined_forward`]'s product as each layer's output
    /// (views); `None` when the layers are kept apart.
    pub fn split(&self, y: &Array) -> Option<Vec<Array>> {
        match self {
            LinearGroup::Joined(_, widths) => Some(split(y, widths)),
            LinearGroup::Separate(_) => None,
        }
    }

    pub fn nbytes(&self) -> usize {
        match self {
            LinearGroup::Joined(linear, _) => linear.nbytes(),
            LinearGroup::Separate(parts) => parts.iter().map(Linear::nbytes).sum(),
        }
    }
}

/// `y`'s last axis cut into consecutive pieces of `widths`.
fn split(y: &Array, widths: &[i32]) -> Vec<Array> {
    let mut start = 0;
    let mut out = Vec::with_capacity(widths.len());
    for w in widths {
        out.push(y.index((Ellipsis, start..start + w)));
        start += w;
    }
    out
}

/// `pick` of every part concatenated along axis 0 and evaluated; `None`
/// unless every part has one.
fn concat_part(parts: &[Linear], pick: fn(&Linear) -> Option<&Array>) -> Result<Option<Array>> {
    let arrays: Vec<&Array> = parts.iter().filter_map(pick).collect();
    if arrays.is_empty() || arrays.len() != parts.len() {
        return Ok(None);
    }
    let joined = ops::concatenate(&arrays, 0)?;
    joined.eval()?;
    Ok(Some(joined))
}

/// The most rows of a batch whose product takes a folded view
/// ([`TransposedViews`]); larger batches take MLX's plain matmul.
pub const FOLD_MAX_ROWS: usize = 64;

/// Views of a dense weight's `W^T` (no copies), each made and evaluated at
/// its first use and kept for the layer's life.
#[derive(Debug, Default)]
pub struct TransposedViews {
    /// `[1, in, out]`: one sequence's product in one node.
    one: std::cell::OnceCell<Array>,
    /// `[B, in, out]` for B = 2..=[`FOLD_MAX_ROWS`], the batch axis
    /// broadcast (stride 0): a B-row decode step's product in one node.
    rows: std::cell::OnceCell<Box<[std::cell::OnceCell<Array>]>>,
}

impl TransposedViews {
    fn one(&self, weight: &Array) -> Result<&Array> {
        if let Some(wt) = self.one.get() {
            return Ok(wt);
        }
        let wt = weight.t().expand_dims(0)?;
        wt.eval()?;
        Ok(self.one.get_or_init(|| wt))
    }

    /// The `[rows, in, out]` view, for 2..=[`FOLD_MAX_ROWS`] rows.
    fn rows(&self, weight: &Array, rows: i32) -> Result<Option<&Array>> {
        let slots = self.rows.get_or_init(|| {
            (0..=FOLD_MAX_ROWS)
                .map(|_| std::cell::OnceCell::new())
                .collect()
        });
        let Some(slot) = usize::try_from(rows)
            .ok()
            .filter(|&r| r >= 2)
            .and_then(|r| slots.get(r))
        else {
            return Ok(None);
        };
        if let Some(view) = slot.get() {
            return Ok(Some(view));
        }
        let one = self.one(weight)?;
        let view = ops::broadcast_to(one, &[rows, one.dim(1), one.dim(2)])?;
        view.eval()?;
        Ok(Some(slot.get_or_init(|| view)))
    }
}

/// `x W^T` for a dense weight: MLX's matmul, or on CUDA for a few rows
/// the small-batch kernel of [`crate::cuda_gemv`] when it is enabled.
///
/// MLX's `matmul` of a `[B, L, in]` input by a 2-D `W^T` is four graph
/// nodes: the transpose, a flatten to 2-D, the product and an unflatten.
/// With `views` (the layer's [`TransposedViews`]) it is one node, the same
/// product (crate::lean): a one-sequence input (`B == 1`: a one-row decode
/// step, a prompt chunk) multiplies by the `[1, in, out]` view; where
/// [`crate::lean::fold_rows`] is on, a `[B, L, in]` input multiplies by the
/// `[B, in, out]` view whose batch axis is broadcast, which MLX's GPU
/// backends run as one `[B·L, in]` product (they fold a broadcast batch of
/// the weight into the rows; its CPU backend would loop over the batch, so
/// it is off there).
fn dense_matmul_t(x: &Array, weight: &Array, views: Option<&TransposedViews>) -> Result<Array> {
    let shape = x.shape();
    let rows: i32 = shape[..shape.len().saturating_sub(1)].iter().product();
    if x.dtype() == weight.dtype() {
        let kernel = crate::cuda_gemv::route(
            rows.max(0) as usize,
            weight.dim(0),
            weight.dim(1),
            weight.dtype(),
        );
        if let Some(kernel) = kernel {
            return crate::cuda_gemv::matmul_t(kernel, x, weight);
        }
    }
    if let Some(views) = views.filter(|_| x.ndim() == 3 && crate::lean::on()) {
        if x.dim(0) == 1 {
            return Ok(x.matmul(views.one(weight)?)?);
        }
        if crate::lean::fold_rows() {
            if let Some(view) = views.rows(weight, x.dim(0))? {
                return Ok(x.matmul(view)?);
            }
        }
    }
    Ok(x.matmul(weight.t())?)
}

/// A quantized weight as the dense float32 matrix it stands for, evaluated
/// now so the packed arrays can be freed: on MLX's CPU backend a float32
/// product on a real BLAS is many times faster than the scalar quantized
/// one (docs/mlx-on-linux.md), at 8x the memory of 4-bit weights.
pub(crate) fn expand_to_float32(
    weight: &Array,
    scales: &Array,
    biases: &Array,
    q: crate::config::QuantParams,
) -> Result<Array> {
    // Float32 scales make MLX's CPU dequantize produce float32 directly,
    // ~7x faster than through float16 and a cast.
    let f32 = mlx_rs::Dtype::Float32;
    let dense = ops::dequantize(
        weight,
        scales.as_dtype(f32)?,
        &biases.as_dtype(f32)?,
        q.group_size,
        q.bits,
    )?;
    dense.eval()?;
    Ok(dense)
}

/// Takes `{prefix}.scales` and `.biases` of the quantized `weight` and
/// returns it expanded ([`expand_to_float32`]).
fn take_expanded(
    weights: &mut Weights,
    prefix: &str,
    weight: &Array,
    q: crate::config::QuantParams,
) -> Result<Array> {
    let scales = weights.take(&format!("{prefix}.scales"))?;
    let biases = weights.take(&format!("{prefix}.biases"))?;
    expand_to_float32(weight, &scales, &biases, q)
}

/// Token embedding table, dense or quantized; doubles as the output
/// projection when embeddings are tied.
#[derive(Debug)]
pub enum Embedding {
    Dense(Array),
    Quantized {
        weight: Array,
        scales: Array,
        biases: Array,
        group_size: i32,
        bits: i32,
    },
}

impl Embedding {
    pub fn load(weights: &mut Weights, prefix: &str) -> Result<Self> {
        let weight = weights.take(&format!("{prefix}.weight"))?;
        match weights.quantization_of(prefix, &weight)? {
            Some(q) if weights.expand_quantized() => Ok(Embedding::Dense(take_expanded(
                weights, prefix, &weight, q,
            )?)),
            Some(q) => Ok(Embedding::Quantized {
                weight,
                scales: weights.take(&format!("{prefix}.scales"))?,
                biases: weights.take(&format!("{prefix}.biases"))?,
                group_size: q.group_size,
                bits: q.bits,
            }),
            None => Ok(Embedding::Dense(weight)),
        }
    }

    /// Looks up rows for integer token ids of any shape.
    pub fn forward(&self, ids: &Array) -> Result<Array> {
        match self {
            Embedding::Dense(w) => Ok(w.take_axis(ids, 0)?),
            Embedding::Quantized {
                weight,
                scales,
                biases,
                group_size,
                bits,
            } => Ok(ops::dequantize(
                weight.take_axis(ids, 0)?,
                scales.take_axis(ids, 0)?,
                &biases.take_axis(ids, 0)?,
                *group_size,
                *bits,
            )?),
        }
    }

    /// Dtype of the vectors this table produces (the model's activations).
    pub fn output_dtype(&self) -> mlx_rs::Dtype {
        match self {
            Embedding::Dense(w) => w.dtype(),
            Embedding::Quantized { scales, .. } => scales.dtype(),
        }
    }

    /// Uses the table as an output projection (`x E^T`).
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        match self {
            Embedding::Dense(w) => dense_matmul_t(x, w, None),
            Embedding::Quantized {
                weight,
                scales,
                biases,
                group_size,
                bits,
            } => Ok(ops::quantized_matmul(
                x,
                weight,
                scales,
                biases,
                true,
                *group_size,
                *bits,
            )?),
        }
    }

    pub fn nbytes(&self) -> usize {
        match self {
            Embedding::Dense(w) => w.nbytes(),
            Embedding::Quantized {
                weight,
                scales,
                biases,
                ..
            } => weight.nbytes() + scales.nbytes() + biases.nbytes(),
        }
    }
}

/// RMSNorm with a learned scale (MLX's fused kernel).
#[derive(Debug)]
pub struct RmsNorm {
    pub weight: Array,
    pub eps: f32,
}

impl RmsNorm {
    pub fn load(weights: &mut Weights, prefix: &str, eps: f32) -> Result<Self> {
        Ok(RmsNorm {
            weight: weights.take(&format!("{prefix}.weight"))?,
            eps,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        Ok(fast::rms_norm(x, Some(&self.weight), self.eps)?)
    }

    /// `(x + r, self.forward(x + r))`: a residual add and the norm after
    /// it, as one kernel where [`crate::cuda_norm`] is in force.
    pub fn add_forward(&self, x: &Array, r: &Array) -> Result<(Array, Array)> {
        if let Some(fused) = crate::cuda_norm::add_rms_norm(x, r, &self.weight, self.eps)? {
            return Ok(fused);
        }
        let h = x.add(r)?;
        let n = self.forward(&h)?;
        Ok((h, n))
    }
}

/// Rotary position embedding over the last axis of `[.., L, head_dim]` inputs.
#[derive(Debug)]
pub struct Rope {
    dims: i32,
    traditional: bool,
    base: f32,
    scale: f32,
    /// Per-dimension wavelengths when the scaling needs custom frequencies.
    freqs: Option<Array>,
    /// `scale / wavelength`'s divisor per rotated pair, f32 (for
    /// [`crate::cuda_qk`], which rotates inside its kernel).
    inv_freqs: Option<Array>,
}

impl Rope {
    pub fn new(config: &ModelConfig) -> Self {
        Self::with_dims(config, config.head_dim)
    }

    /// Rotates only the first `dims` of each head (partial rotary, Qwen3.5).
    pub fn with_dims(config: &ModelConfig, dims: usize) -> Self {
        let dims = dims as i32;
        let mut rope = Rope {
            dims,
            traditional: config.rope_traditional,
            base: config.rope_theta,
            scale: 1.0,
            freqs: None,
            inv_freqs: None,
        };
        match config.rope_scaling {
            None => {}
            Some(RopeScaling::Linear { factor }) => rope.scale = 1.0 / factor,
            Some(RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old_context,
            }) => {
                let low_freq_wavelen = old_context / low_freq_factor;
                let high_freq_wavelen = old_context / high_freq_factor;
                let freqs: Vec<f32> = (0..dims / 2)
                    .map(|i| {
                        let freq = rope.base.powf((2 * i) as f32 / dims as f32);
                        let wavelen = 2.0 * std::f32::consts::PI * freq;
                        if wavelen > low_freq_wavelen {
                            freq * factor
                        } else if wavelen > high_freq_wavelen {
                            let smooth = (old_context / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            freq / ((1.0 - smooth) / factor + smooth)
                        } else {
                            freq
                        }
                    })
                    .collect();
                rope.freqs = Some(Array::from_slice(&freqs, &[dims / 2]));
            }
        }
        rope.inv_freqs = crate::cuda_qk::inv_freqs(dims, rope.base, rope.freqs.as_ref()).ok();
        rope
    }

    /// What [`crate::cuda_qk::prepare`] needs to rotate like this RoPE at
    /// `positions`; `None` for the traditional (interleaved) layout, which
    /// the kernel does not do.
    pub fn fused<'a>(&'a self, positions: &'a Array) -> Option<crate::cuda_qk::QkRope<'a>> {
        if self.traditional {
            return None;
        }
        Some(crate::cuda_qk::QkRope {
            dims: self.dims,
            inv_freqs: self.inv_freqs.as_ref()?,
            scale: self.scale,
            positions,
        })
    }

    /// Applies RoPE to `x: [B, H, L, D]` for positions `offset..offset+L`
    /// (one offset for all rows, or one per row).
    pub fn forward(&self, x: &Array, offset: &RopeOffset) -> Result<Array> {
        let base = if self.freqs.is_some() {
            None
        } else {
            Some(self.base)
        };
        let freqs = self.freqs.as_ref();
        Ok(match offset {
            RopeOffset::Scalar(o) => fast::rope(
                x,
                self.dims,
                self.traditional,
                base,
                self.scale,
                *o as i32,
                freqs,
            )?,
            RopeOffset::PerRow(offsets) => fast::rope_dynamic(
                x,
                self.dims,
                self.traditional,
                base,
                self.scale,
                *offsets,
                freqs,
            )?,
        })
    }
}

/// Scaled dot-product attention of `q: [B, heads, L, D]` over what
/// [`CacheView::update_and_fetch`] returned: causal for a prompt chunk,
/// nothing for one token, a mask for a decode step whose rows differ in
/// length. Where the CUDA kernel of [`crate::cuda_attn`] is in force it
/// takes every decode step instead: it reads the batch buffers in place
/// with each row's length, and beats MLX's unmasked kernels too
/// (bench/results/h200-2026-12-01-s6.md).
pub fn attend(q: &Array, k: &Array, v: &Array, scale: f32, cache: &CacheView) -> Result<Array> {
    // `usable` first: elsewhere it is one atomic load, and the lengths are
    // built only for a step that takes them.
    if q.dim(2) == 1 && crate::cuda_attn::usable(q.dim(3), q.dtype()) {
        if let Some((keys, values, lens, kv_len)) = cache.decode_lengths() {
            return crate::cuda_attn::decode(q, keys, values, lens, kv_len, scale, None);
        }
    }
    if let Some(chunks) = cache.prefill_chunks() {
        return attend_chunks(q, k, v, scale, chunks);
    }
    match cache.mask() {
        Some(mask) => Ok(fast::scaled_dot_product_attention(
            q, k, v, scale, mask, None,
        )?),
        None => attend_causal(q, k, v, scale),
    }
}

/// Attention with no explicit mask: causal for several query tokens (the
/// last `L` positions of the keys), nothing for one.
fn attend_causal(q: &Array, k: &Array, v: &Array, scale: f32) -> Result<Array> {
    if q.dim(2) == 1 {
        return Ok(fast::scaled_dot_product_attention(
            q, k, v, scale, None, None,
        )?);
    }
    let causal = ScaledDotProductAttentionMask::Causal;
    Ok(fast::scaled_dot_product_attention(
        q, k, v, scale, causal, None,
    )?)
}

/// A batched prefill's attention: `q` is `[n, heads, width, D]`, chunk `i`
/// in row `i` (right-padded), `k`/`v` the whole batch buffers. Each chunk
/// attends causally to its own row's keys up to its end: the attention of
/// a pass per chunk, at its shapes. Padded queries give 0.
fn attend_chunks(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    chunks: &[crate::cache::PrefillChunk],
) -> Result<Array> {
    let (heads, width, dim) = (q.dim(1), q.dim(2), q.dim(3));
    let mut rows = Vec::with_capacity(chunks.len());
    for (i, c) in chunks.iter().enumerate() {
        let (i, row) = (i as i32, c.row as i32);
        let (len, end) = (c.len as i32, (c.start + c.len) as i32);
        let qi = q.index((i..i + 1, .., ..len, ..));
        let ki = k.index((row..row + 1, .., ..end, ..));
        let vi = v.index((row..row + 1, .., ..end, ..));
        let out = attend_causal(&qi, &ki, &vi, scale)?;
        rows.push(if len < width {
            let pad = ops::zeros_dtype(&[1, heads, width - len, dim], out.dtype())?;
            ops::concatenate(&[out, pad], 2)?
        } else {
            out
        });
    }
    Ok(ops::concatenate(&rows, 0)?)
}

/// Grouped-query self-attention with optional q/k/v bias and q/k RMSNorm.
#[derive(Debug)]
pub struct Attention {
    /// `q_proj`, `k_proj`, `v_proj`, run as one.
    qkv: LinearGroup,
    o_proj: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    n_heads: i32,
    n_kv_heads: i32,
    head_dim: i32,
    scale: f32,
    rope: Rope,
}

impl Attention {
    pub fn load(weights: &mut Weights, prefix: &str, config: &ModelConfig) -> Result<Self> {
        let bias = config.attention_bias;
        let norm = |w: &mut Weights, name: &str| -> Result<Option<RmsNorm>> {
            if config.qk_norm {
                Ok(Some(RmsNorm::load(
                    w,
                    &format!("{prefix}.{name}"),
                    config.rms_norm_eps,
                )?))
            } else {
                Ok(None)
            }
        };
        Ok(Attention {
            qkv: LinearGroup::load(weights, prefix, &["q_proj", "k_proj", "v_proj"], bias)?,
            o_proj: Linear::load(weights, &format!("{prefix}.o_proj"), false)?,
            q_norm: norm(weights, "q_norm")?,
            k_norm: norm(weights, "k_norm")?,
            n_heads: config.num_attention_heads as i32,
            n_kv_heads: config.num_key_value_heads as i32,
            head_dim: config.head_dim as i32,
            scale: (config.head_dim as f32).powf(-0.5),
            rope: Rope::new(config),
        })
    }

    /// `x: [B, L, hidden]` → `[B, L, hidden]`, appending this call's keys and
    /// values to the cache `view` describes.
    pub fn forward(&self, x: &Array, cache: &mut CacheView) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        let heads = |h: &Array, n: i32, norm: Option<&RmsNorm>| -> Result<Array> {
            let mut h = h.reshape(&[b, l, n, self.head_dim])?;
            if let Some(norm) = norm {
                h = norm.forward(&h)?;
            }
            Ok(h.transpose_axes(&[0, 2, 1, 3])?)
        };
        let (q, k, v) = match self.fused_qkv(x, cache)? {
            Some(qkv) => qkv,
            None => {
                let qkv = self.qkv.forward(x)?;
                let q = heads(&qkv[0], self.n_heads, self.q_norm.as_ref())?;
                let k = heads(&qkv[1], self.n_kv_heads, self.k_norm.as_ref())?;
                let v = heads(&qkv[2], self.n_kv_heads, None)?;
                let offset = cache.rope_offset();
                (
                    self.rope.forward(&q, &offset)?,
                    self.rope.forward(&k, &offset)?,
                    v,
                )
            }
        };
        let (k, v) = cache.update_and_fetch(&k, &v)?;
        let out = attend(&q, &k, &v, self.scale, cache)?;
        let width = self.n_heads * self.head_dim;
        // `[b, heads, 1, D]` is already in `[b, 1, heads * D]` order: one
        // node instead of a transpose and a reshape (crate::lean).
        let out = if l == 1 && crate::lean::on() {
            out.reshape(&[b, 1, width])?
        } else {
            out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, width])?
        };
        self.o_proj.forward(&out)
    }

    /// A decode step's q, k, v through [`crate::cuda_qk`]'s one kernel
    /// (norms, RoPE and the attention layout), where it is in force: one
    /// token per row, joined q/k/v, both norms or none, non-interleaved RoPE.
    fn fused_qkv(&self, x: &Array, cache: &CacheView) -> Result<Option<(Array, Array, Array)>> {
        let LinearGroup::Joined(linear, _) = &self.qkv else {
            return Ok(None);
        };
        let norm = match (&self.q_norm, &self.k_norm) {
            (Some(q), Some(k)) if q.eps == k.eps => Some(crate::cuda_qk::QkNorm {
                q: &q.weight,
                k: &k.weight,
                eps: q.eps,
            }),
            (None, None) => None,
            _ => return Ok(None),
        };
        if x.dim(1) != 1
            || !crate::cuda_qk::usable(self.head_dim, self.rope.dims, x.dtype(), norm.is_some())
        {
            return Ok(None);
        }
        let scalar;
        let positions = match cache.rope_offset() {
            RopeOffset::PerRow(offsets) => offsets,
            RopeOffset::Scalar(o) => {
                scalar = Array::from_int(o as i32);
                &scalar
            }
        };
        let Some(rope) = self.rope.fused(positions) else {
            return Ok(None);
        };
        let shape = crate::cuda_qk::QkShape {
            hq: self.n_heads,
            hkv: self.n_kv_heads,
            head_dim: self.head_dim,
        };
        let qkv = linear.forward(x)?;
        Ok(Some(crate::cuda_qk::prepare(
            &qkv,
            shape,
            norm.as_ref(),
            &rope,
        )?))
    }

    pub fn nbytes(&self) -> usize {
        self.qkv.nbytes() + self.o_proj.nbytes()
    }
}

/// The SwiGLU feed-forward block: `down(silu(gate(x)) * up(x))`.
#[derive(Debug)]
pub struct Mlp {
    /// `gate_proj`, `up_proj`, run as one.
    gate_up: LinearGroup,
    down_proj: Linear,
}

impl Mlp {
    pub fn load(weights: &mut Weights, prefix: &str, bias: bool) -> Result<Self> {
        Ok(Mlp {
            gate_up: LinearGroup::load(weights, prefix, &["gate_proj", "up_proj"], bias)?,
            down_proj: Linear::load(weights, &format!("{prefix}.down_proj"), bias)?,
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        let h = match (&self.gate_up, crate::lean::on()) {
            // The SwiGLU of the joined product: one kernel where it takes
            // it, instead of two slices and the SwiGLU (crate::lean).
            (LinearGroup::Joined(linear, widths), true) if matches!(widths[..], [g, u] if g == u) =>
            {
                let y = linear.forward(x)?;
                match crate::cuda_swiglu::joined(&y, widths[0])? {
                    Some(h) => h,
                    None => crate::cuda_swiglu::reference(&y, widths[0])?,
                }
            }
            _ => {
                let gate_up = self.gate_up.forward(x)?;
                crate::fused::swiglu(&gate_up[0], &gate_up[1])?
            }
        };
        self.down_proj.forward(&h)
    }

    pub fn nbytes(&self) -> usize {
        self.gate_up.nbytes() + self.down_proj.nbytes()
    }
}

/// Runs pre-norm decoder blocks over the residual stream `h`: for each
/// layer, `h += mixer(input_norm(h))`, then `h += mlp(post_norm(h))`.
/// `norms` gives a layer's (input, post-attention) norms; `mixer` runs a
/// layer's attention (or linear attention) with its cache view, one per
/// layer. Each add is fused with the norm that reads its sum
/// ([`RmsNorm::add_forward`]): the post-attention norm, and the next
/// layer's input norm; the last layer's add is left plain (the final norm
/// may only need the last position).
pub fn pre_norm_stack<L>(
    mut h: Array,
    layers: &[L],
    cache: &mut [CacheView],
    norms: impl Fn(&L) -> (&RmsNorm, &RmsNorm),
    mixer: impl Fn(&L, &Array, &mut CacheView) -> Result<Array>,
    mlp: impl Fn(&L, &Array) -> Result<Array>,
) -> Result<Array> {
    if cache.len() != layers.len() {
        return Err(crate::ModelError::Mlx(format!(
            "{} cache views for {} layers",
            cache.len(),
            layers.len()
        )));
    }
    let Some(first) = layers.first() else {
        return Ok(h);
    };
    let mut normed = norms(first).0.forward(&h)?;
    for (i, (layer, view)) in layers.iter().zip(cache.iter_mut()).enumerate() {
        let r = mixer(layer, &normed, view)?;
        let (mid, n) = norms(layer).1.add_forward(&h, &r)?;
        let m = mlp(layer, &n)?;
        match layers.get(i + 1) {
            Some(next) => (h, normed) = norms(next).0.add_forward(&mid, &m)?,
            None => h = mid.add(&m)?,
        }
    }
    Ok(h)
}

/// Keeps only the last position of `[B, L, D]` (prefill needs one logit
/// row): each row's last real token for a batched prefill of right-padded
/// chunks (`cache` is the pass's views), the last position otherwise.
pub fn last_position(x: &Array, cache: &[CacheView]) -> Result<Array> {
    if let Some(last) = cache.first().and_then(CacheView::last_tokens) {
        return Ok(x.take_along_axis(last, 1)?);
    }
    let l = x.dim(1);
    if l == 1 {
        return Ok(x.clone());
    }
    Ok(x.index((.., (l - 1)..l, ..)))
}

#[cfg(test)]
mod group_tests {
    use super::*;

    use crate::test_util::normal;

    fn quantized(w: &Array, bits: i32) -> Linear {
        let (weight, scales, biases) = ops::quantize(w, 32, bits).unwrap();
        Linear::Quantized {
            weight,
            scales,
            biases,
            bias: None,
            group_size: 32,
            bits,
        }
    }

    fn group(parts: Vec<Linear>) -> LinearGroup {
        LinearGroup::new(parts).unwrap()
    }

    /// Joined layers give each layer's own output; layers that cannot be
    /// joined stay separate and still do.
    #[test]
    fn joined_outputs_equal_the_separate_layers() {
        let x = normal(&[2, 3, 64], 1);
        let (w1, w2, w3) = (
            normal(&[48, 64], 2),
            normal(&[16, 64], 3),
            normal(&[8, 64], 4),
        );
        let b1 = normal(&[48], 5);
        let b2 = normal(&[16], 6);
        let expect = [
            x.matmul(w1.t()).unwrap(),
            x.matmul(w2.t()).unwrap(),
            x.matmul(w3.t()).unwrap(),
        ];
        let dense = |w: &Array, bias: Option<&Array>| Linear::dense(w.clone(), bias.cloned());

        let joined = group(vec![dense(&w1, None), dense(&w2, None), dense(&w3, None)]);
        assert!(matches!(joined, LinearGroup::Joined(..)));
        let out = joined.forward(&x).unwrap();
        for (o, e) in out.iter().zip(&expect) {
            assert_eq!(o.shape(), e.shape());
            assert!(o.all_close(e, 1e-4, 1e-4, None).unwrap());
        }

        // With bias on every part it joins; on some only it does not.
        let biased = group(vec![dense(&w1, Some(&b1)), dense(&w2, Some(&b2))]);
        assert!(matches!(biased, LinearGroup::Joined(..)));
        let out = biased.forward(&x).unwrap();
        assert!(out[1]
            .all_close(expect[1].add(&b2).unwrap(), 1e-4, 1e-4, None)
            .unwrap());
        let some = group(vec![dense(&w1, Some(&b1)), dense(&w2, None)]);
        assert!(matches!(some, LinearGroup::Separate(..)));

        // Quantized alike joins and matches the parts; mixed bits, or dense
        // with quantized, stay separate.
        let q = [quantized(&w1, 4), quantized(&w2, 4)];
        let expect_q: Vec<Array> = q.iter().map(|l| l.forward(&x).unwrap()).collect();
        let joined_q = group(vec![quantized(&w1, 4), quantized(&w2, 4)]);
        assert!(matches!(joined_q, LinearGroup::Joined(..)));
        for (o, e) in joined_q.forward(&x).unwrap().iter().zip(&expect_q) {
            assert!(o.all_close(e, 1e-4, 1e-4, None).unwrap());
        }
        let mixed = group(vec![quantized(&w1, 4), quantized(&w2, 8)]);
        assert!(matches!(mixed, LinearGroup::Separate(..)));
        assert_eq!(mixed.forward(&x).unwrap().len(), 2);
        let kinds = group(vec![quantized(&w1, 4), dense(&w2, None)]);
        assert!(matches!(kinds, LinearGroup::Separate(..)));
    }
}
