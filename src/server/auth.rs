//! Who may call the API: API keys, per-key limits and the `Origin` check.
//!
//! One [`AuthGate`] sits in front of every API route (a middleware layer in
//! [`super::router`]):
//!
//! * **Keys.** With keys configured (`--api-key`, `HEARTH_API_KEY`,
//!   `api_keys` in the config file) a request must carry one as
//!   `Authorization: Bearer KEY` or `x-api-key: KEY`, else 401 in the API's
//!   error shape (OpenAI's, or Anthropic's on `/v1/messages`). The gate keeps
//!   only SHA-256 hashes of the keys; a config file may give the hash itself
//!   (`sha256:HEX`) so that it holds no plaintext. A presented key is hashed
//!   and compared with every stored hash in constant time (no early exit, so
//!   timing says nothing about which key or how much of it matched).
//!   Binding a non-loopback address without a key is refused at start-up
//!   ([`super::config::ServerSettings::validate`]).
//! * **Per-key limits.** Each key (or, with no keys, the one anonymous
//!   client) may have at most `key_max_concurrent` requests in flight and
//!   `key_requests_per_minute` requests per minute (a token bucket that
//!   refills continuously). Over either: 429 with `Retry-After`. A request
//!   counts as in flight until its response body (an SSE stream included)
//!   is finished or dropped.
//! * **Origin.** Browsers send `Origin` on cross-site requests. Unless an
//!   origin is allowed by `--cors-origin`, a request from a page of another
//!   origin than the server's own is refused with 403, so a web page cannot
//!   drive a local server through the user's browser (the API accepts any
//!   content type, so "simple" cross-site POSTs would otherwise get through).
//!
//! `GET /health`, CORS preflights and the web UI's static files are open.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{header, HeaderMap, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures_util::StreamExt;
use subtle::ConstantTimeEq;

use super::{anthropic, config::ServerSettings, error::ApiError};

/// A SHA-256 digest of an API key.
pub type KeyHash = [u8; 32];

/// SHA-256 of `key`'s UTF-8 bytes.
pub fn hash_key(key: &str) -> KeyHash {
    let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// A configured key: plaintext, or `sha256:` + 64 hex digits (the hash of
/// the key, as `printf %s KEY | sha256sum` prints it).
pub fn parse_configured_key(entry: &str) -> Result<KeyHash, String> {
    let Some(hex) = entry.strip_prefix("sha256:") else {
        if entry.trim().is_empty() {
            return Err("an API key may not be empty".into());
        }
        return Ok(hash_key(entry));
    };
    if hex.len() != 64 {
        return Err(format!(
            "`sha256:` must be followed by 64 hex digits, got {}",
            hex.len()
        ));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| "`sha256:` must be followed by hex digits".to_string())?;
    }
    Ok(out)
}

/// Per-client limits; 0 = no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyLimits {
    pub max_concurrent: usize,
    pub requests_per_minute: u32,
}

/// Which client a request belongs to: the index of its key, or the single
/// anonymous client when no keys are configured.
type ClientId = usize;
const ANONYMOUS: ClientId = usize::MAX;

/// Usage of one client.
#[derive(Debug)]
struct ClientUsage {
    in_flight: usize,
    /// Token bucket for requests per minute.
    tokens: f64,
    refilled: Instant,
}

/// Why a request was refused by a limit.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitRefusal {
    Concurrency { limit: usize },
    Rate { limit: u32, retry_after: Duration },
}

/// Keys, limits and allowed origins; shared by the middleware.
pub struct AuthGate {
    keys: Vec<KeyHash>,
    limits: KeyLimits,
    cors_origins: Vec<String>,
    usage: Mutex<HashMap<ClientId, ClientUsage>>,
}

/// Releases one in-flight slot when dropped.
pub struct InFlight {
    gate: Arc<AuthGate>,
    client: ClientId,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut usage) = self.gate.usage.lock() {
            if let Some(u) = usage.get_mut(&self.client) {
                u.in_flight = u.in_flight.saturating_sub(1);
            }
        }
    }
}

impl AuthGate {
    /// The gate for `settings` (keys already validated by
    /// [`ServerSettings::validate`]; an unparsable one is skipped there).
    pub fn new(settings: &ServerSettings) -> Self {
        AuthGate {
            keys: settings
                .api_keys
                .iter()
                .filter_map(|k| parse_configured_key(k).ok())
                .collect(),
            limits: KeyLimits {
                max_concurrent: settings.key_max_concurrent,
                requests_per_minute: settings.key_requests_per_minute,
            },
            cors_origins: settings.cors_origins.clone(),
            usage: Mutex::new(HashMap::new()),
        }
    }

    pub fn requires_key(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The index of the key `presented` hashes to, compared in constant
    /// time against every stored hash.
    pub fn match_key(&self, presented: &str) -> Option<usize> {
        let hash = hash_key(presented);
        let mut found = None;
        for (i, stored) in self.keys.iter().enumerate() {
            let equal: bool = stored.ct_eq(&hash).into();
            if equal && found.is_none() {
                found = Some(i);
            }
        }
        found
    }

    /// Counts a new request of `client` against its limits, at `now`.
    fn admit(
        self: &Arc<Self>,
        client: ClientId,
        now: Instant,
    ) -> Result<Option<InFlight>, LimitRefusal> {
        let KeyLimits {
            max_concurrent,
            requests_per_minute,
        } = self.limits;
        if max_concurrent == 0 && requests_per_minute == 0 {
            return Ok(None);
        }
        let mut usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let u = usage.entry(client).or_insert_with(|| ClientUsage {
            in_flight: 0,
            tokens: f64::from(requests_per_minute),
            refilled: now,
        });
        if max_concurrent > 0 && u.in_flight >= max_concurrent {
            return Err(LimitRefusal::Concurrency {
                limit: max_concurrent,
            });
        }
        if requests_per_minute > 0 {
            let capacity = f64::from(requests_per_minute);
            let per_second = capacity / 60.0;
            let elapsed = now.saturating_duration_since(u.refilled).as_secs_f64();
            u.tokens = (u.tokens + elapsed * per_second).min(capacity);
            u.refilled = now;
            if u.tokens < 1.0 {
                let wait = (1.0 - u.tokens) / per_second;
                return Err(LimitRefusal::Rate {
                    limit: requests_per_minute,
                    retry_after: Duration::from_secs_f64(wait),
                });
            }
            u.tokens -= 1.0;
        }
        u.in_flight += 1;
        Ok(Some(InFlight {
            gate: self.clone(),
            client,
        }))
    }

    /// Whether a request with this `Origin` may be served: same origin as
    /// the `Host` it was sent to, or allowed by the CORS settings.
    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        if self.cors_origins.iter().any(|o| o == "*" || o == origin) {
            return true;
        }
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
    }
}

/// The key a request presents: `Authorization: Bearer KEY` or `x-api-key`.
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let value = value.trim();
        if let Some((scheme, key)) = value.split_once(' ') {
            if scheme.eq_ignore_ascii_case("bearer") && !key.trim().is_empty() {
                return Some(key.trim());
            }
        }
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// Routes anyone may call: health, preflights, the web UI's pages.
fn is_open(method: &Method, path: &str) -> bool {
    if method == Method::OPTIONS || path == "/health" {
        return true;
    }
    let api_prefix = [
        "/v1/",
        "/api/",
        "/metrics",
        "/chat/",
        "/completions",
        "/models",
        "/messages",
    ];
    method == Method::GET && !api_prefix.iter().any(|p| path.starts_with(p)) && path != "/v1"
}

/// An error in the shape the route's clients expect.
fn refuse(path: &str, error: ApiError) -> Response {
    if anthropic::is_anthropic_path(path) {
        anthropic::error_response(error)
    } else {
        error.into_response()
    }
}

fn unauthorized(message: &str) -> ApiError {
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        message: message.to_string(),
        kind: "invalid_request_error",
        param: None,
        code: Some("invalid_api_key"),
        retry_after: None,
    }
}

impl LimitRefusal {
    fn into_error(self) -> ApiError {
        let (message, retry_after) = match self {
            LimitRefusal::Concurrency { limit } => (
                format!(
                    "This API key already has {limit} requests in flight (the per-key limit); \
                     retry when one finishes."
                ),
                Duration::from_secs(1),
            ),
            LimitRefusal::Rate { limit, retry_after } => (
                format!("This API key is over its limit of {limit} requests per minute."),
                retry_after,
            ),
        };
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message,
            kind: "rate_limit_error",
            param: None,
            code: Some("rate_limit_exceeded"),
            retry_after: Some(retry_after),
        }
    }
}

/// The middleware: origin check, key check, limits; holds the in-flight
/// slot until the response body is done.
pub async fn check(State(gate): State<Arc<AuthGate>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if is_open(req.method(), &path) {
        return next.run(req).await;
    }
    let headers = req.headers();
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        if !gate.origin_allowed(origin, host) {
            let error = ApiError {
                status: StatusCode::FORBIDDEN,
                message: format!(
                    "Requests from web pages of origin `{origin}` are not allowed; start the \
                     server with `--cors-origin {origin}` to allow them."
                ),
                kind: "permission_error",
                param: None,
                code: Some("origin_not_allowed"),
                retry_after: None,
            };
            return refuse(&path, error);
        }
    }
    let client = if gate.requires_key() {
        match presented_key(headers) {
            None => {
                return refuse(
                    &path,
                    unauthorized(
                        "Missing API key: send it as `Authorization: Bearer KEY` or \
                         `x-api-key: KEY`.",
                    ),
                )
            }
            Some(key) => match gate.match_key(key) {
                Some(index) => index,
                None => return refuse(&path, unauthorized("Incorrect API key provided.")),
            },
        }
    } else {
        ANONYMOUS
    };
    let in_flight = match gate.admit(client, Instant::now()) {
        Ok(slot) => slot,
        Err(refusal) => return refuse(&path, refusal.into_error()),
    };
    let response = next.run(req).await;
    match in_flight {
        None => response,
        Some(slot) => {
            let (parts, body) = response.into_parts();
            let stream = body.into_data_stream().map(move |chunk| {
                let _held = &slot;
                chunk
            });
            Response::from_parts(parts, Body::from_stream(stream))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(keys: &[&str], limits: KeyLimits) -> Arc<AuthGate> {
        let settings = ServerSettings {
            api_keys: keys.iter().map(|k| k.to_string()).collect(),
            key_max_concurrent: limits.max_concurrent,
            key_requests_per_minute: limits.requests_per_minute,
            cors_origins: vec!["http://allowed.example".into()],
            ..ServerSettings::default()
        };
        Arc::new(AuthGate::new(&settings))
    }

    #[test]
    fn keys_match_by_hash_plain_or_configured_as_hash() {
        // sha256("secret-2"), as `printf %s secret-2 | sha256sum` prints it.
        let hashed = format!(
            "sha256:{}",
            hash_key("secret-2")
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let g = gate(&["secret-1", &hashed], KeyLimits::default());
        assert_eq!(g.match_key("secret-1"), Some(0));
        assert_eq!(g.match_key("secret-2"), Some(1));
        assert_eq!(g.match_key("secret-"), None);
        assert_eq!(g.match_key(""), None);
        assert!(parse_configured_key("sha256:abc").is_err());
        assert!(parse_configured_key(&format!("sha256:{}", "zz".repeat(32))).is_err());
        assert!(parse_configured_key("  ").is_err());
    }

    #[test]
    fn known_sha256_vector() {
        let hex: String = hash_key("abc").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn keys_from_both_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer  k1 ".parse().expect("value"));
        assert_eq!(presented_key(&h), Some("k1"));
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "k2".parse().expect("value"));
        assert_eq!(presented_key(&h), Some("k2"));
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Basic xyz".parse().expect("value"));
        assert_eq!(presented_key(&h), None);
    }

    #[test]
    fn rate_limit_refills_over_time() {
        let g = gate(
            &[],
            KeyLimits {
                max_concurrent: 0,
                requests_per_minute: 2,
            },
        );
        let t0 = Instant::now();
        assert!(g.admit(ANONYMOUS, t0).is_ok());
        assert!(g.admit(ANONYMOUS, t0).is_ok());
        match g.admit(ANONYMOUS, t0) {
            Err(LimitRefusal::Rate { retry_after, .. }) => {
                // One token per 30 s.
                assert!((29.0..=30.0).contains(&retry_after.as_secs_f64()));
            }
            other => panic!("expected a rate refusal, got {:?}", other.err()),
        }
        assert!(g.admit(ANONYMOUS, t0 + Duration::from_secs(31)).is_ok());
        // Another client has its own bucket.
        assert!(g.admit(0, t0).is_ok());
    }

    #[test]
    fn concurrency_slots_free_on_drop() {
        let g = gate(
            &[],
            KeyLimits {
                max_concurrent: 1,
                requests_per_minute: 0,
            },
        );
        let now = Instant::now();
        let first = g.admit(ANONYMOUS, now).expect("first");
        assert_eq!(
            g.admit(ANONYMOUS, now).err(),
            Some(LimitRefusal::Concurrency { limit: 1 })
        );
        drop(first);
        assert!(g.admit(ANONYMOUS, now).is_ok());
    }

    #[test]
    fn origins() {
        let g = gate(&[], KeyLimits::default());
        assert!(g.origin_allowed("http://127.0.0.1:8000", Some("127.0.0.1:8000")));
        assert!(g.origin_allowed("http://allowed.example", Some("127.0.0.1:8000")));
        assert!(!g.origin_allowed("http://evil.example", Some("127.0.0.1:8000")));
        assert!(!g.origin_allowed("null", Some("127.0.0.1:8000")));
        assert!(!g.origin_allowed("http://127.0.0.1:9999", Some("127.0.0.1:8000")));
    }

    #[test]
    fn open_routes() {
        assert!(is_open(&Method::GET, "/health"));
        assert!(is_open(&Method::GET, "/"));
        assert!(is_open(&Method::GET, "/assets/app.js"));
        assert!(is_open(&Method::OPTIONS, "/v1/chat/completions"));
        assert!(!is_open(&Method::GET, "/v1/models"));
        assert!(!is_open(&Method::GET, "/models"));
        assert!(!is_open(&Method::GET, "/metrics"));
        assert!(!is_open(&Method::GET, "/api/status"));
        assert!(!is_open(&Method::POST, "/v1/messages"));
        assert!(!is_open(&Method::POST, "/"));
    }
}
