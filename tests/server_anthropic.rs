//! Anthropic's Messages API through the official `anthropic` Python client
//! (tests/clients/anthropic_python.py) against `hearth serve`: the real
//! default model (with an API key, sent as `x-api-key` by the client) and a
//! dummy Qwen3 (thinking).

mod server_support;

use std::process::Command;

use server_support::*;

fn run(server: &TestServer, kind: &str, extra: &[&str]) {
    let clients = repo_root().join("tests/clients");
    let output = Command::new(python())
        .arg(clients.join("anthropic_python.py"))
        .args(["--base-url", &server.base, "--kind", kind])
        .args(extra)
        .output()
        .expect("run anthropic_python.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "anthropic_python.py ({kind}) failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        server.log_text()
    );
}

#[test]
fn anthropic_client_on_the_default_model_with_a_key() {
    let server = TestServer::start(&smollm2(), &["--api-key", "sk-test"]);
    run(&server, "real", &["--api-key", "sk-test"]);
}

#[test]
fn anthropic_client_on_a_dummy_qwen3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dummy_qwen3(dir.path());
    let server = TestServer::start(&model, &[]);
    run(&server, "dummy", &[]);
}
