//! The allocator: free space of the data area, one bit per unit, persisted as the space
//! map (format::spacemap), with deferred reuse of freed units (DESIGN.md §3.4).
//!
//! Two bitmaps are kept:
//! - `persisted`: the pool state being built by the open txg: 1 = referenced by that
//!   state. A free clears the bit at once, so the space map written with txg N describes
//!   exactly the blocks reachable from root N (the checker compares the two for equality).
//! - `unavailable`: `persisted` plus units that were freed but may not be reused yet.
//!   Units freed in txg F are held until txg F + 1 is durable, so they are reused no earlier
//!   than txg F + 2 (ZFS's TXG_DEFER_SIZE). Until then the roots F - 1 and F still find their
//!   blocks intact, which is what lets opening fall back one root past a damaged newest one.
//!
//! Read pins (pool/read_pin.rs) extend the hold: while a read planned in open txg P is in
//! flight outside the pool's lock, nothing freed in txg P or later is released
//! (`set_oldest_read_pin`), so the blocks that read planned are not reused under it.
//!
//! The holds live in memory only. After a crash the pool reopens at some root R; units
//! freed in R are then reusable at once, so fallback *past* R (to R - 1) is no longer
//! guaranteed during the first txg after the reopen. Fallback is verified (every block is
//! checksummed), so the worst case is a refused fallback, never wrong data. A persistent
//! defer list would close that gap; it is noted in docs/engine-format.md.
//!
//! Packs (compaction): small compressed data records of a txg are written side by side,
//! at sector offsets, into a *pack* of 1–8 units allocated as one run. The pack table maps
//! each pack's address to its units and the number of packed block pointers that still
//! reference it (`live`). Every release of a block goes through `free_block`: an ordinary
//! block frees its units; a packed record decrements its pack, and the pack's units are
//! freed (with the usual deferral) with its last record. The count is exact because the
//! engine releases every block pointer exactly once in its life (overwritten in the live
//! tree, or dropped with the snapshot whose deadlist held it). The table is persisted in
//! the catalog with every commit (`take_dirty_packs`, key space `format::space::KEY_PACK`),
//! so it is exactly as crash-safe as the trees it counts; the checker recounts it.
//!
//! Allocation is next-fit from a cursor: sequential writes of a txg land next to each
//! other on the device. A linear scan: fine for pools of a few TiB (bitmap 32 MiB/TiB);
//! a per-chunk free count skips full chunks.

use crate::device::BlockDevice;
use crate::error::{Corruption, Error, Result, SpaceReason};
use crate::format::space::{PackPhys, PACK_UNITS_MAX};
use crate::format::spacemap::{SpacemapChunkPhys, BITS_PER_CHUNK, CHUNK_BITS_BYTES, CHUNK_SLOT_SIZE};
use crate::format::{BlockPtr, UNIT_SIZE};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod geometry;
mod rows;
pub use geometry::{Geometry, Segment};
pub use rows::RowLayout;
use rows::RowState;

/// Txgs a freed unit stays unavailable: freed in F, reusable from F + DEFER_TXGS.
pub const DEFER_TXGS: u64 = 2;

pub struct Allocator {
    geo: Geometry,
    persisted: Vec<u64>,
    unavailable: Vec<u64>,
    allocated_units: u64,
    unavailable_units: u64,
    chunk_unavailable: Vec<u64>,
    /// Per chunk: (slot, txg) of its newest committed version.
    chunk_current: Vec<Option<(u8, u64)>>,
    /// Chunks written by the txg being synced, applied to `chunk_current` on commit.
    chunk_pending: Vec<(u64, u8, u64)>,
    dirty_chunks: BTreeSet<u64>,
    /// (txg freed in, unit, count) held back from reuse.
    held: VecDeque<(u64, u64, u64)>,
    /// The open txg of the oldest read in flight (pool/read_pin.rs): what was freed in it or
    /// later stays held.
    oldest_read_pin: Option<u64>,
    cursor: u64,
    reserved_units: u64,
    /// The pack table: pack address → units and live records.
    packs: BTreeMap<u64, PackPhys>,
    /// Packs created, changed or emptied since the last commit wrote the table.
    dirty_packs: BTreeSet<u64>,
    /// Units allocated for blocks that are not packs, ever (the commit's accounting takes
    /// differences of it: packed records are charged their sectors instead).
    plain_units_allocated: u64,
    /// (address, birth txg) of blocks freed since the data cache last forgot them
    /// (`BlockIo::forget`, when their txg commits): a freed block is never read again.
    freed_keys: Vec<(u64, u64)>,
    /// The rows of each parity2 device set among the groups (rows.rs); empty for others.
    rows: Vec<RowState>,
    /// Which group allocation is filling, with several groups (see `Stripe`).
    stripe: Stripe,
    /// Units of each chunk that exist (`Geometry::chunk_units`), for the allocation scan.
    chunk_len: Vec<u64>,
}

/// Units a group takes before allocation moves to the next group: 1 MiB (a pool of several
/// groups spreads its writes over all of them, as a ZFS pool does over its vdevs).
pub const STRIPE_UNITS: u64 = 256;

/// Striping over device groups: the group being filled, units left before the next, and
/// each group's cursor.
#[derive(Debug, Default)]
struct Stripe {
    group: usize,
    left: u64,
    cursors: Vec<u64>,
}

fn bit(words: &[u64], i: u64) -> bool {
    words[(i / 64) as usize] >> (i % 64) & 1 == 1
}
fn set(words: &mut [u64], i: u64, v: bool) {
    let w = &mut words[(i / 64) as usize];
    if v {
        *w |= 1 << (i % 64)
    } else {
        *w &= !(1 << (i % 64))
    }
}

impl Allocator {
    /// A fresh pool: everything free, every chunk dirty (so the first commit writes the
    /// whole space map).
    pub fn new_empty(geo: Geometry) -> Allocator {
        let words = geo.index_units().div_ceil(64) as usize;
        let chunks = geo.total_chunks();
        let mut a = Allocator {
            geo,
            persisted: vec![0; words],
            unavailable: vec![0; words],
            allocated_units: 0,
            unavailable_units: 0,
            chunk_unavailable: vec![0; chunks as usize],
            chunk_current: vec![None; chunks as usize],
            chunk_pending: Vec::new(),
            dirty_chunks: (0..chunks).collect(),
            held: VecDeque::new(),
            oldest_read_pin: None,
            cursor: 0,
            reserved_units: 0,
            packs: BTreeMap::new(),
            dirty_packs: BTreeSet::new(),
            freed_keys: Vec::new(),
            plain_units_allocated: 0,
            rows: Vec::new(),
            stripe: Stripe::default(),
            chunk_len: Vec::new(),
        };
        a.chunk_len = (0..chunks).map(|c| a.geo.chunk_units(c)).collect();
        a.block_phantoms(0);
        a
    }

    /// Keep the unit numbers from `from` on that name no unit unavailable (not counted:
    /// they are neither free nor allocated).
    fn block_phantoms(&mut self, from: u64) {
        for r in self.geo.phantom_ranges() {
            for u in r.start.max(from)..r.end {
                set(&mut self.unavailable, u, true);
            }
        }
    }

    /// The pool grew by device groups (`Pool::add_group`): `geo` is the old geometry with
    /// groups added after the last. Their chunks are dirty (the next commit writes them);
    /// their units are free. Allocation stripes across the groups from now on.
    pub fn grow(&mut self, geo: Geometry) {
        assert!(geo.index_units() >= self.geo.index_units() && geo.groups.len() > self.geo.groups.len());
        let old_chunks = self.geo.total_chunks();
        let words = geo.index_units().div_ceil(64) as usize;
        self.persisted.resize(words, 0);
        self.unavailable.resize(words, 0);
        let chunks = geo.total_chunks();
        self.chunk_unavailable.resize(chunks as usize, 0);
        // The caller wrote each new chunk's empty version to slot 0 (`empty_chunk`): the
        // next commit writes slot 1.
        self.chunk_current.resize(chunks as usize, Some((0, 0)));
        self.dirty_chunks.extend(old_chunks..chunks);
        // The tail of the last chunk before the new groups was free bits past the end; it
        // is phantom now.
        self.geo = geo;
        self.chunk_len = (0..chunks).map(|c| self.geo.chunk_units(c)).collect();
        self.block_phantoms(0);
    }

    /// Chunk `c` as of txg 0, for each chunk of a group being added: an empty bitmap a root
    /// older than the group finds valid (it references nothing there). Written before the
    /// label names the group, so any root opened afterwards finds a version of every chunk.
    pub fn empty_chunk(c: u64, pool_guid: u64) -> Vec<u8> {
        SpacemapChunkPhys { chunk_index: c as u32, txg: 0, pool_guid, bits: vec![0; CHUNK_BITS_BYTES] }.encode()
    }

    /// Allocate in the rows of a parity2 device set from now on (rows.rs): the set that is
    /// the device group holding unit `layout.origin`.
    pub fn set_rows(&mut self, layout: RowLayout) {
        let (start, units) =
            self.geo.unit_ranges().rfind(|&(start, _)| start <= layout.origin).unwrap_or((0, self.geo.data_units));
        self.rows.retain(|r| r.start != start);
        self.rows.push(RowState::new(layout, &self.unavailable, start, start + units));
    }

    /// The rows holding unit `u`, if its group is a parity2 set.
    fn rows_at(&self, u: u64) -> Option<usize> {
        self.rows.iter().position(|r| r.holds(u))
    }

    /// The parity2 sets whose rows allocation keeps to: one per parity2 device group.
    pub fn row_sets(&self) -> usize {
        self.rows.len()
    }

    /// Free units kept from allocation because their row holds a block (rows.rs).
    pub fn trapped_units(&self) -> u64 {
        self.rows.iter().map(|r| r.trapped).sum()
    }

    /// End the open row: the next allocation starts a free row. For blocks acknowledged
    /// before their txg commits (intent-log blocks written by reference), before and after
    /// placing them.
    pub fn close_row(&mut self) {
        for rows in &mut self.rows {
            if let Some(r) = rows.open.take() {
                rows.trapped += rows.trapped_in(rows.busy(&self.unavailable, r));
                let next = rows.row_start(r + 1);
                if self.cursor > rows.row_start(r) && self.cursor < next {
                    self.cursor = next;
                }
            }
        }
    }

    /// Set or clear unit `u`'s unavailable bit, keeping the per-chunk counts and the
    /// trapped units of its row right.
    fn set_unavailable(&mut self, u: u64, v: bool) {
        if bit(&self.unavailable, u) == v {
            return;
        }
        let at = self.rows_at(u);
        let row = at.and_then(|i| self.rows[i].row_of(u).filter(|r| self.rows[i].open != Some(*r)));
        let before = row.zip(at).map(|(r, i)| self.rows[i].trapped_in(self.rows[i].busy(&self.unavailable, r)));
        set(&mut self.unavailable, u, v);
        let c = &mut self.chunk_unavailable[(u / BITS_PER_CHUNK) as usize];
        if v {
            *c += 1;
            self.unavailable_units += 1;
        } else {
            *c -= 1;
            self.unavailable_units -= 1;
        }
        if let (Some(r), Some(before), Some(rows)) = (row, before, at.map(|i| &mut self.rows[i])) {
            let after = rows.trapped_in(rows.busy(&self.unavailable, r));
            rows.trapped = rows.trapped + after - before;
        }
    }

    /// Read the space map as of root txg `root_txg`.
    pub fn load(dev: &dyn BlockDevice, geo: Geometry, pool_guid: u64, root_txg: u64) -> Result<Allocator> {
        let mut a = Allocator::new_empty(geo.clone());
        a.dirty_chunks.clear();
        let mut s = vec![0u8; CHUNK_SLOT_SIZE];
        for c in 0..geo.total_chunks() {
            let addr = geo.slot_addr(c, 0);
            let mut best: Option<(u8, SpacemapChunkPhys)> = None;
            for slot in 0..2u8 {
                let at = geo.slot_addr(c, slot);
                let usable = |ch: &SpacemapChunkPhys| {
                    ch.chunk_index as u64 == c && ch.pool_guid == pool_guid && ch.txg <= root_txg
                };
                // Of a device set's copies, the newest usable one (device/mirror.rs `read_best`).
                let score = |b: &[u8]| match SpacemapChunkPhys::decode(b, at) {
                    Ok(Some(ch)) if usable(&ch) => Some(ch.txg),
                    _ => None,
                };
                dev.read_best(&mut s, at, &score).map_err(|e| Error::io("read space map", e))?;
                // A damaged or torn slot is skipped: the other slot holds the committed version.
                if let Ok(Some(ch)) = SpacemapChunkPhys::decode(&s, at) {
                    if usable(&ch) && best.as_ref().is_none_or(|(_, b)| ch.txg > b.txg) {
                        best = Some((slot, ch));
                    }
                }
            }
            let (slot, ch) = best.ok_or_else(|| {
                Corruption::new(
                    "space map chunk",
                    Some(addr),
                    format!("no valid version of chunk {c} at or before txg {root_txg}"),
                )
            })?;
            a.chunk_current[c as usize] = Some((slot, ch.txg));
            let first = c * BITS_PER_CHUNK;
            let n = geo.chunk_units(c);
            for i in 0..n {
                if ch.bits[(i / 8) as usize] >> (i % 8) & 1 == 1 {
                    let u = first + i;
                    set(&mut a.persisted, u, true);
                    set(&mut a.unavailable, u, true);
                    a.allocated_units += 1;
                    a.chunk_unavailable[c as usize] += 1;
                }
            }
            // Bits past the data area must be clear: otherwise the chunk is not ours.
            if (n..BITS_PER_CHUNK).any(|i| ch.bits[(i / 8) as usize] >> (i % 8) & 1 == 1) {
                return Err(Corruption::new("space map chunk", Some(addr), "bits set past the data area").into());
            }
        }
        a.unavailable_units = a.allocated_units;
        Ok(a)
    }

    /// Rewrite every chunk in the next txg (after opening on a fallback root).
    pub fn mark_all_dirty(&mut self) {
        self.dirty_chunks = (0..self.geo.total_chunks()).collect();
    }

    pub fn has_dirty_chunks(&self) -> bool {
        !self.dirty_chunks.is_empty()
    }

    pub fn geometry(&self) -> Geometry {
        self.geo.clone()
    }
    pub fn allocated_units(&self) -> u64 {
        self.allocated_units
    }
    pub fn is_allocated(&self, unit: u64) -> bool {
        bit(&self.persisted, unit)
    }
    /// Units promised to dirty data of the open txg.
    pub fn reserved_units(&self) -> u64 {
        self.reserved_units
    }
    pub fn held_units(&self) -> u64 {
        self.unavailable_units - self.allocated_units
    }
    /// Units a new reservation may still take.
    pub fn available_units(&self) -> u64 {
        (self.geo.total_units() - self.unavailable_units - self.trapped_units())
            .saturating_sub(self.reserved_units + self.slop_units())
    }

    /// Space kept back from reservations so that a txg's own metadata (tree nodes,
    /// indirect blocks) can always be written: 1/64 of the pool, at least 64 units.
    pub fn slop_units(&self) -> u64 {
        let units = self.geo.total_units();
        (units / 64).max(64).min(units / 2)
    }

    /// Promise `units` to dirty data of the open txg; fails when the pool cannot hold it.
    pub fn reserve(&mut self, units: u64) -> bool {
        if units > self.available_units() {
            return false;
        }
        self.reserved_units += units;
        true
    }

    /// Give back `units` of reservations: their data has been allocated (a frozen record's
    /// prewritten block, pool/prewrite.rs). `reset_reservations` sets the exact figure again
    /// when the txg is durable.
    pub fn release_reserved(&mut self, units: u64) {
        self.reserved_units = self.reserved_units.saturating_sub(units);
    }

    /// A txg became durable: what its dirty data reserved is allocated now (or was never
    /// needed); `still_dirty` units stay promised to what was written since its freeze.
    pub fn reset_reservations(&mut self, still_dirty: u64) {
        self.reserved_units = still_dirty;
    }

    /// Mark `count` units from `unit` allocated. Only `allocate_run` calls this, on a run
    /// it has just found available: a unit allocated twice is a bug here, not damage.
    fn mark_allocated(&mut self, unit: u64, count: u64) {
        // The row left partly filled becomes the open one (rows.rs); the one open before
        // is closed first, so its free units count as trapped from now on.
        let at = self.rows_at(unit);
        let opens = at.map(|i| &self.rows[i]).and_then(|rows| {
            let end = unit + count;
            rows.row_of(end - 1).filter(|_| !(end - rows.layout.origin).is_multiple_of(rows.layout.width))
        });
        if let Some(rows) = at.map(|i| &mut self.rows[i]).filter(|r| unit >= r.layout.origin) {
            if let Some(r) = rows.open.take() {
                rows.trapped += rows.trapped_in(rows.busy(&self.unavailable, r));
            }
        }
        for u in unit..unit + count {
            debug_assert!(!bit(&self.unavailable, u), "allocating unit {u} twice");
            set(&mut self.persisted, u, true);
            self.set_unavailable(u, true);
            self.dirty_chunks.insert(u / BITS_PER_CHUNK);
        }
        self.allocated_units += count;
        if let (Some(r), Some(rows)) = (opens, at.map(|i| &mut self.rows[i])) {
            rows.trapped -= rows.trapped_in(rows.busy(&self.unavailable, r));
            rows.open = Some(r);
        }
    }

    /// The first unit of the `count` units at `addr`, if all of them may be freed: inside
    /// the data area and allocated. Anything else is a block pointer (or a space map) that
    /// does not match the pool — two pointers to one block, a pointer into free space or
    /// past the end — and freeing it would corrupt the space map: reported, not applied.
    pub(crate) fn freeable(&self, addr: u64, count: u64) -> std::result::Result<u64, Corruption> {
        let unit = self
            .geo
            .unit_of(addr)
            .ok_or_else(|| Corruption::new("block pointer", Some(addr), "freeing an address outside the data area"))?;
        let end = unit + count;
        if self.geo.run_of(addr, count).is_none() {
            return Err(Corruption::new(
                "block pointer",
                Some(addr),
                format!("freeing {count} units past the end of the data area"),
            ));
        }
        if let Some(u) = (unit..end).find(|&u| !bit(&self.persisted, u)) {
            return Err(Corruption::new(
                "block pointer",
                Some(addr),
                format!(
                    "freeing unit {u} that the space map holds free (a block referenced twice, or a pointer \
                     to free space); run `strata check`"
                ),
            ));
        }
        Ok(unit)
    }

    /// Allocate `count` contiguous units for one block; returns the byte address.
    pub fn allocate(&mut self, count: u64) -> Result<u64> {
        let addr = self.allocate_run(count)?;
        self.plain_units_allocated += count;
        Ok(addr)
    }

    /// Units ever allocated to blocks that are not packs (see the field).
    pub fn plain_units_allocated(&self) -> u64 {
        self.plain_units_allocated
    }

    /// Allocate a pack of `units` that `records` packed records will reference.
    pub fn allocate_pack(&mut self, units: u64, records: u32) -> Result<u64> {
        assert!(units >= 1 && units <= PACK_UNITS_MAX as u64 && records > 0);
        let addr = self.allocate_run(units)?;
        self.packs.insert(addr, PackPhys { units: units as u32, live: records });
        self.dirty_packs.insert(addr);
        Ok(addr)
    }

    /// The pack holding the packed record at `addr`: (pack address, entry).
    pub fn pack_of(&self, addr: u64) -> Option<(u64, PackPhys)> {
        let (&start, pack) = self.packs.range(..=addr).next_back()?;
        (addr < start + pack.units as u64 * UNIT_SIZE).then_some((start, *pack))
    }

    pub fn pack_count(&self) -> usize {
        self.packs.len()
    }

    /// Free `bp`'s space in txg `txg`: the last reference to it is gone. A packed record
    /// decrements its pack, whose units are freed with its last record. Returns an error
    /// for a packed pointer that no pack holds: damage the commit must not paper over.
    /// Blocks that may be deduplicated are released through their table
    /// (`pipeline::dedup::DedupTable::free`), which calls this for the last reference.
    pub fn free_block(&mut self, bp: &BlockPtr, txg: u64) -> std::result::Result<(), Corruption> {
        if !bp.packed {
            // Checked before anything changes: a refused free changes nothing.
            self.freeable(bp.addr, bp.units())?;
        }
        self.freed_keys.push((bp.addr, bp.birth_txg));
        if !bp.packed {
            return self.free(bp.addr, bp.units(), txg);
        }
        let Some((start, mut pack)) = self.pack_of(bp.addr) else {
            return Err(Corruption::new(
                "packed block pointer",
                Some(bp.addr),
                format!("no pack holds it (birth txg {}); run `strata check`", bp.birth_txg),
            ));
        };
        // A pack in the table holds at least one live record (decoded so, removed at zero).
        pack.live -= 1;
        if pack.live == 0 {
            self.free(start, pack.units as u64, txg)?;
            self.packs.remove(&start);
        } else {
            self.packs.insert(start, pack);
        }
        self.dirty_packs.insert(start);
        Ok(())
    }

    /// Blocks freed since the last call, for the data cache to drop (`BlockIo::forget`).
    pub(crate) fn take_freed_keys(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.freed_keys)
    }

    /// The pack table's changes since the last call: (address, entry; None = gone).
    pub fn take_dirty_packs(&mut self) -> Vec<(u64, Option<PackPhys>)> {
        std::mem::take(&mut self.dirty_packs).into_iter().map(|a| (a, self.packs.get(&a).copied())).collect()
    }

    /// Load the pack table as committed (opening a pool). Each pack must lie in the data
    /// area on allocated units and not overlap the one before it.
    /// Runs of units of `first..first + count` that are not free for allocation (allocated,
    /// or freed but held), as (first unit, units): what a rebuild must copy.
    pub fn unavailable_runs(&self, first: u64, count: u64) -> Vec<(u64, u64)> {
        let end = first.saturating_add(count).min(self.geo.index_units());
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut u = first;
        let phantoms = self.geo.phantom_ranges();
        while u < end {
            if let Some(p) = phantoms.iter().find(|p| p.contains(&u)) {
                u = p.end;
                continue;
            }
            // Whole words of free units at once: most of a young pool is free.
            if u.is_multiple_of(64) && u + 64 <= end && self.unavailable.get((u / 64) as usize) == Some(&0) {
                u += 64;
                continue;
            }
            if bit(&self.unavailable, u) {
                match runs.last_mut() {
                    Some((f, n)) if *f + *n == u => *n += 1,
                    _ => runs.push((u, 1)),
                }
            }
            u += 1;
        }
        runs
    }

    pub fn load_packs(&mut self, packs: impl IntoIterator<Item = (u64, PackPhys)>) -> Result<()> {
        let mut end = 0u64;
        for (addr, pack) in packs {
            let first = self.geo.run_of(addr, pack.units as u64);
            let ok = first.is_some_and(|u| (u..u + pack.units as u64).all(|i| bit(&self.persisted, i)));
            if !ok || addr < end {
                return Err(Corruption::new(
                    "pack table",
                    Some(addr),
                    format!(
                        "pack of {} units is outside the data area, on free units, or overlaps another",
                        pack.units
                    ),
                )
                .into());
            }
            end = addr + pack.units as u64 * UNIT_SIZE;
            self.packs.insert(addr, pack);
        }
        Ok(())
    }

    /// Allocate `count` contiguous units; returns the byte address.
    fn allocate_run(&mut self, count: u64) -> Result<u64> {
        assert!(count > 0 && count <= BITS_PER_CHUNK);
        let total = self.geo.index_units();
        let free = self.geo.total_units() - self.unavailable_units;
        if free < count {
            return Err(Error::no_space(SpaceReason::Pool, format!("pool has {free} free units, need {count}")));
        }
        let mut u = self.cursor % total;
        let mut scanned = 0u64;
        while scanned < total + count {
            let c = (u / BITS_PER_CHUNK) as usize;
            if self.chunk_unavailable[c] == self.chunk_len[c] {
                let next = (c as u64 + 1) * BITS_PER_CHUNK;
                scanned += next - u;
                u = if next >= total { 0 } else { next };
                continue;
            }
            if u.is_multiple_of(64) && self.unavailable[(u / 64) as usize] == u64::MAX {
                scanned += 64;
                u = if u + 64 >= total { 0 } else { u + 64 };
                continue;
            }
            if u + count > total {
                scanned += total - u;
                u = 0;
                continue;
            }
            let rows_ok = self.rows_at(u).map_or(Ok(()), |i| self.rows[i].run_ok(&self.unavailable, u, count));
            if let Err(next) = rows_ok {
                scanned += next - u;
                u = if next >= total { 0 } else { next };
                continue;
            }
            match (u..u + count).find(|&i| bit(&self.unavailable, i)) {
                None => {
                    self.mark_allocated(u, count);
                    self.cursor = u + count;
                    self.next_stripe(u, count);
                    return Ok(self.geo.addr_of(u));
                }
                Some(busy) => {
                    scanned += busy + 1 - u;
                    u = busy + 1;
                }
            }
        }
        Err(Error::no_space(SpaceReason::Pool, format!("no run of {count} free units (pool fragmented or full)")))
    }

    /// After `count` units were allocated at the cursor: with several device groups, move
    /// to the next group once this one has taken its stripe (each group keeps its cursor).
    fn next_stripe(&mut self, unit: u64, count: u64) {
        let groups = self.geo.groups.len() + 1;
        if groups == 1 {
            return;
        }
        let ranges: Vec<(u64, u64)> = self.geo.unit_ranges().collect();
        let st = &mut self.stripe;
        if st.cursors.len() != groups {
            st.cursors = ranges.iter().map(|&(first, _)| first).collect();
            st.left = STRIPE_UNITS;
        }
        let Some(g) = ranges.iter().rposition(|&(first, _)| first <= unit) else { return };
        if g != st.group {
            st.group = g;
            st.left = STRIPE_UNITS;
        }
        st.cursors[g] = unit + count;
        st.left = st.left.saturating_sub(count);
        if st.left == 0 {
            st.group = (g + 1) % groups;
            st.left = STRIPE_UNITS;
            self.cursor = st.cursors[st.group];
        }
    }

    /// Free `count` units at `addr`, released in txg `txg`; reusable from txg + DEFER_TXGS.
    /// Blocks are freed with `free_block` (which knows packs). All or nothing: units that
    /// cannot be freed (`freeable`) change nothing and are reported.
    fn free(&mut self, addr: u64, count: u64, txg: u64) -> std::result::Result<(), Corruption> {
        let unit = self.freeable(addr, count)?;
        for u in unit..unit + count {
            set(&mut self.persisted, u, false);
            self.dirty_chunks.insert(u / BITS_PER_CHUNK);
        }
        self.allocated_units -= count;
        self.held.push_back((txg, unit, count));
        Ok(())
    }

    /// Keep the free units of `count` at `addr` from being allocated until txg `txg` + 1 is
    /// durable, as if freed in `txg` (replay claims the blocks its log references, so that
    /// the commit after it cannot overwrite them: were that commit lost, replay runs again).
    pub fn hold(&mut self, addr: u64, count: u64, txg: u64) {
        let Some(unit) = self.geo.unit_of(addr) else { return };
        for u in unit..(unit + count).min(self.geo.index_units()) {
            if !bit(&self.unavailable, u) {
                self.set_unavailable(u, true);
                self.held.push_back((txg, u, 1));
            }
        }
    }

    /// The open txg of the oldest read planned under the pool's lock and still reading
    /// outside it, if any: `txg_synced` releases nothing freed in it or later.
    pub fn set_oldest_read_pin(&mut self, txg: Option<u64>) {
        self.oldest_read_pin = txg;
    }

    /// Txg `txg` is durable: release holds that have served their time (and that no read
    /// in flight may still need).
    pub fn txg_synced(&mut self, txg: u64) {
        for (c, slot, t) in self.chunk_pending.drain(..) {
            self.chunk_current[c as usize] = Some((slot, t));
        }
        while let Some(&(freed, unit, count)) = self.held.front() {
            if freed + DEFER_TXGS > txg + 1 || self.oldest_read_pin.is_some_and(|pin| freed >= pin) {
                break;
            }
            self.held.pop_front();
            for u in unit..unit + count {
                if !bit(&self.persisted, u) {
                    self.set_unavailable(u, false);
                }
            }
        }
        // The txg's open row is durable now: nothing more goes into it.
        self.close_row();
    }

    /// Write every chunk changed in this txg to its non-current slot, stamped `txg`.
    pub fn write_dirty_chunks(&mut self, dev: &dyn BlockDevice, txg: u64, pool_guid: u64) -> Result<usize> {
        let dirty = std::mem::take(&mut self.dirty_chunks);
        for &c in &dirty {
            let slot = match self.chunk_current[c as usize] {
                Some((s, _)) => 1 - s,
                None => 0,
            };
            let first = c * BITS_PER_CHUNK;
            let n = self.geo.chunk_units(c);
            let mut bits = vec![0u8; CHUNK_BITS_BYTES];
            for i in 0..n {
                if bit(&self.persisted, first + i) {
                    bits[(i / 8) as usize] |= 1 << (i % 8);
                }
            }
            let phys = SpacemapChunkPhys { chunk_index: c as u32, txg, pool_guid, bits };
            dev.write_at(&phys.encode(), self.geo.slot_addr(c, slot))
                .map_err(|e| Error::io("write space map chunk", e))?;
            self.chunk_pending.push((c, slot, txg));
        }
        Ok(dirty.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(units: u64) -> Geometry {
        Geometry {
            spacemap_offset: 512 << 10,
            spacemap_chunks: units.div_ceil(BITS_PER_CHUNK),
            data_offset: 1 << 20,
            data_units: units,
            log_offset: 1 << 20,
            log_bytes: 0,
            groups: std::sync::Arc::new([]),
        }
    }

    #[test]
    fn frees_are_held_until_the_deferral_passes() {
        let mut a = Allocator::new_empty(geo(1000));
        let x = a.allocate(10).unwrap();
        a.txg_synced(1);
        a.free(x, 10, 2).unwrap();

        assert_eq!(a.allocated_units(), 0);
        assert_eq!(a.held_units(), 10);
        // Allocate everything else: the held units must not be handed out.
        let mut got = vec![];
        while let Ok(addr) = a.allocate(1) {
            got.push(addr);
        }
        assert_eq!(got.len(), 990);
        assert!(!got.contains(&x));
        a.txg_synced(2);
        assert!(a.allocate(1).is_err(), "freed in 2: still held after 2 syncs");
        a.txg_synced(3);
        assert_eq!(a.held_units(), 0);
        assert!(a.allocate(10).is_ok());
    }

    #[test]
    fn a_pack_is_freed_with_its_last_record() {
        let mut a = Allocator::new_empty(geo(1000));
        let pack = a.allocate_pack(2, 3).unwrap();
        let rec = |off: u64| BlockPtr { addr: pack + off, psize: 700, packed: true, birth_txg: 1, ..BlockPtr::HOLE };
        assert_eq!(a.allocated_units(), 2);
        assert_eq!(a.plain_units_allocated(), 0);
        a.free_block(&rec(0), 3).unwrap();
        a.free_block(&rec(1024), 3).unwrap();
        assert_eq!((a.allocated_units(), a.pack_count()), (2, 1));
        a.free_block(&rec(4096 + 512), 4).unwrap();
        assert_eq!((a.allocated_units(), a.pack_count()), (0, 0));
        assert_eq!(a.take_dirty_packs(), vec![(pack, None)]);
        // A packed pointer no pack holds is reported, not a panic.
        assert!(a.free_block(&rec(0), 5).is_err());
        assert!(a.pack_of(pack + 8192).is_none());
    }

    /// A block pointer that disagrees with the space map (freed twice, pointing at free
    /// units or past the data area) is reported and changes nothing: damage from disk must
    /// not panic the commit, nor corrupt the space map it writes.
    #[test]
    fn a_free_the_space_map_cannot_honour_is_corruption_and_changes_nothing() {
        let mut a = Allocator::new_empty(geo(1024));
        let x = a.allocate(4).unwrap();
        let bp = |addr: u64, psize: u32| BlockPtr { addr, psize, lsize: 16384, birth_txg: 1, ..BlockPtr::HOLE };
        a.free_block(&bp(x, 16384), 2).unwrap();
        assert_eq!(a.allocated_units(), 0);
        let held = a.held_units();
        // Freed twice (two pointers to one block).
        let e = a.free_block(&bp(x, 16384), 2).unwrap_err();
        assert!(e.detail.contains("holds free"), "{e}");
        // Partly allocated: the allocated part must stay allocated.
        let y = a.allocate(1).unwrap();
        assert!(a.free_block(&bp(y, 8192), 3).is_err());
        assert!(a.is_allocated(a.geometry().unit_of(y).unwrap()));
        assert_eq!(a.allocated_units(), 1);
        // Outside the data area.
        assert!(a.free_block(&bp(4096, 4096), 3).is_err());
        assert!(a.free_block(&bp(a.geometry().addr_of(1024), 4096), 3).is_err());
        assert_eq!((a.allocated_units(), a.held_units()), (1, held));
        // Running past the end of the data area from its last allocated units (1024 units:
        // the bitmap has no spare bits to catch it).
        let mut c = Allocator::new_empty(geo(1024));
        c.allocate(1020).unwrap();
        let last = c.allocate(4).unwrap();
        assert!(c.free_block(&bp(last, 5 * 4096), 3).unwrap_err().detail.contains("past the end"));
        assert_eq!(c.allocated_units(), 1024);
        // A pack whose units the space map holds free: the pack stays in the table.
        let mut b = Allocator::new_empty(geo(1000));
        let pack = b.allocate_pack(1, 1).unwrap();
        b.free(pack, 1, 2).unwrap();
        let rec = BlockPtr { packed: true, ..bp(pack, 700) };
        assert!(b.free_block(&rec, 3).is_err());
        assert_eq!(b.pack_count(), 1);
    }

    #[test]
    fn contiguous_runs_and_wraparound() {
        let mut a = Allocator::new_empty(geo(300));
        let first = a.allocate(100).unwrap();
        let second = a.allocate(100).unwrap();
        assert_eq!(second - first, 100 * UNIT_SIZE);
        a.free(first, 100, 1).unwrap();
        a.txg_synced(5);
        let third = a.allocate(150);

        assert!(third.is_err(), "only two runs of 100 free");
        assert_eq!(a.allocate(100).unwrap(), a.geometry().addr_of(200));
        assert_eq!(a.allocate(100).unwrap(), first);
    }
}
