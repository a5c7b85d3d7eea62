//! The CLI's side of the control API: HTTP/1.1, one request per connection, over the
//! daemon's Unix socket (default), or TCP with a bearer token (`STRATA_API=HOST:PORT`,
//! `https://HOST:PORT` for TLS with `STRATA_CA_CERT`; `STRATA_TOKEN`). Responses are read
//! into strata-api's types; an error answer becomes a `Failure` carrying its kind.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use strata_api::{ErrorBody, ErrorKind, EXIT_UNREACHABLE, EXIT_USAGE};

/// Why a command failed, and the exit status it gives.
#[derive(Debug)]
pub struct Failure {
    pub kind: Option<ErrorKind>,
    pub message: String,
    pub hint: Option<String>,
    pub exit: u8,
}

impl Failure {
    /// A mistake on the command line (exit 2).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { kind: Some(ErrorKind::InvalidArgument), message: message.into(), hint: None, exit: EXIT_USAGE }
    }
    pub fn other(message: impl Into<String>) -> Failure {
        Failure { kind: None, message: message.into(), hint: None, exit: strata_api::EXIT_FAILURE }
    }
}

impl From<String> for Failure {
    /// Messages of the CLI's own checks are usage errors.
    fn from(m: String) -> Failure {
        Failure::usage(m)
    }
}

impl From<&str> for Failure {
    fn from(m: &str) -> Failure {
        Failure::usage(m)
    }
}

pub enum Endpoint {
    Unix(PathBuf),
    Tcp { addr: String, tls: Option<(Arc<rustls::ClientConfig>, String)> },
}

pub struct Client {
    pub endpoint: Endpoint,
    pub token: Option<String>,
}

/// A path segment, percent-encoded (names may hold any character but '/').
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

impl Client {
    /// From the command line / environment: `api` (HOST:PORT or https://HOST:PORT) if given,
    /// else the Unix socket.
    pub fn new(
        socket: PathBuf,
        api: Option<String>,
        token: Option<String>,
        ca: Option<PathBuf>,
    ) -> Result<Client, Failure> {
        let endpoint = match api {
            None => Endpoint::Unix(socket),
            Some(a) => match a.strip_prefix("https://") {
                Some(hostport) => {
                    let ca = ca.ok_or_else(|| {
                        Failure::usage(format!(
                            "{a}: TLS needs the daemon's CA certificate (STRATA_CA_CERT or --ca-cert)"
                        ))
                    })?;
                    let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h).trim_matches(['[', ']']);
                    Endpoint::Tcp { addr: hostport.to_string(), tls: Some((tls_config(&ca)?, host.to_string())) }
                }
                None => Endpoint::Tcp { addr: a.strip_prefix("http://").unwrap_or(&a).to_string(), tls: None },
            },
        };
        Ok(Client { endpoint, token })
    }

    fn describe(&self) -> String {
        match &self.endpoint {
            Endpoint::Unix(p) => p.display().to_string(),
            Endpoint::Tcp { addr, .. } => addr.clone(),
        }
    }

    fn connect(&self) -> Result<(Box<dyn Stream>, String), Failure> {
        let unreachable = |e: std::io::Error| {
            let hint = match (&self.endpoint, e.kind()) {
                (Endpoint::Unix(_), std::io::ErrorKind::PermissionDenied) => {
                    "only root and members of the daemon's group (strata) may use it"
                }
                _ => "start it with `strata serve` (or scripts/run.sh), or point STRATA_SOCKET / STRATA_API at it",
            };
            Failure {
                kind: None,
                message: format!("cannot reach the Strata daemon at {}: {e}", self.describe()),
                hint: Some(hint.into()),
                exit: EXIT_UNREACHABLE,
            }
        };
        let timeout = Some(Duration::from_secs(3600));
        match &self.endpoint {
            Endpoint::Unix(path) => {
                let s = std::os::unix::net::UnixStream::connect(path).map_err(unreachable)?;
                s.set_read_timeout(timeout).map_err(unreachable)?;
                Ok((Box::new(s), "localhost".into()))
            }
            Endpoint::Tcp { addr, tls } => {
                let s = std::net::TcpStream::connect(addr).map_err(unreachable)?;
                s.set_read_timeout(timeout).map_err(unreachable)?;
                match tls {
                    None => Ok((Box::new(s), addr.clone())),
                    Some((config, host)) => {
                        let name = rustls::pki_types::ServerName::try_from(host.clone())
                            .map_err(|e| Failure::usage(format!("TLS server name {host:?}: {e}")))?;
                        let conn = rustls::ClientConnection::new(config.clone(), name)
                            .map_err(|e| Failure::other(format!("TLS: {e}")))?;
                        Ok((Box::new(rustls::StreamOwned::new(conn, s)), addr.clone()))
                    }
                }
            }
        }
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Failure> {
        self.call::<(), T>("GET", path, None)
    }

    /// A request that changes something: always `application/json`, `{}` when it has no body.
    pub fn send<B: Serialize, T: DeserializeOwned>(&self, method: &str, path: &str, body: &B) -> Result<T, Failure> {
        self.call(method, path, Some(body))
    }

    pub fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, Failure> {
        let (mut s, host) = self.connect()?;
        let payload = match body {
            Some(b) => serde_json::to_string(b).map_err(|e| Failure::other(format!("encode the request: {e}")))?,
            None if method != "GET" => "{}".into(),
            None => String::new(),
        };
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        if method != "GET" {
            req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", payload.len()));
        }
        if let Some(t) = &self.token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(&payload);
        let io = |e: std::io::Error| Failure {
            kind: None,
            message: format!("talking to the Strata daemon at {}: {e}", self.describe()),
            hint: Some("see the daemon's log".into()),
            exit: strata_api::EXIT_FAILURE,
        };
        s.write_all(req.as_bytes()).map_err(io)?;
        s.flush().map_err(io)?;
        let mut raw = Vec::new();
        match s.read_to_end(&mut raw) {
            Ok(_) => {}
            // A TLS peer that closes without close_notify after a full answer.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(io(e)),
        }
        let (status, body) = parse_response(&raw).map_err(Failure::other)?;
        if status >= 400 {
            return Err(match serde_json::from_slice::<ErrorBody>(&body) {
                Ok(e) => Failure {
                    kind: Some(e.error.kind),
                    message: e.error.message,
                    hint: Some(e.error.hint),
                    exit: e.error.kind.exit_code(),
                },
                Err(_) => Failure::other(format!(
                    "the daemon answered {status}: {}",
                    String::from_utf8_lossy(&body).chars().take(200).collect::<String>()
                )),
            });
        }
        serde_json::from_slice(&body).map_err(|e| {
            Failure::other(format!("unexpected answer from the daemon ({e}): is it the same version as this CLI?"))
        })
    }
}

/// Status and body of an HTTP/1.1 response (Content-Length or chunked).
fn parse_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let split =
        raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("malformed reply from the daemon (no header end)")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = &raw[split + 4..];
    let status: u16 = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("malformed status line from the daemon")?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    Ok((status, if chunked { dechunk(body)? } else { body.to_vec() }))
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").ok_or("truncated chunked reply")?;
        let size_text = String::from_utf8_lossy(&body[..line_end]);
        let n = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "malformed chunk size in the reply")?;
        body = &body[line_end + 2..];
        if n == 0 {
            return Ok(out);
        }
        let chunk = body.get(..n).ok_or("truncated chunk in the reply")?;
        out.extend_from_slice(chunk);
        body = body.get(n + 2..).ok_or("truncated chunk in the reply")?;
    }
}

fn tls_config(ca: &PathBuf) -> Result<Arc<rustls::ClientConfig>, Failure> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Failure::usage(format!("CA certificate {}: {e}", ca.display())))?;
    for c in certs {
        roots.add(c).map_err(|e| Failure::usage(format!("CA certificate {}: {e}", ca.display())))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| Failure::other(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_encoded_and_replies_parsed() {
        assert_eq!(seg("db-1.a_b"), "db-1.a_b");
        assert_eq!(seg("a b/c%?#"), "a%20b%2Fc%25%3F%23");
        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_response(r).unwrap(), (200, b"{}".to_vec()));
        let c = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(c).unwrap(), (404, b"abcde".to_vec()));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab").is_err());
        assert!(parse_response(b"garbage").is_err());
    }
}
