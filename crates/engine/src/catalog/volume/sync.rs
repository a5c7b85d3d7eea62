//! A volume's commit: `VolumeState::sync` writes the frozen dirty set (freeze.rs) as a
//! txg — data records (compressed, deduplicated or packed: pack.rs), the block trees, the
//! dnodes and the object set's tree — and charges what it wrote and released to the
//! volume record's space figures.
//!
//! Runs under the pool's lock (`Pool::inner`, the lock table in pool/mod.rs), in the
//! commit's last step (pool/commit.rs), while writes of the next txg may already have
//! added to the live dirty set: it reads those (a record written again since the freeze)
//! but changes only the frozen set, the object set's tree, the dnodes' block-tree roots and
//! the volume record.

use super::freeze::Frozen;
use super::pack::{dedup_records, pack_records};
use super::{ObjectId, VolumeState};
use crate::alloc::Allocator;
use crate::error::{Corruption, Result};
use crate::format::records::DnodePhys;
use crate::format::{BlockKind, BlockPtr, SECTORS_PER_UNIT, SECTOR_SIZE};
use crate::pipeline::dedup::DedupTable;
use crate::pipeline::BlockIo;
use crate::tree::blocktree;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a volume's sync stopped referencing: blocks only it held (free them), and blocks
/// its parent snapshot still holds (the deadlist).
#[derive(Default)]
pub struct Released {
    pub freed: Vec<BlockPtr>,
    pub dead: Vec<BlockPtr>,
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

impl VolumeState {
    /// Write this volume's frozen changes (`freeze`) as txg `txg`: data records, block
    /// trees, dnodes, then the volume tree. Returns the blocks it no longer references.
    /// What was written since the freeze stays dirty for the next txg; the live dnodes take
    /// the new block-tree roots.
    pub fn sync(&mut self, io: &BlockIo, alloc: &mut Allocator, ddt: &mut DedupTable, txg: u64) -> Result<Released> {
        let Frozen { records, dnodes, .. } = self.dirty.frozen.take().expect("a volume is frozen before it syncs");
        let mut dnodes: BTreeMap<ObjectId, DnodePhys> = dnodes.into_iter().collect();
        // Prewritten blocks whose record is still that content (and of this txg) are used
        // as they are; the others were never referenced by anything and are freed first
        // (before the allocation count below is taken).
        let mut prewritten = std::mem::take(&mut self.dirty.prewritten);
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
        // The emptied map goes back with its room (up to twice this txg's records): the next
        // txg prewrites about as many, and growing the map from nothing again cost every
        // commit of a streaming writer page faults for tens of MiB (a 1 MiB LUN write).
        prewritten.shrink_to(dirty.len().saturating_mul(2));
        self.dirty.prewritten = prewritten;
        // Space is charged in sectors (`BlockPtr::sectors`): units of the plain blocks this
        // sync allocates (data and metadata), the sectors of the records it packs, and the
        // blocks written ahead (prewritten) or shared from a clone's origin.
        let prewritten_sectors: u64 =
            dirty.values().map(|c| if let Placement::Prewritten(bp) = c { bp.sectors() } else { 0 }).sum();
        let plain_before = alloc.plain_units_allocated();
        let mut mine = std::mem::take(&mut self.dirty.released);
        let shared = std::mem::take(&mut self.dirty.shared_records);
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
        let compressed = crate::pipeline::compress::compress_batch(self.record.phys.compression, &inputs);
        // Dedup references first (nothing to write), then packs for the small new records.
        let (mut placed, dedup_sectors) = match self.record.phys.dedup {
            true => dedup_records(ddt, &inputs, &compressed, &lsizes, txg),
            false => (vec![None; compressed.len()], 0),
        };
        let packed_sectors =
            pack_records(io, alloc, ddt, &compressed, &lsizes, txg, &mut placed, self.record.phys.dedup)?;
        let mut compressed = compressed.into_iter().zip(placed);
        // A record written again since the freeze: the version this txg commits is read by
        // nobody (the volume reads the newer one; no snapshot is taken at this txg) and is
        // freed by the next — out of the data cache with it, so that its buffer goes when
        // the frozen set does (memory: see `overwrite_record`).
        let live = &self.dirty.records;
        let no_snapshot = self.dirty.pending_snapshots.is_empty();
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
                                let mut bp =
                                    io.write_data_compressed(alloc, &buf, txg, self.record.phys.compression, c)?;
                                bp.dedup = self.record.phys.dedup && ddt.add(&bp, txg);
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
                std::collections::btree_map::Entry::Vacant(e) => e.insert(
                    self.objset.objects.get(&obj).expect("objects with dirty records stay cached").dnode.clone(),
                ),
            };
            let max_rec = updates.last().expect("group is non-empty").0;
            let new_levels = dn.levels.max(blocktree::levels_for(max_rec));
            let released_before = mine.len();
            dn.root = blocktree::update(io, alloc, dn.root, dn.levels, new_levels, &updates, txg, &mut mine)?;
            dn.levels = new_levels;
            let added: u64 = updates.iter().map(|(_, bp)| bp.sectors()).sum();
            let dropped: u64 =
                mine[released_before..].iter().filter(|bp| bp.kind == BlockKind::Data).map(|bp| bp.sectors()).sum();
            let figure = || format!("volume {} object {} data", self.record.name, obj.0);
            dn.data_sectors = space_after("dnode", figure, dn.data_sectors, added, dropped)?;
        }
        for (obj, dn) in &dnodes {
            self.objset.store_dnode(io, *obj, dn)?;
        }
        self.record.phys.tree_root = self.objset.tree.write(io, alloc, txg)?;
        mine.extend(self.objset.tree.take_released());
        let added = (alloc.plain_units_allocated() - plain_before) * SECTORS_PER_UNIT
            + packed_sectors
            + dedup_sectors
            + prewritten_sectors;
        let dropped: u64 = mine.iter().map(|bp| bp.sectors()).sum();
        let figure = |f: &str| format!("volume {} {f}", self.record.name);
        self.record.phys.used_sectors = space_after(
            "volume record",
            || figure("used"),
            self.record.phys.used_sectors,
            added + shared_sectors,
            dropped,
        )?;
        if let Some(saved) = self.record.phys.saved_bytes {
            // Savings come from disk: if they do not add up, stop tracking them (shown as
            // unknown, noted by the checker) rather than report a wrong figure or panic.
            let saved_dropped: u64 = mine.iter().map(data_saved_bytes).sum();
            self.record.phys.saved_bytes = saved.checked_add(saved_added).and_then(|s| s.checked_sub(saved_dropped));
        }
        let (dead, freed): (Vec<BlockPtr>, Vec<BlockPtr>) =
            mine.into_iter().partition(|bp| bp.birth_txg <= self.record.parent_txg);
        let freed_sectors: u64 = freed.iter().map(|bp| bp.sectors()).sum();
        // Blocks born after the parent snapshot are this head's alone ("written").
        self.record.phys.written_sectors =
            space_after("volume record", || figure("written"), self.record.phys.written_sectors, added, freed_sectors)?;
        self.record.phys.total_sectors =
            space_after("volume record", || figure("total"), self.record.phys.total_sectors, added, freed_sectors)?;
        self.objset.trim_cache();
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
