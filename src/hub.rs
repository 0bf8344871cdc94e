//! Downloads a model from the Hugging Face hub (or any server laid out like
//! it, e.g. a mirror named by `HF_ENDPOINT`) into the models folder.
//!
//! The hub's layout: `GET {endpoint}/api/models/{repo}` lists the files
//! (`siblings[].rfilename`); `GET {endpoint}/{repo}/resolve/main/{file}`
//! serves one. We take what an MLX / Hugging Face model folder needs (config,
//! tokenizer files, chat template, safetensors and their index), write them
//! into `{models}/{name}.partial/` and rename that to `{models}/{name}` once
//! every file is complete, so a half-downloaded model is never listed.
//! `HF_TOKEN`, when set, is sent as a bearer token.

use std::{
    path::{Path, PathBuf},
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
}

/// Where a download stands.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DownloadProgress {
    pub repo: String,
    /// `listing`, `downloading`, `done` or `failed`.
    pub state: &'static str,
    pub file: Option<String>,
    pub files_done: usize,
    pub files_total: usize,
    pub bytes_done: u64,
    /// Sum of the files' sizes, when the hub says them.
    pub bytes_total: Option<u64>,
    pub error: Option<String>,
    /// The model's name in the models folder.
    pub model: String,
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
    safe && (name.ends_with(".safetensors")
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
}

/// Downloads `repo` into `models_dir/{name}`; `progress` is called as it
/// goes. Returns the model's folder.
pub async fn download(
    endpoint: &str,
    repo: &str,
    models_dir: &Path,
    progress: impl Fn(&DownloadProgress),
) -> Result<PathBuf, HubError> {
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
    let get = |url: String| {
        let mut request = client.get(url);
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        request
    };
    let info_url = format!("{endpoint}/api/models/{repo}");
    let response = get(info_url.clone())
        .send()
        .await
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
    state.state = "downloading";
    state.files_total = files.len();
    state.bytes_total = files.iter().map(|f| f.size).sum();
    progress(&state);

    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| HubError::Io { path, source }
    };
    let _ = tokio::fs::remove_dir_all(&partial).await;
    tokio::fs::create_dir_all(&partial)
        .await
        .map_err(io(&partial))?;
    for file in &files {
        state.file = Some(file.rfilename.clone());
        progress(&state);
        let url = format!("{endpoint}/{repo}/resolve/main/{}", file.rfilename);
        let response = get(url.clone())
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| http_error(&url, e))?;
        let path = partial.join(&file.rfilename);
        let mut out = tokio::fs::File::create(&path).await.map_err(io(&path))?;
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| http_error(&url, e))?;
            out.write_all(&chunk).await.map_err(io(&path))?;
            state.bytes_done += chunk.len() as u64;
            progress(&state);
        }
        out.flush().await.map_err(io(&path))?;
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

fn http_error(url: &str, e: reqwest::Error) -> HubError {
    HubError::Http {
        url: url.to_string(),
        message: e.to_string(),
    }
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
        ] {
            assert!(!wanted(bad), "{bad}");
        }
    }
}
