//! Raw samples, their summaries, comparisons, and the Markdown rendering.
//!
//! The JSON report keeps every request ([`RequestSample`]: timestamps of all
//! content events, the three token counts, flags), so any summary can be
//! recomputed later; [`Report::summarize`] is that computation. Definitions
//! (docs/bench.md has the long form):
//! - TTFT: request written -> first content event.
//! - ITL: gap between consecutive content events of one stream.
//! - decode tok/s (per request): (tokens - 1) / (last event - first event).
//! - prefill tok/s: prompt tokens (server usage, else ours) / TTFT.
//! - wall tok/s (aggregate): all tokens of a batch / (last response end -
//!   first request write); for one request, tokens / (end - write).
//! - speed-up at c: median wall tok/s at c / median wall tok/s at 1.
//!
//! Tokens are always the received text counted with the model's tokenizer.
//! Medians are taken over repeats; TTFT and ITL percentiles over all requests
//! (all gaps) of all repeats of a point.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::{Deserialize, Serialize};

use super::{
    check::{Flag, FlagKind, Severity, TokenSource},
    config::BenchConfig,
    stats::{median, percentile, ratio},
};

/// Which part of the methodology a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    Warmup,
    Single,
    Sweep,
    Interference,
}

/// A request's part within its scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// An ordinary measured request.
    Request,
    /// Interference: a short request on an idle server.
    IdleProbe,
    /// Interference: the stream already decoding when the long prompt lands.
    Running,
    /// Interference: the long prompt.
    LongPrompt,
    /// Interference: a short request sent while the long prompt prefills.
    LoadedProbe,
}

/// One request as measured. Times are seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestSample {
    pub target: String,
    pub scenario: Scenario,
    pub role: Role,
    /// Requests released together by the gate (1 for sequential ones).
    pub concurrency: usize,
    pub repeat: usize,
    /// Index within its batch.
    pub stream: usize,
    /// Run-wide batch number (requests of one batch share it).
    pub batch: usize,
    /// Tokens in the prompt text sent (our tokenizer, no template).
    pub prompt_tokens: usize,
    pub max_tokens: usize,
    /// When the request was written, from the batch's first write.
    pub sent_at_s: f64,
    /// First content event, from this request's write.
    pub ttft_s: Option<f64>,
    /// End of the response body (or failure), from this request's write.
    pub end_s: Option<f64>,
    /// Every content event, from this request's write.
    pub content_times_s: Vec<f64>,
    pub sse_events: usize,
    /// Generated tokens used for every rate (see `check`): the server's
    /// usage when the received text confirms it, else `text_tokens`.
    pub tokens: usize,
    pub token_source: TokenSource,
    /// The received text encoded as a whole (lower bound).
    pub text_tokens: usize,
    /// The received text encoded event by event.
    pub event_tokens: usize,
    pub text_bytes: usize,
    pub usage_prompt_tokens: Option<u64>,
    pub usage_completion_tokens: Option<u64>,
    pub finish_reason: Option<String>,
    pub done_marker: bool,
    pub error: Option<String>,
    pub flags: Vec<Flag>,
}

impl RequestSample {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// Generated tokens, as used for rates.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// (tokens - 1) / (last event - first event); needs two events.
    pub fn decode_tps(&self) -> Option<f64> {
        let (first, last) = (self.content_times_s.first()?, self.content_times_s.last()?);
        let span = last - first;
        (self.content_times_s.len() >= 2 && self.tokens() >= 2 && span > 0.0)
            .then(|| (self.tokens() - 1) as f64 / span)
    }

    /// Prompt tokens (server's count when reported) / TTFT.
    pub fn prefill_tps(&self) -> Option<f64> {
        let prompt = self
            .usage_prompt_tokens
            .map(|p| p as f64)
            .unwrap_or(self.prompt_tokens as f64);
        self.ttft_s.filter(|t| *t > 0.0).map(|t| prompt / t)
    }

    /// tokens / (end - write).
    pub fn wall_tps(&self) -> Option<f64> {
        self.end_s
            .filter(|e| *e > 0.0 && self.ok())
            .map(|e| self.tokens() as f64 / e)
    }

    /// Gaps between consecutive content events.
    pub fn inter_token_gaps(&self) -> impl Iterator<Item = f64> + '_ {
        self.content_times_s.windows(2).map(|w| w[1] - w[0])
    }

    fn has_mismatch(&self) -> bool {
        self.flags.iter().any(|f| f.severity == Severity::Mismatch)
    }
}

/// Aggregate tok/s of a batch: all tokens / (last end - first write);
/// `None` if any request of the batch failed.
pub fn batch_wall_tps(batch: &[&RequestSample]) -> Option<f64> {
    if batch.is_empty() || batch.iter().any(|s| !s.ok()) {
        return None;
    }
    let start = batch
        .iter()
        .map(|s| s.sent_at_s)
        .fold(f64::INFINITY, f64::min);
    let end = batch
        .iter()
        .map(|s| s.sent_at_s + s.end_s.unwrap_or(0.0))
        .fold(f64::NEG_INFINITY, f64::max);
    let tokens: usize = batch.iter().map(|s| s.tokens()).sum();
    (end > start).then(|| tokens as f64 / (end - start))
}

/// Latency percentiles of a set of requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub ttft_p50_s: Option<f64>,
    pub ttft_p99_s: Option<f64>,
    pub itl_p50_s: Option<f64>,
    pub itl_p99_s: Option<f64>,
}

impl Latency {
    fn of(samples: &[&RequestSample]) -> Self {
        let ttft: Vec<f64> = samples.iter().filter_map(|s| s.ttft_s).collect();
        let itl: Vec<f64> = samples.iter().flat_map(|s| s.inter_token_gaps()).collect();
        Self {
            ttft_p50_s: percentile(&ttft, 50.0),
            ttft_p99_s: percentile(&ttft, 99.0),
            itl_p50_s: percentile(&itl, 50.0),
            itl_p99_s: percentile(&itl, 99.0),
        }
    }
}

/// One prompt length of the `single` scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SingleSummary {
    pub prompt_tokens: usize,
    pub ok: usize,
    pub failed: usize,
    pub completion_tokens_p50: Option<f64>,
    pub wall_tps_p50: Option<f64>,
    pub decode_tps_p50: Option<f64>,
    pub prefill_tps_p50: Option<f64>,
    #[serde(flatten)]
    pub latency: Latency,
}

/// One concurrency level of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSummary {
    pub concurrency: usize,
    pub batches_ok: usize,
    pub batches_failed: usize,
    /// Median over repeats of the batch's aggregate wall tok/s.
    pub wall_tps_p50: Option<f64>,
    /// Median per-request decode tok/s.
    pub decode_tps_p50: Option<f64>,
    /// wall_tps_p50 / wall_tps_p50 at concurrency 1.
    pub speedup: Option<f64>,
    #[serde(flatten)]
    pub latency: Latency,
}

/// Short requests vs a long prompt being prefilled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterferenceSummary {
    pub long_prompt_tokens: usize,
    pub repeats_ok: usize,
    pub idle_ttft_p50_s: Option<f64>,
    pub loaded_ttft_p50_s: Option<f64>,
    /// loaded / idle TTFT of the short probe (the target: <= 2).
    pub ttft_ratio: Option<f64>,
    pub long_ttft_p50_s: Option<f64>,
    /// Running stream: median gap before the long prompt arrived.
    pub running_itl_p50_s: Option<f64>,
    /// Running stream: longest gap once the long prompt arrived (median over repeats).
    pub running_stall_p50_s: Option<f64>,
}

/// Flags of one kind on one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlagCount {
    pub kind: FlagKind,
    pub severity: Severity,
    pub count: usize,
    pub example: String,
}

/// Everything measured for one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetSummary {
    pub target: String,
    pub requests: usize,
    pub failed: usize,
    pub single: Vec<SingleSummary>,
    pub sweep: Vec<SweepSummary>,
    pub interference: Option<InterferenceSummary>,
    pub flags: Vec<FlagCount>,
    /// True when any response had a count mismatch: read its tok/s with care.
    pub suspect: bool,
    /// Successful responses whose count is the server's usage, confirmed by
    /// the received text (the rest were counted from the text alone).
    pub usage_verified: usize,
    /// Σ whole-text tokens / Σ counted tokens over successful responses
    /// (about 1.0 for real models; lower for repetitive dummy output).
    pub text_to_counted: Option<f64>,
    /// First few error messages.
    pub errors: Vec<String>,
}

impl TargetSummary {
    /// Speed-up at concurrency 2: the seeds' `double`.
    pub fn double_speedup(&self) -> Option<f64> {
        self.sweep
            .iter()
            .find(|s| s.concurrency == 2)
            .and_then(|s| s.speedup)
    }
}

/// One metric across targets, with ratios against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    pub metric: String,
    pub higher_is_better: bool,
    /// Value per target, in target order.
    pub values: Vec<Option<f64>>,
    /// value / baseline value, in target order.
    pub ratios: Vec<Option<f64>>,
}

/// Where the run happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub os: String,
    pub arch: String,
    pub cpus: usize,
    /// 1-minute load average when the run started and ended (Linux), to
    /// tell a quiet machine from a busy one.
    pub load_average_start: Option<f64>,
    pub load_average_end: Option<f64>,
}

impl Environment {
    /// The machine now (`load_average_end` is filled in at the end).
    pub fn current() -> Self {
        Self {
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load_average_start: load_average(),
            load_average_end: None,
        }
    }
}

/// The 1-minute load average, where the OS exposes it as /proc/loadavg.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What a target turned out to be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetInfo {
    pub name: String,
    pub url: String,
    pub model: String,
}

/// A whole run: configuration, raw samples, summaries, comparisons.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub hearth_version: String,
    pub started_unix_s: u64,
    pub duration_s: f64,
    pub environment: Environment,
    pub config: BenchConfig,
    pub tokenizer: String,
    pub targets: Vec<TargetInfo>,
    pub baseline: String,
    pub summaries: Vec<TargetSummary>,
    pub comparison: Vec<ComparisonRow>,
    pub samples: Vec<RequestSample>,
}

impl Report {
    /// Recompute summaries and comparison from `samples`.
    pub fn summarize(&mut self) {
        self.summaries = self
            .targets
            .iter()
            .map(|t| summarize_target(&t.name, &self.samples, &self.config))
            .collect();
        let baseline = self
            .targets
            .iter()
            .position(|t| t.name == self.baseline)
            .unwrap_or(0);
        self.comparison = compare(&self.summaries, baseline);
    }

    pub fn summary(&self, target: &str) -> Option<&TargetSummary> {
        self.summaries.iter().find(|s| s.target == target)
    }

    /// The human-readable report.
    pub fn to_markdown(&self) -> String {
        render_markdown(self)
    }
}

fn summarize_target(name: &str, samples: &[RequestSample], config: &BenchConfig) -> TargetSummary {
    let mine: Vec<&RequestSample> = samples
        .iter()
        .filter(|s| s.target == name && s.scenario != Scenario::Warmup)
        .collect();
    let single = config
        .single
        .as_ref()
        .map(|single| {
            let mut lengths = single.prompt_tokens.clone();
            lengths.dedup();
            lengths
                .into_iter()
                .map(|n| {
                    let all: Vec<&RequestSample> = mine
                        .iter()
                        .copied()
                        .filter(|s| s.scenario == Scenario::Single && s.prompt_tokens == n)
                        .collect();
                    let ok: Vec<&RequestSample> = all.iter().copied().filter(|s| s.ok()).collect();
                    let values = |f: fn(&RequestSample) -> Option<f64>| -> Vec<f64> {
                        ok.iter().filter_map(|s| f(s)).collect()
                    };
                    SingleSummary {
                        prompt_tokens: n,
                        ok: ok.len(),
                        failed: all.len() - ok.len(),
                        completion_tokens_p50: median(&values(|s| Some(s.tokens() as f64))),
                        wall_tps_p50: median(&values(RequestSample::wall_tps)),
                        decode_tps_p50: median(&values(RequestSample::decode_tps)),
                        prefill_tps_p50: median(&values(RequestSample::prefill_tps)),
                        latency: Latency::of(&ok),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let mut sweep: Vec<SweepSummary> = config
        .sweep
        .as_ref()
        .map(|sweep| {
            let mut levels = sweep.concurrency.clone();
            levels.sort_unstable();
            levels.dedup();
            levels
                .into_iter()
                .map(|c| {
                    let all: Vec<&RequestSample> = mine
                        .iter()
                        .copied()
                        .filter(|s| s.scenario == Scenario::Sweep && s.concurrency == c)
                        .collect();
                    let mut batches: BTreeMap<usize, Vec<&RequestSample>> = BTreeMap::new();
                    for s in &all {
                        batches.entry(s.batch).or_default().push(s);
                    }
                    let walls: Vec<f64> =
                        batches.values().filter_map(|b| batch_wall_tps(b)).collect();
                    let ok: Vec<&RequestSample> = all.iter().copied().filter(|s| s.ok()).collect();
                    let decode: Vec<f64> = ok.iter().filter_map(|s| s.decode_tps()).collect();
                    SweepSummary {
                        concurrency: c,
                        batches_ok: walls.len(),
                        batches_failed: batches.len() - walls.len(),
                        wall_tps_p50: median(&walls),
                        decode_tps_p50: median(&decode),
                        speedup: None,
                        latency: Latency::of(&ok),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let one = sweep
        .iter()
        .find(|s| s.concurrency == 1)
        .and_then(|s| s.wall_tps_p50);
    for level in &mut sweep {
        level.speedup = ratio(level.wall_tps_p50, one);
    }
    let interference = config
        .interference
        .as_ref()
        .map(|i| summarize_interference(&mine, i.long_prompt_tokens));
    let mut flag_counts: BTreeMap<FlagKind, FlagCount> = BTreeMap::new();
    for flag in mine.iter().flat_map(|s| &s.flags) {
        flag_counts
            .entry(flag.kind)
            .and_modify(|c| c.count += 1)
            .or_insert_with(|| FlagCount {
                kind: flag.kind,
                severity: flag.severity,
                count: 1,
                example: flag.message.clone(),
            });
    }
    let failed: Vec<&RequestSample> = mine.iter().copied().filter(|s| !s.ok()).collect();
    let mut errors: Vec<String> = Vec::new();
    for s in &failed {
        let e = s.error.clone().unwrap_or_default();
        if !errors.contains(&e) && errors.len() < 5 {
            errors.push(e);
        }
    }
    let ok: Vec<&RequestSample> = mine.iter().copied().filter(|s| s.ok()).collect();
    let counted: usize = ok.iter().map(|s| s.tokens).sum();
    let text: usize = ok.iter().map(|s| s.text_tokens).sum();
    TargetSummary {
        target: name.to_owned(),
        requests: mine.len(),
        failed: failed.len(),
        usage_verified: ok
            .iter()
            .filter(|s| s.token_source == TokenSource::Usage)
            .count(),
        text_to_counted: ratio(Some(text as f64), Some(counted as f64)),
        single,
        sweep,
        interference,
        flags: flag_counts.into_values().collect(),
        suspect: mine.iter().any(|s| s.has_mismatch()),
        errors,
    }
}

fn summarize_interference(
    mine: &[&RequestSample],
    long_prompt_tokens: usize,
) -> InterferenceSummary {
    let of_role = |role: Role| -> Vec<&RequestSample> {
        mine.iter()
            .copied()
            .filter(|s| s.scenario == Scenario::Interference && s.role == role && s.ok())
            .collect()
    };
    let ttfts = |v: &[&RequestSample]| -> Vec<f64> { v.iter().filter_map(|s| s.ttft_s).collect() };
    let idle = of_role(Role::IdleProbe);
    let loaded = of_role(Role::LoadedProbe);
    let long = of_role(Role::LongPrompt);
    let mut running_gaps = Vec::new();
    let mut stalls = Vec::new();
    for running in of_role(Role::Running) {
        let Some(long) = long.iter().find(|l| l.batch == running.batch) else {
            continue;
        };
        // Everything on the batch clock (from the batch's first write).
        let times: Vec<f64> = running
            .content_times_s
            .iter()
            .map(|t| running.sent_at_s + t)
            .collect();
        let mut stall: Option<f64> = None;
        for pair in times.windows(2) {
            let gap = pair[1] - pair[0];
            if pair[1] <= long.sent_at_s {
                running_gaps.push(gap);
            } else {
                stall = Some(stall.map_or(gap, |s: f64| s.max(gap)));
            }
        }
        stalls.extend(stall);
    }
    let idle_ttft = median(&ttfts(&idle));
    let loaded_ttft = median(&ttfts(&loaded));
    InterferenceSummary {
        long_prompt_tokens,
        repeats_ok: loaded.len(),
        idle_ttft_p50_s: idle_ttft,
        loaded_ttft_p50_s: loaded_ttft,
        ttft_ratio: ratio(loaded_ttft, idle_ttft),
        long_ttft_p50_s: median(&ttfts(&long)),
        running_itl_p50_s: median(&running_gaps),
        running_stall_p50_s: median(&stalls),
    }
}

fn compare(summaries: &[TargetSummary], baseline: usize) -> Vec<ComparisonRow> {
    if summaries.len() < 2 {
        return Vec::new();
    }
    let mut rows = Vec::new();
    let mut push = |metric: String, higher_is_better: bool, values: Vec<Option<f64>>| {
        let base = values.get(baseline).copied().flatten();
        let ratios = values.iter().map(|v| ratio(*v, base)).collect();
        rows.push(ComparisonRow {
            metric,
            higher_is_better,
            values,
            ratios,
        });
    };
    let first = &summaries[baseline];
    for (i, level) in first.sweep.iter().enumerate() {
        let pick = |f: fn(&SweepSummary) -> Option<f64>| -> Vec<Option<f64>> {
            summaries
                .iter()
                .map(|s| s.sweep.get(i).and_then(f))
                .collect()
        };
        let c = level.concurrency;
        push(
            format!("wall tok/s, {c} parallel"),
            true,
            pick(|s| s.wall_tps_p50),
        );
        if c > 1 {
            push(format!("speed-up, {c} parallel"), true, pick(|s| s.speedup));
        }
        push(
            format!("TTFT p50 (s), {c} parallel"),
            false,
            pick(|s| s.latency.ttft_p50_s),
        );
    }
    for (i, point) in first.single.iter().enumerate() {
        let pick = |f: fn(&SingleSummary) -> Option<f64>| -> Vec<Option<f64>> {
            summaries
                .iter()
                .map(|s| s.single.get(i).and_then(f))
                .collect()
        };
        let n = point.prompt_tokens;
        push(
            format!("TTFT p50 (s), {n}-token prompt"),
            false,
            pick(|s| s.latency.ttft_p50_s),
        );
        push(
            format!("decode tok/s, {n}-token prompt"),
            true,
            pick(|s| s.decode_tps_p50),
        );
    }
    if first.interference.is_some() {
        let pick = |f: fn(&InterferenceSummary) -> Option<f64>| -> Vec<Option<f64>> {
            summaries
                .iter()
                .map(|s| s.interference.as_ref().and_then(f))
                .collect()
        };
        push(
            "short TTFT, loaded / idle".into(),
            false,
            pick(|s| s.ttft_ratio),
        );
        push(
            "running stream stall (s)".into(),
            false,
            pick(|s| s.running_stall_p50_s),
        );
    }
    rows
}

// ---- Markdown -------------------------------------------------------------

fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.decimals$}"))
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(
        || "–".into(),
        |s| {
            let ms = s * 1e3;
            if ms >= 100.0 {
                format!("{ms:.0}")
            } else {
                format!("{ms:.1}")
            }
        },
    )
}

fn times(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.2}x"))
}

fn render_markdown(report: &Report) -> String {
    let c = &report.config;
    let mut md = String::new();
    let _ = writeln!(md, "# hearth bench report\n");
    let _ = writeln!(
        md,
        "- preset: {}; API: `{}`; repeats: {} (+{} warm-up); ignore_eos: {}; seed: {}",
        c.preset
            .map_or("custom".to_owned(), |p| format!("{p:?}").to_lowercase()),
        c.api.path(),
        c.repeats,
        c.warmup,
        c.ignore_eos,
        c.seed
    );
    let _ = writeln!(
        md,
        "- tokenizer: `{}`; token tolerance: ±max({}, {:.0}%)",
        report.tokenizer,
        c.tolerance.absolute,
        c.tolerance.relative * 100.0
    );
    let env = &report.environment;
    let load = match (env.load_average_start, env.load_average_end) {
        (Some(a), Some(b)) => format!("; load average {a:.1} at start, {b:.1} at end"),
        _ => String::new(),
    };
    let _ = writeln!(
        md,
        "- machine: {} {} ({} CPUs{load}); hearth {}; run took {:.0} s; started at unix {}",
        env.os, env.arch, env.cpus, report.hearth_version, report.duration_s, report.started_unix_s
    );
    let _ = writeln!(
        md,
        "- servers run alternately, repeat by repeat; baseline: `{}`\n",
        report.baseline
    );
    let _ = writeln!(md, "| server | URL | model |\n|---|---|---|");
    for t in &report.targets {
        let _ = writeln!(md, "| {} | {} | `{}` |", t.name, t.url, t.model);
    }

    if let Some(sweep) = &c.sweep {
        let _ = writeln!(
            md,
            "\n## Parallel streams (gate-released; {}-token prompts, {} new tokens)\n",
            sweep.prompt_tokens, sweep.max_tokens
        );
        let _ = writeln!(
            md,
            "| server | streams | wall tok/s (p50) | speed-up | decode tok/s per stream | TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) | batches ok |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for s in &report.summaries {
            for level in &s.sweep {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} / {} | {} / {} | {}/{} |",
                    s.target,
                    level.concurrency,
                    num(level.wall_tps_p50, 1),
                    times(level.speedup),
                    num(level.decode_tps_p50, 1),
                    ms(level.latency.ttft_p50_s),
                    ms(level.latency.ttft_p99_s),
                    ms(level.latency.itl_p50_s),
                    ms(level.latency.itl_p99_s),
                    level.batches_ok,
                    level.batches_ok + level.batches_failed
                );
            }
        }
        let doubles: Vec<String> = report
            .summaries
            .iter()
            .filter_map(|s| {
                s.double_speedup()
                    .map(|d| format!("{} {}", s.target, times(Some(d))))
            })
            .collect();
        if !doubles.is_empty() {
            let _ = writeln!(md, "\n**double** (2 streams vs 1): {}", doubles.join(", "));
        }
    }

    if let Some(single) = &c.single {
        let _ = writeln!(
            md,
            "\n## Single requests (sequential; {} new tokens)\n",
            single.max_tokens
        );
        let _ = writeln!(
            md,
            "| server | prompt tokens | TTFT p50 / p99 (ms) | prefill tok/s | decode tok/s | wall tok/s | ITL p50 / p99 (ms) | ok |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for s in &report.summaries {
            for p in &s.single {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} / {} | {} | {} | {} | {} / {} | {}/{} |",
                    s.target,
                    p.prompt_tokens,
                    ms(p.latency.ttft_p50_s),
                    ms(p.latency.ttft_p99_s),
                    num(p.prefill_tps_p50, 0),
                    num(p.decode_tps_p50, 1),
                    num(p.wall_tps_p50, 1),
                    ms(p.latency.itl_p50_s),
                    ms(p.latency.itl_p99_s),
                    p.ok,
                    p.ok + p.failed
                );
            }
        }
    }

    if let Some(i) = &c.interference {
        let _ = writeln!(
            md,
            "\n## Long prompt interference ({}-token prompt arrives while one stream decodes; a {}-token probe follows {} ms later)\n",
            i.long_prompt_tokens, i.short_prompt_tokens, i.probe_delay_ms
        );
        let _ = writeln!(
            md,
            "| server | probe TTFT idle (ms) | probe TTFT loaded (ms) | loaded / idle | long TTFT (ms) | running ITL p50 (ms) | running stall (ms) |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
        for s in &report.summaries {
            if let Some(x) = &s.interference {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    s.target,
                    ms(x.idle_ttft_p50_s),
                    ms(x.loaded_ttft_p50_s),
                    times(x.ttft_ratio),
                    ms(x.long_ttft_p50_s),
                    ms(x.running_itl_p50_s),
                    ms(x.running_stall_p50_s)
                );
            }
        }
    }

    if !report.comparison.is_empty() {
        let _ = writeln!(md, "\n## Against `{}`\n", report.baseline);
        let mut header = String::from("| metric | better |");
        let mut rule = String::from("|---|:-:|");
        for t in &report.targets {
            let _ = write!(header, " {} |", t.name);
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{header}\n{rule}");
        for row in &report.comparison {
            let _ = write!(
                md,
                "| {} | {} |",
                row.metric,
                if row.higher_is_better { "↑" } else { "↓" }
            );
            for (i, (v, r)) in row.values.iter().zip(&row.ratios).enumerate() {
                let decimals = if row.metric.starts_with("TTFT") || row.metric.contains("(s)") {
                    3
                } else {
                    2
                };
                if report.targets[i].name == report.baseline {
                    let _ = write!(md, " {} |", num(*v, decimals));
                } else {
                    let _ = write!(md, " {} ({}) |", num(*v, decimals), times(*r));
                }
            }
            md.push('\n');
        }
    }

    let _ = writeln!(md, "\n## Token accounting\n");
    let _ = writeln!(
        md,
        "Generated tokens are counted from the received text with the model's tokenizer (whole text: a lower bound for text the tokenizer would produce; event by event: an upper bound). \
         The server's `usage` is used only when it falls within those bounds, or below the whole text but confirmed by one content event per token (the smaller count); content events are checked against the count (docs/bench.md).\n"
    );
    for s in &report.summaries {
        let verdict = if s.suspect {
            "**MISMATCH: its tok/s may be wrong**"
        } else if s.flags.is_empty() {
            "all counts agree"
        } else {
            "counts agree (notes below)"
        };
        let _ = writeln!(
            md,
            "- **{}**: {} requests, {} failed; usage confirmed by the text for {}; \
             whole text re-encodes to {} of the counted tokens; {}",
            s.target,
            s.requests,
            s.failed,
            s.usage_verified,
            s.text_to_counted
                .map_or("–".to_owned(), |r| format!("{:.0}%", r * 100.0)),
            verdict
        );
        for f in &s.flags {
            let _ = writeln!(
                md,
                "  - {:?} `{:?}` ×{}: {}",
                f.severity, f.kind, f.count, f.example
            );
        }
        for e in &s.errors {
            let _ = writeln!(md, "  - error: {e}");
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(batch: usize, sent: f64, end: f64, tokens: usize, times: &[f64]) -> RequestSample {
        RequestSample {
            target: "t".into(),
            scenario: Scenario::Sweep,
            role: Role::Request,
            concurrency: 2,
            repeat: 0,
            stream: 0,
            batch,
            prompt_tokens: 10,
            max_tokens: tokens,
            sent_at_s: sent,
            ttft_s: times.first().copied(),
            end_s: Some(end),
            content_times_s: times.to_vec(),
            sse_events: times.len(),
            tokens,
            token_source: TokenSource::Usage,
            text_tokens: tokens,
            event_tokens: tokens,
            text_bytes: tokens * 4,
            usage_prompt_tokens: Some(20),
            usage_completion_tokens: Some(tokens as u64),
            finish_reason: Some("length".into()),
            done_marker: true,
            error: None,
            flags: vec![],
        }
    }

    #[test]
    fn per_request_rates() {
        let s = sample(0, 0.0, 2.0, 5, &[0.5, 0.75, 1.0, 1.25, 1.5]);
        assert_eq!(s.decode_tps(), Some(4.0));
        assert_eq!(s.prefill_tps(), Some(40.0)); // usage prompt tokens / TTFT
        assert_eq!(s.wall_tps(), Some(2.5));
        assert_eq!(s.inter_token_gaps().collect::<Vec<_>>(), [0.25; 4]);
        let one = sample(0, 0.0, 1.0, 5, &[0.5]);
        assert_eq!(one.decode_tps(), None, "one event: no decode rate");
    }

    #[test]
    fn batch_wall_uses_first_write_to_last_end() {
        let a = sample(0, 0.0, 2.0, 10, &[0.1, 2.0]);
        let b = sample(0, 0.01, 3.99, 10, &[0.1, 3.9]);
        assert_eq!(batch_wall_tps(&[&a, &b]), Some(5.0));
        let mut failed = b.clone();
        failed.error = Some("x".into());
        assert_eq!(batch_wall_tps(&[&a, &failed]), None);
    }
}
