//! What differs between two versions of a volume: the entries of their B+trees (dnodes and
//! key-value pairs) and, for an object in both, the records of its block trees.
//!
//! Both walks skip a subtree as soon as the two sides point at the same block (equal block
//! pointers: same address, birth and checksum, so the same bytes). That is what makes an
//! incremental transfer cost what changed, not what the volume holds — and, unlike pruning
//! by birth txg alone, it stays right when the newer version is not a plain descendant of
//! the older one (a restore to an older snapshot in between brings back subtrees born before
//! the base that the base itself does not have).
//!
//! The B+tree walk goes level by level: both frontiers hold the blocks still to compare;
//! pointers present on both sides are dropped, then every node at the highest level left is
//! replaced by its children, until only leaves remain. A shared subtree is at the same level
//! on both sides, so it meets its twin before either is expanded. Memory is the entries of
//! the leaves that differ (proportional to the metadata that changed).

use crate::catalog::volume::KEY_DNODE;
use crate::error::{Corruption, Result};
use crate::format::node::{BtreeNodePhys, INDIRECT_FANOUT, INDIRECT_SHIFT};
use crate::format::BlockPtr;
use crate::pipeline::BlockIo;
use std::collections::{BTreeMap, HashSet};

/// One B+tree entry that differs: its value before and after (`None`: absent).
#[derive(Debug)]
pub(crate) struct EntryChange {
    pub key: Vec<u8>,
    pub old: Option<Vec<u8>>,
    pub new: Option<Vec<u8>>,
}

fn level_of(node: &BtreeNodePhys) -> u8 {
    match node {
        BtreeNodePhys::Leaf { .. } => 0,
        BtreeNodePhys::Internal { level, .. } => *level,
    }
}

/// The entries that differ between the trees rooted at `old` and `new`, by key.
pub(crate) fn tree_diff(io: &BlockIo, old: &BlockPtr, new: &BlockPtr) -> Result<Vec<EntryChange>> {
    let mut fa: Vec<BlockPtr> = [*old].into_iter().filter(|p| !p.is_hole()).collect();
    let mut fb: Vec<BlockPtr> = [*new].into_iter().filter(|p| !p.is_hole()).collect();
    let mut ea = BTreeMap::new();
    let mut eb = BTreeMap::new();
    loop {
        let sa: HashSet<BlockPtr> = fa.iter().copied().collect();
        let sb: HashSet<BlockPtr> = fb.iter().copied().collect();
        fa.retain(|p| !sb.contains(p));
        fb.retain(|p| !sa.contains(p));
        if fa.is_empty() && fb.is_empty() {
            break;
        }
        let na = fa.iter().map(|p| io.read_node(p).map(|n| (*p, n))).collect::<Result<Vec<_>>>()?;
        let nb = fb.iter().map(|p| io.read_node(p).map(|n| (*p, n))).collect::<Result<Vec<_>>>()?;
        let top = na.iter().chain(&nb).map(|(_, n)| level_of(n)).max().expect("a frontier is not empty");
        if top == 0 {
            for (nodes, out) in [(&na, &mut ea), (&nb, &mut eb)] {
                for (_, n) in nodes {
                    if let BtreeNodePhys::Leaf { entries } = &**n {
                        out.extend(entries.iter().cloned());
                    }
                }
            }
            break;
        }
        let expand = |nodes: &[(BlockPtr, std::sync::Arc<BtreeNodePhys>)]| -> Vec<BlockPtr> {
            let mut out = Vec::new();
            for (p, n) in nodes {
                match &**n {
                    BtreeNodePhys::Internal { level, entries } if *level == top => {
                        out.extend(entries.iter().map(|(_, c)| *c).filter(|c| !c.is_hole()))
                    }
                    _ => out.push(*p),
                }
            }
            out
        };
        fa = expand(&na);
        fb = expand(&nb);
    }
    let mut keys: Vec<&Vec<u8>> = ea.keys().chain(eb.keys()).collect();
    keys.sort();
    keys.dedup();
    Ok(keys
        .into_iter()
        .filter(|k| ea.get(*k) != eb.get(*k))
        .map(|k| EntryChange { key: k.clone(), old: ea.get(k).cloned(), new: eb.get(k).cloned() })
        .collect())
}

/// An object id from a dnode key, `None` for a key of another kind.
pub(crate) fn dnode_key_object(key: &[u8]) -> Option<u64> {
    match key {
        [KEY_DNODE, rest @ ..] if rest.len() == 8 => Some(u64::from_be_bytes(rest.try_into().expect("8 bytes"))),
        _ => None,
    }
}

/// A record of the newer block tree that differs from the older one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordChange {
    /// Record `recno` holds the data of `bp` now.
    Data { recno: u64, bp: BlockPtr },
    /// Records `first .. first + count` are holes now (and were not all holes before).
    Hole { first: u64, count: u64 },
}

/// A block-tree pointer with the level its block really is at (its virtual level in the
/// walk may be higher: a shorter tree is the first slot of a taller one).
type Node = (BlockPtr, u8);

fn span(level: u8) -> u64 {
    // Records under one pointer of a node at `level` ≥ 1.
    1u64 << (INDIRECT_SHIFT * (level as u32 - 1)).min(63)
}

fn children(io: &BlockIo, (bp, real): Node, virt: u8) -> Result<Vec<Node>> {
    let hole = (BlockPtr::HOLE, virt - 1);
    if bp.is_hole() {
        return Ok(vec![hole; INDIRECT_FANOUT]);
    }
    if virt > real {
        let mut out = vec![hole; INDIRECT_FANOUT];
        out[0] = (bp, real);
        return Ok(out);
    }
    let ind = io.read_indirect(&bp)?;
    if ind.bps.len() != INDIRECT_FANOUT {
        return Err(Corruption::new("indirect block", Some(bp.addr), format!("{} pointers", ind.bps.len())).into());
    }
    Ok(ind.bps.iter().map(|c| (*c, real - 1)).collect())
}

/// The records below `limit` where the block tree `new` differs from `old` (each a root
/// pointer and its levels; a hole root with 0 levels for an object that did not exist), in
/// record order, holes coalesced.
pub(crate) fn record_diff(
    io: &BlockIo,
    old: Node,
    new: Node,
    limit: u64,
    emit: &mut dyn FnMut(RecordChange) -> Result<()>,
) -> Result<()> {
    let top = old.1.max(new.1);
    let mut pending: Option<(u64, u64)> = None;
    let mut out = |c: RecordChange| -> Result<()> {
        match (c, &mut pending) {
            (RecordChange::Hole { first, count }, Some((f, n))) if *f + *n == first => {
                *n += count;
                Ok(())
            }
            (RecordChange::Hole { first, count }, _) => {
                if let Some((f, n)) = pending.replace((first, count)) {
                    emit(RecordChange::Hole { first: f, count: n })?;
                }
                Ok(())
            }
            (data, _) => {
                if let Some((f, n)) = pending.take() {
                    emit(RecordChange::Hole { first: f, count: n })?;
                }
                emit(data)
            }
        }
    };
    walk(io, old, new, top, 0, limit, &mut out)?;
    if let Some((f, n)) = pending {
        emit(RecordChange::Hole { first: f, count: n })?;
    }
    Ok(())
}

fn walk(
    io: &BlockIo,
    a: Node,
    b: Node,
    virt: u8,
    first: u64,
    limit: u64,
    out: &mut dyn FnMut(RecordChange) -> Result<()>,
) -> Result<()> {
    if first >= limit || a == b || (a.0.is_hole() && b.0.is_hole()) {
        return Ok(());
    }
    if virt == 0 {
        return out(if b.0.is_hole() {
            RecordChange::Hole { first, count: 1 }
        } else {
            RecordChange::Data { recno: first, bp: b.0 }
        });
    }
    let covered = span(virt).saturating_mul(INDIRECT_FANOUT as u64);
    if b.0.is_hole() {
        return out(RecordChange::Hole { first, count: covered.min(limit - first) });
    }
    let (ca, cb) = (children(io, a, virt)?, children(io, b, virt)?);
    for (i, (x, y)) in ca.into_iter().zip(cb).enumerate() {
        let at = first.saturating_add(i as u64 * span(virt));
        if at >= limit {
            break;
        }
        walk(io, x, y, virt - 1, at, limit, out)?;
    }
    Ok(())
}
