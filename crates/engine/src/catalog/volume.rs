//! A volume's objects: byte-addressed data in records, a small attribute per object, and
//! an ordered key-value space for the file system above (directories, xattrs).
//!
//! Everything a volume holds hangs off its own B+tree (`tree`): each object's dnode under
//! key `[KEY_DNODE] ++ id (big-endian)`, and the caller's key-value entries under
//! `[KEY_USER] ++ key`. The volume record in the pool catalog points at that tree's root,
//! so a snapshot of a volume will be one saved root pointer.
//!
//! Writes go to whole records held in memory until the txg syncs (`dirty_records`); a write
//! smaller than a record reads the record once, then edits it in memory
//! (read-modify-write in the txg, never on disk). `None` in `dirty_records` is a record
//! that becomes a hole (punched or truncated away). Space is reserved when a record first
//! becomes dirty, so a full pool reports NoSpace to the writer, not to the commit.

use crate::alloc::Allocator;
use crate::error::{Corruption, Error, Result, SpaceReason};
use crate::format::node::KEY_MAX;
pub use crate::format::records::validate_record_size;
use crate::format::records::{DnodePhys, VolumeRecordPhys, ATTR_MAX};
use crate::format::{BlockKind, BlockPtr, SECTORS_PER_UNIT, SECTOR_SIZE, UNIT_SIZE};
use crate::pipeline::dedup::DedupTable;
use crate::pipeline::BlockIo;
use crate::tree::blocktree;
use crate::tree::btree::BTree;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

mod freeze;
mod pack;
mod read_plan;
pub(crate) use freeze::Frozen;
use pack::{dedup_records, pack_records};

/// A dirty record already written to a block of the open txg (pool/prewrite.rs).
pub(crate) struct Prewritten {
    pub content: Arc<Vec<u8>>,
    pub bp: BlockPtr,
}
use read_plan::{Piece, Source};
pub use read_plan::{ReadPlan, SharedBytes};

pub(crate) const KEY_DNODE: u8 = 0x01;
const KEY_USER: u8 = 0x80;
/// Longest key the caller may use in a volume's key-value space.
pub const USER_KEY_MAX: usize = KEY_MAX - 1;
/// Largest object offset + length (POSIX off_t).
pub const MAX_OBJECT_BYTES: u64 = i64::MAX as u64;
/// Clean dnodes kept in memory per volume. Each is ~100 bytes; 64k covers the hot set of a
/// database (a few thousand files) many times over.
const DNODE_CACHE_MAX: usize = 65536;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub u64);

fn dnode_key(obj: ObjectId) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = KEY_DNODE;
    k[1..].copy_from_slice(&obj.0.to_be_bytes());
    k
}

/// The object a dnode key of the volume's tree names. The key comes from disk: one that is
/// not `KEY_DNODE` and 8 bytes of id is damage.
fn object_of_key(k: &[u8]) -> Result<ObjectId> {
    match k.split_first() {
        Some((&KEY_DNODE, id)) => <[u8; 8]>::try_from(id).map(|id| ObjectId(u64::from_be_bytes(id))).ok(),
        _ => None,
    }
    .ok_or_else(|| Corruption::new("volume tree", None, format!("dnode key {k:02x?} is not 9 bytes")).into())
}

/// A space figure after a sync: `held + added - dropped`. The figures are read from disk
/// (a dnode, a volume record) and the dropped blocks from block pointers on disk: a figure
/// that cannot give up what is dropped, or overflows, is damage. It is reported (the
/// commit fails and the pool latches, txg.rs), never a panic.
fn space_after(what: &'static str, figure: impl Fn() -> String, held: u64, added: u64, dropped: u64) -> Result<u64> {
    held.checked_add(added).and_then(|n| n.checked_sub(dropped)).ok_or_else(|| {
        Corruption::new(
            what,
            None,
            format!("{}: {held} sectors + {added} written cannot give up {dropped} freed", figure()),
        )
        .into()
    })
}

fn user_key(key: &[u8]) -> Result<Vec<u8>> {
    if key.len() > USER_KEY_MAX {
        return Err(Error::invalid(format!("key of {} bytes (limit {USER_KEY_MAX})", key.len())));
    }
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(KEY_USER);
    k.extend_from_slice(key);
    Ok(k)
}

struct ObjState {
    dnode: DnodePhys,
    dirty: bool,
}

pub struct VolumeState {
    pub name: String,
    pub rec: VolumeRecordPhys,
    pub tree: BTree,
    objects: HashMap<ObjectId, ObjState>,
    /// Shared with a prewrite in flight (prewrite.rs): editing a record then copies it
    /// (`Arc::make_mut`), so the prewritten block is used only if it is still the content.
    dirty_records: BTreeMap<(ObjectId, u64), Option<Arc<Vec<u8>>>>,
    /// Dirty records already written to a block of the open txg by a prewrite, with the
    /// content they were written from (prewrite.rs).
    pub(crate) prewritten: HashMap<(ObjectId, u64), Prewritten>,
    /// Dirty records with content (not holes) per object: `st_blocks` in O(1).
    dirty_counts: HashMap<ObjectId, u64>,
    dirty_bytes: u64,
    /// Bytes written in the open txg into records it had already dirtied (about: a write
    /// spanning dirty and clean records counts its share). More of them than dirty bytes: a
    /// writer rewriting its data faster than commits come, whom early prewrite passes
    /// would chase in vain (quiesce.rs).
    rewritten_bytes: u64,
    reserved_units: u64,
    /// Blocks this volume stopped referencing in the open txg (deleted objects).
    released: Vec<BlockPtr>,
    /// Something changed since the last sync.
    pub dirty: bool,
    /// Txg of the parent snapshot (0 = none): blocks born at or before it are shared with
    /// the parent, so releasing them puts them on the deadlist instead of freeing them.
    pub parent_txg: u64,
    /// Snapshots to take when this txg syncs: (snapshot id, name, group id).
    pub pending_snapshots: Vec<(u64, String, u64)>,
    /// As a read-only view of a snapshot (`.snapshot/NAME`, `PoolInner::views`): opens not
    /// yet closed.
    pub view_refs: u32,
    /// Records to point at existing blocks (or holes) when the txg syncs: a single-file
    /// restore re-acquiring blocks of a snapshot (see restore.rs). Only ever set on a volume
    /// committed clean, under the lock, and committed before the lock is released.
    pub(crate) shared_records: BTreeMap<(ObjectId, u64), BlockPtr>,
    /// What a commit in flight is writing: the open txg's changes as they stood when the
    /// commit froze them (freeze.rs). Reads look here after `dirty_records`.
    frozen: Option<Frozen>,
    /// Space the pool keeps for this volume (space.rs); 0 = thin.
    pub reservation_bytes: u64,
    /// Units other volumes' reservations keep from this one, refreshed by the `PoolGuard` before
    /// each writing operation (space.rs `held_for_others`).
    pub held_for_others_units: u64,
}

/// What a volume's sync stopped referencing: blocks only it held (free them), and blocks
/// its parent snapshot still holds (the deadlist).
#[derive(Default)]
pub struct Released {
    pub freed: Vec<BlockPtr>,
    pub dead: Vec<BlockPtr>,
}

impl VolumeState {
    pub fn new(name: String, rec: VolumeRecordPhys) -> VolumeState {
        let tree = BTree::open(rec.tree_root);
        VolumeState {
            name,
            rec,
            tree,
            objects: HashMap::new(),
            dirty_records: BTreeMap::new(),
            prewritten: HashMap::new(),
            dirty_counts: HashMap::new(),
            dirty_bytes: 0,
            rewritten_bytes: 0,
            reserved_units: 0,
            released: Vec::new(),
            dirty: false,
            parent_txg: 0,
            pending_snapshots: Vec::new(),
            view_refs: 0,
            shared_records: BTreeMap::new(),
            frozen: None,
            reservation_bytes: 0,
            held_for_others_units: 0,
        }
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
        self.dirty = true;
        Ok(())
    }

    /// Units reserved by this volume's dirty data: the open txg's and a commit's in flight.
    pub fn reserved_units(&self) -> u64 {
        self.reserved_units + self.frozen_reserved_units()
    }

    /// Units reserved by the open txg's dirty data (written since a commit's freeze).
    pub(crate) fn open_reserved_units(&self) -> u64 {
        self.reserved_units
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes
    }

    /// Bytes the open txg wrote again into records it had already dirtied.
    pub(crate) fn rewritten_bytes(&self) -> u64 {
        self.rewritten_bytes
    }

    fn dnode(&mut self, io: &BlockIo, obj: ObjectId) -> Result<&mut ObjState> {
        if !self.objects.contains_key(&obj) {
            let raw = self
                .tree
                .get(io, &dnode_key(obj))?
                .ok_or_else(|| Error::NotFound(format!("object {} in volume {}", obj.0, self.name)))?;
            let dnode = DnodePhys::decode(&raw)?;
            self.objects.insert(obj, ObjState { dnode, dirty: false });
        }
        Ok(self.objects.get_mut(&obj).expect("inserted above"))
    }

    pub fn create_object(&mut self, attr: &[u8]) -> Result<ObjectId> {
        if attr.len() > ATTR_MAX {
            return Err(Error::invalid(format!("attribute of {} bytes (limit {ATTR_MAX})", attr.len())));
        }
        // The counter comes from disk: one that wraps, or names an object this txg holds,
        // is damage (the checker also compares it with the ids in the tree).
        let obj = ObjectId(self.rec.next_object_id);
        let next = obj.0.checked_add(1).filter(|_| !self.objects.contains_key(&obj) && !self.has_dirty_records(obj));
        self.rec.next_object_id = next.ok_or_else(|| {
            Corruption::new(
                "volume record",
                None,
                format!("volume {}: next object id {} is in use or out of range", self.name, obj.0),
            )
        })?;
        let dnode = DnodePhys {
            size: 0,
            record_size: self.rec.record_size,
            levels: 0,
            root: BlockPtr::HOLE,
            data_sectors: 0,
            attr: attr.to_vec(),
        };
        self.objects.insert(obj, ObjState { dnode, dirty: true });
        self.dirty = true;
        Ok(obj)
    }

    pub fn exists(&mut self, io: &BlockIo, obj: ObjectId) -> Result<bool> {
        match self.dnode(io, obj) {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
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
        let dirty = self.dirty_counts.get(&obj).copied().unwrap_or(0);
        debug_assert_eq!(
            dirty,
            self.dirty_records.range((obj, 0)..=(obj, u64::MAX)).filter(|(_, c)| c.is_some()).count() as u64,
            "per-object dirty count"
        );
        let frozen = self.frozen.as_ref().and_then(|f| f.counts.get(&obj)).copied().unwrap_or(0);
        Ok(dn.data_sectors * SECTOR_SIZE + (dirty + frozen) * dn.record_size as u64)
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
        self.dirty = true;
        Ok(())
    }

    /// Record `recno` of `obj` as it stands in the open txg (full record size). With
    /// `to_edit` the record is about to become dirty, so its committed version leaves the
    /// data cache (see `overwrite_record`) and, when nobody else holds that buffer, becomes
    /// the dirty record as it is instead of being copied.
    fn load_record(&self, io: &BlockIo, dn: &DnodePhys, obj: ObjectId, recno: u64, to_edit: bool) -> Result<Vec<u8>> {
        if let Some(content) = self.dirty_entry((obj, recno)) {
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
        if to_edit && self.only_this_head_reads(&bp) {
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
        let present = matches!(self.dirty_records.get(&(obj, recno)), Some(Some(_)));
        if !present {
            if !reserved {
                self.reserve(alloc, record_units(dn))?;
            }
            let content = if overwrite_all {
                vec![0; dn.record_size as usize]
            } else {
                self.load_record(io, dn, obj, recno, true)?
            };
            self.dirty_bytes += content.len() as u64;
            self.dirty_records.insert((obj, recno), Some(Arc::new(content)));
            *self.dirty_counts.entry(obj).or_insert(0) += 1;
        }
        Ok(self
            .dirty_records
            .get_mut(&(obj, recno))
            .and_then(|c| c.as_mut())
            .map(Arc::make_mut)
            .expect("made present above"))
    }

    /// Dirty records with contents not yet prewritten as they stand (prewrite.rs).
    pub(crate) fn prewrite_candidates(&self) -> Vec<((ObjectId, u64), Arc<Vec<u8>>)> {
        self.commit_records()
            .iter()
            .filter_map(|(k, c)| c.as_ref().map(|c| (*k, c)))
            .filter(|(k, c)| !self.prewritten.get(k).is_some_and(|pw| Arc::ptr_eq(&pw.content, c)))
            .map(|(k, c)| (k, c.clone()))
            .collect()
    }

    /// Record `key`'s dirty content if it is exactly `bytes`.
    pub(crate) fn dirty_content_equal(&self, key: (ObjectId, u64), bytes: &[u8]) -> Option<Arc<Vec<u8>>> {
        match self.dirty_records.get(&key) {
            Some(Some(c)) if c.as_slice() == bytes => Some(c.clone()),
            _ => None,
        }
    }

    /// Whether record `key` is still dirty with exactly `content` (the same allocation).
    pub(crate) fn still_holds(&self, key: (ObjectId, u64), content: &Arc<Vec<u8>>) -> bool {
        matches!(self.commit_records().get(&key), Some(Some(c)) if Arc::ptr_eq(c, content))
    }

    /// Forget every prewritten block (their writes failed), freeing them. A block the
    /// allocator cannot free was freed before through a damaged pointer to its units.
    pub(crate) fn drop_prewritten(&mut self, alloc: &mut Allocator, ddt: &mut DedupTable, txg: u64) -> Result<()> {
        for (_, pw) in self.prewritten.drain() {
            ddt.free(alloc, &pw.bp, txg)?;
        }
        Ok(())
    }

    /// Overwrite record `recno` whole with `src`, its space already reserved.
    ///
    /// Memory is what this is about: a client rewriting its data keeps up to three versions
    /// of a record alive — the committed one in the data cache, the one a commit in flight
    /// froze, and the new one — and every version past the process's high-water mark costs
    /// fresh pages (a page fault and a zeroed page per 4 KiB: on a VM, 2–6 µs each; at
    /// 2 GiB/s of 1 MiB writes the faults, not the copies, set the pace). So: a dirty record
    /// nobody else holds (no prewrite, no commit, no reader) takes the bytes in place; and
    /// the committed version of a record dirtied now leaves the data cache at once (nothing
    /// reads it any more: this volume reads the dirty record; it is freed when this txg
    /// syncs) instead of when the txg syncs, so its buffer serves the next write. Kept:
    /// blocks a snapshot shares (born at or before `parent_txg`), dedup and packed blocks.
    fn overwrite_record(&mut self, io: &BlockIo, dn: &DnodePhys, obj: ObjectId, recno: u64, src: &[u8]) {
        match self.dirty_records.get_mut(&(obj, recno)) {
            Some(Some(rec)) => {
                if let Some(buf) = Arc::get_mut(rec).filter(|b| b.len() == src.len()) {
                    buf.copy_from_slice(src);
                    return;
                }
            }
            Some(None) => {}
            None => {
                let frozen = self.frozen.as_ref().is_some_and(|f| f.records.contains_key(&(obj, recno)));
                if !frozen {
                    // From cached metadata only: a write must not wait for a read here.
                    let old = blocktree::lookup_cached(io, &dn.root, dn.levels, recno);
                    if let Some(bp) = old.filter(|bp| !bp.is_hole() && self.only_this_head_reads(bp)) {
                        io.forget(&[(bp.addr, bp.birth_txg)]);
                    }
                }
            }
        }
        // No zeroing first, no copy of the old content a prewrite still holds.
        self.replace_record(obj, recno, src.to_vec());
    }

    /// A data block only this head reads through its records: not shared with a snapshot
    /// (born after `parent_txg`), nor with other records (dedup, packs). Once its record is
    /// dirty, its cached copy is read by nobody.
    fn only_this_head_reads(&self, bp: &BlockPtr) -> bool {
        bp.birth_txg > self.parent_txg && !bp.dedup && !bp.packed
    }

    /// Make record `recno` dirty with `content` (a full record), its space already reserved.
    fn replace_record(&mut self, obj: ObjectId, recno: u64, content: Vec<u8>) {
        let len = content.len() as u64;
        match self.dirty_records.insert((obj, recno), Some(Arc::new(content))) {
            Some(Some(_)) => {}
            _ => {
                self.dirty_bytes += len;
                *self.dirty_counts.entry(obj).or_insert(0) += 1;
            }
        }
    }

    fn has_dirty_records(&self, obj: ObjectId) -> bool {
        self.dirty_records.range((obj, 0)..=(obj, u64::MAX)).next().is_some()
            || self.frozen.as_ref().is_some_and(|f| f.records.range((obj, 0)..=(obj, u64::MAX)).next().is_some())
    }

    fn uncount_dirty(&mut self, obj: ObjectId) {
        if let Some(n) = self.dirty_counts.get_mut(&obj) {
            *n -= 1;
            if *n == 0 {
                self.dirty_counts.remove(&obj);
            }
        }
    }

    /// Records in [first, last] of `obj` that are not dirty yet (each needs a reservation).
    fn clean_records(&self, obj: ObjectId, first: u64, last: u64) -> u64 {
        let dirty = self.dirty_records.range((obj, first)..=(obj, last)).filter(|(_, c)| c.is_some()).count() as u64;
        last - first + 1 - dirty
    }

    fn reserve(&mut self, alloc: &mut Allocator, units: u64) -> Result<()> {
        if self.rec.quota_bytes > 0 {
            let want = self.rec.used_sectors * SECTOR_SIZE + (self.reserved_units() + units) * UNIT_SIZE;
            if want > self.rec.quota_bytes {
                return Err(Error::no_space(
                    SpaceReason::Quota,
                    format!("volume {} is at its size limit of {} bytes", self.name, self.rec.quota_bytes),
                ));
            }
        }
        // Other volumes' unused reservations are not ours to take; our own is (it is part of
        // what the allocator counts as available).
        let available = alloc.available_units().saturating_sub(self.held_for_others_units);
        if units > available || !alloc.reserve(units) {
            return Err(Error::no_space(
                SpaceReason::Pool,
                format!(
                    "pool has {} bytes available{}, volume {} needs {} more",
                    available * UNIT_SIZE,
                    if self.held_for_others_units > 0 { " outside other volumes' reservations" } else { "" },
                    self.name,
                    units * UNIT_SIZE
                ),
            ));
        }
        self.reserved_units += units;
        Ok(())
    }

    pub fn write(
        &mut self,
        io: &BlockIo,
        alloc: &mut Allocator,
        obj: ObjectId,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let end = offset.checked_add(data.len() as u64).filter(|&e| e <= MAX_OBJECT_BYTES).ok_or_else(|| {
            Error::invalid(format!("write of {} bytes at {offset} passes the 2^63 limit", data.len()))
        })?;
        let dn = self.dnode(io, obj)?.dnode.clone();
        let rs = dn.record_size as u64;
        if data.is_empty() {
            return Ok(());
        }
        // Reserve for the whole write first: a write either fits or changes nothing.
        let (first, last) = (offset / rs, (end - 1) / rs);
        let fresh = self.clean_records(obj, first, last);
        self.reserve(alloc, fresh * record_units(&dn))?;
        let records = last - first + 1;
        self.rewritten_bytes += data.len() as u64 / records * (records - fresh);
        // Read the partly-covered edge records before changing anything, so that a read
        // error leaves the object as it was (loading a record unchanged is invisible).
        let partial = |r: u64| offset > r * rs || end < (r + 1) * rs;
        for r in [first, last] {
            if partial(r) {
                self.dirty_record(io, alloc, &dn, obj, r, false, true)?;
            }
        }
        let mut pos = offset;
        while pos < end {
            let recno = pos / rs;
            let in_rec = (pos % rs) as usize;
            let n = ((rs - pos % rs).min(end - pos)) as usize;
            let src = &data[(pos - offset) as usize..(pos - offset) as usize + n];
            if in_rec == 0 && n as u64 == rs {
                self.overwrite_record(io, &dn, obj, recno, src);
            } else {
                let rec = self.dirty_record(io, alloc, &dn, obj, recno, false, true)?;
                rec[in_rec..in_rec + n].copy_from_slice(src);
            }
            pos += n as u64;
        }
        let st = self.dnode(io, obj)?;
        if end > st.dnode.size {
            st.dnode.size = end;
        }
        st.dirty = true;
        self.dirty = true;
        Ok(())
    }

    /// Resolve a read without doing its data I/O: each piece of the range is a hole, a
    /// dirty record (its `Arc`, no copy) or a record to read from the device with its block
    /// pointer — for the caller to read outside the pool's lock.
    pub fn plan_read(&mut self, io: &BlockIo, obj: ObjectId, offset: u64, len: usize) -> Result<ReadPlan> {
        let dn = self.dnode(io, obj)?.dnode.clone();
        let end = offset.saturating_add(len as u64).min(dn.size);
        let mut plan = ReadPlan { len: end.saturating_sub(offset) as usize, pieces: Vec::new() };
        let rs = dn.record_size as u64;
        let mut pos = offset;
        while pos < end {
            let recno = pos / rs;
            let in_record = (pos % rs) as usize;
            let len = ((rs - pos % rs).min(end - pos)) as usize;
            let source = match self.dirty_entry((obj, recno)) {
                Some(Some(rec)) => Source::Memory(rec.clone()),
                Some(None) => Source::Zeros,
                None => {
                    let bp = blocktree::lookup(io, &dn.root, dn.levels, recno)?;
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
            match self.dirty_entry((obj, recno)) {
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
        match self.dirty_entry((obj, recno)) {
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
        let gone: Vec<u64> = self.dirty_records.range((obj, first)..(obj, last)).map(|(&(_, r), _)| r).collect();
        for r in gone {
            if let Some(Some(buf)) = self.dirty_records.remove(&(obj, r)) {
                self.dirty_bytes -= buf.len() as u64;
                self.uncount_dirty(obj);
            }
        }
        for r in blocktree::allocated_records(io, &dn.root, dn.levels, first, last)? {
            self.dirty_records.insert((obj, r), None);
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
        self.dirty = true;
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
        self.dirty = true;
        Ok(())
    }

    pub fn delete_object(&mut self, io: &BlockIo, obj: ObjectId) -> Result<()> {
        let dn = self.dnode(io, obj)?.dnode.clone();
        let mut blocks = Vec::new();
        blocktree::walk(io, &dn.root, dn.levels, &mut |bp, _, _| {
            blocks.push(*bp);
            Ok(())
        })?;
        self.released.extend(blocks);
        let gone: Vec<u64> = self.dirty_records.range((obj, 0)..=(obj, u64::MAX)).map(|(&(_, r), _)| r).collect();
        for r in gone {
            if let Some(Some(buf)) = self.dirty_records.remove(&(obj, r)) {
                self.dirty_bytes -= buf.len() as u64;
                self.uncount_dirty(obj);
            }
        }
        self.objects.remove(&obj);
        self.tree.remove(io, &dnode_key(obj))?;
        self.dirty = true;
        Ok(())
    }

    /// Object ids from `after` (exclusive), up to `limit`.
    pub fn list_objects(&mut self, io: &BlockIo, after: Option<ObjectId>, limit: usize) -> Result<Vec<ObjectId>> {
        // Dirty dnodes not yet in the tree must be listed too: merge both.
        let start = after.map_or(dnode_key(ObjectId(0)), |a| dnode_key(ObjectId(a.0.saturating_add(1))));
        let mut ids: Vec<ObjectId> = self
            .tree
            .range(io, &start, Some(&[KEY_DNODE + 1]), limit)?
            .into_iter()
            .map(|(k, _)| object_of_key(&k))
            .collect::<Result<_>>()?;
        let from = after.map_or(0, |a| a.0.saturating_add(1));
        ids.extend(self.objects.keys().filter(|o| o.0 >= from));
        ids.sort();
        ids.dedup();
        ids.truncate(limit);
        Ok(ids)
    }

    pub fn kv_get(&self, io: &BlockIo, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tree.get(io, &user_key(key)?)
    }

    pub fn kv_put(&mut self, io: &BlockIo, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = user_key(key)?;
        self.dirty = true;
        self.tree.insert(io, &k, value)
    }

    pub fn kv_delete(&mut self, io: &BlockIo, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = user_key(key)?;
        let old = self.tree.remove(io, &k)?;
        if old.is_some() {
            self.dirty = true;
        }
        Ok(old)
    }

    pub fn kv_range(
        &self,
        io: &BlockIo,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let s = user_key(start)?;
        let e = match end {
            Some(e) => user_key(e)?,
            None => vec![KEY_USER + 1],
        };
        Ok(self.tree.range(io, &s, Some(&e), limit)?.into_iter().map(|(mut k, v)| (k.split_off(1), v)).collect())
    }

    /// Write this volume's frozen changes (`freeze`) as txg `txg`: data records, block
    /// trees, dnodes, then the volume tree. Returns the blocks it no longer references.
    /// What was written since the freeze stays dirty for the next txg; the live dnodes take
    /// the new block-tree roots.
    pub fn sync(&mut self, io: &BlockIo, alloc: &mut Allocator, ddt: &mut DedupTable, txg: u64) -> Result<Released> {
        let Frozen { records, dnodes, .. } = self.frozen.take().expect("a volume is frozen before it syncs");
        let mut dnodes: BTreeMap<ObjectId, DnodePhys> = dnodes.into_iter().collect();
        // Prewritten blocks whose record is still that content (and of this txg) are used
        // as they are; the others were never referenced by anything and are freed first
        // (before the allocation count below is taken).
        let mut prewritten = std::mem::take(&mut self.prewritten);
        let mut dirty: BTreeMap<(ObjectId, u64), Placement> = BTreeMap::new();
        for (k, c) in records {
            let placement = match (prewritten.remove(&k), c) {
                (Some(pw), Some(c)) if Arc::ptr_eq(&pw.content, &c) && pw.bp.birth_txg == txg => {
                    Placement::Prewritten(pw.bp)
                }
                (pw, c) => {
                    if let Some(pw) = pw {
                        ddt.free(alloc, &pw.bp, txg)?;
                    }
                    Placement::Content(c)
                }
            };
            dirty.insert(k, placement);
        }
        for (_, pw) in prewritten.drain() {
            ddt.free(alloc, &pw.bp, txg)?;
        }
        // Space is charged in sectors (`BlockPtr::sectors`): units of the plain blocks this
        // sync allocates (data and metadata), the sectors of the records it packs, and the
        // blocks written ahead (prewritten) or shared from a clone's origin.
        let prewritten_sectors: u64 =
            dirty.values().map(|c| if let Placement::Prewritten(bp) = c { bp.sectors() } else { 0 }).sum();
        let plain_before = alloc.plain_units_allocated();
        let mut mine = std::mem::take(&mut self.released);
        let shared = std::mem::take(&mut self.shared_records);
        let shared_sectors: u64 = shared.values().map(|bp| bp.sectors()).sum();
        dirty.extend(shared.into_iter().map(|(k, bp)| (k, Placement::Block(bp))));
        let mut saved_added = 0u64;
        // Compress every non-zero record first, on all cores (compress.rs); the write-out
        // below then takes the results in the same (key) order.
        let (inputs, lsizes): (Vec<&[u8]>, Vec<usize>) = dirty
            .values()
            .filter_map(|c| match c {
                Placement::Content(Some(buf)) => Some((crate::pipeline::trimmed(buf), buf.len())),
                _ => None,
            })
            .filter(|(t, _)| !t.is_empty())
            .unzip();
        let compressed = crate::pipeline::compress::compress_batch(self.rec.compression, &inputs);
        // Dedup references first (nothing to write), then packs for the small new records.
        let (mut placed, dedup_sectors) = match self.rec.dedup {
            true => dedup_records(ddt, &inputs, &compressed, &lsizes, txg),
            false => (vec![None; compressed.len()], 0),
        };
        let packed_sectors = pack_records(io, alloc, ddt, &compressed, &lsizes, txg, &mut placed, self.rec.dedup)?;
        let mut compressed = compressed.into_iter().zip(placed);
        // A record written again since the freeze: the version this txg commits is read by
        // nobody (the volume reads the newer one; no snapshot is taken at this txg) and is
        // freed by the next — out of the data cache with it, so that its buffer goes when
        // the frozen set does (memory: see `overwrite_record`).
        let live = &self.dirty_records;
        let no_snapshot = self.pending_snapshots.is_empty();
        let superseded = |obj: ObjectId, r: u64| no_snapshot && live.contains_key(&(obj, r));
        let mut it = dirty.into_iter().peekable();
        while let Some(((obj, recno), content)) = it.next() {
            let mut group = vec![(recno, content)];
            while let Some(((o, _), _)) = it.peek() {
                if *o != obj {
                    break;
                }
                let ((_, r), c) = it.next().expect("peeked");
                group.push((r, c));
            }
            let mut updates = Vec::with_capacity(group.len());
            for (r, content) in group {
                let bp = match content {
                    Placement::Content(Some(buf)) if buf.iter().any(|&b| b != 0) => {
                        let bp = match compressed.next().expect("one compression result per non-zero record") {
                            (_, Some(placed)) => placed,
                            (c, None) => {
                                let mut bp = io.write_data_compressed(alloc, &buf, txg, self.rec.compression, c)?;
                                bp.dedup = self.rec.dedup && ddt.add(&bp, txg);
                                bp
                            }
                        };
                        // Cached as a prewrite caches what it writes: what was written is
                        // read again, and a record that missed the prewrite (rewritten
                        // after it) is no less likely to be — unless it was rewritten again
                        // since the freeze (see `superseded` below).
                        if !superseded(obj, r) {
                            io.cache_data(&bp, buf);
                        }
                        bp
                    }
                    Placement::Content(Some(_)) => {
                        // Zero detection: an all-zero record the application wrote is a hole.
                        io.stats.zero_records_elided.fetch_add(1, crate::sync::atomic::Ordering::Relaxed);
                        BlockPtr::HOLE
                    }
                    Placement::Content(None) => BlockPtr::HOLE,
                    Placement::Prewritten(bp) => {
                        if superseded(obj, r) && !bp.dedup && !bp.packed {
                            io.forget(&[(bp.addr, bp.birth_txg)]);
                        }
                        bp
                    }
                    Placement::Block(bp) => bp,
                };
                saved_added += data_saved_bytes(&bp);
                updates.push((r, bp));
            }
            let dn = match dnodes.entry(obj) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                // A restore's shared records may name an object whose dnode did not change.
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(self.objects.get(&obj).expect("objects with dirty records stay cached").dnode.clone())
                }
            };
            let max_rec = updates.last().expect("group is non-empty").0;
            let new_levels = dn.levels.max(blocktree::levels_for(max_rec));
            let released_before = mine.len();
            dn.root = blocktree::update(io, alloc, dn.root, dn.levels, new_levels, &updates, txg, &mut mine)?;
            dn.levels = new_levels;
            let added: u64 = updates.iter().map(|(_, bp)| bp.sectors()).sum();
            let dropped: u64 =
                mine[released_before..].iter().filter(|bp| bp.kind == BlockKind::Data).map(|bp| bp.sectors()).sum();
            let figure = || format!("volume {} object {} data", self.name, obj.0);
            dn.data_sectors = space_after("dnode", figure, dn.data_sectors, added, dropped)?;
        }
        for (obj, dn) in &dnodes {
            self.tree.insert(io, &dnode_key(*obj), &dn.encode())?;
            // The live dnode (its size and attribute may have moved on since the freeze)
            // now hangs off the tree this txg wrote.
            if let Some(st) = self.objects.get_mut(obj) {
                st.dnode.root = dn.root;
                st.dnode.levels = dn.levels;
                st.dnode.data_sectors = dn.data_sectors;
            }
        }
        self.rec.tree_root = self.tree.write(io, alloc, txg)?;
        mine.extend(self.tree.take_released());
        let added = (alloc.plain_units_allocated() - plain_before) * SECTORS_PER_UNIT
            + packed_sectors
            + dedup_sectors
            + prewritten_sectors;
        let dropped: u64 = mine.iter().map(|bp| bp.sectors()).sum();
        let figure = |f: &str| format!("volume {} {f}", self.name);
        self.rec.used_sectors =
            space_after("volume record", || figure("used"), self.rec.used_sectors, added + shared_sectors, dropped)?;
        if let Some(saved) = self.rec.saved_bytes {
            // Savings come from disk: if they do not add up, stop tracking them (shown as
            // unknown, noted by the checker) rather than report a wrong figure or panic.
            let saved_dropped: u64 = mine.iter().map(data_saved_bytes).sum();
            self.rec.saved_bytes = saved.checked_add(saved_added).and_then(|s| s.checked_sub(saved_dropped));
        }
        let (dead, freed): (Vec<BlockPtr>, Vec<BlockPtr>) =
            mine.into_iter().partition(|bp| bp.birth_txg <= self.parent_txg);
        let freed_sectors: u64 = freed.iter().map(|bp| bp.sectors()).sum();
        // Blocks born after the parent snapshot are this head's alone ("written").
        self.rec.written_sectors =
            space_after("volume record", || figure("written"), self.rec.written_sectors, added, freed_sectors)?;
        self.rec.total_sectors =
            space_after("volume record", || figure("total"), self.rec.total_sectors, added, freed_sectors)?;
        if self.objects.len() > DNODE_CACHE_MAX {
            self.objects.retain(|_, st| st.dirty);
        }
        Ok(Released { freed, dead })
    }
}

/// What a data block saves against storing its whole record raw: lsize − occupied bytes
/// (compression and zero-tail trimming). Zero for holes and metadata.
pub(crate) fn data_saved_bytes(bp: &BlockPtr) -> u64 {
    if bp.is_hole() || bp.kind != BlockKind::Data {
        return 0;
    }
    (bp.lsize as u64).saturating_sub(bp.sectors() * SECTOR_SIZE)
}

/// What a record becomes when the txg syncs.
enum Placement {
    /// New contents (None: a hole).
    Content(Option<Arc<Vec<u8>>>),
    /// An existing block, shared back from a snapshot.
    Block(BlockPtr),
    /// A block of this txg already holding the contents (prewrite.rs).
    Prewritten(BlockPtr),
}

/// Units a dirty record may take when written: the record plus a unit for its share of
/// the tree above it (one indirect block serves up to 256 records; B+tree nodes far more).
fn record_units(dn: &DnodePhys) -> u64 {
    dn.record_size as u64 / UNIT_SIZE + 1
}
