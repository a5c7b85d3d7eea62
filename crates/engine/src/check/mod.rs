//! `strata check`: walk a pool's committed state and verify every invariant we can see.
//!
//! From the newest committed root it visits every reachable block exactly once and checks:
//! the checksum of every metadata block (and of every data block unless told not to); key
//! order and key bounds in every B+tree node; child levels; block kinds per tree level;
//! dnode sanity (records within the object's size and levels, record sizes); that no unit
//! is referenced twice; that birth txgs are not in the future; that each volume's recorded
//! space equals what its blocks occupy and its recorded savings what its data records save
//! (compressed records are decoded when data is verified); that reservations name volumes;
//! and that the space map on disk marks exactly the
//! referenced units (no block both free and used, no leaked block) and agrees with the
//! root's own total. Packed records (compaction) must lie inside a pack of the pack
//! table, not overlap each other, and each pack's live count must equal the packed
//! pointers found in it; a pack's units count once. Dedup references must match their
//! dedup table entry, whose reference count must equal the references found; the shared
//! block counts once. Snapshots and clones share blocks: a block reached again through the
//! same pointer (same address, birth and checksum) is shared, not a double reference, and
//! its subtree is not walked twice. `space.rs` then checks the snapshot accounting: each
//! tree's recorded size, the deadlists (exactly the parent's blocks the child lacks) and each
//! volume's total.
//!
//! Problems are collected, not fatal: one damaged block is reported and its subtree
//! skipped, and the walk goes on.
//!
//! `check` holds the pool's lock throughout. A scrub (`Pool::scrub`) reads the fixed
//! structures and the space map under the lock, then pins the committed root (nothing it
//! reaches is reused until the scrub ends, pool/read_pin.rs) and walks it *outside* the lock,
//! reading every copy, while the pool serves and commits; a [`WalkControl`] sees every block
//! (progress, pacing, pause) and may stop the walk.

use crate::alloc::Allocator;
use crate::catalog::volume::KEY_DNODE;
use crate::error::Result;
use crate::format::destroy::{parse_destroy_key, DestroyPhys, DestroyTreePhys, KEY_DESTROY};
use crate::format::node::BtreeNodePhys;
use crate::format::records::{DnodePhys, SnapshotRecordPhys, VolumeRecordPhys};
use crate::format::space::{
    DedupPhys, PackPhys, PoolSpacePhys, VolumeSpacePhys, KEY_DEDUP, KEY_PACK, KEY_POOL_SPACE, KEY_VOLUME_SPACE,
};
use crate::format::{BlockKind, BlockPtr, Compression, SECTORS_PER_UNIT, SECTOR_SIZE, UNIT_SIZE};
use crate::pipeline::BlockIo;
use crate::pool::Pool;
use crate::tree::blocktree;
use std::collections::{BTreeMap, HashMap};

use crate::pool::control::{WalkBookmark, WalkControl};

mod copies;
mod destroy;
mod space;

use destroy::DestroyEntry;

#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// Read and verify every data block (not only metadata).
    pub verify_data: bool,
    /// Also read every copy of every block a device set holds, bypassing the caches, and
    /// repair the copies that fail (a scrub).
    pub all_copies: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { verify_data: true, all_copies: false }
    }
}

#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub txg: u64,
    pub volumes: u64,
    pub snapshots: u64,
    pub objects: u64,
    pub metadata_blocks: u64,
    pub data_blocks: u64,
    pub referenced_units: u64,
    pub allocated_units: u64,
    pub data_bytes_verified: u64,
    /// Blocks whose every copy was verified (`CheckOptions::all_copies`).
    pub copies_verified: u64,
    /// Data records stored compressed.
    pub compressed_blocks: u64,
    /// What the data records save against storing every record whole and raw.
    pub saved_bytes: u64,
    /// Invariant violations; empty means the pool is consistent.
    pub errors: Vec<String>,
    /// Things worth knowing that are not violations (fallbacks, skipped torn roots).
    pub notes: Vec<String>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Visit every node of a B+tree top-down: `f(bp, node)`. Stops at the first error. Every
/// child must be one level below its parent (a damaged pointer to an ancestor would
/// otherwise recurse until the stack overflows).
pub fn walk_btree(
    io: &BlockIo,
    root: &BlockPtr,
    f: &mut dyn FnMut(&BlockPtr, &BtreeNodePhys) -> Result<()>,
) -> Result<()> {
    walk_btree_at(io, root, None, f)
}

fn walk_btree_at(
    io: &BlockIo,
    bp: &BlockPtr,
    parent_level: Option<u8>,
    f: &mut dyn FnMut(&BlockPtr, &BtreeNodePhys) -> Result<()>,
) -> Result<()> {
    if bp.is_hole() {
        return Ok(());
    }
    let node = io.read_node(bp)?;
    if let Some(p) = parent_level.filter(|&p| p == 0 || node.level() != p - 1) {
        return Err(crate::error::Corruption::new(
            "btree node",
            Some(bp.addr),
            format!("level {} under a node of level {p}", node.level()),
        )
        .into());
    }
    f(bp, &node)?;
    if let BtreeNodePhys::Internal { level, entries } = &*node {
        for (_, child) in entries {
            walk_btree_at(io, child, Some(*level), f)?;
        }
    }
    Ok(())
}

struct Checker<'a> {
    io: &'a BlockIo,
    opts: CheckOptions,
    root_txg: u64,
    referenced: Vec<u64>,
    /// Blocks already visited, by address: a second pointer to one of them is sharing if it
    /// is the same pointer, a double reference otherwise.
    visited: HashMap<u64, BlockPtr>,
    report: CheckReport,
    geo: crate::alloc::Geometry,
    /// The labels carry INCOMPAT_COMPRESSION (required before any compressed block).
    compression_feature: bool,
    /// The labels carry INCOMPAT_PACKS (required before any packed record).
    packs_feature: bool,
    /// The pack table as committed (catalog key space KEY_PACK).
    packs: BTreeMap<u64, PackPhys>,
    /// Per pack address: packed records found in it, the sectors they cover (one bit per
    /// sector: a pack has at most 64) and the sectors they are charged.
    pack_found: HashMap<u64, (u32, u64, u64)>,
    /// The labels carry INCOMPAT_DEDUP (required before any dedup reference).
    dedup_feature: bool,
    /// The dedup table as committed (catalog key space KEY_DEDUP).
    dedup: HashMap<[u8; 32], DedupPhys>,
    /// References found per dedup table entry.
    dedup_found: HashMap<[u8; 32], u32>,
    /// Dedup references visited, by (address, birth).
    visited_refs: HashMap<(u64, u64), BlockPtr>,
    /// A scrub's driver.
    control: Option<&'a dyn WalkControl>,
    /// The driver stopped the scrub, or the pool asked it to yield: nothing more is read.
    stopped: bool,
    /// A scrub's pin of the root it walks (outside the lock).
    pin: Option<&'a crate::pool::read_pin::RootPin>,
    /// The pool asked the scrub to yield its pin (short of space).
    yielded: bool,
}

/// Data records verified at once (`Checker::verify_data`), by VERIFY_THREADS threads.
const VERIFY_BATCH: usize = 128;
const VERIFY_THREADS: usize = 4;

/// `f` of every item, in order, computed by up to VERIFY_THREADS threads.
fn in_parallel<I: Sync, T: Send>(items: &[I], f: impl Fn(&I) -> T + Sync) -> Vec<T> {
    if items.len() < 2 {
        return items.iter().map(&f).collect();
    }
    let next = crate::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<T>> = items.iter().map(|_| None).collect();
    // The engine's threads (crate::sync): the simulator schedules them.
    crate::sync::thread::scope(|s| {
        let workers: Vec<_> = (0..VERIFY_THREADS.min(items.len()))
            .map(|_| {
                s.spawn(|| {
                    let mut got = Vec::new();
                    loop {
                        let i = next.fetch_add(1, crate::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        got.push((i, f(item)));
                    }
                    got
                })
            })
            .collect();
        for w in workers {
            // A panic in a verifying thread is the checker's own (as it was on one thread).
            for (i, t) in w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)) {
                out[i] = Some(t);
            }
        }
    });
    out.into_iter().map(|t| t.expect("every item done")).collect()
}

/// A scrub reads records whose spans follow each other (less than RUN_GAP apart) as one
/// run of at most RUN_MAX bytes per copy.
const RUN_GAP: u64 = 64 << 10;
const RUN_MAX: u64 = 1 << 20;

/// The indices of `batch` in address order, cut into runs a scrub reads at once.
fn runs(batch: &[(BlockPtr, u64)]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..batch.len()).collect();
    order.sort_by_key(|&i| batch[i].0.addr);
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut bounds = (0, 0);
    for i in order {
        let bp = &batch[i].0;
        let (s, l) = bp.read_span();
        let joins = !bp.packed && s >= bounds.1 && s - bounds.1 < RUN_GAP && s + l - bounds.0 <= RUN_MAX;
        match runs.last_mut() {
            Some(run) if joins && !batch[run[0]].0.packed => {
                run.push(i);
                bounds.1 = s + l;
            }
            _ => {
                runs.push(vec![i]);
                bounds = (s, s + l);
            }
        }
    }
    runs
}

#[derive(PartialEq, Eq)]
enum Claim {
    /// First visit: verify it.
    New,
    /// The same block reached again through another snapshot or clone: already verified.
    Shared,
    /// Outside the data area or overlapping another block: do not read.
    Bad,
}

impl Checker<'_> {
    fn err(&mut self, msg: String) {
        if self.report.errors.len() < 1000 {
            self.report.errors.push(msg);
        }
    }

    /// Account for one block and, the first time, verify it (a scrub: every copy).
    fn claim(&mut self, bp: &BlockPtr, ctx: &str) -> Claim {
        let claim = self.claim_unread(bp, ctx);
        if claim == Claim::New {
            let copies = self.opts.all_copies.then(|| self.io.verify_copies(bp).map(|_| ()));
            self.copies_checked(bp, ctx, copies);
        }
        claim
    }

    /// Account for one block without reading it (`claim` and `verify_data` read).
    fn claim_unread(&mut self, bp: &BlockPtr, ctx: &str) -> Claim {
        if self.stopped {
            return Claim::Bad; // skip silently: the report says the scrub was stopped
        }
        if self.pin.is_some_and(|p| p.asked_to_yield()) {
            // Before reading anything more: the pin is dropped only when the walk returns,
            // so nothing this scrub read or reads was reused under it.
            self.stopped = true;
            self.yielded = true;
            return Claim::Bad;
        }
        self.claim_once(bp, ctx)
    }

    /// Record what verifying every copy of a newly claimed block found (`None`: not a
    /// scrub), and tell the scrub's driver.
    fn copies_checked(&mut self, bp: &BlockPtr, ctx: &str, copies: Option<Result<()>>) {
        match copies {
            Some(Err(e)) => self.err(format!("{ctx}: block at {}: {e}", bp.addr)),
            Some(Ok(())) => self.report.copies_verified += 1,
            None => {}
        }
        if let Some(c) = self.control {
            self.stopped = !c.block_done(bp.psize as u64);
        }
    }

    /// Verify newly claimed data records (`(pointer, record index)`), several reads at once:
    /// one after the other, a scrub's reads of every copy of 8–16 KiB records ran at
    /// ~57 MB/s on a mirror of loop devices. A scrub reads runs of records adjacent on the
    /// device with one read per copy (`runs`), and a record whose every copy verified is
    /// not read again for `verify_data`: verifying the copies decoded it.
    fn verify_data(&mut self, batch: &[(BlockPtr, u64)], ctx: &str) {
        let (all, data, io) = (self.opts.all_copies, self.opts.verify_data, self.io);
        // Every copy verified and decoded: the record's bytes are verified too.
        let read_again = |bp: &BlockPtr, copies: &Option<Result<u64>>| match (data, copies) {
            (false, _) => None,
            (true, Some(Ok(n))) => Some(Ok(*n)),
            (true, _) => Some(io.read_block(bp).map(|b| b.len() as u64)),
        };
        let mut results: Vec<Option<(Option<Result<()>>, Option<Result<u64>>)>> = batch.iter().map(|_| None).collect();
        if all {
            // A scrub reads each run of records in address order with one read per copy.
            let runs = runs(batch);
            let done = in_parallel(&runs, |run| {
                let bps: Vec<BlockPtr> = run.iter().map(|&i| batch[i].0).collect();
                let copies = io.verify_copies_run(&bps);
                bps.iter()
                    .zip(copies)
                    .map(|(bp, c)| {
                        let c = Some(c);
                        let read = read_again(bp, &c);
                        (c.map(|r| r.map(|_| ())), read)
                    })
                    .collect::<Vec<_>>()
            });
            for (run, got) in runs.iter().zip(done) {
                for (&i, r) in run.iter().zip(got) {
                    results[i] = Some(r);
                }
            }
        } else {
            for (slot, r) in results.iter_mut().zip(in_parallel(batch, |(bp, _)| (None, read_again(bp, &None)))) {
                *slot = Some(r);
            }
        }
        let results = results.into_iter().map(|r| r.expect("every record verified"));
        for ((bp, first), (copies, read)) in batch.iter().zip(results) {
            if self.stopped {
                // The driver stopped the scrub within the batch: the rest were read for
                // nothing and count as not verified, as if never reached.
                break;
            }
            self.copies_checked(bp, ctx, copies);
            match read {
                Some(Ok(n)) => self.report.data_bytes_verified += n,
                Some(Err(e)) => self.err(format!("{ctx}: record {first}: {e}")),
                None => {}
            }
        }
    }

    /// `verify_data`, then tell the driver how far every record is verified.
    fn verify_batch(&mut self, batch: &[(BlockPtr, u64)], ctx: &str, (tree, object): (u64, u64)) {
        self.verify_data(batch, ctx);
        if let (Some(c), Some((_, last)), false) = (self.control, batch.last(), self.stopped) {
            c.reached(WalkBookmark { tree, object, record: *last });
        }
    }

    fn claim_once(&mut self, bp: &BlockPtr, ctx: &str) -> Claim {
        if bp.dedup {
            return self.claim_dedup(bp, ctx);
        }
        if let Some(prev) = self.visited.get(&bp.addr) {
            if prev == bp {
                return Claim::Shared;
            }
            self.err(format!("{ctx}: block at {} is referenced by two different pointers", bp.addr));
            return Claim::Bad;
        }
        if bp.packed {
            return self.claim_packed(bp, ctx);
        }
        let units = bp.units();
        let Some(first) = self.geo.run_of(bp.addr, units) else {
            self.err(format!("{ctx}: block at {} lies outside the data area", bp.addr));
            return Claim::Bad;
        };
        self.visited.insert(bp.addr, *bp);
        if bp.birth_txg > self.root_txg {
            self.err(format!(
                "{ctx}: block at {} born in txg {} after the root's txg {}",
                bp.addr, bp.birth_txg, self.root_txg
            ));
        }
        self.reference_units(first, units, bp.addr, ctx);
        Claim::New
    }

    fn reference_units(&mut self, first: u64, units: u64, addr: u64, ctx: &str) {
        for u in first..first + units {
            let (w, b) = ((u / 64) as usize, u % 64);
            if self.referenced[w] >> b & 1 == 1 {
                self.err(format!("{ctx}: unit {u} (block at {addr}) is referenced twice"));
            } else {
                self.referenced[w] |= 1 << b;
                self.report.referenced_units += 1;
            }
        }
    }

    /// Account for a packed record (first visit): it must lie in a pack and overlap no
    /// other record of it; the pack's units are referenced with its first record.
    fn claim_packed(&mut self, bp: &BlockPtr, ctx: &str) -> Claim {
        let end = bp.addr.saturating_add(bp.psize as u64);
        let Some((start, pack)) = self.packs.range(..=bp.addr).next_back().map(|(a, p)| (*a, *p)) else {
            self.err(format!("{ctx}: packed record at {} lies in no pack of the pack table", bp.addr));
            return Claim::Bad;
        };
        if end > start + pack.units as u64 * UNIT_SIZE {
            self.err(format!("{ctx}: packed record at {} lies in no pack of the pack table", bp.addr));
            return Claim::Bad;
        }
        if !self.packs_feature {
            self.err(format!("{ctx}: record at {} is packed but the pool labels lack the packs feature", bp.addr));
        }
        self.visited.insert(bp.addr, *bp);
        if bp.birth_txg > self.root_txg {
            self.err(format!(
                "{ctx}: block at {} born in txg {} after the root's txg {}",
                bp.addr, bp.birth_txg, self.root_txg
            ));
        }
        let first = (bp.addr - start) / SECTOR_SIZE;
        let n = bp.sectors();
        let mask = if n >= 64 { u64::MAX } else { ((1u64 << n) - 1) << first };
        let units = pack.units as u64;
        let found = self.pack_found.entry(start).or_insert((0, 0, 0));
        let (seen_before, overlap) = (found.0 > 0, found.1 & mask != 0);
        found.0 += 1;
        found.1 |= mask;
        found.2 += n;
        if overlap {
            self.err(format!("{ctx}: packed record at {} overlaps another record of its pack", bp.addr));
        }
        if !seen_before {
            match self.geo.run_of(start, units) {
                Some(u) => self.reference_units(u, units, start, ctx),
                None => self.err(format!("pack at {start} lies outside the data area")),
            }
        }
        Claim::New
    }

    /// Account for a dedup reference: it must match its table entry; the shared block is
    /// accounted with the first reference met.
    fn claim_dedup(&mut self, bp: &BlockPtr, ctx: &str) -> Claim {
        if let Some(prev) = self.visited_refs.get(&(bp.addr, bp.birth_txg)) {
            if prev == bp {
                return Claim::Shared;
            }
            self.err(format!(
                "{ctx}: dedup reference at {} born in txg {} appears twice, differently",
                bp.addr, bp.birth_txg
            ));
            return Claim::Bad;
        }
        let Some(entry) = self.dedup.get(&bp.checksum).copied() else {
            self.err(format!("{ctx}: dedup reference at {} has no entry in the dedup table", bp.addr));
            return Claim::Bad;
        };
        let same = entry.addr == bp.addr
            && entry.psize == bp.psize
            && entry.lsize == bp.lsize
            && entry.compression == bp.compression
            && entry.packed == bp.packed;
        if !same {
            self.err(format!("{ctx}: dedup reference {bp:?} does not match its table entry {entry:?}"));
            return Claim::Bad;
        }
        if !self.dedup_feature {
            self.err(format!(
                "{ctx}: record at {} is a dedup reference but the labels lack the dedup feature",
                bp.addr
            ));
        }
        self.visited_refs.insert((bp.addr, bp.birth_txg), *bp);
        if bp.birth_txg > self.root_txg {
            self.err(format!(
                "{ctx}: block at {} born in txg {} after the root's txg {}",
                bp.addr, bp.birth_txg, self.root_txg
            ));
        }
        let found = self.dedup_found.entry(bp.checksum).or_insert(0);
        *found += 1;
        if *found == 1 {
            // The shared block itself, once, as the plain or packed block it is.
            let block = BlockPtr { dedup: false, ..*bp };
            if self.claim(&block, ctx) == Claim::Bad {
                return Claim::Bad;
            }
        }
        Claim::New
    }

    /// After every tree was walked: each dedup entry's reference count against the
    /// references found. Returns the sectors charged by references beyond each block's first.
    fn check_dedup(&mut self) -> u64 {
        let mut extra = 0;
        let table = std::mem::take(&mut self.dedup);
        for (hash, entry) in &table {
            let found = self.dedup_found.get(hash).copied().unwrap_or(0);
            if found == 0 {
                self.err(format!(
                    "dedup entry for the block at {} ({} references) has none (leak)",
                    entry.addr, entry.refs
                ));
                continue;
            }
            if found != entry.refs {
                self.err(format!(
                    "dedup entry for the block at {}: the table counts {} references, {found} were found",
                    entry.addr, entry.refs
                ));
            }
            let block =
                BlockPtr { addr: entry.addr, psize: entry.psize, packed: entry.packed, birth_txg: 1, ..BlockPtr::HOLE };
            extra += (found as u64 - 1) * block.sectors();
        }
        self.dedup = table;
        extra
    }

    /// After every tree was walked: each pack's live count against the records found in
    /// it. Returns the sectors of packs no record is charged (free space inside packs).
    fn check_packs(&mut self) -> u64 {
        let mut slack = 0;
        let packs = std::mem::take(&mut self.packs);
        for (start, pack) in &packs {
            let Some(&(found, _, sectors)) = self.pack_found.get(start) else {
                self.err(format!("pack at {start} ({} live records in the table) holds no record (leak)", pack.live));
                continue;
            };
            if found != pack.live {
                self.err(format!(
                    "pack at {start}: the table counts {} live records, {found} point into it",
                    pack.live
                ));
            }
            slack += (pack.units as u64 * SECTORS_PER_UNIT).saturating_sub(sectors);
        }
        self.packs = packs;
        slack
    }

    /// Walk a B+tree, checking bounds and levels; `leaf(key, value)` sees every entry.
    /// Returns the sectors its nodes are charged.
    fn btree(&mut self, root: &BlockPtr, ctx: &str, leaf: &mut dyn FnMut(&mut Self, &[u8], &[u8])) -> u64 {
        let mut sectors = 0;
        if !root.is_hole() {
            self.btree_node(root, None, None, None, ctx, leaf, &mut sectors);
        }
        sectors
    }

    #[allow(clippy::too_many_arguments)]
    fn btree_node(
        &mut self,
        bp: &BlockPtr,
        want_level: Option<u8>,
        lower: Option<&[u8]>,
        upper: Option<&[u8]>,
        ctx: &str,
        leaf: &mut dyn FnMut(&mut Self, &[u8], &[u8]),
        sectors: &mut u64,
    ) {
        if bp.kind != BlockKind::BtreeNode {
            self.err(format!("{ctx}: pointer at {} to a {:?} where a tree node belongs", bp.addr, bp.kind));
            return;
        }
        *sectors += bp.sectors();
        if self.claim(bp, ctx) != Claim::New {
            return; // a shared subtree was checked where it was first met
        }
        self.report.metadata_blocks += 1;
        let node = match self.io.read_node(bp) {
            Ok(n) => n,
            Err(e) => return self.err(format!("{ctx}: {e}")),
        };
        if let Some(l) = want_level {
            if node.level() != l {
                return self.err(format!("{ctx}: node at {} has level {}, expected {l}", bp.addr, node.level()));
            }
        }
        let in_bounds = |k: &[u8]| lower.is_none_or(|l| k >= l) && upper.is_none_or(|u| k < u);
        match &*node {
            BtreeNodePhys::Leaf { entries } => {
                for (k, v) in entries {
                    if !in_bounds(k) {
                        self.err(format!("{ctx}: key {k:02x?} in node at {} is outside its parent's range", bp.addr));
                    }
                    leaf(self, k, v);
                }
            }
            BtreeNodePhys::Internal { level, entries } => {
                for (i, (k, child)) in entries.iter().enumerate() {
                    if i > 0 && !in_bounds(k) {
                        self.err(format!("{ctx}: separator {k:02x?} in node at {} is outside its range", bp.addr));
                    }
                    let lo = if i == 0 { lower } else { Some(k.as_slice()) };
                    let hi = entries.get(i + 1).map(|(k, _)| k.as_slice()).or(upper);
                    self.btree_node(child, Some(level - 1), lo, hi, ctx, leaf, sectors);
                }
            }
        }
    }

    /// Returns the sectors the object's blocks are charged.
    fn object(&mut self, ctx: &str, dn: &DnodePhys, (tree, object): (u64, u64)) -> u64 {
        let mut sectors = 0;
        let mut data_sectors = 0;
        let mut blocks: Vec<(BlockPtr, u8, u64)> = Vec::new();
        let walked = blocktree::walk(self.io, &dn.root, dn.levels, &mut |bp, level, first| {
            blocks.push((*bp, level, first));
            Ok(())
        });
        if let Err(e) = walked {
            self.err(format!("{ctx}: block tree: {e}"));
        }
        let records = dn.size.div_ceil(dn.record_size as u64);
        let mut batch = Vec::new();
        for (bp, level, first) in blocks {
            sectors += bp.sectors();
            if level == 0 {
                data_sectors += bp.sectors();
            }
            if level > 0 {
                if self.claim(&bp, ctx) == Claim::New {
                    self.report.metadata_blocks += 1;
                }
                continue;
            }
            if self.claim_unread(&bp, ctx) != Claim::New {
                continue;
            }
            self.report.data_blocks += 1;
            if bp.compression != Compression::None {
                self.report.compressed_blocks += 1;
                if !self.compression_feature {
                    self.err(format!(
                        "{ctx}: record {first} is stored {:?}-compressed but the pool labels lack the compression feature",
                        bp.compression
                    ));
                }
            }
            if first >= records {
                self.err(format!("{ctx}: record {first} exists past the object's size {}", dn.size));
            }
            if bp.lsize != dn.record_size {
                self.err(format!(
                    "{ctx}: record {first} is {} bytes, the object's records are {}",
                    bp.lsize, dn.record_size
                ));
            }
            let at = WalkBookmark { tree, object, record: first };
            if let Some(c) = self.control.filter(|c| c.resume_after().is_some_and(|b| at <= b)) {
                c.block_skipped(bp.psize as u64);
                continue;
            }
            batch.push((bp, first));
            if batch.len() >= VERIFY_BATCH {
                self.verify_batch(&batch, ctx, (tree, object));
                batch.clear();
            }
        }
        self.verify_batch(&batch, ctx, (tree, object));
        if data_sectors != dn.data_sectors {
            self.err(format!(
                "{ctx}: data records are charged {data_sectors} sectors, the dnode records {}",
                dn.data_sectors
            ));
        }
        sectors
    }

    /// A reservation (it must name a volume) or the pool's space settings.
    fn space_entry(&mut self, k: &[u8], v: &[u8], vols: &[(String, VolumeRecordPhys)]) {
        if k == [KEY_POOL_SPACE] {
            if let Err(e) = PoolSpacePhys::decode(v) {
                self.err(format!("catalog pool space settings: {e}"));
            }
            return;
        }
        let name = String::from_utf8_lossy(&k[1..]);
        match VolumeSpacePhys::decode(v) {
            Err(e) => self.err(format!("catalog reservation of {name:?}: {e}")),
            Ok(_) if k[0] != KEY_VOLUME_SPACE || !vols.iter().any(|(n, _)| *n == name) => {
                self.err(format!("catalog entry {k:02x?}: a reservation for no volume"))
            }
            Ok(_) => {}
        }
    }

    /// Walk one volume tree (a head or a snapshot).
    fn volume_tree(&mut self, tree: u64, ctx: &str, root: &BlockPtr, next_object_id: u64) {
        let mut objects = 0;
        let mut max_id = 0;
        self.btree(root, ctx, &mut |c: &mut Self, k: &[u8], v: &[u8]| {
            if k.first() != Some(&KEY_DNODE) {
                return;
            }
            let Ok(id_bytes) = <[u8; 8]>::try_from(&k[1..]) else {
                return c.err(format!("{ctx}: malformed object key {k:02x?}"));
            };
            let id = u64::from_be_bytes(id_bytes);
            max_id = max_id.max(id);
            objects += 1;
            match DnodePhys::decode(v) {
                Ok(dn) => {
                    c.object(&format!("{ctx} object {id}"), &dn, (tree, id));
                }
                Err(e) => c.err(format!("{ctx} object {id}: {e}")),
            }
        });
        self.report.objects += objects;
        if objects > 0 && max_id >= next_object_id {
            self.err(format!("{ctx}: object {max_id} exists but the next id to hand out is {next_object_id}"));
        }
    }
}

/// What a scrub found, and whether it ran to the end.
#[derive(Debug, Clone, Default)]
pub struct ScrubOutcome {
    pub report: CheckReport,
    /// It stopped before the end (the control said so, or the pool needed the space its
    /// pin held): the report covers what was verified.
    pub stopped: bool,
    /// It stopped because a writer was short of space while the scrub held freed units back.
    pub yielded_for_space: bool,
}

impl Pool {
    /// Verify the pool's newest committed state (not the open txg's unwritten changes),
    /// holding the pool's lock throughout.
    pub fn check(&self, opts: CheckOptions) -> Result<CheckReport> {
        Ok(self.check_with(opts, None, false)?.report)
    }

    /// Scrub: verify every copy of every block of the newest committed state and repair
    /// the damaged copies from good ones, walking outside the pool's lock (the pool serves
    /// and commits meanwhile; what the walk reaches stays pinned until it ends). `control`
    /// sees every block and may pause, pace or stop it.
    pub fn scrub(&self, control: &dyn WalkControl) -> Result<ScrubOutcome> {
        self.check_with(CheckOptions { verify_data: true, all_copies: true }, Some(control), true)
    }

    /// `check`, with `control` told the bytes to verify and each block verified (progress),
    /// and able to stop the check (`stopped`: the report covers what was walked). The walk
    /// holds the pool's lock, as `check`'s does: `control` must not wait.
    pub fn check_observed(&self, opts: CheckOptions, control: &dyn WalkControl) -> Result<ScrubOutcome> {
        self.check_with(opts, Some(control), false)
    }

    fn check_with(
        &self,
        opts: CheckOptions,
        control: Option<&dyn WalkControl>,
        unlocked: bool,
    ) -> Result<ScrubOutcome> {
        let p = self.lock();
        let root = p.txg.root;
        let geo = p.alloc.geometry();
        let features = p.label.features;
        let pool_guid = p.label.pool_guid;
        let notes = p.health.open_notes.clone();
        let mut early_errors = p.check_log_device();
        if opts.all_copies {
            early_errors.extend(copies::scrub_fixed(p.dev.as_ref(), &geo, pool_guid, root.txg));
        }
        // The space map as committed with this root, read back from the device now: later
        // commits rewrite its slots, and a scrub lets them run.
        let on_disk = Allocator::load(p.dev.as_ref(), geo.clone(), pool_guid, root.txg);
        let io = p.io.clone();
        if let Some(c) = control {
            c.begin(root.allocated_units * UNIT_SIZE);
        }
        let (_locked, pin) = if unlocked {
            let pin = crate::pool::read_pin::RootPin::new(&p);
            drop(p);
            (None, Some(pin))
        } else {
            (Some(p), None)
        };
        let mut c = Checker {
            io: &io,
            control,
            stopped: false,
            pin: pin.as_ref(),
            yielded: false,
            opts,
            root_txg: root.txg,
            referenced: vec![0; geo.index_units().div_ceil(64) as usize],
            visited: HashMap::new(),
            report: CheckReport { txg: root.txg, notes, ..Default::default() },
            geo,
            compression_feature: features.incompat & crate::format::features::INCOMPAT_COMPRESSION != 0,
            packs_feature: features.incompat & crate::format::features::INCOMPAT_PACKS != 0,
            packs: BTreeMap::new(),
            pack_found: HashMap::new(),
            dedup_feature: features.incompat & crate::format::features::INCOMPAT_DEDUP != 0,
            dedup: HashMap::new(),
            dedup_found: HashMap::new(),
            visited_refs: HashMap::new(),
        };
        for e in early_errors {
            c.err(e);
        }
        let mut vols: Vec<(String, VolumeRecordPhys)> = Vec::new();
        let mut snaps: Vec<(String, SnapshotRecordPhys)> = Vec::new();
        let mut deadlist_entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut max_vol_id = 0;
        let mut space_entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut destroy_queue: BTreeMap<u64, DestroyEntry> = BTreeMap::new();
        let catalog_sectors =
            c.btree(&root.catalog_root, "catalog", &mut |c: &mut Checker, k: &[u8], v: &[u8]| match k.first() {
                Some(0x01) => match (std::str::from_utf8(&k[1..]), VolumeRecordPhys::decode(v)) {
                    (Ok(name), Ok(rec)) => {
                        max_vol_id = max_vol_id.max(rec.id);
                        vols.push((name.to_string(), rec))
                    }
                    (_, Err(e)) => c.err(format!("catalog entry {k:02x?}: {e}")),
                    (Err(_), _) => c.err(format!("catalog entry {k:02x?}: volume name is not UTF-8")),
                },
                Some(0x02) => match (k.get(9..).map(std::str::from_utf8), SnapshotRecordPhys::decode(v)) {
                    (Some(Ok(name)), Ok(rec)) if k[1..9] == rec.volume.to_be_bytes() => {
                        max_vol_id = max_vol_id.max(rec.id);
                        snaps.push((name.to_string(), rec))
                    }
                    (_, Err(e)) => c.err(format!("catalog entry {k:02x?}: {e}")),
                    _ => c.err(format!("catalog entry {k:02x?}: malformed snapshot key")),
                },
                Some(0x03) if k.len() == 25 => deadlist_entries.push((k.to_vec(), v.to_vec())),
                Some(&KEY_DESTROY) => match parse_destroy_key(k) {
                    Some((id, 0)) => match DestroyPhys::decode(v) {
                        Ok(h) => destroy_queue.entry(id).or_default().0 = Some(h),
                        Err(e) => c.err(format!("catalog entry {k:02x?}: {e}")),
                    },
                    Some((id, slot)) => match DestroyTreePhys::decode(v) {
                        Ok(t) => {
                            destroy_queue.entry(id).or_default().1.insert(slot, t);
                        }
                        Err(e) => c.err(format!("catalog entry {k:02x?}: {e}")),
                    },
                    None => c.err(format!("catalog entry {k:02x?}: malformed destroy queue key")),
                },
                Some(&KEY_VOLUME_SPACE) | Some(&KEY_POOL_SPACE) => space_entries.push((k.to_vec(), v.to_vec())),
                Some(&KEY_PACK) => match (PackPhys::addr_of_key(k), PackPhys::decode(v)) {
                    (Some(addr), Ok(pack)) => {
                        c.packs.insert(addr, pack);
                    }
                    (_, Err(e)) => c.err(format!("catalog entry {k:02x?}: {e}")),
                    (None, _) => c.err(format!("catalog entry {k:02x?}: malformed pack key")),
                },
                Some(&KEY_DEDUP) => match (DedupPhys::hash_of_key(k), DedupPhys::decode(v)) {
                    (Some(hash), Ok(entry)) => {
                        c.dedup.insert(hash, entry);
                    }
                    (_, Err(e)) => c.err(format!("catalog entry {k:02x?}: {e}")),
                    (None, _) => c.err(format!("catalog entry {k:02x?}: malformed dedup key")),
                },
                _ => c.err(format!("catalog entry {k:02x?}: unknown key")),
            });
        for (k, v) in &space_entries {
            c.space_entry(k, v, &vols);
        }
        if max_vol_id >= root.next_volume_id && !(vols.is_empty() && snaps.is_empty()) {
            c.err(format!("id {max_vol_id} is in use but the next id is {}", root.next_volume_id));
        }
        let mut ids: Vec<u64> = vols.iter().map(|(_, r)| r.id).chain(snaps.iter().map(|(_, r)| r.id)).collect();
        ids.sort();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            c.err("two volumes or snapshots share an id".into());
        }
        // By id: the order of a scrub's bookmarks (pool/control.rs).
        let mut trees: Vec<(u64, String, BlockPtr, u64)> = vols
            .iter()
            .map(|(name, rec)| (rec.id, format!("volume {name}"), rec.tree_root, rec.next_object_id))
            .chain(snaps.iter().map(|(name, rec)| {
                (rec.id, format!("snapshot {}@{name}", rec.volume), rec.tree_root, rec.next_object_id)
            }))
            .collect();
        trees.sort_by_key(|t| t.0);
        for (id, ctx, root, next_object_id) in &trees {
            c.volume_tree(*id, ctx, root, *next_object_id);
        }
        let (destroy_sectors, queued_deadlists) = c.destroy_queue(&destroy_queue, features.ro_compat);
        if c.stopped {
            // Stopped part way: the cross-checks below would report what was not walked.
            return Ok(ScrubOutcome { yielded_for_space: c.yielded, report: c.report, stopped: true });
        }
        c.report.volumes = vols.len() as u64;
        c.report.snapshots = snaps.len() as u64;
        let pack_slack = c.check_packs();
        let dedup_extra = c.check_dedup();
        let unowned = catalog_sectors + pack_slack + destroy_sectors;
        space::check(&mut c, &vols, &snaps, &deadlist_entries, &queued_deadlists, unowned, dedup_extra);
        // The space map as committed with this root, read back from the device.
        match on_disk {
            Ok(on_disk) => {
                c.report.allocated_units = on_disk.allocated_units();
                if on_disk.allocated_units() != root.allocated_units {
                    c.err(format!(
                        "space map has {} units allocated, the root says {}",
                        on_disk.allocated_units(),
                        root.allocated_units
                    ));
                }
                let mut shown = 0;
                for u in 0..c.geo.index_units() {
                    let used = c.referenced[(u / 64) as usize] >> (u % 64) & 1 == 1;
                    let alloc = on_disk.is_allocated(u);
                    if used != alloc {
                        shown += 1;
                        if shown <= 20 {
                            c.err(if used {
                                format!("unit {u} is in use but free in the space map")
                            } else {
                                format!("unit {u} is allocated but nothing references it (leak)")
                            });
                        }
                    }
                }
                if shown > 20 {
                    c.err(format!("... {} more space map mismatches", shown - 20));
                }
            }
            Err(e) => c.err(format!("space map: {e}")),
        }
        Ok(ScrubOutcome { report: c.report, stopped: false, yielded_for_space: false })
    }
}
