//! A real coding agent against a LAN server: Aider (PyPI `aider-chat`, in
//! `.venv-aider` from scripts/setup.sh) runs non-interactively on a one-file
//! repository, talking to `hearth serve --api-key KEY` bound to the address
//! of a network namespace made by the test. Aider runs in a second namespace
//! whose only link is the veth to the server's, so it works with no route to
//! anything else (its update check, analytics and model-metadata fetch are
//! off, and would fail at once if they were tried).
//!
//! What is asserted is the protocol round trip, not the edit (the model is
//! the tiny SmolLM2): Aider exits 0 after streaming a reply; the server
//! logged streamed chat requests and answered nothing but 2xx; the key is
//! enforced, so those requests carried it.

mod server_support;

use std::{path::PathBuf, process::Output};

use server_support::{netns::NetNs, *};

const KEY: &str = "aider-lan-key";

fn aider() -> PathBuf {
    let path = std::env::var_os("HEARTH_AIDER")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv-aider/bin/aider"));
    assert!(
        path.exists(),
        "missing {} (PyPI aider-chat, scripts/requirements-aider.txt) — run scripts/setup.sh",
        path.display()
    );
    path
}

/// `text` without ANSI colour sequences (the server's log is coloured).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `curl` from the client namespace: (HTTP status, body).
fn curl(ns: &NetNs, url: &str, key: Option<&str>) -> (u16, String) {
    let mut command = ns.client_command("curl");
    command.args(["-s", "-w", "\n%{http_code}", "--max-time", "30"]);
    if let Some(key) = key {
        command.args(["-H", &format!("Authorization: Bearer {key}")]);
    }
    let out = command.arg(url).output().expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (status.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn aider_edits_a_tiny_repo_over_the_lan() {
    if let Err(why) = netns::available() {
        eprintln!("SKIPPED: no network namespace for the Aider LAN test: {why}");
        return;
    }
    let aider = aider();
    let ns = NetNs::create_with_client().unwrap_or_else(|e| panic!("cannot make a test LAN: {e}"));
    let server = TestServer::start_in_netns(&ns, &smollm2(), &["--api-key", KEY]);
    let base = format!("http://{}:{}", ns.inside_ip, server.addr.port());

    let repo = tempfile::tempdir().expect("tempdir");
    let home = tempfile::tempdir().expect("tempdir");
    let file = repo.path().join("greet.py");
    std::fs::write(&file, "def greet(name):\n    return \"Hello \" + name\n").expect("write");
    // Short replies (the point is the protocol, and CPU time is short); the
    // whole-file edit format and no repo map keep the prompt small.
    let settings = repo.path().join("model-settings.yml");
    std::fs::write(
        &settings,
        "- name: openai/default\n  edit_format: whole\n  use_repo_map: false\n  \
         extra_params:\n    max_tokens: 48\n",
    )
    .expect("write");
    let metadata = repo.path().join("model-metadata.json");
    std::fs::write(
        &metadata,
        r#"{"openai/default": {"max_input_tokens": 8192, "max_output_tokens": 48,
            "max_tokens": 48, "input_cost_per_token": 0, "output_cost_per_token": 0,
            "litellm_provider": "openai", "mode": "chat"}}"#,
    )
    .expect("write");
    let history = repo.path().join("llm-history.txt");

    let Output {
        status,
        stdout,
        stderr,
    } = ns
        .client_command("timeout")
        .arg("900")
        .arg(&aider)
        .args([
            "--yes-always",
            "--no-git",
            "--no-analytics",
            "--no-check-update",
            "--no-show-release-notes",
            "--no-show-model-warnings",
            "--no-pretty",
            "--no-fancy-input",
            "--stream",
            "--map-tokens",
            "0",
            "--model",
            "openai/default",
            "--openai-api-key",
            KEY,
        ])
        .arg("--openai-api-base")
        .arg(format!("{base}/v1"))
        .arg("--model-settings-file")
        .arg(&settings)
        .arg("--model-metadata-file")
        .arg(&metadata)
        .arg("--llm-history-file")
        .arg(&history)
        .args(["--message", "Add a docstring to greet."])
        .arg(&file)
        .current_dir(repo.path())
        .env("HOME", home.path())
        // litellm's price list from its package, not the network.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_API_BASE")
        .output()
        .expect("run aider");
    let stdout = String::from_utf8_lossy(&stdout);
    let stderr = String::from_utf8_lossy(&stderr);
    let log = strip_ansi(&server.log_text());
    assert!(
        status.success(),
        "aider failed ({status:?})\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{log}"
    );
    for error in [
        "APIConnectionError",
        "AuthenticationError",
        "NotFoundError",
        "BadRequestError",
    ] {
        assert!(!stdout.contains(error), "aider reported {error}:\n{stdout}");
    }

    // The server answered streamed chat requests ...
    let done: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("request done") && l.contains("endpoint=\"chat\""))
        .collect();
    assert!(
        !done.is_empty(),
        "no chat request in the server log:\n{log}"
    );
    assert!(
        done.iter().all(|l| l.contains("stream=true")),
        "aider streams: {done:#?}"
    );
    // ... whose reply Aider received (its own record of what came back).
    let history = std::fs::read_to_string(&history).expect("aider's LLM history");
    let reply = history
        .split("LLM RESPONSE")
        .nth(1)
        .unwrap_or_else(|| panic!("no LLM RESPONSE in aider's history:\n{history}"));
    assert!(
        reply.lines().any(|l| l
            .strip_prefix("ASSISTANT ")
            .is_some_and(|t| !t.trim().is_empty())),
        "empty reply in aider's history:\n{reply}"
    );

    // Metered: every response so far was a 2xx (a request without the key
    // would have been a 401), and the requests were counted.
    let (status, metrics) = curl(&ns, &format!("{base}/metrics"), Some(KEY));
    assert_eq!(status, 200, "{metrics}");
    assert!(metric(&metrics, "hearth_requests_total") >= done.len() as f64);
    assert_eq!(
        metric(&metrics, "hearth_http_responses_total{class=\"4xx\"}"),
        0.0
    );
    assert!(metric(&metrics, "hearth_http_responses_total{class=\"2xx\"}") >= 1.0);
    // The key is enforced on this server.
    let (status, body) = curl(&ns, &format!("{base}/v1/models"), None);
    assert_eq!(status, 401, "{body}");
}
