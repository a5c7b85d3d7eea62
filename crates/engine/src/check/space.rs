//! The snapshot accounting, checked against the trees themselves (see `snapshot.rs` for the
//! model):
//! - every head and snapshot occupies exactly the units its record says, and the units born
//!   after its parent's txg are its recorded `written`;
//! - a head's or snapshot's deadlist is exactly the set of its parent's blocks it does not
//!   hold, and nothing born after the parent is on it;
//! - every deadlist belongs to a head or snapshot;
//! - a volume's `total` is the units born in it (after its origin) that any of its trees hold;
//! - the volumes' totals, the catalog tree and the free sectors inside packs add up to
//!   every referenced unit of the pool.
//!
//! Figures are sectors (`BlockPtr::sectors`).
//!
//! Each tree is walked in full here (shared subtrees included), so memory grows with the
//! blocks of the two largest trees and of one volume's union.

use super::Checker;
use crate::catalog::volume::KEY_DNODE;
use crate::check::walk_btree;
use crate::format::codec::Reader;
use crate::format::node::BtreeNodePhys;
use crate::format::records::{DnodePhys, SnapshotRecordPhys, VolumeRecordPhys};
use crate::format::BlockPtr;
use crate::pipeline::BlockIo;
use crate::tree::blocktree;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A tree's blocks: (address, birth txg) → (birth txg, sectors, bytes saved by
/// compression/trimming). Dedup references share an address, never an (address, birth).
type Blocks = HashMap<(u64, u64), (u64, u64, u64)>;

fn blocks_of(io: &BlockIo, root: &BlockPtr) -> crate::error::Result<Blocks> {
    let mut out = Blocks::new();
    walk_btree(io, root, &mut |bp, node| {
        out.insert((bp.addr, bp.birth_txg), (bp.birth_txg, bp.sectors(), 0));
        if let BtreeNodePhys::Leaf { entries } = node {
            for (_, v) in entries.iter().filter(|(k, _)| k.first() == Some(&KEY_DNODE)) {
                let dn = DnodePhys::decode(v)?;
                blocktree::walk(io, &dn.root, dn.levels, &mut |b, _, _| {
                    out.insert(
                        (b.addr, b.birth_txg),
                        (b.birth_txg, b.sectors(), crate::catalog::volume::data_saved_bytes(b)),
                    );
                    Ok(())
                })?;
            }
        }
        Ok(())
    })?;
    Ok(out)
}

struct Tree {
    ctx: String,
    volume: u64,
    root: BlockPtr,
    parent: u64,
    deadlist: u64,
    used: u64,
    written: u64,
    /// A head's recorded savings (None: a snapshot, or not tracked).
    saved: Option<u64>,
}

pub(super) fn check(
    c: &mut Checker<'_>,
    vols: &[(String, VolumeRecordPhys)],
    snaps: &[(String, SnapshotRecordPhys)],
    deadlist_entries: &[(Vec<u8>, Vec<u8>)],
    // Deadlists of deleted volumes' trees still in the destroy queue (freed with it).
    queued_deadlists: &HashSet<u64>,
    // The catalog's nodes, the free sectors inside packs and the destroy queue's blocks.
    unowned_sectors: u64,
    // Sectors of dedup references beyond each shared block's first.
    dedup_extra_sectors: u64,
) {
    let snap_by_id: HashMap<u64, &SnapshotRecordPhys> = snaps.iter().map(|(_, r)| (r.id, r)).collect();
    let vol_by_id: HashMap<u64, &(String, VolumeRecordPhys)> = vols.iter().map(|v| (v.1.id, v)).collect();
    let mut trees: Vec<Tree> = vols
        .iter()
        .map(|(name, r)| Tree {
            ctx: format!("volume {name}"),
            volume: r.id,
            root: r.tree_root,
            parent: r.parent,
            deadlist: r.deadlist,
            used: r.used_sectors,
            written: r.written_sectors,
            saved: r.saved_bytes,
        })
        .collect();
    for (name, _) in vols.iter().filter(|(_, r)| r.saved_bytes.is_none()) {
        c.report.notes.push(format!("volume {name}: savings not tracked (written by an older build)"));
    }
    for (name, r) in snaps {
        let Some((vname, _)) = vol_by_id.get(&r.volume) else {
            c.err(format!("snapshot {name} belongs to volume id {} which does not exist", r.volume));
            continue;
        };
        trees.push(Tree {
            ctx: format!("snapshot {vname}@{name}"),
            volume: r.volume,
            root: r.tree_root,
            parent: r.parent,
            deadlist: r.deadlist,
            used: r.referenced_sectors,
            written: r.written_sectors,
            saved: None,
        });
    }

    // Deadlists as stored: id → (addr, birth) → pointer.
    let mut deadlists: BTreeMap<u64, HashMap<(u64, u64), BlockPtr>> = BTreeMap::new();
    for (k, v) in deadlist_entries {
        let dl = u64::from_be_bytes(k[1..9].try_into().expect("25-byte key"));
        match BlockPtr::decode_from(&mut Reader::new(v, "deadlist entry", None)) {
            Ok(bp) if !bp.is_hole() && k[9..17] == bp.birth_txg.to_be_bytes() && k[17..25] == bp.addr.to_be_bytes() => {
                deadlists.entry(dl).or_default().insert((bp.addr, bp.birth_txg), bp);
            }
            Ok(bp) => c.err(format!("deadlist entry {k:02x?} does not match its pointer {bp:?}")),
            Err(e) => c.err(format!("deadlist entry {k:02x?}: {e}")),
        }
    }
    let mut owned: HashSet<u64> = trees.iter().map(|t| t.deadlist).filter(|d| *d != 0).collect();
    owned.extend(queued_deadlists);
    for dl in deadlists.keys().filter(|d| !owned.contains(d)) {
        c.err(format!("deadlist {dl} belongs to no volume or snapshot (leaked entries)"));
    }

    let io = c.io;
    let mut union: HashMap<u64, HashMap<(u64, u64), u64>> = HashMap::new(); // volume → (addr, birth) → sectors
    for t in &trees {
        let mine = match blocks_of(io, &t.root) {
            Ok(b) => b,
            Err(e) => {
                c.err(format!("{}: cannot account its space: {e}", t.ctx));
                continue;
            }
        };
        let used: u64 = mine.values().map(|(_, u, _)| u).sum();
        if let Some(recorded) = t.saved {
            let saved: u64 = mine.values().map(|(_, _, s)| s).sum();
            c.report.saved_bytes += saved;
            if saved != recorded {
                c.err(format!("{}: data records save {saved} bytes but the volume records {recorded}", t.ctx));
            }
        }
        if used != t.used {
            c.err(format!("{}: blocks are charged {used} sectors but the record says {}", t.ctx, t.used));
        }
        let parent = if t.parent == 0 { None } else { snap_by_id.get(&t.parent).copied() };
        if t.parent != 0 && parent.is_none() {
            c.err(format!("{}: parent snapshot {} does not exist", t.ctx, t.parent));
            continue;
        }
        let parent_txg = parent.map_or(0, |p| p.txg);
        let written: u64 = mine.values().filter(|(b, _, _)| *b > parent_txg).map(|(_, u, _)| u).sum();
        if written != t.written {
            c.err(format!(
                "{}: blocks born after its parent are charged {written} sectors but the record says {}",
                t.ctx, t.written
            ));
        }
        let origin_txg = vol_by_id.get(&t.volume).map_or(0, |(_, r)| snap_by_id.get(&r.origin).map_or(0, |s| s.txg));
        let u = union.entry(t.volume).or_default();
        for (addr, (birth, sectors, _)) in &mine {
            if *birth > origin_txg {
                u.insert(*addr, *sectors);
            }
        }
        let stored = deadlists.get(&t.deadlist).filter(|_| t.deadlist != 0);
        let Some(p) = parent else {
            if let Some(d) = stored.filter(|d| !d.is_empty()) {
                c.err(format!("{}: has no parent but {} deadlist entries", t.ctx, d.len()));
            }
            continue;
        };
        let theirs = match blocks_of(io, &p.tree_root) {
            Ok(b) => b,
            Err(e) => {
                c.err(format!("{}: cannot read its parent's tree: {e}", t.ctx));
                continue;
            }
        };
        for ((addr, _), (birth, _, _)) in &mine {
            if *birth <= p.txg && !theirs.contains_key(&(*addr, *birth)) {
                c.err(format!("{}: block at {addr} born in txg {birth} is not in its parent", t.ctx));
            }
        }
        let expected: HashSet<(u64, u64)> = theirs.keys().filter(|a| !mine.contains_key(a)).copied().collect();
        let empty = HashMap::new();
        let got = stored.unwrap_or(&empty);
        let missing = expected.iter().filter(|a| !got.contains_key(a)).count();
        let extra = got.keys().filter(|a| !expected.contains(a)).count();
        if missing + extra > 0 {
            c.err(format!(
                "{}: deadlist has {} entries; {missing} blocks of its parent it lacks are missing, {extra} do not belong",
                t.ctx,
                got.len()
            ));
        }
    }
    let mut totals = 0;
    for (name, r) in vols {
        let sectors: u64 = union.get(&r.id).map_or(0, |u| u.values().sum());
        totals += r.total_sectors;
        if sectors != r.total_sectors {
            c.err(format!(
                "volume {name}: blocks born in it are charged {sectors} sectors (live and in snapshots) but the record says {}",
                r.total_sectors
            ));
        }
    }
    let referenced = c.report.referenced_units * crate::format::SECTORS_PER_UNIT;
    if totals + unowned_sectors != referenced + dedup_extra_sectors && c.report.errors.is_empty() {
        c.err(format!(
            "volumes hold {totals} sectors (of which {dedup_extra_sectors} are further references to deduplicated blocks) \
             and the catalog and free space in packs {unowned_sectors}, but {referenced} sectors are referenced"
        ));
    }
}
