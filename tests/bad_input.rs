//! Broken model files give clear errors that name the file and the problem,
//! through the library and through the CLI, never a panic.

mod common;

use std::{path::Path, process::Command};

use common::{fixture, write_dummy};

fn tiny(dir: &Path) {
    write_dummy(dir, "qwen3", "tiny", 1);
}

fn load_error(path: &Path) -> String {
    match hearth_models::load(path) {
        Ok(_) => panic!("{} loaded but should not", path.display()),
        Err(e) => e.to_string(),
    }
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
}

#[test]
fn missing_and_malformed_folders() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    assert!(load_error(&missing).contains("nope"));

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = load_error(&empty);
    assert!(e.contains("config.json"), "{e}");

    let bad_json = dir.path().join("bad");
    tiny(&bad_json);
    std::fs::write(bad_json.join("config.json"), "{ not json").unwrap();
    let e = load_error(&bad_json);
    assert!(
        e.contains("config.json") && e.contains("not valid JSON"),
        "{e}"
    );
}

#[test]
fn unknown_architecture_is_named() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    edit_config(dir.path(), |v| v["model_type"] = "mamba2".into());
    let e = load_error(dir.path());
    assert!(e.contains("unsupported architecture `mamba2`"), "{e}");
    assert!(e.contains("qwen3"), "lists the supported ones: {e}");
}

#[test]
fn corrupt_and_truncated_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    let file = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let e = load_error(dir.path());
    assert!(e.contains("model.safetensors"), "{e}");

    std::fs::write(&file, b"garbage").unwrap();
    let e = load_error(dir.path());
    assert!(e.contains("model.safetensors"), "{e}");
}

#[test]
fn config_that_does_not_match_the_weights() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    edit_config(dir.path(), |v| v["num_hidden_layers"] = 3.into());
    let e = load_error(dir.path());
    assert!(
        e.contains("model.layers.2"),
        "names the missing tensor: {e}"
    );

    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    edit_config(dir.path(), |v| v["num_hidden_layers"] = 1.into());
    let e = load_error(dir.path());
    assert!(e.contains("not used"), "reports unused tensors: {e}");
}

#[test]
fn quantization_that_does_not_match_the_tensors() {
    let gguf = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("m");
    let status = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["convert", "--model"])
        .arg(&gguf)
        .arg("--out")
        .arg(&folder)
        .status()
        .unwrap();
    assert!(status.success());
    edit_config(&folder, |v| {
        v["quantization"]["bits"] = 8.into();
        v["quantization_config"]["bits"] = 8.into();
    });
    let e = load_error(&folder);
    assert!(
        e.contains("config says 8-bit") && e.contains("imply 4-bit"),
        "{e}"
    );
    assert!(e.contains(".weight"), "names the tensor: {e}");
}

#[test]
fn corrupt_gguf_is_reported_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    let bytes = std::fs::read(&gguf).unwrap();
    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..4096]).unwrap();
    let e = load_error(&truncated);
    assert!(e.contains("truncated.gguf"), "{e}");

    let not_gguf = dir.path().join("text.gguf");
    std::fs::write(&not_gguf, b"hello world, not a model").unwrap();
    let e = load_error(&not_gguf);
    assert!(e.contains("text.gguf"), "{e}");
}

#[test]
fn cli_reports_errors_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["generate", "--prompt", "hi", "--model"])
        .arg(dir.path().join("missing-model"))
        .env("HEARTH_HOME", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("missing-model"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A model folder whose weights (a sparse file: no disk used) are twice the
/// machine's memory.
fn larger_than_memory(dir: &Path) -> std::path::PathBuf {
    let model = dir.join("huge-model");
    std::fs::create_dir_all(&model).unwrap();
    tiny(&model);
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    let file = std::fs::File::create(model.join("model-extra.safetensors")).unwrap();
    file.set_len(system.total_memory() * 2).unwrap();
    model
}

#[test]
fn a_model_larger_than_memory_is_refused_before_loading() {
    let dir = tempfile::tempdir().unwrap();
    let model = larger_than_memory(dir.path());
    for args in [
        &["generate", "--prompt", "hi", "--model"][..],
        &["serve", "--port", "0", "--model"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(args)
            .arg(&model)
            .env("HEARTH_HOME", dir.path())
            .env_remove("HEARTH_IGNORE_MEMORY_CHECK")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("huge-model does not fit in memory"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("GiB is available"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // The override skips the check: loading then fails on the bogus file
    // itself, which proves the check was what stopped it before.
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["generate", "--prompt", "hi", "--model"])
        .arg(&model)
        .env("HEARTH_HOME", dir.path())
        .env("HEARTH_IGNORE_MEMORY_CHECK", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!stderr.contains("does not fit in memory"), "{stderr}");
    assert!(stderr.contains("model-extra.safetensors"), "{stderr}");
}
