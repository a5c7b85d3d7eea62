//! The replication listener (`strata serve --repl-port`): one thread accepts, one thread
//! per connection serves it.
//!
//! A connection goes: ClientHello (its ALPN picks pairing or peer session) → TLS 1.3
//! handshake with a client certificate → for pairing, one proof frame and one answer; for
//! a peer session, a greeting, then requests until the client closes or goes idle. All of
//! it up to an authenticated session is bounded by `HANDSHAKE_TIMEOUT` and counted against
//! `MAX_HANDSHAKES`; sessions against `MAX_CONNECTIONS`. Over either cap a connection is
//! closed at once (and logged): a flood costs the daemon a socket accept, not a thread.

use super::identity::{fingerprint, short};
use super::token::EXPORTER_LABEL;
use super::verify::PinnedClients;
use super::wire::{self, FrameError, HandshakeError, Hello, PairRequest, Reply};
use super::{
    PeerRequest, PeerResponse, ALPN_PAIR, ALPN_PEER, HANDSHAKE_TIMEOUT, IDLE_TIMEOUT, MAX_CONNECTIONS, MAX_FRAME_BYTES,
    MAX_HANDSHAKES, VERSION,
};
use crate::service::{ApiError, Daemon};
use rustls::server::{Acceptor, NoServerSessionStorage};
use rustls::{ServerConfig, StreamOwned};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_api::ErrorKind;

/// A pairing request is a few hundred bytes; nothing larger is read from a stranger.
const MAX_PAIR_FRAME_BYTES: usize = 4096;

/// Bind the listener (before the pools open, so a busy port fails at once).
pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr).map_err(|e| format!("replication listener on {addr}: {e}"))
}

/// The session's side of the listener, handed to `Daemon::handle_peer_request`: answer the
/// request, and carry raw bytes after it.
pub struct ServerConnection {
    tls: StreamOwned<rustls::ServerConnection, TcpStream>,
    remote: SocketAddr,
    /// The handler sent a reply to the current request.
    replied: bool,
    /// The handler used the raw stream during the current request.
    raw: bool,
    /// A request a handler read ahead and gave back (`push_back`): served next.
    next: Option<PeerRequest>,
}

impl ServerConnection {
    /// Answer the current request.
    pub fn reply(&mut self, resp: &PeerResponse) -> Result<(), ApiError> {
        self.replied = true;
        self.send(&Reply::Ok(resp.clone()))
    }

    /// Answer several requests read as one (`ready_request`), in order, with one write.
    pub fn reply_all(&mut self, resps: &[PeerResponse]) -> Result<(), ApiError> {
        self.replied = true;
        let mut buf = Vec::new();
        for r in resps {
            wire::write_frame(&mut buf, &Reply::Ok(r)).expect("a Vec takes every write");
        }
        self.tls
            .write_all(&buf)
            .and_then(|()| self.tls.flush())
            .map_err(|e| ApiError::unavailable(format!("answer the peer at {}: {e}", self.remote), "see its log"))
    }

    /// The session's byte stream for raw data (a send stream) during the current request.
    /// Writes leave as they are made: wrap it in a `BufWriter` for many small ones.
    pub fn stream(&mut self) -> &mut (impl Read + Write) {
        self.raw = true;
        &mut self.tls
    }

    /// How long each read or write may wait (default `IDLE_TIMEOUT`).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ApiError> {
        let io = |e: io::Error| ApiError::internal(format!("set a peer connection's timeout: {e}"));
        self.tls.sock.set_read_timeout(timeout).map_err(io)?;
        self.tls.sock.set_write_timeout(timeout).map_err(io)
    }

    /// The peer's address on this connection.
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote
    }

    /// The next request, if the peer has already sent (the start of) it: for a handler that
    /// serves requests sent back to back as one (sync appends: one journal write for all).
    /// None when nothing is waiting; an error ends the session (after the handler's answers).
    pub fn ready_request(&mut self) -> Result<Option<PeerRequest>, ApiError> {
        let buffered = self.tls.conn.process_new_packets().map(|s| s.plaintext_bytes_to_read()).unwrap_or(0);
        if buffered == 0 && !readable_now(&self.tls.sock) {
            return Ok(None);
        }
        match wire::read_frame(&mut self.tls, MAX_FRAME_BYTES) {
            Ok(r) => Ok(Some(r)),
            Err(e) => Err(ApiError::unavailable(format!("the peer's next request: {e}"), "the session ends")),
        }
    }

    /// Give back a request `ready_request` returned: the session serves it next.
    pub fn push_back(&mut self, req: PeerRequest) {
        debug_assert!(self.next.is_none(), "one request is read ahead at a time");
        self.next = Some(req);
    }

    fn send<T: serde::Serialize>(&mut self, r: &Reply<T>) -> Result<(), ApiError> {
        wire::write_frame(&mut self.tls, r)
            .map_err(|e| ApiError::unavailable(format!("answer the peer at {}: {e}", self.remote), "see its log"))
    }
}

/// The two TLS configurations: pairing (any client key; the proof follows) and sessions
/// (paired peers' fingerprints only).
struct Configs {
    peer: Arc<ServerConfig>,
    pair: Arc<ServerConfig>,
}

fn server_config(d: &Daemon, verifier: PinnedClients, alpn: &[u8]) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let id = &d.peers.identity;
    let mut c = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS: {e}"))?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_single_cert(vec![id.cert.clone()], id.key())
        .map_err(|e| format!("this daemon's peer certificate: {e}"))?;
    c.alpn_protocols = vec![alpn.to_vec()];
    // No resumption: a resumed session would skip the client-certificate check, and a peer
    // deleted since must be refused.
    c.send_tls13_tickets = 0;
    c.session_storage = Arc::new(NoServerSessionStorage {});
    Ok(Arc::new(c))
}

/// Connections counted against a cap; the slot is given back when the guard drops.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(counter: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok()?;
        Some(Slot(counter.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serve the listener until the daemon stops.
pub(crate) fn spawn_listener(d: Arc<Daemon>, listener: TcpListener) -> Result<(), String> {
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    d.peers.set_listen_addr(local);
    let known = {
        let d = Arc::downgrade(&d);
        Arc::new(move |fp: &str| d.upgrade().is_some_and(|d| d.peers.is_peer(fp)))
    };
    let configs = Arc::new(Configs {
        peer: server_config(&d, PinnedClients::peers(known), ALPN_PEER)?,
        pair: server_config(&d, PinnedClients::pairing(), ALPN_PAIR)?,
    });
    let (active, handshaking) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    tracing::info!(address = %local, fingerprint = %d.peers.identity.fingerprint, "replication listener ready");
    std::thread::Builder::new()
        .name("repl-listen".into())
        .spawn(move || loop {
            let (sock, remote) = match listener.accept() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("replication listener: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            if d.stopping.load(Ordering::Relaxed) {
                return;
            }
            let Some(session) = Slot::take(&active, MAX_CONNECTIONS) else {
                tracing::warn!(%remote, "replication listener: {MAX_CONNECTIONS} connections already: closed");
                continue;
            };
            let Some(hs) = Slot::take(&handshaking, MAX_HANDSHAKES) else {
                tracing::warn!(%remote, "replication listener: {MAX_HANDSHAKES} handshakes in progress already: closed");
                continue;
            };
            let (d, configs) = (d.clone(), configs.clone());
            let spawned = std::thread::Builder::new().name("repl-conn".into()).spawn(move || {
                let _session = session;
                if let Err(why) = serve_connection(&d, &configs, sock, remote, hs) {
                    tracing::info!(%remote, "replication connection ended: {why}");
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(%remote, "replication listener: no thread for a connection: {e}");
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn serve_connection(
    d: &Arc<Daemon>,
    configs: &Configs,
    mut sock: TcpStream,
    remote: SocketAddr,
    handshake_slot: Slot,
) -> Result<(), String> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let _ = sock.set_nodelay(true);
    let hs_err = |e: HandshakeError| format!("handshake: {e}");
    // The ClientHello: its ALPN says which configuration answers it.
    let mut acceptor = Acceptor::default();
    let accepted = loop {
        wire::bound_by(&sock, deadline).map_err(hs_err)?;
        match acceptor.read_tls(&mut sock) {
            Ok(0) => return Err("closed before its TLS hello".into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(hs_err(HandshakeError::TimedOut))
            }
            Err(e) => return Err(format!("reading its TLS hello: {e}")),
        }
        match acceptor.accept() {
            Ok(Some(a)) => break a,
            Ok(None) => continue,
            Err((e, mut alert)) => {
                let _ = alert.write_all(&mut sock);
                return Err(format!("TLS hello: {e}"));
            }
        }
    };
    let pairing = accepted.client_hello().alpn().is_some_and(|mut protocols| protocols.any(|p| p == ALPN_PAIR));
    let config = if pairing { configs.pair.clone() } else { configs.peer.clone() };
    let mut conn = match accepted.into_connection(config) {
        Ok(c) => c,
        Err((e, mut alert)) => {
            let _ = alert.write_all(&mut sock);
            return Err(format!("TLS: {e}"));
        }
    };
    wire::handshake(&mut conn, &mut sock, deadline).map_err(hs_err)?;
    let client_fp = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| fingerprint(c))
        .ok_or("no client certificate (the verifier requires one)")?;
    if pairing {
        return serve_pairing(d, conn, sock, remote, &client_fp, deadline);
    }
    drop(handshake_slot);
    serve_session(d, StreamOwned::new(conn, sock), remote, &client_fp)
}

/// A pairing session: one proof, one answer, closed. Nothing else is read from the client.
fn serve_pairing(
    d: &Daemon,
    conn: rustls::ServerConnection,
    sock: TcpStream,
    remote: SocketAddr,
    client_fp: &str,
    deadline: Instant,
) -> Result<(), String> {
    let exporter =
        conn.export_keying_material([0u8; 32], EXPORTER_LABEL, None).map_err(|e| format!("TLS exporter: {e}"))?;
    let mut tls = StreamOwned::new(conn, sock);
    wire::bound_by(&tls.sock, deadline).map_err(|e| format!("pairing: {e}"))?;
    let outcome = match wire::read_frame::<_, PairRequest>(&mut tls, MAX_PAIR_FRAME_BYTES) {
        Ok(req) => d.accept_pairing(client_fp, &exporter, &req, remote),
        Err(e @ (FrameError::Malformed(_) | FrameError::TooLarge(_))) => Err(wire::bad_frame("pairing request", &e)),
        Err(FrameError::Io(e)) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
            return Err(format!("pairing: no proof within {} s", HANDSHAKE_TIMEOUT.as_secs()))
        }
        Err(e) => return Err(format!("pairing: {e}")),
    };
    let _ = tls.sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
    let reply = match &outcome {
        Ok(a) => Reply::Ok(a.clone()),
        Err(e) => Reply::from(e),
    };
    let sent = wire::write_frame(&mut tls, &reply);
    tls.conn.send_close_notify();
    let _ = tls.flush();
    match outcome {
        Ok(a) => {
            tracing::info!(%remote, peer = %a.name, fingerprint = %short(client_fp), "paired with a new peer");
            sent.map_err(|e| format!("pairing answer: {e}"))
        }
        Err(e) => {
            tracing::warn!(%remote, fingerprint = %short(client_fp), "pairing refused: {}", e.message);
            Ok(())
        }
    }
}

/// A peer session: the greeting, then one request at a time.
fn serve_session(
    d: &Daemon,
    tls: StreamOwned<rustls::ServerConnection, TcpStream>,
    remote: SocketAddr,
    client_fp: &str,
) -> Result<(), String> {
    let mut sc = ServerConnection { tls, remote, replied: false, raw: false, next: None };
    sc.set_timeout(Some(IDLE_TIMEOUT)).map_err(|e| e.message)?;
    let Some(peer) = d.peers.identity_of(client_fp) else {
        // Deleted between the handshake and now.
        let _ = sc.send(&Reply::<Hello>::from(&no_longer_a_peer()));
        return Err("the peer was deleted during its handshake".into());
    };
    sc.send(&Reply::Ok(Hello { version: VERSION.into(), your_name: peer.name.clone() })).map_err(|e| e.message)?;
    tracing::debug!(%remote, peer = %peer.name, "peer session");
    loop {
        let read = match sc.next.take() {
            Some(r) => Ok(r),
            None => wire::read_frame(&mut sc.tls, MAX_FRAME_BYTES),
        };
        let req = match read {
            Ok(r) => r,
            Err(FrameError::Closed) => return Ok(()),
            Err(e @ FrameError::Malformed(_)) => {
                // The frame was read whole: the session stays in step.
                let _ = sc.send(&Reply::<PeerResponse>::from(&wire::bad_frame("request", &e)));
                continue;
            }
            Err(e @ FrameError::TooLarge(_)) => {
                let _ = sc.send(&Reply::<PeerResponse>::from(&wire::bad_frame("request", &e)));
                return Err(format!("peer {}: {e}", peer.name));
            }
            Err(FrameError::Io(e)) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(format!("peer {}: idle for {} s, closed", peer.name, IDLE_TIMEOUT.as_secs()))
            }
            Err(FrameError::Io(e)) => return Err(format!("peer {}: {e}", peer.name)),
        };
        // Deleted (or its grants changed) since the last request: the record decides.
        let Some(peer) = d.peers.identity_of(client_fp) else {
            let _ = sc.send(&Reply::<PeerResponse>::from(&no_longer_a_peer()));
            return Err("the peer was deleted: session ended".into());
        };
        sc.replied = false;
        sc.raw = false;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.handle_peer_request(&peer, req, &mut sc)));
        let (clean, replied) = (!sc.replied && !sc.raw, sc.replied);
        match r {
            Ok(Ok(())) if replied => {}
            Ok(Ok(())) => {
                let e = ApiError::internal("the request's handler sent no answer");
                sc.send(&Reply::<PeerResponse>::from(&e)).map_err(|e| e.message)?;
            }
            Ok(Err(e)) if clean => sc.send(&Reply::<PeerResponse>::from(&e)).map_err(|e| e.message)?,
            Ok(Err(e)) => {
                return Err(format!("peer {}: {} (after its answer began: connection ended)", peer.name, e.message))
            }
            Err(_) => {
                if clean {
                    let _ = sc.send(&Reply::<PeerResponse>::from(&ApiError::internal("the request's handler failed")));
                }
                return Err(format!("peer {}: the request's handler panicked", peer.name));
            }
        }
    }
}

/// Whether `sock` has bytes to read (or its end) right now.
fn readable_now(sock: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents != 0
}

fn no_longer_a_peer() -> ApiError {
    ApiError::new(
        ErrorKind::PermissionDenied,
        "this daemon no longer has you as a peer (the pairing was deleted here)",
        "pair again: `strata peer invite` here, then `strata peer add` on your side",
    )
}
