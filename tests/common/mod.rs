//! Shared helpers of the integration tests: where the fixtures and the
//! reference Python (mlx-lm) live, and how to call it.
//!
//! Fixtures and the venv are made by `scripts/setup.sh`; a test that cannot
//! find them fails with that instruction instead of skipping.

#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    process::Command,
};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixtures() -> PathBuf {
    std::env::var_os("HEARTH_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".hearth/fixtures"))
}

pub fn fixture(name: &str) -> PathBuf {
    let path = fixtures().join(name);
    assert!(
        path.exists(),
        "missing fixture {} — run scripts/setup.sh",
        path.display()
    );
    path
}

/// Writes a random-weight checkpoint of `arch` at the dummy-model tool's
/// `shape` (f32, the Qwen3 tokenizer fixture) into `dir`.
pub fn write_dummy(dir: &Path, arch: &str, shape: &str, seed: u64) {
    use hearth::tools::dummy::{write_dummy_model, DummyShape, DummySpec};
    let spec = DummySpec {
        arch: arch.into(),
        shape: DummyShape::parse(shape).expect("dummy-model shape"),
        tokenizer: fixture("qwen3-tokenizer/tokenizer.json"),
        dtype: mlx_rs::Dtype::Float32,
        seed,
    };
    write_dummy_model(&spec, dir).expect("dummy model");
}

pub fn python() -> PathBuf {
    let py = std::env::var_os("HEARTH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/python"));
    assert!(
        py.exists(),
        "missing {} (the mlx-lm reference venv) — run scripts/setup.sh",
        py.display()
    );
    py
}

/// What mlx-lm produced for one prompt.
#[derive(Debug, serde::Deserialize)]
pub struct Reference {
    pub prompt_ids: Vec<u32>,
    pub tokens: Vec<u32>,
    pub text: String,
}

/// Runs tests/parity/mlx_lm_ref.py.
pub fn mlx_lm_reference(
    model: &Path,
    prompt_ids: Option<&[u32]>,
    prompt: Option<&str>,
    max_tokens: usize,
    logits_out: Option<&Path>,
) -> Reference {
    let mut cmd = Command::new(python());
    cmd.arg(repo_root().join("tests/parity/mlx_lm_ref.py"))
        .arg("--model")
        .arg(model)
        .arg("--max-tokens")
        .arg(max_tokens.to_string());
    if let Some(ids) = prompt_ids {
        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
        cmd.arg("--prompt-ids").arg(ids.join(","));
    }
    if let Some(p) = prompt {
        cmd.arg("--prompt").arg(p);
    }
    if let Some(out) = logits_out {
        cmd.arg("--logits-out").arg(out);
    }
    let output = cmd.output().expect("run mlx_lm_ref.py");
    assert!(
        output.status.success(),
        "mlx_lm_ref.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("reference JSON")
}

/// Runs a Python module from the venv (e.g. `mlx_lm.convert`).
pub fn run_python(args: &[&str]) {
    let output = Command::new(python())
        .args(args)
        .output()
        .expect("run python");
    assert!(
        output.status.success(),
        "python {:?} failed: {}",
        args,
        String::from_utf8_lossy(&output.stderr)
    );
}
