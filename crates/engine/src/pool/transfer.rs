//! What a mirror transfer (repl/) needs from the pool: holds on the snapshots a send reads,
//! and the receiving side's object operations.
//!
//! A send reads a snapshot's blocks outside the pool's lock for as long as the transfer
//! lasts, so the snapshot must not be deleted meanwhile: a hold (ZFS `zfs hold`) makes
//! `delete_snapshot` and `delete_volume` refuse with Busy. Holds are in memory; a transfer
//! resumed after a restart takes them again.
//!
//! The receive operations change a volume without intent-log records: a receiving volume
//! has no other writer (the daemon keeps clients off it), and a transfer is made durable by
//! its own commits — after a crash it resumes from the last record it knows was committed
//! (repl/receive.rs), so nothing needs replaying. Logging them would also make a later
//! replay depend on object ids the log never saw created.

use crate::catalog::volume::ObjectId;
use crate::error::Result;
use crate::pool::guard::PoolGuard;
use crate::pool::{Pool, VolumeId};

/// A snapshot held against deletion until dropped.
pub struct SnapshotHold<'a> {
    pool: &'a Pool,
    id: u64,
}

impl Pool {
    /// Hold `volume@name` against deletion (see the module comment).
    pub fn hold_snapshot(&self, volume: &str, name: &str) -> Result<SnapshotHold<'_>> {
        let mut p = self.lock_raw();
        let vid = p.volume_id(volume)?;
        let id = p.catalog.snapshot_id(vid, name)?;
        *p.catalog.holds.entry(id).or_insert(0) += 1;
        Ok(SnapshotHold { pool: self, id })
    }
}

impl SnapshotHold<'_> {
    /// The held snapshot's id.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for SnapshotHold<'_> {
    fn drop(&mut self) {
        let mut p = self.pool.lock_raw();
        if let Some(n) = p.catalog.holds.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                p.catalog.holds.remove(&self.id);
            }
        }
    }
}

impl PoolGuard<'_> {
    /// Make object `obj` exist as a stream describes it (`VolumeState::receive_object`).
    pub fn receive_object(
        &mut self,
        vol: VolumeId,
        obj: ObjectId,
        record_size: u32,
        size: u64,
        attr: &[u8],
    ) -> Result<()> {
        self.settled()?;
        let (v, io, alloc) = self.vol_mut(vol, true)?;
        v.receive_object(io, alloc, obj, record_size, size, attr)
    }

    /// Delete object `obj` if it exists.
    pub fn receive_free_object(&mut self, vol: VolumeId, obj: ObjectId) -> Result<()> {
        self.settled()?;
        let (v, io, _) = self.vol_mut(vol, true)?;
        if v.exists(io, obj)? {
            v.delete_object(io, obj)?;
        }
        Ok(())
    }

    pub fn receive_write(&mut self, vol: VolumeId, obj: ObjectId, offset: u64, data: &[u8]) -> Result<()> {
        let (v, io, alloc) = self.vol_mut(vol, true)?;
        v.write(io, alloc, obj, offset, data)
    }

    pub fn receive_punch(&mut self, vol: VolumeId, obj: ObjectId, offset: u64, len: u64) -> Result<()> {
        self.settled()?;
        let (v, io, alloc) = self.vol_mut(vol, true)?;
        v.punch_hole(io, alloc, obj, offset, len)
    }

    pub fn receive_kv(&mut self, vol: VolumeId, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.settled()?;
        let (v, io, _) = self.vol_mut(vol, true)?;
        match value {
            Some(value) => v.kv_put(io, key, value)?,
            None => v.kv_delete(io, key)?,
        };
        Ok(())
    }

    /// The record size of object `obj`.
    pub fn object_record_size(&mut self, vol: VolumeId, obj: ObjectId) -> Result<u32> {
        let (v, io, _) = self.vol_mut(vol, false)?;
        Ok(v.dnode_phys(io, obj)?.record_size)
    }

    pub fn receive_next_object_id(&mut self, vol: VolumeId, next: u64) -> Result<()> {
        let (v, _, _) = self.vol_mut(vol, true)?;
        v.raise_next_object_id(next);
        Ok(())
    }
}
