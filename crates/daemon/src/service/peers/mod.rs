//! Peers: the other daemons this one is paired with (for mirrors between daemons), and the
//! invitations that pair them. The transport is crate::peer_net; this is the bookkeeping
//! and the policy.
//!
//! - Records (name, address, pinned fingerprint, grants) live in the state file, so a
//!   restart keeps its peers. An invitation's secret is kept in memory only: a restart voids
//!   pending invitations, which is what one wants of a secret valid ten minutes.
//! - An invitation works once. It is spent by the first correct proof; a used id is
//!   remembered (with who used it) for an hour so a second try gets a clear "already used";
//!   `MAX_WRONG_PROOFS` wrong proofs void it.
//! - Grants are pools of this daemon a peer may write to (mirror into), set by the
//!   invitation. `peer_may_write` reads the current record, so a delete is effective at once.
//!
//! Locks: `records` then `invitations` (each held for map look-ups only, never across I/O
//! or `save_state`, which takes `records` itself). Changes that save the state file take
//! `admin` first, as every other service does.

mod dispatch;

use crate::peer_net::identity::short;
use crate::peer_net::token::{self, Token};
use crate::peer_net::{
    Identity, PairAccepted, PairRequest, PeerClient, PeerIdentity, PeerRequest, PeerResponse, VERSION,
};
use crate::service::{ApiError, Daemon};
use crate::SystemClock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Instant;
use strata_api::{AddPeer, CreateInvitation, Done, ErrorKind, Invitation, PeerInfo, PeerPing};
use strata_engine::Clock;

/// How long an invitation is valid by default, and at most: long enough to copy a token
/// from one terminal to another, short enough that a leaked one is likely dead.
pub const INVITATION_SECONDS_MAX: u64 = 600;
/// Wrong proofs an invitation takes before it is void (a 128-bit secret is not guessed;
/// this bounds the log noise of someone trying).
const MAX_WRONG_PROOFS: u32 = 5;
/// Invitations pending at once (each is a few hundred bytes of memory).
const MAX_PENDING_INVITATIONS: usize = 64;
/// How long a spent or expired invitation's id is remembered, for clear refusals.
const REMEMBER_SPENT_NS: u64 = 3600 * 1_000_000_000;

/// A peer as the state file keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerRecord {
    pub name: String,
    /// HOST:PORT of its replication listener.
    #[serde(default)]
    pub address: Option<String>,
    /// SHA-256 of its certificate, hex: the only certificate accepted from it.
    pub fingerprint: String,
    /// Pools of this daemon it may write to.
    #[serde(default)]
    pub grants: Vec<String>,
    /// Pools of the peer this daemon may write to, as it said when pairing.
    #[serde(default)]
    pub granted_there: Vec<String>,
    /// The name the peer gave this daemon.
    #[serde(default)]
    pub known_there_as: Option<String>,
    /// `invited` or `joined`.
    pub origin: String,
    pub paired_ns: u64,
}

impl PeerRecord {
    fn info(&self) -> PeerInfo {
        PeerInfo {
            name: self.name.clone(),
            address: self.address.clone(),
            fingerprint: self.fingerprint.clone(),
            grants: self.grants.clone(),
            granted_there: self.granted_there.clone(),
            known_there_as: self.known_there_as.clone(),
            origin: self.origin.clone(),
            paired_ns: self.paired_ns,
        }
    }
}

struct PendingInvitation {
    token: Token,
    name: Option<String>,
    grants: Vec<String>,
    expires_ns: u64,
    wrong_proofs: u32,
}

#[derive(Default)]
struct Invitations {
    pending: BTreeMap<String, PendingInvitation>,
    /// id → (what became of it, when).
    spent: BTreeMap<String, (String, u64)>,
}

impl Invitations {
    /// Forget what is too old to matter: spent ids after an hour, expired invitations after
    /// they are an hour past their end.
    fn purge(&mut self, now: u64) {
        self.spent.retain(|_, (_, at)| now.saturating_sub(*at) < REMEMBER_SPENT_NS);
        self.pending.retain(|_, i| now.saturating_sub(i.expires_ns) < REMEMBER_SPENT_NS);
    }
}

pub(crate) struct Peers {
    pub identity: Identity,
    records: Mutex<BTreeMap<String, PeerRecord>>,
    invitations: Mutex<Invitations>,
    /// Where the replication listener listens, once it does.
    listen: Mutex<Option<SocketAddr>>,
}

impl Peers {
    pub fn new(identity: Identity) -> Peers {
        Peers {
            identity,
            records: Mutex::new(BTreeMap::new()),
            invitations: Mutex::new(Invitations::default()),
            listen: Mutex::new(None),
        }
    }

    pub fn load(&self, records: Vec<PeerRecord>) {
        *self.records.lock().expect("peers") = records.into_iter().map(|r| (r.name.clone(), r)).collect();
    }

    pub fn records(&self) -> Vec<PeerRecord> {
        self.records.lock().expect("peers").values().cloned().collect()
    }

    pub fn get(&self, name: &str) -> Result<PeerRecord, ApiError> {
        self.records
            .lock()
            .expect("peers")
            .get(name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("no peer {name}"), "see `strata peer list`"))
    }

    /// Let peer `name` write to `pool` (it becomes the source of a mirror into it: a
    /// reverse after a failover). Whether the grant is new.
    pub fn grant(&self, name: &str, pool: &str) -> Result<bool, ApiError> {
        let mut recs = self.records.lock().expect("peers");
        let r = recs
            .get_mut(name)
            .ok_or_else(|| ApiError::not_found(format!("no peer {name}"), "see `strata peer list`"))?;
        if r.grants.iter().any(|g| g == pool) {
            return Ok(false);
        }
        r.grants.push(pool.to_string());
        Ok(true)
    }

    pub fn revoke(&self, name: &str, pool: &str) {
        if let Some(r) = self.records.lock().expect("peers").get_mut(name) {
            r.grants.retain(|g| g != pool);
        }
    }

    fn by_fingerprint(&self, fp: &str) -> Option<PeerRecord> {
        self.records.lock().expect("peers").values().find(|r| r.fingerprint == fp).cloned()
    }

    /// Is `fp` a paired peer's fingerprint?
    pub fn is_peer(&self, fp: &str) -> bool {
        self.by_fingerprint(fp).is_some()
    }

    /// The peer with this fingerprint, as the listener hands it to request handlers.
    pub fn identity_of(&self, fp: &str) -> Option<PeerIdentity> {
        self.by_fingerprint(fp).map(|r| PeerIdentity { name: r.name, fingerprint: r.fingerprint, grants: r.grants })
    }

    pub fn set_listen_addr(&self, a: SocketAddr) {
        *self.listen.lock().expect("listen") = Some(a);
    }

    pub fn listen_addr(&self) -> Option<SocketAddr> {
        *self.listen.lock().expect("listen")
    }
}

/// Peer names: what `strata peer` commands and mirror destinations use.
fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = (1..=64).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name != "invitations";
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            format!("peer name {name:?}: 1 to 64 letters, digits, '-', '_' or '.', starting with a letter or digit"),
            "choose another name (and not `invitations`)",
        ))
    }
}

fn utc_ns(ns: u64) -> String {
    format!("{} UTC", crate::utc(ns / 1_000_000_000))
}

fn make_new_invitation() -> &'static str {
    "make a new one with `strata peer invite` on the inviting daemon"
}

impl Daemon {
    /// A one-time invitation (the target side of pairing).
    pub(crate) fn create_invitation(&self, req: &CreateInvitation) -> Result<Invitation, ApiError> {
        let listen = self.peers.listen_addr().ok_or_else(|| {
            ApiError::unavailable(
                "this daemon has no replication listener: a peer could not connect to pair",
                "start it with `strata serve --repl-port PORT` (and --repl-bind ADDR to listen beyond this host)",
            )
        })?;
        if let Some(n) = &req.name {
            check_name(n)?;
            if self.peers.get(n).is_ok() {
                return Err(ApiError::new(
                    ErrorKind::AlreadyExists,
                    format!("peer {n} exists"),
                    "choose another name, or `strata peer delete` it first",
                ));
            }
        }
        let seconds = req.expires_seconds.unwrap_or(INVITATION_SECONDS_MAX);
        if !(1..=INVITATION_SECONDS_MAX).contains(&seconds) {
            return Err(ApiError::bad_request(
                format!("an invitation valid {seconds} s: 1 to {INVITATION_SECONDS_MAX}"),
                "leave it out for the default of 10 minutes",
            ));
        }
        let mut grants = req.grants.clone();
        grants.sort();
        grants.dedup();
        for g in &grants {
            self.pool(g)?;
        }
        let token = Token::new(&self.peers.identity.fingerprint)?;
        let now = SystemClock.now_ns();
        let expires_ns = now + seconds * 1_000_000_000;
        let mut invs = self.peers.invitations.lock().expect("invitations");
        invs.purge(now);
        if invs.pending.values().filter(|i| i.expires_ns > now).count() >= MAX_PENDING_INVITATIONS {
            return Err(ApiError::conflict(
                format!("{MAX_PENDING_INVITATIONS} invitations are pending already"),
                "use them, or wait for them to expire",
            ));
        }
        let out = Invitation {
            id: token.invitation.clone(),
            token: token.encode(),
            fingerprint: self.peers.identity.fingerprint.clone(),
            listen: Some(listen.to_string()),
            name: req.name.clone(),
            grants: grants.clone(),
            expires_ns,
        };
        tracing::info!(invitation = %token.invitation, name = ?req.name, ?grants, seconds, "peer invitation made");
        invs.pending.insert(
            token.invitation.clone(),
            PendingInvitation { token, name: req.name.clone(), grants, expires_ns, wrong_proofs: 0 },
        );
        Ok(out)
    }

    /// The listener's side of pairing: check the proof against the invitation, spend it,
    /// record the new peer. Every refusal says why.
    pub(crate) fn accept_pairing(
        &self,
        client_fp: &str,
        exporter: &[u8],
        req: &PairRequest,
        remote: SocketAddr,
    ) -> Result<PairAccepted, ApiError> {
        let now = SystemClock.now_ns();
        let id = req.invitation.to_ascii_lowercase();
        let inv = {
            let mut invs = self.peers.invitations.lock().expect("invitations");
            if let Some((what, at)) = invs.spent.get(&id) {
                return Err(ApiError::conflict(
                    format!("invitation {id} was already used ({what}, {}): a token works once", utc_ns(*at)),
                    make_new_invitation(),
                ));
            }
            let Some(inv) = invs.pending.get_mut(&id) else {
                return Err(ApiError::not_found(
                    format!("no invitation {id} on this daemon (made by another daemon, or before its last restart)"),
                    make_new_invitation(),
                ));
            };
            if now >= inv.expires_ns {
                return Err(ApiError::new(
                    ErrorKind::PermissionDenied,
                    format!("invitation {id} expired at {}", utc_ns(inv.expires_ns)),
                    make_new_invitation(),
                ));
            }
            let ours = &self.peers.identity.fingerprint;
            if !token::check_proof(&inv.token.secret, &id, client_fp, ours, exporter, &req.proof) {
                inv.wrong_proofs += 1;
                let voided = inv.wrong_proofs >= MAX_WRONG_PROOFS;
                if voided {
                    invs.pending.remove(&id);
                    invs.spent.insert(id.clone(), (format!("void after {MAX_WRONG_PROOFS} wrong tokens"), now));
                }
                return Err(ApiError::new(
                    ErrorKind::PermissionDenied,
                    format!(
                        "wrong token: its secret does not match invitation {id}{}",
                        if voided { " (the invitation is now void)" } else { "" }
                    ),
                    "copy the whole token `strata peer invite` printed, or make a new invitation",
                ));
            }
            invs.pending.remove(&id).expect("looked up above")
        };
        let restore = |inv: PendingInvitation| {
            self.peers.invitations.lock().expect("invitations").pending.insert(id.clone(), inv);
        };
        if client_fp == self.peers.identity.fingerprint {
            restore(inv);
            return Err(ApiError::bad_request(
                "a daemon cannot pair with itself",
                "run `strata peer add` on the other daemon",
            ));
        }
        let _g = self.admin.lock().expect("admin");
        if let Some(existing) = self.peers.by_fingerprint(client_fp) {
            restore(inv);
            return Err(ApiError::conflict(
                format!("this daemon is already paired with yours, as peer {}", existing.name),
                "to pair again, `strata peer delete` it on this daemon first",
            ));
        }
        let name = match &inv.name {
            Some(n) if self.peers.get(n).is_ok() => {
                let n = n.clone();
                restore(inv);
                return Err(ApiError::new(
                    ErrorKind::AlreadyExists,
                    format!("the invitation names peer {n}, which exists by now"),
                    "delete that peer on the inviting daemon, or make a new invitation with another --name",
                ));
            }
            Some(n) => n.clone(),
            None => {
                let hint = if check_name(&req.name_hint).is_ok() { req.name_hint.clone() } else { "peer".into() };
                if self.peers.get(&hint).is_ok() {
                    format!("{hint}-{}", &client_fp[..8])
                } else {
                    hint
                }
            }
        };
        let record = PeerRecord {
            name: name.clone(),
            address: req.listen_port.map(|p| SocketAddr::new(remote.ip(), p).to_string()),
            fingerprint: client_fp.into(),
            grants: inv.grants.clone(),
            granted_there: Vec::new(),
            known_there_as: None,
            origin: "invited".into(),
            paired_ns: now,
        };
        self.peers.records.lock().expect("peers").insert(name.clone(), record);
        if let Err(e) = self.save_state() {
            self.peers.records.lock().expect("peers").remove(&name);
            restore(inv);
            return Err(e);
        }
        self.peers.invitations.lock().expect("invitations").spent.insert(id, (format!("by peer {name}"), now));
        Ok(PairAccepted { name, grants: inv.grants, version: VERSION.into() })
    }

    /// The joining side of pairing (`strata peer add`).
    pub(crate) fn add_peer(&self, req: &AddPeer) -> Result<PeerInfo, ApiError> {
        check_name(&req.name)?;
        let exists = |name: &str| {
            ApiError::new(
                ErrorKind::AlreadyExists,
                format!("peer {name} exists"),
                "choose another name, or `strata peer delete` it first",
            )
        };
        if self.peers.get(&req.name).is_ok() {
            return Err(exists(&req.name));
        }
        match req.address.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0) => {}
            _ => {
                return Err(ApiError::bad_request(
                    format!("address {:?} is not HOST:PORT", req.address),
                    "give the other daemon's replication listener (its --repl-port), e.g. db2.example:7420",
                ))
            }
        }
        let token = Token::parse(&req.token)?;
        if token.fingerprint == self.peers.identity.fingerprint {
            return Err(ApiError::bad_request(
                "this token was made by this daemon",
                "run `strata peer add` on the other daemon, with this daemon's address",
            ));
        }
        if let Some(existing) = self.peers.by_fingerprint(&token.fingerprint) {
            return Err(ApiError::conflict(
                format!("already paired with that daemon, as peer {}", existing.name),
                "to pair again, `strata peer delete` it first",
            ));
        }
        let accepted = PeerClient::pair(self, &req.address, &token)?;
        let _g = self.admin.lock().expect("admin");
        if self.peers.get(&req.name).is_ok() {
            return Err(exists(&req.name));
        }
        let record = PeerRecord {
            name: req.name.clone(),
            address: Some(req.address.clone()),
            fingerprint: token.fingerprint.clone(),
            grants: Vec::new(),
            granted_there: accepted.grants,
            known_there_as: Some(accepted.name),
            origin: "joined".into(),
            paired_ns: SystemClock.now_ns(),
        };
        let info = record.info();
        self.peers.records.lock().expect("peers").insert(req.name.clone(), record);
        if let Err(e) = self.save_state() {
            self.peers.records.lock().expect("peers").remove(&req.name);
            return Err(e);
        }
        tracing::info!(peer = %req.name, address = %req.address, fingerprint = %short(&token.fingerprint),
            peer_version = %accepted.version, "paired with a peer");
        Ok(info)
    }

    pub(crate) fn list_peers(&self) -> Vec<PeerInfo> {
        self.peers.records().iter().map(PeerRecord::info).collect()
    }

    pub(crate) fn peer_info(&self, name: &str) -> Result<PeerInfo, ApiError> {
        self.peers.get(name).map(|r| r.info())
    }

    /// Forget a peer: its certificate is refused from now on, by new connections and by the
    /// next request of open ones.
    pub(crate) fn delete_peer(&self, name: &str) -> Result<Done, ApiError> {
        let _g = self.admin.lock().expect("admin");
        let removed = self
            .peers
            .records
            .lock()
            .expect("peers")
            .remove(name)
            .ok_or_else(|| ApiError::not_found(format!("no peer {name}"), "see `strata peer list`"))?;
        if let Err(e) = self.save_state() {
            self.peers.records.lock().expect("peers").insert(name.into(), removed);
            return Err(e);
        }
        tracing::info!(peer = name, fingerprint = %short(&removed.fingerprint), "peer deleted");
        Ok(Done { target: name.into(), also: Vec::new() })
    }

    /// Connect to a peer and ping it.
    pub(crate) fn ping_peer(&self, name: &str) -> Result<PeerPing, ApiError> {
        let start = Instant::now();
        let mut c = PeerClient::connect(self, name)?;
        let connected = start.elapsed();
        let t = Instant::now();
        let answer = c.request(&PeerRequest::Ping { version: VERSION.into() })?;
        let round_trip = t.elapsed();
        let PeerResponse::Pong { version, .. } = answer else {
            return Err(ApiError::internal(format!("peer {name} answered a ping with {answer:?}")));
        };
        Ok(PeerPing {
            name: name.into(),
            address: self.peers.get(name)?.address.unwrap_or_default(),
            version: VERSION.into(),
            peer_version: version,
            connect_ms: connected.as_secs_f64() * 1e3,
            round_trip_ms: round_trip.as_secs_f64() * 1e3,
            known_there_as: c.known_as().into(),
        })
    }
}
