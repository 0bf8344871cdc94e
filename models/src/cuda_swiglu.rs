//! The SwiGLU of an MLP's hidden layer read straight from the joined
//! gate/up product, for MLX's CUDA backend: `silu(y[.., :W]) * y[.., W:]`
//! as one kernel.
//!
//! The MLP runs its gate and up projections as one matrix product
//! ([`crate::layers::LinearGroup`]); cutting that product into its two
//! halves takes two slice nodes of MLX's graph, and the fused SwiGLU a
//! third. The slices launch nothing but cost host time like a kernel does,
//! twice (building the graph and evaluating it), and a decode step at a few
//! rows is bound by that host time on a GPU (docs/cuda.md). This kernel is
//! the one node that replaces the three ([`crate::lean`]).
//!
//! The arithmetic is MLX's, rounding where MLX rounds: `sigmoid(g)` rounded
//! to the element type, `g * sigmoid(g)` rounded, times `u` rounded (MLX's
//! compiled `x * sigmoid(x) * u` in bf16/f16). In force after [`enable`]
//! (Hearth enables it on CUDA unless `HEARTH_CUDA_SWIGLU=off`, docs/cuda.md),
//! per width and element type only once it has passed a check against
//! MLX's slices and SwiGLU on this device, at first use; only for decode
//! sizes (at most [`MAX_ROWS`] rows), so the values in its small parameter
//! array stay few.

use std::sync::atomic::{AtomicBool, Ordering};

use mlx_rs::{ops::indexing::IndexOp, Array, Dtype};

use crate::cuda_kernel::{
    int_array, relative_error, verdict, Checked, CudaKernel, LaunchDims, TemplateArg,
};
use crate::error::{ModelError, Result};

static ON: AtomicBool = AtomicBool::new(false);

/// Most rows (tokens) a call takes; more go to MLX's ops.
pub const MAX_ROWS: usize = 64;

/// Threads per block.
const THREADS: i32 = 256;

/// The kernel body: one thread per 8 output elements. `dims` = [W, rows].
const SOURCE: &str = r#"
    constexpr int VEC = 8;
    const int w = dims[0];
    const int rows = dims[1];
    const int per_row = w / VEC;
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)rows * per_row) {
        return;
    }
    const long row = i / per_row;
    const int c = (int)(i - row * per_row);
    const uint4 g = reinterpret_cast<const uint4*>(y + row * 2 * w)[c];
    const uint4 u = reinterpret_cast<const uint4*>(y + row * 2 * w + w)[c];
    const T* gv = reinterpret_cast<const T*>(&g);
    const T* uv = reinterpret_cast<const T*>(&u);
    uint4 o;
    T* ov = reinterpret_cast<T*>(&o);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        const float x = static_cast<float>(gv[j]);
        const float s = static_cast<float>(T(1.0f / (1.0f + expf(-x))));
        const float a = static_cast<float>(T(x * s));
        ov[j] = T(a * static_cast<float>(uv[j]));
    }
    reinterpret_cast<uint4*>(out + row * w)[c] = o;
"#;

/// Width and element type: what one check covers.
type CheckKey = (i32, Dtype);

thread_local! {
    static KERNEL: CudaKernel =
        CudaKernel::new("hearth_swiglu_joined", &["y", "dims"], &["out"], SOURCE, "");
    static CHECKED: Checked<CheckKey> = const { Checked::new() };
}

/// Puts the kernel in force (each width and type is checked at first use).
/// Call only on a CUDA device.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Turns the kernel off: MLX's slices and SwiGLU.
pub fn disable() {
    ON.store(false, Ordering::Relaxed);
}

/// Whether the kernel takes a joined product of `width`-wide halves with
/// `rows` rows at all.
fn takes(width: i32, rows: usize, dtype: Dtype) -> bool {
    width > 0
        && width % 8 == 0
        && (1..=MAX_ROWS).contains(&rows)
        && crate::cuda_kernel::half_precision(dtype)
}

/// `silu(gate) * up` of the joined `y: [.., 2 * width]` (gate first) as
/// `[.., width]`, as one kernel when it is in force for it (CUDA, enabled,
/// checked on this device for the width and type, decode sizes); `None`
/// otherwise, for the caller's MLX ops.
pub fn joined(y: &Array, width: i32) -> Result<Option<Array>> {
    let dtype = y.dtype();
    if !ON.load(Ordering::Relaxed) || y.ndim() == 0 || y.dim(-1) != 2 * width {
        return Ok(None);
    }
    let rows = y.size() / (2 * width.max(1)) as usize;
    if !takes(width, rows, dtype) {
        return Ok(None);
    }
    let ok = CHECKED.with(|c| c.get_or_check((width, dtype), "swiglu", || check(width, dtype)));
    if !ok {
        return Ok(None);
    }
    apply(y, width, rows as i32).map(Some)
}

fn apply(y: &Array, width: i32, rows: i32) -> Result<Array> {
    let dims = int_array(&[width, rows]);
    let threads = rows * (width / 8);
    let blocks = (threads + THREADS - 1) / THREADS;
    let launch = LaunchDims {
        grid: (blocks * THREADS, 1, 1),
        block: (THREADS, 1, 1),
    };
    let template = [("T", TemplateArg::Dtype(y.dtype()))];
    let mut shape = y.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = width;
    }
    let mut out =
        KERNEL.with(|k| k.apply(&[y, &dims], &[(&shape, y.dtype())], launch, &template))?;
    out.pop()
        .ok_or_else(|| ModelError::Mlx("swiglu kernel: no output".into()))
}

/// MLX's ops for the same thing: the two halves as slices, then the
/// compiled SwiGLU (the self-check's reference, and what the MLP runs where
/// the kernel does not take the product).
pub fn reference(y: &Array, width: i32) -> Result<Array> {
    let gate = y.index((mlx_rs::ops::indexing::Ellipsis, ..width));
    let up = y.index((mlx_rs::ops::indexing::Ellipsis, width..));
    crate::fused::swiglu(&gate, &up)
}

/// Checks the kernel against [`reference`] on this device for one width
/// and type (1, 3 and [`MAX_ROWS`] rows); returns the largest relative
/// error, or why it failed.
pub fn check(width: i32, dtype: Dtype) -> std::result::Result<f32, String> {
    let run = || -> Result<f32> {
        let mut worst = 0.0f32;
        for rows in [1, 3, MAX_ROWS as i32] {
            let y = mlx_rs::random::normal::<f32>(&[rows, 1, 2 * width], None, None, None)?
                .multiply(Array::from_f32(4.0))?
                .as_dtype(dtype)?;
            let ours = apply(&y, width, rows)?;
            let want = reference(&y, width)?;
            worst = worst.max(relative_error(&ours, &want)?);
        }
        Ok(worst)
    };
    verdict(run(), "MLX's slices and SwiGLU")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_decode_sizes_of_whole_vectors_in_half_precision() {
        assert!(takes(12288, 1, Dtype::Bfloat16));
        assert!(takes(512, MAX_ROWS, Dtype::Float16));
        assert!(!takes(12288, MAX_ROWS + 1, Dtype::Bfloat16));
        assert!(!takes(12284, 1, Dtype::Bfloat16));
        assert!(!takes(512, 1, Dtype::Float32));
        assert!(!takes(512, 0, Dtype::Bfloat16));
    }

    /// The kernel's arithmetic in MLX ops, rounding where the source rounds
    /// (sigmoid to T, `g * sigmoid(g)` to T, the product with `u` to T),
    /// is what the kernel's device self-check compares with.
    #[test]
    fn the_kernels_arithmetic_is_mlxs_swiglu() {
        use crate::test_util::normal;
        for dtype in [Dtype::Bfloat16, Dtype::Float16] {
            let t = |a: Array| a.as_dtype(dtype).unwrap();
            let f = |a: &Array| a.as_dtype(Dtype::Float32).unwrap();
            let width = 64;
            let y = t(normal(&[3, 1, 2 * width], 1)
                .multiply(Array::from_f32(4.0))
                .unwrap());
            let g = f(&y.index((.., .., ..width)));
            let u = f(&y.index((.., .., width..)));
            let s = t(mlx_rs::ops::sigmoid(&g).unwrap());
            let a = t(g.multiply(f(&s)).unwrap());
            let ours = t(f(&a).multiply(&u).unwrap());
            let want = reference(&y, width).unwrap();
            let err = relative_error(&ours, &want).unwrap();
            assert!(err < 1e-2, "{dtype:?}: relative error {err}");
        }
    }

    /// Off (never enabled here) or not CUDA: the caller keeps MLX's ops.
    #[test]
    fn off_the_kernel_leaves_mlxs_ops() {
        let y = crate::test_util::normal(&[2, 1, 128], 1)
            .as_dtype(Dtype::Bfloat16)
            .unwrap();
        assert!(joined(&y, 64).unwrap().is_none());
    }
}
