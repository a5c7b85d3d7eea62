//! Failover of a synchronous mirror between daemons through an etcd lease
//! (`mirror create ... PEER:POOL --sync --etcd URL`): the daemon that holds the lease
//! serves the volumes; the target takes over when the source's lease runs out; a daemon
//! that cannot prove it holds the lease does not acknowledge syncs.
//!
//! - **The owner key** `/strata/failover/<id>`, one per mirror, holds the serving daemon's
//!   identity (its certificate fingerprint) on an etcd lease of `ttl` seconds, claimed in a
//!   transaction (create if absent, or renew if it is already ours) and kept alive every
//!   ttl/3.
//! - **Fencing**: the serving daemon's pool carries a sync gate (engine
//!   pool/sync_gate.rs) that acknowledges syncs of the volumes only until *the time the
//!   last successful keep-alive was sent + ttl/2* — before etcd can expire the lease (at
//!   its receipt + ttl), whatever happens to this daemon's thread, network or etcd. A sync
//!   past that fails with EIO; the database stops rather than acknowledging a commit the
//!   other side may never see.
//! - **What the target may take over**: only a journal that holds every acknowledged
//!   write. The journal knows when it is incomplete after an arm (its gap, sync.rs); a
//!   source whose link falls back to asynchronous (or has none) says so in etcd first —
//!   the marker `<key>/unmirrored` — and its gate refuses syncs until the marker is
//!   written. The marker is deleted once a link is armed again (the target's journal then
//!   has its gap until it catches up).
//! - **Takeover** (the target's failover thread): the key is absent (the lease ran out),
//!   no marker, the journal complete: claim the key, break the mirror (restore to the
//!   common snapshot, replay the journal), mount the volumes at `mount_dir/VOLUME`.
//! - **The old source, when it returns**, finds the key held by the other daemon: its
//!   mirror becomes `fenced` — the gate stays closed, its mounts of the volumes go, new
//!   mounts and exports are refused — instead of serving stale data.
//!
//! The failover thread, the takeover and the fencing are in failover_run.rs.

use super::etcd::{Claim, Etcd};
use super::MirrorRecord;
use crate::service::{ApiError, Daemon};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use strata_engine::pool::sync_gate::SyncGate;

pub(crate) const TTL_DEFAULT: u64 = 10;
const KEY_PREFIX: &str = "/strata/failover/";

/// A mirror's failover settings, and what this side did (kept in both daemons' records).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverRecord {
    pub endpoints: Vec<String>,
    pub ttl_seconds: u64,
    /// The owner key in etcd.
    pub key: String,
    /// On the target: mount each volume at DIR/VOLUME after a takeover.
    #[serde(default)]
    pub mount_dir: Option<PathBuf>,
    /// This daemon took the volumes over (ns since 1970).
    #[serde(default)]
    pub took_over_ns: Option<u64>,
    /// Another daemon took the volumes over: this one does not serve them.
    #[serde(default)]
    pub fenced_by: Option<String>,
}

impl FailoverRecord {
    pub(super) fn marker(&self) -> String {
        format!("{}/unmirrored", self.key)
    }

    pub(super) fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_seconds)
    }
}

/// What this daemon does for a mirror with failover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    /// Serves `pool`'s volumes: must hold the lease.
    Holder {
        pool: String,
    },
    /// The target of an unbroken mirror: takes over when the lease runs out.
    Standby,
    /// Another daemon took over.
    Fenced,
    Off,
}

pub(crate) fn role(r: &MirrorRecord) -> Role {
    let Some(f) = &r.failover else { return Role::Off };
    if f.fenced_by.is_some() {
        return Role::Fenced;
    }
    match (&r.source_peer, r.state.as_str()) {
        (None, "broken") => Role::Off,
        (None, _) => Role::Holder { pool: r.source_pool.clone() },
        (Some(_), "broken") if f.took_over_ns.is_some() => Role::Holder { pool: r.dest_pool.clone() },
        (Some(_), "mirrored") if r.sync.is_some() => Role::Standby,
        _ => Role::Off,
    }
}

/// This daemon's lease on one mirror's volumes, as the sync gate of their pool sees it.
pub(crate) struct Lease {
    pub(super) vols: Vec<u64>,
    pub(super) ttl: Duration,
    pub(super) state: Mutex<LeaseState>,
    /// Signalled when the marker is written.
    pub(super) marked: Condvar,
    /// Syncs would be acknowledged without the target holding them, and etcd does not say
    /// so yet: refused until the failover thread has written the marker.
    pub(super) unmirrored: AtomicBool,
}

#[derive(Default)]
pub(super) struct LeaseState {
    /// Syncs may be acknowledged until then.
    pub(super) until: Option<Instant>,
    /// The etcd lease.
    pub(super) id: Option<i64>,
    pub(super) next_keep_alive: Option<Instant>,
    /// Why syncs are refused (once `until` has passed).
    pub(super) why: String,
    /// Who holds the key, as last seen.
    pub(super) owner: Option<String>,
    /// The marker is in etcd.
    pub(super) marker: bool,
    /// A marker may be in etcd that this daemon did not write (another daemon served the
    /// volumes before): deleted once this side's link is armed.
    pub(super) stale_marker: bool,
    /// Said in the log once (a standby's reason not to take over, an etcd error).
    pub(super) said: Option<String>,
}

impl Lease {
    /// Whether a sync may be acknowledged now. A sync that would go unmirrored waits (at
    /// most a third of the lease) for the failover thread to tell etcd so.
    pub(super) fn check(&self) -> Result<(), String> {
        let deadline = Instant::now() + self.ttl / 3;
        let mut s = self.state.lock().expect("lease");
        loop {
            if s.until.is_none_or(|t| Instant::now() >= t) {
                return Err(s.why.clone());
            }
            if !self.unmirrored.load(Ordering::Acquire) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err("the synchronous mirror lost its link and etcd could not be told so in time".into());
            }
            s = self.marked.wait_timeout(s, deadline - now).expect("lease").0;
        }
    }

    /// The link is gone or fell back: syncs wait for etcd to be told.
    pub(crate) fn link_lost(&self) {
        let s = self.state.lock().expect("lease");
        if !s.marker {
            self.unmirrored.store(true, Ordering::Release);
        }
    }

    /// A link is armed: the target's journal marked its gap, so it will not take over
    /// before it caught up.
    pub(crate) fn link_armed(&self) {
        self.unmirrored.store(false, Ordering::Release);
    }

    pub(super) fn close(&self, why: String) {
        let mut s = self.state.lock().expect("lease");
        s.until = None;
        s.id = None;
        s.why = why;
    }

    /// Etcd lease `id`, renewed at `sent`, is ours: syncs may be acknowledged until half
    /// its time to live from then.
    pub(super) fn hold(&self, id: i64, sent: Instant, ttl: Duration, me: String) -> bool {
        let mut s = self.state.lock().expect("lease");
        let first = s.until.is_none();
        s.stale_marker |= first;
        s.until = Some(sent + ttl / 2);
        s.id = Some(id);
        s.next_keep_alive = Some(sent + ttl / 3);
        s.owner = Some(me);
        s.why = "the failover lease was not renewed in time (etcd unreachable?)".into();
        s.said = None;
        first
    }

    pub(super) fn say_once(&self, what: String) -> bool {
        let mut s = self.state.lock().expect("lease");
        if s.said.as_ref() == Some(&what) {
            return false;
        }
        s.said = Some(what);
        true
    }
}

/// The sync gate of a pool: every lease on its volumes.
#[derive(Default)]
pub(crate) struct PoolGate {
    leases: Mutex<Vec<Arc<Lease>>>,
}

impl SyncGate for PoolGate {
    fn check(&self, vol: Option<u64>) -> Result<(), String> {
        let leases = self.leases.lock().expect("gate").clone();
        for l in &leases {
            if vol.is_none_or(|v| l.vols.contains(&v)) {
                l.check()?;
            }
        }
        Ok(())
    }
}

fn config_error(what: String) -> ApiError {
    ApiError::bad_request(
        what,
        "give --etcd http://HOST:2379 or https:// (with `serve --etcd-ca`), comma-separated for a cluster, and --failover-ttl 2s to 5m",
    )
}

impl Daemon {
    /// This daemon in the owner key.
    pub(super) fn failover_me(&self) -> String {
        format!("strata {}", self.peers.identity.fingerprint)
    }

    /// A peer's name for an owner value, if it is a paired daemon.
    pub(super) fn owner_name(&self, value: &str) -> String {
        let fp = value.strip_prefix("strata ").unwrap_or(value);
        if fp == self.peers.identity.fingerprint {
            return "this daemon".into();
        }
        self.peers.identity_of(fp).map_or(value.to_string(), |p| format!("peer {}", p.name))
    }

    /// `mirror create --etcd`: the settings, checked; the lease claimed before anything
    /// is made (an etcd that cannot be reached fails the create).
    pub(crate) fn failover_for_create(
        &self,
        req: &strata_api::CreateFailover,
        remote: bool,
        sync: bool,
    ) -> Result<FailoverRecord, ApiError> {
        if !remote || !sync {
            return Err(ApiError::bad_request(
                "failover without a synchronous mirror to a peer".to_string(),
                "failover needs --sync and a target on another daemon (PEER:POOL): a pool of the same host fails with it",
            ));
        }
        let ttl = req.ttl_seconds.unwrap_or(TTL_DEFAULT);
        if !(2..=300).contains(&ttl) {
            return Err(config_error(format!("a failover lease of {ttl} s")));
        }
        if req.etcd.is_empty()
            || req.etcd.iter().any(|e| !(e.starts_with("http://") || e.starts_with("https://")) || e.len() > 256)
        {
            return Err(config_error(format!("etcd endpoints {:?}", req.etcd)));
        }
        // The target daemon mounts there on the word of a peer: only where an operator may
        // (mounts.rs, OPERATOR_MOUNT_ROOTS); the target checks it again before mounting.
        let mount_dir = req.mount_dir.as_ref().map(PathBuf::from);
        if let Some(d) = &mount_dir {
            crate::service::mounts::check_operator_mount_path(&d.join("x"))
                .map_err(|e| ApiError::new(e.kind, format!("--failover-mount: {}", e.message), e.hint))?;
        }
        Ok(FailoverRecord {
            endpoints: req.etcd.clone(),
            ttl_seconds: ttl,
            key: format!("{KEY_PREFIX}{:016x}", crate::service::random_u64()),
            mount_dir,
            took_over_ns: None,
            fenced_by: None,
        })
    }

    /// Claim a new mirror's key before the mirror is made: the lease, and when it was asked.
    pub(crate) fn failover_claim_new(&self, f: &FailoverRecord) -> Result<(i64, Instant, Etcd), ApiError> {
        let unreachable = |e: String| {
            ApiError::unavailable(format!("failover: {e}"), "check --etcd: the endpoints must answer from this host")
        };
        let mut etcd =
            Etcd::new(&f.endpoints, &self.opts, (f.ttl() / 3).max(Duration::from_millis(500))).map_err(unreachable)?;
        let sent = Instant::now();
        let id = etcd.grant(f.ttl_seconds).map_err(unreachable)?;
        match etcd.claim(&f.key, &self.failover_me(), id).map_err(unreachable)? {
            Claim::Ours => Ok((id, sent, etcd)),
            Claim::HeldBy(other) => {
                Err(ApiError::conflict(format!("failover key {} is held by {other}", f.key), "try again"))
            }
        }
    }

    /// The new mirror `name` holds the lease `failover_claim_new` claimed.
    pub(crate) fn failover_adopt(&self, name: &str, (id, sent, etcd): (i64, Instant, Etcd)) {
        let Ok(r) = self.mirrors.get(name) else { return };
        let Some(f) = r.failover.clone() else { return };
        if let Some(lease) = self.failover_lease(name, &r, &r.source_pool) {
            lease.hold(id, sent, f.ttl(), self.failover_me());
        }
        self.etcd_back(name, etcd);
    }

    pub(super) fn etcd_for(&self, name: &str, f: &FailoverRecord) -> Result<Etcd, String> {
        if let Some(e) = self.mirrors.etcd.lock().expect("etcd clients").remove(name) {
            return Ok(e);
        }
        // Calls answer within a third of the lease, so a keep-alive that fails leaves time
        // for another before the gate closes.
        Etcd::new(&f.endpoints, &self.opts, (f.ttl() / 3).max(Duration::from_millis(500)))
    }

    pub(super) fn etcd_back(&self, name: &str, e: Etcd) {
        self.mirrors.etcd.lock().expect("etcd clients").insert(name.to_string(), e);
    }

    /// The lease of mirror `name` on `pool`'s volumes, made (closed) with the pool's gate
    /// if there is none.
    pub(crate) fn failover_lease(&self, name: &str, r: &MirrorRecord, pool: &str) -> Option<Arc<Lease>> {
        if let Some(l) = self.mirrors.leases.lock().expect("leases").get(name) {
            return Some(l.clone());
        }
        let p = self.pool(pool).ok()?;
        let vols: Vec<u64> = r.volumes.iter().filter_map(|v| p.volume_id(v).ok().map(|id| id.0)).collect();
        let lease = Arc::new(Lease {
            vols,
            ttl: Duration::from_secs(r.failover.as_ref().map_or(TTL_DEFAULT, |f| f.ttl_seconds)),
            marked: Condvar::new(),
            state: Mutex::new(LeaseState {
                why: "this daemon does not hold the failover lease yet (etcd)".into(),
                ..Default::default()
            }),
            unmirrored: AtomicBool::new(r.source_peer.is_none()),
        });
        let gate = {
            let mut gates = self.mirrors.gates.lock().expect("gates");
            gates.entry(pool.to_string()).or_default().clone()
        };
        gate.leases.lock().expect("gate").push(lease.clone());
        p.set_sync_gate(Some(gate));
        self.mirrors.leases.lock().expect("leases").insert(name.to_string(), lease.clone());
        Some(lease)
    }

    /// Mirror `old` is called `new` now (a reverse made this side the source): its lease
    /// and etcd client follow. A source without a link yet: etcd hears it first.
    pub(crate) fn rename_failover(&self, old: &str, new: &str) {
        let lease = self.mirrors.leases.lock().expect("leases").remove(old);
        if let Some(l) = lease {
            l.state.lock().expect("lease").stale_marker = true;
            l.link_lost();
            self.mirrors.leases.lock().expect("leases").insert(new.to_string(), l);
        }
        let client = self.mirrors.etcd.lock().expect("etcd clients").remove(old);
        if let Some(e) = client {
            self.mirrors.etcd.lock().expect("etcd clients").insert(new.to_string(), e);
        }
    }

    /// Take mirror `name`'s lease off its pool's gate (the mirror is deleted, or this side
    /// no longer serves the volumes by the mirror's rules).
    pub(super) fn drop_failover_lease(&self, name: &str) {
        let Some(lease) = self.mirrors.leases.lock().expect("leases").remove(name) else { return };
        for gate in self.mirrors.gates.lock().expect("gates").values() {
            gate.leases.lock().expect("gate").retain(|l| !Arc::ptr_eq(l, &lease));
        }
    }

    /// At start, before mounts and exports come back: every mirror this daemon should
    /// serve gets its (closed) gate, and one attempt to claim the lease, so a daemon whose
    /// volumes were taken over knows it before it mounts them.
    pub(crate) fn failover_start(&self) {
        for r in self.mirrors.records() {
            let name = r.name();
            match role(&r) {
                Role::Holder { pool } => {
                    if let Some(lease) = self.failover_lease(&name, &r, &pool) {
                        self.holder_step(&name, &r, &lease);
                    }
                }
                Role::Fenced => {
                    let pool = r.local_pool();
                    if let Some(lease) = self.failover_lease(&name, &r, pool) {
                        lease.close(self.fenced_why(&r));
                    }
                }
                Role::Standby | Role::Off => {}
            }
        }
    }

    pub(crate) fn fenced_why(&self, r: &MirrorRecord) -> String {
        let by = r.failover.as_ref().and_then(|f| f.fenced_by.clone()).unwrap_or_default();
        format!("{} took these volumes over: this daemon does not serve them", self.owner_name(&by))
    }

    /// Refuse `what` (a mount, an export) of a volume another daemon took over.
    pub(crate) fn refuse_fenced(&self, pool: &str, vol: &str, what: &str) -> Result<(), ApiError> {
        for r in self.mirrors.records() {
            let here = r.local_pool();
            if role(&r) == Role::Fenced && here == pool && r.volumes.iter().any(|v| v == vol) {
                return Err(ApiError::conflict(
                    format!("{pool}/{vol}: {}; {what} refused", self.fenced_why(&r)),
                    "serve the volumes where they were taken over; `strata mirror delete` here ends the mirror (the volumes stay, and become yours to serve)",
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn failover_info(&self, name: &str, r: &MirrorRecord) -> Option<strata_api::MirrorFailover> {
        let f = r.failover.as_ref()?;
        let lease = self.mirrors.leases.lock().expect("leases").get(name).cloned();
        let (role, owner, message) = match role(r) {
            Role::Holder { .. } => {
                let l = lease.as_ref();
                let ok = l.map(|l| l.check());
                let owner = l.and_then(|l| l.state.lock().expect("lease").owner.clone());
                match ok {
                    Some(Ok(())) => ("serving", owner, None),
                    Some(Err(why)) => ("acquiring", owner, Some(why)),
                    None => ("acquiring", owner, Some("the pool is not open".to_string())),
                }
            }
            Role::Standby => (
                "standby",
                self.mirrors.owners.lock().expect("owners").get(name).cloned(),
                self.mirrors.standby_notes.lock().expect("standby notes").get(name).cloned(),
            ),
            Role::Fenced => ("fenced", f.fenced_by.clone(), Some(self.fenced_why(r))),
            Role::Off => ("off", None, None),
        };
        Some(strata_api::MirrorFailover {
            etcd: f.endpoints.clone(),
            key: f.key.clone(),
            ttl_seconds: f.ttl_seconds,
            role: role.into(),
            owner: owner.map(|o| self.owner_name(&o)),
            took_over_ns: f.took_over_ns,
            message,
        })
    }
}
