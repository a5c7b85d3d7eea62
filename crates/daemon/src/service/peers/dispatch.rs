//! What a paired peer may ask of this daemon: the dispatcher of `PeerRequest`s the
//! replication listener hands over (crate::peer_net), and the grants check.

use crate::peer_net::{PeerIdentity, PeerRequest, PeerResponse, ServerConnection, VERSION};
use crate::service::{ApiError, Daemon};

impl Daemon {
    /// Handle one request of an authenticated peer. Answer with `conn.reply` (once, or more
    /// if the request's protocol says so); raw bytes go through `conn.stream()`. An `Err`
    /// before any answer is sent back as the request's error reply; after one, it ends the
    /// connection (peer_net/mod.rs).
    pub fn handle_peer_request(
        &self,
        peer: &PeerIdentity,
        req: PeerRequest,
        conn: &mut ServerConnection,
    ) -> Result<(), ApiError> {
        match req {
            PeerRequest::Ping { version } => {
                tracing::debug!(peer = %peer.name, peer_version = %version, "ping");
                conn.reply(&PeerResponse::Pong { version: VERSION.into(), peer_version: version })
            }
            PeerRequest::Mirror(v) => self.handle_mirror_msg(peer, v, conn),
            #[cfg(test)]
            PeerRequest::Echo { bytes } => {
                use std::io::{Read, Write};
                conn.reply(&PeerResponse::Ok)?;
                let mut buf = vec![0u8; bytes as usize];
                let io = |e: std::io::Error| ApiError::internal(format!("echo: {e}"));
                conn.stream().read_exact(&mut buf).map_err(io)?;
                conn.stream().write_all(&buf).map_err(io)?;
                conn.reply(&PeerResponse::Ok)
            }
        }
    }

    /// May `peer` write to (mirror into) `pool` of this daemon? Read from the current record:
    /// a peer deleted since its session began may not.
    pub fn peer_may_write(&self, peer: &PeerIdentity, pool: &str) -> bool {
        self.peers.identity_of(&peer.fingerprint).is_some_and(|p| p.grants.iter().any(|g| g == pool))
    }
}
