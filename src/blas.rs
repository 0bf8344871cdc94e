//! Which BLAS MLX's CPU matrix products run on (Linux).
//!
//! The PyPI `mlx-cpu` wheel that Hearth links on Linux bundles the reference
//! BLAS (`mlx_cpu.libs/libblas-*.so`): a float32 product of 256 x 576 by
//! 576 x 1536 takes ~180 ms there against ~4.7 ms on OpenBLAS, one thread
//! (docs/mlx-on-linux.md). libmlx resolves `cblas_sgemm` when the process
//! starts, so the only way to a better one is to load it first: when that
//! symbol comes from the bundled library and an OpenBLAS is installed,
//! [`prefer_system_blas`] runs the same program again with OpenBLAS in
//! `LD_PRELOAD`, before any thread exists. Nothing changes where MLX was
//! built against another BLAS, on the CUDA build (whose products run on the
//! GPU), or when `HEARTH_BLAS=bundled`.

/// `HEARTH_BLAS=bundled` keeps the wheel's BLAS; a path names the library to
/// preload instead of the first of [`OPENBLAS_CANDIDATES`] that exists.
pub const BLAS_ENV: &str = "HEARTH_BLAS";

/// Set (to the process id) on the second start, so it never loops.
const REEXEC_MARK: &str = "HEARTH_BLAS_REEXEC";

/// Where Debian/Ubuntu (`libopenblas0-pthread`, installed by
/// scripts/setup.sh), Fedora and Arch put OpenBLAS.
pub const OPENBLAS_CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
];

/// The library that provides `cblas_sgemm` to this process, if any.
#[cfg(not(target_os = "linux"))]
pub fn sgemm_provider() -> Option<std::path::PathBuf> {
    None
}

/// The library that provides `cblas_sgemm` to this process, if any.
#[cfg(target_os = "linux")]
pub fn sgemm_provider() -> Option<std::path::PathBuf> {
    use std::ffi::CStr;
    // SAFETY: dlsym/dladdr only read the loader's tables; the name is a
    // NUL-terminated literal and `info` is ours.
    unsafe {
        let sym = libc::dlsym(libc::RTLD_DEFAULT, c"cblas_sgemm".as_ptr());
        if sym.is_null() {
            return None;
        }
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(sym, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let name = CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned();
        Some(std::fs::canonicalize(&name).unwrap_or_else(|_| name.into()))
    }
}

/// True for the reference BLAS bundled with the `mlx-cpu` wheel.
pub fn is_bundled_reference(provider: &std::path::Path) -> bool {
    let path = provider.to_string_lossy();
    path.contains("mlx_cpu.libs") && path.contains("libblas")
}

/// The library to preload, from `HEARTH_BLAS` (`None` for `bundled`) or the
/// candidates that `exists`.
pub fn choose_preload(
    setting: Option<&str>,
    exists: impl Fn(&str) -> bool,
) -> Option<std::path::PathBuf> {
    match setting.map(str::trim) {
        Some("bundled") => None,
        Some(path) if !path.is_empty() && path != "system" => {
            exists(path).then(|| std::path::PathBuf::from(path))
        }
        _ => OPENBLAS_CANDIDATES
            .iter()
            .find(|p| exists(p))
            .map(std::path::PathBuf::from),
    }
}

/// OpenBLAS threads when the environment names none: half the cores (at
/// least one). MLX's stream thread, the HTTP server and the tokenizer run
/// beside it; on our 2-core machines one thread served best.
pub fn default_threads(cores: usize) -> usize {
    (cores / 2).max(1)
}

/// Starts this program again with OpenBLAS preloaded when MLX would
/// otherwise multiply on the bundled reference BLAS (see the module doc).
/// Call first thing in `main`. Returns when nothing needs doing or the
/// second start failed (then the bundled BLAS stays, with a warning).
#[cfg(target_os = "linux")]
pub fn prefer_system_blas() {
    use std::os::unix::process::CommandExt;
    let pid = std::process::id().to_string();
    if std::env::var_os(REEXEC_MARK).is_some_and(|v| v == pid.as_str()) {
        return;
    }
    let Some(provider) = sgemm_provider() else {
        return;
    };
    if !is_bundled_reference(&provider) {
        return;
    }
    let setting = std::env::var(BLAS_ENV).ok();
    let Some(lib) = choose_preload(setting.as_deref(), |p| std::path::Path::new(p).exists()) else {
        return;
    };
    let mut preload = lib.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.args(std::env::args_os().skip(1))
        .env("LD_PRELOAD", preload)
        .env(REEXEC_MARK, &pid);
    if let Some(arg0) = std::env::args_os().next() {
        cmd.arg0(arg0);
    }
    if std::env::var_os("OPENBLAS_NUM_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        cmd.env("OPENBLAS_NUM_THREADS", default_threads(cores).to_string());
    }
    // exec only returns on failure.
    let err = cmd.exec();
    eprintln!(
        "warning: could not start again with {} preloaded ({err}); MLX keeps the bundled reference BLAS",
        lib.display()
    );
}

/// Not needed off Linux: macOS MLX uses Accelerate.
#[cfg(not(target_os = "linux"))]
pub fn prefer_system_blas() {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn bundled_reference_is_recognised_by_path() {
        assert!(is_bundled_reference(Path::new(
            "/x/.venv/lib/python3.11/site-packages/mlx_cpu.libs/libblas-bd8a282c.so.3.10.0"
        )));
        assert!(!is_bundled_reference(Path::new(
            "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so"
        )));
        assert!(!is_bundled_reference(Path::new(
            "/x/site-packages/mlx_cpu.libs/liblapack-86b2c207.so.3"
        )));
    }

    #[test]
    fn preload_follows_the_setting() {
        let only = |want: &'static str| move |p: &str| p == want;
        let debian = OPENBLAS_CANDIDATES[0];
        assert_eq!(choose_preload(None, only(debian)), Some(debian.into()));
        assert_eq!(
            choose_preload(Some("system"), only("/usr/lib64/libopenblas.so.0")),
            Some("/usr/lib64/libopenblas.so.0".into())
        );
        assert_eq!(choose_preload(Some("bundled"), only(debian)), None);
        assert_eq!(
            choose_preload(Some("/opt/blis/libblis.so"), only("/opt/blis/libblis.so")),
            Some("/opt/blis/libblis.so".into())
        );
        // A named library that is not there: keep the bundled one.
        assert_eq!(choose_preload(Some("/nope.so"), only(debian)), None);
        assert_eq!(choose_preload(None, |_| false), None);
    }

    #[test]
    fn threads_default_to_half_the_cores() {
        assert_eq!(default_threads(1), 1);
        assert_eq!(default_threads(2), 1);
        assert_eq!(default_threads(16), 8);
    }
}
