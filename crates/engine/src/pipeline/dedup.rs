//! Deduplication: identical data records stored once (docs/efficiency.md "Deduplication").
//!
//! A volume with dedup on looks up every data record it is about to write by the BLAKE3
//! checksum of its stored bytes (after compression). A hit becomes a *reference*: a block
//! pointer with the DEDUP flag, the block's address, sizes and checksum, born in the txg
//! that made it; nothing is written. A miss is written as usual (packed or not) and entered
//! in the table with one reference. The table counts the DEDUP pointers to each block over
//! every tree, snapshot and deadlist; `Allocator::free_block` drops one per release and frees
//! the block with the last — the same exactly-once release that makes the pack counts exact.
//!
//! Two rules keep every pointer distinct by (address, birth), which the deadlists, the
//! snapshot accounting and the checker key on: a block gets at most one new reference per
//! txg (`last_ref_txg`; more identical records in that txg are stored as new blocks), and
//! a reference must match the entry's logical size and compression.
//!
//! Memory: the table is held whole (about 100 bytes per entry, estimated from the layout) and bounded by
//! `PoolOptions::dedup_table_max`; when full, new unique records are stored without an entry
//! (ZFS's dedup quota), references to existing entries go on. The table is persisted in the
//! catalog with every commit (key space `format::space::KEY_DEDUP`), so it is exactly as
//! crash-safe as the trees it counts; the checker recounts it.

use crate::alloc::Allocator;
use crate::error::Corruption;
use crate::format::space::DedupPhys;
use crate::format::{BlockKind, BlockPtr, ChecksumAlgo, Compression};
use std::collections::{BTreeSet, HashMap};

/// Entries kept by default: 256 Ki (roughly 25 MiB, estimated), 4 GiB of unique 16 KiB records.
pub const DEDUP_TABLE_MAX_DEFAULT: usize = 256 * 1024;

struct Entry {
    phys: DedupPhys,
    /// The txg of the newest reference made (0 after a reopen: every txg is newer).
    last_ref_txg: u64,
}

pub struct DedupTable {
    entries: HashMap<[u8; 32], Entry>,
    dirty: BTreeSet<[u8; 32]>,
    max_entries: usize,
    /// Σ over entries of (refs − 1) × the block's sectors: what dedup saves.
    saved_sectors: u64,
}

fn sectors(p: &DedupPhys) -> u64 {
    block_of(&[0; 32], p, 1).sectors()
}

/// The pointer of a reference to the block `p` holds, born in `txg`.
fn block_of(hash: &[u8; 32], p: &DedupPhys, txg: u64) -> BlockPtr {
    BlockPtr {
        addr: p.addr,
        birth_txg: txg,
        psize: p.psize,
        lsize: p.lsize,
        device: 0,
        kind: BlockKind::Data,
        compression: p.compression,
        checksum_algo: ChecksumAlgo::Blake3,
        packed: p.packed,
        dedup: true,
        checksum: *hash,
    }
}

impl DedupTable {
    pub fn new(max_entries: usize) -> DedupTable {
        DedupTable { entries: HashMap::new(), dirty: BTreeSet::new(), max_entries, saved_sectors: 0 }
    }

    pub fn set_max_entries(&mut self, max: usize) {
        self.max_entries = max;
    }

    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sectors the references beyond each block's first save.
    pub fn saved_sectors(&self) -> u64 {
        self.saved_sectors
    }

    /// A new reference, born in `txg`, to the block whose stored bytes hash to `hash`, if
    /// the table has one of this logical size and compression that got no reference in
    /// `txg` yet.
    pub fn reference(&mut self, hash: &[u8; 32], lsize: usize, compression: Compression, txg: u64) -> Option<BlockPtr> {
        let e = self.entries.get_mut(hash)?;
        if e.last_ref_txg == txg || e.phys.lsize as usize != lsize || e.phys.compression != compression {
            return None;
        }
        e.phys.refs = e.phys.refs.checked_add(1)?;
        e.last_ref_txg = txg;
        self.saved_sectors += sectors(&e.phys);
        self.dirty.insert(*hash);
        Some(block_of(hash, &e.phys, txg))
    }

    /// Enter `bp`, a data block just written in `txg`, as the first reference to its
    /// contents. False (and `bp` stays an ordinary block) when the table is full, the
    /// contents are in it already, or the block has no BLAKE3 checksum.
    pub fn add(&mut self, bp: &BlockPtr, txg: u64) -> bool {
        if self.entries.len() >= self.max_entries
            || bp.checksum_algo != ChecksumAlgo::Blake3
            || bp.kind != BlockKind::Data
            || self.entries.contains_key(&bp.checksum)
        {
            return false;
        }
        let phys = DedupPhys {
            addr: bp.addr,
            psize: bp.psize,
            lsize: bp.lsize,
            compression: bp.compression,
            packed: bp.packed,
            refs: 1,
        };
        self.entries.insert(bp.checksum, Entry { phys, last_ref_txg: txg });
        self.dirty.insert(bp.checksum);
        true
    }

    /// Release `bp` in txg `txg`: the one way every block that may be shared is freed. A
    /// dedup reference decrements its table entry, and only the last frees the block in
    /// the allocator (`Allocator::free_block`). An error for a dedup pointer the table does
    /// not hold: damage the commit must not paper over.
    pub fn free(&mut self, alloc: &mut Allocator, bp: &BlockPtr, txg: u64) -> Result<(), Corruption> {
        if !bp.packed {
            // Checked before the table drops a reference: a refused free changes nothing.
            alloc.freeable(bp.addr, bp.units())?;
        }
        if bp.dedup && !self.release(bp)? {
            return Ok(());
        }
        alloc.free_block(bp, txg)
    }

    /// Drop the reference `bp`. True when it was the last: the caller frees the block.
    pub fn release(&mut self, bp: &BlockPtr) -> Result<bool, Corruption> {
        let matches = |e: &Entry| e.phys.addr == bp.addr && e.phys.psize == bp.psize && e.phys.packed == bp.packed;
        let Some(e) = self.entries.get_mut(&bp.checksum).filter(|e| matches(e)) else {
            return Err(Corruption::new(
                "dedup block pointer",
                Some(bp.addr),
                format!("the dedup table has no entry for it (birth txg {}); run `strata check`", bp.birth_txg),
            ));
        };
        self.dirty.insert(bp.checksum);
        e.phys.refs -= 1;
        if e.phys.refs == 0 {
            self.entries.remove(&bp.checksum);
            return Ok(true);
        }
        self.saved_sectors -= sectors(&e.phys);
        Ok(false)
    }

    /// The entry for `hash`, as the table holds it now.
    pub fn get(&self, hash: &[u8; 32]) -> Option<DedupPhys> {
        self.entries.get(hash).map(|e| e.phys)
    }

    /// Changes since the last call: (hash, entry; None = gone).
    pub fn take_dirty(&mut self) -> Vec<([u8; 32], Option<DedupPhys>)> {
        std::mem::take(&mut self.dirty).into_iter().map(|h| (h, self.get(&h))).collect()
    }

    /// Load the table as committed (opening a pool; all of it, whatever the maximum).
    pub fn load(&mut self, entries: impl IntoIterator<Item = ([u8; 32], DedupPhys)>) {
        for (hash, phys) in entries {
            self.saved_sectors += (phys.refs as u64 - 1) * sectors(&phys);
            self.entries.insert(hash, Entry { phys, last_ref_txg: 0 });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(addr: u64) -> BlockPtr {
        BlockPtr {
            addr,
            birth_txg: 3,
            psize: 5000,
            lsize: 16384,
            kind: BlockKind::Data,
            checksum_algo: ChecksumAlgo::Blake3,
            checksum: [(addr >> 20) as u8; 32],
            ..BlockPtr::HOLE
        }
    }

    #[test]
    fn references_are_counted_once_per_txg_and_released_to_the_last() {
        let mut t = DedupTable::new(2);
        let b = block(1 << 20);
        assert!(t.add(&b, 3));
        assert!(t.reference(&b.checksum, 16384, Compression::None, 3).is_none(), "one reference per txg");
        let r = t.reference(&b.checksum, 16384, Compression::None, 4).unwrap();
        assert_eq!((r.addr, r.birth_txg, r.dedup), (b.addr, 4, true));
        assert!(t.reference(&b.checksum, 8192, Compression::None, 5).is_none(), "another logical size");
        assert_eq!(t.saved_sectors(), 16);
        assert!(!t.release(&r).unwrap());
        assert!(t.release(&b).unwrap(), "the last reference frees the block");
        assert!(t.is_empty());
        assert!(t.release(&b).is_err(), "a reference the table does not know is reported");
        // Bounded: a full table takes no new entries.
        assert!(t.add(&block(2 << 20), 1) && t.add(&block(3 << 20), 1));
        assert!(!t.add(&block(4 << 20), 1));
        assert_eq!(t.take_dirty().len(), 3);
    }
}
