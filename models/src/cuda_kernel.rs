//! Custom CUDA kernels through mlx-c's `mlx_fast_cuda_kernel` API: MLX
//! JIT-compiles the source (NVRTC) on first use per template arguments and
//! caches the module, and the kernel runs as a node of the lazy graph like
//! any MLX op. [`crate::cuda_gemv`], [`crate::cuda_attn`], [`crate::cuda_qk`]
//! and [`crate::cuda_norm`] are built on this; nothing here runs unless one
//! of them was enabled on a CUDA device.

use std::ffi::CString;

use mlx_rs::{Array, Dtype, Stream};

use crate::error::{ModelError, Result};

/// A compiled-on-demand kernel (or why it could not be made), freed on drop.
/// Keep one per thread (`thread_local!`): making one per call costs host
/// time on every call (run 2 of bench/results/h200-2026-11-29-s3).
pub(crate) struct CudaKernel {
    name: &'static str,
    handle: std::result::Result<mlx_sys::mlx_fast_cuda_kernel, String>,
}

/// A compile-time constant of the kernel source (`using T = ...;` or
/// `constexpr int NAME = ...;`).
#[derive(Clone, Copy)]
pub(crate) enum TemplateArg {
    Dtype(Dtype),
    Int(i32),
}

/// Grid and block sizes in threads (MLX divides the grid by the block).
#[derive(Clone, Copy)]
pub(crate) struct LaunchDims {
    pub grid: (i32, i32, i32),
    pub block: (i32, i32, i32),
}

impl CudaKernel {
    /// `source` is the kernel body; MLX writes the signature from the input
    /// and output names (`const T* name` each) and the template arguments.
    /// `header` holds device functions placed before it.
    pub fn new(
        name: &'static str,
        inputs: &[&str],
        outputs: &[&str],
        source: &str,
        header: &str,
    ) -> CudaKernel {
        let handle = make(name, inputs, outputs, source, header);
        if let Err(e) = &handle {
            tracing::warn!(error = %e, kernel = name, "cuda kernel: creating it failed");
        }
        CudaKernel { name, handle }
    }

    /// Adds the kernel to the graph on this thread's stream: `inputs` in the
    /// order of [`CudaKernel::new`]'s names (made row-contiguous by MLX),
    /// one output per `(shape, dtype)`.
    pub fn apply(
        &self,
        inputs: &[&Array],
        outputs: &[(&[i32], Dtype)],
        dims: LaunchDims,
        template: &[(&str, TemplateArg)],
    ) -> Result<Vec<Array>> {
        let fail = |what: &str| ModelError::Mlx(format!("cuda kernel {}: {what}", self.name));
        let kernel = *self.handle.as_ref().map_err(|e| fail(e))?;
        let names: Vec<CString> = template
            .iter()
            .map(|(n, _)| CString::new(*n).map_err(|_| fail("bad template name")))
            .collect::<Result<_>>()?;
        let stream = Stream::thread_local_or_default();
        // SAFETY: the config and vectors are created here and freed before
        // returning; the arrays and names outlive the calls that read them
        // (mlx-c copies what it keeps). What the kernel reads and writes is
        // the caller's contract with its source.
        unsafe {
            let config = mlx_sys::mlx_fast_cuda_kernel_config_new();
            let mut status = 0;
            for (shape, dtype) in outputs {
                status |= mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
                    config,
                    shape.as_ptr(),
                    shape.len(),
                    (*dtype).into(),
                );
            }
            let (g, b) = (dims.grid, dims.block);
            status |= mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config, g.0, g.1, g.2);
            status |= mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config, b.0, b.1, b.2);
            for ((_, arg), name) in template.iter().zip(&names) {
                status |= match *arg {
                    TemplateArg::Dtype(d) => {
                        mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_dtype(
                            config,
                            name.as_ptr(),
                            d.into(),
                        )
                    }
                    TemplateArg::Int(v) => {
                        mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(
                            config,
                            name.as_ptr(),
                            v,
                        )
                    }
                };
            }
            let in_ptrs: Vec<_> = inputs.iter().map(|a| a.as_ptr()).collect();
            let in_vec = mlx_sys::mlx_vector_array_new_data(in_ptrs.as_ptr(), in_ptrs.len());
            let mut out_vec = mlx_sys::mlx_vector_array_new();
            if status == 0 {
                status = mlx_sys::mlx_fast_cuda_kernel_apply(
                    &mut out_vec,
                    kernel,
                    in_vec,
                    config,
                    stream.as_ptr(),
                );
            }
            let mut result = Vec::new();
            if status == 0 && mlx_sys::mlx_vector_array_size(out_vec) == outputs.len() {
                for i in 0..outputs.len() {
                    let mut out = mlx_sys::mlx_array_new();
                    if mlx_sys::mlx_vector_array_get(&mut out, out_vec, i) == 0 {
                        result.push(Array::from_ptr(out));
                    } else {
                        mlx_sys::mlx_array_free(out);
                        status = 1;
                        break;
                    }
                }
            }
            mlx_sys::mlx_vector_array_free(out_vec);
            mlx_sys::mlx_vector_array_free(in_vec);
            mlx_sys::mlx_fast_cuda_kernel_config_free(config);
            if status != 0 || result.len() != outputs.len() {
                return Err(fail("launching it failed"));
            }
            Ok(result)
        }
    }
}

impl Drop for CudaKernel {
    fn drop(&mut self) {
        if let Ok(kernel) = self.handle {
            // SAFETY: created by `make`, freed once, here.
            unsafe { mlx_sys::mlx_fast_cuda_kernel_free(kernel) };
        }
    }
}

fn make(
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    source: &str,
    header: &str,
) -> std::result::Result<mlx_sys::mlx_fast_cuda_kernel, String> {
    let c = |s: &str| CString::new(s).map_err(|_| "bad string".to_string());
    let names = |v: &[&str]| -> std::result::Result<mlx_sys::mlx_vector_string, String> {
        let owned: Vec<CString> = v
            .iter()
            .map(|s| c(s))
            .collect::<std::result::Result<_, _>>()?;
        let mut ptrs: Vec<*const std::os::raw::c_char> = owned.iter().map(|s| s.as_ptr()).collect();
        // SAFETY: mlx-c copies the strings; `owned` outlives the call.
        Ok(unsafe { mlx_sys::mlx_vector_string_new_data(ptrs.as_mut_ptr(), ptrs.len()) })
    };
    let (name, source, header) = (c(name)?, c(source)?, c(header)?);
    let inputs = names(inputs)?;
    let outputs = names(outputs)?;
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

thread_local! {
    /// Small int32 inputs (shapes, launch parameters) by value, kept on the
    /// device: one array per distinct value instead of a host-to-device copy
    /// per call.
    static INTS: std::cell::RefCell<std::collections::HashMap<Vec<i32>, Array>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Fewest int32 values in the buffer of a host-made array that kernels
/// read. MLX 0.32's CUDA allocator keeps buffers of up to 8 bytes in a
/// host-resident pool that the GPU reads over the bus on every access
/// (`SmallSizePool`, `cudaMemAdviseSetAccessedBy`); larger ones are managed
/// memory, which moves to the device on its first use there.
pub(crate) const MIN_INTS: usize = 4;

/// `values`, then zeros up to [`MIN_INTS`] values.
pub(crate) fn padded_ints(values: &[i32]) -> Vec<i32> {
    let mut padded = values.to_vec();
    padded.resize(values.len().max(MIN_INTS), 0);
    padded
}

/// The int32 array holding `values` (then zeros up to [`MIN_INTS`]
/// values: kernels read only the values they were given), made once per
/// thread and value; the host never writes it again, so it stays on the
/// device after its first use.
pub(crate) fn int_array(values: &[i32]) -> Array {
    INTS.with(|ints| {
        let mut ints = ints.borrow_mut();
        if let Some(a) = ints.get(values) {
            return a.clone();
        }
        let padded = padded_ints(values);
        let a = Array::from_slice(&padded, &[padded.len() as i32]);
        ints.insert(values.to_vec(), a.clone());
        a
    })
}

/// Whether `dtype` is one the kernels compute in: bf16 or f16.
pub(crate) fn half_precision(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::Bfloat16 | Dtype::Float16)
}

/// The largest relative error against MLX's own ops a kernel's self-check
/// accepts (bf16 and f16 results).
const SELF_CHECK_MAX_ERROR: f32 = 2e-2;

/// Which keys (shape kinds) a kernel passed its device self-check for, on
/// this thread: the check runs the first time a key is asked for, and its
/// verdict is kept (keep one in a `thread_local!`).
pub(crate) struct Checked<K>(std::cell::RefCell<Vec<(K, bool)>>);

impl<K: PartialEq> Checked<K> {
    pub const fn new() -> Self {
        Checked(std::cell::RefCell::new(Vec::new()))
    }

    /// The kept verdict for `key`, or `check()`'s, kept from now on; a new
    /// verdict is logged once (`kernel` names the kernel in the log).
    pub fn get_or_check(
        &self,
        key: K,
        kernel: &str,
        check: impl FnOnce() -> std::result::Result<f32, String>,
    ) -> bool
    where
        K: std::fmt::Debug,
    {
        if let Some(&(_, ok)) = self.0.borrow().iter().find(|e| e.0 == key) {
            return ok;
        }
        let ok = match check() {
            Ok(err) => {
                tracing::info!(shape = ?key, max_rel_error = err, "{kernel} kernel on");
                true
            }
            Err(e) => {
                tracing::warn!(shape = ?key, error = %e, "{kernel} kernel off");
                false
            }
        };
        self.0.borrow_mut().push((key, ok));
        ok
    }
}

/// A self-check's verdict: its largest relative error against MLX's own
/// ops (`against` names them) if within [`SELF_CHECK_MAX_ERROR`], else why
/// the kernel stays off.
pub(crate) fn verdict(err: Result<f32>, against: &str) -> std::result::Result<f32, String> {
    let err = err.map_err(|e| e.to_string())?;
    if err > SELF_CHECK_MAX_ERROR {
        return Err(format!(
            "self-check failed: relative error {err} against {against}"
        ));
    }
    Ok(err)
}

/// [`relative_error`] of a kernel's output against MLX's, which must also
/// have its element type (the kernels round where MLX's ops round).
pub(crate) fn output_error(ours: &Array, reference: &Array) -> Result<f32> {
    if ours.dtype() != reference.dtype() {
        return Err(ModelError::Mlx(format!(
            "element type {:?} against {:?}",
            ours.dtype(),
            reference.dtype()
        )));
    }
    relative_error(ours, reference)
}

/// Largest `|a - b|` relative to `max |b|` (NaN counts as infinite), for
/// the self-checks of the kernels against MLX's own ops; an error when the
/// shapes differ (no broadcasting).
pub(crate) fn relative_error(ours: &Array, reference: &Array) -> Result<f32> {
    if ours.shape() != reference.shape() {
        return Err(ModelError::Mlx(format!(
            "shape {:?} against {:?}",
            ours.shape(),
            reference.shape()
        )));
    }
    let item = |a: Array| -> Result<f32> {
        a.try_item_cast::<f32>()
            .map_err(|e| ModelError::Mlx(e.to_string()))
    };
    let ours = ours.as_dtype(Dtype::Float32)?;
    let reference = reference.as_dtype(Dtype::Float32)?;
    let err = item(ours.subtract(&reference)?.abs()?.max(None)?)?;
    let scale = item(reference.abs()?.max(None)?)?.max(1e-6);
    let rel = err / scale;
    Ok(if rel.is_nan() { f32::INFINITY } else { rel })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shape kind is checked once; its verdict, pass or fail, is kept.
    #[test]
    fn a_verdict_is_checked_once_and_kept() {
        let checked = Checked::new();
        let mut runs = 0;
        for _ in 0..3 {
            assert!(checked.get_or_check((64, Dtype::Bfloat16), "test", || {
                runs += 1;
                Ok(1e-3)
            }));
        }
        assert_eq!(runs, 1);
        let failing = || Err("no".to_string());
        assert!(!checked.get_or_check((128, Dtype::Bfloat16), "test", failing));
        assert!(!checked.get_or_check((128, Dtype::Bfloat16), "test", || Ok(0.0)));
    }

    /// Short value lists are padded past MLX's host-resident small-buffer
    /// pool; the values come first and longer lists are kept whole.
    #[test]
    fn int_arrays_are_padded_to_four_values() {
        let short = int_array(&[7, -3]);
        assert_eq!(short.as_slice::<i32>(), &[7, -3, 0, 0]);
        assert_eq!(int_array(&[7, -3]).as_slice::<i32>(), &[7, -3, 0, 0]);
        assert_eq!(int_array(&[5]).as_slice::<i32>(), &[5, 0, 0, 0]);
        let long = [1, 2, 3, 4, 5, 6];
        assert_eq!(int_array(&long).as_slice::<i32>(), &long);
    }

    /// Equal shapes are compared; different ones are an error, even where
    /// they would broadcast.
    #[test]
    fn relative_errors_need_equal_shapes() {
        let a = Array::from_slice(&[1.0f32, 2.0, 4.0], &[3]);
        let b = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
        assert_eq!(relative_error(&a, &b).unwrap(), 1.0 / 3.0);
        let row = Array::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3]);
        assert!(relative_error(&a, &row).is_err());
    }

    #[test]
    fn output_errors_need_equal_element_types() {
        let a = Array::from_slice(&[1.0f32, 2.0, 4.0], &[3]);
        let b = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
        assert_eq!(output_error(&a, &b).unwrap(), 1.0 / 3.0);
        let half = b.as_dtype(Dtype::Bfloat16).unwrap();
        assert!(output_error(&a, &half).is_err());
    }

    /// Errors within the tolerance pass; above it, or a failed run, fail.
    #[test]
    fn verdicts_follow_the_tolerance() {
        assert_eq!(verdict(Ok(1e-3), "x"), Ok(1e-3));
        let above = verdict(Ok(SELF_CHECK_MAX_ERROR * 2.0), "MLX's ops").unwrap_err();
        assert!(above.contains("MLX's ops"), "{above}");
        assert!(verdict(Err(ModelError::Mlx("boom".into())), "x").is_err());
    }
}
