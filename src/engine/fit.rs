//! Does a model fit in memory? Checked before loading, so a model that is too
//! big is refused with both numbers instead of swapping the machine to a
//! crawl (or being killed half-way through loading).
//!
//! The estimate is the weight files' size (MLX holds the weights as stored:
//! safetensors and GGUF quantizations load at their file size) plus 20% for
//! activations, the KV cache of a first request and allocator slack; it is
//! compared with the memory the OS reports as available (sysinfo). On a Mac
//! this is unified memory, shared with the GPU. The Models page of the web
//! UI uses the same rule ([`fits`]).

use std::{fmt, path::Path};

/// Environment variable that skips the check (load anyway).
pub const IGNORE_ENV: &str = "HEARTH_IGNORE_MEMORY_CHECK";

/// Whether a model of `size` bytes fits in `available` bytes.
pub fn fits(size: u64, available: u64) -> bool {
    size.saturating_add(size / 5) <= available
}

/// A model refused at load because it does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    pub model: String,
    pub weight_bytes: u64,
    pub needed_bytes: u64,
    pub available_bytes: u64,
    pub total_bytes: u64,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        write!(
            f,
            "{} does not fit in memory: it needs about {:.1} GiB ({:.1} GiB of weights + 20% \
             working memory) but only {:.1} GiB is available ({:.1} GiB total). Close other \
             applications, choose a smaller quantization, or set {IGNORE_ENV}=1 to load anyway",
            self.model,
            gib(self.needed_bytes),
            gib(self.weight_bytes),
            gib(self.available_bytes),
            gib(self.total_bytes),
        )
    }
}

impl std::error::Error for TooLarge {}

/// Bytes of the weight files of a model folder or GGUF file.
pub fn weight_file_bytes(path: &Path) -> u64 {
    if path.is_file() {
        return std::fs::metadata(path).map_or(0, |m| m.len());
    }
    std::fs::read_dir(path)
        .map(|dir| {
            dir.flatten()
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.ends_with(".safetensors") || name.ends_with(".gguf")
                })
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Checks `path` against `available` bytes of memory (`total` for the message).
pub fn check_with(path: &Path, available: u64, total: u64) -> Result<(), TooLarge> {
    let weight_bytes = weight_file_bytes(path);
    if fits(weight_bytes, available) {
        return Ok(());
    }
    Err(TooLarge {
        model: path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        weight_bytes,
        needed_bytes: weight_bytes.saturating_add(weight_bytes / 5),
        available_bytes: available,
        total_bytes: total,
    })
}

/// Checks `path` against the memory available now, unless
/// `HEARTH_IGNORE_MEMORY_CHECK` is set to a non-empty value other than `0`.
pub fn check(path: &Path) -> Result<(), TooLarge> {
    check_replacing(path, 0)
}

/// Like [`check`], counting `freed` bytes (the weights of a model that is
/// unloaded first) as available.
pub fn check_replacing(path: &Path, freed: u64) -> Result<(), TooLarge> {
    if std::env::var(IGNORE_ENV).is_ok_and(|v| !v.is_empty() && v != "0") {
        return Ok(());
    }
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    check_with(
        path,
        system.available_memory().saturating_add(freed),
        system.total_memory(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_leaves_a_fifth_for_working_memory() {
        assert!(fits(100, 120));
        assert!(!fits(100, 119));
        assert!(fits(0, 0));
    }

    #[test]
    fn a_model_larger_than_memory_is_refused_with_both_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("big-model");
        std::fs::create_dir(&model).unwrap();
        std::fs::write(model.join("model.safetensors"), vec![0u8; 3 << 20]).unwrap();
        std::fs::write(model.join("config.json"), vec![b' '; 10 << 20]).unwrap();
        // 3 MiB of weights (the config is not counted) need 3.6 MiB.
        assert!(check_with(&model, 4 << 20, 8 << 20).is_ok());
        let err = check_with(&model, 3 << 20, 8 << 20).unwrap_err();
        assert_eq!(err.weight_bytes, 3 << 20);
        assert_eq!(err.available_bytes, 3 << 20);
        let text = err.to_string();
        assert!(text.contains("big-model does not fit in memory"), "{text}");
        assert!(text.contains(IGNORE_ENV), "{text}");
    }
}
