//! One mirror transfer, on its own thread: the group snapshot, a send/receive per volume
//! (resumed from the receiver's last committed frame), then the new common snapshot and
//! the retention of transferred snapshots on both sides.
//!
//! The state file is rewritten when the transfer starts (its snapshot), at each receiver
//! checkpoint (every 1/128 of the volume's stream, 4 to 64 MiB of data: `checkpoint_for`),
//! when a volume
//! is done and at the end. A restart
//! in between finds `pending` and resumes (mirror_loop). A checkpoint is recorded only after
//! the receiver's commit returned, so the recorded frame is always durable on the target.

use super::{now_ns, LastTransfer, PendingTransfer, SNAPSHOT_PREFIX};
use crate::service::jobs::{Job, JobSpec};
use crate::service::{ApiError, Daemon};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;
use strata_api::MirrorTransfer;
use strata_engine::repl::{Applied, Receiver, SendOptions, SendRecord};
use strata_engine::{ErrorKind, Pool, VolumeOptions};

pub(crate) struct TransferJob {
    started: Instant,
    snapshot: Mutex<Option<(String, Option<String>)>>,
    /// Its job resource (jobs.rs): the bytes sent and to send are counted there; its
    /// cancel stops the transfer as a pause does (it resumes from its checkpoint).
    job: Arc<Job>,
    stop: AtomicBool,
    /// `mirror update` asked while this transfer ran: transfer again when it is done.
    again: AtomicBool,
    /// None while running; then Ok or the failure.
    ended: Mutex<Option<Result<(), String>>>,
    ended_cv: Condvar,
}

impl TransferJob {
    fn new(job: Arc<Job>) -> TransferJob {
        TransferJob {
            started: Instant::now(),
            snapshot: Mutex::new(None),
            job,
            stop: AtomicBool::new(false),
            again: AtomicBool::new(false),
            ended: Mutex::new(None),
            ended_cv: Condvar::new(),
        }
    }

    /// Ask a running transfer to be followed by a new one; false if it has ended already.
    pub(crate) fn update_requested(&self) -> bool {
        let ended = self.ended.lock().expect("mirror job");
        if ended.is_some() {
            return false;
        }
        self.again.store(true, Ordering::Relaxed);
        true
    }

    pub(crate) fn is_running(&self) -> bool {
        self.ended.lock().expect("mirror job").is_none()
    }

    /// Why the transfer failed (not for a pause).
    pub(crate) fn failure(&self) -> Option<String> {
        self.ended.lock().expect("mirror job").as_ref().and_then(|r| r.clone().err())
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Asked to stop (a pause, or a cancel of its job).
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.job.cancelled()
    }

    pub(crate) fn add_bytes(&self, n: u64) {
        self.job.add(n);
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.job.done.load(Ordering::Relaxed)
    }

    pub(crate) fn seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    pub(crate) fn wait(&self) {
        let mut e = self.ended.lock().expect("mirror job");
        while e.is_none() {
            e = self.ended_cv.wait(e).expect("mirror job");
        }
    }

    pub(crate) fn progress(&self) -> MirrorTransfer {
        let done = self.bytes();
        let total = self.job.total.load(Ordering::Relaxed).max(done);
        let seconds = self.started.elapsed().as_secs_f64();
        let rate = if seconds > 0.0 { done as f64 / seconds } else { 0.0 };
        let (snapshot, base) = self.snapshot.lock().expect("mirror job").clone().unwrap_or_default();
        MirrorTransfer {
            snapshot,
            base,
            done_bytes: done,
            total_bytes: total,
            percent: if total > 0 { (done as f64 * 1000.0 / total as f64).round() / 10.0 } else { 0.0 },
            bytes_per_second: rate as u64,
            eta_seconds: (rate > 0.0).then(|| total.saturating_sub(done) as f64 / rate),
            seconds,
            finished_ns: None,
            job: Some(self.job.id),
        }
    }
}

impl Daemon {
    /// Start a transfer of mirror `name` on a thread of its own: the transfer in progress
    /// if there is one (cut by a restart, a pause, a failure), else a new one. With
    /// `bring_up_to_date` (`mirror update`), a resumed transfer is followed by a new one, so
    /// that the target ends up with the source as it is when asked, not as it was when the
    /// cut transfer began.
    pub(crate) fn start_transfer(self: &Arc<Self>, name: &str, caller: &str) -> Result<(), ApiError> {
        self.start_transfer_with(name, false, caller)
    }

    pub(crate) fn start_transfer_with(
        self: &Arc<Self>,
        name: &str,
        bring_up_to_date: bool,
        caller: &str,
    ) -> Result<(), ApiError> {
        let rec = self.mirrors.get(name)?;
        if let Some(peer) = &rec.source_peer {
            return Err(ApiError::conflict(
                format!("mirror {name} comes from peer {peer}: this daemon is its target"),
                "transfers run on the source daemon",
            ));
        }
        let job = {
            let mut jobs = self.mirrors.jobs.lock().expect("mirror jobs");
            if jobs.get(name).is_some_and(|j| j.is_running()) {
                return Ok(());
            }
            let source = rec.source_pool;
            let spec =
                JobSpec { kind: "mirror.transfer", pool: &source, target: Some(name), caller, cancellable: true };
            let job = Arc::new(TransferJob::new(self.jobs.start(spec)));
            jobs.insert(name.to_string(), job.clone());
            job
        };
        let (d, n) = (self.clone(), name.to_string());
        let spawned = std::thread::Builder::new().name("mirror".into()).spawn(move || {
            // Run again while asked to bring the target up to date (see `bring_up_to_date`
            // and `update_requested`): decided under the `ended` lock, so a request made
            // while this transfer ends is never lost.
            let mut bring = bring_up_to_date;
            let (r, mut ended) = loop {
                let r = d.run_transfer(&n, &job);
                let ended = job.ended.lock().expect("mirror job");
                let again = job.again.swap(false, Ordering::Relaxed);
                match r {
                    Ok(resumed) if (resumed && bring) || again => {
                        bring = again || bring;
                        drop(ended);
                    }
                    r => break (r.map(|_| ()), ended),
                }
            };
            let pool = d.mirrors.records.lock().expect("mirrors").get(&n).map(|r| r.source_pool.clone());
            match &r {
                Ok(()) => {
                    let p = job.progress();
                    d.events.record(
                        "info",
                        "mirror.transfer",
                        pool.as_deref(),
                        Some(&n),
                        format!("transferred {} ({} bytes in {:.1} s)", p.snapshot, p.done_bytes, p.seconds),
                    );
                }
                Err(e) if job.stopping() => {
                    tracing::info!(mirror = %n, "mirror transfer paused: {}", e.message)
                }
                Err(e) => {
                    tracing::warn!(mirror = %n, "mirror transfer failed: {} ({})", e.message, e.hint);
                    if e.kind == strata_api::ErrorKind::NoSpace {
                        // The target cannot hold this snapshot: resuming it would fail again.
                        // Abandon it (the target goes back to its base at the next start), so
                        // the next update snapshots the source as it is then.
                        if let Ok(rec) = d.mirrors.get(&n) {
                            if let (Some(p), Ok(src)) = (rec.pending.clone(), d.pool(&rec.source_pool)) {
                                d.abandon_pending(&n, &src, &rec, &p);
                            }
                        }
                    }
                    d.events.record(
                        "warning",
                        "mirror.failed",
                        pool.as_deref(),
                        Some(&n),
                        format!("{} ({})", e.message, e.hint),
                    );
                }
            }
            let paused = job.stopping();
            let progress = serde_json::to_value(job.progress()).expect("progress serialises");
            d.jobs.end(
                &job.job,
                match &r {
                    Ok(()) => Ok(progress),
                    Err(_) if paused => {
                        job.job.request_cancel();
                        Ok(progress)
                    }
                    Err(e) => Err(e.clone()),
                },
            );
            *ended = Some(match r {
                Err(e) if !paused => Err(format!("{} ({})", e.message, e.hint)),
                _ => Ok(()),
            });
            drop(ended);
            job.ended_cv.notify_all();
        });
        spawned.map(|_| ()).map_err(|e| ApiError::internal(format!("start a mirror transfer: {e}")))
    }

    /// One transfer; returns whether it was one in progress, resumed.
    fn run_transfer(&self, name: &str, job: &TransferJob) -> Result<bool, ApiError> {
        let rec = self.mirrors.get(name)?;
        let src = self.pool(&rec.source_pool)?;
        // A remote mirror's target pool is on the peer.
        let dst = match rec.dest_peer {
            None => Some(self.pool(&rec.dest_pool)?),
            Some(_) => None,
        };
        let resumed = rec.pending.is_some();
        let pending = match rec.pending.clone() {
            Some(p) => {
                tracing::info!(
                    mirror = name,
                    snapshot = %p.snapshot,
                    done = ?p.done,
                    committed = ?p.committed,
                    "resuming a mirror transfer"
                );
                p
            }
            None => {
                let vols: Vec<&str> = rec.volumes.iter().map(String::as_str).collect();
                let mut snap = format!("{SNAPSHOT_PREFIX}{}", crate::utc_compact(now_ns() / 1_000_000_000));
                if src.snapshot(vols[0], &snap).is_ok() {
                    snap = format!("{snap}-{}", now_ns() % 1_000_000);
                }
                let taken = src.create_snapshots(&vols, &snap)?;
                // A synchronous mirror's journal learns the snapshot's txg first: a break
                // after it lands replays only the frames it does not hold.
                if let Some(t) = taken.first() {
                    self.sync_note_snapshot(name, &snap, t.txg)?;
                }
                let p = PendingTransfer {
                    snapshot: snap,
                    base: rec.common.clone(),
                    created_ns: taken.first().map_or(0, |s| s.created_ns),
                    done: Vec::new(),
                    committed: Default::default(),
                };
                self.mirrors.update(name, |m| m.pending = Some(p.clone()));
                self.save_state()?;
                p
            }
        };
        *job.snapshot.lock().expect("mirror job") = Some((pending.snapshot.clone(), pending.base.clone()));
        let todo: Vec<String> = rec.volumes.iter().filter(|v| !pending.done.contains(v)).cloned().collect();
        let mut total = 0;
        for v in &todo {
            let opts = SendOptions {
                volume: v.clone(),
                base: pending.base.clone(),
                snapshot: pending.snapshot.clone(),
                resume_after: 0,
            };
            total += src.send_header(&opts)?.estimate_bytes;
        }
        // Counted across the transfers of one job (a resumed one and the one after it).
        job.job.set_total(job.bytes() + total);
        let started = Instant::now();
        match &dst {
            None => self.run_remote_transfer(name, &rec, job, &src, &pending, &todo)?,
            Some(dst) => {
                for v in &todo {
                    let committed = pending.committed.get(v).copied().unwrap_or(0);
                    self.transfer_volume(name, job, &src, dst, v, &pending, committed, rec.limit_bytes_per_second)?;
                    self.mirrors.update(name, |m| {
                        if let Some(p) = m.pending.as_mut() {
                            p.done.push(v.clone());
                            p.committed.remove(v);
                        }
                    });
                    self.save_state()?;
                }
            }
        }
        let bytes = job.bytes();
        self.mirrors.update(name, |m| {
            m.common = Some(pending.snapshot.clone());
            m.common_created_ns = Some(pending.created_ns);
            if m.state == "uninitialized" {
                m.state = "mirrored".into();
            }
            m.last = Some(LastTransfer {
                snapshot: pending.snapshot.clone(),
                base: pending.base.clone(),
                bytes,
                seconds: started.elapsed().as_secs_f64(),
                finished_ns: now_ns(),
            });
            m.pending = None;
        });
        self.save_state()?;
        tracing::info!(
            mirror = name,
            snapshot = %pending.snapshot,
            base = ?pending.base,
            bytes,
            seconds = started.elapsed().as_secs_f64(),
            "mirror transfer done"
        );
        if let Ok(s) = src.snapshot(&rec.volumes[0], &pending.snapshot) {
            self.sync_transferred(name, s.txg)?;
        }
        let rec = self.mirrors.get(name)?;
        let mut sides = vec![(&src, "source")];
        if let Some(d) = &dst {
            sides.push((d, "target"));
        }
        for (pool, which) in sides {
            for v in &rec.volumes {
                if let Err(e) = prune(pool, v, rec.keep, &pending.snapshot) {
                    tracing::warn!(mirror = name, side = which, volume = %v, "pruning transferred snapshots: {e}");
                }
            }
        }
        Ok(resumed)
    }

    #[allow(clippy::too_many_arguments)]
    fn transfer_volume(
        &self,
        name: &str,
        job: &TransferJob,
        src: &Arc<Pool>,
        dst: &Arc<Pool>,
        vol: &str,
        pending: &PendingTransfer,
        committed: u64,
        limit: Option<u64>,
    ) -> Result<(), ApiError> {
        if pending.base.is_none() && committed == 0 {
            empty_volume(dst, vol)?;
        }
        let opts = SendOptions {
            volume: vol.to_string(),
            base: pending.base.clone(),
            snapshot: pending.snapshot.clone(),
            resume_after: committed,
        };
        let mut rx: Option<Receiver<'_>> = None;
        let mut pace = Pace::new(limit);
        src.send(&opts, &mut |index, rec| {
            if job.stopping() || self.stopping.load(Ordering::Relaxed) {
                return Err(strata_engine::Error::Busy(
                    "the transfer was paused (it resumes from its checkpoint)".into(),
                ));
            }
            if let SendRecord::Begin(h) = rec {
                rx = Some(dst.receive_begin(vol, h, committed)?);
                return Ok(());
            }
            let r = rx.as_mut().expect("the begin frame comes first");
            if let SendRecord::Data { data, .. } = rec {
                job.add_bytes(data.len() as u64);
                pace.sent(data.len() as u64);
            }
            if let Applied::Checkpoint(at) = r.apply(index, rec)? {
                self.mirrors.update(name, |m| {
                    if let Some(p) = m.pending.as_mut() {
                        p.committed.insert(vol.to_string(), at);
                    }
                });
                if let Err(e) = self.save_state() {
                    tracing::warn!(mirror = name, "recording a transfer checkpoint: {}", e.message);
                }
            }
            Ok(())
        })
        .map_err(|e| {
            let mut a = ApiError::from(e);
            a.message = format!("mirror {name}, volume {vol}: {}", a.message);
            a
        })?;
        Ok(())
    }
}

/// The settings of a target volume made after `info`'s volume: the same record size, size
/// limit, sync policy, compression and dedup; no reservation (the target pool decides).
pub(crate) fn target_options(info: &strata_engine::VolumeInfo) -> VolumeOptions {
    VolumeOptions {
        record_size: info.record_size,
        quota_bytes: info.quota_bytes,
        sync: info.sync,
        compression: info.space.compression,
        reservation_bytes: 0,
        dedup: info.space.dedup,
    }
}

/// A full transfer starts over into an empty volume: one a cut transfer left data in is
/// made again, with the same settings.
pub(crate) fn empty_volume(dst: &Pool, vol: &str) -> Result<(), ApiError> {
    let empty = dst.volume_id(vol).and_then(|id| Ok(dst.list_objects(id, None, 1)?.is_empty()))?;
    if !empty {
        let opts = target_options(&dst.volume_info(dst.volume_id(vol)?)?);
        dst.delete_volume(vol)?;
        dst.create_volume(vol, &opts)?;
    }
    Ok(())
}

/// A bandwidth limit: after each record, sleep until the bytes sent since the start of the
/// volume's transfer fit the rate. Measured from the start (not per window), so it holds on
/// average over the transfer, which is what the limit promises (within a record's time).
pub(crate) struct Pace {
    limit: Option<u64>,
    start: Instant,
    bytes: u64,
}

impl Pace {
    pub(crate) fn new(limit: Option<u64>) -> Pace {
        Pace { limit, start: Instant::now(), bytes: 0 }
    }

    pub(crate) fn sent(&mut self, n: u64) {
        let Some(rate) = self.limit else { return };
        self.bytes += n;
        let due = std::time::Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(self.start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

/// Delete transferred snapshots of `vol` beyond the newest `keep` (never `common`).
pub(crate) fn prune(pool: &Pool, vol: &str, keep: u32, common: &str) -> Result<(), strata_engine::Error> {
    let mut snaps: Vec<_> =
        pool.snapshots(Some(vol))?.into_iter().filter(|s| s.name.starts_with(SNAPSHOT_PREFIX)).collect();
    snaps.sort_by_key(|s| s.txg);
    let excess = snaps.len().saturating_sub(keep as usize);
    for s in snaps.iter().take(excess).filter(|s| s.name != common) {
        match pool.delete_snapshot(vol, &s.name) {
            Ok(()) => {}
            // A clone depends on it, or history forks there: kept, and said so.
            Err(e) if e.kind() == ErrorKind::Busy => tracing::info!(volume = vol, snapshot = %s.name, "kept: {e}"),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
