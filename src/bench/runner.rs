//! Runs the scenarios against every target, alternating between targets.
//!
//! Order of work: for each repeat, for each scenario point (single prompt
//! lengths, then concurrency levels, then interference), every target in
//! turn — forwards on even repeats, backwards on odd ones — so a slow phase
//! of the machine (another build, thermal throttling) hits all servers alike
//! and no server is always first. Identical request slots get identical
//! prompts on every server; different slots never share a prefix.
//!
//! Gated batches: every request of a batch first opens its connection, then
//! all wait on one [`Barrier`]; when the last one is connected they are
//! written back to back. The batch clock starts at the first write.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Barrier};

use super::{
    check::{cross_check, Expectation, Severity, TextCounts},
    config::{BenchConfig, Target},
    error::{BenchError, RequestError},
    http::{connect, BaseUrl},
    prompt::{PromptBuilder, TokenCounter},
    report::{RequestSample, Role, Scenario, TargetInfo},
    request::{stream_completion, CompletionRequest, StreamRecord},
};

/// Progress of a run, for CLIs and UIs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Steps finished so far (a step is one scenario point on one target).
    pub done: usize,
    pub total: usize,
    pub target: String,
    pub scenario: Scenario,
    /// What the step is, e.g. `4 parallel` or `1024-token prompt`.
    pub step: String,
    pub repeat: usize,
    /// False when the step starts, true when it has finished.
    pub finished: bool,
    /// One-line result of a finished step.
    pub result: String,
}

/// A target after probing: where it is, what model id to send.
pub(crate) struct ResolvedTarget {
    pub info: TargetInfo,
    pub base: BaseUrl,
}

/// Probe `target` (`GET /v1/models`) and settle its model id: the one given,
/// else the first listed id that is a local folder, else the first listed,
/// else `default`.
pub(crate) async fn resolve_target(
    target: &Target,
    api_key: Option<&str>,
) -> Result<ResolvedTarget, BenchError> {
    let fail = |message: String| BenchError::Target {
        target: target.name.clone(),
        url: target.url.clone(),
        message,
    };
    let base = BaseUrl::parse(&target.url).map_err(&fail)?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let mut request = client.get(base.endpoint("/v1/models"));
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request
        .send()
        .await
        .map_err(|e| fail(format!("not reachable: {e}")))?;
    let listed: Vec<String> = if response.status().is_success() {
        response
            .json::<serde_json::Value>()
            .await
            .ok()
            .and_then(|v| v.get("data").and_then(|d| d.as_array()).cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m.get("id").and_then(|i| i.as_str()).map(str::to_owned))
            .collect()
    } else {
        Vec::new()
    };
    let model = target
        .model
        .clone()
        .or_else(|| {
            listed
                .iter()
                .find(|id| std::path::Path::new(id).join("tokenizer.json").is_file())
                .cloned()
        })
        .or_else(|| listed.first().cloned())
        .unwrap_or_else(|| "default".to_owned());
    Ok(ResolvedTarget {
        info: TargetInfo {
            name: target.name.clone(),
            url: base.url.clone(),
            model,
        },
        base,
    })
}

/// One scenario point within a repeat.
#[derive(Debug, Clone, Copy)]
enum Point {
    Single { prompt_tokens: usize },
    Sweep { concurrency: usize },
    Interference,
}

impl Point {
    fn describe(self, config: &BenchConfig) -> (Scenario, String) {
        match self {
            Point::Single { prompt_tokens } => {
                (Scenario::Single, format!("{prompt_tokens}-token prompt"))
            }
            Point::Sweep { concurrency } => (Scenario::Sweep, format!("{concurrency} parallel")),
            Point::Interference => (
                Scenario::Interference,
                format!(
                    "{}-token prompt vs short requests",
                    config
                        .interference
                        .as_ref()
                        .map_or(0, |i| i.long_prompt_tokens)
                ),
            ),
        }
    }
}

/// One request of a batch: what to send and how to label it.
struct Slot {
    role: Role,
    prompt_tokens: usize,
    max_tokens: usize,
    seed: u64,
}

type ProgressFn<'a> = dyn Fn(Progress) + Send + Sync + 'a;

pub(crate) struct Runner<'a> {
    config: &'a BenchConfig,
    targets: &'a [ResolvedTarget],
    counter: &'a TokenCounter,
    progress: &'a ProgressFn<'a>,
    prompts: Mutex<HashMap<(usize, u64), Arc<String>>>,
    samples: Vec<RequestSample>,
    batches: usize,
    done: usize,
    total: usize,
}

impl<'a> Runner<'a> {
    pub fn new(
        config: &'a BenchConfig,
        targets: &'a [ResolvedTarget],
        counter: &'a TokenCounter,
        progress: &'a ProgressFn<'a>,
    ) -> Self {
        Self {
            config,
            targets,
            counter,
            progress,
            prompts: Mutex::new(HashMap::new()),
            samples: Vec::new(),
            batches: 0,
            done: 0,
            total: 0,
        }
    }

    fn points(&self) -> Vec<Point> {
        let mut points = Vec::new();
        if let Some(single) = &self.config.single {
            points.extend(
                single
                    .prompt_tokens
                    .iter()
                    .map(|&prompt_tokens| Point::Single { prompt_tokens }),
            );
        }
        if let Some(sweep) = &self.config.sweep {
            let mut levels = sweep.concurrency.clone();
            if !levels.contains(&1) {
                levels.push(1); // speed-ups need the single-stream reference
            }
            levels.sort_unstable();
            levels.dedup();
            points.extend(
                levels
                    .into_iter()
                    .map(|concurrency| Point::Sweep { concurrency }),
            );
        }
        if self.config.interference.is_some() {
            points.push(Point::Interference);
        }
        points
    }

    /// Run everything; returns the samples.
    pub async fn run(mut self) -> Result<Vec<RequestSample>, BenchError> {
        let points = self.points();
        let config = self.config;
        self.total = self.targets.len() * (config.warmup.min(1) + config.repeats * points.len());
        // Build every prompt up front: tokenizing 50k-token prompts must not
        // happen between the requests of a batch.
        self.prepare_prompts(&points)?;
        if config.warmup > 0 {
            for target in 0..self.targets.len() {
                self.report_start(target, Scenario::Warmup, "warm-up".into(), 0);
                let first = self.samples.len();
                for i in 0..config.warmup {
                    let slot = Slot {
                        role: Role::Request,
                        prompt_tokens: self.warmup_prompt_tokens(),
                        max_tokens: 8,
                        seed: self.seed(0, 0, usize::MAX - i, 0),
                    };
                    self.run_batch(target, Scenario::Warmup, 0, vec![slot])
                        .await?;
                }
                let result = describe_result(&self.samples[first..]);
                self.report_done(target, Scenario::Warmup, "warm-up".into(), 0, result);
            }
        }
        for repeat in 0..config.repeats {
            for point in &points {
                let mut order: Vec<usize> = (0..self.targets.len()).collect();
                if repeat % 2 == 1 {
                    order.reverse();
                }
                for target in order {
                    self.run_point(target, *point, repeat).await?;
                }
            }
        }
        Ok(self.samples)
    }

    fn warmup_prompt_tokens(&self) -> usize {
        self.config
            .sweep
            .as_ref()
            .map(|s| s.prompt_tokens)
            .unwrap_or(32)
            .min(64)
    }

    /// Seed of one request slot: same on every target, distinct otherwise.
    fn seed(&self, kind: u64, value: usize, repeat: usize, stream: usize) -> u64 {
        let mut h = self.config.seed ^ 0x9E37_79B9_7F4A_7C15;
        for part in [kind, value as u64, repeat as u64, stream as u64] {
            h = (h ^ part).wrapping_mul(0x0100_0000_01B3).rotate_left(29);
            h ^= h >> 31;
        }
        h
    }

    fn slots(&self, point: Point, repeat: usize) -> Result<Vec<Slot>, BenchError> {
        Ok(match point {
            Point::Single { prompt_tokens } => vec![Slot {
                role: Role::Request,
                prompt_tokens,
                max_tokens: self.config.single.as_ref().map_or(1, |s| s.max_tokens),
                seed: self.seed(1, prompt_tokens, repeat, 0),
            }],
            Point::Sweep { concurrency } => {
                let sweep = self.config.sweep.as_ref().ok_or_else(|| missing("sweep"))?;
                (0..concurrency)
                    .map(|stream| Slot {
                        role: Role::Request,
                        prompt_tokens: sweep.prompt_tokens,
                        max_tokens: sweep.max_tokens,
                        seed: self.seed(2, concurrency, repeat, stream),
                    })
                    .collect()
            }
            Point::Interference => {
                let i = self
                    .config
                    .interference
                    .as_ref()
                    .ok_or_else(|| missing("interference"))?;
                let slot = |role, prompt_tokens, max_tokens, stream| Slot {
                    role,
                    prompt_tokens,
                    max_tokens,
                    seed: self.seed(3, i.long_prompt_tokens, repeat, stream),
                };
                vec![
                    slot(
                        Role::IdleProbe,
                        i.short_prompt_tokens,
                        i.short_max_tokens,
                        0,
                    ),
                    slot(
                        Role::Running,
                        i.short_prompt_tokens,
                        i.running_max_tokens,
                        1,
                    ),
                    slot(
                        Role::LongPrompt,
                        i.long_prompt_tokens,
                        i.short_max_tokens,
                        2,
                    ),
                    slot(
                        Role::LoadedProbe,
                        i.short_prompt_tokens,
                        i.short_max_tokens,
                        3,
                    ),
                ]
            }
        })
    }

    fn prepare_prompts(&self, points: &[Point]) -> Result<(), BenchError> {
        for repeat in 0..self.config.repeats {
            for point in points {
                for slot in self.slots(*point, repeat)? {
                    self.prompt(slot.prompt_tokens, slot.seed)?;
                }
            }
        }
        Ok(())
    }

    fn prompt(&self, tokens: usize, seed: u64) -> Result<Arc<String>, BenchError> {
        let mut cache = self
            .prompts
            .lock()
            .map_err(|_| BenchError::Config("the prompt cache was poisoned by a panic".into()))?;
        if let Some(p) = cache.get(&(tokens, seed)) {
            return Ok(p.clone());
        }
        let text = Arc::new(PromptBuilder::new(self.counter).build(tokens, seed)?);
        cache.insert((tokens, seed), text.clone());
        Ok(text)
    }

    fn report_start(&self, target: usize, scenario: Scenario, step: String, repeat: usize) {
        (self.progress)(Progress {
            done: self.done,
            total: self.total,
            target: self.targets[target].info.name.clone(),
            scenario,
            step,
            repeat,
            finished: false,
            result: String::new(),
        });
    }

    fn report_done(
        &mut self,
        target: usize,
        scenario: Scenario,
        step: String,
        repeat: usize,
        result: String,
    ) {
        self.done += 1;
        (self.progress)(Progress {
            done: self.done,
            total: self.total,
            target: self.targets[target].info.name.clone(),
            scenario,
            step,
            repeat,
            finished: true,
            result,
        });
    }

    async fn run_point(
        &mut self,
        target: usize,
        point: Point,
        repeat: usize,
    ) -> Result<(), BenchError> {
        let (scenario, step) = point.describe(self.config);
        self.report_start(target, scenario, step.clone(), repeat);
        let slots = self.slots(point, repeat)?;
        let first = self.samples.len();
        match point {
            Point::Single { .. } | Point::Sweep { .. } => {
                self.run_batch(target, scenario, repeat, slots).await?;
            }
            Point::Interference => self.run_interference(target, repeat, slots).await?,
        }
        let result = describe_result(&self.samples[first..]);
        self.report_done(target, scenario, step, repeat, result);
        Ok(())
    }

    /// Connect all, open the gate, stream all; append the samples.
    async fn run_batch(
        &mut self,
        target: usize,
        scenario: Scenario,
        repeat: usize,
        slots: Vec<Slot>,
    ) -> Result<(), BenchError> {
        let (config, targets) = (self.config, self.targets);
        let resolved = &targets[target];
        let gate = Barrier::new(slots.len());
        let timeout = Duration::from_secs_f64(config.request_timeout_s);
        let api_key = config.api_key.as_deref();
        let mut prompts = Vec::with_capacity(slots.len());
        for slot in &slots {
            prompts.push(self.prompt(slot.prompt_tokens, slot.seed)?);
        }
        let requests = slots.iter().zip(&prompts).map(|(slot, prompt)| {
            let gate = &gate;
            let request = CompletionRequest {
                api: config.api,
                model: &resolved.info.model,
                prompt: prompt.as_str(),
                max_tokens: slot.max_tokens,
                ignore_eos: config.ignore_eos,
            }
            .prepare();
            async move {
                let connection = connect(&resolved.base, api_key, timeout).await;
                gate.wait().await;
                match connection {
                    Ok(connection) => {
                        stream_completion(connection, request, api_key, timeout, |_| {}).await
                    }
                    Err(e) => (Instant::now(), failed_record(e)),
                }
            }
        });
        let results = join_all(requests).await;
        self.record_batch(target, scenario, repeat, &slots, results)
    }

    /// Idle probe alone; then a running stream, the long prompt once it is
    /// decoding, and a probe `probe_delay_ms` after the long prompt.
    async fn run_interference(
        &mut self,
        target: usize,
        repeat: usize,
        mut slots: Vec<Slot>,
    ) -> Result<(), BenchError> {
        let loaded = slots.split_off(1);
        self.run_batch(target, Scenario::Interference, repeat, slots)
            .await?;
        let (bench, targets) = (self.config, self.targets);
        let config = bench
            .interference
            .as_ref()
            .ok_or_else(|| missing("interference"))?;
        let resolved = &targets[target];
        let timeout = Duration::from_secs_f64(bench.request_timeout_s);
        let api_key = bench.api_key.as_deref();
        let mut prompts = Vec::new();
        for slot in &loaded {
            prompts.push(self.prompt(slot.prompt_tokens, slot.seed)?);
        }
        let request = |i: usize| {
            CompletionRequest {
                api: bench.api,
                model: &resolved.info.model,
                prompt: prompts[i].as_str(),
                max_tokens: loaded[i].max_tokens,
                ignore_eos: bench.ignore_eos,
            }
            .prepare()
        };
        let (running_request, long_request, probe_request) = (request(0), request(1), request(2));
        // All three connections exist before anything is sent.
        let connections = join_all((0..3).map(|_| connect(&resolved.base, api_key, timeout))).await;
        let [running_conn, long_conn, probe_conn]: [_; 3] = connections
            .try_into()
            .map_err(|_| BenchError::Config("expected three connections".into()))?;
        let (warm_tx, warm_rx) = oneshot::channel::<()>();
        let mut warm_tx = Some(warm_tx);
        let warm_chunks = config.running_warm_chunks.max(1);
        let running = async {
            match running_conn {
                Ok(c) => {
                    stream_completion(c, running_request, api_key, timeout, |n| {
                        if n >= warm_chunks {
                            if let Some(tx) = warm_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                    })
                    .await
                }
                Err(e) => (Instant::now(), failed_record(e)),
            }
        };
        let followers = async {
            // Proceeds when the running stream is warm, or has ended/failed.
            let _ = tokio::time::timeout(timeout, warm_rx).await;
            let long = async {
                match long_conn {
                    Ok(c) => stream_completion(c, long_request, api_key, timeout, |_| {}).await,
                    Err(e) => (Instant::now(), failed_record(e)),
                }
            };
            let probe = async {
                tokio::time::sleep(Duration::from_millis(config.probe_delay_ms)).await;
                match probe_conn {
                    Ok(c) => stream_completion(c, probe_request, api_key, timeout, |_| {}).await,
                    Err(e) => (Instant::now(), failed_record(e)),
                }
            };
            tokio::join!(long, probe)
        };
        let (running, (long, probe)) = tokio::join!(running, followers);
        self.record_batch(
            target,
            Scenario::Interference,
            repeat,
            &loaded,
            vec![running, long, probe],
        )
    }

    /// Turn a batch's records into samples: tokenize, cross-check, label.
    fn record_batch(
        &mut self,
        target: usize,
        scenario: Scenario,
        repeat: usize,
        slots: &[Slot],
        results: Vec<(Instant, StreamRecord)>,
    ) -> Result<(), BenchError> {
        let batch = self.batches;
        self.batches += 1;
        let start = results
            .iter()
            .map(|(sent, _)| *sent)
            .min()
            .unwrap_or_else(Instant::now);
        let concurrency = if scenario == Scenario::Interference {
            1
        } else {
            slots.len()
        };
        for (stream, (slot, (sent, record))) in slots.iter().zip(results).enumerate() {
            let counts =
                TextCounts::measure(&record.text, &record.pieces, |t| self.counter.count(t))?;
            let checked = cross_check(
                &record,
                counts,
                &Expectation {
                    api: self.config.api,
                    prompt_tokens: slot.prompt_tokens,
                    max_tokens: slot.max_tokens,
                    tolerance: self.config.tolerance,
                    policy: self.config.count,
                },
            );
            // A failed request keeps its partial counts but no flags: its
            // error says what happened.
            let flags = if record.error.is_none() {
                checked.flags
            } else {
                Vec::new()
            };
            let content_times_s: Vec<f64> =
                record.content_times.iter().map(|d| micros(*d)).collect();
            self.samples.push(RequestSample {
                target: self.targets[target].info.name.clone(),
                scenario,
                role: slot.role,
                concurrency,
                repeat,
                stream,
                batch,
                prompt_tokens: slot.prompt_tokens,
                max_tokens: slot.max_tokens,
                sent_at_s: micros(sent.saturating_duration_since(start)),
                ttft_s: content_times_s.first().copied(),
                end_s: record.end.map(micros),
                content_times_s,
                sse_events: record.events,
                tokens: checked.tokens,
                token_source: checked.source,
                text_tokens: counts.whole,
                event_tokens: counts.per_event,
                text_bytes: record.text.len(),
                usage_prompt_tokens: record.usage_prompt_tokens,
                usage_completion_tokens: record.usage_completion_tokens,
                finish_reason: record.finish_reason,
                done_marker: record.done_marker,
                error: record.error.map(|e| e.to_string()),
                flags,
            });
        }
        Ok(())
    }
}

/// Seconds, rounded to the microsecond (keeps the JSON report compact;
/// the clock is no finer than that in practice).
fn micros(d: Duration) -> f64 {
    d.as_micros() as f64 / 1e6
}

fn failed_record(error: RequestError) -> StreamRecord {
    StreamRecord {
        error: Some(error),
        end: Some(Duration::ZERO),
        ..Default::default()
    }
}

/// A one-line result for progress output.
fn describe_result(samples: &[RequestSample]) -> String {
    let ttft_ms = |role: Role| {
        samples
            .iter()
            .find(|s| s.role == role)
            .and_then(|s| s.ttft_s)
            .map_or("–".to_owned(), |t| format!("{:.0} ms", t * 1e3))
    };
    let failed: Vec<&RequestSample> = samples.iter().filter(|s| !s.ok()).collect();
    if let Some(first) = failed.first() {
        return format!(
            "{} of {} failed: {}",
            failed.len(),
            samples.len(),
            first.error.as_deref().unwrap_or_default()
        );
    }
    if samples.iter().any(|s| s.role == Role::LoadedProbe) {
        return format!(
            "probe TTFT idle {}, during long prefill {}; long prompt TTFT {}",
            ttft_ms(Role::IdleProbe),
            ttft_ms(Role::LoadedProbe),
            ttft_ms(Role::LongPrompt)
        );
    }
    let refs: Vec<&RequestSample> = samples.iter().collect();
    let tokens: usize = samples.iter().map(|s| s.tokens()).sum();
    let ttft = samples
        .iter()
        .filter_map(|s| s.ttft_s)
        .fold(f64::NAN, f64::min);
    let mut line = format!(
        "{tokens} tokens, {:.1} tok/s wall, first TTFT {:.0} ms",
        super::report::batch_wall_tps(&refs).unwrap_or(0.0),
        ttft * 1e3
    );
    let count = |severity: Severity| {
        samples
            .iter()
            .flat_map(|s| &s.flags)
            .filter(|f| f.severity == severity)
            .count()
    };
    for (severity, label) in [
        (Severity::Mismatch, "COUNT MISMATCH"),
        (Severity::Warning, "warning"),
    ] {
        let n = count(severity);
        if n > 0 {
            line.push_str(&format!(", {n} {label} flag(s)"));
        }
    }
    line
}

/// A scenario point was scheduled without its configuration section.
fn missing(section: &str) -> BenchError {
    BenchError::Config(format!(
        "a {section} point was scheduled without a {section} configuration"
    ))
}
