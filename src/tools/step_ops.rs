//! `hearth dev step-ops`: the MLX operations one decoding step builds.
//!
//! On a GPU a one-row decode step is bound by host work per operation
//! (building the graph, then encoding each primitive), not by the kernels
//! (docs/cuda.md). The count of primitives in one step's graph is therefore
//! the number to drive down, and unlike a timing it is exact on any machine:
//! this loads a model, prefills a prompt, builds the next token's logits
//! without evaluating them, exports that graph with MLX's `export_to_dot`
//! and counts its primitives by name. `bench/step_ops_mlx_lm.py` does the
//! same for mlx-lm on the same checkpoint.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::Path;

use anyhow::{bail, Context, Result};
use hearth_models::cache::KvCache;
use mlx_rs::Array;

extern "C" {
    fn fopen(path: *const std::ffi::c_char, mode: *const std::ffi::c_char) -> *mut mlx_sys::FILE;
    fn fclose(file: *mut mlx_sys::FILE) -> std::ffi::c_int;
}

/// Primitive name → count in the graph that computes `outputs`.
pub fn count_primitives(outputs: &[&Array]) -> Result<BTreeMap<String, usize>> {
    // One file per call: calls on several threads (tests) must not share one.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("hearth-step-ops-{}-{call}.dot", std::process::id()));
    let c_path = CString::new(path.to_string_lossy().as_bytes())?;
    // SAFETY: the FILE, vector and namer are created, used and freed here;
    // the arrays stay alive (borrowed) for the whole call.
    let rc = unsafe {
        let file = fopen(c_path.as_ptr(), c"w".as_ptr());
        if file.is_null() {
            bail!("cannot write {}", path.display());
        }
        let vec = mlx_sys::mlx_vector_array_new();
        for a in outputs {
            mlx_sys::mlx_vector_array_append_value(vec, a.as_ptr());
        }
        let namer = mlx_sys::mlx_node_namer_new();
        let rc = mlx_sys::mlx_export_to_dot(file, namer, vec);
        fclose(file);
        mlx_sys::mlx_node_namer_free(namer);
        mlx_sys::mlx_vector_array_free(vec);
        rc
    };
    let dot = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    if rc != 0 {
        bail!("mlx_export_to_dot failed");
    }
    Ok(primitives_in_dot(&dot?))
}

/// Counts the rectangle (primitive) nodes of an MLX dot graph by label.
pub fn primitives_in_dot(dot: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in dot.lines().filter(|l| l.contains("shape=rectangle")) {
        let Some(start) = line.find("label =\"").map(|i| i + 8) else {
            continue;
        };
        let label = &line[start..];
        let label = &label[..label.find('"').unwrap_or(label.len())];
        // Compiled graphs are named after their contents: group them.
        let name = if label.starts_with("Compiled") {
            "Compiled"
        } else {
            label
        };
        *counts.entry(name.to_string()).or_insert(0) += 1;
    }
    counts
}

/// Prints the primitives of one decoding step after a `prompt_tokens`-token
/// prompt (with `prefill`, of the prompt's own pass), as Markdown.
pub fn run(model: &Path, prompt_tokens: usize, prefill: bool) -> Result<()> {
    let loaded =
        hearth_models::load(model).with_context(|| format!("loading {}", model.display()))?;
    let model_ref = &loaded.model;
    let mut cache = model_ref.new_cache();
    let prompt: Vec<i32> = (0..prompt_tokens.max(1) as i32).map(|i| 100 + i).collect();
    let ids = Array::from_slice(&prompt, &[1, prompt.len() as i32]);
    let logits = model_ref.forward(&ids, &mut KvCache::views(&mut cache), true)?;
    let (counts, what) = if prefill {
        let mut outputs: Vec<&Array> = cache.iter().flat_map(KvCache::arrays).collect();
        outputs.push(&logits);
        let what = format!("the pass over a {}-token prompt", prompt.len());
        (count_primitives(&outputs)?, what)
    } else {
        (
            decode_step_primitives(model_ref, &mut cache, &logits)?,
            "one decoding step".into(),
        )
    };
    let total: usize = counts.values().sum();
    let mut out = format!(
        "{}: {total} primitives in {what} ({} layers)\n\n| primitive | count |\n|---|---:|\n",
        model.display(),
        model_ref.num_layers()
    );
    let mut rows: Vec<_> = counts.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (name, n) in rows {
        out.push_str(&format!("| {name} | {n} |\n"));
    }
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes());
    Ok(())
}

/// Evaluates the prompt's pass, then counts the next token's step.
fn decode_step_primitives(
    model_ref: &hearth_models::Model,
    cache: &mut [KvCache],
    logits: &Array,
) -> Result<BTreeMap<String, usize>> {
    let mut done: Vec<&Array> = cache.iter().flat_map(KvCache::arrays).collect();
    done.push(logits);
    mlx_rs::transforms::eval(done)?;
    let next = Array::from_slice(&[7i32], &[1, 1]);
    let logits = model_ref.forward(&next, &mut KvCache::views(cache), true)?;
    count_primitives(&[&logits])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_primitives_of_a_small_graph() {
        let a = Array::from_slice(&[1.0f32, 2.0], &[2]);
        let b = a.multiply(&a).unwrap().add(&a).unwrap();
        let c = mlx_rs::ops::exp(&b).unwrap().sum(None).unwrap();
        let counts = count_primitives(&[&c]).unwrap();
        assert_eq!(counts.get("Multiply"), Some(&1), "{counts:?}");
        assert_eq!(counts.get("Add"), Some(&1), "{counts:?}");
        assert_eq!(counts.get("Exp"), Some(&1), "{counts:?}");
        assert_eq!(counts.get("Sum"), Some(&1), "{counts:?}");
        // A full reduction is a Sum over all axes and a Squeeze to a scalar.
        assert_eq!(counts.values().sum::<usize>(), 5, "{counts:?}");
    }

    /// A batch's product by a dense weight, folded over its rows: the one
    /// Matmul node where MLX's plain matmul builds four, and the same values;
    /// past the most rows a view is kept for, the plain product again.
    #[test]
    fn a_folded_batch_product_is_one_node_and_the_same_product() {
        use hearth_models::layers::{Linear, FOLD_MAX_ROWS};
        use hearth_models::lean::set_fold_rows;
        let key = mlx_rs::random::key(7).unwrap();
        let w = mlx_rs::random::normal::<f32>(&[96, 64], None, None, Some(&key)).unwrap();
        let linear = Linear::dense(w.clone(), None);
        let nodes = |a: &Array| count_primitives(&[a]).unwrap().values().sum::<usize>();
        for rows in [2, 5, FOLD_MAX_ROWS as i32, FOLD_MAX_ROWS as i32 + 1] {
            let x = mlx_rs::random::normal::<f32>(&[rows, 1, 64], None, None, Some(&key)).unwrap();
            x.eval().unwrap();
            let expect = x.matmul(w.t()).unwrap();
            set_fold_rows(true);
            let folded = linear.forward(&x);
            set_fold_rows(false);
            let folded = folded.unwrap();
            let plain = linear.forward(&x).unwrap();
            assert_eq!(nodes(&plain), 4, "rows {rows}");
            let want = if rows as usize <= FOLD_MAX_ROWS { 1 } else { 4 };
            let counts = count_primitives(&[&folded]).unwrap();
            assert_eq!(
                counts.values().sum::<usize>(),
                want,
                "rows {rows}: {counts:?}"
            );
            assert_eq!(folded.shape(), &[rows, 1, 96]);
            let close = folded.all_close(&expect, 1e-5, 1e-5, None).unwrap();
            assert!(close, "rows {rows}");
        }
    }
}
