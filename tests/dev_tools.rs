//! `hearth dev step-ops` on a real model file: the primitive counts it
//! prints are what docs/cuda.md reasons with, so the table must add up and
//! `--prefill` must count the prompt's pass, not the decoding step.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::{fixture, write_dummy};

/// (header line, primitive → count) of one `step-ops` run.
fn step_ops(args: &[&str]) -> (String, BTreeMap<String, usize>) {
    let model = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["dev", "step-ops", "--model"])
        .arg(&model)
        .args(args)
        .output()
        .expect("run hearth");
    assert!(
        out.status.success(),
        "step-ops {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let header = text.lines().next().unwrap_or_default().to_string();
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if let [name, n] = cells.as_slice() {
            if let Ok(n) = n.parse::<usize>() {
                counts.insert(name.to_string(), n);
            }
        }
    }
    (header, counts)
}

/// The total the header states ("N primitives in ...").
fn stated_total(header: &str) -> usize {
    let (_, rest) = header.split_once(": ").expect("header has a colon");
    rest.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no total in {header:?}"))
}

#[test]
fn step_ops_counts_a_prompt_pass_and_a_decoding_step() {
    let (short_h, short) = step_ops(&["--prefill", "--prompt-tokens", "8"]);
    let (long_h, long) = step_ops(&["--prefill", "--prompt-tokens", "32"]);
    let (step_h, step) = step_ops(&["--prompt-tokens", "8"]);

    assert!(
        short_h.contains("the pass over a 8-token prompt (30 layers)"),
        "{short_h}"
    );
    assert!(
        long_h.contains("the pass over a 32-token prompt"),
        "{long_h}"
    );
    assert!(step_h.contains("one decoding step (30 layers)"), "{step_h}");
    for (h, c) in [(&short_h, &short), (&long_h, &long), (&step_h, &step)] {
        assert_eq!(c.values().sum::<usize>(), stated_total(h), "{h}: {c:?}");
        // Every layer multiplies by its weights at least for q/k/v, o and the MLP.
        let products: usize = c
            .iter()
            .filter(|(name, _)| name.contains("Matmul"))
            .map(|(_, n)| n)
            .sum();
        assert!(products >= 30 * 4, "{h}: {products} products in {c:?}");
    }
    // One graph for any prompt length (the ops do not depend on it) ...
    assert_eq!(short, long);
    // ... and it is not the decoding step's: --prefill counts the pass.
    assert_ne!(short, step);
}

#[test]
fn step_ops_on_a_missing_model_fails_with_its_path() {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "dev",
            "step-ops",
            "--prefill",
            "--model",
            "/nonexistent/model",
        ])
        .output()
        .expect("run hearth");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/model"), "{err}");
}

/// `hearth dev prefill-bench` with `args` on the SmolLM2 GGUF: (success,
/// stdout, stderr).
fn prefill_bench(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["dev", "prefill-bench", "--model"])
        .arg(fixture("SmolLM2-135M-Instruct.Q4_1.gguf"))
        .args(args)
        .output()
        .expect("run hearth");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8");
    (out.status.success(), text(out.stdout), text(out.stderr))
}

/// The three passes are timed and reported for the setting in force, each
/// with a rate that matches its time and the working memory it measured;
/// `--experts` (the MoE kernels of MLX's CUDA backend) is refused by name on
/// a CPU.
#[test]
fn prefill_bench_reports_three_passes_and_refuses_experts_off_cuda() {
    let (ok, out, err) = prefill_bench(&["--prompts", "2", "--tokens", "8", "--rounds", "2"]);
    assert!(ok, "prefill-bench failed: {err}");
    assert!(
        out.contains("2 prompts of 8 tokens, p50 of 2 rounds"),
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with("| in force |"))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    let passes: Vec<&str> = rows.iter().map(|r| r[1]).collect();
    assert_eq!(
        passes,
        [
            "a pass per chunk",
            "one batched pass",
            "one chunk of all the tokens"
        ],
        "{out}"
    );
    for r in &rows {
        let ms: f64 = r[2].parse().expect("ms");
        let rate: f64 = r[3].parse().expect("tokens/s");
        assert!(ms > 0.0, "{out}");
        // 16 prompt tokens a round (rounded in the table).
        assert!((rate * ms / 1e3 - 16.0).abs() < 1.6, "{r:?}");
        assert_eq!(r[5], "1.000x", "one setting: its own first: {out}");
        // Activations and logits come and go in every pass.
        let working: f64 = r[6].parse().expect("working MiB");
        assert!(working > 0.0, "{out}");
    }
    assert_eq!(rows[0][4], "1.00x", "{out}");

    let (ok, _, err) = prefill_bench(&["--prompts", "1", "--tokens", "4", "--experts", "1-16"]);
    assert!(!ok);
    assert!(err.contains("--experts") && err.contains("CUDA"), "{err}");
}

/// Runs `hearth dev decode-bench` with `args` on the dummy-model tool's
/// `tiny` Qwen3 (f32, seed `seed`); the graph nodes of each (variant, rows)
/// and the whole table.
fn decode_bench_nodes(seed: u64, args: &[&str]) -> (BTreeMap<(String, usize), usize>, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    write_dummy(dir.path(), "qwen3", "tiny", seed);
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["dev", "decode-bench", "--model"])
        .arg(dir.path())
        .args(["--rounds", "1", "--prompt-tokens", "8"])
        .args(args)
        .output()
        .expect("run hearth");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        out.status.success(),
        "decode-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut nodes = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| in force, ")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let rows: usize = cells[1].parse().expect("rows");
        let n: usize = cells[7].parse().expect("graph nodes");
        let variant = cells[0].trim_start_matches("in force, ").to_string();
        nodes.insert((variant, rows), n);
    }
    (nodes, text)
}

/// `hearth dev decode-bench --graph fold,nofold` on a dense checkpoint: both
/// graphs take turns, a one-row step is the same graph in both, and a
/// two-row step folded over its rows has three nodes fewer per product by a
/// dense weight (transpose, flatten and unflatten: four per layer here, the
/// tied lm_head excepted).
#[test]
fn decode_bench_folds_a_batch_product_into_one_node() {
    let args = ["--rows", "1,2", "--steps", "2", "--graph", "fold,nofold"];
    let (nodes, text) = decode_bench_nodes(1, &args);
    let get = |v: &str, r: usize| nodes[&(v.to_string(), r)];
    assert_eq!(nodes.len(), 4, "{text}");
    assert_eq!(get("fold", 1), get("nofold", 1), "{text}");
    assert_eq!(get("nofold", 2) - get("fold", 2), 3 * 4 * 2, "{text}");
}

/// `hearth dev decode-bench --graph carry,nocarry`: both take turns, and a
/// step after another of the same rows builds its token ids (the step
/// before's picks, made int32) and RoPE offsets (the step before's lengths
/// plus one) on the device, graph nodes where host-written inputs are none
/// (less the row index's slice, which it reuses: three more here).
#[test]
fn decode_bench_carries_a_steps_inputs_on_the_device() {
    let args = ["--rows", "1,3", "--steps", "3", "--graph", "carry,nocarry"];
    let (nodes, text) = decode_bench_nodes(2, &args);
    let get = |v: &str, r: usize| nodes[&(v.to_string(), r)];
    assert_eq!(nodes.len(), 4, "{text}");
    for rows in [1, 3] {
        assert!(get("carry", rows) > get("nocarry", rows), "{text}");
    }
}
