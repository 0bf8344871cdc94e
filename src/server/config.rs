//! Settings of `hearth serve`, shared by the command line, a config file and
//! (later) the menu-bar app.
//!
//! [`ServerSettings`] is plain serde data. Its keys are the command-line flags
//! (`max_running` or `max-running`, both spellings are accepted), so a config
//! file reads like the command line it replaces:
//!
//! ```toml
//! host = "127.0.0.1"
//! port = 8000
//! model = "SmolLM2-135M-Instruct.Q4_1.gguf"
//! max-running = 8
//! max-queue = 64
//! ```
//!
//! Precedence: built-in defaults, then the config file (`--config`, TOML or
//! JSON by extension, JSON also sniffed from a leading `{`), then the flags
//! given on the command line.
//!
//! Without `--config`, `hearth serve` reads the settings file the menu-bar
//! app writes, when it exists: [`default_config_path`] (`$HEARTH_CONFIG`,
//! else `config.toml` in the platform config dir's `hearth` folder).

use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::scheduler::SchedulerConfig;

/// Everything `hearth serve` can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to bind (default 127.0.0.1: only this machine can connect).
    pub host: String,
    /// Port to bind (default 8000; 0 picks a free one and prints it).
    pub port: u16,
    /// Model path, or name in `$HEARTH_HOME/models`; `None` = the default model.
    pub model: Option<String>,
    /// Extra names the served model answers to (`default` always does).
    pub aliases: Vec<String>,
    /// Most sequences prefilling or decoding at once.
    #[serde(alias = "max-running")]
    pub max_running: usize,
    /// Most requests waiting for a slot; beyond it requests get 429.
    #[serde(alias = "max-queue")]
    pub max_queue: usize,
    /// Tokens processed per engine step (decodes plus prompt chunks).
    #[serde(alias = "step-token-budget")]
    pub step_token_budget: usize,
    /// Most prompt tokens of one sequence per forward pass.
    #[serde(alias = "prefill-chunk")]
    pub prefill_chunk: usize,
    /// Prompt tokens a step may read while nothing decodes: a burst of
    /// requests in one pass (docs/scheduler.md, "Bursts").
    #[serde(alias = "burst-token-budget")]
    pub burst_token_budget: usize,
    /// Milliseconds an idle engine waits for the rest of a burst before its
    /// first pass (0 = none; docs/scheduler.md, "Bursts").
    #[serde(alias = "gather-ms")]
    pub gather_ms: f64,
    /// Bytes the KV caches may use; `None` = derived from system memory.
    #[serde(alias = "kv-memory-budget")]
    pub kv_memory_budget: Option<usize>,
    /// Pipelined decode (docs/scheduler.md); off only for comparisons.
    #[serde(alias = "pipeline-decode")]
    pub pipeline_decode: bool,
    /// Warm-up batches at load (on by default on a GPU; docs/scheduler.md).
    pub warmup: bool,
    /// Prompt chunks of several requests in one forward pass
    /// (docs/scheduler.md); off only for comparisons.
    #[serde(alias = "batch-prefill")]
    pub batch_prefill: bool,
    /// Seconds an idle engine keeps freed buffers cached for the next
    /// request before returning them to the device (docs/scheduler.md).
    #[serde(alias = "idle-release-seconds")]
    pub idle_release_seconds: f64,
    /// Prefix cache size in MiB, inside the KV budget; `None` = a quarter of
    /// the KV budget, 0 = off (docs/prefix-cache.md).
    #[serde(alias = "prefix-cache-mb")]
    pub prefix_cache_mb: Option<usize>,
    /// Most MiB of freed buffers MLX keeps cached for reuse; `None` =
    /// MLX's own limit (docs/scheduler.md, "Idle memory").
    #[serde(alias = "mlx-cache-mb")]
    pub mlx_cache_mb: Option<usize>,
    /// MiB of GPU memory kept free, other processes counted; 0 = off
    /// (docs/scheduler.md, "Sharing a GPU").
    #[serde(alias = "gpu-reserve-mb")]
    pub gpu_reserve_mb: usize,
    /// How a quantized model's weights are held on MLX's CPU backend:
    /// `auto` (float32 when they fit), `float32` or `quantized`
    /// (docs/mlx-on-linux.md).
    #[serde(alias = "cpu-weights")]
    pub cpu_weights: crate::device::CpuWeights,
    /// Largest request body accepted, in bytes (larger ones get 413).
    #[serde(alias = "max-body-bytes")]
    pub max_body_bytes: usize,
    /// Most choices (`n`) one request may ask for.
    #[serde(alias = "max-n")]
    pub max_n: usize,
    /// Seconds running requests get to finish after SIGINT/SIGTERM.
    #[serde(alias = "shutdown-grace-seconds")]
    pub shutdown_grace_seconds: f64,
    /// Origins allowed by CORS (`*` for any); empty = only the server's own
    /// origin (no CORS headers; cross-origin requests are refused).
    #[serde(alias = "cors-origins")]
    pub cors_origins: Vec<String>,
    /// API keys (plaintext or `sha256:HEX`); required to bind a
    /// non-loopback address. Never serialized back out.
    #[serde(alias = "api-keys", skip_serializing)]
    pub api_keys: Vec<String>,
    /// Most requests one key may have in flight (0 = no limit).
    #[serde(alias = "key-max-concurrent")]
    pub key_max_concurrent: usize,
    /// Most requests one key may start per minute (0 = no limit).
    #[serde(alias = "key-requests-per-minute")]
    pub key_requests_per_minute: u32,
    /// Advertise the server on the LAN with mDNS/DNS-SD when bound to a
    /// non-loopback address (src/server/discovery.rs).
    pub mdns: bool,
}

impl Default for ServerSettings {
    fn default() -> Self {
        let scheduler = SchedulerConfig::default();
        ServerSettings {
            host: "127.0.0.1".into(),
            port: 8000,
            model: None,
            aliases: Vec::new(),
            max_running: scheduler.max_running,
            max_queue: scheduler.max_queue,
            step_token_budget: scheduler.step_token_budget,
            prefill_chunk: scheduler.prefill_chunk,
            burst_token_budget: scheduler.burst_token_budget,
            gather_ms: scheduler.gather.as_secs_f64() * 1e3,
            kv_memory_budget: scheduler.kv_memory_budget,
            pipeline_decode: scheduler.pipeline_decode,
            warmup: scheduler.warmup,
            batch_prefill: scheduler.batch_prefill,
            idle_release_seconds: scheduler.idle_release.as_secs_f64(),
            prefix_cache_mb: None,
            mlx_cache_mb: None,
            gpu_reserve_mb: scheduler.device_reserve_bytes >> 20,
            cpu_weights: scheduler.cpu_weights,
            max_body_bytes: 16 * 1024 * 1024,
            max_n: 16,
            shutdown_grace_seconds: 10.0,
            cors_origins: Vec::new(),
            api_keys: Vec::new(),
            key_max_concurrent: 0,
            key_requests_per_minute: 0,
            mdns: true,
        }
    }
}

/// A config file could not be used, or the settings are inconsistent.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {} is not valid JSON for hearth serve: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("config file {} is not valid TOML for hearth serve: {source}", path.display())]
    Toml {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("cannot write config file {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid setting `{name}`: {reason}")]
    Invalid { name: &'static str, reason: String },
}

/// The settings file shared by `hearth serve` (when no `--config` is given)
/// and the menu-bar app: `$HEARTH_CONFIG` if set, else
/// `~/Library/Application Support/hearth/config.toml` (macOS),
/// `$XDG_CONFIG_HOME/hearth/config.toml` or `~/.config/hearth/config.toml`
/// (Linux). `None` when the platform has no config dir.
pub fn default_config_path() -> Option<PathBuf> {
    match std::env::var_os("HEARTH_CONFIG") {
        Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ => dirs::config_dir().map(|dir| dir.join("hearth").join("config.toml")),
    }
}

impl ServerSettings {
    /// The settings of [`default_config_path`]; the defaults when that file
    /// does not exist.
    pub fn load_default() -> Result<Self, ConfigError> {
        match default_config_path() {
            Some(path) if path.exists() => Self::from_file(&path),
            _ => Ok(Self::default()),
        }
    }

    /// Writes the settings as TOML (API keys included, unlike every other
    /// serialization: the file is created readable by its owner only).
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let write_error = |source| ConfigError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut table = toml::Table::try_from(self)
            .map_err(|e| write_error(std::io::Error::other(e.to_string())))?;
        if !self.api_keys.is_empty() {
            table.insert("api_keys".into(), self.api_keys.clone().into());
        }
        let text = toml::to_string_pretty(&table)
            .map_err(|e| write_error(std::io::Error::other(e.to_string())))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(write_error)?;
        }
        // Write a sibling then rename: a crash never leaves half a file.
        let tmp = path.with_extension("toml.tmp");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp).map_err(write_error)?;
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(write_error)?;
        drop(file);
        std::fs::rename(&tmp, path).map_err(write_error)
    }

    /// Reads a TOML or JSON config file (missing keys keep their defaults).
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
            || text.trim_start().starts_with('{');
        if is_json {
            serde_json::from_str(&text).map_err(|source| ConfigError::Json {
                path: path.to_path_buf(),
                source,
            })
        } else {
            toml::from_str(&text).map_err(|source| ConfigError::Toml {
                path: path.to_path_buf(),
                source,
            })
        }
    }

    /// Checks values that would otherwise fail later, less clearly.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |name, reason: &str| {
            Err(ConfigError::Invalid {
                name,
                reason: reason.to_string(),
            })
        };
        if self.host.parse::<IpAddr>().is_err() && self.host != "localhost" {
            return invalid("host", "must be an IP address (or `localhost`)");
        }
        if self.max_running == 0 {
            return invalid("max_running", "must be at least 1");
        }
        if self.step_token_budget == 0 {
            return invalid("step_token_budget", "must be at least 1");
        }
        if self.prefill_chunk == 0 {
            return invalid("prefill_chunk", "must be at least 1");
        }
        if self.max_body_bytes < 1024 {
            return invalid("max_body_bytes", "must be at least 1024");
        }
        if self.max_n == 0 {
            return invalid("max_n", "must be at least 1");
        }
        if !(self.shutdown_grace_seconds.is_finite() && self.shutdown_grace_seconds >= 0.0) {
            return invalid("shutdown_grace_seconds", "must be a number >= 0");
        }
        if !(self.gather_ms.is_finite() && (0.0..=1000.0).contains(&self.gather_ms)) {
            return invalid("gather_ms", "must be a number from 0 to 1000");
        }
        if !(self.idle_release_seconds.is_finite() && self.idle_release_seconds >= 0.0) {
            return invalid("idle_release_seconds", "must be a number >= 0");
        }
        if self.aliases.iter().any(|a| a.trim().is_empty()) {
            return invalid("aliases", "an alias may not be empty");
        }
        for key in &self.api_keys {
            if let Err(reason) = super::auth::parse_configured_key(key) {
                return invalid("api_keys", &reason);
            }
        }
        if !self.is_loopback() && self.api_keys.is_empty() {
            return Err(ConfigError::Invalid {
                name: "host",
                reason: format!(
                    "binding to {} exposes the server beyond this machine, so it needs at \
                     least one API key: pass --api-key KEY (or set HEARTH_API_KEY, or \
                     `api_keys` in the config file), or bind 127.0.0.1",
                    self.host
                ),
            });
        }
        Ok(())
    }

    /// The address to bind.
    pub fn socket_addr(&self) -> Result<SocketAddr, ConfigError> {
        let ip: IpAddr = if self.host == "localhost" {
            IpAddr::from([127, 0, 0, 1])
        } else {
            self.host.parse().map_err(|_| ConfigError::Invalid {
                name: "host",
                reason: format!("`{}` is not an IP address", self.host),
            })?
        };
        Ok(SocketAddr::new(ip, self.port))
    }

    /// Whether the server listens only on this machine (127.0.0.0/8, ::1,
    /// `localhost`).
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// The scheduler's part of the settings.
    pub fn scheduler_config(&self) -> SchedulerConfig {
        SchedulerConfig {
            max_running: self.max_running,
            max_queue: self.max_queue,
            step_token_budget: self.step_token_budget,
            prefill_chunk: self.prefill_chunk,
            burst_token_budget: self.burst_token_budget,
            gather: crate::scheduler::seconds(self.gather_ms / 1e3).unwrap_or_default(),
            kv_memory_budget: self.kv_memory_budget,
            pipeline_decode: self.pipeline_decode,
            warmup: self.warmup,
            batch_prefill: self.batch_prefill,
            idle_release: crate::scheduler::seconds(self.idle_release_seconds)
                .unwrap_or(crate::scheduler::DEFAULT_IDLE_RELEASE),
            prefix_cache_bytes: self.prefix_cache_mb.map(|mb| mb.saturating_mul(1 << 20)),
            mlx_cache_bytes: self.mlx_cache_mb.map(|mb| mb.saturating_mul(1 << 20)),
            device_reserve_bytes: self.gpu_reserve_mb.saturating_mul(1 << 20),
            device_free_memory: crate::device::cuda_free_memory,
            cpu_weights: self.cpu_weights,
        }
    }

    pub fn shutdown_grace(&self) -> Duration {
        crate::scheduler::seconds(self.shutdown_grace_seconds).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write config");
        path
    }

    #[test]
    fn toml_and_json_accept_flag_spellings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let toml_path = write(
            dir.path(),
            "serve.toml",
            "port = 9000\nmax-running = 3\nmax_queue = 5\naliases = [\"gpt-4o\"]\n\
             idle-release-seconds = 2.5\nmlx-cache-mb = 64\n",
        );
        let s = ServerSettings::from_file(&toml_path).expect("toml");
        assert_eq!(s.port, 9000);
        assert_eq!(
            s.scheduler_config().idle_release,
            Duration::from_millis(2500)
        );
        assert_eq!(s.scheduler_config().mlx_cache_bytes, Some(64 << 20));
        assert_eq!(
            ServerSettings::default().scheduler_config().mlx_cache_bytes,
            None
        );
        assert_eq!(s.max_running, 3);
        assert_eq!(s.max_queue, 5);
        assert_eq!(s.aliases, vec!["gpt-4o".to_string()]);
        assert_eq!(s.host, "127.0.0.1");

        let json_path = write(
            dir.path(),
            "serve.conf",
            r#"{"host": "0.0.0.0", "max-queue": 2, "model": "x.gguf"}"#,
        );
        let s = ServerSettings::from_file(&json_path).expect("json");
        assert_eq!(s.host, "0.0.0.0");
        assert_eq!(s.max_queue, 2);
        assert_eq!(s.model.as_deref(), Some("x.gguf"));
        assert_eq!(s.port, 8000);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), "bad.toml", "prot = 1\n");
        let err = ServerSettings::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("prot"), "{err}");

        let s = ServerSettings {
            max_running: 0,
            ..ServerSettings::default()
        };
        assert!(s.validate().is_err());
        let s = ServerSettings {
            host: "not a host".into(),
            ..ServerSettings::default()
        };
        assert!(s.validate().is_err());
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let s = ServerSettings {
                idle_release_seconds: bad,
                ..ServerSettings::default()
            };
            let err = s.validate().unwrap_err().to_string();
            assert!(err.contains("idle_release_seconds"), "{err}");
        }
        assert!(ServerSettings::default().validate().is_ok());
    }

    #[test]
    fn non_loopback_needs_a_key() {
        let lan = ServerSettings {
            host: "0.0.0.0".into(),
            ..ServerSettings::default()
        };
        let err = lan.validate().unwrap_err().to_string();
        assert!(err.contains("--api-key"), "{err}");
        let keyed = ServerSettings {
            api_keys: vec!["k".into()],
            ..lan.clone()
        };
        assert!(keyed.validate().is_ok());
        for host in ["127.0.0.1", "127.0.0.2", "::1", "localhost"] {
            let s = ServerSettings {
                host: host.into(),
                ..ServerSettings::default()
            };
            assert!(s.is_loopback() && s.validate().is_ok(), "{host}");
        }
        let bad_hash = ServerSettings {
            api_keys: vec!["sha256:12".into()],
            ..ServerSettings::default()
        };
        assert!(bad_hash.validate().is_err());
    }

    #[test]
    fn keys_are_never_serialized() {
        let s = ServerSettings {
            api_keys: vec!["top-secret".into()],
            ..ServerSettings::default()
        };
        let json = serde_json::to_string(&s).expect("json");
        assert!(!json.contains("top-secret"), "{json}");
    }

    #[test]
    fn saved_file_reads_back_with_its_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("config.toml");
        let s = ServerSettings {
            host: "0.0.0.0".into(),
            port: 8123,
            model: Some("m.gguf".into()),
            max_running: 3,
            api_keys: vec!["secret-key".into()],
            ..ServerSettings::default()
        };
        s.save(&path).expect("save");
        let back = ServerSettings::from_file(&path).expect("read back");
        assert_eq!(back, s);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o077, 0, "mode {mode:o}");
        }
        // Saving again replaces the file.
        let s2 = ServerSettings {
            api_keys: Vec::new(),
            ..s
        };
        s2.save(&path).expect("save again");
        assert_eq!(ServerSettings::from_file(&path).expect("read"), s2);
    }

    #[test]
    fn localhost_binds_loopback() {
        let s = ServerSettings {
            host: "localhost".into(),
            port: 1234,
            ..ServerSettings::default()
        };
        assert_eq!(
            s.socket_addr().expect("addr"),
            "127.0.0.1:1234".parse().expect("addr")
        );
    }
}
