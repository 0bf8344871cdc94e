//! `hearth serve` on MLX's CPU backend: the real SmolLM2 Q4_1 weights
//! expanded to float32 at load (`--cpu-weights`, default `auto`), and MLX's
//! products on OpenBLAS instead of the wheel's reference BLAS (the server
//! starts itself again with OpenBLAS preloaded, src/blas.rs). Checked on the
//! running process: its weight bytes in `/metrics`, the libraries mapped in
//! `/proc/PID/maps`, and the greedy answer, which must be the same text
//! either way.

mod server_support;

use std::path::Path;

use serde_json::json;
use server_support::*;

struct Seen {
    weight_bytes: f64,
    maps: String,
    answer: String,
}

async fn run(extra: &[&str], env: &[(&str, &Path)]) -> Seen {
    let model = smollm2();
    let server = TestServer::start_with_env(&model, extra, env);
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", server.pid())).expect("maps");
    let metrics = get_text(&server, "/metrics").await;
    let (status, body) = post_json(
        &server,
        "/v1/chat/completions",
        &json!({
            "model": "default",
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 24,
            "temperature": 0,
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    Seen {
        weight_bytes: metric(&metrics, "hearth_model_weight_bytes"),
        maps,
        answer: body["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
            .to_string(),
    }
}

#[tokio::test]
async fn quantized_weights_expand_to_float32_on_openblas_with_the_same_answer() {
    let file_bytes = std::fs::metadata(smollm2()).expect("fixture").len() as f64;

    let fast = run(&[], &[]).await;
    let stored = run(
        &["--cpu-weights", "quantized"],
        &[("HEARTH_BLAS", Path::new("bundled"))],
    )
    .await;

    // 4-bit weights (+ float16 scales and biases) become float32: ~5.5x
    // the file, against about the file's size as stored.
    assert!(
        fast.weight_bytes > 4.0 * file_bytes,
        "expanded: {} B of weights from a {file_bytes} B file",
        fast.weight_bytes
    );
    assert!(
        stored.weight_bytes < 1.2 * file_bytes,
        "as stored: {} B of weights from a {file_bytes} B file",
        stored.weight_bytes
    );
    let openblas_installed = hearth::blas::OPENBLAS_CANDIDATES
        .iter()
        .any(|p| Path::new(p).exists());
    if openblas_installed {
        assert!(
            fast.maps.contains("libopenblas"),
            "OpenBLAS is installed but not mapped into the server"
        );
    }
    assert!(
        !stored.maps.contains("libopenblas"),
        "HEARTH_BLAS=bundled still loaded OpenBLAS"
    );
    assert!(
        fast.answer.contains("Paris"),
        "float32 weights answered {:?}",
        fast.answer
    );
    assert_eq!(fast.answer, stored.answer);

    // Asked for float32 explicitly, on the bundled BLAS: still expanded.
    let forced = run(
        &["--cpu-weights", "float32"],
        &[("HEARTH_BLAS", Path::new("bundled"))],
    )
    .await;
    assert_eq!(forced.weight_bytes, fast.weight_bytes);
    assert!(!forced.maps.contains("libopenblas"));
    assert_eq!(forced.answer, fast.answer);
}
