//! The web UI and its `/api/*` endpoints against a real `hearth serve` on
//! the real default model (SmolLM2-135M-Instruct):
//! - `ui_api`: the embedded assets (content types, caching), status, memory
//!   history, models, document extraction (text, DOCX, PDF made here, bad
//!   files), benchmark runs with history and exports, `hearth bench --html`;
//! - `ui_browser`: `ui/e2e/ui.e2e.mjs` in headless Chromium (playwright-core,
//!   both installed by scripts/setup.sh) clicking through every page;
//!   screenshots land in `target/ui-screenshots/`.
//!
//! Each test runs its own server with its own `$HEARTH_HOME` (models folder
//! with the served model, benchmark history); they take turns (one lock) so
//! that the benchmark timings do not fight each other for the cores.

mod fake_hub;
mod server_support;

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::{Duration, Instant},
};

use serde_json::{json, Value};
use server_support::{
    client, dummy_qwen3, get_json, hearth_bin, post_json, repo_root, smollm2, TestServer,
};

static TURN: Mutex<()> = Mutex::new(());

/// A `$HEARTH_HOME` whose models folder holds (a link to) the default
/// model and a tiny random Qwen3 (`qwen3-tiny`) to switch to.
fn hearth_home() -> (tempfile::TempDir, PathBuf) {
    let home = tempfile::tempdir().expect("tempdir");
    let models = home.path().join("models");
    std::fs::create_dir_all(&models).expect("models dir");
    let model = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::os::unix::fs::symlink(smollm2(), &model).expect("link the model");
    dummy_qwen3(&models);
    (home, model)
}

fn start_server(hub: Option<&str>) -> (TestServer, tempfile::TempDir) {
    start_server_with(hub, &[])
}

fn start_server_with(hub: Option<&str>, extra: &[&str]) -> (TestServer, tempfile::TempDir) {
    let (home, model) = hearth_home();
    let mut env = vec![("HEARTH_HOME", home.path())];
    if let Some(hub) = hub {
        env.push(("HF_ENDPOINT", Path::new(hub)));
    }
    // MLX's products run on Debian's OpenBLAS without help here: `hearth`
    // preloads it itself (src/blas.rs); the wheel's own BLAS would make the
    // benchmark steps crawl.
    let server = TestServer::start_with_env(&model, extra, &env);
    (server, home)
}

fn ui_built() -> bool {
    repo_root().join("ui/dist/index.html").is_file()
}

#[test]
fn ui_api() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(ui_api_checks());
}

async fn ui_api_checks() {
    assert!(
        ui_built(),
        "ui/dist is missing: run `npm ci && npm run build` in ui/ (scripts/setup.sh does)"
    );
    let hub_files = tempfile::tempdir().expect("tempdir");
    let hub_model = dummy_qwen3(hub_files.path());
    let hub = fake_hub::FakeHub::start(&[("test-org/qwen3-hub", hub_model)]).await;
    let (server, home) = start_server(Some(&hub.url));
    let http = client();

    // The app and its assets.
    let index = http.get(server.url("/")).send().await.expect("GET /");
    assert_eq!(index.status(), 200);
    assert_eq!(index.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(index.headers()["cache-control"], "no-cache");
    let html = index.text().await.expect("body");
    assert!(html.contains("<div id=\"app\">"), "{html}");
    let script = html
        .split("src=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a script in index.html");
    assert!(script.starts_with("/assets/"), "{script}");
    let asset = http.get(server.url(script)).send().await.expect("asset");
    assert_eq!(asset.status(), 200);
    assert_eq!(
        asset.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(
        asset.headers()["cache-control"],
        "public, max-age=31536000, immutable"
    );
    let favicon = http
        .get(server.url("/favicon.svg"))
        .send()
        .await
        .expect("icon");
    assert_eq!(favicon.headers()["content-type"], "image/svg+xml");
    let (status, body) = get_json(&server, "/assets/nope.js").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "unknown_url");

    // Status.
    let (status, body) = get_json(&server, "/api/status").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "ready");
    assert_eq!(body["endpoint"], format!("{}/v1", server.base));
    let model = &body["model"];
    assert_eq!(model["id"], "SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(model["architecture"], "llama");
    assert_eq!(model["quantization"], "Q4_1");
    assert_eq!(model["format"], "gguf");
    // SmolLM2-135M's published parameter count.
    assert_eq!(model["parameters"], 134_515_008);
    assert!(
        model["context_length"].as_u64().unwrap_or(0) >= 2048,
        "{model}"
    );

    // A generation moves the counters and the sampler's tok/s.
    let (status, reply) = post_json(
        &server,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 48, "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let (_, body) = get_json(&server, "/api/status").await;
    assert!(
        body["generated_tokens_total"].as_u64().unwrap_or(0) >= 48,
        "{body}"
    );

    // Memory: samples accumulate once a second.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, memory) = get_json(&server, "/api/memory").await;
    assert_eq!(status, 200);
    let history = memory["history"].as_array().expect("history");
    assert!(history.len() >= 2, "{memory}");
    let t: Vec<u64> = history
        .iter()
        .map(|s| s["t_ms"].as_u64().unwrap_or(0))
        .collect();
    assert!(t.windows(2).all(|w| w[1] > w[0]), "{t:?}");
    let current = &memory["current"];
    let weights = model["weight_bytes"].as_u64().expect("weight bytes");
    assert!(
        current["rss_bytes"].as_u64().unwrap_or(0) > weights,
        "{current}"
    );
    assert!(
        current["mlx_active_bytes"].as_u64().unwrap_or(0) >= weights / 2,
        "{current}"
    );
    assert!(current["mlx_peak_bytes"].as_u64() >= current["mlx_active_bytes"].as_u64());
    assert!(current["kv_budget_bytes"].as_u64().unwrap_or(0) > 0);
    // The generation's steps measured their working memory.
    assert!(
        current["step_working_bytes"].as_u64().unwrap_or(0) > 0,
        "{current}"
    );
    assert!(
        current["system_total_bytes"].as_u64() > current["system_available_bytes"].as_u64(),
        "{current}"
    );
    assert!(["normal", "warning", "critical"].contains(&current["pressure"].as_str().unwrap_or("")));
    let tps: Vec<f64> = history
        .iter()
        .map(|s| s["tokens_per_second"].as_f64().unwrap_or(0.0))
        .collect();
    assert!(
        tps.iter().any(|&v| v > 0.0),
        "the generation shows as tok/s: {tps:?}"
    );

    // Models.
    let (status, models) = get_json(&server, "/api/models").await;
    assert_eq!(status, 200);
    let list = models["models"].as_array().expect("models");
    assert_eq!(list.len(), 2, "{models}");
    assert_eq!(list[0]["name"], "SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(list[0]["served"], true);
    assert_eq!(list[0]["fits_in_memory"], true);
    assert_eq!(list[0]["quantization"], "Q4_1");
    assert_eq!(list[1]["name"], "qwen3-tiny");
    assert_eq!(list[1]["architecture"], "qwen3");
    assert_eq!(list[1]["served"], false);

    documents(&server).await;
    bench_runs(&server).await;
    bench_cli_html(&server, home.path());
    download_from_hub(&server, home.path(), &hub).await;
    switch_models(&server).await;
}

async fn download_from_hub(server: &TestServer, home: &Path, hub: &fake_hub::FakeHub) {
    let (status, body) =
        post_json(server, "/api/models/download", &json!({"repo": "../etc"})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "repo");
    let (status, body) = post_json(
        server,
        "/api/models/download",
        &json!({"repo": "test-org/missing"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    // A slow transfer, cancelled from the API: the `.part` file stays.
    hub.knobs().delay_per_chunk = Some(Duration::from_millis(30));
    let (status, body) = post_json(
        server,
        "/api/models/download",
        &json!({"repo": "test-org/qwen3-hub"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let part = home.join("models/qwen3-hub.partial/model.safetensors.part");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&part).map_or(0, |m| m.len()) < 50_000 {
        assert!(Instant::now() < deadline, "the download never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, cancelled) = post_json(
        server,
        "/api/models/download/cancel",
        &json!({"repo": "test-org/qwen3-hub"}),
    )
    .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    let kept = std::fs::metadata(&part).expect(".part kept").len();
    let (status, body) = post_json(
        server,
        "/api/models/download/cancel",
        &json!({"repo": "test-org/qwen3-hub"}),
    )
    .await;
    assert_eq!(status, 404, "nothing to cancel any more: {body}");
    // Downloading again resumes from the `.part` file.
    hub.knobs().delay_per_chunk = None;
    let (status, body) = post_json(
        server,
        "/api/models/download",
        &json!({"repo": "test-org/qwen3-hub"}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let downloads = loop {
        let (_, downloads) = get_json(server, "/api/models/downloads").await;
        let list = downloads.as_array().cloned().unwrap_or_default();
        if list.len() == 3
            && list
                .iter()
                .all(|d| d["state"] != "listing" && d["state"] != "downloading")
        {
            break list;
        }
        assert!(Instant::now() < deadline, "downloads stuck: {downloads}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let missing = &downloads[0];
    assert_eq!(missing["state"], "failed", "{missing}");
    assert!(
        missing["error"]
            .as_str()
            .unwrap_or("")
            .contains("no repository"),
        "{missing}"
    );
    assert_eq!(downloads[1]["state"], "cancelled", "{}", downloads[1]);
    let done = &downloads[2];
    assert_eq!(done["state"], "done", "{done}");
    assert!(
        done["bytes_resumed"].as_u64() >= Some(kept),
        "{done} {kept}"
    );
    assert!(
        done["files_verified"].as_u64() >= Some(1),
        "the weights' sha256 was checked: {done}"
    );
    let ranges: Vec<_> = hub
        .log()
        .into_iter()
        .filter(|f| f.file == "model.safetensors" && f.range.is_some())
        .collect();
    assert!(
        ranges.iter().any(|f| f.status == 206),
        "the second download asked for the rest: {ranges:?}"
    );
    assert_eq!(done["files_done"], done["files_total"]);
    assert_eq!(
        Some(done["bytes_done"].as_u64()),
        Some(done["bytes_total"].as_u64())
    );
    let folder = home.join("models/qwen3-hub");
    assert!(folder.join("config.json").is_file());
    assert!(folder.join("tokenizer.json").is_file());
    assert!(
        !folder.join("README.md").exists(),
        "only model files are fetched"
    );
    assert!(!home.join("models/qwen3-hub.partial").exists());
    let (status, body) = post_json(
        server,
        "/api/models/download",
        &json!({"repo": "test-org/qwen3-hub"}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let (_, models) = get_json(server, "/api/models").await;
    let names: Vec<&str> = models["models"]
        .as_array()
        .map(|l| l.iter().filter_map(|m| m["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&"qwen3-hub"), "{models}");
}

async fn wait_state(server: &TestServer, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, status) = get_json(server, "/api/status").await;
        if status["state"] == state {
            return status;
        }
        assert!(Instant::now() < deadline, "never {state}: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn switch_models(server: &TestServer) {
    let (status, body) = post_json(server, "/api/models/load", &json!({"model": "nope"})).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "model_not_found");
    let (status, body) = post_json(server, "/api/models/load", &json!({})).await;
    assert_eq!(status, 400, "{body}");

    // The model downloaded from the (fake) hub loads and answers.
    let (status, body) =
        post_json(server, "/api/models/load", &json!({"model": "qwen3-hub"})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["state"], "loading");
    let status = wait_state(server, "ready").await;
    assert_eq!(status["model"]["id"], "qwen3-hub", "{status}");
    assert_eq!(status["model"]["architecture"], "qwen3");
    let (_, models) = get_json(server, "/v1/models").await;
    assert_eq!(models["data"][0]["id"], "qwen3-hub", "{models}");
    let (code, reply) = post_json(
        server,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "ignore_eos": true}),
    )
    .await;
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["model"], "qwen3-hub");
    assert_eq!(reply["usage"]["completion_tokens"], 4);

    let (status, body) = post_json(server, "/api/models/unload", &json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "stopped");
    let (code, body) = post_json(
        server,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["error"]["code"], "model_not_loaded");
    let (code, status) = get_json(server, "/api/status").await;
    assert_eq!(code, 200);
    assert_eq!(status["state"], "stopped");
    assert!(status["model"].is_null());
    // Memory is sampled once a second: the first sample after the unload
    // shows no KV budget.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (code, memory) = get_json(server, "/api/memory").await;
        assert_eq!(code, 200);
        if memory["current"]["kv_budget_bytes"] == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "KV budget still reported after unload: {}",
            memory["current"]
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let index = client().get(server.url("/")).send().await.expect("GET /");
    assert_eq!(index.status(), 200, "the UI works with no model");
}

async fn extract(server: &TestServer, name: &str, bytes: Vec<u8>) -> (u16, Value) {
    let response = client()
        .post(server.url(&format!("/api/extract?filename={name}")))
        .body(bytes)
        .send()
        .await
        .expect("POST /api/extract");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

async fn documents(server: &TestServer) {
    let (status, body) = extract(
        server,
        "notes.md",
        b"# Notes\r\n\r\nHello there.\n".to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kind"], "markdown");
    assert_eq!(body["text"], "# Notes\n\nHello there.");
    assert_eq!(body["fits"], true);
    let tokens = body["tokens"].as_u64().unwrap_or(0);
    assert!((4..=12).contains(&tokens), "{body}");

    let (status, body) = extract(
        server,
        "letter.docx",
        docx("Dear Ada,", "The meeting is at 10 & lunch follows."),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kind"], "docx");
    assert_eq!(
        body["text"],
        "Dear Ada,\nThe meeting is at 10 & lunch follows."
    );

    let (status, body) = extract(server, "report.pdf", pdf("Quarterly revenue grew")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kind"], "pdf");
    assert!(
        body["text"]
            .as_str()
            .unwrap_or("")
            .contains("Quarterly revenue grew"),
        "{body}"
    );

    // Too long for the context: extracted, and flagged.
    let context = body["context_length"].as_u64().expect("context") as usize;
    let long = "lorem ipsum dolor sit amet ".repeat(context);
    let (status, body) = extract(server, "long.txt", long.into_bytes()).await;
    assert_eq!(status, 200);
    assert_eq!(body["fits"], false);
    assert!(body["tokens"].as_u64().unwrap_or(0) as usize > context);

    for (name, bytes) in [
        ("blob.bin", vec![0u8, 159, 146, 150]),
        ("empty.txt", Vec::new()),
        ("broken.pdf", b"%PDF-1.7 not really".to_vec()),
        ("broken.docx", b"PK\x03\x04 not really".to_vec()),
    ] {
        let (status, body) = extract(server, name, bytes).await;
        assert_eq!(status, 400, "{name}: {body}");
        assert_eq!(body["error"]["code"], "unsupported_document", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .starts_with(name),
            "{body}"
        );
    }
}

/// A minimal Word document: two paragraphs, one with an entity.
fn docx(first: &str, second: &str) -> Vec<u8> {
    let escape = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;");
    let xml = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>{}</w:t></w:r></w:p><w:p><w:r><w:t xml:space="preserve">{}</w:t></w:r></w:p></w:body></w:document>"#,
        escape(first),
        escape(second)
    );
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut out);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("[Content_Types].xml", options).expect("zip");
        zip.write_all(b"<Types/>").expect("zip");
        zip.start_file("word/document.xml", options).expect("zip");
        zip.write_all(xml.as_bytes()).expect("zip");
        zip.finish().expect("zip");
    }
    out.into_inner()
}

/// A one-page PDF showing `text` in Helvetica, with a correct xref table.
fn pdf(text: &str) -> Vec<u8> {
    let content = format!("BT /F1 24 Tf 72 720 Td ({text}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
         /Resources << /Font << /F1 5 0 R >> >> >>"
            .to_string(),
        format!(
            "<< /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
            .to_string(),
    ];
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

async fn bench_runs(server: &TestServer) {
    let (status, body) = post_json(server, "/api/bench", &json!({"preset": "huge"})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "preset");
    let (status, body) = post_json(server, "/api/bench", &json!({"repeats": "many"})).await;
    assert_eq!(status, 400, "{body}");

    let small = json!({
        "repeats": 1, "warmup": 0, "prompt_lengths": [32], "concurrency": [2],
        "max_tokens": 8, "scenarios": ["single", "sweep"],
    });
    let (status, run) = post_json(server, "/api/bench", &small).await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["state"], "running");
    let id = run["id"].as_str().expect("id").to_string();
    let (status, body) = post_json(server, "/api/bench", &small).await;
    assert_eq!(status, 409, "one run at a time: {body}");

    let deadline = Instant::now() + Duration::from_secs(240);
    let mut saw_progress = false;
    let overview = loop {
        let (_, overview) = get_json(server, "/api/bench").await;
        let current = &overview["current"];
        assert_eq!(current["id"], id.as_str());
        saw_progress |= current["progress"]["total"].as_u64().unwrap_or(0) > 0;
        match current["state"].as_str() {
            Some("running") => {}
            Some("done") => break overview,
            other => panic!("benchmark ended {other:?}: {overview}"),
        }
        assert!(Instant::now() < deadline, "benchmark too slow: {overview}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(saw_progress, "progress was reported");
    let runs = overview["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{overview}");
    assert_eq!(runs[0]["id"], id.as_str());
    assert_eq!(runs[0]["failed"], 0);
    assert!(
        runs[0]["best_wall_tps"].as_f64().unwrap_or(0.0) > 0.0,
        "{overview}"
    );

    let (status, report) = get_json(server, &format!("/api/bench/runs/{id}")).await;
    assert_eq!(status, 200);
    let summary = &report["summaries"][0];
    assert_eq!(summary["suspect"], false, "{summary}");
    assert_eq!(summary["sweep"].as_array().map(Vec::len), Some(2));
    // single: 1 request; sweep: 1 + 2 requests.
    assert_eq!(summary["requests"], 4, "{summary}");

    let http = client();
    let markdown = http
        .get(server.url(&format!("/api/bench/runs/{id}/markdown")))
        .send()
        .await
        .expect("markdown");
    assert_eq!(
        markdown.headers()["content-type"],
        "text/markdown; charset=utf-8"
    );
    assert!(markdown.headers()["content-disposition"]
        .to_str()
        .unwrap_or("")
        .starts_with("attachment"));
    assert!(markdown.text().await.unwrap_or_default().contains("tok/s"));
    let page = http
        .get(server.url(&format!("/api/bench/runs/{id}/html")))
        .send()
        .await
        .expect("html")
        .text()
        .await
        .expect("html body");
    assert!(page.contains("<script id=\"hearth-report\" type=\"application/json\">"));
    assert!(!page.contains("src=\"/assets"), "self-contained");

    for bad in ["nope", "..%2F..%2Fetc%2Fpasswd"] {
        let (status, _) = get_json(server, &format!("/api/bench/runs/{bad}")).await;
        assert_eq!(status, 404, "{bad}");
    }
    let response = http
        .delete(server.url("/api/bench/current"))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(response.status(), 404, "nothing is running");
}

fn bench_cli_html(server: &TestServer, home: &Path) {
    let out = home.join("cli-report.html");
    let tokenizer_dir = home.join("tok");
    std::fs::create_dir_all(&tokenizer_dir).expect("dir");
    let output = Command::new(hearth_bin())
        .args([
            "bench",
            "--url",
            &server.base,
            "--quiet",
            "--repeats",
            "1",
            "--warmup",
            "0",
        ])
        .args([
            "--scenarios",
            "sweep",
            "--concurrency",
            "2",
            "--sweep-max-tokens",
            "8",
        ])
        .args(["--sweep-prompt-tokens", "32", "--tokenizer"])
        .arg(tokenizer_for_cli(server, &tokenizer_dir))
        .arg("--html")
        .arg(&out)
        .output()
        .expect("run hearth bench");
    assert!(
        output.status.success(),
        "hearth bench --html failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let page = std::fs::read_to_string(&out).expect("html written");
    assert!(page.starts_with("<!doctype html>"));
    let json = page
        .split("<script id=\"hearth-report\" type=\"application/json\">")
        .nth(1)
        .and_then(|s| s.split("</script>").next())
        .expect("embedded report");
    let report: Value = serde_json::from_str(json).expect("report JSON");
    let sweep = report["summaries"][0]["sweep"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(sweep.iter().any(|p| p["concurrency"] == 2), "{sweep:?}");
}

/// The CLI needs a tokenizer.json: the server saved one for its own
/// benchmark runs; a GGUF model has none next to it, so use the Hugging
/// Face export the bench endpoint wrote (same tokenizer).
fn tokenizer_for_cli(server: &TestServer, dir: &Path) -> PathBuf {
    let saved = std::env::temp_dir()
        .join(format!("hearth-bench-{}", server.pid()))
        .join("tokenizer.json");
    assert!(saved.is_file(), "{} missing", saved.display());
    let target = dir.join("tokenizer.json");
    std::fs::copy(&saved, &target).expect("copy tokenizer");
    target
}

/// Config, tokenizer and 4 MiB of pseudo-random "weights" (the downloader
/// does not parse files).
fn small_repository(dir: &Path) {
    std::fs::write(dir.join("config.json"), br#"{"model_type": "qwen3"}"#).expect("config");
    std::fs::write(dir.join("tokenizer.json"), br#"{"version": "1.0"}"#).expect("tokenizer");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let weights: Vec<u8> = (0..4 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(dir.join("model.safetensors"), weights).expect("weights");
}

/// Chromium and playwright-core, installed by scripts/setup.sh.
fn browser_ready() -> PathBuf {
    let root = repo_root();
    assert!(
        ui_built(),
        "ui/dist is missing: run `npm ci && npm run build` in ui/ (scripts/setup.sh does)"
    );
    assert!(
        root.join("ui/node_modules/playwright-core").is_dir(),
        "playwright-core is missing: run `npm ci` in ui/ (scripts/setup.sh does)"
    );
    let chromium = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        chromium.exists(),
        "{} is missing: install Debian's `chromium` (scripts/setup.sh does) or set CHROMIUM",
        chromium.display()
    );
    chromium
}

/// LAN mode: a server started with `--api-key`; `ui/e2e/key.e2e.mjs` checks
/// the "key required" state, a wrong key, the right key on every page and
/// a streamed chat answer, the key kept across a reload, and forgetting it.
#[test]
fn ui_browser_api_key() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let root = repo_root();
    let chromium = browser_ready();
    let key = "lan-test-key-3f9a";
    let (server, _home) = start_server_with(None, &["--api-key", key]);
    let shots = root.join("target/ui-screenshots/api-key");
    let _ = std::fs::remove_dir_all(&shots);
    let output = Command::new("node")
        .arg(root.join("ui/e2e/key.e2e.mjs"))
        .env("HEARTH_URL", &server.base)
        .env("HEARTH_TEST_KEY", key)
        .env("SCREENSHOTS", &shots)
        .env("CHROMIUM", &chromium)
        .current_dir(root.join("ui"))
        .output()
        .expect("run node ui/e2e/key.e2e.mjs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "browser test failed (screenshots in {}):\n{stdout}\n{}\nserver log:\n{}",
        shots.display(),
        String::from_utf8_lossy(&output.stderr),
        server.log_text()
    );
    assert!(shots.join("key-required.png").is_file());
}

#[test]
fn ui_browser() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let root = repo_root();
    let chromium = browser_ready();
    // A slow local hub with a small repository, for the Downloads card's
    // Cancel and Resume (4 MiB at 16 KiB per 40 ms: about 10 s).
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let repo = tempfile::tempdir().expect("tempdir");
    small_repository(repo.path());
    let hub = runtime.block_on(fake_hub::FakeHub::start(&[(
        "test-org/small",
        repo.path().to_path_buf(),
    )]));
    hub.knobs().delay_per_chunk = Some(Duration::from_millis(40));
    let (server, _home) = start_server(Some(&hub.url));
    let shots = root.join("target/ui-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    let output = Command::new("node")
        .arg(root.join("ui/e2e/ui.e2e.mjs"))
        .env("HEARTH_URL", &server.base)
        .env("SCREENSHOTS", &shots)
        .env("CHROMIUM", &chromium)
        .current_dir(root.join("ui"))
        .output()
        .expect("run node ui/e2e/ui.e2e.mjs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "browser test failed (screenshots in {}):\n{stdout}\n{}\nserver log:\n{}",
        shots.display(),
        String::from_utf8_lossy(&output.stderr),
        server.log_text()
    );
    assert!(shots.join("status.png").is_file());
    for size in ["900x640", "390x844"] {
        for theme in ["dark", "light"] {
            let shot = shots.join(format!("{size}-{theme}-status.png"));
            assert!(shot.is_file(), "{} missing", shot.display());
        }
    }
}
