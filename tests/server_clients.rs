//! The official OpenAI clients against a live `hearth serve`: the `openai`
//! Python package (from .venv) and the `openai` npm package (from
//! tests/clients/node_modules), on the real default model and on a dummy
//! Qwen3. The checks themselves are in tests/clients/openai_python.py and
//! tests/clients/openai_js.mjs; both are installed by scripts/setup.sh.

mod server_support;

use std::{path::Path, process::Command};

use server_support::*;

fn run_client(program: &Path, script: &str, server: &TestServer, kind: &str, model_id: &str) {
    let clients = repo_root().join("tests/clients");
    let output = Command::new(program)
        .current_dir(&clients)
        .arg(clients.join(script))
        .args(["--base-url", &server.url("/v1"), "--kind", kind])
        .args(["--model-id", model_id])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{script} ({kind}):\n{stdout}");
    assert!(
        output.status.success(),
        "{script} against the {kind} model failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log_text()
    );
}

fn node() -> std::path::PathBuf {
    let modules = repo_root().join("tests/clients/node_modules/openai");
    assert!(
        modules.exists(),
        "missing {} — run scripts/setup.sh (npm ci --prefix tests/clients)",
        modules.display()
    );
    std::path::PathBuf::from("node")
}

fn run_both(server: &TestServer, kind: &str, model_id: &str) {
    run_client(&python(), "openai_python.py", server, kind, model_id);
    run_client(&node(), "openai_js.mjs", server, kind, model_id);
}

#[test]
fn official_clients_on_the_default_model() {
    let server = TestServer::start(&smollm2(), &[]);
    run_both(&server, "real", "SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn official_clients_on_a_dummy_qwen3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dummy_qwen3(dir.path());
    let server = TestServer::start(&model, &[]);
    run_both(&server, "dummy", "qwen3-tiny");
}
