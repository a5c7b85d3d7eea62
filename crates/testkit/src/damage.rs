//! Damage that checksums cannot see: a metadata structure reachable from the committed root
//! is decoded, one field is changed in a way that still looks plausible (a counter, a key,
//! a child pointer, a length, a birth txg), and it is encoded again with every checksum on
//! its path up to the uberblock repaired — so the image verifies, and only the engine's own
//! consistency checks stand between the damage and a panic (docs/failure-policy.md).
//!
//! [`pristine_image`] builds a small pool holding most of what the format can express:
//! volumes with and without compression (packs) and dedup, a reservation, snapshots (a
//! group one too), a clone, deleted objects (deadlists), a two-level block tree, the
//! capacity alert, and intent-log blocks not yet committed (written by reference too).
//! [`Image::parse`] walks it from the newest root; [`damage`] applies one change chosen by a
//! [`Chooser`] (a seeded [`SimRng`] in tests, the fuzzer's bytes in
//! fuzz/fuzz_targets/corrupt_rechecksum.rs); [`exercise`] then runs the offline checker and
//! a read-write pass (read everything, write, snapshot, delete, commit, close). Errors are
//! expected there; a panic is the bug this hunts.
//!
//! Blocks are rewritten in place (metadata is never compressed; a change that would need
//! more units than the block has is not applied), and a block reached from several parents
//! (snapshots and clones share subtrees; deadlists name blocks) has every parent repaired.

use crate::SimRng;
use std::collections::HashMap;
use strata_engine::format::blkptr::{BlockKind, BlockPtr, Compression};
use strata_engine::format::intent::{LogBlockPhys, LogRecord};
use strata_engine::format::label::LabelPhys;
use strata_engine::format::node::{BtreeNodePhys, IndirectPhys, KEY_MAX, VALUE_MAX};
use strata_engine::format::records::{DnodePhys, SnapshotRecordPhys, VolumeRecordPhys, ATTR_MAX, MAX_LEVELS};
use strata_engine::format::space::{DedupPhys, PackPhys, PoolSpacePhys, VolumeSpacePhys};
use strata_engine::format::spacemap::{SpacemapChunkPhys, BITS_PER_CHUNK, CHUNK_SLOT_SIZE};
use strata_engine::format::uberblock::UberblockPhys;
use strata_engine::format::{round_up_unit, RING_SLOTS, UNIT_SIZE};
use strata_engine::pipeline::compress::decompress;
use strata_engine::txg::ring_slot_addr;

mod pass;
pub use pass::{exercise, pristine_image, Outcome, IMAGE_BYTES};

/// Where the choices of a damage come from.
pub trait Chooser {
    /// A number in [0, n); n > 0.
    fn below(&mut self, n: u64) -> u64;
}

impl Chooser for SimRng {
    fn below(&mut self, n: u64) -> u64 {
        SimRng::below(self, n)
    }
}

/// Choices read from bytes (a fuzzer's input), four at a time; zeros once they run out.
pub struct ByteChooser<'a> {
    bytes: &'a [u8],
}

impl<'a> ByteChooser<'a> {
    pub fn new(bytes: &'a [u8]) -> ByteChooser<'a> {
        ByteChooser { bytes }
    }
}

impl Chooser for ByteChooser<'_> {
    fn below(&mut self, n: u64) -> u64 {
        let (head, rest) = self.bytes.split_at(self.bytes.len().min(4));
        self.bytes = rest;
        let mut b = [0u8; 4];
        b[..head.len()].copy_from_slice(head);
        u64::from(u32::from_le_bytes(b)) % n
    }
}

fn pick<T: Copy>(c: &mut dyn Chooser, items: &[T]) -> T {
    items[c.below(items.len() as u64) as usize]
}

/// A new value for a counter read from disk: off by one or by a unit's sectors, zero,
/// doubled, or far too large.
fn tweak(c: &mut dyn Chooser, v: u64) -> u64 {
    match c.below(8) {
        0 => 0,
        1 => v.saturating_sub(1),
        2 => v.saturating_add(1),
        3 => v.saturating_sub(8),
        4 => v.saturating_add(8),
        5 => v.saturating_mul(2).max(1),
        6 => 1 << 40,
        _ => u64::MAX >> c.below(4),
    }
}

// ---------------------------------------------------------------------------------------
// The image as a graph of blocks.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tree {
    Catalog,
    Volume,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Node(Tree),
    /// An indirect block at this level (1 = its pointers are data blocks).
    Indirect(u8),
}

/// Where a pointer to a block is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The uberblock's catalog root.
    Root,
    /// Child `index` of internal node `block`.
    Child { block: usize, index: usize },
    /// In the value of entry `index` of leaf `block`, at byte `at`.
    Value { block: usize, index: usize, at: usize },
    /// Pointer `index` of indirect block `block`.
    Indirect { block: usize, index: usize },
}

struct Block {
    bp: BlockPtr,
    shape: Shape,
    /// Every pointer to this block (shared subtrees have several).
    referrers: Vec<Slot>,
}

/// A change that does not fit where it must go (a block that would need more units).
#[derive(Debug)]
pub struct Unfit;

/// A parsed pool image, ready to be damaged.
pub struct Image {
    pub bytes: Vec<u8>,
    label: LabelPhys,
    root: UberblockPhys,
    blocks: Vec<Block>,
    by_key: HashMap<(u64, u64), usize>,
    /// Data block pointers seen (targets for redirected pointers).
    data: Vec<BlockPtr>,
    /// Snapshot txgs (plausible birth txgs).
    snapshot_txgs: Vec<u64>,
    /// Intent log blocks on top of the root: (byte address, block).
    log: Vec<(u64, LogBlockPhys)>,
}

/// What a damage did, for messages.
#[derive(Debug, Clone)]
pub struct Damage {
    /// The txg of the damaged root.
    pub txg: u64,
    pub what: String,
}

impl Image {
    /// Walk the newest root of a healthy image. `None` if it has none.
    pub fn parse(bytes: Vec<u8>) -> Option<Image> {
        let label = LabelPhys::decode(bytes.get(..UNIT_SIZE as usize)?, 0).ok()?;
        let root = (0..RING_SLOTS)
            .filter_map(|slot| {
                let at = ring_slot_addr(0, slot) as usize;
                UberblockPhys::decode(bytes.get(at..at + UNIT_SIZE as usize)?, at as u64).ok().flatten()
            })
            .filter(|ub| ub.pool_guid == label.pool_guid)
            .max_by_key(|ub| ub.txg)?;
        let mut img = Image {
            bytes,
            label,
            root,
            blocks: Vec::new(),
            by_key: HashMap::new(),
            data: Vec::new(),
            snapshot_txgs: Vec::new(),
            log: Vec::new(),
        };
        img.visit(root.catalog_root, Shape::Node(Tree::Catalog), Slot::Root);
        img.deadlist_referrers();
        img.read_log();
        Some(img)
    }

    fn payload(&self, bp: &BlockPtr) -> Option<Vec<u8>> {
        let start = bp.addr as usize;
        let stored = self.bytes.get(start..start + bp.psize as usize)?;
        if bp.checksum_algo.compute(stored) != bp.checksum {
            return None;
        }
        decompress(bp.compression, stored, bp.lsize).ok()
    }

    fn node(&self, block: usize) -> Option<BtreeNodePhys> {
        BtreeNodePhys::decode(&self.payload(&self.blocks[block].bp)?, None).ok()
    }

    fn indirect(&self, block: usize) -> Option<IndirectPhys> {
        IndirectPhys::decode(&self.payload(&self.blocks[block].bp)?, None).ok()
    }

    fn visit(&mut self, bp: BlockPtr, shape: Shape, slot: Slot) {
        if bp.is_hole() {
            return;
        }
        if let Some(&i) = self.by_key.get(&(bp.addr, bp.birth_txg)) {
            if self.blocks[i].bp == bp {
                self.blocks[i].referrers.push(slot);
            }
            return;
        }
        let i = self.blocks.len();
        self.blocks.push(Block { bp, shape, referrers: vec![slot] });
        self.by_key.insert((bp.addr, bp.birth_txg), i);
        match shape {
            Shape::Node(tree) => match self.node(i) {
                Some(BtreeNodePhys::Internal { entries, .. }) => {
                    for (index, (_, child)) in entries.into_iter().enumerate() {
                        self.visit(child, Shape::Node(tree), Slot::Child { block: i, index });
                    }
                }
                Some(BtreeNodePhys::Leaf { entries }) => {
                    for (index, (k, v)) in entries.into_iter().enumerate() {
                        self.visit_value(tree, i, index, &k, &v);
                    }
                }
                None => {}
            },
            Shape::Indirect(level) => {
                for (index, child) in self.indirect(i).map(|ind| ind.bps).unwrap_or_default().into_iter().enumerate() {
                    if child.is_hole() {
                        continue;
                    }
                    if level > 1 {
                        self.visit(child, Shape::Indirect(level - 1), Slot::Indirect { block: i, index });
                    } else {
                        self.data.push(child);
                    }
                }
            }
        }
    }

    fn visit_value(&mut self, tree: Tree, block: usize, index: usize, k: &[u8], v: &[u8]) {
        match (tree, k.first()) {
            (Tree::Catalog, Some(0x01)) => {
                if let Ok(rec) = VolumeRecordPhys::decode(v) {
                    self.visit(rec.tree_root, Shape::Node(Tree::Volume), Slot::Value { block, index, at: 16 });
                }
            }
            (Tree::Catalog, Some(0x02)) => {
                if let Ok(rec) = SnapshotRecordPhys::decode(v) {
                    self.snapshot_txgs.push(rec.txg);
                    self.visit(rec.tree_root, Shape::Node(Tree::Volume), Slot::Value { block, index, at: 32 });
                }
            }
            (Tree::Volume, Some(0x01)) => {
                if let Ok(dn) = DnodePhys::decode(v) {
                    if dn.levels > 0 {
                        self.visit(dn.root, Shape::Indirect(dn.levels), Slot::Value { block, index, at: 16 });
                    } else if !dn.root.is_hole() {
                        self.data.push(dn.root);
                    }
                }
            }
            _ => {}
        }
    }

    /// Deadlist entries (catalog values that are block pointers) point at blocks too.
    fn deadlist_referrers(&mut self) {
        for block in 0..self.blocks.len() {
            if self.blocks[block].shape != Shape::Node(Tree::Catalog) {
                continue;
            }
            let Some(BtreeNodePhys::Leaf { entries }) = self.node(block) else { continue };
            for (index, (k, v)) in entries.iter().enumerate() {
                if k.first() != Some(&0x03) || v.len() != 64 {
                    continue;
                }
                let r = &mut strata_engine::format::codec::Reader::new(v, "deadlist", None);
                let Ok(bp) = BlockPtr::decode_from(r) else { continue };
                if let Some(&i) = self.by_key.get(&(bp.addr, bp.birth_txg)) {
                    if self.blocks[i].bp == bp {
                        self.blocks[i].referrers.push(Slot::Value { block, index, at: 0 });
                    }
                }
            }
        }
    }

    fn read_log(&mut self) {
        let (start, end) = (self.label.log_offset, self.label.log_offset + self.label.log_bytes);
        let mut at = start;
        while at + UNIT_SIZE <= end {
            let Some(head) = self.bytes.get(at as usize..(at + UNIT_SIZE) as usize) else { break };
            let Some((guid, base, seq, _, units)) = LogBlockPhys::header(head) else { break };
            let size = units as u64 * UNIT_SIZE;
            if guid != self.label.pool_guid || base != self.root.txg || seq != self.log.len() as u64 || size == 0 {
                break;
            }
            let Some(block) = self.bytes.get(at as usize..(at + size) as usize).and_then(LogBlockPhys::decode) else {
                break;
            };
            self.log.push((at, block));
            at += size;
        }
    }

    /// Apply `edit` to every B+tree node of the catalog (`catalog`) or of the volume trees
    /// (snapshots' and clones' included), and store each node it changed (it returns true)
    /// with every checksum above repaired. Returns how many nodes changed. For tests that
    /// need one precise damage.
    pub fn edit_nodes(
        &mut self,
        catalog: bool,
        mut edit: impl FnMut(&BlockPtr, &mut BtreeNodePhys) -> bool,
    ) -> Result<usize, Unfit> {
        let tree = if catalog { Tree::Catalog } else { Tree::Volume };
        let mut changed = 0;
        for block in 0..self.blocks.len() {
            if self.blocks[block].shape != Shape::Node(tree) {
                continue;
            }
            let mut node = self.node(block).ok_or(Unfit)?;
            if edit(&self.blocks[block].bp, &mut node) {
                self.rewrite(block, &node.encode())?;
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// Mark data-area unit `unit` allocated or free in the committed space map, with the
    /// root's allocated count kept in step (checksums repaired).
    pub fn mark_unit(&mut self, unit: u64, allocated: bool) -> Result<(), Unfit> {
        let chunk = unit / BITS_PER_CHUNK;
        let (addr, mut ch) = self.current_chunk(chunk).ok_or(Unfit)?;
        let bit = unit % BITS_PER_CHUNK;
        let byte = &mut ch.bits[(bit / 8) as usize];
        if (*byte >> (bit % 8) & 1 == 1) == allocated {
            return Err(Unfit);
        }
        *byte ^= 1 << (bit % 8);
        let raw = ch.encode();
        self.bytes[addr as usize..addr as usize + raw.len()].copy_from_slice(&raw);
        self.root.allocated_units =
            if allocated { self.root.allocated_units + 1 } else { self.root.allocated_units - 1 };
        self.write_root();
        Ok(())
    }

    /// The newest version of space map chunk `chunk` at or before the root: (address, chunk).
    fn current_chunk(&self, chunk: u64) -> Option<(u64, SpacemapChunkPhys)> {
        let slot_addr = |slot: u64| self.label.spacemap_offset + (chunk * 2 + slot) * CHUNK_SLOT_SIZE as u64;
        (0..2)
            .filter_map(|slot| {
                let at = slot_addr(slot);
                let raw = self.bytes.get(at as usize..at as usize + CHUNK_SLOT_SIZE)?;
                let ch = SpacemapChunkPhys::decode(raw, at).ok().flatten()?;
                (ch.txg <= self.root.txg && ch.chunk_index as u64 == chunk).then_some((at, ch))
            })
            .max_by_key(|(_, ch)| ch.txg)
    }

    /// The indirect block `bp` points at, as the image holds it (verified).
    pub fn indirect_at(&self, bp: &BlockPtr) -> Option<IndirectPhys> {
        IndirectPhys::decode(&self.payload(bp)?, None).ok()
    }

    /// Change the indirect block `bp` points at (every checksum above it repaired).
    pub fn edit_indirect(&mut self, bp: &BlockPtr, edit: impl FnOnce(&mut IndirectPhys)) -> Result<(), Unfit> {
        let block = *self.by_key.get(&(bp.addr, bp.birth_txg)).ok_or(Unfit)?;
        let mut ind = self.indirect(block).ok_or(Unfit)?;
        edit(&mut ind);
        self.rewrite(block, &ind.encode())
    }

    /// The data-area unit at byte address `addr`.
    pub fn unit_of(&self, addr: u64) -> u64 {
        (addr - self.label.data_offset) / UNIT_SIZE
    }

    /// Change the newest root's fields (its checksum is repaired).
    pub fn edit_root(&mut self, edit: impl FnOnce(&mut UberblockPhys)) {
        edit(&mut self.root);
        self.write_root();
    }

    /// How many metadata blocks, data pointers and log blocks the walk found.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.blocks.len(), self.data.len(), self.log.len())
    }

    // -----------------------------------------------------------------------------------
    // Writing back, with every checksum above repaired.

    fn write_root(&mut self) {
        let raw = self.root.encode();
        for label in 0..2 {
            let at = ring_slot_addr(label, self.root.txg % RING_SLOTS) as usize;
            self.bytes[at..at + raw.len()].copy_from_slice(&raw);
        }
    }

    /// Store `payload` as block `block`'s new content, in place, and repair every pointer
    /// to it (and theirs, up to the uberblock).
    fn rewrite(&mut self, block: usize, payload: &[u8]) -> Result<(), Unfit> {
        let old = self.blocks[block].bp;
        let psize = payload.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let span = round_up_unit(old.psize as u64) as usize;
        if psize == 0 || round_up_unit(psize as u64) as usize > span {
            return Err(Unfit);
        }
        let stored = &payload[..psize];
        let start = old.addr as usize;
        self.bytes[start..start + span].fill(0);
        self.bytes[start..start + psize].copy_from_slice(stored);
        let bp = BlockPtr {
            psize: psize as u32,
            lsize: payload.len() as u32,
            compression: Compression::None,
            checksum: old.checksum_algo.compute(stored),
            ..old
        };
        self.blocks[block].bp = bp;
        for slot in self.blocks[block].referrers.clone() {
            self.set_pointer(slot, bp)?;
        }
        Ok(())
    }

    /// Make the pointer at `slot` say `bp`, repairing the checksums above it.
    fn set_pointer(&mut self, slot: Slot, bp: BlockPtr) -> Result<(), Unfit> {
        match slot {
            Slot::Root => {
                self.root.catalog_root = bp;
                self.write_root();
                Ok(())
            }
            Slot::Child { block, index } => {
                let Some(BtreeNodePhys::Internal { level, mut entries }) = self.node(block) else { return Err(Unfit) };
                entries[index].1 = bp;
                self.rewrite(block, &BtreeNodePhys::Internal { level, entries }.encode())
            }
            Slot::Value { block, index, at } => {
                let Some(BtreeNodePhys::Leaf { mut entries }) = self.node(block) else { return Err(Unfit) };
                entries[index].1[at..at + 64].copy_from_slice(&bp.encode());
                self.rewrite(block, &BtreeNodePhys::Leaf { entries }.encode())
            }
            Slot::Indirect { block, index } => {
                let mut ind = self.indirect(block).ok_or(Unfit)?;
                ind.bps[index] = bp;
                self.rewrite(block, &ind.encode())
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Mutations.

    /// Another pointer a field could plausibly hold: a block of the same kind.
    fn other_of_kind(&self, c: &mut dyn Chooser, bp: &BlockPtr) -> Option<BlockPtr> {
        let same: Vec<BlockPtr> = match bp.kind {
            BlockKind::Data => self.data.iter().filter(|d| *d != bp).copied().collect(),
            kind => self.blocks.iter().map(|b| b.bp).filter(|b| b.kind == kind && b != bp).collect(),
        };
        (!same.is_empty()).then(|| pick(c, &same))
    }

    fn birth(&self, c: &mut dyn Chooser, birth: u64) -> u64 {
        let mut txgs =
            vec![1, birth.saturating_sub(1).max(1), birth + 1, self.root.txg, self.root.txg + 1 + c.below(3)];
        txgs.extend(self.snapshot_txgs.iter().flat_map(|&t| [t, t + 1]));
        pick(c, &txgs)
    }

    /// One plausible change of a block pointer (`hole_ok`: may it become a hole).
    fn mutate_bp(&self, c: &mut dyn Chooser, bp: BlockPtr, hole_ok: bool) -> (BlockPtr, String) {
        match c.below(8) {
            0 | 1 => {
                let birth = self.birth(c, bp.birth_txg);
                (BlockPtr { birth_txg: birth, ..bp }, format!("birth txg {} -> {birth}", bp.birth_txg))
            }
            2 => match self.other_of_kind(c, &bp) {
                // Another block's contents under this pointer's birth: a cross-link.
                Some(o) => (BlockPtr { birth_txg: bp.birth_txg, ..o }, format!("redirected to {o:?}")),
                None => (BlockPtr { birth_txg: bp.birth_txg + 1, ..bp }, "birth txg + 1".into()),
            },
            3 => match self.other_of_kind(c, &bp) {
                // The very same pointer as another: a block referenced twice.
                Some(o) => (o, format!("duplicate of {o:?}")),
                None => (BlockPtr { birth_txg: 1, ..bp }, "birth txg 1".into()),
            },
            4 => {
                let kinds = [BlockKind::BtreeNode, BlockKind::Indirect, BlockKind::Data];
                let others: Vec<BlockKind> = kinds.into_iter().filter(|k| *k != bp.kind).collect();
                let kind = pick(c, &others);
                let packed = bp.packed && kind == BlockKind::Data;
                let dedup = bp.dedup && kind == BlockKind::Data;
                (BlockPtr { kind, packed, dedup, ..bp }, format!("kind {:?} -> {kind:?}", bp.kind))
            }
            5 => {
                let lsize = pick(c, &[bp.psize, bp.lsize / 2, bp.lsize * 2, 4096, 16384, 1 << 20]).max(bp.psize);
                (BlockPtr { lsize, ..bp }, format!("lsize {} -> {lsize}", bp.lsize))
            }
            6 => {
                // Past the data area: just past its end, or at the end of the address space.
                let end = self.label.data_offset + self.label.data_units * UNIT_SIZE;
                let addr = pick(c, &[end, !(UNIT_SIZE - 1), !511]);
                (BlockPtr { addr, ..bp }, format!("address {} -> {addr}", bp.addr))
            }
            _ if hole_ok => (BlockPtr::HOLE, "made a hole".into()),
            _ => (BlockPtr { dedup: !bp.dedup && bp.kind == BlockKind::Data, ..bp }, "dedup flag flipped".into()),
        }
    }

    /// Change one field of a leaf value, decoded by its key (`None`: not applied).
    fn mutate_value(&self, c: &mut dyn Chooser, tree: Tree, k: &[u8], v: &[u8]) -> Option<(Vec<u8>, String)> {
        Some(match (tree, k.first()) {
            (Tree::Catalog, Some(0x01)) => {
                let mut r = VolumeRecordPhys::decode(v).ok()?;
                let what = match c.below(12) {
                    0 => format!("used sectors -> {}", set(&mut r.used_sectors, |v| tweak(c, v))),
                    1 => format!("written sectors -> {}", set(&mut r.written_sectors, |v| tweak(c, v))),
                    2 => format!("total sectors -> {}", set(&mut r.total_sectors, |v| tweak(c, v))),
                    3 => format!("next object id -> {}", set(&mut r.next_object_id, |v| tweak(c, v))),
                    4 => format!("parent -> {}", set(&mut r.parent, |v| tweak(c, v))),
                    5 => format!("deadlist -> {}", set(&mut r.deadlist, |v| tweak(c, v))),
                    6 => format!("origin -> {}", set(&mut r.origin, |v| tweak(c, v))),
                    7 => format!("quota -> {}", set(&mut r.quota_bytes, |_| pick(c, &[1, 4096, 1 << 20, u64::MAX]))),
                    8 => format!("record size -> {}", set(&mut r.record_size, |_| pick(c, &[4096, 16384, 1 << 20]))),
                    9 => format!("id -> {}", set(&mut r.id, |v| tweak(c, v))),
                    10 => {
                        r.saved_bytes = r.saved_bytes.map(|s| tweak(c, s)).filter(|&s| s < u64::MAX);
                        format!("saved bytes -> {:?}", r.saved_bytes)
                    }
                    _ => {
                        let (bp, what) = self.mutate_bp(c, r.tree_root, true);
                        r.tree_root = bp;
                        format!("tree root: {what}")
                    }
                };
                (r.encode(), format!("volume record {}: {what}", String::from_utf8_lossy(&k[1..])))
            }
            (Tree::Catalog, Some(0x02)) => {
                let mut r = SnapshotRecordPhys::decode(v).ok()?;
                let what = match c.below(9) {
                    0 => format!("txg -> {}", set(&mut r.txg, |v| tweak(c, v))),
                    1 => format!("referenced -> {}", set(&mut r.referenced_sectors, |v| tweak(c, v))),
                    2 => format!("written -> {}", set(&mut r.written_sectors, |v| tweak(c, v))),
                    3 => format!("parent -> {}", set(&mut r.parent, |v| tweak(c, v))),
                    4 => format!("deadlist -> {}", set(&mut r.deadlist, |v| tweak(c, v))),
                    5 => format!("volume -> {}", set(&mut r.volume, |v| tweak(c, v))),
                    6 => format!("id -> {}", set(&mut r.id, |v| tweak(c, v))),
                    7 => format!("next object id -> {}", set(&mut r.next_object_id, |v| tweak(c, v))),
                    _ => {
                        let (bp, what) = self.mutate_bp(c, r.tree_root, true);
                        r.tree_root = bp;
                        format!("tree root: {what}")
                    }
                };
                (r.encode(), format!("snapshot record: {what}"))
            }
            (Tree::Catalog, Some(0x03)) if v.len() == 64 => {
                let bp =
                    BlockPtr::decode_from(&mut strata_engine::format::codec::Reader::new(v, "deadlist", None)).ok()?;
                let (bp, what) = self.mutate_bp(c, bp, false);
                (bp.encode().to_vec(), format!("deadlist entry: {what}"))
            }
            (Tree::Catalog, Some(0x10)) => {
                let mut r = VolumeSpacePhys::decode(v).ok()?;
                r.reservation_bytes = pick(c, &[1, 4096, 1 << 40, u64::MAX]);
                (r.encode(), format!("reservation -> {}", r.reservation_bytes))
            }
            (Tree::Catalog, Some(0x11)) => {
                let mut r = PoolSpacePhys::decode(v).ok()?;
                r.capacity_alert_percent = pick(c, &[1, 50, 99]);
                (r.encode(), format!("capacity alert -> {}%", r.capacity_alert_percent))
            }
            (Tree::Catalog, Some(0x12)) => {
                let mut r = PackPhys::decode(v).ok()?;
                let what = match c.below(2) {
                    0 => format!("units -> {}", set(&mut r.units, |_| pick(c, &[1, 2, 8]))),
                    _ => format!("live -> {}", set(&mut r.live, |v| (tweak(c, v as u64) as u32).max(1))),
                };
                (r.encode(), format!("pack: {what}"))
            }
            (Tree::Catalog, Some(0x13)) => {
                let mut r = DedupPhys::decode(v).ok()?;
                let what = match c.below(4) {
                    0 => format!("refs -> {}", set(&mut r.refs, |v| (tweak(c, v as u64) as u32).max(1))),
                    1 if !self.data.is_empty() => {
                        let o = pick(c, &self.data);
                        format!("address -> {}", set(&mut r.addr, |_| o.addr))
                    }
                    2 => format!(
                        "lsize -> {}",
                        set(&mut r.lsize, |_| pick(c, &[r.psize, 4096, 16384, 1 << 20]).max(r.psize))
                    ),
                    _ => format!("packed -> {}", set(&mut r.packed, |v| !v)),
                };
                (r.encode(), format!("dedup entry: {what}"))
            }
            (Tree::Volume, Some(0x01)) => {
                let mut d = DnodePhys::decode(v).ok()?;
                let what = match c.below(7) {
                    0 => format!("size -> {}", set(&mut d.size, |v| tweak(c, v).min(i64::MAX as u64))),
                    1 => format!(
                        "record size -> {}",
                        set(&mut d.record_size, |_| pick(c, &[4096, 8192, 16384, 1 << 20]))
                    ),
                    2 => format!("levels -> {}", set(&mut d.levels, |_| pick(c, &[0, 1, 2, 3, MAX_LEVELS]))),
                    3 | 4 => format!("data sectors -> {}", set(&mut d.data_sectors, |v| tweak(c, v))),
                    5 => {
                        let n = c.below(d.attr.len() as u64 + 1) as usize;
                        d.attr.truncate(n);
                        format!("attribute cut to {n} bytes")
                    }
                    _ => {
                        let (bp, what) = self.mutate_bp(c, d.root, true);
                        d.root = bp;
                        format!("root: {what}")
                    }
                };
                debug_assert!(d.attr.len() <= ATTR_MAX);
                (d.encode(), format!("dnode {:02x?}: {what}", &k[1..]))
            }
            _ => {
                // A value the engine does not decode (the caller's key-value entries): one
                // byte changed, or cut short.
                let mut v = v.to_vec();
                if v.is_empty() || c.below(2) == 0 {
                    let n = c.below(v.len() as u64 + 1) as usize;
                    v.truncate(n);
                    (v, format!("value of {k:02x?} cut to {n} bytes"))
                } else {
                    let at = c.below(v.len() as u64) as usize;
                    v[at] ^= 1 << c.below(8);
                    (v, format!("value of {k:02x?}: byte {at} flipped"))
                }
            }
        })
    }

    /// Change one thing in B+tree node `block`.
    fn mutate_node(&mut self, c: &mut dyn Chooser, block: usize) -> Result<String, Unfit> {
        let Shape::Node(tree) = self.blocks[block].shape else { return Err(Unfit) };
        let node = self.node(block).ok_or(Unfit)?;
        let (node, what) = match node {
            BtreeNodePhys::Internal { level, mut entries } => {
                let i = c.below(entries.len() as u64) as usize;
                let what = match c.below(4) {
                    0 | 1 => {
                        let (bp, what) = self.mutate_bp(c, entries[i].1, false);
                        entries[i].1 = bp;
                        format!("child {i}: {what}")
                    }
                    2 if entries.len() > 1 => {
                        let j = (i + 1) % entries.len();
                        let (a, b) = (entries[i].1, entries[j].1);
                        entries[i].1 = b;
                        entries[j].1 = a;
                        format!("children {i} and {j} swapped")
                    }
                    _ => format!("key {i}: {}", mutate_key(c, &mut entries[i].0)),
                };
                (BtreeNodePhys::Internal { level, entries }, format!("{tree:?} node (level {level}): {what}"))
            }
            BtreeNodePhys::Leaf { mut entries } => {
                if entries.is_empty() {
                    return Err(Unfit);
                }
                let i = c.below(entries.len() as u64) as usize;
                let what = match c.below(8) {
                    0 => format!("key {i}: {}", mutate_key(c, &mut entries[i].0)),
                    1 => {
                        let (k, _) = entries.remove(i);
                        format!("entry {k:02x?} removed")
                    }
                    _ => {
                        let (k, v) = &entries[i];
                        let (v, what) = self.mutate_value(c, tree, k, v).ok_or(Unfit)?;
                        if v.len() > VALUE_MAX {
                            return Err(Unfit);
                        }
                        entries[i].1 = v;
                        what
                    }
                };
                (BtreeNodePhys::Leaf { entries }, format!("{tree:?} leaf: {what}"))
            }
        };
        self.rewrite(block, &node.encode())?;
        Ok(what)
    }

    fn mutate_indirect(&mut self, c: &mut dyn Chooser, block: usize) -> Result<String, Unfit> {
        let mut ind = self.indirect(block).ok_or(Unfit)?;
        let used: Vec<usize> = (0..ind.bps.len()).filter(|&i| !ind.bps[i].is_hole()).collect();
        if used.is_empty() {
            return Err(Unfit);
        }
        let i = pick(c, &used);
        let what = if c.below(4) == 0 {
            // Moved to another slot: the record number changes.
            let j = c.below(ind.bps.len() as u64) as usize;
            ind.bps.swap(i, j);
            format!("pointers {i} and {j} swapped")
        } else {
            let (bp, what) = self.mutate_bp(c, ind.bps[i], true);
            ind.bps[i] = bp;
            format!("pointer {i}: {what}")
        };
        self.rewrite(block, &ind.encode())?;
        Ok(format!("indirect block: {what}"))
    }

    fn mutate_root(&mut self, c: &mut dyn Chooser) -> Result<String, Unfit> {
        let what = match c.below(3) {
            0 => format!("allocated units -> {}", set(&mut self.root.allocated_units, |v| tweak(c, v))),
            1 => format!("next volume id -> {}", set(&mut self.root.next_volume_id, |v| tweak(c, v))),
            _ => {
                let (bp, what) = self.mutate_bp(c, self.root.catalog_root, false);
                self.root.catalog_root = bp;
                format!("catalog root: {what}")
            }
        };
        self.write_root();
        Ok(format!("uberblock: {what}"))
    }

    /// Flip one bit of the committed space map (a block's unit, or a free one), keeping
    /// the root's allocated count in step (mostly: a count that disagrees is damage too).
    fn mutate_spacemap(&mut self, c: &mut dyn Chooser) -> Result<String, Unfit> {
        let unit = if c.below(3) > 0 && !self.blocks.is_empty() {
            let bp = if c.below(2) == 0 || self.data.is_empty() {
                self.blocks[c.below(self.blocks.len() as u64) as usize].bp
            } else {
                pick(c, &self.data)
            };
            self.unit_of(bp.addr)
        } else {
            c.below(self.label.data_units)
        };
        let (addr, mut ch) = self.current_chunk(unit / BITS_PER_CHUNK).ok_or(Unfit)?;
        let bit = unit % BITS_PER_CHUNK;
        ch.bits[(bit / 8) as usize] ^= 1 << (bit % 8);
        let now_set = ch.bits[(bit / 8) as usize] >> (bit % 8) & 1 == 1;
        let raw = ch.encode();
        self.bytes[addr as usize..addr as usize + raw.len()].copy_from_slice(&raw);
        let keep_count = c.below(4) > 0;
        if keep_count {
            self.root.allocated_units =
                if now_set { self.root.allocated_units + 1 } else { self.root.allocated_units.saturating_sub(1) };
            self.write_root();
        }
        Ok(format!(
            "space map: unit {unit} marked {}{}",
            if now_set { "allocated" } else { "free" },
            if keep_count { "" } else { " (root's count left as it was)" }
        ))
    }

    /// Change one field of one intent-log record (same encoded size: the blocks after it
    /// stay where they are).
    fn mutate_log(&mut self, c: &mut dyn Chooser) -> Result<String, Unfit> {
        if self.log.is_empty() {
            return Err(Unfit);
        }
        let b = c.below(self.log.len() as u64) as usize;
        let (at, block) = self.log[b].clone();
        let mut records = LogRecord::decode_all(&block.payload).map_err(|_| Unfit)?;
        if records.is_empty() {
            return Err(Unfit);
        }
        let i = c.below(records.len() as u64) as usize;
        let what = match &mut records[i] {
            LogRecord::Write { vol, obj, offset, .. } | LogRecord::Punch { vol, obj, offset, .. } => match c.below(3) {
                0 => format!("volume -> {}", set(vol, |v| tweak(c, v))),
                1 => format!("object -> {}", set(obj, |v| tweak(c, v))),
                _ => format!("offset -> {}", set(offset, |v| tweak(c, v))),
            },
            LogRecord::Truncate { obj, size, .. } => match c.below(2) {
                0 => format!("object -> {}", set(obj, |v| tweak(c, v))),
                _ => format!("size -> {}", set(size, |v| tweak(c, v))),
            },
            LogRecord::SetAttr { obj, .. }
            | LogRecord::CreateObject { obj, .. }
            | LogRecord::DeleteObject { obj, .. } => {
                format!("object -> {}", set(obj, |v| tweak(c, v)))
            }
            LogRecord::KvPut { vol, .. } | LogRecord::KvDelete { vol, .. } => {
                format!("volume -> {}", set(vol, |v| tweak(c, v)))
            }
            LogRecord::WriteRef { obj, offset, bps, .. } => match c.below(3) {
                0 => format!("object -> {}", set(obj, |v| tweak(c, v))),
                1 => format!("offset -> {}", set(offset, |v| tweak(c, v))),
                _ => {
                    let j = c.below(bps.len() as u64) as usize;
                    let (bp, what) = self.mutate_bp(c, bps[j], false);
                    bps[j] = bp;
                    format!("block {j}: {what}")
                }
            },
            LogRecord::GroupEnd => return Err(Unfit),
        };
        let mut w = strata_engine::format::codec::Writer::with_capacity(block.payload.len());
        for r in &records {
            r.encode_into(&mut w);
        }
        let payload = w.into_inner();
        if payload.len() != block.payload.len() {
            return Err(Unfit);
        }
        let raw = LogBlockPhys { payload, ..block }.encode();
        self.bytes[at as usize..at as usize + raw.len()].copy_from_slice(&raw);
        Ok(format!("intent log block {b} record {i}: {what}"))
    }
}

/// Replace `field` with `f` of its value; returns the new value, for messages.
fn set<T: Copy + std::fmt::Debug>(field: &mut T, f: impl FnOnce(T) -> T) -> String {
    let v = f(*field);
    *field = v;
    format!("{v:?}")
}

/// Change a key: cut short or lengthened by a byte, its last byte moved by one, or one byte
/// flipped.
fn mutate_key(c: &mut dyn Chooser, k: &mut Vec<u8>) -> String {
    if k.is_empty() {
        k.push(pick(c, &[0x01, 0x02, 0x80]));
        return "empty key given a byte".into();
    }
    match c.below(4) {
        0 => {
            let cut = k.pop();
            return format!("last byte {cut:02x?} cut");
        }
        1 if k.len() < KEY_MAX => {
            let b = pick(c, &[0x00, 0xff]);
            k.push(b);
            return format!("byte {b:#04x} appended");
        }
        _ => {}
    }
    let at = if c.below(2) == 0 { k.len() - 1 } else { c.below(k.len() as u64) as usize };
    let old = k[at];
    k[at] = match c.below(3) {
        0 => old.wrapping_add(1),
        1 => old.wrapping_sub(1),
        _ => old ^ (1 << c.below(8)),
    };
    format!("byte {at} {old:#04x} -> {:#04x}", k[at])
}

/// Apply one damage to `image`, as `c` chooses. `None` if what it chose did not fit (the
/// image is then unchanged).
pub fn damage(image: &[u8], c: &mut dyn Chooser) -> Option<(Vec<u8>, Damage)> {
    let mut img = Image::parse(image.to_vec())?;
    let txg = img.root.txg;
    let of_shape = |f: &dyn Fn(Shape) -> bool| -> Vec<usize> {
        (0..img.blocks.len()).filter(|&i| f(img.blocks[i].shape)).collect()
    };
    let blocks = match c.below(20) {
        0 => None,
        1 | 2 => None,
        3 | 4 => None,
        5..=9 => Some(of_shape(&|s| s == Shape::Node(Tree::Catalog))),
        10..=15 => Some(of_shape(&|s| s == Shape::Node(Tree::Volume))),
        _ => Some(of_shape(&|s| matches!(s, Shape::Indirect(_)))),
    };
    let what = match blocks {
        None => match c.below(5) {
            0 => img.mutate_root(c),
            1 | 2 => img.mutate_spacemap(c),
            _ => img.mutate_log(c),
        },
        Some(blocks) if blocks.is_empty() => return None,
        Some(blocks) => {
            let block = pick(c, &blocks);
            match img.blocks[block].shape {
                Shape::Node(_) => img.mutate_node(c, block),
                Shape::Indirect(_) => img.mutate_indirect(c, block),
            }
        }
    }
    .ok()?;
    Some((img.bytes, Damage { txg, what }))
}
