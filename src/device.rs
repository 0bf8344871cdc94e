//! Which accelerator MLX runs on here: Metal on Apple Silicon, CUDA when the
//! CUDA build of libmlx is loaded (see docs/cuda.md), otherwise the CPU.

use serde::Serialize;

/// The device the engine's arrays live on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceInfo {
    /// `gpu` or `cpu` (MLX's default device).
    pub kind: &'static str,
    /// `metal`, `cuda` or `cpu`.
    pub backend: &'static str,
}

impl DeviceInfo {
    pub fn detect() -> Self {
        let mut metal = false;
        let mut cuda = false;
        let mut gpu = false;
        // SAFETY: plain queries into mlx-c with out-pointers we own; the
        // device handle is freed below.
        unsafe {
            mlx_sys::mlx_metal_is_available(&mut metal);
            mlx_sys::mlx_cuda_is_available(&mut cuda);
            let mut dev = mlx_sys::mlx_device_new();
            if mlx_sys::mlx_get_default_device(&mut dev) == 0 {
                let mut kind = mlx_sys::mlx_device_type__MLX_CPU;
                if mlx_sys::mlx_device_get_type(&mut kind, dev) == 0 {
                    gpu = kind == mlx_sys::mlx_device_type__MLX_GPU;
                }
            }
            mlx_sys::mlx_device_free(dev);
        }
        DeviceInfo {
            kind: if gpu { "gpu" } else { "cpu" },
            backend: match (gpu, metal, cuda) {
                (true, true, _) => "metal",
                (true, _, true) => "cuda",
                _ => "cpu",
            },
        }
    }

    pub fn label(&self) -> String {
        format!("{} ({})", self.kind, self.backend)
    }
}

/// Routes used on MLX's CUDA backend unless `HEARTH_CUDA_GEMV` names others:
/// MLX's GEMV for one row, tensor cores for 2–16 rows on weights up to 32
/// MiB, cuBLAS above. In-process on the H200 this made two-row steps 1.20x
/// a one-row step where the warp kernel at two rows made them 1.37x
/// (`hearth dev decode-bench`, bench/results/h200-2026-12-01-s6.md).
pub const DEFAULT_CUDA_GEMV: &str = "mma:2-16:32";

/// On MLX's CUDA backend, puts Hearth's kernels in force (nothing happens
/// on other devices); each is checked against MLX on the device (the GEMV
/// routes here, the attention kernel per head size at its first use) and
/// stays off if that fails:
///
/// - the small-batch GEMV routes (models/src/cuda_gemv.rs):
///   [`DEFAULT_CUDA_GEMV`], or `HEARTH_CUDA_GEMV=KERNEL:MIN-MAX[:MAX_MB],...`
///   (`off`: MLX's matmul everywhere). The default is what measured best end
///   to end on the H200 (bench/results/h200-*.md).
/// - one-token attention for every batched decode step
///   (models/src/cuda_attn.rs): `HEARTH_CUDA_ATTN` is `on` (the default:
///   [`hearth_models::cuda_attn::DEFAULT_TARGET_BLOCKS`]), a number of
///   blocks a step aims at (0: fewest key chunks), or `off` (MLX's SDPA);
///   `HEARTH_CUDA_ATTN_THREADS` its threads per block (128 by default).
/// - explicit attention for prompt chunks of up to
///   `HEARTH_PREFILL_ATTN_KEYS=N` keys instead of cuDNN's, which builds a
///   graph for every new pair of lengths
///   (`hearth_models::layers::set_explicit_prefill_keys`); off by default
///   ([`DEFAULT_EXPLICIT_PREFILL_KEYS`]) until measured on the H200.
///
/// Call it on the thread that runs the model: MLX's stream and the kernel
/// handles are per thread.
pub fn enable_cuda_kernels() {
    if DeviceInfo::detect().backend != "cuda" {
        return;
    }
    enable_cuda_gemv();
    enable_cuda_attn();
    let keys = std::env::var("HEARTH_PREFILL_ATTN_KEYS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_EXPLICIT_PREFILL_KEYS);
    if keys > 0 {
        tracing::info!(max_keys = keys, "explicit attention for prompt chunks");
    }
    hearth_models::layers::set_explicit_prefill_keys(keys);
}

/// Prompt chunks with up to this many keys attend through explicit matrix
/// products on MLX's CUDA backend (0: none, cuDNN's fused attention for
/// all). A first prompt of a new length paid about 100 ms in one pass on
/// the H200, which cuDNN's per-shape graph build would explain; the A/B
/// against `HEARTH_PREFILL_ATTN_KEYS=4096` has not run yet
/// (bench/results/h200-2026-12-01-s8.md), so the measured path stays.
pub const DEFAULT_EXPLICIT_PREFILL_KEYS: usize = 0;

fn enable_cuda_gemv() {
    use hearth_models::cuda_gemv::{self, Route};
    let setting = std::env::var("HEARTH_CUDA_GEMV").unwrap_or_else(|_| DEFAULT_CUDA_GEMV.into());
    let routes = match Route::parse_list(&setting) {
        Ok(routes) => routes,
        Err(e) => {
            tracing::warn!(%setting, error = %e, "HEARTH_CUDA_GEMV: small-batch kernels off");
            cuda_gemv::disable();
            return;
        }
    };
    if routes.is_empty() {
        cuda_gemv::disable();
        return;
    }
    match cuda_gemv::enable(routes) {
        Ok(err) => tracing::info!(%setting, max_rel_error = err, "small-batch GEMV kernels on"),
        Err(e) => tracing::warn!(%setting, error = %e, "small-batch GEMV kernels off"),
    }
}

/// `HEARTH_CUDA_ATTN`: `None` for off, else the blocks a step aims at.
fn parse_cuda_attn(setting: &str) -> std::result::Result<Option<usize>, String> {
    use hearth_models::cuda_attn::DEFAULT_TARGET_BLOCKS;
    match setting.trim() {
        "off" => Ok(None),
        "on" | "" => Ok(Some(DEFAULT_TARGET_BLOCKS)),
        n => n
            .parse()
            .map(Some)
            .map_err(|_| format!("want on, off or a number of blocks, not `{n}`")),
    }
}

fn enable_cuda_attn() {
    use hearth_models::cuda_attn;
    let setting = std::env::var("HEARTH_CUDA_ATTN").unwrap_or_else(|_| "on".into());
    let target = match parse_cuda_attn(&setting) {
        Ok(Some(target)) => target,
        Ok(None) => return cuda_attn::disable(),
        Err(e) => {
            tracing::warn!(%setting, error = %e, "HEARTH_CUDA_ATTN: attention kernel off");
            return cuda_attn::disable();
        }
    };
    // Threads per block: HEARTH_CUDA_ATTN_THREADS=128|256|512 (A/B runs).
    if let Ok(threads) = std::env::var("HEARTH_CUDA_ATTN_THREADS") {
        let parsed = threads
            .trim()
            .parse()
            .map_err(|_| format!("not a number: `{threads}`"));
        if let Err(e) = parsed.and_then(cuda_attn::set_threads) {
            tracing::warn!(%threads, error = %e, "HEARTH_CUDA_ATTN_THREADS ignored");
        }
    }
    // Checked per head size and type at first use (cuda_attn::usable).
    tracing::info!(%setting, "one-token attention kernel enabled");
    cuda_attn::enable(target);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_build_reports_cpu() {
        let d = DeviceInfo::detect();
        if cfg!(target_os = "linux") && std::env::var_os("HEARTH_MLX_DIR").is_none() {
            // The default Linux build links the mlx-cpu wheel.
            assert_eq!((d.kind, d.backend), ("cpu", "cpu"));
        }
        assert!(!d.label().is_empty());
    }

    #[test]
    fn default_routes_leave_one_row_and_large_weights_to_mlx() {
        use hearth_models::cuda_gemv::{pick, Kernel, Route};
        let routes = Route::parse_list(DEFAULT_CUDA_GEMV).unwrap();
        let bf16 = mlx_rs::Dtype::Bfloat16;
        assert_eq!(pick(&routes, 1, 4096, 4096, bf16), None);
        assert_eq!(pick(&routes, 2, 4096, 4096, bf16), Some(Kernel::Mma));
        assert_eq!(pick(&routes, 16, 4096, 4096, bf16), Some(Kernel::Mma));
        // Qwen3-8B's joined q/k/v (48 MiB) and lm_head stay on cuBLAS.
        assert_eq!(pick(&routes, 2, 6144, 4096, bf16), None);
        assert_eq!(pick(&routes, 2, 151936, 4096, bf16), None);
    }

    #[test]
    fn cuda_attn_setting() {
        let default = hearth_models::cuda_attn::DEFAULT_TARGET_BLOCKS;
        assert_eq!(parse_cuda_attn("on"), Ok(Some(default)));
        assert_eq!(parse_cuda_attn(" off "), Ok(None));
        assert_eq!(parse_cuda_attn("0"), Ok(Some(0)));
        assert_eq!(parse_cuda_attn("528"), Ok(Some(528)));
        assert!(parse_cuda_attn("fast").is_err());
    }
}
