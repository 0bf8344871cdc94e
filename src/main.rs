//! The `hearth` command line: generate, list and convert models, dev tools.

use std::{io::Write, ops::ControlFlow, path::PathBuf, time::Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use hearth::{
    engine::{sampling::SamplingParams, Engine, EngineOptions, GenerateRequest, GenerationEvent},
    home,
    tools::{convert, dummy},
};
use hearth_models::tokenizer::ChatTemplateOptions;

#[derive(Parser)]
#[command(name = "hearth", version, about = "Local LLM engine and server on MLX")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the OpenAI-compatible API (continuous batching).
    Serve(hearth::server::ServeArgs),
    /// Benchmark one or more OpenAI-compatible servers (single, double, sweep).
    Bench(hearth::bench::BenchArgs),
    /// Generate text from a prompt and report prefill/decode speed.
    Generate(GenerateArgs),
    /// List the models in $HEARTH_HOME/models.
    Models {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Download a model from the Hugging Face hub ($HF_ENDPOINT for a mirror)
    /// into $HEARTH_HOME/models; run again to resume an interrupted download.
    Pull(hearth::hub::PullArgs),
    /// Convert a GGUF file into an MLX model folder (quantization kept as is).
    Convert {
        /// GGUF file (path or name in the models directory).
        #[arg(long)]
        model: String,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
    },
    /// Mask personal data in stdin: prints the masked text, then the entity
    /// table on stderr (values restore from it; nothing is written to disk).
    Anonymize {
        /// Print one JSON object (masked text and entities) instead.
        #[arg(long)]
        json: bool,
    },
    /// Developer tools.
    #[command(subcommand)]
    Dev(DevCommand),
}

#[derive(Subcommand)]
enum DevCommand {
    /// Write a checkpoint with seeded random weights at real shapes.
    DummyModel {
        /// Architecture: llama, qwen2, qwen3, qwen3_moe.
        #[arg(long)]
        arch: String,
        /// Preset (tiny, qwen3-0.6b, qwen3-8b, smollm2-135m, qwen3-moe-tiny,
        /// qwen3-30b-a3b, ...) with optional `,key=value` overrides (hidden, layers,
        /// heads, kv_heads, head_dim, ffn, vocab; MoE: experts, top_k, moe_ffn,
        /// sparse_step, norm_topk).
        #[arg(long, default_value = "tiny")]
        shape: String,
        /// tokenizer.json to ship with the model (its tokenizer_config.json is copied too).
        #[arg(long)]
        tokenizer: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// f32, f16 or bf16.
        #[arg(long, default_value = "f32")]
        dtype: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// On a CUDA device: check the small-batch GEMV kernels against MLX's
    /// matmul and time them for 1..=16 rows (docs/cuda.md).
    GemvBench {
        /// Row counts to time.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 3, 4, 6, 8, 12, 16])]
        rows: Vec<usize>,
        /// Weight shapes `NxK` to time (default: Qwen3-8B's and Qwen3.5-MoE's).
        #[arg(long, value_delimiter = ',')]
        shapes: Vec<String>,
        /// Products per timing.
        #[arg(long, default_value_t = 100)]
        reps: usize,
        /// Skip the self-checks (e.g. under Nsight Compute, which then
        /// profiles only the timed launches).
        #[arg(long)]
        no_check: bool,
        /// Kernels to check and time (default: warp, warp4, split4, mma;
        /// also split4x2, split4x4, split4x8 and the pipelined tensor-core
        /// variants mmas, mmas8, mmasd2, mmasd8, mmasp).
        #[arg(long, value_delimiter = ',')]
        kernels: Vec<String>,
    },
    /// On a CUDA device: check the one-token attention kernel for rows of
    /// different lengths against MLX's masked SDPA and time both.
    AttnBench,
    /// Time batched decode steps in-process by row count (no scheduler,
    /// sampling or HTTP): the model's own step-time scaling.
    DecodeBench(hearth::tools::decode_bench::Options),
    /// Time prompt chunks of several sequences in-process: a pass per
    /// chunk, one batched pass, and all tokens as one chunk.
    PrefillBench(hearth::tools::prefill_bench::Options),
    /// Count the MLX primitives one decoding step builds, by name (the host
    /// work per token on a GPU; compare with bench/step_ops_mlx_lm.py).
    StepOps {
        #[arg(long)]
        model: PathBuf,
        /// Prompt length before the counted step.
        #[arg(long, default_value_t = 16)]
        prompt_tokens: usize,
        /// Count the prompt's own pass (all its tokens in one chunk) instead
        /// of the decoding step after it.
        #[arg(long)]
        prefill: bool,
    },
}

#[derive(Args)]
struct GenerateArgs {
    /// Model path or name in $HEARTH_HOME/models (default: the default model).
    #[arg(long, env = "HEARTH_MODEL")]
    model: Option<String>,
    /// Prompt text.
    #[arg(long, conflicts_with = "prompt_file")]
    prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(long)]
    prompt_file: Option<PathBuf>,
    /// Prompt as comma-separated token ids (benchmarks, tests).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["prompt", "prompt_file", "chat"])]
    prompt_ids: Vec<u32>,
    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long)]
    chat: bool,
    /// System message (with --chat).
    #[arg(long)]
    system: Option<String>,
    /// Qwen3-style thinking switch for the chat template (true/false).
    #[arg(long)]
    enable_thinking: Option<bool>,
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    #[arg(long)]
    seed: Option<u64>,
    /// Stop string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens (benchmarks).
    #[arg(long)]
    ignore_eos: bool,
    /// Most prompt tokens per prefill step.
    #[arg(long, default_value_t = 512)]
    prefill_chunk: usize,
    /// How a quantized model's weights are held on MLX's CPU backend (see `hearth serve --help`).
    #[arg(long, value_enum, default_value = "auto")]
    cpu_weights: hearth::device::CpuWeights,
    /// Print one JSON object (text, token ids, stats) instead of streaming.
    #[arg(long)]
    json: bool,
}

fn main() {
    // Before anything touches MLX or starts a thread: on Linux this may
    // start the program again with OpenBLAS preloaded (src/blas.rs).
    hearth::blas::prefer_system_blas();
    hearth::device::apply_mlx_env_defaults();
    let cli = Cli::parse();
    // A server logs one line per request (counts and timings, never text).
    let default_filter = match cli.command {
        Command::Serve(_) => "warn,hearth=info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve(args) => hearth::server::run_serve(args),
        Command::Bench(args) => hearth::bench::run_bench(args),
        Command::Generate(args) => generate(args),
        Command::Models { json } => list_models(json),
        Command::Pull(args) => hearth::hub::run_pull(args),
        Command::Anonymize { json } => anonymize(json),
        Command::Convert { model, out } => {
            let path = home::resolve_model(Some(&model))?;
            let summary = convert::convert_gguf(&path, &out)?;
            eprintln!(
                "wrote {} ({} tensors, {} quantized layers{})",
                out.display(),
                summary.tensors,
                summary.quantized_layers,
                summary
                    .quantization
                    .map(|q| format!(", {}-bit group {}", q.bits, q.group_size))
                    .unwrap_or_default()
            );
            Ok(())
        }
        Command::Dev(DevCommand::DummyModel {
            arch,
            shape,
            tokenizer,
            out,
            dtype,
            seed,
        }) => {
            let spec = dummy::DummySpec {
                arch,
                shape: dummy::DummyShape::parse(&shape)?,
                tokenizer,
                dtype: dummy::parse_dtype(&dtype)?,
                seed,
            };
            let params = dummy::write_dummy_model(&spec, &out)?;
            eprintln!(
                "wrote {} ({:.1}M parameters)",
                out.display(),
                params as f64 / 1e6
            );
            Ok(())
        }
        Command::Dev(DevCommand::GemvBench {
            rows,
            shapes,
            reps,
            no_check,
            kernels,
        }) => gemv_bench(&rows, &shapes, reps, no_check, &kernels),
        Command::Dev(DevCommand::AttnBench) => attn_bench(),
        Command::Dev(DevCommand::DecodeBench(opts)) => hearth::tools::decode_bench::run(&opts),
        Command::Dev(DevCommand::PrefillBench(opts)) => hearth::tools::prefill_bench::run(&opts),
        Command::Dev(DevCommand::StepOps {
            model,
            prompt_tokens,
            prefill,
        }) => hearth::tools::step_ops::run(&model, prompt_tokens, prefill),
    }
}

fn need_cuda(what: &str) -> Result<()> {
    let device = hearth::device::DeviceInfo::detect();
    if device.backend != "cuda" {
        bail!(
            "{what} needs MLX's CUDA backend (this is {})",
            device.label()
        );
    }
    Ok(())
}

fn attn_bench() -> Result<()> {
    use hearth_models::cuda_attn;
    need_cuda("attn-bench")?;
    for d in cuda_attn::HEAD_DIMS {
        for dtype in [mlx_rs::Dtype::Bfloat16, mlx_rs::Dtype::Float16] {
            match cuda_attn::check(d, dtype) {
                Ok(err) => println!(
                    "attention kernel, heads of {d} in {dtype:?}: self-check passed, max relative error {err:.2e}"
                ),
                Err(e) => bail!("attention kernel, heads of {d} in {dtype:?}: {e}"),
            }
        }
    }
    // Fewest chunks (the default), then two and eight blocks per SM of 132.
    let targets = [0, 264, 1056];
    // Qwen3-8B's attention (32 query heads, 8 key/value heads of 128), then
    // the Qwen3.5-MoE's (16 of 256 over 2).
    println!(
        "| heads | rows | kv_len | MLX masked µs | MLX unmasked µs | ours, one length µs | ours µs | ours (target {}) µs | ours (target {}) µs |",
        targets[1], targets[2]
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (heads, kv_heads, dim) in [(32, 8, 128), (16, 2, 256)] {
        for rows in [1, 2, 4, 8, 16] {
            for kv_len in [256, 1024, 4096, 16384] {
                let t = cuda_attn::time(rows, heads, kv_heads, dim, kv_len, 200, &targets)?;
                let cells: Vec<String> = t.iter().map(|v| format!("{v:.1}")).collect();
                println!(
                    "| {heads}/{kv_heads}x{dim} | {rows} | {kv_len} | {} |",
                    cells.join(" | ")
                );
            }
        }
    }
    Ok(())
}

fn gemv_bench(
    rows: &[usize],
    shapes: &[String],
    reps: usize,
    no_check: bool,
    kernels: &[String],
) -> Result<()> {
    use hearth_models::cuda_gemv::{self, Kernel};
    need_cuda("gemv-bench")?;
    let kernels: Vec<Kernel> = if kernels.is_empty() {
        Kernel::ALL.to_vec()
    } else {
        kernels
            .iter()
            .map(|k| Kernel::parse(k).with_context(|| format!("no kernel `{k}`")))
            .collect::<Result<_>>()?
    };
    if !no_check {
        for &kernel in &kernels {
            // Only the row counts timed: each is a module per element type
            // to compile (about a second each).
            let routes: Vec<cuda_gemv::Route> = rows
                .iter()
                .filter(|&&r| (1..=kernel.max_rows()).contains(&r))
                .map(|&r| cuda_gemv::Route {
                    kernel,
                    min_rows: r,
                    max_rows: r,
                    max_weight_mb: None,
                })
                .collect();
            match cuda_gemv::enable(routes) {
                Ok(err) => println!(
                    "{} kernel: self-check passed, max relative error {err:.2e}",
                    kernel.name()
                ),
                Err(e) => println!("{} kernel: {e}", kernel.name()),
            }
        }
        cuda_gemv::disable();
    }
    // Qwen3-8B's products (q/k/v and gate/up joined), then the Qwen3.5-MoE's
    // attention, DeltaNet and shared-expert shapes (hidden 2048).
    let default_shapes = [
        (6144, 4096),
        (4096, 4096),
        (24576, 4096),
        (4096, 12288),
        (151936, 4096),
        (12288, 2048),
        (2048, 4096),
        (1024, 2048),
    ];
    let shapes: Vec<(i32, i32)> = if shapes.is_empty() {
        default_shapes.to_vec()
    } else {
        shapes
            .iter()
            .map(|s| {
                let (n, k) = s.split_once('x').context("shape: want NxK")?;
                Ok((n.trim().parse()?, k.trim().parse()?))
            })
            .collect::<Result<_>>()?
    };
    let names: Vec<String> = kernels.iter().map(|k| format!("{} µs", k.name())).collect();
    println!(
        "| rows | weight [N, K] | MLX µs | {} | best | best GB/s | best vs MLX |",
        names.join(" | ")
    );
    println!(
        "|---:|---|---:|{}---|---:|---:|",
        "---:|".repeat(kernels.len())
    );
    for &(n, k) in &shapes {
        for &r in rows {
            let t = cuda_gemv::time(r, n, k, reps, &kernels)?;
            let cell = |v: &Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.1}"));
            let mlx = t[0].unwrap_or(f64::NAN);
            let (best, us) = kernels
                .iter()
                .zip(&t[1..])
                .filter_map(|(k, v)| v.map(|v| (k.name(), v)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or(("–", f64::NAN));
            let gbps = (n as f64 * k as f64 * 2.0) / (us * 1e3);
            println!(
                "| {r} | [{n}, {k}] | {mlx:.1} | {} | {best} | {gbps:.0} | {:.2}x |",
                t[1..].iter().map(cell).collect::<Vec<_>>().join(" | "),
                mlx / us
            );
        }
    }
    Ok(())
}

fn generate(args: GenerateArgs) -> Result<()> {
    let path = home::resolve_model(args.model.as_deref())?;
    let load_started = Instant::now();
    hearth::engine::fit::check(&path)?;
    let loaded =
        hearth_models::load_with_options(&path, args.cpu_weights.load_options_here(), &mut |_| {})?;
    let load_time = load_started.elapsed();
    hearth::device::enable_cuda_kernels();
    let engine = Engine::new(
        loaded,
        EngineOptions {
            prefill_chunk: args.prefill_chunk,
        },
    );

    let tokenizer = &engine.model.tokenizer;
    let prompt = match (&args.prompt, &args.prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        }
        (None, None) if !args.prompt_ids.is_empty() => String::new(),
        (None, None) => bail!("give --prompt, --prompt-file or --prompt-ids"),
    };
    let tokens = if !args.prompt_ids.is_empty() {
        args.prompt_ids.clone()
    } else if args.chat {
        let mut messages = Vec::new();
        if let Some(system) = &args.system {
            messages.push(serde_json::json!({"role": "system", "content": system}));
        }
        messages.push(serde_json::json!({"role": "user", "content": prompt}));
        let text = tokenizer.apply_chat_template(
            &messages,
            &ChatTemplateOptions {
                add_generation_prompt: true,
                enable_thinking: args.enable_thinking,
                ..Default::default()
            },
        )?;
        // The template already holds any BOS token.
        tokenizer.encode(&text, false)?
    } else {
        tokenizer.encode(&prompt, true)?
    };

    let mut request = GenerateRequest::new(tokens, args.max_tokens);
    request.stop = args.stop.clone();
    request.stop_at_eos = !args.ignore_eos;
    request.sampling = SamplingParams {
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        min_p: args.min_p,
        repetition_penalty: args.repetition_penalty,
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
        seed: args.seed,
        ..SamplingParams::default()
    };

    let mut text = String::new();
    let mut ids = Vec::new();
    let stdout = std::io::stdout();
    let stats = engine.generate(&request, |event| {
        let piece = match &event {
            GenerationEvent::Token { sampled, text } => {
                ids.push(sampled.token);
                text
            }
            GenerationEvent::Finished { text, .. } => text,
        };
        text.push_str(piece);
        if !args.json {
            let mut out = stdout.lock();
            // A closed stdout (e.g. `| head`) cancels generation.
            if out
                .write_all(piece.as_bytes())
                .and_then(|_| out.flush())
                .is_err()
            {
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    })?;

    if args.json {
        let report = serde_json::json!({
            "model": path,
            "text": text,
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": stats.completion_tokens,
            "token_ids": ids,
            "finish_reason": stats.finish_reason.as_str(),
            "load_seconds": load_time.as_secs_f64(),
            "prefill_seconds": stats.prefill_time.as_secs_f64(),
            "decode_seconds": stats.decode_time.as_secs_f64(),
            "prefill_tokens_per_second": stats.prefill_tokens_per_second(),
            "decode_tokens_per_second": stats.decode_tokens_per_second(),
            "peak_memory_bytes": stats.peak_memory_bytes,
        });
        println!("{report}");
    } else {
        println!();
        eprintln!(
            "prompt: {} tokens, {:.1} tok/s | generation: {} tokens, {:.1} tok/s | \
             peak memory: {:.1} MB | finish: {}",
            stats.prompt_tokens,
            stats.prefill_tokens_per_second(),
            stats.completion_tokens,
            stats.decode_tokens_per_second(),
            stats.peak_memory_bytes as f64 / 1e6,
            stats.finish_reason.as_str(),
        );
    }
    Ok(())
}

fn anonymize(json: bool) -> Result<()> {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("reading stdin")?;
    let doc = hearth_privacy::anonymize_document(&text)?;
    if json {
        let entities: Vec<_> = doc
            .entities
            .iter()
            .map(|e| {
                serde_json::json!({
                    "placeholder": e.placeholder,
                    "kind": e.kind,
                    "value": e.value,
                    "occurrences": e.occurrences,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"masked": doc.masked, "entities": entities})
        );
    } else {
        print!("{}", doc.masked);
        eprintln!("{}", doc.entity_table());
    }
    Ok(())
}

fn list_models(json: bool) -> Result<()> {
    let dir = home::models_dir();
    let models = home::list_models(&dir);
    if json {
        println!("{}", serde_json::to_string_pretty(&models)?);
        return Ok(());
    }
    if models.is_empty() {
        println!("no models in {} (run the set-up script)", dir.display());
        return Ok(());
    }
    println!(
        "{:<40} {:<6} {:<8} {:<20} {:>10}",
        "NAME", "FORMAT", "ARCH", "QUANT", "SIZE"
    );
    for m in models {
        println!(
            "{:<40} {:<6} {:<8} {:<20} {:>8.1}MB",
            m.name,
            m.format,
            m.architecture,
            m.quantization,
            m.size_bytes as f64 / 1e6
        );
    }
    Ok(())
}
