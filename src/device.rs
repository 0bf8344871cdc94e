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

/// One of MLX's CUDA settings that Hearth gives a value when the
/// environment does not ([`apply_mlx_env_defaults`]).
pub struct MlxEnvDefault {
    pub var: &'static str,
    pub default: &'static str,
    /// What it switches, for the start-up log.
    pub what: &'static str,
    /// The size of the cache that fails once it has seen too many shapes
    /// (for a user who turns the feature on).
    pub cache_var: &'static str,
}

impl MlxEnvDefault {
    /// The value to give the variable when it is `current` (`None`: leave
    /// it as the user set it, whatever the value).
    pub fn value_for(&self, current: Option<&std::ffi::OsStr>) -> Option<&'static str> {
        current.is_none().then_some(self.default)
    }
}

/// CUDA graphs: off unless `MLX_USE_CUDA_GRAPHS=1` asks for them.
///
/// MLX's CUDA backend records kernels into CUDA graphs and keeps the
/// instantiated graphs in a cache keyed by their node structure
/// (`MLX_CUDA_GRAPH_CACHE_SIZE`, 400 entries). Its miss counter counts for
/// the whole process and never resets: after twice the capacity, every
/// graph of a structure it has not cached fails ("Cache thrashing is
/// happening ..."). Prompt passes of new lengths and batch compositions keep
/// adding structures, so a long-running server would end up failing
/// requests; on the H200 an A/B variant did within minutes
/// (bench/results/h200-2026-12-01-s9.md). Without graphs nothing is cached:
/// one-stream dense decode was ~15% slower there, the MoE's the same within
/// noise, and prompt steps faster (TTFT p50 21-58 ms against 73-101 ms at
/// 2-8 streams). A server must not fail after hours (docs/cuda.md).
pub const CUDA_GRAPHS: MlxEnvDefault = MlxEnvDefault {
    var: "MLX_USE_CUDA_GRAPHS",
    default: "0",
    what: "CUDA graphs",
    cache_var: "MLX_CUDA_GRAPH_CACHE_SIZE",
};

/// cuDNN attention for prompt passes: off unless
/// `MLX_CUDA_USE_CUDNN_SDPA=1` asks for it.
///
/// MLX 0.32 runs prompt passes' attention through cuDNN and keeps one
/// cuDNN graph per query shape, key shape and strides and mask shape in a
/// cache (`MLX_CUDA_SDPA_CACHE_SIZE`, 256 entries) with the same lifetime
/// miss counter as the CUDA graph cache ([`CUDA_GRAPHS`]): after 512
/// distinct shapes every new one fails. A server meets a new shape for
/// nearly every prompt length and cached-prefix length, so it would start
/// failing prompts after a few hundred distinct ones; each new shape also
/// builds a cuDNN graph first (prompt passes of unseen lengths took 2-3x as
/// long in-process on the H200, bench/results/h200-2026-12-02.md). Without
/// cuDNN, MLX attends through its matrix products and softmax, with no
/// shape cache.
pub const CUDNN_SDPA: MlxEnvDefault = MlxEnvDefault {
    var: "MLX_CUDA_USE_CUDNN_SDPA",
    default: "0",
    what: "cuDNN attention for prompt passes",
    cache_var: "MLX_CUDA_SDPA_CACHE_SIZE",
};

/// Every MLX setting Hearth gives a default.
pub const MLX_ENV_DEFAULTS: [MlxEnvDefault; 2] = [CUDA_GRAPHS, CUDNN_SDPA];

/// Applies Hearth's defaults for MLX's CUDA backend ([`MLX_ENV_DEFAULTS`])
/// to the process environment; harmless elsewhere (no other backend reads
/// them). MLX reads them once, at its first use of the GPU, so call it at
/// the start of `main`, before any other thread exists.
pub fn apply_mlx_env_defaults() {
    for d in &MLX_ENV_DEFAULTS {
        if let Some(value) = d.value_for(std::env::var_os(d.var).as_deref()) {
            std::env::set_var(d.var, value);
        }
    }
}

/// An integer setting as MLX reads it (C's `atoi`: leading blanks, a sign,
/// the digits up to the first other character; 0 when there are none).
fn mlx_int(value: &str) -> i64 {
    let s = value.trim_start();
    let (sign, digits) = match s.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    sign * digits[..end].parse::<i64>().unwrap_or(0)
}

/// CUDA errors after which the process's CUDA context is unusable: every
/// later kernel launch and allocation fails with the same error.
const CUDA_STICKY_ERRORS: [&str; 5] = [
    "an illegal memory access was encountered",
    "unspecified launch failure",
    "misaligned address",
    "an illegal instruction was encountered",
    "device-side assert triggered",
];

/// The CUDA driver's function `name` (`libcuda.so.1`, looked up at run
/// time: nothing links against CUDA); `None` without a driver (a CPU build,
/// macOS) or without that symbol.
#[cfg(unix)]
pub(crate) fn cuda_driver_fn(name: &std::ffi::CStr) -> Option<*mut std::ffi::c_void> {
    use std::ffi::{c_char, c_int, c_void};
    extern "C" {
        fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    /// `RTLD_NOW` (the same value on Linux and macOS).
    const RTLD_NOW: c_int = 2;
    // SAFETY: dlopen/dlsym get NUL-terminated names and return null on failure.
    unsafe {
        let lib = dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW);
        if lib.is_null() {
            return None;
        }
        let f = dlsym(lib, name.as_ptr());
        (!f.is_null()).then_some(f)
    }
}

#[cfg(not(unix))]
pub(crate) fn cuda_driver_fn(_name: &std::ffi::CStr) -> Option<*mut std::ffi::c_void> {
    None
}

/// The highest MLX peak memory seen before a [`restart_peak`].
static PEAK_SEEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// MLX's peak memory since the process started. The engine restarts MLX's
/// own count before each step to measure that step's working memory
/// (`scheduler::memory_guard`), so the process's peak is kept here.
pub fn peak_memory() -> Option<usize> {
    let now = mlx_rs::memory::peak_memory().ok()?;
    Some(now.max(PEAK_SEEN.load(std::sync::atomic::Ordering::Relaxed)))
}

/// Restarts MLX's peak memory count from the memory live now, keeping the
/// peak so far for [`peak_memory`].
pub fn restart_peak() {
    if let Ok(peak) = mlx_rs::memory::peak_memory() {
        PEAK_SEEN.fetch_max(peak, std::sync::atomic::Ordering::Relaxed);
    }
    let _ = mlx_rs::memory::reset_peak_memory();
}

/// Free memory of the GPU this process's CUDA context is on
/// (`cuMemGetInfo`), when MLX runs on CUDA; `None` elsewhere or if the
/// driver does not answer (e.g. no context current on this thread). Other
/// processes' allocations count as used: on a shared GPU this is what is
/// really left.
pub fn cuda_free_memory() -> Option<usize> {
    if DeviceInfo::detect().backend != "cuda" {
        return None;
    }
    let f = cuda_driver_fn(c"cuMemGetInfo_v2")?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: the symbol is the driver's `CUresult cuMemGetInfo_v2(size_t*
    // free, size_t* total)`; both pointers are to locals that outlive the call.
    let rc = unsafe {
        let f: extern "C" fn(*mut usize, *mut usize) -> std::ffi::c_int = std::mem::transmute(f);
        f(&mut free, &mut total)
    };
    (rc == 0 && total > 0).then_some(free)
}

/// How MLX 0.32.2 reports a CUDA error still pending in the calling thread
/// when it waits for the GPU (`Event::wait` peeks at the runtime's last
/// error and throws). A failed `cudaMallocAsync` (out of memory) leaves its
/// error pending, and MLX clears pending errors only when a command buffer
/// fails to commit: from then on every step of the engine thread fails with
/// it, even once memory is free again (bench/results/h100-2026-12-06-s28.md,
/// "pressure").
const CUDA_PENDING_ERROR: &str = "cudaPeekAtLastError() failed";

/// Whether an engine error means the process's CUDA context is lost (one
/// of [`CUDA_STICKY_ERRORS`]): nothing on the GPU will work again until the
/// server restarts.
pub fn context_lost(message: &str) -> bool {
    CUDA_STICKY_ERRORS.iter().any(|e| message.contains(e))
}

/// Whether after this engine error the engine cannot run a step again
/// until the server restarts: a lost CUDA context, or a CUDA error MLX
/// leaves pending for good ([`CUDA_PENDING_ERROR`]).
pub fn device_unusable(message: &str) -> bool {
    context_lost(message) || message.contains(CUDA_PENDING_ERROR)
}

/// What an operator should do about an engine error, where Hearth knows.
pub fn engine_error_hint(message: &str) -> Option<&'static str> {
    if message.contains("Cache thrashing is happening") {
        return Some(
            "one of MLX's CUDA caches (CUDA graphs, cuDNN attention) has seen too many shapes in \
             this process and now fails every new one: restart the server, and leave \
             MLX_USE_CUDA_GRAPHS and MLX_CUDA_USE_CUDNN_SDPA unset (Hearth's defaults, both off) \
             or raise the cache size the message names (docs/cuda.md)",
        );
    }
    if context_lost(message) {
        return Some(
            "the CUDA context of this process is lost (often after the GPU ran out of memory): \
             every later request will fail the same way; restart the server \
             (docs/scheduler.md, \"Idle memory\")",
        );
    }
    if message.contains(CUDA_PENDING_ERROR) {
        return Some(
            "an earlier CUDA error (usually the GPU running out of memory) is still pending in \
             the engine thread, and MLX 0.32.2 never clears it: every later request will fail \
             the same way; restart the server, and leave --gpu-reserve-mb on so that it does not \
             run out again (docs/scheduler.md, \"Sharing a GPU\")",
        );
    }
    (message.contains("cudaMalloc") && message.contains("out of memory")).then_some(
        "the GPU ran out of memory, usually because other processes hold it: give this server \
         a smaller share (--mlx-cache-mb caps MLX's buffer cache, --max-running the batch) or \
         run fewer processes on the GPU; if later requests fail with \"an illegal memory access\", \
         restart the server (docs/scheduler.md, \"Idle memory\")",
    )
}

/// Routes used on MLX's CUDA backend unless `HEARTH_CUDA_GEMV` names others:
/// MLX's GEMV for one row; at 2–4 rows the `split4` kernel on every weight
/// (the lm_head included): `warp4` with K split among the warps of a block
/// where a matrix has too few output columns to fill the GPU (an 8B model's
/// q/k/v, o and down projections split four ways, gate/up and the lm_head
/// not at all); at 5–16 rows tensor cores on weights up to 32 MiB and
/// cuBLAS above. A server's decode step is bound by the engine thread's
/// host work, and MLX sets up every cuBLAS call anew on the host, so every
/// product of a 2–4 row step stays off cuBLAS (bench/results/h200-2026-12-03-s16.md).
/// Against plain `warp4`, splitting K shortened the dense 8B in-process step
/// by 10–12% at 2 rows and 5% at 4 (two runs) and lengthened the MoE's by
/// 5–8% (one run); the servers were faster with it at 2–4 streams in all
/// three A/Bs (bench/results/h200-2026-12-04.md, docs/cuda.md). At 6–8 rows
/// it is slower than cuBLAS on the large weights (GPU time), so those stay.
pub const DEFAULT_CUDA_GEMV: &str = "split4:2-4,mma:5-16:32";

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
/// - one kernel per layer for a decode step's q/k RMSNorm, RoPE and
///   attention layout (models/src/cuda_qk.rs): `HEARTH_CUDA_QK=on|off`
///   ([`DEFAULT_CUDA_QK`]).
/// - the residual add and the RMSNorm after it as one kernel
///   (models/src/cuda_norm.rs): `HEARTH_CUDA_NORM=on|off`
///   ([`DEFAULT_CUDA_NORM`]).
/// - the lean decode graph, fewer reshape and slice nodes a step
///   (models/src/lean.rs): `HEARTH_LEAN_GRAPH=on|off` (`on`; `off` builds
///   the graphs of before, for A/B runs).
/// - a batch's product by a dense weight in one graph node instead of four
///   (the weight's `W^T` broadcast over the rows, which MLX folds into one
///   cuBLAS product; models/src/layers.rs `TransposedViews`):
///   `HEARTH_FOLD_ROWS=on|off` ([`DEFAULT_FOLD_ROWS`]).
/// - a decode step of the same rows as the one before takes its RoPE
///   offsets, lengths, row index and tokens from that step's device arrays
///   instead of host-written ones, which migrate to the GPU on first use
///   (`DecodeStep::next`): `HEARTH_CARRY_INPUTS=on|off` (`on`; on every
///   backend, the switch only here, for A/B runs).
/// - the MLP's SwiGLU read from the joined gate/up product
///   (models/src/cuda_swiglu.rs): `HEARTH_CUDA_SWIGLU=on|off`
///   ([`DEFAULT_CUDA_SWIGLU`]).
/// - a Gated DeltaNet layer's decoding token, from its joined projection to
///   the gated norm, as one kernel (models/src/cuda_delta.rs):
///   `HEARTH_CUDA_DELTA=on|off` ([`DEFAULT_CUDA_DELTA`]).
/// - a sparse MoE block's router (softmax, top k, renormalisation) and its
///   weighted sum of experts, one kernel each (models/src/cuda_moe.rs):
///   `HEARTH_CUDA_MOE=on|off` ([`DEFAULT_CUDA_MOE`]).
/// - a sparse MoE block's routed experts at decode and small prompt sizes,
///   gate/up with the SwiGLU and down, each expert read once for all its
///   tokens
///   (models/src/cuda_experts.rs): `HEARTH_CUDA_EXPERTS=on|off|MIN-MAX`
///   token rows ([`DEFAULT_CUDA_EXPERTS`]).
///
/// Call it on the thread that runs the model: MLX's stream and the kernel
/// handles are per thread.
pub fn enable_cuda_kernels() {
    if DeviceInfo::detect().backend != "cuda" {
        return;
    }
    for d in &MLX_ENV_DEFAULTS {
        let value = std::env::var(d.var).unwrap_or_default();
        tracing::info!(
            var = d.var,
            value = %value,
            cache_size = %std::env::var(d.cache_var).unwrap_or_default(),
            "{} {}",
            d.what,
            if mlx_int(&value) != 0 { "on" } else { "off" }
        );
    }
    enable_cuda_gemv();
    enable_cuda_attn();
    kernel_switch(
        "HEARTH_LEAN_GRAPH",
        "on",
        "lean decode graph",
        || hearth_models::lean::set_plain(false),
        || hearth_models::lean::set_plain(true),
    );
    kernel_switch(
        "HEARTH_FOLD_ROWS",
        DEFAULT_FOLD_ROWS,
        "folded batch products",
        || hearth_models::lean::set_fold_rows(true),
        || hearth_models::lean::set_fold_rows(false),
    );
    kernel_switch(
        "HEARTH_CARRY_INPUTS",
        "on",
        "decode inputs carried on the device",
        || hearth_models::lean::set_carry_inputs(true),
        || hearth_models::lean::set_carry_inputs(false),
    );
    // Each checked per shape kind and type at its first use.
    use hearth_models::{cuda_delta, cuda_moe, cuda_norm, cuda_qk, cuda_swiglu};
    kernel_switch(
        "HEARTH_CUDA_QK",
        DEFAULT_CUDA_QK,
        "q/k/v",
        cuda_qk::enable,
        cuda_qk::disable,
    );
    kernel_switch(
        "HEARTH_CUDA_NORM",
        DEFAULT_CUDA_NORM,
        "add+norm",
        cuda_norm::enable,
        cuda_norm::disable,
    );
    kernel_switch(
        "HEARTH_CUDA_SWIGLU",
        DEFAULT_CUDA_SWIGLU,
        "swiglu",
        cuda_swiglu::enable,
        cuda_swiglu::disable,
    );
    kernel_switch(
        "HEARTH_CUDA_DELTA",
        DEFAULT_CUDA_DELTA,
        "delta step",
        cuda_delta::enable,
        cuda_delta::disable,
    );
    kernel_switch(
        "HEARTH_CUDA_MOE",
        DEFAULT_CUDA_MOE,
        "moe router/combine",
        cuda_moe::enable,
        cuda_moe::disable,
    );
    enable_cuda_experts();
}

/// Token rows whose MoE experts run as Hearth's two kernels unless
/// `HEARTH_CUDA_EXPERTS` (`on`, `off` or `MIN-MAX`) says otherwise
/// (models/src/cuda_experts.rs): every decode size, and prompt passes up to
/// where MLX's grouped GEMM becomes the faster (~540 tokens of the Qwen3.5
/// MoE on an H100, bench/results/h100-2026-12-06.md).
pub const DEFAULT_CUDA_EXPERTS: &str = "1-512";

fn enable_cuda_experts() {
    use hearth_models::cuda_experts;
    let setting =
        std::env::var("HEARTH_CUDA_EXPERTS").unwrap_or_else(|_| DEFAULT_CUDA_EXPERTS.into());
    match cuda_experts::parse_rows(&setting) {
        Ok(Some((min, max))) => {
            tracing::info!(
                min_rows = min,
                max_rows = max,
                "moe experts kernels enabled"
            );
            cuda_experts::enable(min, max);
        }
        Ok(None) => cuda_experts::disable(),
        Err(e) => {
            tracing::warn!(%setting, error = %e, "HEARTH_CUDA_EXPERTS: moe experts kernels off");
            cuda_experts::disable();
        }
    }
}

/// A kernel's `on`/`off` switch: `var`, or `default` when it is unset; an
/// unknown value leaves the kernel off (MLX's ops) with a warning.
fn kernel_switch(var: &str, default: &str, kernel: &str, enable: fn(), disable: fn()) {
    let setting = std::env::var(var).unwrap_or_else(|_| default.into());
    match on_off(&setting) {
        Some(true) => {
            tracing::info!("{kernel} kernel enabled");
            enable();
        }
        Some(false) => disable(),
        None => {
            tracing::warn!(setting, "{var}: want on or off; {kernel} kernel off");
            disable();
        }
    }
}

/// Whether a product of 2+ rows by a dense weight that MLX's matmul runs
/// (cuBLAS: the dense 8B's weights above 32 MiB at 5-16 rows, every weight
/// above 16 rows) multiplies by a view broadcast over the rows unless
/// `HEARTH_FOLD_ROWS` says: yes. MLX builds a `[B, 1, in]` by 2-D product as
/// a transpose, a flatten, the product and an unflatten; with the view it is
/// the product alone, the same single cuBLAS call. At 8 rows the dense 8B's
/// step has 839 graph nodes, 327 of them those three around 109 products
/// (docs/cuda.md, "Rows folded into one product").
pub const DEFAULT_FOLD_ROWS: &str = "on";

/// Whether the residual add + RMSNorm kernel is on unless `HEARTH_CUDA_NORM`
/// says: yes. It removes two of the ~16 kernels a decoder layer runs per
/// step (models/src/cuda_norm.rs); with the q/k kernel below it made the
/// H200's dense decode steps 12-19% shorter at 1-8 rows (the server's step
/// trace; the step is bound by MLX's host time per op, and these kernels
/// cut ops), bench/results/h200-2026-12-02.md.
pub const DEFAULT_CUDA_NORM: &str = "on";

/// Whether the MLP's SwiGLU reads the joined gate/up product in one kernel
/// unless `HEARTH_CUDA_SWIGLU` says: yes. One graph node a layer and step
/// instead of two slices and the SwiGLU (models/src/cuda_swiglu.rs,
/// models/src/lean.rs); measured with the rest of the lean decode graph.
pub const DEFAULT_CUDA_SWIGLU: &str = "on";

/// Whether a DeltaNet layer's decoding token runs as one kernel unless
/// `HEARTH_CUDA_DELTA` says: yes. It replaces about twenty of MLX's ops per
/// layer and step (models/src/cuda_delta.rs); a decode step of the hybrid
/// MoE is bound by MLX's host time per op (docs/cuda.md). With the MoE
/// kernels below it took the H200's one-row MoE step from 5.93 to 3.15 ms
/// in process and one stream from 210 to 356-449 tok/s
/// (bench/results/h200-2026-12-02-s13.md).
pub const DEFAULT_CUDA_DELTA: &str = "on";

/// Whether a sparse MoE block's router and weighted sum run as one kernel
/// each unless `HEARTH_CUDA_MOE` says: yes. They replace about ten of MLX's
/// ops per block and step (models/src/cuda_moe.rs); measured together with
/// the delta step above, not on their own.
pub const DEFAULT_CUDA_MOE: &str = "on";

/// `on` / `off` settings (surrounding blanks ignored); `None` for anything else.
fn on_off(setting: &str) -> Option<bool> {
    match setting.trim() {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// Whether the decode step's q/k norm + RoPE + layout kernel is on unless
/// `HEARTH_CUDA_QK` says: yes. It replaces seven small kernels per layer at
/// two rows and four at one, 0.82 and 0.46 ms of GPU time a dense step
/// (bench/results/h200-2026-12-01-s9.md) and more of the host's time per
/// op; on the H200 it passed its self-check (relative error 5e-3) and cut
/// the in-process time to launch a step by 14-23% at 1-16 rows
/// (bench/results/h200-2026-12-02.md).
pub const DEFAULT_CUDA_QK: &str = "on";

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

/// How a quantized model's weights are held on MLX's CPU backend (`hearth
/// serve --cpu-weights`, `hearth generate --cpu-weights`). On Metal and
/// CUDA they always stay quantized: those backends' quantized kernels are
/// the fast path.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum CpuWeights {
    /// Float32 when the expanded weights take at most a quarter of the
    /// memory available at load, else as stored.
    #[default]
    Auto,
    /// Expanded to float32 at load (8x the memory of 4-bit weights): MLX's
    /// CPU quantized product is scalar, a float32 one runs on BLAS
    /// (docs/mlx-on-linux.md).
    Float32,
    /// As stored (what mlx-lm does).
    Quantized,
}

impl CpuWeights {
    /// The load options for this choice on `device` with `available` bytes
    /// of memory free.
    pub fn load_options(self, device: &DeviceInfo, available: u64) -> hearth_models::LoadOptions {
        use hearth_models::QuantizedWeights;
        let quantized = match (device.kind, self) {
            ("gpu", _) | (_, CpuWeights::Quantized) => QuantizedWeights::Keep,
            (_, CpuWeights::Float32) => QuantizedWeights::Float32,
            (_, CpuWeights::Auto) => QuantizedWeights::Float32UpTo(available / 4),
        };
        hearth_models::LoadOptions { quantized }
    }

    /// [`CpuWeights::load_options`] for this machine now.
    pub fn load_options_here(self) -> hearth_models::LoadOptions {
        let mut system = sysinfo::System::new();
        system.refresh_memory();
        self.load_options(&DeviceInfo::detect(), system.available_memory())
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    #[test]
    fn cuda_graphs_and_cudnn_attention_are_off_unless_the_environment_sets_them() {
        for setting in &super::MLX_ENV_DEFAULTS {
            assert_eq!(setting.value_for(None), Some("0"));
            for set in ["1", "0", "", "yes"] {
                assert_eq!(setting.value_for(Some(OsStr::new(set))), None);
            }
        }
    }

    #[test]
    fn kernel_switches_are_on_or_off_and_nothing_else() {
        assert_eq!(super::on_off(" on"), Some(true));
        assert_eq!(super::on_off("off\n"), Some(false));
        for bad in ["", "1", "yes", "ON"] {
            assert_eq!(super::on_off(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn settings_read_like_mlx_reads_them() {
        for (value, expect) in [
            ("0", 0),
            ("1", 1),
            (" 12x", 12),
            ("+3", 3),
            ("-2", -2),
            ("", 0),
            ("true", 0),
            ("yes", 0),
        ] {
            assert_eq!(super::mlx_int(value), expect, "{value:?}");
        }
    }

    #[test]
    fn the_graph_cache_abort_gets_a_hint() {
        let mlx = "Cache thrashing is happening, please set the environment variable \
                   MLX_CUDA_GRAPH_CACHE_SIZE to a larger value than 400 to fix degraded performance.";
        let hint = super::engine_error_hint(mlx).unwrap();
        assert!(hint.contains("restart") && hint.contains("MLX_USE_CUDA_GRAPHS"));
        assert!(hint.contains("MLX_CUDA_USE_CUDNN_SDPA"));
        assert_eq!(super::engine_error_hint("out of memory"), None);
    }

    /// The two CUDA failures seen when servers shared an 80 GB GPU
    /// (bench/results/h100-2026-12-06-s26.md, run 1), as the engine logged
    /// them: the first points at the GPU's memory, the second says restart.
    #[test]
    fn cuda_out_of_memory_and_a_lost_context_get_hints() {
        let oom = "cudaMallocAsync(&data, size, stream) failed: out of memory at \
                   /work/main/target/release/build/mlx-sys/out/mlx-c/mlx/c/array.cpp:352";
        let hint = super::engine_error_hint(oom).unwrap();
        assert!(hint.contains("--mlx-cache-mb") && hint.contains("other processes"));
        let lost = "cudaMallocAsync(&data, size, stream) failed: an illegal memory access was \
                    encountered at mlx/c/array.cpp:352";
        let hint = super::engine_error_hint(lost).unwrap();
        assert!(hint.contains("restart") && hint.contains("lost"));
        assert_eq!(super::engine_error_hint("the prompt is empty"), None);
        // Only the sticky error marks the device lost for good.
        assert!(super::context_lost(lost));
        assert!(!super::context_lost(oom));
        assert!(!super::context_lost("the prompt is empty"));
        // The out-of-memory error MLX then reports at every wait (seen on an
        // H100 after another process took the memory): unusable, restart.
        let pending =
            "cudaPeekAtLastError() failed: out of memory at mlx-c/mlx/c/transforms.cpp:15";
        assert!(super::device_unusable(pending) && !super::context_lost(pending));
        let hint = super::engine_error_hint(pending).unwrap();
        assert!(
            hint.contains("pending") && hint.contains("restart"),
            "{hint}"
        );
        assert!(super::device_unusable(lost));
        assert!(!super::device_unusable(oom));
    }

    use super::*;

    #[test]
    fn no_cuda_no_free_gpu_memory() {
        // CI has no GPU (and the CPU build never asks the driver).
        if DeviceInfo::detect().backend != "cuda" {
            assert_eq!(cuda_free_memory(), None);
        }
        if !std::path::Path::new("/dev/nvidiactl").exists() {
            assert!(cuda_driver_fn(c"cuMemGetInfo_v2").is_none());
        }
    }

    #[test]
    fn the_process_peak_survives_a_restarted_count() {
        // 16 MiB of f32 made live once (other tests may run beside: the
        // peak only grows, so "at least" holds whatever they do).
        let bytes = 16 << 20;
        let a = mlx_rs::ops::ones::<f32>(&[(bytes / 4) as i32]).expect("ones");
        a.eval().expect("eval");
        assert!(peak_memory().expect("a peak") >= bytes);
        drop(a);
        restart_peak();
        assert!(peak_memory().expect("a peak") >= bytes);
    }

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
    fn default_routes_leave_one_row_and_large_weights_above_four_rows_to_mlx() {
        use hearth_models::cuda_gemv::{pick, Kernel, Route};
        let routes = Route::parse_list(DEFAULT_CUDA_GEMV).unwrap();
        let bf16 = mlx_rs::Dtype::Bfloat16;
        assert_eq!(pick(&routes, 1, 4096, 4096, bf16), None);
        assert_eq!(pick(&routes, 1, 151936, 4096, bf16), None);
        // 2–4 rows: every Qwen3-8B matrix, the joined q/k/v (48 MiB) and the
        // 1.2 GB lm_head included, goes to split4 (automatic split).
        for rows in 2..=4 {
            for n in [4096, 6144, 24576, 151936] {
                assert_eq!(pick(&routes, rows, n, 4096, bf16), Some(Kernel::Split4(0)));
            }
            assert_eq!(
                pick(&routes, rows, 4096, 12288, bf16),
                Some(Kernel::Split4(0))
            );
        }
        // 5–16 rows: tensor cores up to 32 MiB, cuBLAS above.
        assert_eq!(pick(&routes, 5, 4096, 4096, bf16), Some(Kernel::Mma));
        assert_eq!(pick(&routes, 16, 4096, 4096, bf16), Some(Kernel::Mma));
        assert_eq!(pick(&routes, 5, 6144, 4096, bf16), None);
        assert_eq!(pick(&routes, 16, 151936, 4096, bf16), None);
        assert_eq!(pick(&routes, 17, 4096, 4096, bf16), None);
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

    #[test]
    fn cpu_weights_expand_only_on_the_cpu() {
        use hearth_models::QuantizedWeights::*;
        let cpu = DeviceInfo {
            kind: "cpu",
            backend: "cpu",
        };
        let gpu = DeviceInfo {
            kind: "gpu",
            backend: "cuda",
        };
        let q = |w: CpuWeights, d: &DeviceInfo| w.load_options(d, 8 << 30).quantized;
        assert_eq!(q(CpuWeights::Auto, &cpu), Float32UpTo(2 << 30));
        assert_eq!(q(CpuWeights::Float32, &cpu), Float32);
        assert_eq!(q(CpuWeights::Quantized, &cpu), Keep);
        for w in [CpuWeights::Auto, CpuWeights::Float32, CpuWeights::Quantized] {
            assert_eq!(q(w, &gpu), Keep);
        }
    }
}
