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

use crate::error::{Error, Result, SpaceReason};
use crate::format::node::BtreeNodePhys;
use crate::format::records::{DnodePhys, SnapshotRecordPhys, VolumeRecordPhys};
use crate::format::{BlockKind, BlockPtr, SECTOR_SIZE};
use crate::pipeline::BlockIo;
use crate::pool::{validate_volume_name, Pool, PoolInner, VolumeId};
use crate::volume::{VolumeState, KEY_DNODE};
use std::collections::{HashMap, HashSet};

pub(crate) const KEY_SNAPSHOT: u8 = 0x02;
pub(crate) const KEY_DEADLIST: u8 = 0x03;
/// Snapshots one volume may have (ONTAP 9 allows 1,023).
pub const SNAPSHOTS_PER_VOLUME_MAX: usize = 16384;

pub struct SnapshotState {
    pub name: String,
    pub rec: SnapshotRecordPhys,
}

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

/// Who descends from a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Child {
    Head(VolumeId),
    Snap(u64),
}

pub(crate) fn snapshot_key(volume: u64, name: &str) -> Vec<u8> {
    let mut k = vec![KEY_SNAPSHOT];
    k.extend_from_slice(&volume.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

pub(crate) fn deadlist_key(dl: u64, birth: u64, addr: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(25);
    k.push(KEY_DEADLIST);
    k.extend_from_slice(&dl.to_be_bytes());
    k.extend_from_slice(&birth.to_be_bytes());
    k.extend_from_slice(&addr.to_be_bytes());
    k
}

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
    /// Hand out an id (volumes, snapshots, deadlists and groups share one counter,
    /// `UberblockPhys::next_volume_id`, which opening checks is past every id in use).
    pub(crate) fn new_id(&mut self) -> Result<u64> {
        Ok(self.new_ids(1)?.start)
    }

    /// Hand out `n` ids at once: all or none. The counter comes from disk: one that would
    /// wrap is damage, reported before anything changes.
    pub(crate) fn new_ids(&mut self, n: u64) -> Result<std::ops::Range<u64>> {
        let first = self.next_volume_id;
        let end = first.checked_add(n).ok_or_else(|| {
            crate::error::Corruption::new(
                "uberblock",
                None,
                format!("next volume id {first} leaves no room for {n} more ids"),
            )
        })?;
        self.next_volume_id = end;
        Ok(first..end)
    }

    /// Txg of snapshot `id` (0 for none).
    pub(crate) fn snapshot_txg(&self, id: u64) -> u64 {
        if id == 0 {
            0
        } else {
            self.snapshots.get(&id).map_or(0, |s| s.rec.txg)
        }
    }

    pub(crate) fn snapshot_id(&self, vol: VolumeId, name: &str) -> Result<u64> {
        self.snapshots.iter().find(|(_, s)| s.rec.volume == vol.0 && s.name == name).map(|(id, _)| *id).ok_or_else(
            || {
                let vname = self.volumes.get(&vol).map_or("?", |v| v.name.as_str());
                Error::NotFound(format!("snapshot {vname}@{name} (see `strata snapshot list {vname}`)"))
            },
        )
    }

    fn snapshot_display(&self, id: u64) -> String {
        match self.snapshots.get(&id) {
            Some(s) => {
                let v = self.volumes.get(&VolumeId(s.rec.volume)).map_or("?", |v| v.name.as_str());
                format!("{v}@{}", s.name)
            }
            None => format!("snapshot #{id}"),
        }
    }

    pub(crate) fn children(&self, id: u64) -> Vec<Child> {
        let mut out: Vec<Child> = self
            .volumes
            .iter()
            .filter(|(_, v)| !v.read_only_view && v.rec.parent == id)
            .map(|(vid, _)| Child::Head(*vid))
            .collect();
        out.extend(self.snapshots.iter().filter(|(_, s)| s.rec.parent == id).map(|(sid, _)| Child::Snap(*sid)));
        out
    }

    fn child_volume(&self, c: Child) -> u64 {
        match c {
            Child::Head(v) => v.0,
            Child::Snap(s) => self.snapshots[&s].rec.volume,
        }
    }

    fn child_deadlist(&self, c: Child) -> u64 {
        match c {
            Child::Head(v) => self.volumes[&v].rec.deadlist,
            Child::Snap(s) => self.snapshots[&s].rec.deadlist,
        }
    }

    /// Deadlist entries of `dl` born after txg `after`, in (birth, addr) order.
    pub(crate) fn deadlist_entries(&self, dl: u64, after: u64) -> Result<Vec<BlockPtr>> {
        let mut out = Vec::new();
        if dl == 0 {
            return Ok(out);
        }
        let Some(first_birth) = after.checked_add(1) else { return Ok(out) };
        let mut start = deadlist_key(dl, first_birth, 0);
        let end = deadlist_key(dl + 1, 0, 0);
        loop {
            let batch = self.catalog.range(&self.io, &start, Some(&end), 1024)?;
            let Some((last, _)) = batch.last() else { break };
            start = last.clone();
            start.push(0);
            for (k, v) in batch {
                let bp = BlockPtr::decode_from(&mut crate::format::codec::Reader::new(&v, "deadlist entry", None))?;
                // The key comes from disk too: the range holds keys of any length.
                let (birth, addr) = (k.get(9..17), k.get(17..));
                if bp.is_hole() || addr != Some(&bp.addr.to_be_bytes()) || birth != Some(&bp.birth_txg.to_be_bytes()) {
                    return Err(Error::Corruption(crate::error::Corruption::new(
                        "deadlist",
                        None,
                        format!("entry {k:02x?} does not match its block pointer {bp:?}"),
                    )));
                }
                out.push(bp);
            }
        }
        Ok(out)
    }

    pub(crate) fn deadlist_insert(&mut self, dl: u64, bp: &BlockPtr) -> Result<()> {
        assert!(dl != 0, "a head with a parent has a deadlist");
        self.catalog.insert(&self.io, &deadlist_key(dl, bp.birth_txg, bp.addr), &bp.encode())?;
        self.catalog_dirty = true;
        Ok(())
    }

    /// Remove the entries of `dl` born after `after`; returns them.
    fn deadlist_take(&mut self, dl: u64, after: u64) -> Result<Vec<BlockPtr>> {
        let entries = self.deadlist_entries(dl, after)?;
        for bp in &entries {
            self.catalog.remove(&self.io, &deadlist_key(dl, bp.birth_txg, bp.addr))?;
        }
        if !entries.is_empty() {
            self.catalog_dirty = true;
        }
        Ok(entries)
    }

    /// Sectors only snapshot `id` holds: what deleting it would free.
    pub(crate) fn unique_sectors(&self, id: u64) -> Result<u64> {
        let s = &self.snapshots[&id];
        let after = self.snapshot_txg(s.rec.parent);
        let children = self.children(id);
        match children.as_slice() {
            [] => Ok(s.rec.written_sectors),
            [c] => Ok(sectors(&self.deadlist_entries(self.child_deadlist(*c), after)?)),
            many => {
                let mut count: HashMap<(u64, u64), (u32, u64)> = HashMap::new();
                for c in many {
                    for bp in self.deadlist_entries(self.child_deadlist(*c), after)? {
                        count.entry((bp.addr, bp.birth_txg)).or_insert((0, bp.sectors())).0 += 1;
                    }
                }
                Ok(count.values().filter(|(n, _)| *n as usize == many.len()).map(|(_, u)| u).sum())
            }
        }
    }

    pub(crate) fn snapshot_info(&self, id: u64) -> Result<SnapshotInfo> {
        let s = &self.snapshots[&id];
        let volume = self.volumes.get(&VolumeId(s.rec.volume)).map_or_else(String::new, |v| v.name.clone());
        let clones = self
            .children(id)
            .into_iter()
            .filter(|c| self.child_volume(*c) != s.rec.volume)
            .map(|c| match c {
                Child::Head(v) => self.volumes[&v].name.clone(),
                Child::Snap(sid) => self.snapshot_display(sid),
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
            unique_bytes: self.unique_sectors(id)? * SECTOR_SIZE,
            clones,
            group: s.rec.group,
        })
    }

    /// Called by the commit for each volume it synced: take the snapshots asked for.
    pub(crate) fn take_pending_snapshots(&mut self, vol: VolumeId, txg: u64) -> Result<()> {
        let pending = std::mem::take(&mut self.volumes.get_mut(&vol).expect("synced volume").pending_snapshots);
        for (sid, name, group) in pending {
            let dl = self.new_id()?;
            let now = self.clock.now_ns();
            let v = self.volumes.get_mut(&vol).expect("synced volume");
            let rec = SnapshotRecordPhys {
                id: sid,
                volume: vol.0,
                txg,
                created_ns: now,
                tree_root: v.rec.tree_root,
                parent: v.rec.parent,
                deadlist: v.rec.deadlist,
                referenced_sectors: v.rec.used_sectors,
                written_sectors: v.rec.written_sectors,
                next_object_id: v.rec.next_object_id,
                record_size: v.rec.record_size,
                group,
                saved_bytes: v.rec.saved_bytes,
            };
            v.rec.parent = sid;
            v.rec.deadlist = dl;
            v.rec.written_sectors = 0;
            v.parent_txg = txg;
            self.catalog.insert(&self.io, &snapshot_key(vol.0, &name), &rec.encode())?;
            self.snapshots.insert(sid, SnapshotState { name, rec });
        }
        Ok(())
    }

    fn delete_snapshot(&mut self, vol: VolumeId, name: &str) -> Result<()> {
        let id = self.snapshot_id(vol, name)?;
        let children = self.children(id);
        let display = self.snapshot_display(id);
        let clones: Vec<String> = children
            .iter()
            .filter(|c| self.child_volume(**c) != vol.0)
            .map(|c| match c {
                Child::Head(v) => self.volumes[v].name.clone(),
                Child::Snap(s) => self.snapshot_display(*s),
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
                    Child::Head(v) => format!("{} (its current state, restored from it)", self.volumes[v].name),
                    Child::Snap(s) => self.snapshot_display(*s),
                })
                .collect();
            return Err(Error::Busy(format!(
                "{display} has two lines of history after it ({}): the volume was restored to it while later \
                 snapshots were kept; delete the snapshots of one line first",
                names.join("; ")
            )));
        }
        let s = self.snapshots[&id].rec.clone();
        let after = self.snapshot_txg(s.parent);
        let freed = match children.first() {
            None => {
                // Nothing descends from it: what was born after its parent is its alone.
                let mut freed = Vec::new();
                collect_born_after(&self.io, &s.tree_root, after, &mut HashSet::new(), &mut freed)?;
                self.deadlist_take(s.deadlist, 0)?;
                freed
            }
            Some(&c) => {
                let child_dl = self.child_deadlist(c);
                let freed = self.deadlist_take(child_dl, after)?;
                // What the child lacks of the new parent: the rest of D(child) and all of D(S).
                for bp in self.deadlist_take(s.deadlist, 0)? {
                    self.deadlist_insert(child_dl, &bp)?;
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
                        let h = self.volumes.get_mut(&v).expect("child head");
                        h.rec.parent = s.parent;
                        h.rec.written_sectors += gained;
                        h.parent_txg = after;
                        h.dirty = true;
                    }
                    Child::Snap(sid) => {
                        let cs = self.snapshots.get_mut(&sid).expect("child snapshot");
                        cs.rec.parent = s.parent;
                        cs.rec.written_sectors += gained;
                        let key = snapshot_key(cs.rec.volume, &cs.name);
                        let raw = cs.rec.encode();
                        self.catalog.insert(&self.io, &key, &raw)?;
                    }
                }
                freed
            }
        };
        self.catalog.remove(&self.io, &snapshot_key(vol.0, name))?;
        self.snapshots.remove(&id);
        self.volumes.remove(&VolumeId(id)); // an open read-only view of it
        let v = self.volumes.get_mut(&vol).expect("snapshot's volume");
        v.rec.total_sectors = v.rec.total_sectors.checked_sub(sectors(&freed)).ok_or_else(|| {
            Error::Corruption(crate::error::Corruption::new(
                "volume record",
                None,
                format!("deleting {display} frees more than volume {} holds", v.name),
            ))
        })?;
        v.dirty = true;
        self.catalog_released.extend(freed);
        self.catalog_dirty = true;
        Ok(())
    }

    /// Everything volume `vol` holds that was born in it (its head and all its snapshots),
    /// for deleting the volume. Refuses while clones depend on its snapshots.
    pub(crate) fn volume_blocks_for_delete(&mut self, vol: VolumeId) -> Result<(Vec<BlockPtr>, Vec<u64>)> {
        let snaps: Vec<u64> = self.snapshots.iter().filter(|(_, s)| s.rec.volume == vol.0).map(|(id, _)| *id).collect();
        let mut clones = Vec::new();
        for sid in &snaps {
            for c in self.children(*sid) {
                if self.child_volume(c) != vol.0 {
                    clones.push(format!(
                        "{} (from {})",
                        match c {
                            Child::Head(v) => self.volumes[&v].name.clone(),
                            Child::Snap(s) => self.snapshot_display(s),
                        },
                        self.snapshot_display(*sid)
                    ));
                }
            }
        }
        if !clones.is_empty() {
            return Err(Error::Busy(format!(
                "volume {} has clones: {}; delete or split them first",
                self.volumes[&vol].name,
                clones.join(", ")
            )));
        }
        let head = &self.volumes[&vol];
        let origin_txg = self.snapshot_txg(head.rec.origin);
        let mut seen = HashSet::new();
        let mut blocks = Vec::new();
        collect_born_after(&self.io, &head.rec.tree_root, origin_txg, &mut seen, &mut blocks)?;
        let mut dls = vec![head.rec.deadlist];
        for sid in &snaps {
            let s = &self.snapshots[sid];
            collect_born_after(&self.io, &s.rec.tree_root, origin_txg, &mut seen, &mut blocks)?;
            dls.push(s.rec.deadlist);
        }
        Ok((blocks, dls))
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
        let mut p = self.lock();
        p.writable()?;
        let mut ids = Vec::new();
        for v in volumes {
            let vid = p.volume_id(v)?;
            if ids.contains(&vid) {
                return Err(Error::invalid(format!("volume {v} named twice")));
            }
            if p.snapshot_id(vid, name).is_ok() {
                return Err(Error::AlreadyExists(format!("snapshot {v}@{name}")));
            }
            let count = p.snapshots.values().filter(|s| s.rec.volume == vid.0).count();
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
        let mut new = p.new_ids(ids.len() as u64 + u64::from(grouped))?;
        let group = if grouped { new.next().expect("an id for the group") } else { 0 };
        let mut sids = Vec::new();
        for (vid, sid) in ids.iter().zip(new) {
            let v = p.volumes.get_mut(vid).expect("resolved above");
            v.pending_snapshots.push((sid, name.to_string(), group));
            v.dirty = true;
            sids.push(sid);
        }
        p.catalog_dirty = true;
        p.commit_always()?;
        sids.into_iter().map(|sid| p.snapshot_info(sid)).collect()
    }

    /// Snapshots of `volume` (all volumes if None), oldest first.
    pub fn snapshots(&self, volume: Option<&str>) -> Result<Vec<SnapshotInfo>> {
        let p = self.lock_raw();
        let vid = volume.map(|v| p.volume_id(v)).transpose()?;
        let mut ids: Vec<(u64, u64)> = p
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
        let id = p.snapshot_id(vid, name)?;
        p.snapshot_info(id)
    }

    /// Delete a snapshot, freeing exactly the blocks only it held.
    pub fn delete_snapshot(&self, volume: &str, name: &str) -> Result<()> {
        let mut p = self.lock();
        p.writable()?;
        let vid = p.volume_id(volume)?;
        if let Err(e) = p.delete_snapshot(vid, name) {
            return Err(p.latch_part_way("deleting a snapshot", e));
        }
        p.commit_always()?;
        Ok(())
    }

    /// A read-only volume id through which snapshot `volume@name` can be read with the
    /// ordinary object and key-value calls (writes fail with ReadOnly). Stays valid until
    /// the snapshot is deleted or [`Pool::close_snapshot_view`].
    pub fn open_snapshot_view(&self, volume: &str, name: &str) -> Result<VolumeId> {
        let mut p = self.lock();
        let vid = p.volume_id(volume)?;
        let sid = p.snapshot_id(vid, name)?;
        let view = VolumeId(sid);
        if !p.volumes.contains_key(&view) {
            let s = p.snapshots[&sid].rec.clone();
            let src = &p.volumes[&vid].rec;
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
            let mut v = VolumeState::new(format!("{volume}@{name}"), rec);
            v.read_only_view = true;
            p.volumes.insert(view, v);
        }
        p.volumes.get_mut(&view).expect("inserted above").view_refs += 1;
        Ok(view)
    }

    /// Close one open of a view; the last close releases it.
    pub fn close_snapshot_view(&self, view: VolumeId) {
        let mut p = self.lock();
        if let Some(v) = p.volumes.get_mut(&view).filter(|v| v.read_only_view) {
            v.view_refs = v.view_refs.saturating_sub(1);
            if v.view_refs == 0 {
                p.volumes.remove(&view);
            }
        }
    }
}
