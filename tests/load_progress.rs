//! Model-load progress (`hearth_models::load_with_progress`, shown by the
//! web UI as a progress bar): reports go from nothing read to every tensor
//! and byte, in order, for a safetensors folder and the real GGUF model.

mod server_support;

use std::{collections::HashMap, path::Path};

use hearth_models::{weights::Weights, LoadProgress, ModelConfig};
use mlx_rs::Array;
use server_support::smollm2;

fn check_sequence(seen: &[LoadProgress]) -> LoadProgress {
    let first = *seen.first().expect("a first report");
    let last = *seen.last().expect("a last report");
    assert_eq!((first.tensors_done, first.bytes_done), (0, 0), "{seen:?}");
    assert!(first.bytes_total > 0 && first.tensors_total > 0);
    assert!(seen
        .iter()
        .all(|p| (p.tensors_total, p.bytes_total) == (first.tensors_total, first.bytes_total)));
    assert_eq!(
        (last.tensors_done, last.bytes_done),
        (last.tensors_total, last.bytes_total)
    );
    assert!(
        seen.windows(2)
            .all(|w| w[0].bytes_done < w[1].bytes_done && w[0].tensors_done < w[1].tensors_done),
        "{seen:?}"
    );
    last
}

#[test]
fn safetensors_progress_counts_every_tensor_and_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 40 tensors of 1 MiB (f32) and one of 100 MiB: several ~64 MiB batches.
    let mut arrays = HashMap::new();
    for i in 0..40 {
        arrays.insert(
            format!("t{i:02}.weight"),
            Array::ones::<f32>(&[512, 512]).expect("array"),
        );
    }
    arrays.insert(
        "big.weight".to_string(),
        Array::ones::<f32>(&[25 << 10, 1024]).expect("array"),
    );
    let file = dir.path().join("model.safetensors");
    Array::save_safetensors(&arrays, &HashMap::<String, String>::new(), &file).expect("save");
    let raw = serde_json::json!({"model_type": "llama", "vocab_size": 10, "hidden_size": 8,
        "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 2});
    let config = ModelConfig::from_json(&raw, Path::new("config.json")).expect("config");
    let mut seen = Vec::new();
    let weights =
        Weights::from_dir_with_progress(dir.path(), &config, &mut |p| seen.push(p)).expect("load");
    let last = check_sequence(&seen);
    assert_eq!(last.tensors_total, 41);
    assert_eq!(last.bytes_total, 40 * (1 << 20) + (100u64 << 20));
    assert!(seen.len() >= 3, "several batches: {seen:?}");
    // The bytes counted are the file's data section.
    let bytes = std::fs::read(&file).expect("read");
    let header = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    assert_eq!(last.bytes_total, bytes.len() as u64 - 8 - header);
    assert_eq!(
        weights.get("big.weight").expect("tensor").shape(),
        &[25 << 10, 1024]
    );
}

#[test]
fn gguf_model_progress_reaches_every_tensor() {
    let mut seen = Vec::new();
    let loaded =
        hearth_models::load_with_progress(&smollm2(), &mut |p| seen.push(p)).expect("load");
    let last = check_sequence(&seen);
    // SmolLM2-135M: 30 layers of 9 weight tensors (Q4_1: weight, scales,
    // biases for the 7 projections) plus norms and embeddings.
    assert!(last.tensors_total > 270, "{last:?}");
    // Every byte of the model's parameters was among those read.
    assert!(last.bytes_total >= loaded.model.nbytes() as u64, "{last:?}");
}
