//! The control API's listeners: the Unix socket (always; mode 0660, owner root, the admin
//! group), and TCP only when configured — TLS required unless it is a loopback address.
//! Each connection is served by hyper's HTTP/1.1 with the guard in front of the routes; a
//! connection cap and a header timeout keep a flood of idle connections from starving it.

use super::guard::{guard, Guard, Peer};
use crate::service::Daemon;
use axum::extract::Request;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// Connections served at once (each is cheap; the cap bounds what a flood can take).
const MAX_CONNECTIONS: usize = 256;
/// A client must send its request head within this long.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// A TLS handshake must finish within this long.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the API listens (from `strata serve` flags or /etc/strata/strata.toml).
#[derive(Debug, Clone)]
pub struct ApiListen {
    /// The Unix socket.
    pub socket: PathBuf,
    /// Its group: members are admins. None: root only.
    pub socket_group: Option<String>,
    /// A TCP listener (bearer tokens), if any.
    pub tcp: Option<SocketAddr>,
    /// Certificate chain and private key (PEM) for TCP; required off loopback.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Extra names clients may use in `Host` for the TCP listener.
    pub hostnames: Vec<String>,
}

impl ApiListen {
    pub fn new(socket: PathBuf) -> ApiListen {
        ApiListen { socket, socket_group: Some("strata".into()), tcp: None, tls: None, hostnames: Vec::new() }
    }
}

/// Listeners bound before the daemon opens its pools, so a busy port fails at once.
pub(crate) struct Bound {
    unix: std::os::unix::net::UnixListener,
    tcp: Option<(std::net::TcpListener, Option<tokio_rustls::TlsAcceptor>, Arc<Vec<String>>)>,
    pub admin_gid: Option<u32>,
}

pub(crate) fn bind(l: &ApiListen) -> Result<Bound, String> {
    let admin_gid = match &l.socket_group {
        None => None,
        Some(g) => {
            let gid = crate::access::group_gid(g);
            if gid.is_none() {
                tracing::warn!(group = %g, "no such group: only root may use the API socket (scripts/install.sh makes the group)");
            }
            gid
        }
    };
    let unix = bind_socket(&l.socket, admin_gid)?;
    let tcp = match l.tcp {
        None => None,
        Some(addr) => {
            let tls = match &l.tls {
                Some((cert, key)) => Some(tls_acceptor(cert, key)?),
                None if addr.ip().is_loopback() => None,
                None => {
                    return Err(format!(
                        "the API's TCP listener {addr} is not a loopback address: TLS is required there \
                         (give --tls-cert and --tls-key, or api.tls_cert/api.tls_key in the config)"
                    ))
                }
            };
            let listener = std::net::TcpListener::bind(addr).map_err(|e| format!("listen on {addr}: {e}"))?;
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            let local = listener.local_addr().map_err(|e| e.to_string())?;
            let mut hosts = vec![local.to_string(), format!("localhost:{}", local.port())];
            if local.ip().is_loopback() {
                hosts.push(format!("127.0.0.1:{}", local.port()));
                hosts.push(format!("[::1]:{}", local.port()));
            }
            for h in &l.hostnames {
                hosts.push(format!("{h}:{}", local.port()));
            }
            Some((listener, tls, Arc::new(hosts)))
        }
    };
    Ok(Bound { unix, tcp, admin_gid })
}

/// Bind the socket with no access for others from the first instant (umask), then give
/// it to root and the admin group, mode 0660. A socket file left by a dead daemon is
/// replaced; one a live daemon answers on is not.
fn bind_socket(path: &Path, gid: Option<u32>) -> Result<std::os::unix::net::UnixListener, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    if path.exists() {
        // A daemon killed a moment ago may still hold its socket while its last threads
        // exit (the kernel queues connections until the descriptor closes): give it a few
        // seconds before calling the socket another daemon's.
        let start = std::time::Instant::now();
        while std::os::unix::net::UnixStream::connect(path).is_ok() {
            if start.elapsed() > Duration::from_secs(5) {
                return Err(format!("{} is in use: another daemon is running (stop it first)", path.display()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        std::fs::remove_file(path).map_err(|e| format!("remove the stale socket {}: {e}", path.display()))?;
    }
    // SAFETY: umask only changes the process's file-creation mask; restored at once.
    let old = unsafe { libc::umask(0o177) };
    let bound = std::os::unix::net::UnixListener::bind(path);
    unsafe { libc::umask(old) };
    let listener = bound.map_err(|e| format!("listen on {}: {e}", path.display()))?;
    if let Some(gid) = gid {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: chown of a path we just created; uid -1 leaves the owner.
        if unsafe { libc::chown(c.as_ptr(), u32::MAX, gid) } != 0 {
            return Err(format!("chown {}: {}", path.display(), std::io::Error::last_os_error()));
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    }
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(listener)
}

fn tls_acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("TLS certificate {}: no certificate in it (PEM expected)", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("TLS key {}: {e}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("TLS certificate and key: {e}"))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The router with the guard in front, for the listeners.
pub(crate) fn app(d: Arc<Daemon>, admin_gid: Option<u32>) -> Router {
    let (routes, doc) = super::routes();
    let g = Arc::new(Guard::new(d.clone(), doc, admin_gid));
    let fallback = || async { crate::service::ApiError::not_found("no such endpoint", "see /v1/openapi.json") };
    // The console's routes are behind the guard too; it lets their reads through (console.rs).
    let routes = routes.merge(super::console::routes());
    routes.fallback(fallback).layer(axum::middleware::from_fn_with_state(g, guard)).with_state(d)
}

/// Serve until the runtime is dropped.
pub(crate) async fn serve(bound: Bound, app: Router) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let unix = tokio::net::UnixListener::from_std(bound.unix).expect("a non-blocking socket in the runtime");
    {
        let (app, slots) = (app.clone(), slots.clone());
        tokio::spawn(async move {
            loop {
                let Ok(permit) = slots.clone().acquire_owned().await else { return };
                let (stream, _) = match unix.accept().await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("API socket accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let peer = match stream.peer_cred() {
                    Ok(c) => Peer::Unix { uid: c.uid(), gid: c.gid(), pid: c.pid() },
                    Err(e) => {
                        tracing::warn!("API socket: no peer credentials: {e}");
                        continue;
                    }
                };
                let app = app.clone();
                tokio::spawn(async move {
                    serve_connection(stream, peer, app).await;
                    drop(permit);
                });
            }
        });
    }
    if let Some((listener, tls, hosts)) = bound.tcp {
        let listener = tokio::net::TcpListener::from_std(listener).expect("a non-blocking listener in the runtime");
        tokio::spawn(async move {
            loop {
                let Ok(permit) = slots.clone().acquire_owned().await else { return };
                let (stream, addr) = match listener.accept().await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("API TCP accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let peer = Peer::Tcp { addr, hosts: tls.is_none().then(|| hosts.clone()) };
                let (app, tls) = (app.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        None => serve_connection(stream, peer, app).await,
                        Some(acceptor) => {
                            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                                Ok(Ok(s)) => serve_connection(s, peer, app).await,
                                Ok(Err(e)) => tracing::warn!(%addr, "TLS handshake: {e}"),
                                Err(_) => tracing::warn!(%addr, "TLS handshake timed out"),
                            }
                        }
                    }
                    drop(permit);
                });
            }
        });
    }
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: S, peer: Peer, app: Router) {
    let svc = app.map_request(move |mut req: Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(peer.clone());
        req
    });
    let r = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(svc))
        .await;
    if let Err(e) = r {
        tracing::debug!("API connection: {e}");
    }
}
