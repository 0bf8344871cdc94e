//! `POST /api/models/download` `{"repo": "owner/name"}`: downloads a model
//! from the Hugging Face hub ([`crate::hub`], `$HF_ENDPOINT` for a mirror)
//! into the models folder in the background (202), resuming what an earlier
//! attempt left; `POST /api/models/download/cancel` `{"repo": ...}` stops a
//! running one (its files stay for the next attempt); `GET
//! /api/models/downloads` lists the downloads of this server's life with
//! their progress.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{body::Bytes, extract::State, http::StatusCode, response::IntoResponse, Json};
use serde::Deserialize;

use super::not_found;
use crate::{
    home,
    hub::{self, Cancel, DownloadControl, DownloadProgress, HubError},
    server::{error::ApiError, extract::parse_json, manager::ModelManager},
};

/// Downloads, oldest first, and the cancel handles of the running ones.
#[derive(Default)]
pub struct Downloads {
    list: Mutex<Vec<DownloadProgress>>,
    running: Mutex<HashMap<String, Cancel>>,
}

impl Downloads {
    fn update(&self, progress: &DownloadProgress) {
        if let Ok(mut list) = self.list.lock() {
            match list
                .iter_mut()
                .rev()
                .find(|d| d.repo == progress.repo && !d.finished())
            {
                Some(entry) => *entry = progress.clone(),
                None => list.push(progress.clone()),
            }
        }
    }

    fn active(&self, repo: &str) -> bool {
        self.list
            .lock()
            .is_ok_and(|list| list.iter().any(|d| d.repo == repo && !d.finished()))
    }

    /// Marks the running download of `repo` as ended with `state`.
    fn finish(&self, repo: &str, state: &'static str, error: Option<String>) {
        let mut last = self
            .all()
            .into_iter()
            .rev()
            .find(|d| d.repo == repo)
            .unwrap_or_default();
        if last.finished() {
            return;
        }
        last.repo = repo.to_string();
        last.state = state;
        last.file = None;
        last.error = error;
        self.update(&last);
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
    let downloads = &manager.ui.downloads;
    downloads.update(&first);
    let cancel = Cancel::default();
    if let Ok(mut running) = downloads.running.lock() {
        running.insert(repo.clone(), cancel.clone());
    }
    let task_manager = manager.clone();
    tokio::spawn(async move {
        let downloads = &task_manager.ui.downloads;
        let endpoint = hub::endpoint();
        let report = |p: &DownloadProgress| downloads.update(p);
        let control = DownloadControl {
            progress: &report,
            cancel,
        };
        let result = hub::download(&endpoint, &repo, &dir, control).await;
        if let Ok(mut running) = downloads.running.lock() {
            running.remove(&repo);
        }
        match result {
            Ok(_) => {}
            Err(HubError::Cancelled) => {
                tracing::info!(%repo, "download cancelled");
                downloads.finish(&repo, "cancelled", Some(HubError::Cancelled.to_string()));
            }
            Err(e) => {
                tracing::warn!(%repo, error = %e, "download failed");
                downloads.finish(&repo, "failed", Some(e.to_string()));
            }
        }
    });
    Ok((StatusCode::ACCEPTED, Json(first)))
}

/// `POST /api/models/download/cancel`: 200 with the download's progress
/// (the task marks it `cancelled` as it stops); 404 when `repo` is not
/// downloading.
pub async fn cancel(
    State(manager): State<Arc<ModelManager>>,
    body: Bytes,
) -> Result<Json<DownloadProgress>, ApiError> {
    let request: DownloadRequest = parse_json(&body)?;
    let repo = request.repo.trim().to_string();
    let downloads = &manager.ui.downloads;
    let handle = downloads
        .running
        .lock()
        .ok()
        .and_then(|r| r.get(&repo).cloned());
    let Some(handle) = handle else {
        let mut e = not_found(&format!("A running download of `{repo}`"));
        e.param = Some("repo".into());
        return Err(e);
    };
    handle.cancel();
    // The task notices at its next await; wait briefly so the answer
    // already says `cancelled`.
    for _ in 0..100 {
        if !downloads.active(&repo) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let last = downloads
        .all()
        .into_iter()
        .rev()
        .find(|d| d.repo == repo)
        .unwrap_or_default();
    Ok(Json(last))
}

pub async fn list(State(manager): State<Arc<ModelManager>>) -> Json<Vec<DownloadProgress>> {
    Json(manager.ui.downloads.all())
}
