//! `PoolGuard`: the pool's lock, held, with the operations on volumes and objects that run
//! under it, grouped so that no commit can fall between them (it was called `Txn`, but it
//! is a lock guard, not a transaction: nothing is rolled back). Every public object and
//! key-value operation of [`Pool`] is a one-operation guard; the file system groups several
//! (a rename touches two directories and an inode) so that a crash finds all of it or none
//! of it.
//!
//! Nothing under a `PoolGuard` commits: a NoSpace is returned as is (the caller drops the
//! guard, calls [`Pool::commit_for_space`] and retries the whole group), and the dirty-data
//! limit is enforced by [`Pool::with_space_retry`] when the group ends.
//!
//! [`Pool`]: crate::Pool
//! [`Pool::commit_for_space`]: crate::Pool::commit_for_space
//! [`Pool::with_space_retry`]: crate::Pool::with_space_retry

use crate::alloc::Allocator;
use crate::catalog::volume::{ObjectId, ReadPlan, VolumeState};
use crate::error::{Error, Result};
use crate::format::intent::LogRecord;
use crate::format::{BlockPtr, UNIT_SIZE};
use crate::pipeline::BlockIo;
use crate::pool::{PoolInner, SyncPolicy, VolumeId};
use crate::sync::MutexGuard;

pub struct PoolGuard<'a> {
    p: MutexGuard<'a, PoolInner>,
}

/// Space figures a file system reports (statfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceInfo {
    pub pool_size_bytes: u64,
    /// Free in the pool now: not allocated and not reserved by dirty data (frees held back
    /// for a txg or two count as free).
    pub pool_free_bytes: u64,
    pub volume_used_bytes: u64,
    /// The volume's size limit, 0 = none.
    pub volume_quota_bytes: u64,
}

impl Drop for PoolGuard<'_> {
    fn drop(&mut self) {
        // The operations of this PoolGuard form one group of the intent log.
        self.p.ilog.end_group();
        self.p.tap_end_frame();
    }
}

impl<'a> PoolGuard<'a> {
    pub(crate) fn new(p: MutexGuard<'a, PoolInner>) -> PoolGuard<'a> {
        PoolGuard { p }
    }

    fn log(&mut self, r: LogRecord) {
        self.p.ilog.record(&r);
        self.p.tap_record(&r);
    }

    pub(crate) fn inner(&mut self) -> &mut PoolInner {
        &mut self.p
    }

    /// Changes other than data writes and attributes wait for a commit in flight
    /// (quiesce.rs). Only a [`Pool::txn_data`] can meet one: any other `PoolGuard` took the lock
    /// after it had synced, and no commit freezes while a `PoolGuard` holds the lock.
    ///
    /// [`Pool::txn_data`]: crate::Pool::txn_data
    pub(super) fn settled(&self) -> Result<()> {
        if self.p.txg.quiescing {
            return Err(Error::CommitInFlight);
        }
        Ok(())
    }

    pub(super) fn vol_mut(
        &mut self,
        vol: VolumeId,
        write: bool,
    ) -> Result<(&mut VolumeState, &BlockIo, &mut Allocator)> {
        if write {
            self.p.writable()?;
        }
        let PoolInner { io, alloc, catalog: crate::catalog::Catalog { volumes, views, .. }, .. } = &mut *self.p;
        if let Some(view) = views.get_mut(&vol) {
            if write {
                return Err(Error::ReadOnly(format!("snapshot {} is read-only", view.record.name)));
            }
            return Ok((view, io, alloc));
        }
        let held = if write && volumes.values().any(|v| v.record.reservation_bytes > 0) {
            crate::pool::space::held_for_others(volumes, vol)
        } else {
            0
        };
        let v = volumes.get_mut(&vol).ok_or_else(|| Error::NotFound(format!("volume id {}", vol.0)))?;
        v.record.held_for_others_units = held;
        Ok((v, io, alloc))
    }

    /// Commit everything dirty now (fsync without an intent log).
    pub fn commit(&mut self) -> Result<u64> {
        self.settled()?;
        self.p.commit()
    }

    pub fn space(&mut self, vol: VolumeId) -> Result<SpaceInfo> {
        let size = self.p.alloc.geometry().total_units() * UNIT_SIZE;
        // Dirty data counts as used (it is reserved); frees held back for a txg or two
        // count as free (they are, within seconds, and writers wait for them).
        let used = (self.p.alloc.allocated_units() + self.p.alloc.reserved_units()) * UNIT_SIZE;
        // Other volumes' unused reservations are not free for this one (space.rs).
        let held = crate::pool::space::held_for_others(&self.p.catalog.volumes, vol) * UNIT_SIZE;
        let free = size.saturating_sub(used).saturating_sub(held);
        let (v, _, _) = self.vol_mut(vol, false)?;
        Ok(SpaceInfo {
            pool_size_bytes: size,
            pool_free_bytes: free,
            volume_used_bytes: v.record.phys.used_sectors * crate::format::SECTOR_SIZE
                + v.dirty.reserved_units() * UNIT_SIZE,
            volume_quota_bytes: v.record.phys.quota_bytes,
        })
    }

    pub fn set_quota(&mut self, vol: VolumeId, quota_bytes: u64) -> Result<()> {
        self.settled()?;
        let (v, _, _) = self.vol_mut(vol, true)?;
        v.record.phys.quota_bytes = quota_bytes;
        v.dirty.changed = true;
        // Not a logged operation: the next sync commits.
        self.p.catalog.dirty = true;
        Ok(())
    }

    pub fn set_sync_policy(&mut self, vol: VolumeId, sync: SyncPolicy) -> Result<()> {
        self.settled()?;
        let (v, _, _) = self.vol_mut(vol, true)?;
        v.record.phys.sync_policy = sync.as_u8();
        v.dirty.changed = true;
        self.p.catalog.dirty = true;
        Ok(())
    }

    pub fn sync_policy(&mut self, vol: VolumeId) -> Result<SyncPolicy> {
        let (v, _, _) = self.vol_mut(vol, false)?;
        Ok(SyncPolicy::from_u8(v.record.phys.sync_policy))
    }

    pub fn create_object(&mut self, vol: VolumeId, attr: &[u8]) -> Result<ObjectId> {
        self.settled()?;
        let (v, _, _) = self.vol_mut(vol, true)?;
        let obj = v.create_object(attr)?;
        self.log(LogRecord::CreateObject { vol: vol.0, obj: obj.0, attr: attr.to_vec() });
        Ok(obj)
    }

    /// Create object `obj` (a sync mirror's journal replayed: repl/journal.rs); refused if
    /// it exists.
    pub fn create_object_at(&mut self, vol: VolumeId, obj: ObjectId, attr: &[u8]) -> Result<()> {
        self.settled()?;
        let (v, io, _) = self.vol_mut(vol, true)?;
        v.create_object_at(io, obj, attr)?;
        self.log(LogRecord::CreateObject { vol: vol.0, obj: obj.0, attr: attr.to_vec() });
        Ok(())
    }

    pub fn delete_object(&mut self, vol: VolumeId, obj: ObjectId) -> Result<()> {
        self.settled()?;
        let (v, io, _) = self.vol_mut(vol, true)?;
        v.delete_object(io, obj)?;
        self.log(LogRecord::DeleteObject { vol: vol.0, obj: obj.0 });
        Ok(())
    }

    pub fn object_exists(&mut self, vol: VolumeId, obj: ObjectId) -> Result<bool> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.exists(io, obj)
    }

    pub fn object_size(&mut self, vol: VolumeId, obj: ObjectId) -> Result<u64> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.object_size(io, obj)
    }

    /// Bytes the object's records occupy on disk, estimated from its block tree: used for
    /// `st_blocks`. Counts records as whole units (not exact for partly-written records).
    pub fn object_allocated_bytes(&mut self, vol: VolumeId, obj: ObjectId) -> Result<u64> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.allocated_bytes(io, obj)
    }

    pub fn get_attr(&mut self, vol: VolumeId, obj: ObjectId) -> Result<Vec<u8>> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.get_attr(io, obj)
    }

    pub fn set_attr(&mut self, vol: VolumeId, obj: ObjectId, attr: &[u8]) -> Result<()> {
        let (v, io, _) = self.vol_mut(vol, true)?;
        v.set_attr(io, obj, attr)?;
        self.log(LogRecord::SetAttr { vol: vol.0, obj: obj.0, attr: attr.to_vec() });
        Ok(())
    }

    pub fn list_objects(&mut self, vol: VolumeId, after: Option<ObjectId>, limit: usize) -> Result<Vec<ObjectId>> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.objset.list_objects(io, after, limit)
    }

    pub fn write(&mut self, vol: VolumeId, obj: ObjectId, offset: u64, data: &[u8]) -> Result<()> {
        let (v, io, alloc) = self.vol_mut(vol, true)?;
        v.write(io, alloc, obj, offset, data)?;
        self.p.ilog.record_write(vol.0, obj.0, offset, data.len());
        self.p.tap_write(vol.0, obj.0, offset, data);
        Ok(())
    }

    pub fn read(&mut self, vol: VolumeId, obj: ObjectId, offset: u64, len: usize) -> Result<Vec<u8>> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.read(io, obj, offset, len)
    }

    pub fn plan_read(&mut self, vol: VolumeId, obj: ObjectId, offset: u64, len: usize) -> Result<ReadPlan> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.plan_read(io, obj, offset, len)
    }

    pub fn truncate(&mut self, vol: VolumeId, obj: ObjectId, size: u64) -> Result<()> {
        self.settled()?;
        let (v, io, alloc) = self.vol_mut(vol, true)?;
        v.truncate(io, alloc, obj, size)?;
        self.log(LogRecord::Truncate { vol: vol.0, obj: obj.0, size });
        Ok(())
    }

    pub fn punch_hole(&mut self, vol: VolumeId, obj: ObjectId, offset: u64, len: u64) -> Result<()> {
        self.settled()?;
        let (v, io, alloc) = self.vol_mut(vol, true)?;
        v.punch_hole(io, alloc, obj, offset, len)?;
        self.log(LogRecord::Punch { vol: vol.0, obj: obj.0, offset, len });
        Ok(())
    }

    pub fn object_block_root(&mut self, vol: VolumeId, obj: ObjectId) -> Result<(BlockPtr, u8)> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.block_root(io, obj)
    }

    pub fn kv_get(&mut self, vol: VolumeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.objset.kv_get(io, key)
    }

    pub fn kv_put(&mut self, vol: VolumeId, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.settled()?;
        let (v, io, _) = self.vol_mut(vol, true)?;
        let old = v.kv_put(io, key, value)?;
        self.log(LogRecord::KvPut { vol: vol.0, key: key.to_vec(), value: value.to_vec() });
        Ok(old)
    }

    pub fn kv_delete(&mut self, vol: VolumeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.settled()?;
        let (v, io, _) = self.vol_mut(vol, true)?;
        let old = v.kv_delete(io, key)?;
        if old.is_some() {
            self.log(LogRecord::KvDelete { vol: vol.0, key: key.to_vec() });
        }
        Ok(old)
    }

    pub fn kv_range(
        &mut self,
        vol: VolumeId,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        v.objset.kv_range(io, start, end, limit)
    }
}
