//! `hearth dev prefill-bench`: what prompt chunks of several sequences cost
//! in-process, read one pass per chunk, in one batched pass
//! ([`hearth_models::PrefillBatch`]), and as one chunk of all their tokens
//! (the same tokens in a single row: what batching could at best reach).
//! No scheduler, sampling or HTTP; the three take turns each round, so a
//! machine's drift reaches them alike, and so do the MoE experts settings
//! that `--experts` compares (CUDA: which token counts take Hearth's
//! experts kernels, models/src/cuda_experts.rs).

use std::time::Instant;

use anyhow::{Context, Result};

use super::decode_bench::median;
use crate::scheduler::WorkingProbe;
use hearth_models::{BatchKv, BatchShape, CacheView, Model, PrefillBatch, PrefillChunk};
use mlx_rs::Array;

/// Options of one run (`hearth dev prefill-bench`).
#[derive(clap::Args)]
pub struct Options {
    #[arg(long)]
    pub model: std::path::PathBuf,
    /// Prompts read together (one row each).
    #[arg(long, default_value_t = 7)]
    pub prompts: usize,
    /// Tokens per prompt.
    #[arg(long, default_value_t = 136)]
    pub tokens: usize,
    /// Timed rounds after a warm-up round.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Make each round's prompts one token longer than the last round's, so
    /// that every pass meets shapes the process has not seen (what a server
    /// meets with each new prompt length: per-shape plans, graphs and kernel
    /// compiles then count); by default every round repeats one shape.
    #[arg(long)]
    pub new_lengths: bool,
    /// Bracket the last round's first single-prompt pass and its batched
    /// pass with the CUDA profiler's start and stop, for `ncu
    /// --profile-from-start off` (bench/cuda/h200.sh, H200_NCU_PREFILL).
    /// Each profiled pass ends with an argmax over its logits, so
    /// bench/cuda/ncu_decode.py --window --each splits the kernel list
    /// into the two passes.
    #[arg(long)]
    pub profile: bool,
    /// A setting of the MoE experts kernels to compare (repeatable; the
    /// syntax of HEARTH_CUDA_EXPERTS: `off`, `on` or `MIN-MAX` token
    /// rows), CUDA only; the settings take turns within each round. None:
    /// the setting in force.
    #[arg(long)]
    pub experts: Vec<String>,
}

/// An experts setting to time under.
enum Experts {
    /// Whatever Hearth put in force (no `--experts`).
    InForce,
    /// A parsed `--experts` setting: token rows, `None` for off.
    Rows(Option<(usize, usize)>),
}

impl Experts {
    fn apply(&self) {
        use hearth_models::cuda_experts;
        match self {
            Experts::InForce => {}
            Experts::Rows(None) => cuda_experts::disable(),
            Experts::Rows(Some((min, max))) => cuda_experts::enable(*min, *max),
        }
    }
}

/// `(name, setting)` of each `--experts` setting, or of the one in force.
fn experts_variants(settings: &[String]) -> Result<Vec<(String, Experts)>> {
    if settings.is_empty() {
        return Ok(vec![("in force".into(), Experts::InForce)]);
    }
    if crate::device::DeviceInfo::detect().backend != "cuda" {
        anyhow::bail!("--experts compares CUDA kernels: this is not MLX's CUDA backend");
    }
    settings
        .iter()
        .map(|s| {
            hearth_models::cuda_experts::parse_rows(s)
                .map(|rows| (s.clone(), Experts::Rows(rows)))
                .map_err(|e| anyhow::anyhow!("--experts {s}: {e}"))
        })
        .collect()
}

fn fresh(model: &Model) -> Vec<BatchKv> {
    (0..model.num_layers()).map(|_| BatchKv::new()).collect()
}

/// One forward pass through `views` (dropped after, so the buffers can be read).
fn forward(model: &Model, x: &Array, mut views: Vec<CacheView>) -> Result<Array> {
    Ok(model.forward(x, &mut views, true)?)
}

fn eval(kv: &[BatchKv], logits: &Array) -> Result<()> {
    let mut all: Vec<&Array> = kv.iter().flat_map(BatchKv::arrays).collect();
    all.push(logits);
    Ok(mlx_rs::transforms::eval(all)?)
}

/// Ends a profiled pass with one argmax kernel: the mark between passes in
/// the kernel list.
fn mark(logits: &Array) -> Result<()> {
    let top = mlx_rs::ops::indexing::argmax_axis(logits, -1, false)?;
    Ok(mlx_rs::transforms::eval([&top])?)
}

/// Milliseconds and working bytes (as the engine's memory guard counts a
/// step's: [`WorkingProbe`]) of each of the three passes.
type Passes = [(f64, usize); 3];

/// The three passes over `n` prompts of `len` tokens (one pass per chunk,
/// one batched pass, one chunk of all the tokens), timed and their working
/// memory measured; `profiled` brackets the first single-prompt pass and
/// the batched one for `ncu`.
fn passes(m: &Model, shape: BatchShape, n: usize, len: usize, profiled: bool) -> Result<Passes> {
    let vocab = m.config.vocab_size as i32;
    let ids = |row: usize, count: usize| -> Vec<i32> {
        (0..count)
            .map(|i| ((i * 7 + row * 13) as i32 % vocab).max(1))
            .collect()
    };
    let done = |probe: WorkingProbe, started: Instant| {
        let ms = started.elapsed().as_secs_f64() * 1e3;
        (ms, probe.finish())
    };
    // One pass per chunk.
    let mut kv = fresh(m);
    let probe = WorkingProbe::start();
    let started = Instant::now();
    for row in 0..n {
        if profiled && row == 0 && !super::cuda_profiler::start() {
            eprintln!("--profile: no CUDA driver here, nothing to bracket");
        }
        let x = Array::from_slice(&ids(row, len), &[1, len as i32]);
        let logits = forward(m, &x, BatchKv::prefill_views(&mut kv, shape, row, 0))?;
        eval(&kv, &logits)?;
        if profiled && row == 0 {
            mark(&logits)?;
            super::cuda_profiler::stop();
        }
    }
    let seq = done(probe, started);
    // One batched pass.
    let mut kv = fresh(m);
    let probe = WorkingProbe::start();
    let started = Instant::now();
    let chunks = (0..n)
        .map(|row| PrefillChunk { row, start: 0, len })
        .collect();
    if profiled {
        super::cuda_profiler::start();
    }
    let batch = PrefillBatch::new(shape, m.config.num_key_value_heads, chunks)?;
    let width = batch.width();
    let mut x = vec![0i32; n * width];
    for row in 0..n {
        x[row * width..row * width + len].copy_from_slice(&ids(row, len));
    }
    let x = Array::from_slice(&x, &[n as i32, width as i32]);
    let logits = forward(m, &x, BatchKv::prefill_batch_views(&mut kv, &batch))?;
    eval(&kv, &logits)?;
    let batched = done(probe, started);
    if profiled {
        mark(&logits)?;
        super::cuda_profiler::stop();
    }
    // All the tokens as one chunk of one row.
    let mut kv = fresh(m);
    let probe = WorkingProbe::start();
    let started = Instant::now();
    let x = Array::from_slice(&ids(0, n * len), &[1, (n * len) as i32]);
    let logits = forward(m, &x, BatchKv::prefill_views(&mut kv, shape, 0, 0))?;
    eval(&kv, &logits)?;
    Ok([seq, batched, done(probe, started)])
}

/// Prints a Markdown table: p50 milliseconds, prompt tokens per second and
/// the most working memory of a round, per experts setting and pass.
pub fn run(opts: &Options) -> Result<()> {
    let variants = experts_variants(&opts.experts)?;
    let loaded = hearth_models::load(&opts.model)
        .with_context(|| format!("loading {}", opts.model.display()))?;
    crate::device::enable_cuda_kernels();
    let m = &loaded.model;
    let (n, base_len) = (opts.prompts.max(1), opts.tokens.max(1));
    let longest = base_len + if opts.new_lengths { opts.rounds } else { 0 };
    let shape = BatchShape {
        rows: n,
        capacity: (n * longest).div_ceil(256) * 256,
    };
    // Per variant, per pass: milliseconds of each timed round, and the most
    // working memory of any round.
    let mut times: Vec<[Vec<f64>; 3]> = vec![Default::default(); variants.len()];
    let mut working: Vec<[usize; 3]> = vec![[0; 3]; variants.len()];
    let mut tokens = 0;
    for round in 0..=opts.rounds {
        let len = if opts.new_lengths {
            base_len + round
        } else {
            base_len
        };
        for (v, (_, experts)) in variants.iter().enumerate() {
            experts.apply();
            let profiled = opts.profile && round == opts.rounds && v == 0;
            let measured = passes(m, shape, n, len, profiled)?;
            if round > 0 {
                for ((t, w), (ms, bytes)) in times[v].iter_mut().zip(&mut working[v]).zip(measured)
                {
                    t.push(ms);
                    *w = (*w).max(bytes);
                }
            }
        }
        if round > 0 {
            tokens += n * len;
        }
    }
    let lengths = if opts.new_lengths {
        format!(
            "{}..={longest} tokens, a new length each round",
            base_len + 1
        )
    } else {
        format!("{base_len} tokens")
    };
    println!(
        "{}: {n} prompts of {lengths}, p50 of {} rounds\n",
        opts.model.display(),
        opts.rounds
    );
    // Tokens of a median round (the mean over the timed rounds).
    let round_tokens = tokens as f64 / opts.rounds.max(1) as f64;
    println!(
        "| experts | pass | ms p50 | prompt tokens/s | vs a pass per chunk | vs 1st experts setting | working MiB |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    let names = [
        "a pass per chunk",
        "one batched pass",
        "one chunk of all the tokens",
    ];
    for (((setting, _), t), w) in variants.iter().zip(&times).zip(&working) {
        let base = median(&t[0]);
        for (pass, (name, ms)) in names.iter().zip(t.iter().map(|t| median(t))).enumerate() {
            let rate = round_tokens / (ms / 1e3);
            let first = median(&times[0][pass]);
            let mib = w[pass] as f64 / (1 << 20) as f64;
            println!(
                "| {setting} | {name} | {ms:.1} | {rate:.0} | {:.2}x | {:.3}x | {mib:.2} |",
                base / ms,
                ms / first
            );
        }
    }
    Ok(())
}
