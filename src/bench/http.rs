//! The HTTP side of a benchmark request: connect first, send later.
//!
//! For gated scenarios the connection must exist *before* the gate opens, so
//! that "released together" means the requests leave together instead of
//! racing through TCP handshakes. For `http://` targets (every local server)
//! this module speaks HTTP/1.1 itself over a [`TcpStream`]: [`connect`] opens
//! the socket, [`Connection::send`] writes the request and returns a
//! [`ResponseStream`] that yields body bytes with the instant each read
//! returned. Responses may be chunked, length-delimited or close-delimited
//! (Python's `http.server` closes). `https://` targets go through `reqwest`
//! with a per-request client, warmed with a `GET /v1/models` before the gate
//! so its pooled connection (and TLS session) is normally ready.
//!
//! Requests carry `Connection: close`: one request per connection keeps
//! every stream independent and the byte accounting simple.

use std::time::{Duration, Instant};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use super::error::RequestError;

/// Where a target lives, split once from its base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    /// The URL as given, normalised (no trailing `/`, no trailing `/v1`).
    pub url: String,
    https: bool,
    host: String,
    port: u16,
    /// Path prefix before `/v1/...` (usually empty).
    prefix: String,
}

impl BaseUrl {
    /// Accepts `http://host:port`, `http://host:port/v1` (what OpenAI clients
    /// call `base_url`) or a prefix such as `http://host/proxy/v1`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let url = reqwest::Url::parse(raw.trim()).map_err(|e| format!("bad URL '{raw}': {e}"))?;
        let https = match url.scheme() {
            "http" => false,
            "https" => true,
            other => return Err(format!("unsupported scheme '{other}' in '{raw}'")),
        };
        let host = url
            .host_str()
            .ok_or_else(|| format!("no host in '{raw}'"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = url
            .port_or_known_default()
            .ok_or_else(|| format!("no port in '{raw}'"))?;
        let mut prefix = url.path().trim_end_matches('/').to_owned();
        if let Some(stripped) = prefix.strip_suffix("/v1") {
            prefix = stripped.to_owned();
        }
        let scheme = if https { "https" } else { "http" };
        let host_part = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        Ok(Self {
            url: format!("{scheme}://{host_part}:{port}{prefix}"),
            https,
            host,
            port,
            prefix,
        })
    }

    /// Full URL of an API path such as `/v1/models`.
    pub fn endpoint(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    fn host_header(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// An established connection, ready to send one request.
pub enum Connection {
    Plain {
        stream: TcpStream,
        base: BaseUrl,
    },
    Client {
        client: reqwest::Client,
        base: BaseUrl,
    },
}

/// Open a connection to `base` (see the module docs for what "open" means
/// for `https`).
pub async fn connect(
    base: &BaseUrl,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<Connection, RequestError> {
    if base.https {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| RequestError::Client(e.to_string()))?;
        let mut warm = client.get(base.endpoint("/v1/models"));
        if let Some(key) = api_key {
            warm = warm.bearer_auth(key);
        }
        // Best effort: only the connection matters, not the answer.
        if let Ok(response) = warm.send().await {
            let _ = response.bytes().await;
        }
        return Ok(Connection::Client {
            client,
            base: base.clone(),
        });
    }
    let stream = tokio::time::timeout(timeout, TcpStream::connect((base.host.as_str(), base.port)))
        .await
        .map_err(|_| RequestError::Timeout(timeout.as_secs_f64()))?
        .map_err(|e| RequestError::Connect(format!("{}: {e}", base.host_header())))?;
    stream.set_nodelay(true)?;
    Ok(Connection::Plain {
        stream,
        base: base.clone(),
    })
}

impl Connection {
    /// POST `body` (JSON) to `path` and return the response once its headers
    /// have arrived.
    pub async fn send(
        self,
        path: &str,
        body: Vec<u8>,
        api_key: Option<&str>,
    ) -> Result<ResponseStream, RequestError> {
        match self {
            Connection::Plain { mut stream, base } => {
                let mut head = format!(
                    "POST {}{} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
                     Accept: text/event-stream, application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\nUser-Agent: hearth-bench/{}\r\n",
                    base.prefix,
                    path,
                    base.host_header(),
                    body.len(),
                    env!("CARGO_PKG_VERSION"),
                );
                if let Some(key) = api_key {
                    head.push_str(&format!("Authorization: Bearer {key}\r\n"));
                }
                head.push_str("\r\n");
                let mut request = head.into_bytes();
                request.extend_from_slice(&body);
                stream.write_all(&request).await?;
                stream.flush().await?;
                read_head(stream).await
            }
            Connection::Client { client, base } => {
                let mut request = client
                    .post(base.endpoint(path))
                    .header("content-type", "application/json")
                    .header("accept", "text/event-stream, application/json")
                    .body(body);
                if let Some(key) = api_key {
                    request = request.bearer_auth(key);
                }
                let response = request
                    .send()
                    .await
                    .map_err(|e| RequestError::Client(e.to_string()))?;
                let status = response.status().as_u16();
                let content_type = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                Ok(ResponseStream {
                    status,
                    content_type,
                    body: Body::Client(response),
                })
            }
        }
    }
}

/// A response whose body is read incrementally.
pub struct ResponseStream {
    pub status: u16,
    pub content_type: String,
    body: Body,
}

enum Body {
    Plain {
        stream: TcpStream,
        framing: Framing,
        /// Body bytes that arrived with the headers, and when.
        early: Option<(Instant, Vec<u8>)>,
        done: bool,
    },
    Client(reqwest::Response),
}

enum Framing {
    Chunked(ChunkedDecoder),
    Length(u64),
    UntilClose,
}

impl ResponseStream {
    /// The next piece of the decoded body and the instant its bytes arrived;
    /// `None` at the end of the body.
    pub async fn next_chunk(&mut self) -> Result<Option<(Instant, Vec<u8>)>, RequestError> {
        match &mut self.body {
            Body::Client(response) => match response.chunk().await {
                Ok(Some(bytes)) => Ok(Some((Instant::now(), bytes.to_vec()))),
                Ok(None) => Ok(None),
                Err(e) => Err(RequestError::Client(e.to_string())),
            },
            Body::Plain {
                stream,
                framing,
                early,
                done,
            } => {
                if let Some((at, bytes)) = early.take() {
                    let decoded = decode(framing, &bytes, done)?;
                    if !decoded.is_empty() {
                        return Ok(Some((at, decoded)));
                    }
                }
                let mut buffer = vec![0u8; 16 * 1024];
                while !*done {
                    let read = stream.read(&mut buffer).await?;
                    let at = Instant::now();
                    if read == 0 {
                        *done = true;
                        return match framing {
                            Framing::UntilClose => Ok(None),
                            Framing::Length(0) => Ok(None),
                            Framing::Length(left) => Err(RequestError::Http(format!(
                                "connection closed with {left} body bytes missing"
                            ))),
                            Framing::Chunked(decoder) if decoder.is_done() => Ok(None),
                            Framing::Chunked(_) => Err(RequestError::Http(
                                "connection closed inside a chunked body".into(),
                            )),
                        };
                    }
                    let decoded = decode(framing, &buffer[..read], done)?;
                    if !decoded.is_empty() {
                        return Ok(Some((at, decoded)));
                    }
                }
                Ok(None)
            }
        }
    }

    /// Read the rest of the body as text (error responses, non-streaming answers).
    pub async fn text(mut self, limit: usize) -> Result<String, RequestError> {
        let mut all = Vec::new();
        while let Some((_, bytes)) = self.next_chunk().await? {
            all.extend_from_slice(&bytes);
            if all.len() > limit {
                all.truncate(limit);
                break;
            }
        }
        Ok(String::from_utf8_lossy(&all).into_owned())
    }
}

fn decode(framing: &mut Framing, bytes: &[u8], done: &mut bool) -> Result<Vec<u8>, RequestError> {
    match framing {
        Framing::UntilClose => Ok(bytes.to_vec()),
        Framing::Length(left) => {
            let take = (*left).min(bytes.len() as u64) as usize;
            *left -= take as u64;
            if *left == 0 {
                *done = true;
            }
            Ok(bytes[..take].to_vec())
        }
        Framing::Chunked(decoder) => {
            let mut out = Vec::new();
            decoder.feed(bytes, &mut out).map_err(RequestError::Http)?;
            if decoder.is_done() {
                *done = true;
            }
            Ok(out)
        }
    }
}

/// Read the status line and headers; keep whatever body bytes came along.
async fn read_head(mut stream: TcpStream) -> Result<ResponseStream, RequestError> {
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 4096];
    let (header_end, at) = loop {
        let read = stream.read(&mut buffer).await?;
        let at = Instant::now();
        if read == 0 {
            return Err(RequestError::Http(format!(
                "connection closed before the response headers ({} bytes read)",
                head.len()
            )));
        }
        head.extend_from_slice(&buffer[..read]);
        if let Some(end) = find_header_end(&head) {
            break (end, at);
        }
        if head.len() > 64 * 1024 {
            return Err(RequestError::Http("response headers over 64 KiB".into()));
        }
    };
    let rest = head.split_off(header_end);
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.split("\r\n").flat_map(|l| l.split('\n'));
    let status_line = lines.next().unwrap_or_default();
    let status = parse_status(status_line)?;
    let mut content_type = String::new();
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => content_type = value.to_owned(),
            "content-length" => content_length = value.parse::<u64>().ok(),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let framing = if chunked {
        Framing::Chunked(ChunkedDecoder::default())
    } else if let Some(length) = content_length {
        Framing::Length(length)
    } else {
        Framing::UntilClose
    };
    let done = matches!(framing, Framing::Length(0));
    Ok(ResponseStream {
        status,
        content_type,
        body: Body::Plain {
            stream,
            framing,
            early: (!rest.is_empty()).then_some((at, rest)),
            done,
        },
    })
}

fn find_header_end(bytes: &[u8]) -> Option<usize> {
    if let Some(i) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        return Some(i + 4);
    }
    bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2)
}

fn parse_status(line: &str) -> Result<u16, RequestError> {
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next().and_then(|s| s.parse().ok())) {
        (Some(version), Some(status)) if version.starts_with("HTTP/") => Ok(status),
        _ => Err(RequestError::Http(format!("bad status line {line:?}"))),
    }
}

/// Incremental decoder for `Transfer-Encoding: chunked` bodies.
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    line: Vec<u8>,
}

#[derive(Debug, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Done,
}

impl ChunkedDecoder {
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decode `input`, appending payload bytes to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        while !input.is_empty() {
            match self.state {
                ChunkState::Data(left) => {
                    let take = left.min(input.len() as u64) as usize;
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    self.state = if left == take as u64 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left - take as u64)
                    };
                }
                ChunkState::Done => return Ok(()), // ignore anything after the body
                ChunkState::Size | ChunkState::DataEnd | ChunkState::Trailer => {
                    let Some(newline) = input.iter().position(|&b| b == b'\n') else {
                        self.line.extend_from_slice(input);
                        if self.line.len() > 4096 {
                            return Err("chunk header line over 4 KiB".into());
                        }
                        return Ok(());
                    };
                    self.line.extend_from_slice(&input[..newline]);
                    input = &input[newline + 1..];
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    self.end_line(line)?;
                }
            }
        }
        Ok(())
    }

    fn end_line(&mut self, line: &[u8]) -> Result<(), String> {
        match self.state {
            ChunkState::Size => {
                let text = String::from_utf8_lossy(line);
                let size_text = text.split(';').next().unwrap_or_default().trim();
                let size = u64::from_str_radix(size_text, 16)
                    .map_err(|_| format!("bad chunk size line {text:?}"))?;
                self.state = if size == 0 {
                    ChunkState::Trailer
                } else {
                    ChunkState::Data(size)
                };
            }
            ChunkState::DataEnd => {
                if !line.is_empty() {
                    return Err("chunk data not followed by CRLF".into());
                }
                self.state = ChunkState::Size;
            }
            ChunkState::Trailer => {
                if line.is_empty() {
                    self.state = ChunkState::Done;
                }
            }
            ChunkState::Data(_) | ChunkState::Done => unreachable!("not a line state"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_forms() {
        let a = BaseUrl::parse("http://127.0.0.1:8000/v1/").unwrap();
        assert_eq!(a.url, "http://127.0.0.1:8000");
        assert_eq!(a.endpoint("/v1/models"), "http://127.0.0.1:8000/v1/models");
        let b = BaseUrl::parse("http://localhost:8080").unwrap();
        assert_eq!(b.url, "http://localhost:8080");
        let c = BaseUrl::parse("https://example.com/proxy/v1").unwrap();
        assert_eq!(c.url, "https://example.com:443/proxy");
        assert!(c.https);
        let d = BaseUrl::parse("http://[::1]:9000").unwrap();
        assert_eq!(d.host_header(), "[::1]:9000");
        assert!(BaseUrl::parse("ftp://x").is_err());
        assert!(BaseUrl::parse("not a url").is_err());
    }

    #[test]
    fn chunked_decoding_at_every_split() {
        let body: &[u8] = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: y\r\n\r\nGARBAGE";
        for split in 0..=body.len() {
            let mut decoder = ChunkedDecoder::default();
            let mut out = Vec::new();
            decoder.feed(&body[..split], &mut out).unwrap();
            decoder.feed(&body[split..], &mut out).unwrap();
            assert_eq!(out, b"hello, world", "split at {split}");
            assert!(decoder.is_done());
        }
    }

    #[test]
    fn chunked_errors() {
        let mut decoder = ChunkedDecoder::default();
        assert!(decoder.feed(b"zz\r\n", &mut Vec::new()).is_err());
        let mut decoder = ChunkedDecoder::default();
        assert!(decoder.feed(b"2\r\nabX\r\n", &mut Vec::new()).is_err());
    }

    #[test]
    fn status_line() {
        assert_eq!(parse_status("HTTP/1.1 200 OK").unwrap(), 200);
        assert_eq!(parse_status("HTTP/1.0 429 Too Many Requests").unwrap(), 429);
        assert!(parse_status("garbage").is_err());
    }
}
