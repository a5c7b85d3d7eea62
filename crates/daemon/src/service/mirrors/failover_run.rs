//! The failover thread (failover.rs has the model): the serving side claims the owner
//! key and keeps its lease alive, keeps the `unmirrored` marker true, and fences itself
//! when another daemon took the key; the standby target takes over once the key is gone
//! (and nothing says it may lack acknowledged writes). Also the failover steps of
//! `mirror break` by hand and of `mirror delete`.

use super::etcd::{Claim, Etcd};
use super::failover::{role, FailoverRecord, Lease, Role};
use super::now_ns;
use super::MirrorRecord;
use crate::service::{ApiError, Daemon};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_engine::repl::journal::Journal;

impl Daemon {
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
                    // The old source becomes the mirror of the side that took over.
                    Role::Fenced if r.source_peer.is_none() => self.reverse_after_failover(&name),
                    Role::Fenced | Role::Off => {}
                }
            }
        }
    }

    /// The serving side: claim the key, keep the lease alive, keep the marker true.
    pub(super) fn holder_step(&self, name: &str, r: &MirrorRecord, lease: &Arc<Lease>) {
        let Some(f) = r.failover.clone() else { return };
        let Some(mut etcd) = self.etcd_or_warn(name, &f) else { return };
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
                    self.etcd_back(name, etcd);
                    return;
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
            } else if {
                let s = lease.state.lock().expect("lease");
                (s.marker || s.stale_marker) && s.id.is_some()
            } && self.sync_link(name).is_some_and(|l| !matches!(l.phase(), super::sync::Phase::Degraded(_)))
            {
                // A link is armed (the target's journal has its gap until it caught up):
                // the marker may go — ours, or one left by a daemon that served before.
                {
                    let mut s = lease.state.lock().expect("lease");
                    s.marker = false;
                    s.stale_marker = false;
                }
                if let Err(e) = etcd.delete(&f.marker()) {
                    tracing::warn!(mirror = name, "failover: clearing the unmirrored marker: {e}");
                    lease.state.lock().expect("lease").stale_marker = true;
                }
            }
        }
        self.etcd_back(name, etcd);
    }

    fn etcd_or_warn(&self, name: &str, f: &FailoverRecord) -> Option<Etcd> {
        self.etcd_for(name, f).map_err(|e| tracing::warn!(mirror = name, "failover: {e}")).ok()
    }

    /// A fenced old source: reverse the mirror (this side becomes the target of the daemon
    /// that took over), at most every 30 s.
    fn reverse_after_failover(self: &Arc<Self>, name: &str) {
        {
            let mut retry = self.mirrors.arm_retry.lock().expect("sync retry");
            let key = format!("reverse {name}");
            if retry.get(&key).is_some_and(|t| t.elapsed() < Duration::from_secs(30)) {
                return;
            }
            retry.insert(key, Instant::now());
        }
        match self.reverse_remote(name, "failover") {
            Ok(new_name) => {
                self.mirrors.arm_retry.lock().expect("sync retry").remove(&format!("reverse {name}"));
                tracing::warn!(mirror = %new_name, "failover: this daemon is the mirror of the one that took over");
            }
            Err(e) => {
                tracing::warn!(mirror = name, "failover: not reversed yet: {} ({}); again in 30 s", e.message, e.hint)
            }
        }
    }

    /// Another daemon holds the key: stop serving the volumes.
    pub(super) fn fence(&self, name: &str, r: &MirrorRecord, lease: &Arc<Lease>, other: &str) {
        self.mirrors.update(name, |m| {
            if let Some(f) = m.failover.as_mut() {
                f.fenced_by = Some(other.to_string());
            }
        });
        let Ok(rec) = self.mirrors.get(name) else { return };
        let why = self.fenced_why(&rec);
        lease.close(why.clone());
        self.disarm_sync(name);
        let pool = r.local_pool();
        let paths: Vec<PathBuf> = self
            .mounts
            .lock()
            .expect("mounts")
            .iter()
            .filter(|(_, m)| m.pool == pool && r.volumes.contains(&m.volume))
            .map(|(p, _)| p.clone())
            .collect();
        for p in &paths {
            if let Err(e) = self.unmount(p, false) {
                tracing::warn!(mirror = name, path = %p.display(), "failover: unmount of a fenced volume: {}", e.message);
            }
        }
        let mut withdrawn = 0;
        for v in &r.volumes {
            withdrawn += self.nfs.withdraw(pool, v) + self.withdraw_block_exports(pool, v);
        }
        if let Err(e) = self.save_state() {
            tracing::error!(mirror = name, "failover: saving the fenced state: {}", e.message);
        }
        tracing::warn!(mirror = name, unmounted = paths.len(), withdrawn, "failover: fenced: {why}");
        self.events.record(
            "error",
            "mirror.fenced",
            Some(pool),
            Some(name),
            format!("{why}; {} mounts unmounted, {withdrawn} exports withdrawn", paths.len()),
        );
    }

    /// The target of an unbroken sync mirror: take over once the key is gone.
    pub(super) fn standby_step(self: &Arc<Self>, name: &str, r: &MirrorRecord) {
        let Some(f) = r.failover.clone() else { return };
        let Some(mut etcd) = self.etcd_or_warn(name, &f) else { return };
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
    pub(super) fn standby_check(
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
    pub(super) fn take_over(
        self: &Arc<Self>,
        name: &str,
        (id, sent): (i64, Instant),
        caller: &str,
    ) -> Result<(), ApiError> {
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
                // A path the source daemon named: only where an operator of this one may mount.
                let allowed = crate::service::mounts::check_operator_mount_path(&at);
                match allowed.and_then(|()| self.mount(&format!("{}/{v}", r.dest_pool), &at, false)) {
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
}
