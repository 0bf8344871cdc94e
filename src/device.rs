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
}
