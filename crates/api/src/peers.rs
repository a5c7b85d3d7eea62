//! Peers: other Strata daemons this one is paired with, for mirrors between daemons
//! (docs/peers.md). Pairing is a one-time invitation made on one daemon and presented by
//! the other; after it, each side pins the other's certificate fingerprint.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/peers/invitations`: invite another daemon to pair with this one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateInvitation {
    /// The name this daemon will give the peer that joins (default: the name it proposes,
    /// its host name).
    #[serde(default)]
    pub name: Option<String>,
    /// Pools of this daemon the peer may write to (mirror into).
    #[serde(default)]
    pub grants: Vec<String>,
    /// Seconds the invitation is valid: 1 to 600 (the default, 10 minutes).
    #[serde(default)]
    pub expires_seconds: Option<u64>,
}

/// An invitation: its token is shown once, here, and never again.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Invitation {
    pub id: String,
    /// Give it to `strata peer add NAME HOST:PORT --token TOKEN` on the other daemon. It
    /// holds this daemon's fingerprint and a one-time secret.
    pub token: String,
    /// This daemon's certificate fingerprint (SHA-256, hex).
    pub fingerprint: String,
    /// This daemon's replication listener (the address the other daemon connects to,
    /// unless it reaches this host by another name).
    pub listen: Option<String>,
    pub name: Option<String>,
    pub grants: Vec<String>,
    pub expires_ns: u64,
}

/// `POST /v1/peers`: pair with the daemon that made `token`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddPeer {
    /// The name this daemon gives the peer.
    pub name: String,
    /// HOST:PORT of its replication listener.
    pub address: String,
    pub token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PeerInfo {
    pub name: String,
    /// HOST:PORT of its replication listener; none if it had none when it paired.
    pub address: Option<String>,
    /// Its certificate fingerprint (SHA-256, hex): the only certificate accepted from it.
    pub fingerprint: String,
    /// Pools of this daemon it may write to.
    pub grants: Vec<String>,
    /// Pools of the peer this daemon may write to (as the peer said when pairing).
    pub granted_there: Vec<String>,
    /// The name the peer gave this daemon, if known.
    pub known_there_as: Option<String>,
    /// `invited` (it joined with this daemon's invitation) or `joined` (this daemon joined
    /// with its invitation).
    pub origin: String,
    pub paired_ns: u64,
}

/// `GET /v1/peers/{name}/ping`: a round trip over an authenticated connection.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PeerPing {
    pub name: String,
    pub address: String,
    /// This daemon's version.
    pub version: String,
    /// The peer's version.
    pub peer_version: String,
    /// Connecting: TCP, TLS handshake and greeting.
    pub connect_ms: f64,
    /// The ping request and its answer.
    pub round_trip_ms: f64,
    /// The name the peer gave this daemon.
    pub known_there_as: String,
}
