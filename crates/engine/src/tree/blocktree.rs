//! The per-object block tree: a radix tree of block pointers over record numbers.
//!
//! An object with `levels` = 0 has at most one record, and its root pointer is that
//! record's data block. With `levels` = L the root is an indirect block of
//! INDIRECT_FANOUT pointers, each covering 256^(L-1) records, down to the data blocks.
//! Holes are hole pointers at any level, so a sparse object costs nothing for its holes,
//! and a whole subtree of holes is one hole pointer.
//!
//! Changes are applied once per txg, in one bottom-up pass over the sorted set of records
//! that changed (`update`): every indirect block on a changed path is rewritten once,
//! whatever the number of records beneath it that changed. Growing the tree (a record
//! beyond the current capacity) adds levels above the old root in the same pass.

use crate::alloc::Allocator;
use crate::error::{Corruption, Result};
use crate::format::node::{IndirectPhys, INDIRECT_FANOUT, INDIRECT_SHIFT};
use crate::format::records::DnodePhys;
use crate::format::{BlockKind, BlockPtr};
use crate::pipeline::BlockIo;
use std::sync::Arc;

fn span(level: u8) -> u64 {
    // Records covered by one pointer of an indirect block at `level` (≥ 1).
    1u64 << (INDIRECT_SHIFT * (level as u32 - 1)).min(63)
}

/// The pointer of indirect block `ind` (at `level`, reached through `bp`) that covers record
/// `recno`. Decoded indirect blocks hold INDIRECT_FANOUT pointers; a shorter one is damage.
fn child_of(ind: &IndirectPhys, bp: &BlockPtr, level: u8, recno: u64) -> Result<BlockPtr> {
    let i = ((recno / span(level)) % INDIRECT_FANOUT as u64) as usize;
    ind.bps.get(i).copied().ok_or_else(|| {
        Corruption::new("indirect block", Some(bp.addr), format!("{} pointers, no pointer {i}", ind.bps.len())).into()
    })
}

fn expect_kind(bp: &BlockPtr, level: u8) -> Result<()> {
    let want = if level == 0 { BlockKind::Data } else { BlockKind::Indirect };
    if !bp.is_hole() && bp.kind != want {
        return Err(Corruption::new(
            "block tree",
            Some(bp.addr),
            format!("expected a {want:?} block at level {level}, found {:?}", bp.kind),
        )
        .into());
    }
    Ok(())
}

/// The data block pointer of record `recno` (a hole if none).
pub fn lookup(io: &BlockIo, root: &BlockPtr, levels: u8, recno: u64) -> Result<BlockPtr> {
    Cursor::new().lookup(io, root, levels, recno)
}

/// [`lookup`] of many records in one pass over a tree that does not change meanwhile (a
/// read planned under the pool's lock): the last level-1 indirect block is kept, so a run
/// of consecutive records costs one walk from the root per `INDIRECT_FANOUT` records, not
/// one per record (a 1 MiB read of 4 KiB records walked the tree 256 times).
#[derive(Default)]
pub struct Cursor {
    /// The first record the kept block covers, its pointer (for errors) and the block.
    leaf: Option<(u64, BlockPtr, Arc<IndirectPhys>)>,
}

impl Cursor {
    pub fn new() -> Cursor {
        Cursor::default()
    }

    /// What [`lookup`] returns for `recno`, from the kept block when it covers `recno`.
    /// `root` and `levels` must be those of every earlier call on this cursor.
    pub fn lookup(&mut self, io: &BlockIo, root: &BlockPtr, levels: u8, recno: u64) -> Result<BlockPtr> {
        let found = self.walk(root, levels, recno, |bp| io.read_indirect(bp).map(Some))?;
        // `read_indirect` answers every level (or fails), so the walk never gives up here.
        found.ok_or_else(|| Corruption::new("block tree", Some(root.addr), "a level was not read").into())
    }

    /// [`Cursor::lookup`] from the metadata cache alone: `None` when a level is not cached
    /// (or the tree does not hold what it should; `lookup` reports that). No I/O.
    pub(crate) fn lookup_cached(&mut self, io: &BlockIo, root: &BlockPtr, levels: u8, recno: u64) -> Option<BlockPtr> {
        self.walk(root, levels, recno, |bp| Ok(io.cached_indirect(bp))).ok().flatten()
    }

    /// The walk of both: `fetch` gives an indirect block, or `None` to give up (`Ok(None)`).
    fn walk(
        &mut self,
        root: &BlockPtr,
        levels: u8,
        recno: u64,
        fetch: impl Fn(&BlockPtr) -> Result<Option<Arc<IndirectPhys>>>,
    ) -> Result<Option<BlockPtr>> {
        if recno >= DnodePhys::capacity_records(levels) {
            return Ok(Some(BlockPtr::HOLE));
        }
        if let Some((first, bp, ind)) = &self.leaf {
            if (*first..first + INDIRECT_FANOUT as u64).contains(&recno) {
                let child = child_of(ind, bp, 1, recno)?;
                expect_kind(&child, 0)?;
                return Ok(Some(child));
            }
        }
        let mut bp = *root;
        expect_kind(&bp, levels)?;
        for level in (1..=levels).rev() {
            if bp.is_hole() {
                return Ok(Some(BlockPtr::HOLE));
            }
            let Some(ind) = fetch(&bp)? else { return Ok(None) };
            let child = child_of(&ind, &bp, level, recno)?;
            expect_kind(&child, level - 1)?;
            if level == 1 {
                self.leaf = Some((recno - recno % INDIRECT_FANOUT as u64, bp, ind));
            }
            bp = child;
        }
        Ok(Some(bp))
    }
}

/// Levels needed to address record `recno`.
pub fn levels_for(recno: u64) -> u8 {
    let mut levels = 0;
    while recno >= DnodePhys::capacity_records(levels) {
        levels += 1;
    }
    levels
}

/// The subtree being rewritten: a real pointer, or (while growing) a level above the old
/// root that exists only in this pass, whose first pointer leads down to the old root.
#[derive(Clone, Copy)]
enum Cur {
    Bp(BlockPtr),
    Grown { old_root: BlockPtr, old_levels: u8 },
}

/// Apply `updates` (sorted, unique record numbers → new data pointers, holes allowed) to
/// the tree (`root`, `levels`), growing it to `new_levels` (≥ `levels`). Rewritten and
/// dropped blocks are pushed to `released`. Returns the new root.
pub fn update(
    io: &BlockIo,
    alloc: &mut Allocator,
    root: BlockPtr,
    levels: u8,
    new_levels: u8,
    updates: &[(u64, BlockPtr)],
    txg: u64,
    released: &mut Vec<BlockPtr>,
) -> Result<BlockPtr> {
    assert!(new_levels >= levels);
    assert!(updates.is_sorted_by(|a, b| a.0 < b.0), "updates sorted and unique");
    if updates.is_empty() && new_levels == levels {
        return Ok(root);
    }
    let cur = if new_levels > levels && !root.is_hole() {
        Cur::Grown { old_root: root, old_levels: levels }
    } else {
        Cur::Bp(root)
    };
    update_subtree(io, alloc, cur, new_levels, 0, updates, txg, released)
}

#[allow(clippy::too_many_arguments)]
fn update_subtree(
    io: &BlockIo,
    alloc: &mut Allocator,
    cur: Cur,
    level: u8,
    base: u64,
    updates: &[(u64, BlockPtr)],
    txg: u64,
    released: &mut Vec<BlockPtr>,
) -> Result<BlockPtr> {
    if level == 0 {
        let &[(recno, new)] = updates else { unreachable!("{} updates of one record", updates.len()) };
        assert_eq!(recno, base, "the update is of this record");
        if let Cur::Bp(old) = cur {
            expect_kind(&old, 0)?;
            if !old.is_hole() {
                released.push(old);
            }
        }
        return Ok(new);
    }
    let mut children = match cur {
        Cur::Bp(bp) if bp.is_hole() => IndirectPhys::empty(),
        Cur::Bp(bp) => {
            expect_kind(&bp, level)?;
            (*io.read_indirect(&bp)?).clone()
        }
        Cur::Grown { .. } => IndirectPhys::empty(),
    };
    let s = span(level);
    // Children that change: those named by updates, and (while growing) child 0.
    let grown_child = match cur {
        Cur::Grown { old_root, old_levels } if level - 1 > old_levels => Some(Cur::Grown { old_root, old_levels }),
        Cur::Grown { old_root, .. } => Some(Cur::Bp(old_root)),
        Cur::Bp(_) => None,
    };
    // Indirect blocks hold INDIRECT_FANOUT pointers (decoding checks it), and `updates`
    // lie inside this subtree (the caller grew the tree to address them).
    let mut rest = updates;
    if let Some(child) = grown_child {
        let n = rest.iter().take_while(|(r, _)| *r < base + s).count();
        let (mine, others) = rest.split_at(n);
        let Some(slot) = children.bps.first_mut() else { unreachable!("an indirect block has pointers") };
        *slot = update_or_keep(io, alloc, child, level - 1, base, mine, txg, released)?;
        rest = others;
    }
    while let Some(&(recno, _)) = rest.first() {
        let idx = ((recno - base) / s) as usize;
        let child_base = base + idx as u64 * s;
        let n = rest.iter().take_while(|(r, _)| *r < child_base + s).count();
        let (mine, others) = rest.split_at(n);
        let Some(slot) = children.bps.get_mut(idx) else { unreachable!("record {recno} outside this subtree") };
        *slot = update_subtree(io, alloc, Cur::Bp(*slot), level - 1, child_base, mine, txg, released)?;
        rest = others;
    }
    if let Cur::Bp(old) = cur {
        if !old.is_hole() {
            released.push(old);
        }
    }
    if children.is_empty() {
        return Ok(BlockPtr::HOLE);
    }
    let bp = io.write_block(alloc, BlockKind::Indirect, &children.encode(), txg)?;
    io.cache_indirect(&bp, children);
    Ok(bp)
}

#[allow(clippy::too_many_arguments)]
fn update_or_keep(
    io: &BlockIo,
    alloc: &mut Allocator,
    cur: Cur,
    level: u8,
    base: u64,
    updates: &[(u64, BlockPtr)],
    txg: u64,
    released: &mut Vec<BlockPtr>,
) -> Result<BlockPtr> {
    match cur {
        Cur::Bp(bp) if updates.is_empty() => Ok(bp),
        _ => update_subtree(io, alloc, cur, level, base, updates, txg, released),
    }
}

/// Visit every block of the tree, top-down: `f(bp, level, first_record)`.
pub fn walk(
    io: &BlockIo,
    root: &BlockPtr,
    levels: u8,
    f: &mut dyn FnMut(&BlockPtr, u8, u64) -> Result<()>,
) -> Result<()> {
    walk_at(io, root, levels, 0, f)
}

fn walk_at(
    io: &BlockIo,
    bp: &BlockPtr,
    level: u8,
    base: u64,
    f: &mut dyn FnMut(&BlockPtr, u8, u64) -> Result<()>,
) -> Result<()> {
    if bp.is_hole() {
        return Ok(());
    }
    expect_kind(bp, level)?;
    f(bp, level, base)?;
    if level > 0 {
        let ind = io.read_indirect(bp)?;
        let s = span(level);
        for (i, child) in ind.bps.iter().enumerate() {
            walk_at(io, child, level - 1, base + i as u64 * s, f)?;
        }
    }
    Ok(())
}

/// Record numbers in [from, to) that have a data block.
pub fn allocated_records(io: &BlockIo, root: &BlockPtr, levels: u8, from: u64, to: u64) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    collect_at(io, root, levels, 0, from, to, &mut out)?;
    Ok(out)
}

fn collect_at(io: &BlockIo, bp: &BlockPtr, level: u8, base: u64, from: u64, to: u64, out: &mut Vec<u64>) -> Result<()> {
    if bp.is_hole() {
        return Ok(());
    }
    expect_kind(bp, level)?;
    if level == 0 {
        if (from..to).contains(&base) {
            out.push(base);
        }
        return Ok(());
    }
    let s = span(level);
    let end = base.saturating_add(s.saturating_mul(INDIRECT_FANOUT as u64));
    if to <= base || from >= end {
        return Ok(());
    }
    let ind = io.read_indirect(bp)?;
    for (i, child) in ind.bps.iter().enumerate() {
        let cb = base + i as u64 * s;
        if cb.saturating_add(s) > from && cb < to {
            collect_at(io, child, level - 1, cb, from, to, out)?;
        }
    }
    Ok(())
}
