//! The Gated DeltaNet layer (linear attention) as Qwen3.5 has it.
//!
//! Per token: four input projections (`qkv`, the output gate `z`, the write
//! strength `b` and the decay input `a`); a causal depthwise convolution over
//! the `qkv` channels (kernel 4, its last `kernel - 1` inputs carried between
//! calls) and SiLU; per-head L2-normalised queries (scaled by
//! `key_dim^-1/2`) and keys; decay `g = exp(-exp(A_log) * softplus(a +
//! dt_bias))` and `beta = sigmoid(b)`; then the gated delta rule on a
//! `[key_dim, value_dim]` memory `S` per value head:
//!
//! ```text
//! S ← g·S;   S ← S + k ⊗ beta·(v − Sᵀk);   y = Sᵀq
//! ```
//!
//! followed by an RMSNorm of `y` gated by `silu(z)` and the output
//! projection. The memory is kept in f32.
//!
//! A prompt chunk of `T` tokens is processed in blocks of up to
//! [`BLOCK`] tokens with the chunked (WY) form of the rule: inside a block
//! the updates are condensed into a few matrix products, and only the
//! `T / BLOCK` block boundaries are sequential, so prefill is linear in the
//! prompt length with a small constant. The unit-lower-triangular system of
//! a block is inverted with `log2(BLOCK)` products (the inverse of `I − N`,
//! `N` nilpotent, is `(I + N)(I + N²)(I + N⁴)…`), which runs on every MLX
//! device. A single decoding token takes the recurrence directly.

use mlx_rs::{
    fast,
    ops::{self, indexing::IndexOp},
    Array, Dtype,
};

use crate::{
    cache::{CacheView, RecurrentState},
    config::HybridConfig,
    error::{ModelError, Result},
    layers::{Linear, LinearGroup},
    weights::Weights,
};

/// The epsilon of the query/key L2 normalisation (on the sum of squares).
const QK_EPS: f32 = 1e-6;

/// Tokens per block of the chunked delta rule.
pub const BLOCK: usize = 64;

#[derive(Debug)]
pub struct GatedDeltaNet {
    /// `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`, run as one.
    in_proj: LinearGroup,
    out_proj: Linear,
    /// Depthwise convolution weights `[conv_dim, kernel]`.
    conv_weight: Array,
    /// The same, `[kernel, conv_dim]` and contiguous: one decoding token's
    /// convolution is `Σ_taps input · taps`, two kernels.
    conv_taps: Array,
    /// `key_dim^-1` and `key_dim^-1/2` (f32 scalars): the query and key
    /// scales of a decoding step, applied inside its fused graph.
    q_scale: Array,
    k_scale: Array,
    /// `-exp(A_log)` per value head (f32).
    neg_a: Array,
    dt_bias: Array,
    norm_weight: Array,
    eps: f32,
    key_heads: i32,
    value_heads: i32,
    key_dim: i32,
    value_dim: i32,
    kernel: i32,
}

impl GatedDeltaNet {
    pub fn load(
        weights: &mut Weights,
        prefix: &str,
        config: &HybridConfig,
        eps: f32,
    ) -> Result<Self> {
        let conv_dim = config.conv_dim() as i32;
        let kernel = config.linear_conv_kernel_dim as i32;
        let name = format!("{prefix}.conv1d.weight");
        let conv = weights.take(&name)?;
        // MLX stores `[C, kernel, 1]`, PyTorch `[C, 1, kernel]`: either way
        // the kernel taps of channel c are row c.
        if conv.size() != (conv_dim * kernel) as usize || conv.dim(0) != conv_dim {
            return Err(ModelError::bad_tensor(
                weights.source(),
                name,
                format!(
                    "shape {:?}, expected [{conv_dim}, {kernel}, 1] or [{conv_dim}, 1, {kernel}]",
                    conv.shape()
                ),
            ));
        }
        let conv_weight = conv.reshape(&[conv_dim, kernel])?;
        let a_log = weights
            .take(&format!("{prefix}.A_log"))?
            .as_dtype(Dtype::Float32)?;
        let neg_a = ops::negative(ops::exp(&a_log)?)?;
        let conv_taps = conv_weight.transpose_axes(&[1, 0])?.contiguous()?;
        let inv = (config.linear_key_head_dim as f32).powf(-0.5);
        Ok(GatedDeltaNet {
            conv_taps,
            q_scale: Array::from_f32(inv * inv),
            k_scale: Array::from_f32(inv),
            in_proj: LinearGroup::load(
                weights,
                prefix,
                &["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"],
                false,
            )?,
            out_proj: Linear::load(weights, &format!("{prefix}.out_proj"), false)?,
            conv_weight,
            neg_a,
            dt_bias: weights.take(&format!("{prefix}.dt_bias"))?,
            norm_weight: weights.take(&format!("{prefix}.norm.weight"))?,
            eps,
            key_heads: config.linear_num_key_heads as i32,
            value_heads: config.linear_num_value_heads as i32,
            key_dim: config.linear_key_head_dim as i32,
            value_dim: config.linear_value_head_dim as i32,
            kernel,
        })
    }

    /// The zero state of one sequence.
    fn zero_state(&self, dtype: Dtype) -> Result<RecurrentState> {
        let conv_dim = self.conv_weight.dim(0);
        Ok(RecurrentState {
            conv: ops::zeros_dtype(&[1, self.kernel - 1, conv_dim], dtype)?,
            ssm: ops::zeros_dtype(
                &[1, self.value_heads, self.key_dim, self.value_dim],
                Dtype::Float32,
            )?,
        })
    }

    /// `x: [B, L, hidden]` → `[B, L, hidden]`, advancing the state `cache`
    /// holds for these rows.
    pub fn forward(&self, x: &Array, cache: &mut CacheView) -> Result<Array> {
        let (b, l) = (x.dim(0), x.dim(1));
        // Right-padded rows of a batched prefill: padding gets beta = 0 and
        // no decay, so it leaves the state as the row's last token left it.
        let padding = cache.padding().map(|(v, l)| (v.clone(), l.clone()));
        let init = self.zero_state(x.dtype())?;
        let state = broadcast_rows(cache.recurrent_state(&init)?, b)?;
        let parts = match self.one_token_kernel(x, &state, l, padding.is_some())? {
            OneToken::Kernel([out, conv, ssm]) => {
                cache.set_recurrent_state(RecurrentState { conv, ssm }, 1)?;
                return self.out_proj.forward(&out);
            }
            OneToken::Projected(parts) => parts,
            OneToken::NotTaken => self.in_proj.forward(x)?,
        };
        let (out, new) = self.mix(&parts, &state, padding.as_ref())?;
        cache.set_recurrent_state(new, l as usize)?;
        self.out_proj.forward(&out)
    }

    /// A decoding token's projection-to-gated-norm as one CUDA kernel
    /// ([`crate::cuda_delta`]) when it is in force.
    fn one_token_kernel(
        &self,
        x: &Array,
        state: &RecurrentState,
        l: i32,
        padded: bool,
    ) -> Result<OneToken> {
        if l != 1 || padded || !crate::cuda_delta::enabled() {
            return Ok(OneToken::NotTaken);
        }
        let Some(proj) = self.in_proj.joined_forward(x)? else {
            return Ok(OneToken::NotTaken);
        };
        let split = |proj: &Array| {
            self.in_proj
                .split(proj)
                .ok_or_else(|| ModelError::Mlx("joined projection expected".into()))
        };
        let reference = |proj: &Array, conv: &Array, ssm: &Array| {
            let state = RecurrentState {
                conv: conv.clone(),
                ssm: ssm.clone(),
            };
            let (out, new) = self.mix(&split(proj)?, &state, None)?;
            Ok([out, new.conv, new.ssm])
        };
        let inv = (self.key_dim as f32).powf(-0.5);
        let layer = crate::cuda_delta::DeltaLayer {
            shape: crate::cuda_delta::DeltaShape {
                key_heads: self.key_heads,
                value_heads: self.value_heads,
                key_dim: self.key_dim,
                value_dim: self.value_dim,
                kernel: self.kernel,
            },
            taps: &self.conv_taps,
            dt_bias: &self.dt_bias,
            neg_a: &self.neg_a,
            norm_weight: &self.norm_weight,
            norm_eps: self.eps,
            qk_eps: QK_EPS * inv * inv,
            q_scale: inv * inv,
            k_scale: inv,
        };
        Ok(
            match crate::cuda_delta::step(&layer, &proj, &state.conv, &state.ssm, reference)? {
                Some(step) => OneToken::Kernel(step),
                None => OneToken::Projected(split(&proj)?),
            },
        )
    }

    /// The projections' outputs `[qkv, z, b, a]` (each `[B, L, _]`) and the
    /// state before them → the gated norm's output `[B, L, Hv·Dv]` (what
    /// `out_proj` reads) and the state after them.
    fn mix(
        &self,
        parts: &[Array],
        state: &RecurrentState,
        padding: Option<&(Array, Array)>,
    ) -> Result<(Array, RecurrentState)> {
        let [qkv, z, proj_b, proj_a] = parts else {
            return Err(ModelError::Mlx("four input projections expected".into()));
        };
        let (b, l) = (qkv.dim(0), qkv.dim(1));
        let dtype = qkv.dtype();
        let z = z.reshape(&[b, l, self.value_heads, self.value_dim])?;
        // beta = sigmoid(b) and the log of the decay, -exp(A_log) *
        // softplus(a + dt_bias), both f32.
        let (beta, log_g) = crate::fused::delta_gates(proj_b, proj_a, &self.dt_bias, &self.neg_a)?;
        let (beta, log_g) = match padding {
            Some((valid, _)) => (beta.multiply(valid)?, log_g.multiply(valid)?),
            None => (beta, log_g),
        };

        // Causal depthwise convolution over [carried inputs, new inputs].
        let conv_input = ops::concatenate(&[&state.conv, qkv], 1)?;
        let keep = self.kernel - 1;
        let total = conv_input.dim(1);
        let new_conv = match &padding {
            // The last `keep` inputs up to each row's last real token:
            // positions len..len + keep of [carried, new].
            Some((_, lens)) => {
                let at = ops::arange::<_, i32>(0, keep, None)?
                    .reshape(&[1, keep, 1])?
                    .add(lens.reshape(&[b, 1, 1])?)?;
                conv_input.take_along_axis(&at, 1)?
            }
            None => conv_input.index((.., (total - keep).., ..)),
        };
        let conv = if l == 1 {
            conv_input.multiply(&self.conv_taps)?.sum_axis(1, true)?
        } else {
            let mut conv = conv_input
                .index((.., 0..l, ..))
                .multiply(self.conv_weight.index((.., 0)))?;
            for k in 1..self.kernel {
                let tap = conv_input
                    .index((.., k..k + l, ..))
                    .multiply(self.conv_weight.index((.., k)))?;
                conv = conv.add(tap)?;
            }
            conv
        };
        let conv = crate::fused::silu(&conv)?;

        let kd = self.key_heads * self.key_dim;
        let q = conv
            .index((.., .., 0..kd))
            .reshape(&[b, l, self.key_heads, self.key_dim])?;
        let k = conv
            .index((.., .., kd..2 * kd))
            .reshape(&[b, l, self.key_heads, self.key_dim])?;
        let v =
            conv.index((.., .., 2 * kd..))
                .reshape(&[b, l, self.value_heads, self.value_dim])?;
        // L2 normalisation with eps 1e-6 on the sum of squares, via RMSNorm
        // (which adds eps to the mean); queries also take key_dim^-1/2.
        let inv = (self.key_dim as f32).powf(-0.5);
        let rms_eps = QK_EPS * inv * inv;
        let q = fast::rms_norm(&q, None, rms_eps)?;
        let k = fast::rms_norm(&k, None, rms_eps)?;
        let log_g = log_g.transpose_axes(&[0, 2, 1])?;
        let beta = beta.transpose_axes(&[0, 2, 1])?;
        // To [B, Hv, L, D], key heads repeated for their value heads.
        let to_heads = |t: Array| -> Result<Array> {
            let t = self.repeat_heads(t)?;
            Ok(t.transpose_axes(&[0, 2, 1, 3])?)
        };

        let (y, ssm) = if l == 1 {
            // One fused graph: scales, f32 casts and the recurrence.
            let v = v.transpose_axes(&[0, 2, 1, 3])?;
            crate::fused::delta_step(
                &to_heads(q)?,
                &to_heads(k)?,
                &v,
                &log_g,
                &beta,
                &state.ssm,
                &self.q_scale,
                &self.k_scale,
            )?
        } else {
            let q = q.multiply(Array::from_f32(inv * inv))?;
            let k = k.multiply(Array::from_f32(inv))?;
            let f32 = |t: Array| Ok::<_, ModelError>(t.as_dtype(Dtype::Float32)?);
            let (q, k) = (f32(to_heads(q)?)?, f32(to_heads(k)?)?);
            let v = v.transpose_axes(&[0, 2, 1, 3])?.as_dtype(Dtype::Float32)?;
            delta_chunked(&q, &k, &v, &log_g, &beta, &state.ssm)?
        };
        // [B, Hv, L, Dv] → [B, L, Hv, Dv]; RMSNorm gated by silu(z).
        let y = y.transpose_axes(&[0, 2, 1, 3])?.as_dtype(dtype)?;
        let normed = fast::rms_norm(&y, Some(&self.norm_weight), self.eps)?;
        let out = crate::fused::gated_f32(&z, &normed)?.reshape(&[
            b,
            l,
            self.value_heads * self.value_dim,
        ])?;
        Ok((
            out,
            RecurrentState {
                conv: new_conv,
                ssm,
            },
        ))
    }

    /// `[B, L, Hk, D]` → `[B, L, Hv, D]`: value head `h` reads key head
    /// `h / (Hv / Hk)`.
    fn repeat_heads(&self, t: Array) -> Result<Array> {
        let factor = self.value_heads / self.key_heads;
        if factor == 1 {
            return Ok(t);
        }
        let (b, l) = (t.dim(0), t.dim(1));
        let t = t.reshape(&[b, l, self.key_heads, 1, self.key_dim])?;
        let t = ops::broadcast_to(&t, &[b, l, self.key_heads, factor, self.key_dim])?;
        Ok(t.reshape(&[b, l, self.value_heads, self.key_dim])?)
    }

    pub fn nbytes(&self) -> usize {
        self.in_proj.nbytes()
            + self.out_proj.nbytes()
            + self.conv_weight.nbytes()
            + self.neg_a.nbytes()
            + self.dt_bias.nbytes()
            + self.norm_weight.nbytes()
    }
}

/// What [`GatedDeltaNet::one_token_kernel`] did.
enum OneToken {
    /// The kernel ran: `[out, conv, ssm]`.
    Kernel(crate::cuda_delta::Step),
    /// It did not, after making the projections (their outputs).
    Projected(Vec<Array>),
    /// It does not take this call.
    NotTaken,
}

/// A fresh state has one row; a batch of `rows` sequences needs one each.
fn broadcast_rows(state: RecurrentState, rows: i32) -> Result<RecurrentState> {
    if state.conv.dim(0) == rows {
        return Ok(state);
    }
    let widen = |a: Array| -> Result<Array> {
        let mut shape = a.shape().to_vec();
        shape[0] = rows;
        Ok(ops::broadcast_to(&a, &shape)?)
    };
    Ok(RecurrentState {
        conv: widen(state.conv)?,
        ssm: widen(state.ssm)?,
    })
}

/// The gated delta rule over `T` tokens in blocks of [`BLOCK`] (see the
/// module docs). Shapes as [`crate::fused::delta_step`] with `T` for 1
/// (here scaled and f32 already); returns
/// `y: [B, H, T, Dv]` and the final state.
pub fn delta_chunked(
    q: &Array,
    k: &Array,
    v: &Array,
    log_g: &Array,
    beta: &Array,
    state: &Array,
) -> Result<(Array, Array)> {
    let (b, h, t, dk) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let dv = v.dim(3);
    let c = (t as usize).next_power_of_two().min(BLOCK) as i32;
    let n = (t + c - 1) / c;
    let pad = n * c - t;
    // Padding tokens have k = 0, beta = 0 and no decay: they change nothing.
    let padded = |a: &Array, axis_len: &[i32]| -> Result<Array> {
        if pad == 0 {
            return Ok(a.clone());
        }
        let mut shape = vec![b, h, pad];
        shape.extend_from_slice(axis_len);
        Ok(ops::concatenate(
            &[a.clone(), ops::zeros_dtype(&shape, a.dtype())?],
            2,
        )?)
    };
    let blocks = |a: Array, d: Option<i32>| -> Result<Array> {
        Ok(match d {
            Some(d) => a.reshape(&[b, h, n, c, d])?,
            None => a.reshape(&[b, h, n, c])?,
        })
    };
    let q = blocks(padded(q, &[dk])?, Some(dk))?;
    let k = blocks(padded(k, &[dk])?, Some(dk))?;
    let v = blocks(padded(v, &[dv])?, Some(dv))?;
    let log_g = blocks(padded(log_g, &[])?, None)?;
    let beta = blocks(padded(beta, &[])?, None)?;

    // Cumulative log decay inside each block; decay[i, j] = g_{j+1}···g_i for
    // j <= i, 0 above the diagonal (masked before exp: no overflow).
    let cum = ops::cumsum(&log_g, -1, None, None)?; // [B, H, n, c]
    let diff = cum.expand_dims(-1)?.subtract(cum.expand_dims(-2)?)?;
    let lower = ops::tri::<bool>(c, None, None)?;
    let strict = ops::tri::<bool>(c, None, Some(-1))?;
    let decay = ops::exp(ops::select(
        &lower,
        &diff,
        Array::from_f32(f32::NEG_INFINITY),
    )?)?;

    let beta = beta.expand_dims(-1)?;
    let k_beta = k.multiply(&beta)?;
    let v_beta = v.multiply(&beta)?;
    let k_t = k.swap_axes(-1, -2)?;
    // (I + A) X = R with A strictly lower: X = Σ (−A)^m R, as a product.
    let a = ops::select(
        &strict,
        k_beta.matmul(&k_t)?.multiply(&decay)?,
        Array::from_f32(0.0),
    )?;
    let neg = ops::negative(&a)?;
    let rhs = ops::concatenate(
        &[v_beta, k_beta.multiply(ops::exp(&cum)?.expand_dims(-1)?)?],
        -1,
    )?;
    let mut x = rhs.add(neg.matmul(&rhs)?)?;
    let mut power = neg;
    let mut span = 2;
    while span < c {
        power = power.matmul(&power)?;
        x = x.add(power.matmul(&x)?)?;
        span *= 2;
    }
    let u = x.index((.., .., .., .., ..dv)); // corrected values
    let w = x.index((.., .., .., .., dv..)); // decayed keys reading the old state

    let attn = q.matmul(&k_t)?.multiply(&decay)?; // [B, H, n, c, c]
    let q_decayed = q.multiply(ops::exp(&cum)?.expand_dims(-1)?)?;
    let last = cum.index((.., .., .., (c - 1)..c)); // [B, H, n, 1]
    let k_decayed = k.multiply(ops::exp(last.subtract(&cum)?)?.expand_dims(-1)?)?;
    let block_decay = ops::exp(&last)?.expand_dims(-1)?; // [B, H, n, 1, 1]

    let mut state = state.clone();
    let mut outs = Vec::with_capacity(n as usize);
    for i in 0..n {
        let at = |a: &Array| a.index((.., .., i));
        let v_new = at(&u).subtract(at(&w).matmul(&state)?)?;
        let out = at(&q_decayed)
            .matmul(&state)?
            .add(at(&attn).matmul(&v_new)?)?;
        outs.push(out);
        state = state
            .multiply(at(&block_decay))?
            .add(at(&k_decayed).swap_axes(-1, -2)?.matmul(&v_new)?)?;
    }
    let y = ops::concatenate(&outs, 2)?;
    let y = if pad > 0 {
        y.index((.., .., ..t, ..))
    } else {
        y
    };
    Ok((y, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token of the gated delta rule, in its matrix-product form: the
    /// reference the chunked form and the fused decoding step
    /// (`fused::delta_step`, which the layer runs) are tested against.
    /// `q, k: [B, H, 1, Dk]`, `v: [B, H, 1, Dv]`, `log_g, beta: [B, H, 1]`,
    /// `state: [B, H, Dk, Dv]`.
    fn delta_step(
        q: &Array,
        k: &Array,
        v: &Array,
        log_g: &Array,
        beta: &Array,
        state: &Array,
    ) -> Result<(Array, Array)> {
        let g = ops::exp(log_g)?.expand_dims(-1)?; // [B, H, 1, 1]
        let state = state.multiply(&g)?;
        let remembered = k.matmul(&state)?; // [B, H, 1, Dv]
        let delta = v.subtract(&remembered)?.multiply(beta.expand_dims(-1)?)?;
        let state = state.add(k.swap_axes(-1, -2)?.matmul(&delta)?)?;
        let y = q.matmul(&state)?;
        Ok((y, state))
    }

    use crate::test_util::{max_gap as err, normal};

    /// The chunked form equals the token-by-token recurrence, across block
    /// boundaries, with padding and a non-zero starting state.
    #[test]
    fn chunked_equals_recurrence() {
        let (b, h, dk, dv) = (2, 3, 8, 5);
        for t in [1, 5, 64, 100, 130] {
            let unit = |a: Array| {
                let norm = a
                    .square()
                    .unwrap()
                    .sum_axis(-1, true)
                    .unwrap()
                    .sqrt()
                    .unwrap();
                a.divide(norm).unwrap()
            };
            let q = unit(normal(&[b, h, t, dk], 1))
                .multiply(Array::from_f32(0.3))
                .unwrap();
            let k = unit(normal(&[b, h, t, dk], 2));
            let v = normal(&[b, h, t, dv], 3);
            let log_g = ops::negative(ops::abs(normal(&[b, h, t], 4)).unwrap())
                .unwrap()
                .multiply(Array::from_f32(0.2))
                .unwrap();
            let beta = ops::sigmoid(normal(&[b, h, t], 5)).unwrap();
            let state0 = normal(&[b, h, dk, dv], 6)
                .multiply(Array::from_f32(0.1))
                .unwrap();

            let (y, s) = delta_chunked(&q, &k, &v, &log_g, &beta, &state0).unwrap();
            let mut state = state0.clone();
            let mut ys = Vec::new();
            for i in 0..t {
                let at4 = |a: &Array| a.index((.., .., i..i + 1, ..));
                let at3 = |a: &Array| a.index((.., .., i..i + 1));
                let (yi, si) = delta_step(
                    &at4(&q),
                    &at4(&k),
                    &at4(&v),
                    &at3(&log_g),
                    &at3(&beta),
                    &state,
                )
                .unwrap();
                ys.push(yi);
                state = si;
            }
            let y_ref = ops::concatenate(&ys, 2).unwrap();
            assert!(
                err(&y, &y_ref) < 1e-4,
                "T={t}: y differs by {}",
                err(&y, &y_ref)
            );
            assert!(
                err(&s, &state) < 1e-4,
                "T={t}: state differs by {}",
                err(&s, &state)
            );
        }
    }

    /// The fused decoding step (element-wise, scales inside) equals the
    /// matrix-product recurrence, for a batch of rows and several steps.
    #[test]
    fn fused_step_equals_recurrence() {
        let (b, h, dk, dv) = (3, 2, 16, 8);
        let (qs, ks) = (0.25f32, 0.5f32);
        let mut fused_state = normal(&[b, h, dk, dv], 16);
        let mut state = fused_state.clone();
        for step in 0..3u64 {
            let q = normal(&[b, h, 1, dk], 10 + 7 * step);
            let k = normal(&[b, h, 1, dk], 11 + 7 * step);
            let v = normal(&[b, h, 1, dv], 12 + 7 * step);
            let log_g =
                ops::negative(ops::abs(normal(&[b, h, 1], 13 + 7 * step)).unwrap()).unwrap();
            let beta = ops::sigmoid(normal(&[b, h, 1], 14 + 7 * step)).unwrap();
            let (y_fused, s_fused) = crate::fused::delta_step(
                &q,
                &k,
                &v,
                &log_g,
                &beta,
                &fused_state,
                &Array::from_f32(qs),
                &Array::from_f32(ks),
            )
            .unwrap();
            let (y, s) = delta_step(
                &q.multiply(Array::from_f32(qs)).unwrap(),
                &k.multiply(Array::from_f32(ks)).unwrap(),
                &v,
                &log_g,
                &beta,
                &state,
            )
            .unwrap();
            assert_eq!(y_fused.shape(), y.shape());
            assert_eq!(s_fused.shape(), s.shape());
            assert!(y_fused.all_close(&y, 1e-4, 1e-4, None).unwrap());
            assert!(s_fused.all_close(&s, 1e-4, 1e-4, None).unwrap());
            fused_state = s_fused;
            state = s;
        }
    }
}
