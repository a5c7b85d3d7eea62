//! Syncs: making operations durable through the intent log (intent_log.rs) — the whole
//! pool (`sync_log`) or one object (`sync_object`), with group commit, large writes by
//! reference (intent_log_ref.rs), and a commit instead when the log is full.

use crate::catalog::volume::ObjectId;
use crate::error::{Error, Result};
use crate::pool::{Pool, PoolInner, VolumeId};
use crate::txg::intent_log::SyncTarget;

impl Pool {
    /// Make every operation so far durable (`sync` of the whole pool): one intent-log write
    /// and a flush, of the log device if the pool has one.
    pub fn sync_log(&self) -> Result<()> {
        self.sync_target(SyncTarget::All)
    }

    /// Make one object durable (fsync of a file, NFS COMMIT): its operations so far, and
    /// every operation not private to one object (creates, deletes, key-value changes —
    /// a file's name and existence). Other objects' writes stay in memory until their own
    /// sync or the next commit (intent_log.rs, `Scope`).
    pub fn sync_object(&self, vol: VolumeId, obj: ObjectId) -> Result<()> {
        self.sync_target(SyncTarget::Object { vol: vol.0, obj: obj.0 })
    }

    /// The local sync, then the wait for a synchronous mirror that holds the target's
    /// operations (sync_tap.rs): only frames pushed before the sync began are waited for.
    /// A gated pool (sync_gate.rs) asks its gate before and after: no sync is acknowledged
    /// once the gate has closed.
    fn sync_target(&self, target: SyncTarget) -> Result<()> {
        let vol = match target {
            SyncTarget::All => None,
            SyncTarget::Object { vol, .. } => Some(vol),
        };
        let (tap, gate) = {
            let p = self.lock();
            (p.tap_wait_point(vol), p.gate.clone())
        };
        Pool::check_gate(&gate, vol)?;
        Pool::prepare_tap(&tap);
        self.sync_local(target)?;
        self.wait_for_tap(tap)?;
        Pool::check_gate(&gate, vol)
    }

    /// Waits for a block in flight, then writes what the sync needs (and what syncers of
    /// the same target recorded meanwhile: group commit) as one block and flushes, outside
    /// the lock.
    fn sync_local(&self, target: SyncTarget) -> Result<()> {
        let mut p = self.lock();
        p.writable()?;
        p.ilog.end_group();
        let want = p.ilog.appended;
        // Large writes go by reference (intent_log_ref.rs): prepared once, without the lock.
        let mut prepared = None;
        loop {
            if let Some(why) = &p.health.latched {
                return Err(Error::ReadOnly(format!("{why}; reopen the pool once the device is healthy")));
            }
            if !p.ilog.needs(target, want) {
                return Ok(());
            }
            if p.ilog.in_flight {
                p = self.wait_log_done(p);
                continue;
            }
            if p.catalog.dirty || !p.ilog.fits(target) {
                if !p.catalog.dirty {
                    p.ilog.full_commits += 1;
                }
                // A commit also makes everything recorded durable. Through `Pool::commit`,
                // so that its data is written without the lock held (prewrite.rs).
                drop(p);
                self.commit()?;
                p = self.lock();
                continue;
            }
            if prepared.is_none() {
                let cands = crate::pool::log_ref::candidates(&mut p, target);
                if !cands.is_empty() {
                    let algo = p.io.checksum_algo();
                    drop(p);
                    prepared = Some(crate::pool::log_ref::prepare(cands, algo));
                    p = self.lock();
                    continue; // the log may have moved on meanwhile: check again
                }
                prepared = Some(Vec::new());
            }
            let (refs, batch) = crate::pool::log_ref::place(&mut p, prepared.take().unwrap_or_default());
            let guid = p.label.pool_guid;
            // The device the log is on: the pool's own, or the separate log device — only
            // that one is written and flushed (and the pool's, if referenced blocks went
            // there).
            let dev = p.ilog.place().dev.clone();
            let separate = p.ilog.place().is_separate();
            let pool_dev = p.dev.clone();
            let PoolInner { ilog, io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
            let taken = ilog.take_block(guid, target, &refs, &mut |vol, obj, offset, buf| {
                read_now(volumes, io, vol, obj, offset, buf)
            });
            // On failure nothing was taken; blocks placed for references are the commit's
            // to complete or free.
            let (block, at) = taken?;
            drop(p);
            let before = self.failpoints.hit(crate::failpoint::LOG_WRITE_UNLOCKED).and_then(|()| match &batch {
                Some(b) => b.complete(pool_dev.as_ref()).and_then(|()| {
                    if separate {
                        pool_dev.flush().map_err(|e| Error::io("flush referenced log data", e))
                    } else {
                        Ok(())
                    }
                }),
                None => Ok(()),
            });
            let r = before.and_then(|()| match dev.write_durable(&block, at) {
                Ok(()) => Ok(()),
                // The separate log device failed: the pool goes on without it, the syncs of
                // this block made durable by a commit instead (log_device.rs). The block
                // stays in flight until then, so no syncer takes its groups as written.
                Err(e) if separate => self.fail_over_log(Error::io("write intent log", e)),
                Err(e) => Err(Error::io("write intent log", e)),
            });
            p = self.lock();
            p.ilog.written();
            if let Err(e) = r {
                if p.health.latched.is_none() {
                    p.health.latched = Some(format!("intent log write failed: {e}"));
                }
                self.log_done.notify_all();
                return Err(e);
            }
            self.log_done.notify_all();
        }
    }
}

/// A deferred write's range as the volume holds it now, for the log block being formed;
/// zeros where the object (or the volume) no longer is.
fn read_now(
    volumes: &mut std::collections::BTreeMap<VolumeId, crate::catalog::volume::VolumeState>,
    io: &crate::pipeline::BlockIo,
    vol: u64,
    obj: u64,
    offset: u64,
    buf: &mut [u8],
) -> Result<()> {
    let Some(v) = volumes.get_mut(&VolumeId(vol)) else { return Ok(()) };
    match v.read_into(io, ObjectId(obj), offset, buf) {
        Err(e) if e.kind() == crate::error::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}
