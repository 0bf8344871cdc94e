//! A small-batch matrix-vector kernel for MLX's CUDA backend.
//!
//! Decoding multiplies a few activation rows (one per running sequence) by
//! every weight matrix, so a step reads all weights once whatever the batch:
//! it is bound by memory bandwidth, and batching should be nearly free. On
//! the H200, MLX 0.32's CUDA matmul uses a matrix-vector kernel for one row
//! but a general GEMM for two to sixteen rows, which takes 25–60% longer per
//! matrix (bench/results/h200-*.md), so a batch of two decoded barely faster
//! than one. This kernel reads each weight row once and multiplies it with up
//! to [`MAX_ROWS`] activation rows in registers: one warp per output column,
//! 16-byte loads, f32 accumulation, a warp-shuffle reduction.
//!
//! It is JIT-compiled by MLX (NVRTC) through mlx-c's custom CUDA kernel API,
//! and used only when [`enable`] turned it on (`HEARTH_CUDA_GEMV`, off by
//! default; docs/cuda.md): on a CUDA device, after a self-check against
//! MLX's own matmul. Everywhere else (CPU, Metal) the plain matmul runs.

use std::{
    ffi::CString,
    sync::atomic::{AtomicUsize, Ordering},
};

use mlx_rs::{Array, Dtype, Stream};

use crate::error::{ModelError, Result};

/// Most activation rows the kernel takes (more use MLX's GEMM).
pub const MAX_ROWS: usize = 8;

/// Row range the kernel is used for, packed as `min << 8 | max`; 0 = off.
static ROWS: AtomicUsize = AtomicUsize::new(0);

/// Warps (output columns) per thread block.
const WARPS: i32 = 8;

const SOURCE: &str = r#"
    const int N = dims[0];
    const int VECS = dims[1] / 8;
    const int lane = threadIdx.x & 31;
    const int col = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (col >= N) {
        return;
    }
    const uint4* wrow = reinterpret_cast<const uint4*>(w) + (size_t)col * VECS;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    float acc[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        acc[m] = 0.0f;
    }
#pragma unroll 4
    for (int i = lane; i < VECS; i += 32) {
        const uint4 wq = wrow[i];
        const T* we = reinterpret_cast<const T*>(&wq);
        float wf[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            wf[j] = static_cast<float>(we[j]);
        }
#pragma unroll
        for (int m = 0; m < ROWS; ++m) {
            const uint4 xq = xv[m * VECS + i];
            const T* xe = reinterpret_cast<const T*>(&xq);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                acc[m] += wf[j] * static_cast<float>(xe[j]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        float v = acc[m];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            v += __shfl_xor_sync(0xffffffffu, v, o);
        }
        if (lane == 0) {
            y[(size_t)m * N + col] = T(v);
        }
    }
"#;

/// Whether `x W^T` with `rows` activation rows of width `k` and a `weight`
/// of this dtype goes through the kernel.
pub fn applies(rows: usize, k: i32, dtype: Dtype) -> bool {
    let packed = ROWS.load(Ordering::Relaxed);
    if packed == 0 {
        return false;
    }
    let (min, max) = (packed >> 8, packed & 0xff);
    (min..=max).contains(&rows)
        && k % 8 == 0
        && k > 0
        && matches!(dtype, Dtype::Bfloat16 | Dtype::Float16)
}

/// `x W^T` for `x: [..., K]` with at most [`MAX_ROWS`] rows in all and a
/// row-major `weight: [N, K]` of the same dtype (bf16 or f16).
pub fn matmul_t(x: &Array, weight: &Array) -> Result<Array> {
    let k = weight.dim(1);
    let n = weight.dim(0);
    let mut out_shape = x.shape().to_vec();
    let rows: i32 = out_shape[..out_shape.len() - 1].iter().product();
    let x2 = x.reshape(&[rows, k])?;
    let y = launch(&x2, weight, rows, n, k)?;
    if let Some(last) = out_shape.last_mut() {
        *last = n;
    }
    Ok(y.reshape(&out_shape)?)
}

fn new_kernel() -> std::result::Result<mlx_sys::mlx_fast_cuda_kernel, String> {
    let c = |s: &str| CString::new(s).map_err(|_| "bad string".to_string());
    let (name, source, header) = (c("hearth_gemv")?, c(SOURCE)?, c("")?);
    let names = |v: &[&str]| -> std::result::Result<mlx_sys::mlx_vector_string, String> {
        let owned: Vec<CString> = v
            .iter()
            .map(|s| c(s))
            .collect::<std::result::Result<_, _>>()?;
        let mut ptrs: Vec<*const std::os::raw::c_char> = owned.iter().map(|s| s.as_ptr()).collect();
        // SAFETY: mlx-c copies the strings; `owned` outlives the call.
        Ok(unsafe { mlx_sys::mlx_vector_string_new_data(ptrs.as_mut_ptr(), ptrs.len()) })
    };
    let inputs = names(&["x", "w", "dims"])?;
    let outputs = names(&["y"])?;
    // SAFETY: plain constructor call with valid C strings and vectors, which
    // are freed right after (mlx-c copies them).
    let kernel = unsafe {
        let k = mlx_sys::mlx_fast_cuda_kernel_new(
            name.as_ptr(),
            inputs,
            outputs,
            source.as_ptr(),
            header.as_ptr(),
            true,
            0,
        );
        mlx_sys::mlx_vector_string_free(inputs);
        mlx_sys::mlx_vector_string_free(outputs);
        k
    };
    if kernel.ctx.is_null() {
        Err("creating the kernel failed".into())
    } else {
        Ok(kernel)
    }
}

/// A thread's kernel handle (or why it could not be made), freed when the
/// thread ends.
struct Kernel(std::result::Result<mlx_sys::mlx_fast_cuda_kernel, &'static str>);

impl Drop for Kernel {
    fn drop(&mut self) {
        if let Ok(kernel) = self.0 {
            // SAFETY: created by `new_kernel`, freed once, here.
            unsafe { mlx_sys::mlx_fast_cuda_kernel_free(kernel) };
        }
    }
}

thread_local! {
    static KERNEL: Kernel = Kernel(new_kernel().map_err(|e| {
        tracing::warn!(error = %e, "cuda gemv: creating the kernel failed");
        "creating the kernel failed"
    }));

    /// `[N, K]` of each matrix shape seen, kept on the device: one small
    /// array per shape instead of a host-to-device copy per call.
    static DIMS: std::cell::RefCell<std::collections::HashMap<(i32, i32), Array>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

fn dims_array(n: i32, k: i32) -> Array {
    DIMS.with(|dims| {
        dims.borrow_mut()
            .entry((n, k))
            .or_insert_with(|| Array::from_slice(&[n, k], &[2]))
            .clone()
    })
}

/// Launches the kernel. Only the element type and the row count are
/// template arguments (N and K are read from `dims`), so MLX compiles one
/// module per row count, all of them in [`enable`]'s self-check, instead of
/// one per matrix shape and row count in the middle of serving (each an
/// NVRTC compile of about a second: the stalls of bench/results/h200-2026-11-29-s3).
fn launch(x: &Array, w: &Array, rows: i32, n: i32, k: i32) -> Result<Array> {
    let fail = |what: &str| ModelError::Mlx(format!("cuda gemv: {what}"));
    let dtype = w.dtype();
    let c = |s: &str| CString::new(s).map_err(|_| fail("bad string"));
    // One kernel handle per thread (the engine thread), created on first
    // use: a handle per call cost host time on every one of the ~250
    // matmuls of a decode step, which made a single stream 30% slower
    // (run 2 of bench/results/h200-2026-11-29-s3). MLX caches the compiled
    // module by name and template arguments.
    let kernel = KERNEL.with(|k| k.0.map_err(fail))?;
    let t = c("T")?;
    let tr = c("ROWS")?;
    let dims = dims_array(n, k);
    let stream = Stream::thread_local_or_default();
    // SAFETY: the config and vectors below are created here and freed before
    // returning; the kernel reads `dims` = [N, K], `rows * K` elements of
    // `x` and `N * K` of `w` (row-contiguous, ensured by MLX) and writes
    // each of the `rows * N` outputs exactly once.
    unsafe {
        let config = mlx_sys::mlx_fast_cuda_kernel_config_new();
        let shape = [rows, n];
        let blocks = (n + WARPS - 1) / WARPS;
        let mut status = 0;
        status |= mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
            config,
            shape.as_ptr(),
            2,
            dtype.into(),
        );
        status |= mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config, blocks * WARPS * 32, 1, 1);
        status |= mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config, WARPS * 32, 1, 1);
        status |= mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_dtype(
            config,
            t.as_ptr(),
            dtype.into(),
        );
        status |=
            mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(config, tr.as_ptr(), rows);
        let in_ptrs = [x.as_ptr(), w.as_ptr(), dims.as_ptr()];
        let inputs = mlx_sys::mlx_vector_array_new_data(in_ptrs.as_ptr(), in_ptrs.len());
        let mut outputs = mlx_sys::mlx_vector_array_new();
        if status == 0 {
            status = mlx_sys::mlx_fast_cuda_kernel_apply(
                &mut outputs,
                kernel,
                inputs,
                config,
                stream.as_ptr(),
            );
        }
        let mut result = None;
        if status == 0 && mlx_sys::mlx_vector_array_size(outputs) == 1 {
            let mut out = mlx_sys::mlx_array_new();
            if mlx_sys::mlx_vector_array_get(&mut out, outputs, 0) == 0 {
                result = Some(Array::from_ptr(out));
            } else {
                mlx_sys::mlx_array_free(out);
            }
        }
        mlx_sys::mlx_vector_array_free(outputs);
        mlx_sys::mlx_vector_array_free(inputs);
        mlx_sys::mlx_fast_cuda_kernel_config_free(config);
        result.ok_or_else(|| fail("launching the kernel"))
    }
}

/// Turns the kernel on for `min..=max` rows (clamped to `1..=MAX_ROWS`)
/// after checking it against MLX's matmul on this device; returns the
/// largest relative error seen, or why it stays off. Call only on a CUDA
/// device.
pub fn enable(min: usize, max: usize) -> std::result::Result<f32, String> {
    let (min, max) = (min.clamp(1, MAX_ROWS), max.clamp(1, MAX_ROWS));
    if min > max {
        return Err("empty row range".into());
    }
    let worst = self_check(min, max).map_err(|e| e.to_string())?;
    if worst > 2e-2 {
        return Err(format!(
            "self-check failed: relative error {worst} against MLX's matmul"
        ));
    }
    ROWS.store(min << 8 | max, Ordering::Relaxed);
    Ok(worst)
}

/// Turns the kernel off.
pub fn disable() {
    ROWS.store(0, Ordering::Relaxed);
}

fn self_check(min: usize, max: usize) -> Result<f32> {
    let mut worst = 0.0f32;
    for (n, k) in [(1000, 512), (96, 4096)] {
        let w =
            mlx_rs::random::normal::<f32>(&[n, k], None, None, None)?.as_dtype(Dtype::Bfloat16)?;
        for rows in min..=max {
            let x = mlx_rs::random::normal::<f32>(&[rows as i32, k], None, None, None)?
                .as_dtype(Dtype::Bfloat16)?;
            let ours = launch(&x, &w, rows as i32, n, k)?.as_dtype(Dtype::Float32)?;
            let reference = x.matmul(w.t())?.as_dtype(Dtype::Float32)?;
            let err = ours
                .subtract(&reference)?
                .abs()?
                .max(None)?
                .try_item_cast::<f32>()
                .map_err(|e| ModelError::Mlx(e.to_string()))?;
            let scale = reference
                .abs()?
                .max(None)?
                .try_item_cast::<f32>()
                .map_err(|e| ModelError::Mlx(e.to_string()))?
                .max(1e-6);
            worst = worst.max(err / scale);
        }
    }
    Ok(worst)
}

/// Times MLX's matmul against the kernel for `rows` rows of `[n, k]` bf16
/// weights: (matmul µs, kernel µs) per call, averaged over `reps` calls
/// queued back to back (one sync at the end).
pub fn time(rows: usize, n: i32, k: i32, reps: usize) -> Result<(f64, f64)> {
    let w = mlx_rs::random::normal::<f32>(&[n, k], None, None, None)?.as_dtype(Dtype::Bfloat16)?;
    let x = mlx_rs::random::normal::<f32>(&[rows as i32, k], None, None, None)?
        .as_dtype(Dtype::Bfloat16)?;
    w.eval()?;
    x.eval()?;
    let run = |f: &dyn Fn(&Array) -> Result<Array>| -> Result<f64> {
        // Chain the calls so MLX cannot drop any: each adds a scaled copy.
        let mut acc = f(&x)?;
        acc.eval()?;
        let start = std::time::Instant::now();
        for _ in 0..reps {
            acc = acc.add(f(&x)?)?;
        }
        acc.eval()?;
        Ok(start.elapsed().as_secs_f64() * 1e6 / reps as f64)
    };
    let mlx = run(&|x| Ok(x.matmul(w.t())?))?;
    let ours = run(&|x| launch(x, &w, rows as i32, n, k))?;
    Ok((mlx, ours))
}
