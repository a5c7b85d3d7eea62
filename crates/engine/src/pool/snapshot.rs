//! Snapshots, clones and restore: the birth-time model (docs/snapshots.md).
//!
//! A snapshot is a saved volume-tree root plus the txg it was taken in. Every volume head and
//! every snapshot has a *parent* snapshot (or none) and a *deadlist*: the blocks of its parent
//! that it no longer holds. Three facts make the space exact without reference counts:
//!
//! 1. A block born after X's parent's txg is held by X alone (nothing was derived from X
//!    while it was being written), so when X releases it, it is freed.
//! 2. A block born at or before the parent's txg was in the parent; when X releases it, it
//!    goes on X's deadlist. D(X) = blocks(parent) \ blocks(X), exactly.
//! 3. Deleting snapshot S with parent P and one child C frees the entries of D(C) born after
//!    P's txg (S held them, C does not, P never did); the rest of D(C) and all of D(S) are
//!    what C lacks of P. A snapshot with two children (a clone, or the branch a restore to
//!    an older snapshot leaves) is pinned until one of them is gone; one with none frees
//!    the blocks born after its parent (walked, pruned by birth txg).
//!
//! Deadlist entries live in the catalog tree under `[0x03] ++ deadlist ++ birth ++ addr`, so
//! "entries born after txg t" is one key range.

use crate::catalog::volume::{VolumeState, KEY_DNODE};
use crate::error::{Error, Result, SpaceReason};
use crate::format::node::BtreeNodePhys;
use crate::format::records::{DnodePhys, SnapshotRecordPhys, VolumeRecordPhys};
use crate::format::{BlockKind, BlockPtr, SECTOR_SIZE};
use crate::pipeline::BlockIo;
use crate::pool::{validate_volume_name, Pool, PoolInner, VolumeId};
use std::collections::HashSet;

/// Snapshots one volume may have (ONTAP 9 allows 1,023).
pub const SNAPSHOTS_PER_VOLUME_MAX: usize = 16384;

pub use crate::catalog::SnapshotState;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub volume: String,
    pub name: String,
    pub id: u64,
    pub txg: u64,
    pub created_ns: u64,
    /// Bytes its tree occupies (what reading it sees, shared or not).
    pub referenced_bytes: u64,
    /// Bytes born between the previous snapshot and this one.
    pub written_bytes: u64,
    /// Bytes only it holds: what deleting it frees.
    pub unique_bytes: u64,
    /// Volumes cloned from it.
    pub clones: Vec<String>,
    /// Group snapshot id (0: taken alone).
    pub group: u64,
}

pub(crate) use crate::catalog::snapshots::{deadlist_key, snapshot_key, Child, KEY_SNAPSHOT};

pub fn validate_snapshot_name(name: &str) -> Result<()> {
    validate_volume_name(name).map_err(|_| {
        Error::invalid(format!(
            "snapshot name {name:?}: use 1-255 letters, digits, '-', '_', '.', ':' (not starting with '.' or '-')"
        ))
    })
}

fn sectors(bps: &[BlockPtr]) -> u64 {
    bps.iter().map(|bp| bp.sectors()).sum()
}

/// Every block of a volume tree (nodes, indirect blocks, records) born after txg `after`
/// and not in `seen`. A block's birth is at least its children's (copy-on-write rewrites a
/// path up to the root), so subtrees born earlier are skipped whole.
pub(crate) fn collect_born_after(
    io: &BlockIo,
    root: &BlockPtr,
    after: u64,
    seen: &mut HashSet<(u64, u64)>,
    out: &mut Vec<BlockPtr>,
) -> Result<()> {
    if root.is_hole() || root.birth_txg <= after || !seen.insert((root.addr, root.birth_txg)) {
        return Ok(());
    }
    out.push(*root);
    let node = io.read_node(root)?;
    match &*node {
        BtreeNodePhys::Internal { entries, .. } => {
            for (_, child) in entries {
                collect_born_after(io, child, after, seen, out)?;
            }
        }
        BtreeNodePhys::Leaf { entries } => {
            for (k, v) in entries.iter().filter(|(k, _)| k.first() == Some(&KEY_DNODE)) {
                let dn = DnodePhys::decode(v).map_err(|mut c| {
                    c.detail = format!("dnode {k:02x?}: {}", c.detail);
                    c
                })?;
                collect_records_born_after(io, &dn.root, dn.levels, after, seen, out)?;
            }
        }
    }
    Ok(())
}

fn collect_records_born_after(
    io: &BlockIo,
    bp: &BlockPtr,
    level: u8,
    after: u64,
    seen: &mut HashSet<(u64, u64)>,
    out: &mut Vec<BlockPtr>,
) -> Result<()> {
    if bp.is_hole() || bp.birth_txg <= after || !seen.insert((bp.addr, bp.birth_txg)) {
        return Ok(());
    }
    out.push(*bp);
    if level > 0 && bp.kind == BlockKind::Indirect {
        let ind = io.read_indirect(bp)?;
        for child in ind.bps.iter() {
            collect_records_born_after(io, child, level - 1, after, seen, out)?;
        }
    }
    Ok(())
}

impl PoolInner {
    pub(crate) fn snapshot_info(&self, id: u64) -> Result<SnapshotInfo> {
        let s = &self.catalog.snapshots[&id];
        let volume =
            self.catalog.volumes.get(&VolumeId(s.rec.volume)).map_or_else(String::new, |v| v.record.name.clone());
        let clones = self
            .catalog
            .children(id)
            .into_iter()
            .filter(|c| self.catalog.child_volume(*c) != s.rec.volume)
            .map(|c| match c {
                Child::Head(v) => self.catalog.volumes[&v].record.name.clone(),
                Child::Snap(sid) => self.catalog.snapshot_display(sid),
            })
            .collect();
        Ok(SnapshotInfo {
            volume,
            name: s.name.clone(),
            id,
            txg: s.rec.txg,
            created_ns: s.rec.created_ns,
            referenced_bytes: s.rec.referenced_sectors * SECTOR_SIZE,
            written_bytes: s.rec.written_sectors * SECTOR_SIZE,
            unique_bytes: self.catalog.unique_sectors(&self.io, id)? * SECTOR_SIZE,
            clones,
            group: s.rec.group,
        })
    }

    /// Called by the commit for each volume it synced: take the snapshots asked for.
    pub(crate) fn take_pending_snapshots(&mut self, vol: VolumeId, txg: u64) -> Result<()> {
        let pending =
            std::mem::take(&mut self.catalog.volumes.get_mut(&vol).expect("synced volume").dirty.pending_snapshots);
        for (sid, name, group) in pending {
            let dl = self.catalog.new_id()?;
            let now = self.clock.now_ns();
            let v = self.catalog.volumes.get_mut(&vol).expect("synced volume");
            let rec = SnapshotRecordPhys {
                id: sid,
                volume: vol.0,
                txg,
                created_ns: now,
                tree_root: v.record.phys.tree_root,
                parent: v.record.phys.parent,
                deadlist: v.record.phys.deadlist,
                referenced_sectors: v.record.phys.used_sectors,
                written_sectors: v.record.phys.written_sectors,
                next_object_id: v.record.phys.next_object_id,
                record_size: v.record.phys.record_size,
                group,
                saved_bytes: v.record.phys.saved_bytes,
            };
            v.record.phys.parent = sid;
            v.record.phys.deadlist = dl;
            v.record.phys.written_sectors = 0;
            v.record.parent_txg = txg;
            self.catalog.tree.insert(&self.io, &snapshot_key(vol.0, &name), &rec.encode())?;
            self.catalog.snapshots.insert(sid, SnapshotState { name, rec });
        }
        Ok(())
    }

    fn delete_snapshot(&mut self, vol: VolumeId, name: &str) -> Result<()> {
        let id = self.catalog.snapshot_id(vol, name)?;
        self.refuse_held(&[id])?;
        let children = self.catalog.children(id);
        let display = self.catalog.snapshot_display(id);
        let clones: Vec<String> = children
            .iter()
            .filter(|c| self.catalog.child_volume(**c) != vol.0)
            .map(|c| match c {
                Child::Head(v) => self.catalog.volumes[v].record.name.clone(),
                Child::Snap(s) => self.catalog.snapshot_display(*s),
            })
            .collect();
        if !clones.is_empty() {
            return Err(Error::Busy(format!(
                "{display} is the origin of {}: delete or split those clones first (`strata clone split`)",
                clones.join(", ")
            )));
        }
        if children.len() > 1 {
            let names: Vec<String> = children
                .iter()
                .map(|c| match c {
                    Child::Head(v) => {
                        format!("{} (its current state, restored from it)", self.catalog.volumes[v].record.name)
                    }
                    Child::Snap(s) => self.catalog.snapshot_display(*s),
                })
                .collect();
            return Err(Error::Busy(format!(
                "{display} has two lines of history after it ({}): the volume was restored to it while later \
                 snapshots were kept; delete the snapshots of one line first",
                names.join("; ")
            )));
        }
        let s = self.catalog.snapshots[&id].rec.clone();
        let after = self.catalog.snapshot_txg(s.parent);
        let freed = match children.first() {
            None => {
                // Nothing descends from it: what was born after its parent is its alone.
                let mut freed = Vec::new();
                collect_born_after(&self.io, &s.tree_root, after, &mut HashSet::new(), &mut freed)?;
                self.catalog.deadlist_take(&self.io, s.deadlist, 0)?;
                freed
            }
            Some(&c) => {
                let child_dl = self.catalog.child_deadlist(c);
                let freed = self.catalog.deadlist_take(&self.io, child_dl, after)?;
                // What the child lacks of the new parent: the rest of D(child) and all of D(S).
                for bp in self.catalog.deadlist_take(&self.io, s.deadlist, 0)? {
                    self.catalog.deadlist_insert(&self.io, child_dl, &bp)?;
                }
                let gained = s.written_sectors.checked_sub(sectors(&freed)).ok_or_else(|| {
                    Error::Corruption(crate::error::Corruption::new(
                        "deadlist",
                        None,
                        format!("{display}: deadlist of its successor frees more than it wrote"),
                    ))
                })?;
                match c {
                    Child::Head(v) => {
                        let h = self.catalog.volumes.get_mut(&v).expect("child head");
                        h.record.phys.parent = s.parent;
                        h.record.phys.written_sectors += gained;
                        h.record.parent_txg = after;
                        h.dirty.changed = true;
                    }
                    Child::Snap(sid) => {
                        let cs = self.catalog.snapshots.get_mut(&sid).expect("child snapshot");
                        cs.rec.parent = s.parent;
                        cs.rec.written_sectors += gained;
                        let key = snapshot_key(cs.rec.volume, &cs.name);
                        let raw = cs.rec.encode();
                        self.catalog.tree.insert(&self.io, &key, &raw)?;
                    }
                }
                freed
            }
        };
        self.catalog.tree.remove(&self.io, &snapshot_key(vol.0, name))?;
        self.catalog.snapshots.remove(&id);
        self.catalog.views.remove(&VolumeId(id)); // an open read-only view of it
        let v = self.catalog.volumes.get_mut(&vol).expect("snapshot's volume");
        v.record.phys.total_sectors = v.record.phys.total_sectors.checked_sub(sectors(&freed)).ok_or_else(|| {
            Error::Corruption(crate::error::Corruption::new(
                "volume record",
                None,
                format!("deleting {display} frees more than volume {} holds", v.record.name),
            ))
        })?;
        v.dirty.changed = true;
        self.catalog.released.extend(freed);
        self.catalog.dirty = true;
        Ok(())
    }

    /// Refuse to delete volume `vol` while clones depend on its snapshots.
    /// Refuse to delete a snapshot a transfer holds (`Pool::hold_snapshot`).
    pub(crate) fn refuse_held(&self, ids: &[u64]) -> Result<()> {
        if let Some(id) = ids.iter().find(|id| self.catalog.holds.get(id).is_some_and(|n| *n > 0)) {
            return Err(Error::Busy(format!(
                "snapshot {} is being sent by a mirror transfer; wait for it to finish or pause the mirror",
                self.catalog.snapshot_display(*id)
            )));
        }
        Ok(())
    }

    pub(crate) fn refuse_delete_with_clones(&self, vol: VolumeId) -> Result<()> {
        let snaps: Vec<u64> =
            self.catalog.snapshots.iter().filter(|(_, s)| s.rec.volume == vol.0).map(|(id, _)| *id).collect();
        self.refuse_held(&snaps)?;
        let mut clones = Vec::new();
        for sid in &snaps {
            for c in self.catalog.children(*sid) {
                if self.catalog.child_volume(c) != vol.0 {
                    clones.push(format!(
                        "{} (from {})",
                        match c {
                            Child::Head(v) => self.catalog.volumes[&v].record.name.clone(),
                            Child::Snap(s) => self.catalog.snapshot_display(s),
                        },
                        self.catalog.snapshot_display(*sid)
                    ));
                }
            }
        }
        if !clones.is_empty() {
            return Err(Error::Busy(format!(
                "volume {} has clones: {}; delete or split them first",
                self.catalog.volumes[&vol].record.name,
                clones.join(", ")
            )));
        }
        Ok(())
    }
}

impl Pool {
    /// Take snapshot `name` of each of `volumes` in one txg: one volume, or a consistency
    /// group (data and log volumes of one database) that a crash could not have split.
    pub fn create_snapshots(&self, volumes: &[&str], name: &str) -> Result<Vec<SnapshotInfo>> {
        validate_snapshot_name(name)?;
        if volumes.is_empty() {
            return Err(Error::invalid("a snapshot needs at least one volume"));
        }
        self.commit_then(|p| {
            p.writable()?;
            let mut ids = Vec::new();
            for v in volumes {
                let vid = p.volume_id(v)?;
                if ids.contains(&vid) {
                    return Err(Error::invalid(format!("volume {v} named twice")));
                }
                if p.catalog.snapshot_id(vid, name).is_ok() {
                    return Err(Error::AlreadyExists(format!("snapshot {v}@{name}")));
                }
                let count = p.catalog.snapshots.values().filter(|s| s.rec.volume == vid.0).count();
                if count >= SNAPSHOTS_PER_VOLUME_MAX {
                    return Err(Error::no_space(
                        SpaceReason::Snapshots,
                        format!("volume {v} has {count} snapshots, the most it may have; delete old ones first"),
                    ));
                }
                ids.push(vid);
            }
            // Every id first (group, then one per snapshot): a refusal changes nothing.
            let grouped = ids.len() > 1;
            let mut new = p.catalog.new_ids(ids.len() as u64 + u64::from(grouped))?;
            let group = if grouped { new.next().expect("an id for the group") } else { 0 };
            let mut sids = Vec::new();
            for (vid, sid) in ids.iter().zip(new) {
                let v = p.catalog.volumes.get_mut(vid).expect("resolved above");
                v.dirty.pending_snapshots.push((sid, name.to_string(), group));
                v.dirty.changed = true;
                sids.push(sid);
            }
            p.catalog.dirty = true;
            p.commit_always()?;
            sids.into_iter().map(|sid| p.snapshot_info(sid)).collect()
        })
    }

    /// Snapshots of `volume` (all volumes if None), oldest first.
    pub fn snapshots(&self, volume: Option<&str>) -> Result<Vec<SnapshotInfo>> {
        let p = self.lock_raw();
        let vid = volume.map(|v| p.volume_id(v)).transpose()?;
        let mut ids: Vec<(u64, u64)> = p
            .catalog
            .snapshots
            .iter()
            .filter(|(_, s)| vid.is_none_or(|v| s.rec.volume == v.0))
            .map(|(id, s)| (s.rec.txg, *id))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| p.snapshot_info(id)).collect()
    }

    pub fn snapshot(&self, volume: &str, name: &str) -> Result<SnapshotInfo> {
        let p = self.lock_raw();
        let vid = p.volume_id(volume)?;
        let id = p.catalog.snapshot_id(vid, name)?;
        p.snapshot_info(id)
    }

    /// Delete a snapshot, freeing exactly the blocks only it held.
    pub fn delete_snapshot(&self, volume: &str, name: &str) -> Result<()> {
        self.commit_then(|p| {
            p.writable()?;
            let vid = p.volume_id(volume)?;
            if let Err(e) = p.delete_snapshot(vid, name) {
                return Err(p.latch_part_way("deleting a snapshot", e));
            }
            p.commit_always()?;
            Ok(())
        })
    }

    /// A read-only volume id through which snapshot `volume@name` can be read with the
    /// ordinary object and key-value calls (writes fail with ReadOnly). Stays valid until
    /// the snapshot is deleted or [`Pool::close_snapshot_view`].
    pub fn open_snapshot_view(&self, volume: &str, name: &str) -> Result<VolumeId> {
        let mut p = self.lock();
        let vid = p.volume_id(volume)?;
        let sid = p.catalog.snapshot_id(vid, name)?;
        let view = VolumeId(sid);
        if !p.catalog.volumes.contains_key(&view) {
            let s = p.catalog.snapshots[&sid].rec.clone();
            let src = &p.catalog.volumes[&vid].record.phys;
            let rec = VolumeRecordPhys {
                id: sid,
                record_size: s.record_size,
                sync_policy: src.sync_policy,
                tree_root: s.tree_root,
                next_object_id: s.next_object_id,
                used_sectors: s.referenced_sectors,
                created_txg: s.txg,
                created_ns: s.created_ns,
                quota_bytes: 0,
                parent: s.parent,
                deadlist: 0,
                written_sectors: s.written_sectors,
                origin: 0,
                total_sectors: 0,
                compression: src.compression,
                saved_bytes: s.saved_bytes,
                dedup: src.dedup,
            };
            p.catalog.views.insert(view, VolumeState::new(format!("{volume}@{name}"), rec));
        }
        p.catalog.views.get_mut(&view).expect("inserted above").record.view_refs += 1;
        Ok(view)
    }

    /// Close one open of a view; the last close releases it.
    pub fn close_snapshot_view(&self, view: VolumeId) {
        let mut p = self.lock();
        if let Some(v) = p.catalog.views.get_mut(&view) {
            v.record.view_refs = v.record.view_refs.saturating_sub(1);
            if v.record.view_refs == 0 {
                p.catalog.views.remove(&view);
            }
        }
    }
}
