//! Downloads a model from the Hugging Face hub (or any server laid out like
//! it, e.g. a mirror named by `HF_ENDPOINT`) into the models folder.
//!
//! The hub's layout: `GET {endpoint}/api/models/{repo}?blobs=true` lists the
//! files (`siblings[].rfilename`, `size`, and for files kept in Git LFS,
//! which is every weight file, `lfs.sha256`); `GET
//! {endpoint}/{repo}/resolve/main/{file}` serves one and honours `Range`. We
//! take what an MLX / Hugging Face model folder needs (config, tokenizer
//! files, chat template, safetensors and their index).
//!
//! Layout while downloading: `{models}/{name}.partial/`, each file written
//! as `{file}.part` and renamed to `{file}` once its size and sha256 (when
//! the hub gives one) check out; the folder is renamed to `{models}/{name}`
//! once every file is there, so a half-downloaded model is never listed.
//! Nothing is deleted on failure or cancel: the next download of the same
//! repository skips finished files and resumes each `.part` with an HTTP
//! `Range` request (a server that answers 200 instead of 206 restarts that
//! file). Before fetching, the bytes still missing are compared with the
//! free space of the models folder's disk. A file whose sha256 differs from
//! the hub's is deleted and the download fails with both digests.
//! `HF_TOKEN`, when set, is sent as a bearer token.

use std::{
    io::Read,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

/// The hub's address: `$HF_ENDPOINT`, else huggingface.co.
pub fn endpoint() -> String {
    std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.trim().trim_end_matches('/').to_string())
        .unwrap_or_else(|| "https://huggingface.co".into())
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("`{0}` is not a repository id such as `mlx-community/Qwen3-0.6B-4bit`")]
    BadRepo(String),
    #[error("{0} already exists in the models folder")]
    Exists(PathBuf),
    #[error("the hub has no repository `{0}` (or it needs a token: set HF_TOKEN)")]
    NotFound(String),
    #[error("`{0}` has no safetensors model files that Hearth can load")]
    NoWeights(String),
    #[error("cannot reach {url}: {message}")]
    Http { url: String, message: String },
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "not enough disk space in {}: the download needs {needed} more bytes, {available} are free",
        dir.display()
    )]
    NoSpace {
        dir: PathBuf,
        needed: u64,
        available: u64,
    },
    #[error("{file}: sha256 {actual} does not match the hub's {expected}; the file was deleted")]
    Checksum {
        file: String,
        expected: String,
        actual: String,
    },
    #[error("{file}: got {actual} bytes, the hub lists {expected}")]
    Size {
        file: String,
        expected: u64,
        actual: u64,
    },
    #[error("the download was cancelled (finished files and `.part` files are kept: downloading again resumes)")]
    Cancelled,
}

/// Cancels a running download; cheap to clone.
#[derive(Debug, Clone)]
pub struct Cancel(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Cancel {
    fn default() -> Self {
        Cancel(Arc::new(tokio::sync::watch::channel(false).0))
    }
}

impl Cancel {
    pub fn cancel(&self) {
        self.0.send_replace(true);
    }

    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once [`Cancel::cancel`] has been called.
    pub async fn cancelled(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|&c| c).await;
    }
}

/// Where a download stands.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DownloadProgress {
    pub repo: String,
    /// `listing`, `downloading`, `done`, `failed` or `cancelled`.
    pub state: &'static str,
    pub file: Option<String>,
    pub files_done: usize,
    pub files_total: usize,
    /// Bytes on disk so far, those of an earlier attempt included.
    pub bytes_done: u64,
    /// Sum of the files' sizes, when the hub says them.
    pub bytes_total: Option<u64>,
    /// Bytes found from an earlier attempt (resumed, not fetched again).
    pub bytes_resumed: u64,
    /// Files checked against the hub's sha256.
    pub files_verified: usize,
    pub error: Option<String>,
    /// The model's name in the models folder.
    pub model: String,
}

impl DownloadProgress {
    /// Whether the download has ended (done, failed or cancelled).
    pub fn finished(&self) -> bool {
        matches!(self.state, "done" | "failed" | "cancelled")
    }
}

/// `owner/name`, each part letters, digits, `-`, `_`, `.` (no `..`).
pub fn validate_repo(repo: &str) -> Result<(&str, &str), HubError> {
    let bad = || HubError::BadRepo(repo.to_string());
    let (owner, name) = repo.split_once('/').ok_or_else(bad)?;
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 96
            && !p.starts_with('.')
            && !p.contains("..")
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    if part_ok(owner) && part_ok(name) {
        Ok((owner, name))
    } else {
        Err(bad())
    }
}

/// Whether a repository file belongs in a model folder.
pub fn wanted(file: &str) -> bool {
    let safe = !file.contains("..")
        && !file.starts_with('/')
        && !file.contains('\\')
        && !file.contains('/');
    let name = file.to_ascii_lowercase();
    safe && !name.ends_with(".part")
        && (name.ends_with(".safetensors")
            || name == "model.safetensors.index.json"
            || name == "config.json"
            || name == "generation_config.json"
            || name.starts_with("tokenizer")
            || name == "special_tokens_map.json"
            || name == "added_tokens.json"
            || name == "vocab.json"
            || name == "merges.txt"
            || name.starts_with("chat_template"))
}

#[derive(Deserialize)]
struct RepoInfo {
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    lfs: Option<LfsInfo>,
}

#[derive(Deserialize)]
struct LfsInfo {
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

impl Sibling {
    fn size(&self) -> Option<u64> {
        self.lfs.as_ref().and_then(|l| l.size).or(self.size)
    }

    /// The hub's sha256 of the file (lower-case hex), for LFS files.
    fn sha256(&self) -> Option<String> {
        self.lfs
            .as_ref()
            .and_then(|l| l.sha256.as_deref())
            .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
            .map(str::to_ascii_lowercase)
    }
}

/// Free bytes on the disk holding `dir` (the mount point that is the
/// longest prefix of its canonical path); `None` when no disk matches.
pub fn free_space(dir: &Path) -> Option<u64> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let disks = sysinfo::Disks::new_with_refreshed_list();
    disks
        .list()
        .iter()
        .filter(|d| dir.starts_with(d.mount_point()))
        .max_by_key(|d| d.mount_point().as_os_str().len())
        .map(|d| d.available_space())
}

/// Lower-case hex of a digest.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a download needs from the caller: where to report, how to stop.
pub struct DownloadControl<'a> {
    pub progress: &'a (dyn Fn(&DownloadProgress) + Send + Sync),
    pub cancel: Cancel,
}

/// Downloads `repo` into `models_dir/{name}` (resuming an earlier attempt,
/// see the module docs). Returns the model's folder.
pub async fn download(
    endpoint: &str,
    repo: &str,
    models_dir: &Path,
    control: DownloadControl<'_>,
) -> Result<PathBuf, HubError> {
    let progress = control.progress;
    let cancel = control.cancel;
    let (_, name) = validate_repo(repo)?;
    let target = models_dir.join(name);
    if target.exists() {
        return Err(HubError::Exists(target));
    }
    let partial = models_dir.join(format!("{name}.partial"));
    let mut state = DownloadProgress {
        repo: repo.to_string(),
        state: "listing",
        model: name.to_string(),
        ..Default::default()
    };
    progress(&state);
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(20))
        .build()
        .map_err(|e| HubError::Http {
            url: endpoint.to_string(),
            message: e.to_string(),
        })?;
    let token = std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty());
    let get = |url: &str| {
        let mut request = client.get(url);
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        request
    };
    let info_url = format!("{endpoint}/api/models/{repo}?blobs=true");
    let response = until_cancelled(&cancel, get(&info_url).send())
        .await?
        .map_err(|e| http_error(&info_url, e))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND
        || response.status() == reqwest::StatusCode::UNAUTHORIZED
    {
        return Err(HubError::NotFound(repo.to_string()));
    }
    let info: RepoInfo = response
        .error_for_status()
        .map_err(|e| http_error(&info_url, e))?
        .json()
        .await
        .map_err(|e| http_error(&info_url, e))?;
    let files: Vec<Sibling> = info
        .siblings
        .into_iter()
        .filter(|s| wanted(&s.rfilename))
        .collect();
    if !files.iter().any(|f| f.rfilename.ends_with(".safetensors")) {
        return Err(HubError::NoWeights(repo.to_string()));
    }
    state.files_total = files.len();
    state.bytes_total = files.iter().map(Sibling::size).sum();

    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HubError::Io { path, source }
    };
    tokio::fs::create_dir_all(&partial)
        .await
        .map_err(io(&partial))?;
    // What an earlier attempt left: finished files and `.part` files.
    let mut needed = 0u64;
    for file in &files {
        let have = on_disk(&partial, file).await;
        state.bytes_resumed += have;
        if let Some(size) = file.size() {
            needed += size.saturating_sub(have);
        }
    }
    state.bytes_done = state.bytes_resumed;
    if let Some(available) = free_space(models_dir) {
        if needed > available {
            return Err(HubError::NoSpace {
                dir: models_dir.to_path_buf(),
                needed,
                available,
            });
        }
    }
    state.state = "downloading";
    progress(&state);

    for file in &files {
        let done_path = partial.join(&file.rfilename);
        if complete(&done_path, file).await {
            state.files_done += 1;
            continue;
        }
        state.file = Some(file.rfilename.clone());
        progress(&state);
        fetch_file(
            &FileFetch {
                get: &get,
                url: format!("{endpoint}/{repo}/resolve/main/{}", file.rfilename),
                file,
                dir: &partial,
                cancel: &cancel,
            },
            &mut state,
            progress,
        )
        .await?;
        if file.sha256().is_some() {
            state.files_verified += 1;
        }
        state.files_done += 1;
    }
    tokio::fs::rename(&partial, &target)
        .await
        .map_err(io(&target))?;
    state.state = "done";
    state.file = None;
    progress(&state);
    Ok(target)
}

/// Bytes of `file` already in `dir`: the finished file, else its `.part`.
async fn on_disk(dir: &Path, file: &Sibling) -> u64 {
    let done = dir.join(&file.rfilename);
    if complete(&done, file).await {
        return file.size().unwrap_or(0);
    }
    let part = part_path(dir, &file.rfilename);
    let len = tokio::fs::metadata(&part).await.map_or(0, |m| m.len());
    match file.size() {
        Some(size) if len > size => 0,
        _ => len,
    }
}

/// A finished file (renamed from `.part` after its checks) of the right size.
async fn complete(path: &Path, file: &Sibling) -> bool {
    match tokio::fs::metadata(path).await {
        Ok(meta) => meta.is_file() && file.size().is_none_or(|s| s == meta.len()),
        Err(_) => false,
    }
}

fn part_path(dir: &Path, file: &str) -> PathBuf {
    dir.join(format!("{file}.part"))
}

struct FileFetch<'a, G> {
    get: &'a G,
    url: String,
    file: &'a Sibling,
    dir: &'a Path,
    cancel: &'a Cancel,
}

/// Runs `future` unless the download is cancelled first.
async fn until_cancelled<T>(
    cancel: &Cancel,
    future: impl std::future::Future<Output = T>,
) -> Result<T, HubError> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(HubError::Cancelled),
        value = future => Ok(value),
    }
}

/// Fetches one file into `{file}.part` (resuming it), checks its size and
/// sha256, renames it to `{file}`.
async fn fetch_file<G>(
    fetch: &FileFetch<'_, G>,
    state: &mut DownloadProgress,
    progress: &(dyn Fn(&DownloadProgress) + Send + Sync),
) -> Result<(), HubError>
where
    G: Fn(&str) -> reqwest::RequestBuilder,
{
    let FileFetch {
        get,
        url,
        file,
        dir,
        cancel,
    } = fetch;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HubError::Io { path, source }
    };
    let part = part_path(dir, &file.rfilename);
    let mut offset = on_disk(dir, file).await;
    let mut request = get(url.as_str());
    if offset > 0 {
        request = request.header(reqwest::header::RANGE, format!("bytes={offset}-"));
    }
    let response = until_cancelled(cancel, request.send())
        .await?
        .map_err(|e| http_error(url, e))?;
    let status = response.status();
    if status == reqwest::StatusCode::RANGE_NOT_SATISFIABLE && Some(offset) == file.size() {
        // The `.part` is already whole.
    } else {
        let response = response
            .error_for_status()
            .map_err(|e| http_error(url, e))?;
        let resumed = response.status() == reqwest::StatusCode::PARTIAL_CONTENT
            && content_range_start(&response) == Some(offset);
        if !resumed && offset > 0 {
            // The server sent the whole file: start the `.part` over.
            state.bytes_done = state.bytes_done.saturating_sub(offset);
            state.bytes_resumed = state.bytes_resumed.saturating_sub(offset);
            offset = 0;
        }
        let mut out = tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(offset == 0)
            .append(offset > 0)
            .open(&part)
            .await
            .map_err(io(&part))?;
        let mut body = response.bytes_stream();
        loop {
            let next = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    let _ = out.flush().await;
                    return Err(HubError::Cancelled);
                }
                next = body.next() => next,
            };
            let Some(chunk) = next else { break };
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    let _ = out.flush().await;
                    return Err(http_error(url, e));
                }
            };
            out.write_all(&chunk).await.map_err(io(&part))?;
            state.bytes_done += chunk.len() as u64;
            progress(state);
        }
        out.flush().await.map_err(io(&part))?;
    }
    let actual = tokio::fs::metadata(&part).await.map_or(0, |m| m.len());
    if let Some(expected) = file.size() {
        if actual != expected {
            if actual > expected {
                let _ = tokio::fs::remove_file(&part).await;
            }
            return Err(HubError::Size {
                file: file.rfilename.clone(),
                expected,
                actual,
            });
        }
    }
    if let Some(expected) = file.sha256() {
        let hashed = part.clone();
        let actual = tokio::task::spawn_blocking(move || sha256_file(&hashed))
            .await
            .map_err(|e| HubError::Io {
                path: part.clone(),
                source: std::io::Error::other(e.to_string()),
            })?
            .map_err(io(&part))?;
        if actual != expected {
            let _ = tokio::fs::remove_file(&part).await;
            state.bytes_done = state.bytes_done.saturating_sub(file.size().unwrap_or(0));
            return Err(HubError::Checksum {
                file: file.rfilename.clone(),
                expected,
                actual,
            });
        }
    }
    let done = dir.join(&file.rfilename);
    tokio::fs::rename(&part, &done).await.map_err(io(&done))?;
    Ok(())
}

/// The first byte of a `Content-Range: bytes START-END/TOTAL` answer.
fn content_range_start(response: &reqwest::Response) -> Option<u64> {
    let value = response
        .headers()
        .get(reqwest::header::CONTENT_RANGE)?
        .to_str()
        .ok()?;
    let range = value.trim().strip_prefix("bytes ")?;
    range.split('-').next()?.trim().parse().ok()
}

/// sha256 of a file, lower-case hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        context.update(&buffer[..n]);
    }
    Ok(hex(context.finish().as_ref()))
}

fn http_error(url: &str, e: reqwest::Error) -> HubError {
    HubError::Http {
        url: url.to_string(),
        message: e.to_string(),
    }
}

/// `hearth pull REPO`: downloads a model from the hub into the models folder.
#[derive(Debug, Clone, clap::Args)]
pub struct PullArgs {
    /// Repository id, e.g. `mlx-community/Qwen3-0.6B-4bit`.
    pub repo: String,
}

/// Runs `hearth pull`: progress on stderr, the model's folder on stdout.
/// Ctrl-C stops it, keeping what was fetched: running it again resumes.
pub fn run_pull(args: PullArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let models = crate::home::models_dir();
    std::fs::create_dir_all(&models)?;
    let endpoint = endpoint();
    let cancel = Cancel::default();
    let last = std::sync::Mutex::new(std::time::Instant::now());
    let report = |p: &DownloadProgress| {
        let Ok(mut last) = last.lock() else { return };
        if p.state == "downloading" && last.elapsed() < Duration::from_millis(500) {
            return;
        }
        *last = std::time::Instant::now();
        let total = p.bytes_total.map_or(String::new(), |t| format!(" of {t}"));
        eprintln!(
            "{}: {} files {}/{}, bytes {}{total}{}",
            p.repo,
            p.state,
            p.files_done,
            p.files_total,
            p.bytes_done,
            p.file
                .as_deref()
                .map_or(String::new(), |f| format!(" ({f})")),
        );
    };
    let result = runtime.block_on(async {
        let stop = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.cancel();
            }
        });
        download(
            &endpoint,
            &args.repo,
            &models,
            DownloadControl {
                progress: &report,
                cancel: cancel.clone(),
            },
        )
        .await
    });
    let folder = result?;
    println!("{}", folder.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        assert!(validate_repo("mlx-community/Qwen3-0.6B-4bit").is_ok());
        for bad in [
            "qwen",
            "a/b/c",
            "../x",
            "a/..",
            "a/.hidden",
            "/x",
            "a/",
            "a b/c",
        ] {
            assert!(validate_repo(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn model_files_only() {
        for good in [
            "config.json",
            "model.safetensors",
            "model-00001-of-00002.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.jinja",
        ] {
            assert!(wanted(good), "{good}");
        }
        for bad in [
            "README.md",
            ".gitattributes",
            "../config.json",
            "sub/config.json",
            "x.gguf",
            "model.safetensors.part",
        ] {
            assert!(!wanted(bad), "{bad}");
        }
    }
}
