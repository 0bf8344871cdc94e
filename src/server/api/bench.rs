//! The Benchmark page's endpoints: one click runs the `hearth bench`
//! harness ([`crate::bench::run_with_progress`], quick preset by default)
//! in-process against this very server, progress is polled, finished reports
//! are kept as JSON files in `$HEARTH_HOME/bench-runs/` (the history) and
//! exported as JSON, Markdown ([`crate::bench::Report::to_markdown`]) or one
//! self-contained HTML file ([`crate::webui::report_html`]).
//!
//! One run at a time: a second `POST /api/bench` while one runs is a 409.
//! The harness counts tokens with the served model's own tokenizer (saved as
//! `tokenizer.json` into a scratch folder, so GGUF models work too).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use axum::{
    body::Bytes,
    extract::{Path as UrlPath, State},
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::{Deserialize, Serialize};

use super::not_found;
use crate::{
    bench::{BenchConfig, Preset, Progress, Report, Target},
    server::{error::ApiError, extract::parse_json, state::AppState},
};

/// The run in progress (or the last one, until the next starts).
#[derive(Debug, Clone, Serialize)]
pub struct CurrentRun {
    pub id: String,
    pub started_unix_s: u64,
    /// The latest progress event of the harness.
    pub progress: Option<Progress>,
    /// `running`, `done`, `failed` or `cancelled`.
    pub state: &'static str,
    pub error: Option<String>,
    #[serde(skip)]
    abort: Option<tokio::task::AbortHandle>,
}

/// Runs and their stored reports.
pub struct BenchRuns {
    dir: PathBuf,
    current: Mutex<Option<CurrentRun>>,
}

/// `POST /api/bench` body: a preset and optional overrides (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// `quick` (default) or `full`.
    pub preset: Option<String>,
    pub repeats: Option<usize>,
    pub warmup: Option<usize>,
    /// Prompt lengths of the `single` scenario.
    pub prompt_lengths: Option<Vec<usize>>,
    /// Concurrency levels of the sweep.
    pub concurrency: Option<Vec<usize>>,
    /// Tokens generated per request (single and sweep).
    pub max_tokens: Option<usize>,
    /// Long prompt of the interference scenario.
    pub long_prompt_tokens: Option<usize>,
    /// Subset of `single`, `sweep`, `interference`.
    pub scenarios: Option<Vec<String>>,
}

/// One line of the history.
#[derive(Debug, Clone, Serialize)]
pub struct RunListing {
    pub id: String,
    pub started_unix_s: u64,
    pub duration_s: f64,
    pub model: String,
    pub preset: Option<Preset>,
    pub requests: usize,
    pub failed: usize,
    /// Best aggregate tok/s of the sweep.
    pub best_wall_tps: Option<f64>,
    /// Single-stream decode tok/s at the shortest prompt.
    pub decode_tps: Option<f64>,
    pub suspect: bool,
}

#[derive(Debug, Serialize)]
pub struct Overview {
    pub current: Option<CurrentRun>,
    pub runs: Vec<RunListing>,
}

impl BenchRuns {
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            current: Mutex::new(None),
        }
    }

    fn current(&self) -> Option<CurrentRun> {
        self.current.lock().ok()?.clone()
    }

    fn update(&self, id: &str, f: impl FnOnce(&mut CurrentRun)) {
        if let Ok(mut current) = self.current.lock() {
            if let Some(run) = current.as_mut().filter(|r| r.id == id) {
                f(run);
            }
        }
    }

    fn report_path(&self, id: &str) -> Option<PathBuf> {
        let valid = !id.is_empty()
            && id.len() <= 64
            && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        valid.then(|| self.dir.join(format!("{id}.json")))
    }

    fn load(&self, id: &str) -> Result<Report, ApiError> {
        let path = self
            .report_path(id)
            .ok_or_else(|| not_found(&format!("The benchmark run `{id}`")))?;
        let text = std::fs::read_to_string(&path)
            .map_err(|_| not_found(&format!("The benchmark run `{id}`")))?;
        serde_json::from_str(&text)
            .map_err(|e| ApiError::internal(format!("The stored report `{id}` is unreadable: {e}")))
    }

    fn save(&self, id: &str, report: &Report) -> Result<(), String> {
        let path = self.report_path(id).ok_or("bad run id")?;
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let json = serde_json::to_vec(report).map_err(|e| e.to_string())?;
        std::fs::write(&path, json).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Stored runs, newest first (unreadable files are skipped).
    pub fn list(&self) -> Vec<RunListing> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut runs: Vec<RunListing> = entries
            .flatten()
            .filter_map(|e| {
                let path = e.path();
                let id = path
                    .file_name()?
                    .to_str()?
                    .strip_suffix(".json")?
                    .to_owned();
                let report: Report = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
                Some(listing(id, &report))
            })
            .collect();
        runs.sort_by(|a, b| {
            b.started_unix_s
                .cmp(&a.started_unix_s)
                .then(b.id.cmp(&a.id))
        });
        runs
    }
}

fn listing(id: String, report: &Report) -> RunListing {
    let summary = report.summaries.first();
    RunListing {
        id,
        started_unix_s: report.started_unix_s,
        duration_s: report.duration_s,
        model: report
            .targets
            .first()
            .map(|t| t.model.clone())
            .unwrap_or_default(),
        preset: report.config.preset,
        requests: summary.map_or(0, |s| s.requests),
        failed: summary.map_or(0, |s| s.failed),
        best_wall_tps: summary.and_then(|s| {
            s.sweep
                .iter()
                .filter_map(|p| p.wall_tps_p50)
                .fold(None, |best: Option<f64>, v| {
                    Some(best.map_or(v, |b| b.max(v)))
                })
        }),
        decode_tps: summary
            .and_then(|s| s.single.first())
            .and_then(|s| s.decode_tps_p50),
        suspect: summary.is_some_and(|s| s.suspect),
    }
}

/// `GET /api/bench`: the current run and the history.
pub async fn overview(State(state): State<Arc<AppState>>) -> Json<Overview> {
    let runs = state.ui.bench.list();
    Json(Overview {
        current: state.ui.bench.current(),
        runs,
    })
}

/// The harness configuration for `request` against `url`.
pub fn build_config(
    request: &StartRequest,
    url: &str,
    tokenizer: &Path,
) -> Result<BenchConfig, ApiError> {
    let preset = match request.preset.as_deref().unwrap_or("quick") {
        "quick" => Preset::Quick,
        "full" => Preset::Full,
        other => {
            return Err(ApiError::invalid_param(
                "preset",
                format!("Unknown preset `{other}`; expected `quick` or `full`."),
            ))
        }
    };
    let target = Target::parse(&format!("hearth={url}"), "hearth")
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut config = BenchConfig::preset(preset, vec![target]);
    config.tokenizer = Some(tokenizer.to_path_buf());
    if let Some(repeats) = request.repeats {
        config.repeats = repeats;
    }
    if let Some(warmup) = request.warmup {
        config.warmup = warmup;
    }
    if let Some(lengths) = &request.prompt_lengths {
        if let Some(single) = config.single.as_mut() {
            single.prompt_tokens = lengths.clone();
        }
    }
    if let Some(levels) = &request.concurrency {
        if let Some(sweep) = config.sweep.as_mut() {
            let mut levels = levels.clone();
            levels.push(1);
            levels.sort_unstable();
            levels.dedup();
            sweep.concurrency = levels;
        }
    }
    if let Some(max_tokens) = request.max_tokens {
        if let Some(single) = config.single.as_mut() {
            single.max_tokens = max_tokens;
        }
        if let Some(sweep) = config.sweep.as_mut() {
            sweep.max_tokens = max_tokens;
        }
    }
    if let Some(long) = request.long_prompt_tokens {
        if let Some(interference) = config.interference.as_mut() {
            interference.long_prompt_tokens = long;
        }
    }
    if let Some(scenarios) = &request.scenarios {
        for name in scenarios {
            if !matches!(name.as_str(), "single" | "sweep" | "interference") {
                return Err(ApiError::invalid_param(
                    "scenarios",
                    format!("Unknown scenario `{name}`; expected single, sweep or interference."),
                ));
            }
        }
        let wants = |name: &str| scenarios.iter().any(|s| s == name);
        if !wants("single") {
            config.single = None;
        }
        if !wants("sweep") {
            config.sweep = None;
        }
        if !wants("interference") {
            config.interference = None;
        }
    }
    config
        .validate()
        .map_err(|e| ApiError::invalid(format!("Invalid benchmark settings: {e}")))?;
    Ok(config)
}

/// `POST /api/bench`: starts a run; 202 with the run, 409 while one runs.
pub async fn start(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response, ApiError> {
    state.check_accepting()?;
    // An empty body means "the quick preset as it is".
    let request: StartRequest = if body.iter().all(u8::is_ascii_whitespace) {
        StartRequest::default()
    } else {
        parse_json(&body)?
    };
    let addr = state
        .ui
        .local_addr()
        .ok_or_else(|| ApiError::internal("The server's address is not known yet."))?;
    let host = if addr.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        addr.ip().to_string()
    };
    let url = if addr.is_ipv6() && !addr.ip().is_unspecified() {
        format!("http://[{host}]:{}", addr.port())
    } else {
        format!("http://{host}:{}", addr.port())
    };
    let scratch = std::env::temp_dir().join(format!("hearth-bench-{}", std::process::id()));
    let tokenizer_dir = scratch.clone();
    let tokenizer = state.scheduler.tokenizer().clone();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&tokenizer_dir).map_err(|e| e.to_string())?;
        tokenizer.save_hf(&tokenizer_dir).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| ApiError::internal(format!("Saving the tokenizer failed: {e}")))?
    .map_err(|e| ApiError::internal(format!("Saving the tokenizer failed: {e}")))?;
    let config = build_config(&request, &url, &scratch.join("tokenizer.json"))?;

    let id = format!(
        "{}-{}",
        super::super::state::unix_now(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let run = CurrentRun {
        id: id.clone(),
        started_unix_s: super::super::state::unix_now(),
        progress: None,
        state: "running",
        error: None,
        abort: None,
    };
    {
        let mut current = state
            .ui
            .bench
            .current
            .lock()
            .map_err(|_| ApiError::internal("The benchmark state is poisoned."))?;
        if current.as_ref().is_some_and(|r| r.state == "running") {
            let mut e =
                ApiError::invalid("A benchmark is already running; wait for it or cancel it.");
            e.status = StatusCode::CONFLICT;
            e.code = Some("bench_running");
            return Err(e);
        }
        *current = Some(run.clone());
    }
    let task_state = state.clone();
    let task_id = id.clone();
    let task = tokio::spawn(async move {
        let progress_state = task_state.clone();
        let progress_id = task_id.clone();
        let result = crate::bench::run_with_progress(config, move |p| {
            progress_state
                .ui
                .bench
                .update(&progress_id, |run| run.progress = Some(p));
        })
        .await;
        let outcome = match result {
            Ok(report) => task_state.ui.bench.save(&task_id, &report),
            Err(e) => Err(e.to_string()),
        };
        task_state.ui.bench.update(&task_id, |run| match outcome {
            Ok(()) => run.state = "done",
            Err(e) => {
                run.state = "failed";
                run.error = Some(e);
            }
        });
    });
    state
        .ui
        .bench
        .update(&id, |run| run.abort = Some(task.abort_handle()));
    Ok((StatusCode::ACCEPTED, Json(run)).into_response())
}

/// `DELETE /api/bench/current`: cancels the running benchmark.
pub async fn cancel(State(state): State<Arc<AppState>>) -> Result<Json<CurrentRun>, ApiError> {
    let mut current = state
        .ui
        .bench
        .current
        .lock()
        .map_err(|_| ApiError::internal("The benchmark state is poisoned."))?;
    match current.as_mut().filter(|r| r.state == "running") {
        Some(run) => {
            if let Some(abort) = run.abort.take() {
                abort.abort();
            }
            run.state = "cancelled";
            Ok(Json(run.clone()))
        }
        None => Err(not_found("A running benchmark")),
    }
}

/// `GET /api/bench/runs/{id}`: the full JSON report (a download).
pub async fn report_json(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let report = state.ui.bench.load(&id)?;
    Ok(download(
        Json(report).into_response(),
        &format!("hearth-bench-{id}.json"),
    ))
}

/// `GET /api/bench/runs/{id}/markdown`.
pub async fn report_markdown(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let report = state.ui.bench.load(&id)?;
    let response = (
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        report.to_markdown(),
    )
        .into_response();
    Ok(download(response, &format!("hearth-bench-{id}.md")))
}

/// `GET /api/bench/runs/{id}/html`: one self-contained HTML file.
pub async fn report_html(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let report = state.ui.bench.load(&id)?;
    let page = crate::webui::report_html(&report).map_err(|e| ApiError::internal(e.to_string()))?;
    let response = ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response();
    Ok(download(response, &format!("hearth-bench-{id}.html")))
}

fn download(mut response: Response, filename: &str) -> Response {
    if let Ok(value) = format!("attachment; filename=\"{filename}\"").parse() {
        response
            .headers_mut()
            .insert(header::CONTENT_DISPOSITION, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_shape_the_quick_preset() {
        let request = StartRequest {
            repeats: Some(1),
            prompt_lengths: Some(vec![16, 32]),
            concurrency: Some(vec![2]),
            max_tokens: Some(8),
            scenarios: Some(vec!["single".into(), "sweep".into()]),
            ..Default::default()
        };
        let c = build_config(&request, "http://127.0.0.1:1", Path::new("/t.json")).expect("config");
        assert_eq!(c.repeats, 1);
        assert_eq!(
            c.single.as_ref().map(|s| s.prompt_tokens.clone()),
            Some(vec![16, 32])
        );
        assert_eq!(
            c.sweep.as_ref().map(|s| s.concurrency.clone()),
            Some(vec![1, 2])
        );
        assert_eq!(c.sweep.as_ref().map(|s| s.max_tokens), Some(8));
        assert!(c.interference.is_none());
    }

    #[test]
    fn bad_settings_are_400() {
        let bad_preset = StartRequest {
            preset: Some("huge".into()),
            ..Default::default()
        };
        let e = build_config(&bad_preset, "http://x:1", Path::new("/t")).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("preset"));
        let bad_scenario = StartRequest {
            scenarios: Some(vec!["nope".into()]),
            ..Default::default()
        };
        let e = build_config(&bad_scenario, "http://x:1", Path::new("/t")).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("scenarios"));
        let zero_repeats = StartRequest {
            repeats: Some(0),
            ..Default::default()
        };
        let e = build_config(&zero_repeats, "http://x:1", Path::new("/t")).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn run_ids_cannot_escape_the_folder() {
        let runs = BenchRuns::new(PathBuf::from("/tmp/x"));
        assert!(runs.report_path("../etc/passwd").is_none());
        assert!(runs.report_path("a/b").is_none());
        assert!(runs.report_path("").is_none());
        assert!(runs.report_path("1700000000-abcd1234").is_some());
    }
}
