//! A local server laid out like the Hugging Face hub (the real one cannot
//! be reached from CI): `GET /api/models/{owner}/{name}` lists a
//! repository's files with their size and, for `*.safetensors` (Git LFS on
//! the hub), `lfs.sha256`; `GET /{owner}/{name}/resolve/main/{file}` serves
//! one, honouring `Range: bytes=N-` with 206 like the hub's CDN. Each
//! repository also lists a README that a model download must skip.
//!
//! Knobs for the downloader's tests: cut a file's first transfer after N
//! bytes (the connection dies mid-body), slow every transfer down, turn
//! `Range` support off, lie about a sha256 or a size. Every file request is
//! logged with its `Range` header and answer status.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    body::{Body, Bytes},
    extract::{Path as UrlPath, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Json, Router,
};
use serde_json::json;

/// One logged file request.
#[derive(Debug, Clone)]
pub struct Fetch {
    pub repo: String,
    pub file: String,
    pub range: Option<String>,
    pub status: u16,
}

#[derive(Default)]
pub struct Knobs {
    /// `(file, n)`: the next transfer of `file` stops with an error after n bytes.
    pub cut: Option<(String, u64)>,
    /// Sleep per 16 KiB sent.
    pub delay_per_chunk: Option<Duration>,
    pub no_range: bool,
    /// file -> sha256 to list instead of the real one.
    pub wrong_sha: HashMap<String, String>,
    /// file -> size to list instead of the real one.
    pub listed_size: HashMap<String, u64>,
}

struct Hub {
    repos: HashMap<String, PathBuf>,
    knobs: Mutex<Knobs>,
    log: Mutex<Vec<Fetch>>,
}

/// A running fake hub; it stops with the test's runtime.
#[derive(Clone)]
pub struct FakeHub {
    pub url: String,
    hub: Arc<Hub>,
}

impl FakeHub {
    /// Serves each `(repo id, folder)`.
    pub async fn start(repos: &[(&str, PathBuf)]) -> FakeHub {
        let hub = Arc::new(Hub {
            repos: repos
                .iter()
                .map(|(id, dir)| (id.to_string(), dir.clone()))
                .collect(),
            knobs: Mutex::new(Knobs::default()),
            log: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/api/models/{owner}/{name}", get(listing))
            .route("/{owner}/{name}/resolve/main/{file}", get(file))
            .with_state(hub.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake hub");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeHub {
            url: format!("http://{addr}"),
            hub,
        }
    }

    pub fn knobs(&self) -> std::sync::MutexGuard<'_, Knobs> {
        self.hub.knobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn log(&self) -> Vec<Fetch> {
        self.hub
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

async fn listing(
    State(hub): State<Arc<Hub>>,
    UrlPath((owner, name)): UrlPath<(String, String)>,
) -> Response {
    let id = format!("{owner}/{name}");
    let Some(dir) = hub.repos.get(&id) else {
        return (StatusCode::NOT_FOUND, "Repository not found").into_response();
    };
    let knobs = hub.knobs.lock().unwrap_or_else(|e| e.into_inner());
    let mut siblings = vec![json!({"rfilename": "README.md", "size": 14})];
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let file = entry.file_name().to_string_lossy().into_owned();
        let bytes = std::fs::read(entry.path()).expect("read file");
        let size = knobs
            .listed_size
            .get(&file)
            .copied()
            .unwrap_or(bytes.len() as u64);
        let mut sibling = json!({"rfilename": file, "size": size});
        if file.ends_with(".safetensors") {
            let sha = knobs
                .wrong_sha
                .get(&file)
                .cloned()
                .unwrap_or_else(|| sha256_hex(&bytes));
            sibling["lfs"] = json!({"sha256": sha, "size": size, "pointerSize": 134});
        }
        siblings.push(sibling);
    }
    Json(json!({"id": id, "siblings": siblings})).into_response()
}

async fn file(
    State(hub): State<Arc<Hub>>,
    UrlPath((owner, name, file)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let id = format!("{owner}/{name}");
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let record = |status: u16| {
        hub.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Fetch {
                repo: id.clone(),
                file: file.clone(),
                range: range.clone(),
                status,
            });
    };
    if file == "README.md" {
        record(200);
        return "# a model card".into_response();
    }
    let Some(bytes) = hub
        .repos
        .get(&id)
        .and_then(|dir| std::fs::read(dir.join(&file)).ok())
    else {
        record(404);
        return StatusCode::NOT_FOUND.into_response();
    };
    let (cut, delay, no_range) = {
        let mut knobs = hub.knobs.lock().unwrap_or_else(|e| e.into_inner());
        let cut = match &knobs.cut {
            Some((f, n)) if *f == file => {
                let n = *n;
                knobs.cut = None;
                Some(n)
            }
            _ => None,
        };
        (cut, knobs.delay_per_chunk, knobs.no_range)
    };
    let start = range
        .as_deref()
        .filter(|_| !no_range)
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok());
    let total = bytes.len();
    let (status, body) = match start {
        Some(s) if s >= total => {
            record(416);
            return Response::builder()
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(header::CONTENT_RANGE, format!("bytes */{total}"))
                .body(Body::empty())
                .expect("response");
        }
        Some(s) => (StatusCode::PARTIAL_CONTENT, bytes[s..].to_vec()),
        None => (StatusCode::OK, bytes),
    };
    record(status.as_u16());
    let from = start.unwrap_or(0);
    let sent_len = body.len();
    // The body in 16 KiB chunks, slowed and/or cut as the knobs say.
    let chunks: Vec<Bytes> = body.chunks(16 << 10).map(Bytes::copy_from_slice).collect();
    let stream = futures_util::stream::unfold(
        (chunks.into_iter(), 0u64),
        move |(mut chunks, sent)| async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            if cut.is_some_and(|n| sent >= n) {
                return Some((
                    Err(std::io::Error::other("connection cut by the test")),
                    (chunks, sent),
                ));
            }
            let mut chunk = chunks.next()?;
            if let Some(n) = cut {
                chunk.truncate(((n - sent) as usize).min(chunk.len()));
            }
            let sent = sent + chunk.len() as u64;
            Some((Ok::<_, std::io::Error>(chunk), (chunks, sent)))
        },
    );
    let mut builder = Response::builder()
        .status(status)
        .header(header::CONTENT_LENGTH, sent_len)
        .header(header::ACCEPT_RANGES, "bytes");
    if status == StatusCode::PARTIAL_CONTENT {
        builder = builder.header(
            header::CONTENT_RANGE,
            format!("bytes {from}-{}/{total}", total - 1),
        );
    }
    builder.body(Body::from_stream(stream)).expect("response")
}
