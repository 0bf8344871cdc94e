//! `POST /api/models/download` `{"repo": "owner/name"}`: downloads a model
//! from the Hugging Face hub ([`crate::hub`], `$HF_ENDPOINT` for a mirror)
//! into the models folder in the background (202); `GET
//! /api/models/downloads` lists the downloads of this server's life with
//! their progress.

use std::sync::{Arc, Mutex};

use axum::{body::Bytes, extract::State, http::StatusCode, response::IntoResponse, Json};
use serde::Deserialize;

use crate::{
    home,
    hub::{self, DownloadProgress},
    server::{error::ApiError, extract::parse_json, manager::ModelManager},
};

/// Downloads, oldest first.
#[derive(Default)]
pub struct Downloads {
    list: Mutex<Vec<DownloadProgress>>,
}

impl Downloads {
    fn update(&self, progress: &DownloadProgress) {
        if let Ok(mut list) = self.list.lock() {
            match list
                .iter_mut()
                .rev()
                .find(|d| d.repo == progress.repo && !matches!(d.state, "done" | "failed"))
            {
                Some(entry) => *entry = progress.clone(),
                None => list.push(progress.clone()),
            }
        }
    }

    fn active(&self, repo: &str) -> bool {
        self.list.lock().is_ok_and(|list| {
            list.iter()
                .any(|d| d.repo == repo && !matches!(d.state, "done" | "failed"))
        })
    }

    pub fn all(&self) -> Vec<DownloadProgress> {
        self.list.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DownloadRequest {
    pub repo: String,
}

pub async fn start(
    State(manager): State<Arc<ModelManager>>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let request: DownloadRequest = parse_json(&body)?;
    let repo = request.repo.trim().to_string();
    let (_, name) =
        hub::validate_repo(&repo).map_err(|e| ApiError::invalid_param("repo", format!("{e}.")))?;
    let dir = home::models_dir();
    let conflict = |message: String| {
        let mut e = ApiError::invalid(message).with_param("repo");
        e.status = StatusCode::CONFLICT;
        e.code = Some("model_exists");
        e
    };
    if dir.join(name).exists() {
        return Err(conflict(format!(
            "A model named `{name}` is already in the models folder."
        )));
    }
    if manager.ui.downloads.active(&repo) {
        return Err(conflict(format!("`{repo}` is already downloading.")));
    }
    let first = DownloadProgress {
        repo: repo.clone(),
        state: "listing",
        model: name.to_string(),
        ..Default::default()
    };
    manager.ui.downloads.update(&first);
    let task_manager = manager.clone();
    tokio::spawn(async move {
        let downloads = &task_manager.ui.downloads;
        let endpoint = hub::endpoint();
        let result = hub::download(&endpoint, &repo, &dir, |p| downloads.update(p)).await;
        if let Err(e) = result {
            tracing::warn!(%repo, error = %e, "download failed");
            let mut failed = downloads
                .all()
                .into_iter()
                .rev()
                .find(|d| d.repo == repo)
                .unwrap_or_default();
            failed.repo = repo.clone();
            failed.state = "failed";
            failed.error = Some(e.to_string());
            downloads.update(&failed);
        }
    });
    Ok((StatusCode::ACCEPTED, Json(first)))
}

pub async fn list(State(manager): State<Arc<ModelManager>>) -> Json<Vec<DownloadProgress>> {
    Json(manager.ui.downloads.all())
}
