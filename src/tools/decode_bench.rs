//! `hearth dev decode-bench`: how a batched decode step's time grows with
//! its rows, in-process, with no scheduler, sampling or HTTP around it.
//!
//! For each row count it prefills that many rows of one batch at staggered
//! lengths (rows of one batch are at different positions, as in serving),
//! then times decode steps: the host time to build the step's graph
//! (`Model::forward` plus a greedy pick of each row's next token), the host
//! time until MLX has launched all of its kernels (`async_eval` returns:
//! when that is close to the whole step, the step is bound by the host's
//! per-op cost, not by the device), and the whole step up to its tokens
//! read back. Row counts take turns in rounds,
//! so a machine's drift reaches all of them alike. Comparing these with the
//! server's step trace (`HEARTH_STEP_TRACE`) separates the model's step
//! from what the engine loop adds around it.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use hearth_models::{BatchKv, BatchShape, DecodeStep};
use mlx_rs::{ops::indexing::argmax_axis, Array};

/// Options of one run (`hearth dev decode-bench`).
#[derive(clap::Args)]
pub struct Options {
    #[arg(long)]
    pub model: std::path::PathBuf,
    /// Row counts to time (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub rows: Vec<usize>,
    /// Prompt length of row 0; row `i` gets `stagger * i` more.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Extra prompt tokens per row (rows at different positions); 0: one length.
    #[arg(long, default_value_t = 9)]
    pub stagger: usize,
    /// Timed steps per row count and round.
    #[arg(long, default_value_t = 16)]
    pub steps: usize,
    /// Rounds over all row counts after a warm-up round.
    #[arg(long, default_value_t = 4)]
    pub rounds: usize,
    /// A GEMV route table to compare (repeatable; the syntax of
    /// HEARTH_CUDA_GEMV, `off` for MLX's matmul), CUDA only; the tables
    /// take turns within each round. None: the routes in force.
    #[arg(long)]
    pub gemv: Vec<String>,
    /// Decode graphs to compare (comma-separated): `lean`, the default
    /// (models/src/lean.rs); `plain`, the same kernels with the reshape and
    /// slice nodes of before; `fold` and `nofold`, the lean graph with a
    /// batch's products by dense weights folded over the rows or not
    /// (`HEARTH_FOLD_ROWS`, whatever is in force); `carry` and `nocarry`,
    /// a step's offsets, lengths and token ids carried over from the step
    /// before on the device or written by the host (`HEARTH_CARRY_INPUTS`);
    /// each takes turns with every GEMV table.
    #[arg(long, value_delimiter = ',', default_value = "lean")]
    pub graph: Vec<String>,
    /// Bracket the last round's steps with the CUDA profiler's start and
    /// stop, for `ncu --profile-from-start off` (bench/cuda/h200.sh,
    /// H200_NCU_DECODE): the profile then holds those steps only.
    #[arg(long)]
    pub profile: bool,
}

/// One configuration the row counts are timed under.
struct Variant {
    /// The GEMV route table (`None`: the routes in force).
    routes: Option<Vec<hearth_models::cuda_gemv::Route>>,
    plain: bool,
    /// Folded batch products (`None`: as in force).
    fold: Option<bool>,
    /// Step inputs carried over on the device (`None`: as in force).
    carry: Option<bool>,
    name: String,
}

struct Batch {
    variant: usize,
    rows: usize,
    kv: Vec<BatchKv>,
    shape: BatchShape,
    positions: Vec<usize>,
    tokens: Vec<i32>,
    /// The last step's inputs and picked tokens (still on the device), for
    /// variants that carry a step's inputs over.
    last_step: Option<DecodeStep>,
    fed: Option<Array>,
    build_us: Vec<f64>,
    dispatch_us: Vec<f64>,
    step_us: Vec<f64>,
    /// Primitive nodes in the graph of the step (counted in the warm-up).
    nodes: usize,
}

/// Prints a Markdown table: per row count, p50 step and graph-build times.
pub fn run(opts: &Options) -> Result<()> {
    let model: &Path = &opts.model;
    let loaded =
        hearth_models::load(model).with_context(|| format!("loading {}", model.display()))?;
    if !opts.gemv.is_empty() && crate::device::DeviceInfo::detect().backend != "cuda" {
        anyhow::bail!("--gemv compares CUDA kernels: this is not MLX's CUDA backend");
    }
    crate::device::enable_cuda_kernels();
    let fold_in_force = hearth_models::lean::fold_rows();
    let carry_in_force = hearth_models::lean::carry_inputs();
    let tables: Vec<(Option<Vec<hearth_models::cuda_gemv::Route>>, &str)> = if opts.gemv.is_empty()
    {
        vec![(None, "in force")]
    } else {
        opts.gemv
            .iter()
            .map(|r| {
                hearth_models::cuda_gemv::Route::parse_list(r)
                    .map(|t| (Some(t), r.as_str()))
                    .map_err(|e| anyhow::anyhow!("--gemv {r}: {e}"))
            })
            .collect::<Result<_>>()?
    };
    let mut variants = Vec::new();
    for (routes, table) in &tables {
        for graph in &opts.graph {
            let (plain, fold, carry) = match graph.as_str() {
                "lean" => (false, None, None),
                "plain" => (true, None, None),
                "fold" => (false, Some(true), None),
                "nofold" => (false, Some(false), None),
                "carry" => (false, None, Some(true)),
                "nocarry" => (false, None, Some(false)),
                other => anyhow::bail!(
                    "--graph {other}: want lean, plain, fold, nofold, carry or nocarry"
                ),
            };
            let name = if opts.graph.len() > 1 {
                format!("{table}, {graph}")
            } else {
                table.to_string()
            };
            variants.push(Variant {
                routes: routes.clone(),
                plain,
                fold,
                carry,
                name,
            });
        }
    }
    // Compile and check every table's kernels before timing anything;
    // switching tables later needs no second check.
    for (routes, _) in &tables {
        if let Some(routes) = routes.as_ref().filter(|r| !r.is_empty()) {
            hearth_models::cuda_gemv::enable(routes.clone()).map_err(|e| anyhow::anyhow!(e))?;
        }
    }
    let m = &loaded.model;
    let kv_heads = m.config.num_key_value_heads;
    let vocab = m.config.vocab_size as i32;
    let longest = opts.prompt_tokens
        + opts.stagger * opts.rows.iter().max().copied().unwrap_or(1)
        + opts.steps * (opts.rounds + 1)
        + 8;
    let mut batches = Vec::new();
    for (variant, &rows) in (0..variants.len()).flat_map(|v| opts.rows.iter().map(move |r| (v, r)))
    {
        let shape = BatchShape {
            rows,
            capacity: longest.div_ceil(256) * 256,
        };
        let mut kv: Vec<BatchKv> = (0..m.num_layers()).map(|_| BatchKv::new()).collect();
        let mut positions = Vec::with_capacity(rows);
        for row in 0..rows {
            let len = opts.prompt_tokens + opts.stagger * row;
            let ids: Vec<i32> = (0..len)
                .map(|i| ((i * 7 + row) as i32 % vocab).max(1))
                .collect();
            let mut start = 0;
            while start < len {
                let end = (start + 512).min(len);
                let chunk = Array::from_slice(&ids[start..end], &[1, (end - start) as i32]);
                let mut views = BatchKv::prefill_views(&mut kv, shape, row, start);
                let logits = m.forward(&chunk, &mut views, true)?;
                drop(views);
                let mut done: Vec<&Array> = kv.iter().flat_map(BatchKv::arrays).collect();
                done.push(&logits);
                mlx_rs::transforms::eval(done)?;
                start = end;
            }
            positions.push(len);
        }
        batches.push(Batch {
            variant,
            rows,
            kv,
            shape,
            positions,
            tokens: vec![1; rows],
            last_step: None,
            fed: None,
            build_us: Vec::new(),
            dispatch_us: Vec::new(),
            step_us: Vec::new(),
            nodes: 0,
        });
    }
    // Round 0 warms up (kernel compiles, allocator); the rest are timed.
    for round in 0..=opts.rounds {
        let profiled = opts.profile && round == opts.rounds;
        if profiled && !super::cuda_profiler::start() {
            eprintln!("--profile: no CUDA driver here, nothing to bracket");
        }
        for b in &mut batches {
            let variant = &variants[b.variant];
            if let Some(routes) = &variant.routes {
                hearth_models::cuda_gemv::reinstate(routes.clone());
            }
            hearth_models::lean::set_plain(variant.plain);
            hearth_models::lean::set_fold_rows(variant.fold.unwrap_or(fold_in_force));
            let carry = variant.carry.unwrap_or(carry_in_force);
            hearth_models::lean::set_carry_inputs(carry);
            for i in 0..opts.steps {
                let started = Instant::now();
                // Carried: the step before's inputs and picked tokens stay
                // on the device, as in the engine (DecodeStep::next).
                let step =
                    DecodeStep::next(b.shape, kv_heads, b.positions.clone(), b.last_step.as_ref());
                let ids = match b.fed.take().filter(|_| carry) {
                    Some(fed) => fed.reshape(&[b.rows as i32, 1])?,
                    None => Array::from_slice(&b.tokens, &[b.rows as i32, 1]),
                };
                let mut views = BatchKv::decode_views(&mut b.kv, &step);
                let logits = m.forward(&ids, &mut views, true)?;
                drop(views);
                b.last_step = Some(step);
                let next = argmax_axis(logits.reshape(&[b.rows as i32, -1])?, -1, false)?;
                let built = started.elapsed();
                // The warm-up's last step: a carried variant's first steps
                // still read inputs the host wrote (DecodeStep::next).
                if round == 0 && i + 1 == opts.steps {
                    b.nodes = super::step_ops::count_primitives(&[&next])?.values().sum();
                }
                // Read as the engine reads them (PendingBatch): carried,
                // through copies the host reads in place.
                let pieces = if carry {
                    crate::engine::sampling::host_pieces(&next)?
                } else {
                    Vec::new()
                };
                mlx_rs::transforms::async_eval(std::iter::once(&next).chain(&pieces))?;
                let dispatched = started.elapsed();
                next.eval()?;
                let picked: Vec<i32> = if pieces.is_empty() {
                    next.as_type::<i32>()?.as_slice::<i32>().to_vec()
                } else {
                    let read = crate::engine::sampling::read_host_pieces(&pieces)?;
                    read.into_iter().map(|t| t as i32).collect()
                };
                let total = started.elapsed();
                if round > 0 {
                    b.build_us.push(built.as_secs_f64() * 1e6);
                    b.dispatch_us.push(dispatched.as_secs_f64() * 1e6);
                    b.step_us.push(total.as_secs_f64() * 1e6);
                }
                b.tokens = picked.into_iter().map(|t| t.max(1)).collect();
                b.fed = Some(next.as_type::<i32>()?);
                for p in &mut b.positions {
                    *p += 1;
                }
            }
        }
        if profiled {
            super::cuda_profiler::stop();
        }
    }
    let mut out = format!(
        "{}: {} layers, rows at lengths {} + {}·row, {} timed steps per row count\n\n\
         | routes | rows | step ms p50 | graph build ms p50 | launched ms p50 | step vs 1st row count | step vs 1st variant | graph nodes | tokens/s |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        model.display(),
        m.num_layers(),
        opts.prompt_tokens,
        opts.stagger,
        opts.steps * opts.rounds
    );
    hearth_models::lean::set_plain(false);
    hearth_models::lean::set_fold_rows(fold_in_force);
    hearth_models::lean::set_carry_inputs(carry_in_force);
    for (v, variant) in variants.iter().enumerate() {
        let name = &variant.name;
        let mine: Vec<&Batch> = batches.iter().filter(|b| b.variant == v).collect();
        let base = mine.first().map(|b| median(&b.step_us)).unwrap_or(f64::NAN);
        for b in mine {
            let step = median(&b.step_us);
            let first = batches
                .iter()
                .find(|f| f.variant == 0 && f.rows == b.rows)
                .map_or(f64::NAN, |f| median(&f.step_us));
            out.push_str(&format!(
                "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2}x | {:.3}x | {} | {:.0} |\n",
                b.rows,
                step / 1e3,
                median(&b.build_us) / 1e3,
                median(&b.dispatch_us) / 1e3,
                step / base,
                step / first,
                b.nodes,
                b.rows as f64 * 1e6 / step
            ));
        }
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes());
    Ok(())
}

/// The middle value (the upper one of an even count); NaN for none.
pub(super) fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(&[]).is_nan());
    }
}
