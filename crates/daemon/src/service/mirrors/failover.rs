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

use super::etcd::{Claim, Etcd};
use super::{now_ns, MirrorRecord};
use crate::service::{ApiError, Daemon};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use strata_engine::pool::sync_gate::SyncGate;
use strata_engine::repl::journal::Journal;

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
    fn marker(&self) -> String {
        format!("{}/unmirrored", self.key)
    }

    fn ttl(&self) -> Duration {
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
    vols: Vec<u64>,
    ttl: Duration,
    state: Mutex<LeaseState>,
    /// Signalled when the marker is written.
    marked: Condvar,
    /// Syncs would be acknowledged without the target holding them, and etcd does not say
    /// so yet: refused until the failover thread has written the marker.
    unmirrored: AtomicBool,
}

#[derive(Default)]
struct LeaseState {
    /// Syncs may be acknowledged until then.
    until: Option<Instant>,
    /// The etcd lease.
    id: Option<i64>,
    next_keep_alive: Option<Instant>,
    /// Why syncs are refused (once `until` has passed).
    why: String,
    /// Who holds the key, as last seen.
    owner: Option<String>,
    /// The marker is in etcd.
    marker: bool,
    /// Said in the log once (a standby's reason not to take over, an etcd error).
    said: Option<String>,
}

impl Lease {
    /// Whether a sync may be acknowledged now. A sync that would go unmirrored waits (at
    /// most a third of the lease) for the failover thread to tell etcd so.
    fn check(&self) -> Result<(), String> {
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

    fn close(&self, why: String) {
        let mut s = self.state.lock().expect("lease");
        s.until = None;
        s.id = None;
        s.why = why;
    }

    /// Etcd lease `id`, renewed at `sent`, is ours: syncs may be acknowledged until half
    /// its time to live from then.
    fn hold(&self, id: i64, sent: Instant, ttl: Duration, me: String) -> bool {
        let mut s = self.state.lock().expect("lease");
        let first = s.until.is_none();
        s.until = Some(sent + ttl / 2);
        s.id = Some(id);
        s.next_keep_alive = Some(sent + ttl / 3);
        s.owner = Some(me);
        s.why = "the failover lease was not renewed in time (etcd unreachable?)".into();
        s.said = None;
        first
    }

    fn say_once(&self, what: String) -> bool {
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
        "give --etcd http://HOST:2379 (comma-separated for a cluster) and --failover-ttl 2s to 5m",
    )
}

impl Daemon {
    /// This daemon in the owner key.
    fn failover_me(&self) -> String {
        format!("strata {}", self.peers.identity.fingerprint)
    }

    /// A peer's name for an owner value, if it is a paired daemon.
    fn owner_name(&self, value: &str) -> String {
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
        let mount_dir = req.mount_dir.as_ref().map(PathBuf::from);
        if mount_dir.as_ref().is_some_and(|d| !d.is_absolute()) {
            return Err(ApiError::bad_request(
                format!("--failover-mount {:?} is not absolute", req.mount_dir),
                "give a full path",
            ));
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
        let mut etcd = Etcd::new(&f.endpoints, (f.ttl() / 3).max(Duration::from_millis(500))).map_err(unreachable)?;
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

    fn etcd_for(&self, name: &str, f: &FailoverRecord) -> Result<Etcd, String> {
        if let Some(e) = self.mirrors.etcd.lock().expect("etcd clients").remove(name) {
            return Ok(e);
        }
        // Calls answer within a third of the lease, so a keep-alive that fails leaves time
        // for another before the gate closes.
        Etcd::new(&f.endpoints, (f.ttl() / 3).max(Duration::from_millis(500)))
    }

    fn etcd_back(&self, name: &str, e: Etcd) {
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

    /// Take mirror `name`'s lease off its pool's gate (the mirror is deleted, or this side
    /// no longer serves the volumes by the mirror's rules).
    fn drop_failover_lease(&self, name: &str) {
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
                    let pool = if r.source_peer.is_none() { &r.source_pool } else { &r.dest_pool };
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
            let here = if r.source_peer.is_none() { &r.source_pool } else { &r.dest_pool };
            if role(&r) == Role::Fenced && here == pool && r.volumes.iter().any(|v| v == vol) {
                return Err(ApiError::conflict(
                    format!("{pool}/{vol}: {}; {what} refused", self.fenced_why(&r)),
                    "serve the volumes where they were taken over; `strata mirror delete` here ends the mirror (the volumes stay, and become yours to serve)",
                ));
            }
        }
        Ok(())
    }

    /// The failover thread: every mirror with failover, every 200 ms.
    pub(crate) fn failover_loop(self: &Arc<Self>) {
        while !self.stopping.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            for r in self.mirrors.records() {
                let name = r.name();
                match role(&r) {
                    Role::Holder { pool } => {
                        if let Some(lease) = self.failover_lease(&name, &r, &pool) {
                            self.holder_step(&name, &r, &lease);
                        }
                    }
                    Role::Standby => self.standby_step(&name, &r),
                    Role::Fenced | Role::Off => {}
                }
            }
        }
    }

    /// The serving side: claim the key, keep the lease alive, keep the marker true.
    fn holder_step(&self, name: &str, r: &MirrorRecord, lease: &Arc<Lease>) {
        let Some(f) = r.failover.clone() else { return };
        let mut etcd = match self.etcd_for(name, &f) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(mirror = name, "failover: {e}");
                return;
            }
        };
        let me = self.failover_me();
        let (id, due) = {
            let s = lease.state.lock().expect("lease");
            (s.id, s.next_keep_alive.is_none_or(|t| Instant::now() >= t))
        };
        let sent = Instant::now();
        let result = match id {
            None => etcd.grant(f.ttl_seconds).and_then(|id| etcd.claim(&f.key, &me, id).map(|c| (id, c))).map(Some),
            Some(id) if due => etcd.keep_alive(id).map(|left| match left > 0 {
                true => Some((id, Claim::Ours)),
                false => None,
            }),
            Some(_) => Ok(Some((0, Claim::Ours))),
        };
        match result {
            Ok(Some((0, Claim::Ours))) => {}
            Ok(Some((id, Claim::Ours))) => {
                if lease.hold(id, sent, f.ttl(), me.clone()) {
                    tracing::info!(mirror = name, key = %f.key, lease = id, "failover lease held: serving the volumes");
                }
            }
            Ok(Some((_, Claim::HeldBy(other)))) => {
                lease.state.lock().expect("lease").owner = Some(other.clone());
                if !other.starts_with('(') {
                    self.fence(name, r, lease, &other);
                }
            }
            Ok(None) => {
                lease.close("the failover lease expired in etcd".into());
                tracing::warn!(mirror = name, "failover lease expired in etcd: claiming it again");
            }
            Err(e) => {
                if lease.say_once(e.clone()) {
                    tracing::warn!(mirror = name, "failover: {e}; syncs are refused once the lease has run out");
                }
            }
        }
        // The marker: etcd says the target may lack acknowledged writes exactly when it
        // might (source side only: a target that took over has no mirror to lag).
        if r.source_peer.is_none() && f.fenced_by.is_none() {
            if lease.unmirrored.load(Ordering::Acquire) {
                match etcd.put(&f.marker(), &me) {
                    Ok(()) => {
                        let mut s = lease.state.lock().expect("lease");
                        s.marker = true;
                        lease.unmirrored.store(false, Ordering::Release);
                        drop(s);
                        lease.marked.notify_all();
                        tracing::info!(
                            mirror = name,
                            "failover: etcd marked: the target may lack writes (no takeover)"
                        );
                    }
                    Err(e) => tracing::warn!(mirror = name, "failover: marking the mirror unmirrored: {e}"),
                }
            } else if lease.state.lock().expect("lease").marker
                && self.sync_link(name).is_some_and(|l| !matches!(l.phase(), super::sync::Phase::Degraded(_)))
            {
                lease.state.lock().expect("lease").marker = false;
                if let Err(e) = etcd.delete(&f.marker()) {
                    tracing::warn!(mirror = name, "failover: clearing the unmirrored marker: {e}");
                    lease.state.lock().expect("lease").marker = true;
                }
            }
        }
        self.etcd_back(name, etcd);
    }

    /// Another daemon holds the key: stop serving the volumes.
    fn fence(&self, name: &str, r: &MirrorRecord, lease: &Arc<Lease>, other: &str) {
        self.mirrors.update(name, |m| {
            if let Some(f) = m.failover.as_mut() {
                f.fenced_by = Some(other.to_string());
            }
        });
        let Ok(rec) = self.mirrors.get(name) else { return };
        let why = self.fenced_why(&rec);
        lease.close(why.clone());
        self.disarm_sync(name);
        let pool = if r.source_peer.is_none() { &r.source_pool } else { &r.dest_pool };
        let paths: Vec<PathBuf> = self
            .mounts
            .lock()
            .expect("mounts")
            .iter()
            .filter(|(_, m)| &m.pool == pool && r.volumes.contains(&m.volume))
            .map(|(p, _)| p.clone())
            .collect();
        for p in &paths {
            if let Err(e) = self.unmount(p, false) {
                tracing::warn!(mirror = name, path = %p.display(), "failover: unmount of a fenced volume: {}", e.message);
            }
        }
        if let Err(e) = self.save_state() {
            tracing::error!(mirror = name, "failover: saving the fenced state: {}", e.message);
        }
        tracing::warn!(mirror = name, unmounted = paths.len(), "failover: fenced: {why}");
        self.events.record(
            "error",
            "mirror.fenced",
            Some(pool),
            Some(name),
            format!("{why}; unmounted {} mounts", paths.len()),
        );
    }

    /// The target of an unbroken sync mirror: take over once the key is gone.
    fn standby_step(self: &Arc<Self>, name: &str, r: &MirrorRecord) {
        let Some(f) = r.failover.clone() else { return };
        let mut etcd = match self.etcd_for(name, &f) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(mirror = name, "failover: {e}");
                return;
            }
        };
        let r2 = self.standby_check(name, r, &f, &mut etcd);
        self.etcd_back(name, etcd);
        let note = |what: String| {
            let mut m = self.mirrors.standby_notes.lock().expect("standby notes");
            if m.get(name) != Some(&what) {
                tracing::warn!(mirror = name, "failover: {what}");
                m.insert(name.to_string(), what);
            }
        };
        match r2 {
            Ok(Some(id)) => {
                self.mirrors.standby_notes.lock().expect("standby notes").remove(name);
                if let Err(e) = self.take_over(name, id, "failover") {
                    note(format!("taking over failed: {} ({})", e.message, e.hint));
                }
            }
            Ok(None) => {}
            Err(why) => note(why),
        }
    }

    /// Whether to take over now: the etcd lease to take over on, if so.
    fn standby_check(
        &self,
        name: &str,
        r: &MirrorRecord,
        f: &FailoverRecord,
        etcd: &mut Etcd,
    ) -> Result<Option<(i64, Instant)>, String> {
        if let Some(owner) = etcd.owner(&f.key)? {
            self.mirrors.owners.lock().expect("owners").insert(name.to_string(), owner);
            self.mirrors.standby_notes.lock().expect("standby notes").remove(name);
            return Ok(None);
        }
        self.mirrors.owners.lock().expect("owners").remove(name);
        if etcd.owner(&f.marker())?.is_some() {
            return Err("the lease is free, but the source said its mirror had fallen back to asynchronous: \
                        not taking over (break by hand to serve the last transferred state)"
                .into());
        }
        if r.common.is_none() {
            return Err("the lease is free, but nothing was transferred yet: not taking over".into());
        }
        let dst = self.pool(&r.dest_pool).map_err(|e| e.message)?;
        let jvol = dst
            .volume_id(&super::sync::journal_volume(&r.volumes[0]))
            .map_err(|_| "the lease is free, but there is no sync journal here: not taking over".to_string())?;
        let journal = Journal::open(&dst, jvol).map_err(|e| e.to_string())?;
        if let Some(txg) = journal.gap(&dst).map_err(|e| e.to_string())? {
            return Err(format!(
                "the lease is free, but the journal misses writes (it was catching up after source txg {txg}): \
                 not taking over (break by hand to serve the last transferred state)"
            ));
        }
        let sent = Instant::now();
        let id = etcd.grant(f.ttl_seconds)?;
        match etcd.claim(&f.key, &self.failover_me(), id)? {
            Claim::Ours => Ok(Some((id, sent))),
            Claim::HeldBy(_) => Ok(None),
        }
    }

    /// This daemon holds etcd lease `id` on mirror `name`'s key: serve its volumes — break
    /// the mirror (the journal replayed), mount them.
    fn take_over(self: &Arc<Self>, name: &str, (id, sent): (i64, Instant), caller: &str) -> Result<(), ApiError> {
        let r = self.mirrors.get(name)?;
        let f = r.failover.clone().expect("a mirror with failover");
        self.mirrors.update(name, |m| {
            if let Some(f) = m.failover.as_mut() {
                f.took_over_ns = Some(now_ns());
            }
        });
        let lease = self
            .failover_lease(name, &r, &r.dest_pool)
            .ok_or_else(|| ApiError::unavailable(format!("pool {}", r.dest_pool), "bring the target pool back"))?;
        lease.hold(id, sent, f.ttl(), self.failover_me());
        tracing::warn!(mirror = name, key = %f.key, caller, "failover: the source's lease ran out: taking over");
        if let Err(e) = self.break_mirror(name, caller) {
            // Not served: give the key back, so that someone else (or the source) can.
            self.mirrors.update(name, |m| {
                if let Some(f) = m.failover.as_mut() {
                    f.took_over_ns = None;
                }
            });
            self.drop_failover_lease(name);
            if let Ok(mut etcd) = self.etcd_for(name, &f) {
                let _ = etcd.release(&f.key, &self.failover_me());
                self.etcd_back(name, etcd);
            }
            return Err(e);
        }
        let mut mounted = Vec::new();
        if let Some(dir) = &f.mount_dir {
            for v in &r.volumes {
                let at = dir.join(v);
                match self.mount(&format!("{}/{v}", r.dest_pool), &at, false) {
                    Ok(()) => mounted.push(at.display().to_string()),
                    Err(e) => {
                        tracing::error!(mirror = name, volume = %v, "failover: mount at {}: {}", at.display(), e.message)
                    }
                }
            }
        }
        self.save_state()?;
        tracing::warn!(mirror = name, mounted = ?mounted, "failover: took over: serving the volumes");
        self.events.record(
            "warning",
            "mirror.failover",
            Some(&r.dest_pool),
            Some(name),
            format!(
                "took over from {} (its lease ran out): broken, journal replayed{}",
                r.source_peer.as_deref().unwrap_or("the source"),
                if mounted.is_empty() { String::new() } else { format!(", mounted at {}", mounted.join(", ")) }
            ),
        );
        Ok(())
    }

    /// A break by hand of a mirror with failover, on its target: only with the lease (the
    /// source must not be serving).
    pub(crate) fn failover_before_break(&self, name: &str, r: &MirrorRecord) -> Result<(), ApiError> {
        let Some(f) = r.failover.clone() else { return Ok(()) };
        if r.source_peer.is_none() || f.took_over_ns.is_some() {
            return Ok(());
        }
        let mut etcd = self.etcd_for(name, &f).map_err(|e| ApiError::unavailable(e, "-"))?;
        let sent = Instant::now();
        let claimed =
            etcd.grant(f.ttl_seconds).and_then(|id| etcd.claim(&f.key, &self.failover_me(), id).map(|c| (id, c)));
        self.etcd_back(name, etcd);
        match claimed {
            Ok((id, Claim::Ours)) => {
                self.mirrors.update(name, |m| {
                    if let Some(f) = m.failover.as_mut() {
                        f.took_over_ns = Some(now_ns());
                    }
                });
                let lease = self.failover_lease(name, r, &r.dest_pool).ok_or_else(|| {
                    ApiError::unavailable(format!("pool {}", r.dest_pool), "bring the target pool back")
                })?;
                lease.hold(id, sent, f.ttl(), self.failover_me());
                Ok(())
            }
            Ok((_, Claim::HeldBy(other))) => Err(ApiError::conflict(
                format!("{} holds the failover lease of mirror {name}: it serves the volumes", self.owner_name(&other)),
                "stop that daemon (this one takes over by itself once its lease runs out), or wait",
            )),
            Err(e) => Err(ApiError::unavailable(
                format!("the failover lease cannot be taken: {e}"),
                "bring etcd back: without the lease a break could leave two daemons serving the volumes \
                 (`strata mirror delete` here ends the mirror without it)",
            )),
        }
    }

    /// The mirror is deleted (either side): release what this daemon holds; a source tells
    /// etcd first that the target may not take over.
    pub(crate) fn failover_delete(&self, name: &str, r: &MirrorRecord) {
        let Some(f) = r.failover.clone() else { return };
        let held = self.mirrors.leases.lock().expect("leases").get(name).is_some_and(|l| l.check().is_ok());
        self.drop_failover_lease(name);
        self.mirrors.owners.lock().expect("owners").remove(name);
        let Ok(mut etcd) = self.etcd_for(name, &f) else { return };
        if r.source_peer.is_none() && f.fenced_by.is_none() {
            if let Err(e) = etcd.put(&f.marker(), &self.failover_me()) {
                tracing::warn!(mirror = name, "failover: marking a deleted mirror: {e}");
                return; // the key runs out on its own; the target's record goes with the mirror
            }
        }
        if held {
            let _ = etcd.release(&f.key, &self.failover_me());
        }
        // The client goes with the mirror.
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
