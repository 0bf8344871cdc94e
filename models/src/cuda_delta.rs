//! One decoding token of a Gated DeltaNet layer as one kernel, for MLX's
//! CUDA backend: from the joined input projection to the gated RMSNorm that
//! feeds `out_proj`.
//!
//! MLX's ops run that part of a layer as about twenty kernels per step: the
//! causal convolution (concatenate, multiply, sum), SiLU, two RMSNorms for
//! the query/key L2 normalisation, the copies that repeat key heads and
//! make the projections' slices contiguous, the gates, the recurrence (a
//! compiled graph, split by its two reductions), the cast, the gated
//! RMSNorm. Each is a few µs of GPU time and, with a decode step bound by
//! MLX's host work per op (docs/cuda.md), a launch's worth of host time. A
//! Qwen3.5 model has three DeltaNet layers in every four.
//!
//! One block per (row, value head), one thread per value channel (and per
//! key channel of the head's key head) and part of the state's rows:
//! 1. the convolution over the carried inputs and the new one, SiLU, and
//!    the carried inputs shifted by one (written by the block of each
//!    channel: the first value head of a key head writes its q/k channels);
//! 2. q and k L2-normalised (RMSNorm with `eps / Dk`, then the scales
//!    `Dk^-1` and `Dk^-1/2`), kept in shared memory;
//! 3. the gates `beta = sigmoid(b)` and `g = exp(softplus(a + dt_bias) ·
//!    -exp(A_log))`;
//! 4. the delta rule on the state column of each value channel, split over
//!    up to 4 threads that each hold a quarter of its rows in registers
//!    (the state is read once): `S = g·S; S += k (beta (v - Sᵀk))ᵀ;
//!    y = Sᵀq`, f32;
//! 5. `y` to the element type, RMSNorm with the layer's weight, times
//!    `silu(z)`.
//!
//! It rounds where MLX's ops round (products and sums of the convolution,
//! SiLU, the normalised q/k and `y` to the element type). In force after
//! [`enable`] (Hearth enables it on CUDA unless `HEARTH_CUDA_DELTA=off`,
//! docs/cuda.md), per layer shape and element type only once it has
//! matched the layer's own MLX ops on this device at first use (two rows,
//! random inputs, the layer's weights).

use std::sync::atomic::{AtomicBool, Ordering};

use mlx_rs::{Array, Dtype};

use crate::cuda_kernel::{
    half_precision, int_array, relative_error, verdict, Checked, CudaKernel, LaunchDims,
    TemplateArg,
};
use crate::error::{ModelError, Result};

static ON: AtomicBool = AtomicBool::new(false);

/// Most threads a block: 512 leaves each up to 128 registers.
const MAX_THREADS: i32 = 512;

/// Widest head (key or value channels) taken: one thread per channel and
/// state part, whose state values (up to 128) stay in registers.
pub const MAX_HEAD_DIM: i32 = 128;

/// Device functions: the sum of two values over the block.
const HEADER: &str = r#"
template <int NT>
__device__ float2 hearth_block_sum2(float a, float b, float2* red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    const int t = threadIdx.x;
    if ((t & 31) == 0) {
        red[t >> 5] = make_float2(a, b);
    }
    __syncthreads();
    float2 s = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < NT / 32; ++w) {
        s.x += red[w].x;
        s.y += red[w].y;
    }
    __syncthreads();
    return s;
}
"#;

/// The kernel body. `proj`: `[B, W]` the joined projection (qkv, z, b, a
/// side by side); `conv`: `[B, KS - 1, C]` the carried convolution inputs;
/// `taps`: `[KS, C]`; `dt_bias`: `[HV]` (T); `neg_a`: `[HV]` f32; `ssm`:
/// `[B, HV, DK, DV]` f32; `nw`: `[DV]`; `dims` = [norm eps, q/k eps, q
/// scale, k scale] as f32 bits.
const SOURCE: &str = r#"
    constexpr int C = 2 * HK * DK + HV * DV;
    constexpr int KC = KS - 1;
    constexpr int OZ = C;
    constexpr int OB = C + HV * DV;
    constexpr int OA = OB + HV;
    constexpr int CW = NT / P;
    constexpr int DKP = DK / P;
    const float norm_eps = __int_as_float(dims[0]);
    const float qk_eps = __int_as_float(dims[1]);
    const float q_scale = __int_as_float(dims[2]);
    const float k_scale = __int_as_float(dims[3]);
    const int bh = blockIdx.x;
    const int b = bh / HV;
    const int h = bh - b * HV;
    const int hk = h / (HV / HK);
    const int t = threadIdx.x;
    const bool owner = (h % (HV / HK)) == 0;
    const T* row = proj + (size_t)b * W;
    const T* carried = conv + (size_t)b * KC * C;
    T* carried_out = conv_out + (size_t)b * KC * C;
    __shared__ float q_s[DK];
    __shared__ float k_s[DK];
    __shared__ float2 red[NT / 32];
    __shared__ float v_s[DV];
    __shared__ float part[P][CW];

    // Convolution + SiLU of channel c; `write`: shift its carried inputs.
    auto conv_silu = [&](int c, bool write) -> float {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < KC; ++j) {
            const T in = carried[j * C + c];
            acc += static_cast<float>(T(static_cast<float>(in) * static_cast<float>(taps[j * C + c])));
            if (write && j > 0) {
                carried_out[(j - 1) * C + c] = in;
            }
        }
        const T in = row[c];
        acc += static_cast<float>(T(static_cast<float>(in) * static_cast<float>(taps[KC * C + c])));
        if (write) {
            carried_out[(KC - 1) * C + c] = in;
        }
        const float x = static_cast<float>(T(acc));
        const float sg = static_cast<float>(T(1.0f / (1.0f + expf(-x))));
        return static_cast<float>(T(x * sg));
    };

    float qv = 0.0f, kv = 0.0f, vv = 0.0f;
    if (t < DK) {
        qv = conv_silu(hk * DK + t, owner);
        kv = conv_silu(HK * DK + hk * DK + t, owner);
    }
    if (t < DV) {
        vv = conv_silu(2 * HK * DK + h * DV + t, true);
        v_s[t] = vv;
    }
    const float2 sums = hearth_block_sum2<NT>(qv * qv, kv * kv, red);
    const float qinv = rsqrtf(sums.x / DK + qk_eps);
    const float kinv = rsqrtf(sums.y / DK + qk_eps);
    if (t < DK) {
        q_s[t] = static_cast<float>(T(qv * qinv)) * q_scale;
        k_s[t] = static_cast<float>(T(kv * kinv)) * k_scale;
    }
    const float beta = static_cast<float>(T(1.0f / (1.0f + expf(-static_cast<float>(row[OB + h])))));
    const float xa = static_cast<float>(T(static_cast<float>(row[OA + h]) + static_cast<float>(dt_bias[h])));
    const float softplus = fmaxf(xa, 0.0f) + log1pf(expf(-fabsf(xa)));
    const float g = expf(softplus * neg_a[h]);
    __syncthreads();

    // The delta rule: thread (p, j) holds rows p·DKP.. of state column j
    // in registers; the column's two sums are reduced over the P parts.
    const int j = t % CW;
    const int p = t / CW;
    const size_t at = (size_t)bh * DK * DV + (size_t)p * DKP * DV + j;
    float s_reg[DKP];
    float part_sum = 0.0f;
    if (j < DV) {
#pragma unroll
        for (int i = 0; i < DKP; ++i) {
            s_reg[i] = ssm[at + (size_t)i * DV] * g;
            part_sum += s_reg[i] * k_s[p * DKP + i];
        }
    }
    part[p][j] = part_sum;
    __syncthreads();
    float remembered = 0.0f;
#pragma unroll
    for (int q = 0; q < P; ++q) {
        remembered += part[q][j];
    }
    __syncthreads();
    part_sum = 0.0f;
    if (j < DV) {
        const float delta = (v_s[j] - remembered) * beta;
#pragma unroll
        for (int i = 0; i < DKP; ++i) {
            const float s = s_reg[i] + k_s[p * DKP + i] * delta;
            ssm_out[at + (size_t)i * DV] = s;
            part_sum += s * q_s[p * DKP + i];
        }
    }
    part[p][j] = part_sum;
    __syncthreads();
    float y = 0.0f;
    if (p == 0) {
#pragma unroll
        for (int q = 0; q < P; ++q) {
            y += part[q][j];
        }
    }
    const float yt = static_cast<float>(T(y));
    const float2 ysum = hearth_block_sum2<NT>(t < DV ? yt * yt : 0.0f, 0.0f, red);
    const float inv = rsqrtf(ysum.x / DV + norm_eps);
    if (t < DV) {
        const float n = static_cast<float>(T(static_cast<float>(nw[t]) * static_cast<float>(T(yt * inv))));
        const float z = static_cast<float>(row[OZ + h * DV + t]);
        const float gate = z / (1.0f + expf(-z));
        y_out[(size_t)b * HV * DV + h * DV + t] = T(gate * n);
    }
"#;

const INPUTS: [&str; 8] = [
    "proj", "conv", "taps", "dt_bias", "neg_a", "ssm", "nw", "dims",
];
const OUTPUTS: [&str; 3] = ["y_out", "conv_out", "ssm_out"];

/// The shape of a layer: key heads, value heads, key and value head
/// widths, convolution kernel size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeltaShape {
    pub key_heads: i32,
    pub value_heads: i32,
    pub key_dim: i32,
    pub value_dim: i32,
    pub kernel: i32,
}

impl DeltaShape {
    /// Channels of the convolution (q, k and v).
    pub fn conv_dim(&self) -> i32 {
        2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
    }

    /// Width of the joined projection: qkv, z, b, a.
    pub fn proj_width(&self) -> i32 {
        self.conv_dim() + self.value_heads * self.value_dim + 2 * self.value_heads
    }

    /// Threads per column part (one per key or value channel, a multiple of
    /// the warp) and parts per state column (4, 2 or 1: they split the key
    /// rows evenly, at most [`MAX_THREADS`] a block).
    fn layout(&self) -> (i32, i32) {
        let width = (self.key_dim.max(self.value_dim) + 31) / 32 * 32;
        let parts = [4, 2, 1]
            .into_iter()
            .find(|&p| self.key_dim % p == 0 && width * p <= MAX_THREADS)
            .unwrap_or(1);
        (width, parts)
    }

    fn takes(&self) -> bool {
        self.key_heads > 0
            && self.value_heads % self.key_heads == 0
            && (1..=MAX_HEAD_DIM).contains(&self.key_dim)
            && (1..=MAX_HEAD_DIM).contains(&self.value_dim)
            && self.kernel >= 2
    }
}

/// A layer's parameters the kernel reads, and its constants.
pub struct DeltaLayer<'a> {
    pub shape: DeltaShape,
    /// `[kernel, conv_dim]`, contiguous.
    pub taps: &'a Array,
    pub dt_bias: &'a Array,
    /// `-exp(A_log)`, f32.
    pub neg_a: &'a Array,
    pub norm_weight: &'a Array,
    /// The gated RMSNorm's epsilon.
    pub norm_eps: f32,
    /// The q/k RMSNorm's epsilon and the q and k scales after it.
    pub qk_eps: f32,
    pub q_scale: f32,
    pub k_scale: f32,
}

/// What a step makes: the gated norm's output `[B, 1, Hv·Dv]`, then the
/// state it leaves: carried convolution inputs `[B, kernel - 1, conv_dim]`
/// (element type) and the recurrent state `[B, Hv, Dk, Dv]` (f32).
pub type Step = [Array; 3];

type CheckKey = (DeltaShape, Dtype);

thread_local! {
    static KERNEL: CudaKernel =
        CudaKernel::new("hearth_delta_step", &INPUTS, &OUTPUTS, SOURCE, HEADER);
    static CHECKED: Checked<CheckKey> = const { Checked::new() };
}

/// Puts the kernel in force (each layer shape and type is checked at first
/// use). Call only on a CUDA device.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Turns the kernel off: MLX's ops.
pub fn disable() {
    ON.store(false, Ordering::Relaxed);
}

/// Whether the kernel is enabled at all (callers skip preparing its
/// inputs otherwise).
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// One token's `[out, conv', ssm']` for `proj: [B, 1, W]`, `conv` and
/// `ssm` as one kernel when it is in force for this layer (enabled,
/// checked on this device against `reference`, the layer's MLX ops for the
/// same inputs); `None` otherwise, for the caller's MLX ops. `out` is `[B,
/// 1, Hv·Dv]` in the projection's type.
pub fn step(
    layer: &DeltaLayer,
    proj: &Array,
    conv: &Array,
    ssm: &Array,
    reference: impl FnOnce(&Array, &Array, &Array) -> Result<Step>,
) -> Result<Option<Step>> {
    let s = layer.shape;
    let dtype = proj.dtype();
    let rows = proj.dim(0);
    if !enabled()
        || !s.takes()
        || !half_precision(dtype)
        || proj.shape() != [rows, 1, s.proj_width()]
        || conv.shape() != [rows, s.kernel - 1, s.conv_dim()]
        || ssm.shape() != [rows, s.value_heads, s.key_dim, s.value_dim]
        || conv.dtype() != dtype
        || ssm.dtype() != Dtype::Float32
        || layer.taps.shape() != [s.kernel, s.conv_dim()]
        || layer.taps.dtype() != dtype
        || layer.dt_bias.shape() != [s.value_heads]
        || layer.dt_bias.dtype() != dtype
        || layer.neg_a.shape() != [s.value_heads]
        || layer.neg_a.dtype() != Dtype::Float32
        || layer.norm_weight.shape() != [s.value_dim]
        || layer.norm_weight.dtype() != dtype
    {
        return Ok(None);
    }
    let ok = CHECKED
        .with(|c| c.get_or_check((s, dtype), "delta step", || check(layer, dtype, reference)));
    if !ok {
        return Ok(None);
    }
    apply(layer, proj, conv, ssm).map(Some)
}

fn apply(layer: &DeltaLayer, proj: &Array, conv: &Array, ssm: &Array) -> Result<Step> {
    let s = layer.shape;
    let rows = proj.dim(0);
    let (width, parts) = s.layout();
    let nt = width * parts;
    let dims = int_array(&[
        layer.norm_eps.to_bits() as i32,
        layer.qk_eps.to_bits() as i32,
        layer.q_scale.to_bits() as i32,
        layer.k_scale.to_bits() as i32,
    ]);
    let launch = LaunchDims {
        grid: (rows * s.value_heads * nt, 1, 1),
        block: (nt, 1, 1),
    };
    let dtype = proj.dtype();
    let template = [
        ("T", TemplateArg::Dtype(dtype)),
        ("HK", TemplateArg::Int(s.key_heads)),
        ("HV", TemplateArg::Int(s.value_heads)),
        ("DK", TemplateArg::Int(s.key_dim)),
        ("DV", TemplateArg::Int(s.value_dim)),
        ("KS", TemplateArg::Int(s.kernel)),
        ("W", TemplateArg::Int(s.proj_width())),
        ("NT", TemplateArg::Int(nt)),
        ("P", TemplateArg::Int(parts)),
    ];
    let out_shape = [rows, 1, s.value_heads * s.value_dim];
    let out = KERNEL.with(|k| {
        k.apply(
            &[
                proj,
                conv,
                layer.taps,
                layer.dt_bias,
                layer.neg_a,
                ssm,
                layer.norm_weight,
                &dims,
            ],
            &[
                (&out_shape, dtype),
                (conv.shape(), dtype),
                (ssm.shape(), Dtype::Float32),
            ],
            launch,
            &template,
        )
    })?;
    out.try_into()
        .map_err(|_| ModelError::Mlx("delta step kernel: missing outputs".into()))
}

/// Checks the kernel against the layer's MLX ops (`reference`) on this
/// device for two rows of random inputs; the largest relative error of the
/// three outputs, or why it failed.
fn check(
    layer: &DeltaLayer,
    dtype: Dtype,
    reference: impl FnOnce(&Array, &Array, &Array) -> Result<Step>,
) -> std::result::Result<f32, String> {
    let s = layer.shape;
    let run = || -> Result<f32> {
        let rand = |shape: &[i32], dtype: Dtype| -> Result<Array> {
            Ok(mlx_rs::random::normal::<f32>(shape, None, None, None)?.as_dtype(dtype)?)
        };
        let proj = rand(&[2, 1, s.proj_width()], dtype)?;
        let conv = rand(&[2, s.kernel - 1, s.conv_dim()], dtype)?;
        let ssm = rand(&[2, s.value_heads, s.key_dim, s.value_dim], Dtype::Float32)?;
        let ours = apply(layer, &proj, &conv, &ssm)?;
        let want = reference(&proj, &conv, &ssm)?;
        let mut worst = 0.0f32;
        for (o, w) in ours.iter().zip(&want) {
            if o.shape() != w.shape() || o.dtype() != w.dtype() {
                return Err(ModelError::Mlx(format!(
                    "output {:?} {:?} against {:?} {:?}",
                    o.shape(),
                    o.dtype(),
                    w.shape(),
                    w.dtype()
                )));
            }
            worst = worst.max(relative_error(o, w)?);
        }
        Ok(worst)
    };
    verdict(run(), "the layer's MLX ops")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen3.5's layer shape: widths add up to the projections' and every
    /// channel has a thread.
    #[test]
    fn qwen35_shape_is_taken_with_a_thread_per_channel() {
        let s = DeltaShape {
            key_heads: 16,
            value_heads: 32,
            key_dim: 128,
            value_dim: 128,
            kernel: 4,
        };
        assert!(s.takes());
        assert_eq!(s.conv_dim(), 8192);
        assert_eq!(s.proj_width(), 8192 + 4096 + 64);
        assert_eq!(s.layout(), (128, 4));
        let odd = DeltaShape {
            key_dim: 100,
            value_dim: 72,
            ..s
        };
        assert_eq!(odd.layout(), (128, 4));
        let wide = DeltaShape {
            key_dim: 256,
            value_dim: 130,
            ..s
        };
        assert!(!wide.takes());
        // Every layout covers the channels, splits the rows evenly and fits
        // a block; key widths that are multiples of 4 get four parts (at
        // most 32 state values a thread).
        for dk in 1..=MAX_HEAD_DIM {
            for dv in [1, 64, 128, MAX_HEAD_DIM] {
                let (w, p) = DeltaShape {
                    key_dim: dk,
                    value_dim: dv,
                    ..s
                }
                .layout();
                assert!(w >= dk.max(dv) && w % 32 == 0, "{dk} {dv}");
                assert!(dk % p == 0 && w * p <= MAX_THREADS, "{dk} {dv}: {p}");
                if dk % 4 == 0 {
                    assert_eq!(p, 4, "{dk} {dv}");
                }
            }
        }
        assert!(!DeltaShape {
            value_heads: 24,
            key_heads: 16,
            ..s
        }
        .takes());
        assert!(!DeltaShape { kernel: 1, ..s }.takes());
        assert!(!DeltaShape {
            value_dim: MAX_HEAD_DIM + 1,
            ..s
        }
        .takes());
    }

    /// Never enabled here (no CUDA): the caller keeps MLX's ops and the
    /// reference is not run.
    #[test]
    fn off_the_kernel_leaves_mlxs_ops() {
        let s = DeltaShape {
            key_heads: 1,
            value_heads: 2,
            key_dim: 8,
            value_dim: 8,
            kernel: 4,
        };
        let z = |shape: &[i32], d: Dtype| mlx_rs::ops::zeros_dtype(shape, d).unwrap();
        let (taps, bias, neg_a, nw) = (
            z(&[4, s.conv_dim()], Dtype::Bfloat16),
            z(&[2], Dtype::Bfloat16),
            z(&[2], Dtype::Float32),
            z(&[8], Dtype::Bfloat16),
        );
        let layer = DeltaLayer {
            shape: s,
            taps: &taps,
            dt_bias: &bias,
            neg_a: &neg_a,
            norm_weight: &nw,
            norm_eps: 1e-6,
            qk_eps: 1e-6,
            q_scale: 1.0,
            k_scale: 1.0,
        };
        let proj = z(&[1, 1, s.proj_width()], Dtype::Bfloat16);
        let conv = z(&[1, 3, s.conv_dim()], Dtype::Bfloat16);
        let ssm = z(&[1, 2, 8, 8], Dtype::Float32);
        let out = step(&layer, &proj, &conv, &ssm, |_, _, _| {
            panic!("the reference runs only in a check")
        });
        assert!(out.unwrap().is_none());
    }
}
