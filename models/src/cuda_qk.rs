//! One kernel per attention layer for a decode step's q/k/v on MLX's CUDA
//! backend: q and k RMSNorm (where the model has them), RoPE at each row's
//! position, and q, k, v in the attention layout `[rows, heads, 1, D]`.
//!
//! Unfused, a decode step runs per layer two RMSNorms, two RoPEs and, from
//! two rows on, three copies: q, k and v are slices of the joined q/k/v
//! product, strided once there are two rows, and RMSNorm and the KV write
//! copy them first. On the H200 those seven kernels were 0.82 ms of a
//! two-row dense step's 7.57 ms of GPU time, and the four of a one-row step
//! 0.46 of 6.11 ms (Nsight Compute, bench/results/h200-2026-12-01-s9.md).
//! Here one warp takes one (row, head): it reads the head's `D` values of
//! the product, normalises them (rounding to the element type where MLX's
//! norm would), rotates the first `R` of them and writes the head where the
//! attention reads it.
//!
//! In force after [`enable`] (Hearth enables it on CUDA unless
//! `HEARTH_CUDA_QK=off`, docs/cuda.md), for each head size, rotary size,
//! element type and norm kind only once it has passed a check against MLX's
//! own ops on this device, at first use (on the H200: relative error
//! 5-6e-3, bench/results/h200-2026-12-02.md).

use std::sync::atomic::{AtomicBool, Ordering};

use mlx_rs::{fast, Array, Dtype};

use crate::cuda_kernel::{
    int_array, relative_error, verdict, Checked, CudaKernel, LaunchDims, TemplateArg,
};
use crate::error::{ModelError, Result};

/// Heads (warps) per thread block.
const WARPS: i32 = 4;

/// Head sizes the kernel takes (`D / 32` values per lane).
pub const HEAD_DIMS: [i32; 3] = [64, 128, 256];

static ON: AtomicBool = AtomicBool::new(false);

/// The kernel body. `dims` = [HQ, HKV, rows, position stride (0: one
/// position for all rows), RoPE scale as f32 bits, eps as f32 bits].
const SOURCE: &str = r#"
    constexpr int PER = D / 32;
    constexpr int HALF = R / 2;
    const int HQ = dims[0];
    const int HKV = dims[1];
    const int ROWS = dims[2];
    const int PSTRIDE = dims[3];
    const float rscale = __int_as_float(dims[4]);
    const float eps = __int_as_float(dims[5]);
    const int HT = HQ + 2 * HKV;
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    const int item = blockIdx.x * (blockDim.x >> 5) + w;
    __shared__ float nv[NW][D];
    if (item >= ROWS * HT) {
        return;
    }
    const int row = item / HT;
    const int head = item - row * HT;
    const T* src = qkv + ((size_t)row * HT + head) * D;
    float x[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        x[j] = static_cast<float>(src[lane + 32 * j]);
    }
    if (head >= HQ + HKV) {
        T* dst = v_out + ((size_t)row * HKV + (head - HQ - HKV)) * D;
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            dst[lane + 32 * j] = T(x[j]);
        }
        return;
    }
    const bool is_q = head < HQ;
    if (NORM) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            ss += x[j] * x[j];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        }
        const float inv_rms = rsqrtf(ss / D + eps);
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int e = lane + 32 * j;
            const float g = static_cast<float>(is_q ? qw[e] : kw[e]);
            x[j] = static_cast<float>(T(x[j] * inv_rms * g));
        }
    }
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        nv[w][lane + 32 * j] = x[j];
    }
    __syncwarp();
    const float p = rscale * static_cast<float>(pos[row * PSTRIDE]);
    T* dst = is_q ? q_out + ((size_t)row * HQ + head) * D
                  : k_out + ((size_t)row * HKV + (head - HQ)) * D;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int e = lane + 32 * j;
        float y = x[j];
        if (e < R) {
            const int d = e < HALF ? e : e - HALF;
            float s, c;
            sincosf(p * inv[d], &s, &c);
            const float x1 = nv[w][d];
            const float x2 = nv[w][d + HALF];
            y = e < HALF ? x1 * c - x2 * s : x1 * s + x2 * c;
        }
        dst[e] = T(y);
    }
"#;

/// Head size, rotary size, element type, norm: what one check covers.
type CheckKey = (i32, i32, Dtype, bool);

const INPUTS: [&str; 6] = ["qkv", "qw", "kw", "inv", "pos", "dims"];

thread_local! {
    static KERNEL: CudaKernel =
        CudaKernel::new("hearth_qk", &INPUTS, &["q_out", "k_out", "v_out"], SOURCE, "");
    /// Shape kind → whether it passed its check.
    static CHECKED: Checked<CheckKey> = const { Checked::new() };
}

/// Puts the kernel in force (each shape is checked at first use, see
/// [`usable`]). Call only on a CUDA device.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Turns the kernel off: MLX's RMSNorm, RoPE and copies.
pub fn disable() {
    ON.store(false, Ordering::Relaxed);
}

/// Whether [`prepare`] is in force for heads of `head_dim` with the first
/// `rope_dims` rotated, in `dtype`, with (`norm`) or without q/k RMSNorm:
/// enabled, a shape it takes, and checked on this device (here, on first
/// use; a failure is logged once and leaves MLX's ops).
pub fn usable(head_dim: i32, rope_dims: i32, dtype: Dtype, norm: bool) -> bool {
    if !ON.load(Ordering::Relaxed)
        || !HEAD_DIMS.contains(&head_dim)
        || rope_dims <= 0
        || rope_dims > head_dim
        || rope_dims % 2 != 0
        || !crate::cuda_kernel::half_precision(dtype)
    {
        return false;
    }
    let key = (head_dim, rope_dims, dtype, norm);
    CHECKED.with(|c| c.get_or_check(key, "q/k/v", || check(head_dim, rope_dims, dtype, norm)))
}

/// Query heads, key/value heads and the head size of one attention layer.
#[derive(Clone, Copy, Debug)]
pub struct QkShape {
    pub hq: i32,
    pub hkv: i32,
    pub head_dim: i32,
}

/// The q/k norm weights and eps, when the model has them.
pub struct QkNorm<'a> {
    pub q: &'a Array,
    pub k: &'a Array,
    pub eps: f32,
}

/// RoPE's parameters: the rotated dims, `1 / wavelength` per pair (f32,
/// `[rope_dims / 2]`), the position scale, and the positions (int32; one
/// for all rows: shape `[]` or `[1]`; or one per row: `[rows]`). Both go to
/// the kernel as they are: no conversion on the decode step's path.
pub struct QkRope<'a> {
    pub dims: i32,
    pub inv_freqs: &'a Array,
    pub scale: f32,
    pub positions: &'a Array,
}

/// `qkv: [rows, 1, (hq + 2 hkv) * head_dim]` (the joined q/k/v product of
/// one token per row) → q `[rows, hq, 1, D]` and k `[rows, hkv, 1, D]`
/// normalised and rotated, v `[rows, hkv, 1, D]`.
pub fn prepare(
    qkv: &Array,
    shape: QkShape,
    norm: Option<&QkNorm>,
    rope: &QkRope,
) -> Result<(Array, Array, Array)> {
    let QkShape { hq, hkv, head_dim } = shape;
    let rows = qkv.dim(0);
    let width = (hq + 2 * hkv) * head_dim;
    if qkv.ndim() != 3 || qkv.dim(1) != 1 || qkv.dim(2) != width {
        return Err(ModelError::Mlx(format!(
            "q/k/v kernel: qkv {:?} is not [rows, 1, {width}]",
            qkv.shape()
        )));
    }
    let per_row = rope.positions.size() > 1;
    if per_row && rope.positions.size() != rows as usize {
        return Err(ModelError::Mlx("q/k/v kernel: one position per row".into()));
    }
    let dtype = qkv.dtype();
    // Without a norm the weights are never read: any array stands in.
    let (qw, kw, eps) = match norm {
        Some(n) => (n.q, n.k, n.eps),
        None => (qkv, qkv, 0.0),
    };
    let dims = int_array(&[
        hq,
        hkv,
        rows,
        per_row as i32,
        rope.scale.to_bits() as i32,
        eps.to_bits() as i32,
    ]);
    let items = rows * (hq + 2 * hkv);
    let blocks = (items + WARPS - 1) / WARPS;
    let launch = LaunchDims {
        grid: (blocks * WARPS * 32, 1, 1),
        block: (WARPS * 32, 1, 1),
    };
    let template = [
        ("T", TemplateArg::Dtype(dtype)),
        ("D", TemplateArg::Int(head_dim)),
        ("R", TemplateArg::Int(rope.dims)),
        ("NORM", TemplateArg::Int(norm.is_some() as i32)),
        ("NW", TemplateArg::Int(WARPS)),
    ];
    if rope.positions.dtype() != Dtype::Int32 || rope.inv_freqs.dtype() != Dtype::Float32 {
        return Err(ModelError::Mlx(
            "q/k/v kernel: positions must be int32 and inverse frequencies f32".into(),
        ));
    }
    let inputs = [qkv, qw, kw, rope.inv_freqs, rope.positions, &dims];
    let q_shape = [rows, hq, 1, head_dim];
    let kv_shape = [rows, hkv, 1, head_dim];
    let mut out = KERNEL.with(|k| {
        k.apply(
            &inputs,
            &[(&q_shape, dtype), (&kv_shape, dtype), (&kv_shape, dtype)],
            launch,
            &template,
        )
    })?;
    let v = out.remove(2);
    let k = out.remove(1);
    let q = out.remove(0);
    Ok((q, k, v))
}

/// `1 / wavelength` of each rotated pair as MLX's RoPE computes it: from
/// `base` (`base^(-2i / dims)`) or from explicit wavelengths.
pub fn inv_freqs(dims: i32, base: f32, wavelengths: Option<&Array>) -> Result<Array> {
    match wavelengths {
        Some(w) => Ok(w.as_dtype(Dtype::Float32)?.reciprocal()?),
        None => {
            let inv: Vec<f32> = (0..dims / 2)
                .map(|i| base.powf(-((2 * i) as f32) / dims as f32))
                .collect();
            Ok(Array::from_slice(&inv, &[dims / 2]))
        }
    }
}

/// The unfused ops the kernel replaces (MLX's RMSNorm and RoPE on the
/// slices of the product), for the check and for tests.
pub fn reference(
    qkv: &Array,
    shape: QkShape,
    norm: Option<&QkNorm>,
    rope_dims: i32,
    base: f32,
    scale: f32,
    positions: &Array,
) -> Result<(Array, Array, Array)> {
    use mlx_rs::ops::indexing::IndexOp;
    let QkShape { hq, hkv, head_dim } = shape;
    let rows = qkv.dim(0);
    let (qn, kn) = (hq * head_dim, hkv * head_dim);
    let heads = |start: i32, n: i32, w: Option<&Array>, eps: f32| -> Result<Array> {
        let h = qkv
            .index((.., .., start..start + n * head_dim))
            .reshape(&[rows, 1, n, head_dim])?;
        let h = match w {
            Some(w) => fast::rms_norm(&h, Some(w), eps)?,
            None => h,
        };
        Ok(h.transpose_axes(&[0, 2, 1, 3])?)
    };
    let eps = norm.map_or(0.0, |n| n.eps);
    let q = heads(0, hq, norm.map(|n| n.q), eps)?;
    let k = heads(qn, hkv, norm.map(|n| n.k), eps)?;
    let v = heads(qn + kn, hkv, None, 0.0)?;
    let offsets = positions.as_dtype(Dtype::Int32)?.reshape(&[-1])?;
    let rot = |x: &Array| -> Result<Array> {
        Ok(fast::rope_dynamic(
            x,
            rope_dims,
            false,
            Some(base),
            scale,
            &offsets,
            None::<&Array>,
        )?)
    };
    Ok((rot(&q)?, rot(&k)?, v))
}

/// Largest relative error of the three outputs (shapes must match).
fn gap(ours: &(Array, Array, Array), want: &(Array, Array, Array)) -> Result<f32> {
    let mut worst = 0.0f32;
    for (o, w) in [(&ours.0, &want.0), (&ours.1, &want.1), (&ours.2, &want.2)] {
        worst = worst.max(relative_error(o, w)?);
    }
    Ok(worst)
}

/// Checks the kernel against [`reference()`] on this device for one shape
/// kind (three rows at positions far apart, then at one scalar position);
/// returns the largest relative error, or why it failed.
pub fn check(
    head_dim: i32,
    rope_dims: i32,
    dtype: Dtype,
    norm: bool,
) -> std::result::Result<f32, String> {
    let run = || -> Result<f32> {
        let (hq, hkv, rows) = (8, 2, 3);
        let rand = |shape: &[i32]| -> Result<Array> {
            Ok(mlx_rs::random::normal::<f32>(shape, None, None, None)?.as_dtype(dtype)?)
        };
        let qkv = rand(&[rows, 1, (hq + 2 * hkv) * head_dim])?;
        let (qw, kw) = (rand(&[head_dim])?, rand(&[head_dim])?);
        let n = QkNorm {
            q: &qw,
            k: &kw,
            eps: 1e-6,
        };
        let norm = norm.then_some(&n);
        let (base, scale) = (1_000_000.0, 1.0);
        let positions = Array::from_slice(&[5i32, 700, 3001], &[rows]);
        let inv = inv_freqs(rope_dims, base, None)?;
        let rope = QkRope {
            dims: rope_dims,
            inv_freqs: &inv,
            scale,
            positions: &positions,
        };
        let shape = QkShape { hq, hkv, head_dim };
        let mut worst = 0.0f32;
        let ours = prepare(&qkv, shape, norm, &rope)?;
        let want = reference(&qkv, shape, norm, rope_dims, base, scale, &positions)?;
        worst = worst.max(gap(&ours, &want)?);
        // One position for all rows (a scalar, as a one-sequence step has).
        let one = Array::from_int(700);
        let rope = QkRope {
            positions: &one,
            ..rope
        };
        let ours = prepare(&qkv, shape, norm, &rope)?;
        let all = Array::from_slice(&[700i32; 3], &[rows]);
        let want = reference(&qkv, shape, norm, rope_dims, base, scale, &all)?;
        worst = worst.max(gap(&ours, &want)?);
        Ok(worst)
    };
    verdict(run(), "MLX's RMSNorm and RoPE")
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::ops::{self, indexing::IndexOp};

    use crate::test_util::{max_gap, normal};

    /// The kernel's arithmetic in MLX ops, one step at a time as the
    /// source does it: per head, RMSNorm (rounded to the element type),
    /// then pair `d` with `d + R/2` for `d < R/2` at angle
    /// `scale * position * inv_freqs[d]`, the rest passed through.
    fn emulate(
        qkv: &Array,
        shape: QkShape,
        norm: Option<&QkNorm>,
        rope: &QkRope,
    ) -> (Array, Array, Array) {
        let QkShape {
            hq,
            hkv,
            head_dim: d,
        } = shape;
        let rows = qkv.dim(0);
        let heads = qkv.reshape(&[rows, hq + 2 * hkv, d]).unwrap();
        let part = |from: i32, n: i32| heads.index((.., from..from + n, ..));
        let normed = |x: Array, w: Option<&Array>| -> Array {
            let (Some(w), Some(n)) = (w, norm) else {
                return x;
            };
            let ms = x.square().unwrap().mean_axis(-1, true).unwrap();
            let inv_rms = ops::rsqrt(ms.add(Array::from_f32(n.eps)).unwrap()).unwrap();
            x.multiply(&inv_rms)
                .unwrap()
                .multiply(w)
                .unwrap()
                .as_dtype(qkv.dtype())
                .unwrap()
                .as_dtype(Dtype::Float32)
                .unwrap()
        };
        let half = rope.dims / 2;
        let pos = rope
            .positions
            .as_dtype(Dtype::Float32)
            .unwrap()
            .reshape(&[-1, 1, 1])
            .unwrap()
            .multiply(Array::from_f32(rope.scale))
            .unwrap();
        let theta = pos.multiply(rope.inv_freqs).unwrap();
        let (sin, cos) = (theta.sin().unwrap(), theta.cos().unwrap());
        let rotate = |x: Array| -> Array {
            let x1 = x.index((.., .., ..half));
            let x2 = x.index((.., .., half..rope.dims));
            let rest = x.index((.., .., rope.dims..));
            let a = x1
                .multiply(&cos)
                .unwrap()
                .subtract(x2.multiply(&sin).unwrap())
                .unwrap();
            let b = x1
                .multiply(&sin)
                .unwrap()
                .add(x2.multiply(&cos).unwrap())
                .unwrap();
            ops::concatenate(&[a, b, rest], -1).unwrap()
        };
        let layout = |x: Array, n: i32| x.reshape(&[rows, n, 1, d]).unwrap();
        let f32 = |x: Array| x.as_dtype(Dtype::Float32).unwrap();
        let q = rotate(normed(f32(part(0, hq)), norm.map(|n| n.q)));
        let k = rotate(normed(f32(part(hq, hkv)), norm.map(|n| n.k)));
        let v = f32(part(hq + hkv, hkv));
        (layout(q, hq), layout(k, hkv), layout(v, hkv))
    }

    /// What the kernel computes equals MLX's RMSNorm + RoPE on the slices
    /// (its device self-check compares the same two), for full and partial
    /// rotation, with and without norms, rows at far-apart positions.
    #[test]
    fn the_kernels_arithmetic_is_mlxs_norm_and_rope() {
        let (hq, hkv, d, rows) = (4, 2, 64, 3);
        let shape = QkShape {
            hq,
            hkv,
            head_dim: d,
        };
        let qkv = normal(&[rows, 1, (hq + 2 * hkv) * d], 1);
        let (qw, kw) = (normal(&[d], 2), normal(&[d], 3));
        let positions = Array::from_slice(&[5i32, 700, 3001], &[rows]);
        for rope_dims in [d, d / 4] {
            for with_norm in [true, false] {
                let n = QkNorm {
                    q: &qw,
                    k: &kw,
                    eps: 1e-6,
                };
                let norm = with_norm.then_some(&n);
                let inv = inv_freqs(rope_dims, 10_000.0, None).unwrap();
                let rope = QkRope {
                    dims: rope_dims,
                    inv_freqs: &inv,
                    scale: 0.5,
                    positions: &positions,
                };
                let ours = emulate(&qkv, shape, norm, &rope);
                let want =
                    reference(&qkv, shape, norm, rope_dims, 10_000.0, 0.5, &positions).unwrap();
                for (o, w) in [(&ours.0, &want.0), (&ours.1, &want.1), (&ours.2, &want.2)] {
                    assert_eq!(o.shape(), w.shape());
                    let gap = max_gap(o, w);
                    assert!(gap < 2e-3, "R {rope_dims} norm {with_norm}: gap {gap}");
                }
            }
        }
    }

    /// `inv_freqs` follows MLX's convention: RoPE from `base` equals RoPE
    /// from the wavelengths `1 / inv_freqs`, and explicit wavelengths come
    /// back as their reciprocals.
    #[test]
    fn inverse_frequencies_match_mlxs_rope() {
        let x = normal(&[2, 3, 1, 32], 4);
        let offsets = Array::from_slice(&[7i32, 1234], &[2]);
        let inv = inv_freqs(32, 500_000.0, None).unwrap();
        let wavelengths = inv.reciprocal().unwrap();
        let from_base = fast::rope_dynamic(
            &x,
            32,
            false,
            Some(500_000.0),
            1.0,
            &offsets,
            None::<&Array>,
        )
        .unwrap();
        let from_freqs =
            fast::rope_dynamic(&x, 32, false, None::<f32>, 1.0, &offsets, &wavelengths).unwrap();
        assert!(max_gap(&from_base, &from_freqs) < 1e-3);
        let back = inv_freqs(32, 0.0, Some(&wavelengths)).unwrap();
        assert!(max_gap(&back, &inv) < 1e-6);
    }
}
