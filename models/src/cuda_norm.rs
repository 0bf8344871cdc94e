//! The residual add and the RMSNorm after it as one kernel, for MLX's CUDA
//! backend: `h = x + r` and `n = rms_norm(h) * w` in one pass over the rows.
//!
//! A pre-norm decoder layer adds its attention output to the residual
//! stream and normalises the sum for the MLP, then adds the MLP output and
//! normalises that for the next layer: four kernels a layer, two of them
//! element-wise adds of a few activation rows. At decode sizes each kernel
//! is a few µs of GPU time and, with CUDA graphs off (Hearth's default on
//! CUDA, docs/cuda.md), a launch's worth of host time on top; fusing each
//! add with its norm removes 2 of the ~16 kernels a layer runs per step.
//!
//! The arithmetic is MLX's, rounding where MLX rounds: the sum is rounded
//! to the element type (MLX's add), the norm reads the rounded sum in f32,
//! rounds `h * rsqrt(mean(h²) + eps)` to the element type and multiplies
//! by the weight in the element type (MLX's `rms_norm`). In force after
//! [`enable`] (Hearth enables it on CUDA unless `HEARTH_CUDA_NORM=off`,
//! docs/cuda.md), per hidden size and element type only once it has passed
//! a check against MLX's own add and norm on this device, at first use (on
//! the H200 it matched bit for bit, bench/results/h200-2026-12-02.md).

use std::sync::atomic::{AtomicBool, Ordering};

use mlx_rs::{fast, Array, Dtype};

use crate::cuda_kernel::{
    int_array, relative_error, verdict, Checked, CudaKernel, LaunchDims, TemplateArg,
};
use crate::error::{ModelError, Result};

static ON: AtomicBool = AtomicBool::new(false);

/// Largest hidden size taken (8 vectors of 8 elements per thread at 256
/// threads).
pub const MAX_HIDDEN: i32 = 16384;

/// The kernel body: one block per row, `NT` threads, each holding `PER`
/// vectors of 8 elements of the row in registers between the reduction
/// and the write. `dims` = [eps as f32 bits].
const SOURCE: &str = r#"
    constexpr int VEC = 8;
    constexpr int NV = H / VEC;
    constexpr int PER = (NV + NT - 1) / NT;
    const float eps = __int_as_float(dims[0]);
    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)row * H);
    const uint4* rr = reinterpret_cast<const uint4*>(r + (size_t)row * H);
    const uint4* wr = reinterpret_cast<const uint4*>(w);
    uint4* hr = reinterpret_cast<uint4*>(h_out + (size_t)row * H);
    uint4* nr = reinterpret_cast<uint4*>(n_out + (size_t)row * H);
    float v[PER][VEC];
    float ss = 0.0f;
#pragma unroll
    for (int p = 0; p < PER; ++p) {
        const int i = tid + p * NT;
        if (i < NV) {
            const uint4 a = xr[i];
            const uint4 b = rr[i];
            const T* av = reinterpret_cast<const T*>(&a);
            const T* bv = reinterpret_cast<const T*>(&b);
            uint4 s;
            T* sv = reinterpret_cast<T*>(&s);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                sv[j] = T(static_cast<float>(av[j]) + static_cast<float>(bv[j]));
                const float f = static_cast<float>(sv[j]);
                v[p][j] = f;
                ss += f * f;
            }
            hr[i] = s;
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                v[p][j] = 0.0f;
            }
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    }
    __shared__ float part[NT / 32];
    if ((tid & 31) == 0) {
        part[tid >> 5] = ss;
    }
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < NT / 32; ++k) {
        total += part[k];
    }
    const float inv = rsqrtf(total / H + eps);
#pragma unroll
    for (int p = 0; p < PER; ++p) {
        const int i = tid + p * NT;
        if (i < NV) {
            const uint4 g = wr[i];
            const T* gv = reinterpret_cast<const T*>(&g);
            uint4 o;
            T* ov = reinterpret_cast<T*>(&o);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float y = static_cast<float>(T(v[p][j] * inv));
                ov[j] = T(static_cast<float>(gv[j]) * y);
            }
            nr[i] = o;
        }
    }
"#;

const INPUTS: [&str; 4] = ["x", "r", "w", "dims"];

/// Hidden size and element type: what one check covers.
type CheckKey = (i32, Dtype);

thread_local! {
    static KERNEL: CudaKernel =
        CudaKernel::new("hearth_add_norm", &INPUTS, &["h_out", "n_out"], SOURCE, "");
    static CHECKED: Checked<CheckKey> = const { Checked::new() };
}

/// Puts the kernel in force (each hidden size and type is checked at first
/// use). Call only on a CUDA device.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Turns the kernel off: MLX's add and RMSNorm.
pub fn disable() {
    ON.store(false, Ordering::Relaxed);
}

/// Whether the kernel takes this hidden size and element type at all.
fn takes(hidden: i32, dtype: Dtype) -> bool {
    hidden > 0
        && hidden % 8 == 0
        && hidden <= MAX_HIDDEN
        && crate::cuda_kernel::half_precision(dtype)
}

/// Threads per block for a hidden size: one per 8-element vector, a
/// multiple of the warp, at most 256.
fn threads(hidden: i32) -> i32 {
    let vectors = hidden / 8;
    ((vectors + 31) / 32 * 32).min(256)
}

/// `(x + r, rms_norm(x + r) * weight)` as one kernel when it is in force
/// for these arrays (CUDA, enabled, checked on this device for the hidden
/// size and type); `None` otherwise, for the caller's MLX ops.
pub fn add_rms_norm(
    x: &Array,
    r: &Array,
    weight: &Array,
    eps: f32,
) -> Result<Option<(Array, Array)>> {
    let hidden = x.dim(-1);
    let dtype = x.dtype();
    if !ON.load(Ordering::Relaxed)
        || x.shape() != r.shape()
        || r.dtype() != dtype
        || weight.dtype() != dtype
        || weight.shape() != [hidden]
        || !takes(hidden, dtype)
    {
        return Ok(None);
    }
    let ok = CHECKED.with(|c| c.get_or_check((hidden, dtype), "add+norm", || check(hidden, dtype)));
    if !ok {
        return Ok(None);
    }
    apply(x, r, weight, eps).map(Some)
}

fn apply(x: &Array, r: &Array, weight: &Array, eps: f32) -> Result<(Array, Array)> {
    let hidden = x.dim(-1);
    let rows = (x.size() / hidden as usize) as i32;
    let nt = threads(hidden);
    let dims = int_array(&[eps.to_bits() as i32]);
    let launch = LaunchDims {
        grid: (rows * nt, 1, 1),
        block: (nt, 1, 1),
    };
    let template = [
        ("T", TemplateArg::Dtype(x.dtype())),
        ("H", TemplateArg::Int(hidden)),
        ("NT", TemplateArg::Int(nt)),
    ];
    let shape = x.shape().to_vec();
    let mut out = KERNEL.with(|k| {
        k.apply(
            &[x, r, weight, &dims],
            &[(&shape, x.dtype()), (&shape, x.dtype())],
            launch,
            &template,
        )
    })?;
    let n = out.pop();
    let h = out.pop();
    match (h, n) {
        (Some(h), Some(n)) => Ok((h, n)),
        _ => Err(ModelError::Mlx("add+norm kernel: missing outputs".into())),
    }
}

/// Checks the kernel against MLX's add and RMSNorm on this device for one
/// hidden size and type (three rows); returns the largest relative error
/// of the two outputs, or why it failed.
pub fn check(hidden: i32, dtype: Dtype) -> std::result::Result<f32, String> {
    let run = || -> Result<f32> {
        let rand = |shape: &[i32]| -> Result<Array> {
            Ok(mlx_rs::random::normal::<f32>(shape, None, None, None)?.as_dtype(dtype)?)
        };
        let (x, r, w) = (
            rand(&[3, 1, hidden])?,
            rand(&[3, 1, hidden])?,
            rand(&[hidden])?,
        );
        let (h, n) = apply(&x, &r, &w, 1e-6)?;
        let want_h = x.add(&r)?;
        let want_n = fast::rms_norm(&want_h, Some(&w), 1e-6)?;
        if h.shape() != want_h.shape() || n.shape() != want_n.shape() {
            return Err(ModelError::Mlx(format!(
                "shapes {:?} {:?} against {:?}",
                h.shape(),
                n.shape(),
                want_h.shape()
            )));
        }
        Ok(relative_error(&h, &want_h)?.max(relative_error(&n, &want_n)?))
    };
    verdict(run(), "MLX's add and RMSNorm")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_cover_every_vector_within_the_unrolled_registers() {
        for hidden in (8..=MAX_HIDDEN).step_by(8) {
            let nt = threads(hidden);
            assert!(nt % 32 == 0 && (32..=256).contains(&nt), "H {hidden}: {nt}");
            let per = (hidden / 8 + nt - 1) / nt;
            assert!(
                per * nt >= hidden / 8 && per <= 8,
                "H {hidden}: {per} x {nt}"
            );
        }
        assert!(!takes(4100, Dtype::Bfloat16));
        assert!(!takes(4096, Dtype::Float32));
        assert!(!takes(MAX_HIDDEN + 8, Dtype::Float16));
    }

    /// The kernel's arithmetic in MLX ops, rounding where the source
    /// rounds (the sum to T; `h * inv_rms` to T; the product with the
    /// weight to T), equals MLX's add and RMSNorm: the kernel's self-check
    /// on the device compares the same two.
    #[test]
    fn the_kernels_arithmetic_is_mlxs_add_and_norm() {
        use crate::test_util::{max_gap, normal};
        for dtype in [Dtype::Bfloat16, Dtype::Float16] {
            let t = |a: Array| a.as_dtype(dtype).unwrap();
            let f = |a: &Array| a.as_dtype(Dtype::Float32).unwrap();
            let (x, r, w) = (
                t(normal(&[3, 1, 256], 1)),
                t(normal(&[3, 1, 256], 2)),
                t(normal(&[256], 3)),
            );
            let eps = 1e-6;
            let h = t(f(&x).add(f(&r)).unwrap());
            let hf = f(&h);
            let ms = hf.square().unwrap().mean_axis(-1, true).unwrap();
            let inv = mlx_rs::ops::rsqrt(ms.add(Array::from_f32(eps)).unwrap()).unwrap();
            let y = t(hf.multiply(&inv).unwrap());
            let n = t(f(&w).multiply(f(&y)).unwrap());
            let want_h = x.add(&r).unwrap();
            let want_n = fast::rms_norm(&want_h, Some(&w), eps).unwrap();
            assert_eq!(max_gap(&h, &want_h), 0.0, "{dtype:?}: the sum");
            let gap = max_gap(&n, &want_n);
            assert!(gap < 2e-2, "{dtype:?}: norm gap {gap}");
        }
    }

    /// Off (never enabled here) or not CUDA: the caller keeps MLX's ops.
    #[test]
    fn off_the_kernel_leaves_mlxs_ops() {
        let x = crate::test_util::normal(&[2, 1, 64], 1)
            .as_dtype(Dtype::Bfloat16)
            .unwrap();
        let w = crate::test_util::normal(&[64], 2)
            .as_dtype(Dtype::Bfloat16)
            .unwrap();
        assert!(add_rms_norm(&x, &x, &w, 1e-6).unwrap().is_none());
    }
}
