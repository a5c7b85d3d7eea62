//! A volume: byte-addressed data in objects, a small attribute per object, and an ordered
//! key-value space for the file system above (directories, xattrs).
//!
//! The catalog holds each volume as three parts, as OpenZFS separates a dataset's record,
//! its object set and its dirty records:
//! - [`VolumeRecord`] (record.rs): the catalog's record of the volume — name, on-disk
//!   record (tree root, space figures, settings), parent snapshot txg, reservation;
//! - [`ObjectSet`] (objset.rs): the volume's B+tree and its dnodes in memory;
//! - [`DirtySet`] (dirty.rs): the open txg's changes — dirty records, their reserved space,
//!   prewritten blocks, snapshots to take — and the frozen set of a commit in flight
//!   (freeze.rs).
//!
//! [`VolumeState`] joins them; its methods here are the object operations, which read the
//! object set and change the dirty set within the record's limits (quota, reservation).
//! `VolumeState::sync` (sync.rs) writes the dirty set as a txg. All three are mutated under
//! the pool's lock only (`Pool::inner`, see the lock table in pool/mod.rs); each file says
//! which operations may change its part while a commit quiesces.

use crate::alloc::Allocator;
use crate::error::{Corruption, Error, Result, SpaceReason};
pub use crate::format::records::validate_record_size;
use crate::format::records::{DnodePhys, VolumeRecordPhys, ATTR_MAX};
use crate::format::{BlockKind, BlockPtr, SECTOR_SIZE, UNIT_SIZE};
use crate::pipeline::BlockIo;
use crate::tree::blocktree;
use std::sync::Arc;

mod dirty;
mod freeze;
mod objset;
mod pack;
mod read_plan;
mod record;
mod sync;
mod write;
pub use dirty::DirtySet;
pub(crate) use dirty::Prewritten;
pub(crate) use objset::KEY_DNODE;
use objset::{user_key, ObjState};
pub use objset::{ObjectSet, USER_KEY_MAX};
use read_plan::{Piece, Source};
pub use read_plan::{ReadPlan, SharedBytes};
pub use record::VolumeRecord;
pub(crate) use sync::data_saved_bytes;
pub use sync::Released;

/// Largest object offset + length (POSIX off_t).
pub const MAX_OBJECT_BYTES: u64 = i64::MAX as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub u64);

/// A volume as the catalog holds it: its record, its object set, and the open txg's
/// changes to them.
pub struct VolumeState {
    pub record: VolumeRecord,
    pub objset: ObjectSet,
    pub dirty: DirtySet,
}

impl VolumeState {
    pub fn new(name: String, rec: VolumeRecordPhys) -> VolumeState {
        let objset = ObjectSet::open(rec.tree_root);
        VolumeState { record: VolumeRecord::new(name, rec), objset, dirty: DirtySet::default() }
    }

    /// An object's dnode as it stands in the open txg.
    pub(crate) fn dnode_phys(&mut self, io: &BlockIo, obj: ObjectId) -> Result<DnodePhys> {
        Ok(self.dnode(io, obj)?.dnode.clone())
    }

    /// Set an object's size without touching its records (the caller made every record
    /// past it a hole) and, for an object holding no data, its record size.
    pub(crate) fn set_shape(&mut self, io: &BlockIo, obj: ObjectId, size: u64, record_size: u32) -> Result<()> {
        let st = self.dnode(io, obj)?;
        if st.dnode.record_size != record_size {
            if st.dnode.data_sectors != 0 || st.dnode.size != 0 {
                return Err(Error::invalid(format!("object {} holds data: its record size cannot change", obj.0)));
            }
            st.dnode.record_size = record_size;
        }
        st.dnode.size = size;
        st.dirty = true;
        self.dirty.changed = true;
        Ok(())
    }

    /// `obj`'s dnode as it stands in the open txg (NotFound if there is no such object).
    fn dnode(&mut self, io: &BlockIo, obj: ObjectId) -> Result<&mut ObjState> {
        let name = &self.record.name;
        self.objset.dnode(io, obj)?.ok_or_else(|| Error::NotFound(format!("object {} in volume {}", obj.0, name)))
    }

    /// A new, empty object's dnode: the volume's record size, `attr`.
    fn empty_dnode(&self, attr: &[u8]) -> DnodePhys {
        DnodePhys {
            size: 0,
            record_size: self.record.phys.record_size,
            levels: 0,
            root: BlockPtr::HOLE,
            data_sectors: 0,
            attr: attr.to_vec(),
        }
    }

    pub fn create_object(&mut self, attr: &[u8]) -> Result<ObjectId> {
        if attr.len() > ATTR_MAX {
            return Err(Error::invalid(format!("attribute of {} bytes (limit {ATTR_MAX})", attr.len())));
        }
        // The counter comes from disk: one that wraps, or names an object this txg holds,
        // is damage (the checker also compares it with the ids in the tree).
        let obj = ObjectId(self.record.phys.next_object_id);
        let next =
            obj.0.checked_add(1).filter(|_| !self.objset.objects.contains_key(&obj) && !self.dirty.has_records(obj));
        self.record.phys.next_object_id = next.ok_or_else(|| {
            Corruption::new(
                "volume record",
                None,
                format!("volume {}: next object id {} is in use or out of range", self.record.name, obj.0),
            )
        })?;
        let dnode = self.empty_dnode(attr);
        self.objset.objects.insert(obj, ObjState { dnode, dirty: true });
        self.dirty.changed = true;
        Ok(obj)
    }

    /// Create object `obj`, as a logged create names it: the replay of the intent log
    /// (pool/replay.rs) and of a sync mirror's journal (repl/journal.rs), on a volume whose
    /// id counter may have moved past it (a restore keeps the counter: restore.rs). The
    /// counter moves past `obj`. Refused if the object exists: the log does not belong on
    /// this volume's state.
    pub fn create_object_at(&mut self, io: &BlockIo, obj: ObjectId, attr: &[u8]) -> Result<()> {
        if attr.len() > ATTR_MAX {
            return Err(Error::invalid(format!("attribute of {} bytes (limit {ATTR_MAX})", attr.len())));
        }
        let next = obj.0.checked_add(1).ok_or_else(|| Error::invalid(format!("object id {}", obj.0)))?;
        if self.exists(io, obj)? || self.dirty.has_records(obj) {
            return Err(Corruption::new(
                "volume",
                None,
                format!("volume {}: a logged create of object {} finds it in use", self.record.name, obj.0),
            )
            .into());
        }
        let dnode = self.empty_dnode(attr);
        self.objset.objects.insert(obj, ObjState { dnode, dirty: true });
        self.record.phys.next_object_id = self.record.phys.next_object_id.max(next);
        self.dirty.changed = true;
        Ok(())
    }

    /// Make object `obj` exist with `record_size`, `attr` and `size`, as a received stream
    /// describes it (repl/receive.rs): created at that id if absent (the id counter moves
    /// past it), recreated empty if its record size differs, else its attribute replaced
    /// and its size set by truncation (records past the new end become holes).
    pub(crate) fn receive_object(
        &mut self,
        io: &BlockIo,
        alloc: &mut Allocator,
        obj: ObjectId,
        record_size: u32,
        size: u64,
        attr: &[u8],
    ) -> Result<()> {
        validate_record_size(record_size)?;
        if attr.len() > ATTR_MAX || obj.0 == 0 || size > MAX_OBJECT_BYTES {
            return Err(Error::invalid(format!(
                "object {} of {size} bytes with a {}-byte attribute: outside the limits",
                obj.0,
                attr.len()
            )));
        }
        if self.exists(io, obj)? && self.dnode(io, obj)?.dnode.record_size != record_size {
            self.delete_object(io, obj)?;
        }
        if !self.exists(io, obj)? {
            let dnode =
                DnodePhys { size: 0, record_size, levels: 0, root: BlockPtr::HOLE, data_sectors: 0, attr: Vec::new() };
            self.objset.objects.insert(obj, ObjState { dnode, dirty: true });
            self.record.phys.next_object_id = self.record.phys.next_object_id.max(obj.0.saturating_add(1));
        }
        self.truncate(io, alloc, obj, size)?;
        self.set_attr(io, obj, attr)
    }

    /// Move the object id counter to at least `next` (a received volume's, so that objects
    /// created after a break never take an id the source used).
    pub(crate) fn raise_next_object_id(&mut self, next: u64) {
        if next > self.record.phys.next_object_id {
            self.record.phys.next_object_id = next;
            self.dirty.changed = true;
        }
    }

    pub fn exists(&mut self, io: &BlockIo, obj: ObjectId) -> Result<bool> {
        Ok(self.objset.dnode(io, obj)?.is_some())
    }

    pub fn object_size(&mut self, io: &BlockIo, obj: ObjectId) -> Result<u64> {
        Ok(self.dnode(io, obj)?.dnode.size)
    }

    pub fn block_root(&mut self, io: &BlockIo, obj: ObjectId) -> Result<(BlockPtr, u8)> {
        let st = self.dnode(io, obj)?;
        Ok((st.dnode.root, st.dnode.levels))
    }

    /// Bytes the object's data records occupy (as committed, plus dirty records counted
    /// at full record size): `st_blocks`.
    pub fn allocated_bytes(&mut self, io: &BlockIo, obj: ObjectId) -> Result<u64> {
        let dn = self.dnode(io, obj)?.dnode.clone();
        Ok(dn.data_sectors * SECTOR_SIZE + self.dirty.records_with_content(obj) * dn.record_size as u64)
    }

    pub fn get_attr(&mut self, io: &BlockIo, obj: ObjectId) -> Result<Vec<u8>> {
        Ok(self.dnode(io, obj)?.dnode.attr.clone())
    }

    pub fn set_attr(&mut self, io: &BlockIo, obj: ObjectId, attr: &[u8]) -> Result<()> {
        if attr.len() > ATTR_MAX {
            return Err(Error::invalid(format!("attribute of {} bytes (limit {ATTR_MAX})", attr.len())));
        }
        let st = self.dnode(io, obj)?;
        st.dnode.attr = attr.to_vec();
        st.dirty = true;
        self.dirty.changed = true;
        Ok(())
    }

    /// Record `recno` of `obj` as it stands in the open txg (full record size). With
    /// `to_edit` the record is about to become dirty, so its committed version leaves the
    /// data cache (see `overwrite_record`) and, when nobody else holds that buffer, becomes
    /// the dirty record as it is instead of being copied.
    fn load_record(&self, io: &BlockIo, dn: &DnodePhys, obj: ObjectId, recno: u64, to_edit: bool) -> Result<Vec<u8>> {
        if let Some(content) = self.dirty.dirty_entry((obj, recno)) {
            return Ok(content.as_ref().map_or_else(|| vec![0; dn.record_size as usize], |c| c.as_ref().clone()));
        }
        let bp = blocktree::lookup(io, &dn.root, dn.levels, recno)?;
        if bp.is_hole() {
            return Ok(vec![0; dn.record_size as usize]);
        }
        if bp.kind != BlockKind::Data || bp.lsize != dn.record_size {
            return Err(crate::error::Corruption::new(
                "data block",
                Some(bp.addr),
                format!("record of {} bytes in an object of {}-byte records", bp.lsize, dn.record_size),
            )
            .into());
        }
        let data = io.read_data(&bp)?;
        if to_edit && self.record.only_this_head_reads(&bp) {
            io.forget(&[(bp.addr, bp.birth_txg)]);
            return Ok(Arc::try_unwrap(data).unwrap_or_else(|shared| shared.as_ref().clone()));
        }
        Ok(data.as_ref().clone())
    }

    /// Make record `recno` dirty (reserving its space) and return it for editing.
    fn dirty_record(
        &mut self,
        io: &BlockIo,
        alloc: &mut Allocator,
        dn: &DnodePhys,
        obj: ObjectId,
        recno: u64,
        overwrite_all: bool,
        reserved: bool,
    ) -> Result<&mut Vec<u8>> {
        let present = matches!(self.dirty.records.get(&(obj, recno)), Some(Some(_)));
        if !present {
            if !reserved {
                self.reserve(alloc, record_units(dn))?;
            }
            let content = if overwrite_all {
                vec![0; dn.record_size as usize]
            } else {
                self.load_record(io, dn, obj, recno, true)?
            };
            self.dirty.replace_record(obj, recno, content);
        }
        Ok(self
            .dirty
            .records
            .get_mut(&(obj, recno))
            .and_then(|c| c.as_mut())
            .map(Arc::make_mut)
            .expect("made present above"))
    }

    fn reserve(&mut self, alloc: &mut Allocator, units: u64) -> Result<()> {
        if self.record.phys.quota_bytes > 0 {
            let want = self.record.phys.used_sectors * SECTOR_SIZE + (self.dirty.reserved_units() + units) * UNIT_SIZE;
            if want > self.record.phys.quota_bytes {
                return Err(Error::no_space(
                    SpaceReason::Quota,
                    format!(
                        "volume {} is at its size limit of {} bytes",
                        self.record.name, self.record.phys.quota_bytes
                    ),
                ));
            }
        }
        // Other volumes' unused reservations are not ours to take; our own is (it is part of
        // what the allocator counts as available).
        let available = alloc.available_units().saturating_sub(self.record.held_for_others_units);
        if units > available || !alloc.reserve(units) {
            return Err(Error::no_space(
                SpaceReason::Pool,
                format!(
                    "pool has {} bytes available{}, volume {} needs {} more",
                    available * UNIT_SIZE,
                    if self.record.held_for_others_units > 0 { " outside other volumes' reservations" } else { "" },
                    self.record.name,
                    units * UNIT_SIZE
                ),
            ));
        }
        self.dirty.reserved_units += units;
        Ok(())
    }

    /// Resolve a read without doing its data I/O: each piece of the range is a hole, a
    /// dirty record (its `Arc`, no copy) or a record to read from the device with its block
    /// pointer — for the caller to read outside the pool's lock.
    pub fn plan_read(&mut self, io: &BlockIo, obj: ObjectId, offset: u64, len: usize) -> Result<ReadPlan> {
        let dn = self.dnode(io, obj)?.dnode.clone();
        let end = offset.saturating_add(len as u64).min(dn.size);
        let rs = dn.record_size as u64;
        let records = end.saturating_sub(offset).div_ceil(rs.max(1)) as usize + 1;
        let mut plan = ReadPlan { len: end.saturating_sub(offset) as usize, pieces: Vec::with_capacity(records) };
        let mut cursor = blocktree::Cursor::new();
        let mut pos = offset;
        while pos < end {
            let recno = pos / rs;
            let in_record = (pos % rs) as usize;
            let len = ((rs - pos % rs).min(end - pos)) as usize;
            let source = match self.dirty.dirty_entry((obj, recno)) {
                Some(Some(rec)) => Source::Memory(rec.clone()),
                Some(None) => Source::Zeros,
                None => {
                    let bp = cursor.lookup(io, &dn.root, dn.levels, recno)?;
                    if bp.is_hole() {
                        Source::Zeros
                    } else if bp.kind != BlockKind::Data || bp.lsize != dn.record_size {
                        return Err(crate::error::Corruption::new(
                            "data block",
                            Some(bp.addr),
                            format!("record of {} bytes in an object of {}-byte records", bp.lsize, dn.record_size),
                        )
                        .into());
                    } else {
                        Source::Device(bp)
                    }
                }
            };
            plan.pieces.push(Piece { in_record, len, source });
            pos += len as u64;
        }
        Ok(plan)
    }

    pub fn read(&mut self, io: &BlockIo, obj: ObjectId, offset: u64, len: usize) -> Result<Vec<u8>> {
        let size = self.dnode(io, obj)?.dnode.size;
        let end = offset.saturating_add(len as u64).min(size);
        let mut out = vec![0; end.saturating_sub(offset) as usize];
        self.read_into(io, obj, offset, &mut out)?;
        Ok(out)
    }

    /// Fill `buf` from `offset`; bytes past the end of the object are left as they are.
    pub fn read_into(&mut self, io: &BlockIo, obj: ObjectId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let dn = self.dnode(io, obj)?.dnode.clone();
        let end = offset.saturating_add(buf.len() as u64).min(dn.size);
        let rs = dn.record_size as u64;
        let mut pos = offset;
        while pos < end {
            let recno = pos / rs;
            let in_rec = (pos % rs) as usize;
            let n = ((rs - pos % rs).min(end - pos)) as usize;
            let out = &mut buf[(pos - offset) as usize..][..n];
            match self.dirty.dirty_entry((obj, recno)) {
                Some(Some(rec)) => out.copy_from_slice(&rec[in_rec..in_rec + n]),
                Some(None) => out.fill(0),
                None => {
                    let rec = self.load_record(io, &dn, obj, recno, false)?;
                    out.copy_from_slice(&rec[in_rec..in_rec + n]);
                }
            }
            pos += n as u64;
        }
        Ok(())
    }

    /// Zero bytes [from, to) of one record (both inside record `recno`).
    fn zero_within(
        &mut self,
        io: &BlockIo,
        alloc: &mut Allocator,
        dn: &DnodePhys,
        obj: ObjectId,
        recno: u64,
        from: usize,
        to: usize,
    ) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let on_disk_hole = blocktree::lookup(io, &dn.root, dn.levels, recno)?.is_hole();
        match self.dirty.dirty_entry((obj, recno)) {
            None if on_disk_hole => return Ok(()),
            Some(None) => return Ok(()),
            _ => {}
        }
        let rec = self.dirty_record(io, alloc, dn, obj, recno, false, false)?;
        rec[from..to].fill(0);
        Ok(())
    }

    /// Turn whole records [first, last) into holes.
    fn drop_records(&mut self, io: &BlockIo, dn: &DnodePhys, obj: ObjectId, first: u64, last: u64) -> Result<()> {
        if first >= last {
            return Ok(());
        }
        self.dirty.discard(obj, (obj, first)..(obj, last));
        for r in blocktree::allocated_records(io, &dn.root, dn.levels, first, last)? {
            self.dirty.records.insert((obj, r), None);
        }
        Ok(())
    }

    pub fn truncate(&mut self, io: &BlockIo, alloc: &mut Allocator, obj: ObjectId, size: u64) -> Result<()> {
        if size > MAX_OBJECT_BYTES {
            return Err(Error::invalid(format!("size {size} passes the 2^63 limit")));
        }
        let dn = self.dnode(io, obj)?.dnode.clone();
        if size < dn.size {
            let rs = dn.record_size as u64;
            self.drop_records(io, &dn, obj, size.div_ceil(rs), u64::MAX)?;
            if !size.is_multiple_of(rs) {
                self.zero_within(io, alloc, &dn, obj, size / rs, (size % rs) as usize, rs as usize)?;
            }
        }
        let st = self.dnode(io, obj)?;
        st.dnode.size = size;
        st.dirty = true;
        self.dirty.changed = true;
        Ok(())
    }

    /// Deallocate [offset, offset + len): reads return zeros there; the size is unchanged.
    pub fn punch_hole(
        &mut self,
        io: &BlockIo,
        alloc: &mut Allocator,
        obj: ObjectId,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let dn = self.dnode(io, obj)?.dnode.clone();
        let end = offset.saturating_add(len).min(dn.size);
        if offset >= end {
            return Ok(());
        }
        let rs = dn.record_size as u64;
        let first_whole = offset.div_ceil(rs);
        let last_whole = end / rs;
        if first_whole < last_whole {
            self.drop_records(io, &dn, obj, first_whole, last_whole)?;
        }
        let head_rec = offset / rs;
        let tail_rec = end / rs;
        if head_rec == tail_rec {
            self.zero_within(io, alloc, &dn, obj, head_rec, (offset % rs) as usize, (end % rs) as usize)?;
        } else {
            if !offset.is_multiple_of(rs) {
                self.zero_within(io, alloc, &dn, obj, head_rec, (offset % rs) as usize, rs as usize)?;
            }
            if end % rs != 0 {
                self.zero_within(io, alloc, &dn, obj, tail_rec, 0, (end % rs) as usize)?;
            }
        }
        self.dirty.changed = true;
        Ok(())
    }

    pub fn delete_object(&mut self, io: &BlockIo, obj: ObjectId) -> Result<()> {
        let dn = self.dnode(io, obj)?.dnode.clone();
        let mut blocks = Vec::new();
        blocktree::walk(io, &dn.root, dn.levels, &mut |bp, _, _| {
            blocks.push(*bp);
            Ok(())
        })?;
        self.dirty.released.extend(blocks);
        self.dirty.discard(obj, (obj, 0)..=(obj, u64::MAX));
        self.objset.remove(io, obj)?;
        self.dirty.changed = true;
        Ok(())
    }

    pub fn kv_put(&mut self, io: &BlockIo, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = user_key(key)?;
        self.dirty.changed = true;
        self.objset.tree.insert(io, &k, value)
    }

    pub fn kv_delete(&mut self, io: &BlockIo, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = user_key(key)?;
        let old = self.objset.tree.remove(io, &k)?;
        if old.is_some() {
            self.dirty.changed = true;
        }
        Ok(old)
    }
}

/// Units a dirty record may take when written: the record plus a unit for its share of
/// the tree above it (one indirect block serves up to 256 records; B+tree nodes far more).
fn record_units(dn: &DnodePhys) -> u64 {
    dn.record_size as u64 / UNIT_SIZE + 1
}
