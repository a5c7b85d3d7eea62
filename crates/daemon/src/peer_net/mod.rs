//! The peer layer: how two Strata daemons find, trust and talk to each other, for mirrors
//! between daemons. Pairing, mutual authentication and an encrypted transport; what travels
//! over it (mirror control messages, send streams) is the mirror code's business.
//!
//! # Trust model
//! - Each daemon has an identity: a key pair and a self-signed certificate made at its first
//!   start (identity.rs). It is named by the certificate's SHA-256 fingerprint.
//! - Two daemons become peers by pairing: the target makes a one-time invitation (`strata
//!   peer invite`: a random secret, valid 10 minutes, naming the pools the new peer may
//!   write to); the source presents its token (`strata peer add NAME HOST:PORT --token T`).
//!   The token carries the target's fingerprint, so the source knows whom it talks to before
//!   it says anything; the source proves it holds the secret with an HMAC bound to both
//!   fingerprints and to this TLS session (token.rs) — the secret itself never travels.
//!   Both sides then record each other's fingerprint (service/peers/).
//! - Every later connection is TLS 1.3 with certificates on both sides, each side pinning
//!   the fingerprint it recorded (verify.rs): the listener refuses a client certificate
//!   that is no peer's in the handshake itself, a client refuses a server whose
//!   fingerprint is not the one recorded for that peer. No CA, no names, no expiry: a
//!   peer is its key (like SSH host keys), and `strata peer delete` is the revocation.
//! - A peer may write only to the pools granted in its invitation (`Daemon::peer_may_write`).
//!
//! # Wire protocol (port `strata serve --repl-port`)
//! The client picks the kind of session by ALPN: `strata-pair/1` (pairing: any certificate
//! is taken in the handshake, but the first frame must prove the token within the
//! handshake timeout, and it is the only frame answered) or `strata-peer/1` (a paired
//! peer). Frames are a u32 big-endian length and a JSON document (wire.rs), at most
//! `MAX_FRAME_BYTES`. A peer session: the server speaks first with a `Hello`, then
//! answers each `PeerRequest` with one reply — `PeerResponse`, or an error with kind,
//! message and hint (a refusal is always said, never a dropped connection). After a
//! request, both sides may switch to raw bytes on the same stream (a send stream, which
//! frames and authenticates itself) and back to frames when their own protocol says so.
//!
//! # Using it (for the mirror code)
//! ```ignore
//! // source side
//! let mut conn = PeerClient::connect(&daemon, "site-b")?;        // authenticated, encrypted
//! match conn.request(&PeerRequest::Mirror(json!({"op": "receive", "pool": "tank"})))? {
//!     PeerResponse::Mirror(v) => { /* e.g. the resume point */ }
//!     other => return Err(unexpected(other)),
//! }
//! let mut w = StreamWriter::new(std::io::BufWriter::new(conn.stream()));
//! // ... w.write(index, &record)?; w.flush()? ... then, by the mirror protocol:
//! let done = conn.read_response()?;
//!
//! // target side: Daemon::handle_peer_request (service/peers/dispatch.rs)
//! PeerRequest::Mirror(v) => {
//!     if !self.peer_may_write(peer, pool) { return Err(ApiError::new(PermissionDenied, ..)) }
//!     conn.reply(&PeerResponse::Mirror(json!({"resume_after": n})))?;
//!     let mut r = StreamReader::new(conn.stream()); ...
//!     conn.reply(&PeerResponse::Mirror(json!({"committed": m})))
//! }
//! ```
//! An `Err` returned by a handler before it replied travels back as the request's error
//! reply and the connection goes on; after a reply or raw bytes, it ends the connection
//! (the stream's own framing must carry errors there). A handler's panic ends its
//! connection, not the listener.
//!
//! # Bounds
//! `MAX_CONNECTIONS` sessions at once, of which at most `MAX_HANDSHAKES` not yet
//! authenticated; the handshake (TCP accept to the pairing proof) within
//! `HANDSHAKE_TIMEOUT`; a session idle longer than `IDLE_TIMEOUT` is closed. One thread per
//! connection: the daemon is blocking code, peers are few, and a slow or silent client
//! holds only its own thread until a timeout.

mod client;
pub mod identity;
mod server;
mod split;
#[cfg(test)]
pub(crate) mod tests;
pub(crate) mod token;
mod verify;
mod wire;

pub use client::{PeerClient, PeerConnection};
pub use identity::Identity;
pub use server::ServerConnection;
pub(crate) use server::{bind, spawn_listener};
pub use split::{Answer, PeerReceiver, PeerSender};
pub(crate) use wire::PairAccepted;
pub(crate) use wire::PairRequest;

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Sessions served at once. Peers are a handful of daemons, each with a few transfers in
/// flight; 64 leaves room for that many mirrors updating together and bounds the threads a
/// flood can make.
pub const MAX_CONNECTIONS: usize = 64;
/// Connections not yet authenticated (TLS handshake, pairing proof). Kept below
/// `MAX_CONNECTIONS` so strangers cannot take the slots of paired peers.
pub const MAX_HANDSHAKES: usize = 16;
/// From accept to an authenticated session (and, for pairing, to the token's proof).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A session with no request (or raw byte) for this long is closed by the listener. Mirror
/// transfers keep their connection busy; a scheduled mirror connects per update.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a client waits for each read of an answer by default (a reply may follow work
/// on the other side, e.g. a commit); `PeerConnection::set_timeout` changes it.
pub const CLIENT_READ_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest control frame. Control messages are small JSON documents; bulk data goes as raw
/// bytes after a request, not in frames.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// ALPN of a session between paired peers.
pub(crate) const ALPN_PEER: &[u8] = b"strata-peer/1";
/// ALPN of a pairing session.
pub(crate) const ALPN_PAIR: &[u8] = b"strata-pair/1";

/// This build's version, as peers report it to each other.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A control message from a peer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerRequest {
    /// Are you there, and which version are you? Answered with `Pong`.
    Ping { version: String },
    /// The mirror protocol (service/mirrors/ fills it in).
    Mirror(serde_json::Value),
    /// The transport's own tests: answer `Ok`, read `bytes` raw bytes and send them back,
    /// answer `Ok` again.
    #[cfg(test)]
    Echo { bytes: u64 },
}

/// The answer to a `PeerRequest` that succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerResponse {
    /// `version`: the answering daemon's; `peer_version`: the asker's, as it said.
    Pong {
        version: String,
        peer_version: String,
    },
    Mirror(serde_json::Value),
    /// Done, nothing to report.
    Ok,
}

/// Who is calling, as the listener authenticated it: a paired peer.
#[derive(Debug, Clone)]
pub struct PeerIdentity {
    /// The name this daemon gave the peer.
    pub name: String,
    /// SHA-256 of its certificate (hex).
    pub fingerprint: String,
    /// The pools it may write to, as recorded when the session began (`peer_may_write`
    /// reads the current record).
    pub grants: Vec<String>,
}
