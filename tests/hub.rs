//! The hub downloader (`hearth::hub`, `hearth pull`) against a local server
//! laid out like the Hugging Face hub (tests/fake_hub): resume of a cut
//! transfer with `Range` from the exact byte kept in the `.part` file, a
//! server without `Range` support, sha256 checked against the hub's
//! metadata (a mismatch deletes the file), the disk-space check, cancel,
//! and the `hearth pull` command.

mod fake_hub;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::Duration,
};

use fake_hub::FakeHub;
use hearth::hub::{self, Cancel, DownloadControl, DownloadProgress, HubError};

const REPO: &str = "test-org/tiny";

/// A repository folder: config, tokenizer and a 3 MiB weight file of
/// pseudo-random bytes (the downloader does not parse files).
fn repository(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).expect("repo dir");
    std::fs::write(repo.join("config.json"), br#"{"model_type": "qwen3"}"#).expect("config");
    std::fs::write(repo.join("tokenizer.json"), br#"{"version": "1.0"}"#).expect("tokenizer");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let weights: Vec<u8> = (0..3 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(repo.join("model.safetensors"), weights).expect("weights");
    repo
}

async fn run(
    hub: &FakeHub,
    models: &Path,
    cancel: Cancel,
) -> (Result<PathBuf, HubError>, Vec<DownloadProgress>) {
    let seen = Mutex::new(Vec::new());
    let report = |p: &DownloadProgress| seen.lock().expect("lock").push(p.clone());
    let result = hub::download(
        &hub.url,
        REPO,
        models,
        DownloadControl {
            progress: &report,
            cancel,
        },
    )
    .await;
    (result, seen.into_inner().expect("lock"))
}

fn same_files(a: &Path, b: &Path) {
    for name in ["config.json", "tokenizer.json", "model.safetensors"] {
        assert_eq!(
            std::fs::read(a.join(name)).expect("downloaded file"),
            std::fs::read(b.join(name)).expect("hub file"),
            "{name}"
        );
    }
    assert!(!a.join("README.md").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumes_a_cut_transfer_from_the_part_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = repository(dir.path());
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).expect("models");
    let hub = FakeHub::start(&[(REPO, source.clone())]).await;
    let cut_at = 1_000_000u64;
    hub.knobs().cut = Some(("model.safetensors".into(), cut_at));

    let (first, _) = run(&hub, &models, Cancel::default()).await;
    assert!(
        matches!(first, Err(HubError::Http { .. })),
        "the cut fails the first attempt: {first:?}"
    );
    let part = models.join("tiny.partial/model.safetensors.part");
    let kept = std::fs::metadata(&part).expect("the .part is kept").len();
    assert!(kept > 0 && kept <= cut_at, "{kept}");
    assert!(!models.join("tiny").exists());

    let (second, seen) = run(&hub, &models, Cancel::default()).await;
    let folder = second.expect("the second attempt completes");
    assert_eq!(folder, models.join("tiny"));
    same_files(&folder, &source);
    assert!(!models.join("tiny.partial").exists());
    let last = seen.last().expect("progress");
    assert_eq!(last.state, "done");
    assert_eq!(last.files_verified, 1, "the weights' sha256 was checked");
    assert!(
        last.bytes_resumed >= kept,
        "resumed {} bytes",
        last.bytes_resumed
    );
    assert_eq!(Some(last.bytes_done), last.bytes_total);
    // The second attempt asked for the rest only, and skipped finished files.
    let fetches: Vec<_> = hub
        .log()
        .into_iter()
        .filter(|f| f.file == "model.safetensors")
        .collect();
    assert_eq!(fetches.len(), 2, "{fetches:?}");
    assert_eq!(fetches[0].range, None);
    assert_eq!(fetches[1].range, Some(format!("bytes={kept}-")));
    assert_eq!(fetches[1].status, 206);
    let config_fetches = hub.log().iter().filter(|f| f.file == "config.json").count();
    assert_eq!(config_fetches, 1, "a finished file is not fetched again");
    assert!(hub.log().iter().all(|f| f.file != "README.md"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_range_restarts_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = repository(dir.path());
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).expect("models");
    let hub = FakeHub::start(&[(REPO, source.clone())]).await;
    hub.knobs().cut = Some(("model.safetensors".into(), 500_000));
    let (first, _) = run(&hub, &models, Cancel::default()).await;
    assert!(first.is_err());
    let kept = std::fs::metadata(models.join("tiny.partial/model.safetensors.part"))
        .expect(".part kept")
        .len();
    assert!(kept > 0);
    hub.knobs().no_range = true;
    let (second, _) = run(&hub, &models, Cancel::default()).await;
    same_files(&second.expect("completes"), &source);
    let last = hub
        .log()
        .into_iter()
        .rfind(|f| f.file == "model.safetensors")
        .expect("fetch");
    assert_eq!(last.range, Some(format!("bytes={kept}-")));
    assert_eq!(last.status, 200, "the server sent the whole file again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_sha256_deletes_the_file_and_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = repository(dir.path());
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).expect("models");
    let hub = FakeHub::start(&[(REPO, source.clone())]).await;
    let listed = "ab".repeat(32);
    hub.knobs()
        .wrong_sha
        .insert("model.safetensors".into(), listed.clone());
    let (result, _) = run(&hub, &models, Cancel::default()).await;
    match result {
        Err(HubError::Checksum {
            file,
            expected,
            actual,
        }) => {
            assert_eq!(file, "model.safetensors");
            assert_eq!(expected, listed);
            let real = hub::sha256_file(&source.join("model.safetensors")).expect("hash");
            assert_eq!(actual, real);
        }
        other => panic!("expected a checksum error, got {other:?}"),
    }
    let partial = models.join("tiny.partial");
    assert!(!partial.join("model.safetensors.part").exists());
    assert!(!partial.join("model.safetensors").exists());
    assert!(!models.join("tiny").exists());
    // With the right digest listed again, a retry completes.
    hub.knobs().wrong_sha.clear();
    let (retry, _) = run(&hub, &models, Cancel::default()).await;
    same_files(&retry.expect("completes"), &source);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_a_download_larger_than_the_free_space() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = repository(dir.path());
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).expect("models");
    let free = hub::free_space(&models).expect("the models folder's disk is known");
    assert!(free > 0);
    let hub = FakeHub::start(&[(REPO, source)]).await;
    let listed = free + (1 << 30);
    hub.knobs()
        .listed_size
        .insert("model.safetensors".into(), listed);
    let (result, _) = run(&hub, &models, Cancel::default()).await;
    match result {
        Err(HubError::NoSpace {
            needed, available, ..
        }) => {
            assert!(needed >= listed, "{needed} < {listed}");
            assert!(available < needed);
        }
        other => panic!("expected a disk-space error, got {other:?}"),
    }
    assert!(hub.log().is_empty(), "nothing is fetched: {:?}", hub.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_and_keeps_the_part_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = repository(dir.path());
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).expect("models");
    let hub = FakeHub::start(&[(REPO, source.clone())]).await;
    hub.knobs().delay_per_chunk = Some(Duration::from_millis(20));
    let cancel = Cancel::default();
    let stopper = cancel.clone();
    let part = models.join("tiny.partial/model.safetensors.part");
    let watched = part.clone();
    tokio::spawn(async move {
        while std::fs::metadata(&watched).map_or(0, |m| m.len()) < 100_000 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stopper.cancel();
    });
    let (result, seen) = tokio::time::timeout(Duration::from_secs(30), run(&hub, &models, cancel))
        .await
        .expect("cancel ends the download quickly");
    assert!(matches!(result, Err(HubError::Cancelled)), "{result:?}");
    let kept = std::fs::metadata(&part).expect(".part kept").len();
    assert!((100_000..3 << 20).contains(&kept), "{kept}");
    assert!(seen.iter().all(|p| p.state != "done"));
    hub.knobs().delay_per_chunk = None;
    let (resumed, seen) = run(&hub, &models, Cancel::default()).await;
    same_files(&resumed.expect("completes"), &source);
    assert_eq!(seen.last().map(|p| p.bytes_resumed >= kept), Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearth_pull_downloads_into_the_models_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = repository(dir.path());
    let home = dir.path().join("home");
    let hub = FakeHub::start(&[(REPO, source.clone())]).await;
    let url = hub.url.clone();
    let home_dir = home.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(["pull", REPO])
            .env("HEARTH_HOME", &home_dir)
            .env("HF_ENDPOINT", &url)
            .output()
            .expect("run hearth pull")
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let folder = home.join("models/tiny");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        folder.display().to_string()
    );
    same_files(&folder, &source);
    assert!(stderr.contains("done"), "{stderr}");
    // A second pull refuses: the model exists.
    let again = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["pull", REPO])
        .env("HEARTH_HOME", &home)
        .env("HF_ENDPOINT", &hub.url)
        .output()
        .expect("run hearth pull");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
}
