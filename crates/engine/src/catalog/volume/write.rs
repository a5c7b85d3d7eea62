//! Writes into an object's records: the caller's bytes copied into them, whole records in
//! place when nothing else holds them.
//!
//! Tried and dropped (52775e7, docs/benchmarks/block-luns.md): taking buffers the caller
//! gives away as whole records (an NBD WRITE's payload read straight into record-sized
//! buffers). The copy it saves costs less than the allocations and page faults of buffers
//! a commit in flight keeps from being reused in place.

use super::{record_units, ObjectId, VolumeState, MAX_OBJECT_BYTES};
use crate::alloc::Allocator;
use crate::error::{Error, Result};
use crate::format::records::DnodePhys;
use crate::pipeline::BlockIo;
use crate::tree::blocktree;
use std::sync::Arc;

impl VolumeState {
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
        let fresh = self.dirty.clean_records(obj, first, last);
        self.reserve(alloc, fresh * record_units(&dn))?;
        let records = last - first + 1;
        self.dirty.rewritten_bytes += data.len() as u64 / records * (records - fresh);
        // Read the partly-covered edge records before changing anything, so that a read
        // error leaves the object as it was (loading a record unchanged is invisible).
        let partial = |r: u64| offset > r * rs || end < (r + 1) * rs;
        for r in [first, last] {
            if partial(r) {
                self.dirty_record(io, alloc, &dn, obj, r, false, true)?;
            }
        }
        let (mut tree, mut forget) = (blocktree::Cursor::new(), Vec::new());
        let mut pos = offset;
        while pos < end {
            let recno = pos / rs;
            let in_rec = (pos % rs) as usize;
            let n = ((rs - pos % rs).min(end - pos)) as usize;
            let src = &data[(pos - offset) as usize..(pos - offset) as usize + n];
            if in_rec == 0 && n as u64 == rs {
                self.overwrite_record(io, &dn, obj, recno, src, &mut tree, &mut forget);
            } else {
                let rec = self.dirty_record(io, alloc, &dn, obj, recno, false, true)?;
                rec[in_rec..in_rec + n].copy_from_slice(src);
            }
            pos += n as u64;
        }
        io.forget(&forget);
        let st = self.dnode(io, obj)?;
        if end > st.dnode.size {
            st.dnode.size = end;
        }
        st.dirty = true;
        self.dirty.changed = true;
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
    /// `tree` looks the old block up (one tree walk per indirect block for a long write);
    /// the cached copies to drop are added to `forget`, for the caller to drop in one go.
    #[allow(clippy::too_many_arguments)]
    fn overwrite_record(
        &mut self,
        io: &BlockIo,
        dn: &DnodePhys,
        obj: ObjectId,
        recno: u64,
        src: &[u8],
        tree: &mut blocktree::Cursor,
        forget: &mut Vec<(u64, u64)>,
    ) {
        match self.dirty.records.get_mut(&(obj, recno)) {
            Some(Some(rec)) => {
                if let Some(buf) = Arc::get_mut(rec).filter(|b| b.len() == src.len()) {
                    buf.copy_from_slice(src);
                    return;
                }
            }
            Some(None) => {}
            None => {
                let frozen = self.dirty.frozen.as_ref().is_some_and(|f| f.records.contains_key(&(obj, recno)));
                if !frozen {
                    // From cached metadata only: a write must not wait for a read here.
                    let old = tree.lookup_cached(io, &dn.root, dn.levels, recno);
                    if let Some(bp) = old.filter(|bp| !bp.is_hole() && self.record.only_this_head_reads(bp)) {
                        forget.push((bp.addr, bp.birth_txg));
                    }
                }
            }
        }
        // No zeroing first, no copy of the old content a prewrite still holds.
        self.dirty.replace_record(obj, recno, src.to_vec());
    }
}
