//! Mirrors: a volume, or a group of volumes as one unit, replicated to another pool of this
//! daemon (`strata mirror create POOL/VOL DEST_POOL [--group ...]`).
//!
//! A mirror is named by its target, DEST_POOL/VOLUME (SnapMirror names relationships by
//! destination). Each transfer takes one group snapshot of the source volumes
//! (`mirror-YYYYMMDD-HHMMSS`), sends each volume incrementally from the newest snapshot both
//! sides hold (`common`) with the engine's send/receive (engine repl/), and, once every
//! volume has received it, makes it the new common snapshot and prunes older transferred
//! snapshots beyond `keep` on both sides. So the target always holds a snapshot where the
//! data and log volumes of a database match.
//!
//! Durability: the state file records the transfer in progress — its snapshot, the volumes
//! done, and for the one under way the last frame its receiver committed — before and while
//! it runs, so a transfer cut by a restart resumes where it stopped (transfer.rs).
//!
//! Rules while a mirror is not broken: its target volumes take no clients (no mount, no
//! export of the live volume; their snapshots can be cloned or exported), cannot be deleted
//! or restored, and the common snapshot cannot be deleted on either side (delete the mirror
//! first). `break` lifts the rules for the target; `resync` puts them back, keeping what was
//! written on the target meanwhile as a snapshot (`resync-…`) instead of destroying it.

mod etcd;
pub(crate) mod failover;
mod failover_run;
mod remote;
mod reverse_remote;
pub(crate) mod sync;
mod sync_pipe;
mod sync_remote;
mod transfer;

use super::{ApiError, Daemon};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use strata_api::{CreateMirror, MirrorInfo, MirrorTransfer};
use strata_engine::Pool;
pub(crate) use transfer::TransferJob;

/// Transferred snapshots each side keeps by default: the common one and the one before
/// (a fallback if the newest is ever lost).
const KEEP_DEFAULT: u32 = 2;
pub(crate) const SNAPSHOT_PREFIX: &str = "mirror-";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MirrorRecord {
    pub source_pool: String,
    /// The volumes, by the same name in both pools; the first names the mirror.
    pub volumes: Vec<String>,
    pub dest_pool: String,
    /// `uninitialized`, `mirrored`, `broken` or `paused`.
    pub state: String,
    #[serde(default)]
    pub every_seconds: Option<u64>,
    pub keep: u32,
    /// Record bytes per second at most (none: no limit).
    #[serde(default)]
    pub limit_bytes_per_second: Option<u64>,
    /// The newest snapshot both sides hold, and when it was taken (ns since 1970).
    #[serde(default)]
    pub common: Option<String>,
    #[serde(default)]
    pub common_created_ns: Option<u64>,
    #[serde(default)]
    pub last: Option<LastTransfer>,
    /// The transfer in progress (survives restarts).
    #[serde(default)]
    pub pending: Option<PendingTransfer>,
    /// On the source of a mirror to another daemon: that daemon (a paired peer); the
    /// target pool is its.
    #[serde(default)]
    pub dest_peer: Option<String>,
    /// On the target of a mirror from another daemon: that daemon; the source pool is its.
    #[serde(default)]
    pub source_peer: Option<String>,
    /// A synchronous mirror: `on` or `strict` (sync.rs).
    #[serde(default)]
    pub sync: Option<String>,
    /// The source volumes' ids, in `volumes` order: what the journal's frames name (a
    /// break replays them with the source pool gone).
    #[serde(default)]
    pub source_volume_ids: Vec<u64>,
    /// Failover through an etcd lease (failover.rs).
    #[serde(default)]
    pub failover: Option<failover::FailoverRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LastTransfer {
    pub snapshot: String,
    pub base: Option<String>,
    pub bytes: u64,
    pub seconds: f64,
    pub finished_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PendingTransfer {
    pub snapshot: String,
    pub base: Option<String>,
    pub created_ns: u64,
    /// Volumes that have received the snapshot.
    pub done: Vec<String>,
    /// Per volume: the last frame its receiver committed (where a resumed send starts).
    pub committed: BTreeMap<String, u64>,
}

impl MirrorRecord {
    pub fn name(&self) -> String {
        match &self.dest_peer {
            Some(peer) => format!("{peer}:{}/{}", self.dest_pool, self.volumes[0]),
            None => format!("{}/{}", self.dest_pool, self.volumes[0]),
        }
    }

    /// Another daemon took the volumes over (failover.rs): this side neither serves nor
    /// mirrors them.
    /// The pool of this daemon holding the volumes of a mirror between daemons: the
    /// source's here, or the target's.
    pub fn local_pool(&self) -> &str {
        match self.source_peer {
            None => &self.source_pool,
            Some(_) => &self.dest_pool,
        }
    }

    pub fn fenced(&self) -> bool {
        self.failover.as_ref().is_some_and(|f| f.fenced_by.is_some())
    }
}

#[derive(Default)]
pub(crate) struct Mirrors {
    pub(crate) records: Mutex<BTreeMap<String, MirrorRecord>>,
    pub(crate) jobs: Mutex<BTreeMap<String, Arc<TransferJob>>>,
    /// Armed synchronous mirrors, by name (sync.rs).
    pub(crate) links: Mutex<BTreeMap<String, Arc<sync::SyncLink>>>,
    /// Held while a link is armed, and by a break from its disarm to the state change (so
    /// that the mirror loop cannot arm a mirror being broken).
    pub(crate) arming: Mutex<()>,
    /// When arming a sync mirror last failed (the mirror loop retries after 30 s).
    pub(crate) arm_retry: Mutex<BTreeMap<String, std::time::Instant>>,
    /// On the target of a sync mirror from a peer: its journal, by mirror name
    /// (sync_remote.rs).
    pub(crate) journals: Mutex<BTreeMap<String, Arc<Mutex<sync_remote::RemoteJournal>>>>,
    /// Failover (failover.rs): this daemon's leases by mirror, the sync gates by pool, an
    /// etcd client per mirror, the owner a standby last saw, and why it does not take over.
    pub(crate) leases: Mutex<BTreeMap<String, Arc<failover::Lease>>>,
    pub(crate) gates: Mutex<BTreeMap<String, Arc<failover::PoolGate>>>,
    pub(crate) etcd: Mutex<BTreeMap<String, etcd::Etcd>>,
    pub(crate) owners: Mutex<BTreeMap<String, String>>,
    pub(crate) standby_notes: Mutex<BTreeMap<String, String>>,
}

impl Mirrors {
    pub(crate) fn load(&self, records: Vec<MirrorRecord>) {
        let mut m = self.records.lock().expect("mirrors");
        for r in records {
            m.insert(r.name(), r);
        }
    }

    pub(crate) fn records(&self) -> Vec<MirrorRecord> {
        self.records.lock().expect("mirrors").values().cloned().collect()
    }

    fn get(&self, name: &str) -> Result<MirrorRecord, ApiError> {
        self.records.lock().expect("mirrors").get(name).cloned().ok_or_else(|| {
            ApiError::not_found(
                format!("mirror {name}"),
                "see `strata mirror list` (mirrors are named DEST_POOL/VOLUME)",
            )
        })
    }

    fn update(&self, name: &str, f: impl FnOnce(&mut MirrorRecord)) {
        if let Some(r) = self.records.lock().expect("mirrors").get_mut(name) {
            f(r);
        }
    }

    fn running(&self, name: &str) -> Option<Arc<TransferJob>> {
        self.jobs.lock().expect("mirror jobs").get(name).filter(|j| j.is_running()).cloned()
    }
}

fn split(spec: &str) -> Result<(&str, &str), ApiError> {
    spec.split_once('/').filter(|(p, v)| !p.is_empty() && !v.is_empty() && !v.contains('/')).ok_or_else(|| {
        ApiError::bad_request(format!("{spec:?} is not POOL/VOLUME"), "name the mirror by its target, DEST_POOL/VOLUME")
    })
}

/// The side that becomes (again) a mirror's target: what its `volumes` got since
/// `common` is kept as a snapshot `ACTION-<time>` (if anything was written), then they
/// return to `common`. The snapshot's name, if one was taken.
fn keep_and_restore(pool: &Pool, volumes: &[String], common: &str, action: &str) -> Result<Option<String>, ApiError> {
    let saved = format!("{action}-{}", crate::utc_compact(now_ns() / 1_000_000_000));
    let vols: Vec<&str> = volumes.iter().map(String::as_str).collect();
    let mut written = false;
    for v in &vols {
        let info = pool.volume_info(pool.volume_id(v)?)?;
        written |= info.written_bytes > 0 || info.parent_snapshot.as_deref() != Some(&format!("{v}@{common}"));
    }
    if written {
        pool.create_snapshots(&vols, &saved)?;
    }
    let list: Vec<(&str, &str)> = vols.iter().map(|v| (*v, common)).collect();
    pool.restore_volumes(&list)?;
    Ok(written.then_some(saved))
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl Daemon {
    pub(crate) fn create_mirror(self: &Arc<Self>, req: &CreateMirror, caller: &str) -> Result<MirrorInfo, ApiError> {
        let (src_pool, first) = split(&req.source)?;
        let mut volumes = vec![first.to_string()];
        for v in &req.group {
            if v.contains('/') || v.is_empty() {
                return Err(ApiError::bad_request(
                    format!("group volume {v:?}"),
                    "give the group's other volumes by name: they are in the source's pool",
                ));
            }
            if volumes.contains(v) {
                return Err(ApiError::bad_request(format!("volume {v} given twice"), "name each volume once"));
            }
            volumes.push(v.clone());
        }
        if req.dest_pool == src_pool {
            return Err(ApiError::bad_request(
                format!("source and target are both in pool {src_pool}"),
                "mirror to another pool (a copy in the same pool is a clone: `strata clone create`)",
            ));
        }
        let keep = req.keep.unwrap_or(KEEP_DEFAULT);
        if keep == 0 || keep > 1000 || req.every_seconds == Some(0) || req.limit_bytes_per_second == Some(0) {
            return Err(ApiError::bad_request(
                format!("keep {keep}, every {:?} s", req.every_seconds),
                "keep 1 to 1000 transferred snapshots; a schedule of at least 1 s; a limit above 0",
            ));
        }
        if let Some(mode) = &req.sync {
            if mode != "on" && mode != "strict" {
                return Err(ApiError::bad_request(format!("sync mode {mode:?}"), "use --sync on, or --sync strict"));
            }
        }
        let _g = self.admin.lock().expect("admin");
        if req.sync.is_some() {
            if let Some(other) = self
                .mirrors
                .records()
                .iter()
                .find(|r| r.sync.is_some() && r.source_pool == src_pool && r.state != "broken")
            {
                return Err(ApiError::conflict(
                    format!("pool {src_pool} is already the source of synchronous mirror {}", other.name()),
                    "add the volume to that mirror's group (delete it and create it with --group), or mirror this one asynchronously",
                ));
            }
        }
        let src = self.pool(src_pool)?;
        for v in &volumes {
            src.volume_id(v)?;
            if let Some(m) = self.mirror_of_target(src_pool, v) {
                return Err(ApiError::conflict(
                    format!("{src_pool}/{v} is the target of mirror {m}"),
                    "mirror the source of that mirror, or break it first",
                ));
            }
        }
        let failover = match &req.failover {
            Some(fo) => Some(self.failover_for_create(
                fo,
                remote::split_remote(&req.dest_pool).is_some(),
                req.sync.is_some(),
            )?),
            None => None,
        };
        if let Some((peer, dest_pool)) = remote::split_remote(&req.dest_pool) {
            // The lease is the source's before the target can take anything over.
            let claimed = failover.as_ref().map(|f| self.failover_claim_new(f)).transpose()?;
            let name = self.create_remote_mirror(
                src_pool,
                volumes,
                peer,
                dest_pool,
                keep,
                req.every_seconds,
                req.limit_bytes_per_second,
                req.sync.clone(),
                failover,
            )?;
            if let Some(c) = claimed {
                self.failover_adopt(&name, c);
            }
            drop(_g);
            if req.sync.is_some() {
                self.arm_sync_or_later(&name, caller);
            } else {
                self.start_transfer(&name, caller)?;
            }
            return self.mirror_info(&name);
        }
        let dst = self.pool(&req.dest_pool)?;
        let name = format!("{}/{}", req.dest_pool, first);
        if self.mirrors.records.lock().expect("mirrors").contains_key(&name) {
            return Err(ApiError::conflict(format!("mirror {name} exists"), "see `strata mirror show`"));
        }
        for v in &volumes {
            if dst.volume_id(v).is_ok() {
                return Err(ApiError::conflict(
                    format!("{}/{v} exists", req.dest_pool),
                    "a mirror creates its target volumes: delete or rename that volume, or mirror to another pool",
                ));
            }
        }
        let mut created: Vec<String> = Vec::new();
        for v in &volumes {
            let opts = transfer::target_options(&src.volume_info(src.volume_id(v)?)?);
            if let Err(e) = dst.create_volume(v, &opts) {
                for c in &created {
                    let _ = dst.delete_volume(c);
                }
                return Err(e.into());
            }
            created.push(v.clone());
        }
        dst.commit()?;
        let rec = MirrorRecord {
            source_pool: src_pool.to_string(),
            volumes,
            dest_pool: req.dest_pool.clone(),
            state: "uninitialized".into(),
            every_seconds: req.every_seconds,
            keep,
            limit_bytes_per_second: req.limit_bytes_per_second,
            common: None,
            common_created_ns: None,
            last: None,
            pending: None,
            dest_peer: None,
            source_peer: None,
            sync: req.sync.clone(),
            source_volume_ids: Vec::new(),
            failover: None,
        };
        let sync = rec.sync.is_some();
        self.mirrors.records.lock().expect("mirrors").insert(name.clone(), rec);
        self.save_state()?;
        tracing::info!(mirror = %name, source = %req.source, sync = ?req.sync, "mirror created");
        drop(_g);
        if sync {
            // The link goes in before the first snapshot: that transfer brings it in sync.
            if let Err(e) = self.arm_sync(&name, caller) {
                self.mirrors.records.lock().expect("mirrors").remove(&name);
                self.drop_sync_journal(&req.dest_pool, first);
                for c in &created {
                    let _ = dst.delete_volume(c);
                }
                self.save_state()?;
                return Err(e);
            }
        } else {
            self.start_transfer(&name, caller)?;
        }
        self.mirror_info(&name)
    }

    pub(crate) fn list_mirrors(&self) -> Vec<MirrorInfo> {
        let names: Vec<String> = self.mirrors.records.lock().expect("mirrors").keys().cloned().collect();
        names.iter().filter_map(|n| self.mirror_info(n).ok()).collect()
    }

    pub(crate) fn mirror_info(&self, name: &str) -> Result<MirrorInfo, ApiError> {
        let r = self.mirrors.get(name)?;
        let job = self.mirrors.jobs.lock().expect("mirror jobs").get(name).cloned();
        let running = job.as_ref().is_some_and(|j| j.is_running());
        let failed = job.as_ref().and_then(|j| j.failure());
        let state = match (&failed, running) {
            (_, true) => "transferring".to_string(),
            (Some(_), false) if r.state != "broken" && r.state != "paused" => "failed".to_string(),
            _ if r.fenced() => "fenced".to_string(),
            _ => r.state.clone(),
        };
        Ok(MirrorInfo {
            name: name.to_string(),
            source_pool: r.source_pool.clone(),
            volumes: r.volumes.clone(),
            dest_pool: r.dest_pool.clone(),
            state,
            every_seconds: r.every_seconds,
            keep: r.keep,
            limit_bytes_per_second: r.limit_bytes_per_second,
            common_snapshot: r.common.clone(),
            lag_seconds: r.common_created_ns.map(|c| now_ns().saturating_sub(c) as f64 / 1e9),
            last_transfer: r.last.as_ref().map(|l| MirrorTransfer {
                snapshot: l.snapshot.clone(),
                base: l.base.clone(),
                done_bytes: l.bytes,
                total_bytes: l.bytes,
                percent: 100.0,
                bytes_per_second: if l.seconds > 0.0 { (l.bytes as f64 / l.seconds) as u64 } else { 0 },
                eta_seconds: None,
                seconds: l.seconds,
                finished_ns: Some(l.finished_ns),
                job: None,
            }),
            transfer: job.filter(|j| j.is_running()).map(|j| j.progress()),
            message: failed,
            source_peer: r.source_peer.clone(),
            dest_peer: r.dest_peer.clone(),
            sync: r.sync.as_ref().map(|mode| {
                let link = self.sync_link(name);
                let phase = link.as_ref().map(|l| l.phase());
                strata_api::MirrorSync {
                    mode: mode.clone(),
                    state: phase.as_ref().map_or("off", |p| p.label()).to_string(),
                    message: match phase {
                        Some(sync::Phase::Degraded(why)) => Some(why),
                        _ => None,
                    },
                    frames: link.as_ref().map_or(0, |l| l.acks.frames.load(std::sync::atomic::Ordering::Relaxed)),
                    bytes: link.as_ref().map_or(0, |l| l.acks.bytes.load(std::sync::atomic::Ordering::Relaxed)),
                }
            }),
            failover: self.failover_info(name, &r),
        })
    }

    /// `update`, `break`, `resync`, `reverse`, `pause`, `resume`. `reverse` (after a break):
    /// the target becomes the source and the source the target (the mirror takes the new
    /// target's name); what the old source wrote since the common snapshot is kept there as
    /// a snapshot `reverse-…`, and the next update sends only what changed on the new source.
    pub(crate) fn mirror_action(
        self: &Arc<Self>,
        name: &str,
        action: &str,
        caller: &str,
    ) -> Result<MirrorInfo, ApiError> {
        let r = self.mirrors.get(name)?;
        let running = self.mirrors.running(name);
        if action == "reverse" && r.dest_peer.is_some() {
            let new_name = self.reverse_remote(name, caller)?;
            return self.mirror_info(&new_name);
        }
        if r.fenced() {
            return Err(ApiError::conflict(
                format!("mirror {name}: {}", self.fenced_why(&r)),
                "the volumes are served where they were taken over; `strata mirror delete` here ends the mirror",
            ));
        }
        if let Some(peer) = &r.source_peer {
            if !matches!(action, "break" | "resync") {
                return Err(ApiError::conflict(
                    format!("mirror {name} comes from peer {peer}: this daemon is its target"),
                    "update, pause, resume or reverse it on the source daemon; here: break or resync",
                ));
            }
        }
        if let Some(peer) = &r.dest_peer {
            if matches!(action, "break" | "resync" | "reverse") {
                return Err(ApiError::conflict(
                    format!("mirror {name} goes to peer {peer}"),
                    "break and resync it on the target daemon (reverse it here once it is broken there)",
                ));
            }
        }
        match action {
            "update" => {
                if r.state == "broken" || r.state == "paused" {
                    return Err(ApiError::conflict(
                        format!("mirror {name} is {}", r.state),
                        if r.state == "broken" {
                            "resync it first (`strata mirror resync`)"
                        } else {
                            "resume it first"
                        },
                    ));
                }
                // A transfer running (say, one resumed) is followed by a new one.
                if !running.is_some_and(|j| j.update_requested()) {
                    self.start_transfer_with(name, true, caller)?;
                }
            }
            "pause" => {
                if r.state == "broken" {
                    return Err(ApiError::conflict(format!("mirror {name} is broken"), "resync it, or delete it"));
                }
                self.mirrors.update(name, |m| m.state = "paused".into());
                self.disarm_sync(name);
                if let Some(j) = running {
                    j.stop();
                    j.wait();
                }
                self.save_state()?;
            }
            "resume" => {
                if r.state != "paused" {
                    return Err(ApiError::conflict(
                        format!("mirror {name} is {}, not paused", r.state),
                        "nothing to resume",
                    ));
                }
                let state = if r.common.is_some() { "mirrored" } else { "uninitialized" };
                self.mirrors.update(name, |m| m.state = state.into());
                self.save_state()?;
                if r.sync.is_some() {
                    self.arm_sync_or_later(name, caller);
                } else if r.pending.is_some() {
                    self.start_transfer(name, caller)?;
                }
            }
            "break" => {
                if running.is_some() {
                    return Err(ApiError::conflict(
                        format!("mirror {name} is transferring"),
                        "pause it first (the transfer resumes after a resync), or wait for it",
                    ));
                }
                if r.common.is_none() {
                    return Err(ApiError::conflict(
                        format!("mirror {name} has transferred nothing yet"),
                        "update it first, or delete it",
                    ));
                }
                if r.state == "broken" {
                    return Err(ApiError::conflict(format!("mirror {name} is already broken"), "nothing to do"));
                }
                self.failover_before_break(name, &r)?;
                self.break_mirror(name, caller)?;
            }
            "resync" | "reverse" => {
                if r.state != "broken" {
                    return Err(ApiError::conflict(
                        format!("mirror {name} is {}, not broken", r.state),
                        "only a broken mirror is resynced or reversed",
                    ));
                }
                let reverse = action == "reverse";
                // The side that becomes (or goes back to being) the target.
                let target_pool = if reverse { r.source_pool.clone() } else { r.dest_pool.clone() };
                let _g = self.admin.lock().expect("admin");
                for v in &r.volumes {
                    if let Some(p) = self.mounted_at(&target_pool, v) {
                        return Err(ApiError::conflict(
                            format!("{target_pool}/{v} is mounted at {}", p.display()),
                            "unmount the volumes that become the target first",
                        ));
                    }
                    if self.nfs.exported(&target_pool, v).or_else(|| self.blocks.exported(&target_pool, v)).is_some() {
                        return Err(ApiError::conflict(
                            format!("{target_pool}/{v} is exported"),
                            "delete its exports (`strata export list`) first",
                        ));
                    }
                }
                let pool = self.pool(&target_pool)?;
                let common = r.common.clone().expect("a broken mirror has a common snapshot");
                // A new journal comes with the next arm (on the new target, for a reverse).
                if r.sync.is_some() {
                    self.mirrors.journals.lock().expect("sync journals").remove(name);
                    self.drop_sync_journal(&r.dest_pool, &r.volumes[0]);
                    if r.source_peer.is_none() {
                        self.drop_sync_journal(&r.source_pool, &r.volumes[0]);
                    }
                }
                let kept = keep_and_restore(&pool, &r.volumes, &common, action)?;
                // A target that took over gives the failover lease back: it is a mirror again.
                if r.failover.as_ref().is_some_and(|f| f.took_over_ns.is_some()) {
                    self.failover_delete(name, &r);
                }
                let mut recs = self.mirrors.records.lock().expect("mirrors");
                let mut m = recs.remove(name).expect("looked up above");
                if let Some(f) = m.failover.as_mut() {
                    f.took_over_ns = None;
                }
                if reverse {
                    std::mem::swap(&mut m.source_pool, &mut m.dest_pool);
                }
                m.state = "mirrored".into();
                m.pending = None;
                let new_name = m.name();
                recs.insert(new_name.clone(), m);
                drop(recs);
                self.mirrors.jobs.lock().expect("mirror jobs").remove(name);
                self.save_state()?;
                tracing::info!(mirror = %new_name, kept = ?kept, "mirror {action}d");
                self.events.record(
                    "info",
                    &format!("mirror.{action}"),
                    Some(&target_pool),
                    Some(&new_name),
                    match &kept {
                        Some(saved) => format!("{action}d from {common}; what was written since kept as {saved}"),
                        None => format!("{action}d from {common}"),
                    },
                );
                drop(_g);
                if r.sync.is_some() {
                    self.arm_sync_or_later(&new_name, caller);
                }
                return self.mirror_info(&new_name);
            }
            other => {
                return Err(ApiError::bad_request(
                    format!("mirror action {other:?}"),
                    "use update, break, resync, reverse, pause or resume",
                ))
            }
        }
        self.mirror_info(name)
    }

    /// Break mirror `name` here, on its target: the target volumes return to the common
    /// snapshot (a database started on them sees exactly the last transferred state), a
    /// synchronous mirror's journal is replayed on top, and they take clients. `caller`
    /// says who (an operator, a failover).
    pub(crate) fn break_mirror(&self, name: &str, caller: &str) -> Result<(), ApiError> {
        let r = self.mirrors.get(name)?;
        let Some(common) = r.common.clone() else {
            return Err(ApiError::conflict(
                format!("mirror {name} has transferred nothing yet"),
                "update it first, or delete it",
            ));
        };
        let dst = self.pool(&r.dest_pool)?;
        // started on them sees exactly the last transferred state.
        let list: Vec<(&str, &str)> = r.volumes.iter().map(|v| (v.as_str(), common.as_str())).collect();
        dst.restore_volumes(&list)?;
        // A synchronous mirror's target then gets every acknowledged write since.
        let arming = self.mirrors.arming.lock().expect("sync arming");
        let replayed = self.sync_replay(name, &common)?;
        self.mirrors.update(name, |m| {
            m.state = "broken".into();
            m.pending = None;
        });
        drop(arming);
        self.save_state()?;
        tracing::info!(mirror = name, snapshot = %common, replayed = ?replayed, caller, "mirror broken: target volumes writable");
        self.events.record(
            "warning",
            "mirror.break",
            Some(&r.dest_pool),
            Some(name),
            match &replayed {
                Some(what) => format!("broken: the target volumes are writable, at {common}; {what}"),
                None => format!("broken: the target volumes are writable, at {common}"),
            },
        );
        Ok(())
    }

    pub(crate) fn delete_mirror(&self, name: &str) -> Result<(), ApiError> {
        self.mirrors.get(name)?;
        if self.mirrors.running(name).is_some() {
            return Err(ApiError::conflict(format!("mirror {name} is transferring"), "pause it first"));
        }
        let _g = self.admin.lock().expect("admin");
        self.disarm_sync(name);
        let removed = self.mirrors.records.lock().expect("mirrors").remove(name);
        if let Some(r) = &removed {
            self.failover_delete(name, r);
        }
        if let Some(r) = removed.as_ref().filter(|r| r.sync.is_some() && r.dest_peer.is_none()) {
            self.mirrors.journals.lock().expect("sync journals").remove(name);
            self.drop_sync_journal(&r.dest_pool, &r.volumes[0]);
        }
        self.mirrors.jobs.lock().expect("mirror jobs").remove(name);
        if let Some(r) = &removed {
            self.delete_remote_target(r);
        }
        self.save_state()?;
        tracing::info!(mirror = name, "mirror deleted: its target volumes and snapshots stay, writable");
        Ok(())
    }

    /// The mirror whose (unbroken) target `pool/vol` is.
    pub(crate) fn mirror_of_target(&self, pool: &str, vol: &str) -> Option<String> {
        self.mirrors
            .records
            .lock()
            .expect("mirrors")
            .iter()
            .find(|(_, r)| {
                r.state != "broken"
                    && r.dest_peer.is_none()
                    && r.dest_pool == pool
                    && (r.volumes.iter().any(|v| v == vol)
                        || r.sync.is_some() && vol == sync::journal_volume(&r.volumes[0]))
            })
            .map(|(n, _)| n.clone())
    }

    /// Refuse `what` (a mount, an export, a delete, a restore) on a mirror's target volume.
    pub(crate) fn refuse_mirror_target(&self, pool: &str, vol: &str, what: &str) -> Result<(), ApiError> {
        match self.mirror_of_target(pool, vol) {
            Some(m) => Err(ApiError::conflict(
                format!("{pool}/{vol} is the target of mirror {m}: {what} refused"),
                "clone one of its snapshots, or break the mirror (`strata mirror break`)",
            )),
            None => Ok(()),
        }
    }

    /// Refuse deleting a volume that is the source of a mirror, or a snapshot that is a
    /// mirror's common snapshot (on either side).
    pub(crate) fn refuse_mirror_source(&self, pool: &str, vol: &str, snapshot: Option<&str>) -> Result<(), ApiError> {
        let m = self.mirrors.records.lock().expect("mirrors");
        for (name, r) in m.iter() {
            if !r.volumes.iter().any(|v| v == vol) {
                continue;
            }
            let here_source = r.source_peer.is_none() && r.source_pool == pool;
            let here_target = r.dest_peer.is_none() && r.dest_pool == pool;
            let side = here_source || here_target;
            match snapshot {
                None if here_source => {
                    return Err(ApiError::conflict(
                        format!("{pool}/{vol} is mirrored by {name}"),
                        "delete the mirror first (`strata mirror delete`)",
                    ))
                }
                Some(s)
                    if side
                        && (r.common.as_deref() == Some(s) || r.pending.as_ref().is_some_and(|p| p.snapshot == s)) =>
                {
                    return Err(ApiError::conflict(
                        format!(
                            "{pool}/{vol}@{s} is the common snapshot of mirror {name}: the next update sends from it"
                        ),
                        "delete the mirror first, or let its retention remove the snapshot",
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Every second: start the transfers a schedule makes due, and resume those a restart
    /// cut (not paused, not broken).
    pub(crate) fn mirror_loop(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        while !self.stopping.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_secs(1));
            self.sync_watch();
            let now = now_ns();
            for r in self.mirrors.records() {
                let name = r.name();
                // The source daemon drives a mirror from a peer: never a transfer here.
                if r.state == "broken"
                    || r.state == "paused"
                    || r.fenced()
                    || r.source_peer.is_some()
                    || self.mirrors.jobs.lock().expect("mirror jobs").contains_key(&name)
                        && self.mirrors.running(&name).is_some()
                {
                    continue;
                }
                let unavailable = self.unavailable.lock().expect("unavailable");
                if unavailable.contains_key(&r.source_pool) || unavailable.contains_key(&r.dest_pool) {
                    continue;
                }
                drop(unavailable);
                let resume = r.pending.is_some() && !self.mirrors.jobs.lock().expect("mirror jobs").contains_key(&name);
                let due = r.every_seconds.is_some_and(|every| {
                    r.last
                        .as_ref()
                        .is_none_or(|l| now.saturating_sub(l.finished_ns) >= every.saturating_mul(1_000_000_000))
                });
                if resume || due {
                    let caller = if resume { "resume after a restart" } else { "mirror schedule" };
                    if let Err(e) = self.start_transfer(&name, caller) {
                        tracing::warn!(mirror = %name, "mirror transfer not started: {}", e.message);
                    }
                }
            }
        }
    }
}
