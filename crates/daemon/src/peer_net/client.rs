//! The client side: a connection to a paired peer (`PeerClient::connect`), and the pairing
//! exchange of `strata peer add` (`PeerClient::pair`).
//!
//! Every failure is an `ApiError` that says which peer, at which address, and what to do:
//! unreachable (Unavailable), refused by the peer — it does not know this daemon's
//! certificate — or a server whose fingerprint is not the pinned one (PermissionDenied).

use super::identity::short;
use super::token::{self, Token};
use super::verify::PinnedServer;
use super::wire::{self, FrameError, HandshakeError, Hello, PairAccepted, PairRequest, Reply};
use super::{
    PeerRequest, PeerResponse, ALPN_PAIR, ALPN_PEER, CLIENT_READ_TIMEOUT, HANDSHAKE_TIMEOUT, MAX_FRAME_BYTES, VERSION,
};
use crate::service::{ApiError, Daemon};
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_api::ErrorKind;

/// Opens connections to peers (a namespace: it holds nothing).
pub struct PeerClient;

/// An authenticated, encrypted session with a peer: control requests, and raw bytes between
/// them. Not `Sync`: one user at a time (open several for parallel transfers).
pub struct PeerConnection {
    tls: Session,
    peer: String,
    address: String,
    peer_version: String,
    known_as: String,
}

/// What a connection attempt is for, for the messages.
struct Target<'a> {
    /// "peer NAME at ADDR", or "the daemon at ADDR" when pairing.
    what: String,
    address: &'a str,
    expected_fp: &'a str,
    pairing: bool,
}

impl PeerClient {
    /// Connect to the peer this daemon calls `peer_name`, at its recorded address, pinning
    /// its recorded fingerprint, and read its greeting.
    pub fn connect(d: &Daemon, peer_name: &str) -> Result<PeerConnection, ApiError> {
        let rec = d.peers.get(peer_name)?;
        let Some(address) = rec.address.clone() else {
            return Err(ApiError::unavailable(
                format!("peer {peer_name} has no known address (it had no replication listener when it paired)"),
                "give it one (strata serve --repl-port) and pair again, or connect from its side",
            ));
        };
        let t = Target {
            what: format!("peer {peer_name} at {address}"),
            address: &address,
            expected_fp: &rec.fingerprint,
            pairing: false,
        };
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let mut tls = dial(d, &t, ALPN_PEER, deadline)?;
        let hello: Reply<Hello> = wire::read_frame(&mut tls, MAX_FRAME_BYTES).map_err(|e| frame_failure(&t, e))?;
        let hello = hello.into_result()?;
        tls.sock.set_read_timeout(Some(CLIENT_READ_TIMEOUT)).map_err(|e| io_failure(&t, e))?;
        tls.sock.set_write_timeout(Some(CLIENT_READ_TIMEOUT)).map_err(|e| io_failure(&t, e))?;
        Ok(PeerConnection {
            tls: Session(Some(tls)),
            peer: peer_name.into(),
            address,
            peer_version: hello.version,
            known_as: hello.your_name,
        })
    }

    /// Pair with the daemon at `address` that made the invitation `token`: pin the
    /// fingerprint the token names, prove the secret, and learn how it now calls us.
    pub(crate) fn pair(d: &Daemon, address: &str, token: &Token) -> Result<PairAccepted, ApiError> {
        let t = Target {
            what: format!("the daemon at {address}"),
            address,
            expected_fp: &token.fingerprint,
            pairing: true,
        };
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let mut tls = dial(d, &t, ALPN_PAIR, deadline)?;
        let exporter = tls
            .conn
            .export_keying_material([0u8; 32], token::EXPORTER_LABEL, None)
            .map_err(|e| ApiError::internal(format!("TLS exporter: {e}")))?;
        let ours = &d.peers.identity.fingerprint;
        let req = PairRequest {
            invitation: token.invitation.clone(),
            proof: token::proof(&token.secret, &token.invitation, ours, &token.fingerprint, &exporter),
            name_hint: host_name(),
            listen_port: d.peers.listen_addr().map(|a| a.port()),
            version: VERSION.into(),
        };
        wire::write_frame(&mut tls, &req).map_err(|e| io_failure(&t, e))?;
        let reply: Reply<PairAccepted> =
            wire::read_frame(&mut tls, MAX_FRAME_BYTES).map_err(|e| frame_failure(&t, e))?;
        let accepted = reply.into_result()?;
        tls.conn.send_close_notify();
        let _ = tls.flush();
        Ok(accepted)
    }
}

impl PeerConnection {
    /// Send a control request and read its answer (an error reply is the `Err`).
    pub fn request(&mut self, req: &PeerRequest) -> Result<PeerResponse, ApiError> {
        self.send_request(req)?;
        self.read_response()
    }

    /// Send a request without waiting: for a protocol where raw bytes follow the request
    /// before its answer (then `read_response`).
    pub fn send_request(&mut self, req: &PeerRequest) -> Result<(), ApiError> {
        wire::write_frame(self.tls.get(), req).map_err(|e| io_failure(&self.target(), e))
    }

    /// Read the answer to the last request.
    pub fn read_response(&mut self) -> Result<PeerResponse, ApiError> {
        let reply: Reply<PeerResponse> =
            wire::read_frame(self.tls.get(), MAX_FRAME_BYTES).map_err(|e| frame_failure(&self.target(), e))?;
        reply.into_result()
    }

    /// The session's byte stream, for raw data between requests (a send stream). Writes are
    /// sent as they are made, one TLS record each: wrap it in a `BufWriter` for many small
    /// ones.
    pub fn stream(&mut self) -> &mut (impl Read + Write) {
        self.tls.get()
    }

    /// How long each read or write may wait (default `CLIENT_READ_TIMEOUT`; None: forever).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ApiError> {
        let t = self.target();
        let sock = &self.tls.0.as_ref().expect("a connection's stream is taken only when it is consumed").sock;
        sock.set_read_timeout(timeout).map_err(|e| io_failure(&t, e))?;
        sock.set_write_timeout(timeout).map_err(|e| io_failure(&t, e))
    }

    /// The name this daemon gave the peer.
    pub fn peer_name(&self) -> &str {
        &self.peer
    }

    /// The peer's version, from its greeting.
    pub fn peer_version(&self) -> &str {
        &self.peer_version
    }

    /// The name the peer gave this daemon (what it logs us as).
    pub fn known_as(&self) -> &str {
        &self.known_as
    }

    fn target(&self) -> Target<'_> {
        Target {
            what: format!("peer {} at {}", self.peer, self.address),
            address: &self.address,
            expected_fp: "",
            pairing: false,
        }
    }
}

/// A connection's TLS stream; taken out only by `into_stream` (a split session).
struct Session(Option<StreamOwned<ClientConnection, TcpStream>>);

impl Session {
    fn get(&mut self) -> &mut StreamOwned<ClientConnection, TcpStream> {
        self.0.as_mut().expect("a connection's stream is taken only when it is consumed")
    }
}

impl Drop for Session {
    /// Say goodbye (close_notify), so the peer sees an orderly end, not a cut.
    fn drop(&mut self) {
        if let Some(tls) = &mut self.0 {
            tls.conn.send_close_notify();
            let _ = tls.sock.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = tls.conn.write_tls(&mut tls.sock);
        }
    }
}

impl PeerConnection {
    /// The TLS stream, for `into_split` (peer_net/split.rs).
    pub(super) fn into_stream(mut self) -> StreamOwned<ClientConnection, TcpStream> {
        self.tls.0.take().expect("a connection's stream is taken once")
    }
}

/// TCP connect and TLS handshake, with our certificate and the pinned server fingerprint.
fn dial(
    d: &Daemon,
    t: &Target<'_>,
    alpn: &[u8],
    deadline: Instant,
) -> Result<StreamOwned<ClientConnection, TcpStream>, ApiError> {
    let unreachable = |why: String| {
        ApiError::unavailable(
            format!("cannot reach {}: {why}", t.what),
            "is its daemon running with --repl-port, and is the address right? (`strata peer show`)",
        )
    };
    let addrs: Vec<_> = t.address.to_socket_addrs().map_err(|e| unreachable(e.to_string()))?.collect();
    let mut last = String::from("the address resolves to nothing");
    let mut sock = None;
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                sock = Some(s);
                break;
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    let mut sock = sock.ok_or_else(|| unreachable(last))?;
    let _ = sock.set_nodelay(true);

    let verifier = Arc::new(PinnedServer::new(t.expected_fp));
    let seen = verifier.seen.clone();
    let id = &d.peers.identity;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ApiError::internal(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(vec![id.cert.clone()], id.key())
        .map_err(|e| ApiError::internal(format!("this daemon's peer certificate: {e}")))?;
    config.alpn_protocols = vec![alpn.to_vec()];
    // Every connection is verified in full: no session resumption.
    config.resumption = rustls::client::Resumption::disabled();
    config.enable_sni = false;
    let name = ServerName::try_from("strata-peer").expect("a valid DNS name");
    let mut conn =
        ClientConnection::new(Arc::new(config), name).map_err(|e| ApiError::internal(format!("TLS: {e}")))?;
    match wire::handshake(&mut conn, &mut sock, deadline) {
        Ok(()) => {}
        Err(HandshakeError::Tls(e)) => return Err(tls_failure(t, &e, seen.lock().expect("seen").clone())),
        Err(HandshakeError::TimedOut) => {
            return Err(unreachable(format!("no TLS handshake within {} s", HANDSHAKE_TIMEOUT.as_secs())))
        }
        Err(HandshakeError::Io(e)) => return Err(io_failure(t, e)),
    }
    // The rest of the connection's set-up (the greeting, the pairing answer) is bounded by
    // the same deadline.
    wire::bound_by(&sock, deadline).map_err(|_| unreachable("the handshake timed out".into()))?;
    Ok(StreamOwned::new(conn, sock))
}

fn tls_failure(t: &Target<'_>, e: &rustls::Error, seen: Option<String>) -> ApiError {
    match e {
        rustls::Error::InvalidCertificate(_) if seen.as_deref().is_some_and(|s| s != t.expected_fp) => {
            let seen = seen.unwrap_or_default();
            if t.pairing {
                ApiError::new(
                    ErrorKind::PermissionDenied,
                    format!(
                        "fingerprint mismatch: {} presented certificate {}…, but the token names {}…: it is not the daemon that made the invitation",
                        t.what,
                        short(&seen),
                        short(t.expected_fp)
                    ),
                    "check the address, and use a token made by `strata peer invite` on that daemon",
                )
            } else {
                ApiError::new(
                    ErrorKind::PermissionDenied,
                    format!(
                        "fingerprint mismatch: {} presented certificate {}…, not {}… recorded when it paired: it is not that daemon, or its identity was regenerated",
                        t.what,
                        short(&seen),
                        short(t.expected_fp)
                    ),
                    "if its identity was regenerated on purpose, pair again: `strata peer delete` here, `strata peer invite` there, then `strata peer add`",
                )
            }
        }
        rustls::Error::AlertReceived(alert) => refused(t, &format!("{alert:?}")),
        other => ApiError::unavailable(format!("TLS with {} failed: {other}", t.what), "see both daemons' logs"),
    }
}

/// The peer sent an alert: it refused our certificate (or, while pairing, the session).
fn refused(t: &Target<'_>, alert: &str) -> ApiError {
    if t.pairing {
        return ApiError::new(
            ErrorKind::PermissionDenied,
            format!("{} refused the pairing connection (TLS alert {alert})", t.what),
            "see that daemon's log",
        );
    }
    ApiError::new(
        ErrorKind::PermissionDenied,
        format!(
            "{} refused this daemon's certificate (TLS alert {alert}): it does not know this daemon as a peer — the pairing was deleted there, or never made",
            t.what
        ),
        "pair again: `strata peer invite` on that daemon, then `strata peer delete` and `strata peer add` here",
    )
}

fn io_failure(t: &Target<'_>, e: io::Error) -> ApiError {
    if let Some(tls) = wire::tls_error(&e) {
        return tls_failure(t, tls, None);
    }
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            ApiError::unavailable(format!("{} did not answer in time", t.what), "see its daemon's log")
        }
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            ApiError::unavailable(format!("{} closed the connection", t.what), "see its daemon's log")
        }
        _ => ApiError::unavailable(format!("talking to {}: {e}", t.what), "see both daemons' logs"),
    }
}

fn frame_failure(t: &Target<'_>, e: FrameError) -> ApiError {
    match e {
        FrameError::Io(e) => io_failure(t, e),
        FrameError::Closed => io_failure(t, io::ErrorKind::UnexpectedEof.into()),
        other => wire::bad_frame(&format!("{} sent", t.what), &other),
    }
}

/// This machine's name, as a default name for us on the other side.
fn host_name() -> String {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let h: String = h.trim().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')).collect();
    if h.is_empty() {
        "peer".into()
    } else {
        h
    }
}
