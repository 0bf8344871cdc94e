//! `hearth bench` command-line front end: flags -> [`BenchConfig`], progress
//! on stderr, the Markdown (or `--json`) report on stdout, files on request.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use super::{
    check::CountPolicy,
    config::{Api, BenchConfig, InterferenceConfig, Preset, SweepConfig, Target, Tolerance},
    report::Scenario,
    run_with_progress, Progress, Report,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PresetArg {
    /// 64/256/1024-token prompts, 1/2/4/8 parallel, interference, 5 repeats: about a minute with a tiny model.
    Quick,
    /// 8 prompts 100..53 000 tokens, 1/2/4/8 parallel, interference, 5 repeats.
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiArg {
    /// /v1/chat/completions (the prompt goes through the chat template).
    Chat,
    /// /v1/completions (raw prompt text).
    Completions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CountArg {
    /// The server's usage when the received text confirms it, else the text's count.
    Verified,
    /// Always the received text re-encoded as a whole (strict lower bound).
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioArg {
    /// Sequential requests over --prompt-lengths.
    Single,
    /// Gate-released 1 and 2 streams (speed-up of two over one).
    Double,
    /// Gate-released streams at each --concurrency level.
    Sweep,
    /// Short requests while a long prompt prefills.
    Interference,
}

/// Benchmark OpenAI-compatible servers (Hearth or any other), the seeds' way.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Server to measure: base URL such as http://127.0.0.1:8000 (a trailing /v1 is fine).
    #[arg(long, conflicts_with = "compare", required_unless_present = "compare")]
    pub url: Option<String>,
    /// Several servers run alternately in one run: name=url,name=url,...
    #[arg(long, value_delimiter = ',')]
    pub compare: Vec<String>,
    /// Target the ratios are computed against (default: the first).
    #[arg(long)]
    pub baseline: Option<String>,
    #[arg(long, value_enum, default_value = "quick")]
    pub preset: PresetArg,
    /// Scenarios to run (default: the preset's).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub scenarios: Vec<ScenarioArg>,
    /// Prompt lengths of the `single` scenario, in tokens.
    #[arg(long, value_delimiter = ',')]
    pub prompt_lengths: Vec<usize>,
    /// Tokens to generate per `single` request.
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Concurrency levels of the sweep (1 is always added as the reference).
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Prompt length of the sweep's requests.
    #[arg(long)]
    pub sweep_prompt_tokens: Option<usize>,
    /// Tokens to generate per sweep request.
    #[arg(long)]
    pub sweep_max_tokens: Option<usize>,
    /// Long prompt of the interference scenario.
    #[arg(long)]
    pub long_prompt_tokens: Option<usize>,
    /// Measured repeats per point (medians are reported).
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Unmeasured warm-up requests per server.
    #[arg(long)]
    pub warmup: Option<usize>,
    #[arg(long, value_enum, default_value = "chat")]
    pub api: ApiArg,
    /// tokenizer.json of the served model (or its folder). Default: the
    /// served model's folder when the server reports a local path.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// `model` to send (default: what GET /v1/models reports).
    #[arg(long)]
    pub model: Option<String>,
    /// Do not send `ignore_eos: true`.
    #[arg(long)]
    pub no_ignore_eos: bool,
    /// Which token count rates use (docs/bench.md, "Honest token counts").
    #[arg(long, value_enum, default_value = "verified")]
    pub count: CountArg,
    /// Relative token-count tolerance of the cross-check (absolute floor: 2 tokens).
    #[arg(long, default_value_t = 0.05)]
    pub token_tolerance: f64,
    /// Limit for one request, in seconds.
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Bearer token for servers that require one.
    #[arg(long, env = "HEARTH_BENCH_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Seed of the synthetic prompts.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print the JSON report on stdout instead of the Markdown one.
    #[arg(long)]
    pub json: bool,
    /// Write the full JSON report (raw samples + summary) to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
    /// Write the Markdown report to this file.
    #[arg(long)]
    pub markdown_out: Option<PathBuf>,
    /// Write the report as one self-contained HTML file (tables and charts,
    /// as on the web UI's Benchmark page; needs a binary built with the UI).
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

impl BenchArgs {
    /// The configuration these flags describe.
    pub fn to_config(&self) -> Result<BenchConfig> {
        let targets = if self.compare.is_empty() {
            let url = self.url.as_deref().context("give --url or --compare")?;
            vec![Target::parse(url, "server")?]
        } else {
            self.compare
                .iter()
                .enumerate()
                .map(|(i, spec)| Target::parse(spec, &format!("server{}", i + 1)))
                .collect::<Result<Vec<_>, _>>()?
        };
        let targets = targets
            .into_iter()
            .map(|t| Target {
                model: self.model.clone(),
                ..t
            })
            .collect();
        let preset = match self.preset {
            PresetArg::Quick => Preset::Quick,
            PresetArg::Full => Preset::Full,
        };
        let mut config = BenchConfig::preset(preset, targets);
        let full = BenchConfig::preset(Preset::Full, Vec::new());
        config.baseline = self.baseline.clone();
        config.api = match self.api {
            ApiArg::Chat => Api::Chat,
            ApiArg::Completions => Api::Completions,
        };
        config.tokenizer = self.tokenizer.clone();
        config.ignore_eos = !self.no_ignore_eos;
        config.api_key = self.api_key.clone();
        config.seed = self.seed;
        config.count = match self.count {
            CountArg::Verified => CountPolicy::Verified,
            CountArg::Text => CountPolicy::Text,
        };
        config.tolerance = Tolerance {
            relative: self.token_tolerance,
            ..Tolerance::default()
        };
        if let Some(r) = self.repeats {
            config.repeats = r;
        }
        if let Some(w) = self.warmup {
            config.warmup = w;
        }
        if let Some(t) = self.timeout {
            config.request_timeout_s = t;
        }
        // Scenario selection: the preset's, unless named explicitly.
        if !self.scenarios.is_empty() {
            let wants = |s: ScenarioArg| self.scenarios.contains(&s);
            if !wants(ScenarioArg::Single) {
                config.single = None;
            } else if config.single.is_none() {
                config.single = full.single.clone();
            }
            let sweep_base = config.sweep.clone().or(full.sweep.clone());
            config.sweep = match (wants(ScenarioArg::Sweep), wants(ScenarioArg::Double)) {
                (true, _) => sweep_base,
                (false, true) => sweep_base.map(|s| SweepConfig {
                    concurrency: vec![1, 2],
                    ..s
                }),
                (false, false) => None,
            };
            if !wants(ScenarioArg::Interference) {
                config.interference = None;
            } else if config.interference.is_none() {
                config.interference = full.interference.clone();
            }
        }
        if let Some(single) = &mut config.single {
            if !self.prompt_lengths.is_empty() {
                single.prompt_tokens = self.prompt_lengths.clone();
            }
            if let Some(m) = self.max_tokens {
                single.max_tokens = m;
            }
        } else if !self.prompt_lengths.is_empty() {
            bail!("--prompt-lengths needs the single scenario");
        }
        if let Some(sweep) = &mut config.sweep {
            if !self.concurrency.is_empty() {
                sweep.concurrency = self.concurrency.clone();
            }
            if let Some(p) = self.sweep_prompt_tokens {
                sweep.prompt_tokens = p;
            }
            if let Some(m) = self.sweep_max_tokens {
                sweep.max_tokens = m;
            }
        } else if !self.concurrency.is_empty() {
            bail!("--concurrency needs the sweep (or double) scenario");
        }
        if let Some(long) = self.long_prompt_tokens {
            match &mut config.interference {
                Some(InterferenceConfig {
                    long_prompt_tokens, ..
                }) => *long_prompt_tokens = long,
                None => bail!("--long-prompt-tokens needs the interference scenario"),
            }
        }
        config.validate()?;
        Ok(config)
    }
}

/// Entry point of `hearth bench`.
pub fn run_bench(args: BenchArgs) -> Result<()> {
    let config = args.to_config()?;
    if args.html.is_some() && !crate::webui::is_built() {
        // Say so before a long run, not after it.
        return Err(crate::webui::ReportPageError::UiNotBuilt.into());
    }
    // One thread is plenty for a client and leaves the cores to the servers.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let quiet = args.quiet;
    let report = runtime.block_on(run_with_progress(config, move |p| {
        if !quiet {
            print_progress(&p);
        }
    }))?;
    if let Some(path) = &args.json_out {
        // Compact: the samples hold every event timestamp.
        write_file(path, &serde_json::to_string(&report)?)?;
    }
    let markdown = report.to_markdown();
    if let Some(path) = &args.markdown_out {
        write_file(path, &markdown)?;
    }
    if let Some(path) = &args.html {
        write_file(path, &crate::webui::report_html(&report)?)?;
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        stdout.write_all(serde_json::to_string_pretty(&report)?.as_bytes())?;
        stdout.write_all(b"\n")?;
    } else {
        stdout.write_all(markdown.as_bytes())?;
    }
    warn_on_mismatch(&report);
    Ok(())
}

fn print_progress(p: &Progress) {
    let repeat = if p.scenario == Scenario::Warmup {
        String::new()
    } else {
        format!(" #{}", p.repeat + 1)
    };
    if !p.finished {
        eprint!(
            "[{}/{}] {} · {}{} … ",
            p.done + 1,
            p.total,
            p.target,
            p.step,
            repeat
        );
    } else {
        eprintln!("{}", p.result);
    }
}

fn warn_on_mismatch(report: &Report) {
    for s in report.summaries.iter().filter(|s| s.suspect) {
        eprintln!(
            "warning: token counts of '{}' disagree (see Token accounting): its tok/s may be wrong",
            s.target
        );
    }
}

fn write_file(path: &Path, contents: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn config(args: &[&str]) -> Result<BenchConfig> {
        let mut argv = vec!["hearth-bench"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)?.bench.to_config()
    }

    #[test]
    fn quick_against_one_url() {
        let c = config(&["--url", "http://127.0.0.1:8000/v1"]).unwrap();
        assert_eq!(c.targets.len(), 1);
        assert_eq!(c.preset, Some(Preset::Quick));
        assert!(c.single.is_some() && c.sweep.is_some());
    }

    #[test]
    fn compare_and_overrides() {
        let c = config(&[
            "--compare",
            "hearth=http://127.0.0.1:8000,mlx_lm=http://127.0.0.1:8080",
            "--baseline",
            "mlx_lm",
            "--scenarios",
            "double,single",
            "--prompt-lengths",
            "10,20",
            "--repeats",
            "2",
            "--api",
            "completions",
            "--count",
            "text",
        ])
        .unwrap();
        assert_eq!(c.targets[1].name, "mlx_lm");
        assert_eq!(c.baseline.as_deref(), Some("mlx_lm"));
        assert_eq!(c.sweep.unwrap().concurrency, [1, 2]);
        assert_eq!(c.single.unwrap().prompt_tokens, [10, 20]);
        assert_eq!(c.repeats, 2);
        assert_eq!(c.api, Api::Completions);
        assert_eq!(c.count, CountPolicy::Text);
        assert!(c.interference.is_none());
    }

    #[test]
    fn bad_combinations() {
        assert!(config(&[]).is_err());
        assert!(config(&["--url", "http://x:1", "--compare", "a=http://x:1"]).is_err());
        assert!(config(&[
            "--url",
            "http://x:1",
            "--scenarios",
            "single",
            "--concurrency",
            "2"
        ])
        .is_err());
        assert!(config(&["--compare", "a=http://x:1", "--baseline", "b"]).is_err());
        let c = config(&[
            "--url",
            "http://x:1",
            "--scenarios",
            "interference",
            "--long-prompt-tokens",
            "512",
        ])
        .unwrap();
        assert_eq!(c.interference.unwrap().long_prompt_tokens, 512);
    }
}
