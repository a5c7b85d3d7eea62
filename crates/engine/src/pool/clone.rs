//! Clones: writable volumes made from snapshots, and clone split.
//!
//! A clone is a new volume record whose tree root is the snapshot's and whose parent (and
//! origin) is the snapshot: constant work at any size. Several clones can be made in one
//! txg, from the snapshots of one group snapshot.
//!
//! Clone split makes a clone independent of its origin snapshot, so that the snapshot (and
//! the volume it belongs to) can be deleted.
//!
//! Every block of the clone born at or before the origin's txg is still shared with the
//! origin. Splitting rewrites them: data records are copied (in batches, committing between
//! them so memory stays bounded), indirect blocks follow their records, and every key of
//! the volume tree is written again so each tree node is new. Released old blocks go to the
//! clone's deadlist while it still has the origin as parent (the origin holds them). Once
//! a walk finds nothing old left, the clone drops its deadlist and its parent: it is a
//! volume of its own. Work and space are proportional to what it shared (what ONTAP's
//! FlexClone split does too); the pool's lock is held for each batch, not for the whole.

use crate::catalog::volume::VolumeState;
use crate::error::{Error, Result};
use crate::format::records::VolumeRecordPhys;
use crate::format::{BlockPtr, SECTOR_SIZE};
use crate::pool::snapshot::collect_born_after;
use crate::pool::{validate_volume_name, Pool, PoolInner, VolumeId};
use crate::tree::blocktree;
use std::collections::HashSet;

/// Data copied, or keys rewritten, between commits.
const BATCH_BYTES: u64 = 128 << 20;
const BATCH_KEYS: usize = 65536;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitStats {
    pub copied_bytes: u64,
    pub rewritten_keys: u64,
    /// The control stopped it part way: the volume is still a clone (what was copied stays
    /// copied; splitting again goes on from there).
    pub stopped: bool,
}

impl Pool {
    /// A new writable volume `new_name` whose contents are snapshot `volume@name`, sharing
    /// every block with it.
    pub fn clone_volume(&self, volume: &str, name: &str, new_name: &str) -> Result<VolumeId> {
        Ok(self.clone_volumes(&[(volume, name, new_name)])?[0])
    }

    /// Several clones in one txg: (volume, snapshot, new name) each.
    pub fn clone_volumes(&self, list: &[(&str, &str, &str)]) -> Result<Vec<VolumeId>> {
        self.commit_then(|p| {
            // Damage met once the catalog is being changed latches the pool: the
            // half-done change must never be committed (docs/failure-policy.md).
            let r = (|| -> Result<_> {
                p.writable()?;
                let mut plan = Vec::new();
                for (i, (volume, name, new_name)) in list.iter().enumerate() {
                    validate_volume_name(new_name)?;
                    if p.catalog.by_name.contains_key(*new_name) || list[..i].iter().any(|(_, _, n)| n == new_name) {
                        return Err(Error::AlreadyExists(format!("volume {new_name} in pool {}", p.label.pool_name)));
                    }
                    let vid = p.volume_id(volume)?;
                    plan.push((vid, p.catalog.snapshot_id(vid, name)?, new_name.to_string()));
                }
                // Two ids per clone (the volume, its deadlist), all taken first.
                let mut new = p.catalog.new_ids(2 * plan.len() as u64)?;
                let mut ids = Vec::new();
                for (vid, sid, new_name) in plan {
                    let s = p.catalog.snapshots[&sid].rec.clone();
                    let src = p.catalog.volumes[&vid].record.phys.clone();
                    let id = VolumeId(new.next().expect("two ids per clone"));
                    let dl = new.next().expect("two ids per clone");
                    let rec = VolumeRecordPhys {
                        id: id.0,
                        record_size: src.record_size,
                        sync_policy: src.sync_policy,
                        tree_root: s.tree_root,
                        next_object_id: s.next_object_id,
                        used_sectors: s.referenced_sectors,
                        created_txg: p.txg.next,
                        created_ns: p.clock.now_ns(),
                        quota_bytes: src.quota_bytes,
                        parent: sid,
                        deadlist: dl,
                        written_sectors: 0,
                        origin: sid,
                        total_sectors: 0,
                        compression: src.compression,
                        saved_bytes: s.saved_bytes,
                        dedup: src.dedup,
                    };
                    let mut v = VolumeState::new(new_name.clone(), rec);
                    v.record.parent_txg = s.txg;
                    v.dirty.changed = true;
                    p.catalog.volumes.insert(id, v);
                    p.catalog.by_name.insert(new_name, id);
                    ids.push(id);
                }
                p.catalog.dirty = true;
                p.commit_always()?;
                Ok(ids)
            })();
            r.map_err(|e| p.latch_part_way("cloning volumes", e))
        })
    }

    /// Copy what clone `name` shares with its origin and detach it (see the module comment).
    pub fn split_clone(&self, name: &str) -> Result<SplitStats> {
        self.split_clone_observed(name, None)
    }

    /// `split_clone`, with `control` told the bytes still shared at the start (an estimate:
    /// the clone's space not written since it was made) and each shared block's size as it
    /// is copied; it may stop the split there (`SplitStats::stopped`).
    pub fn split_clone_observed(
        &self,
        name: &str,
        control: Option<&dyn crate::pool::control::WalkControl>,
    ) -> Result<SplitStats> {
        let (vid, origin_txg) = {
            let mut p = self.lock();
            p.writable()?;
            let vid = p.volume_id(name)?;
            let origin = p.catalog.volumes[&vid].record.phys.origin;
            if origin == 0 {
                return Err(Error::invalid(format!("volume {name} is not a clone: nothing to split")));
            }
            let snaps: Vec<String> = p
                .catalog
                .snapshots
                .values()
                .filter(|s| s.rec.volume == vid.0)
                .map(|s| format!("{name}@{}", s.name))
                .collect();
            if !snaps.is_empty() {
                return Err(Error::Busy(format!(
                    "clone {name} has snapshots ({}), which share the origin's blocks too: delete them first",
                    snaps.join(", ")
                )));
            }
            p.commit()?;
            if let Some(c) = control {
                let phys = &p.catalog.volumes[&vid].record.phys;
                c.begin(phys.used_sectors.saturating_sub(phys.written_sectors) * SECTOR_SIZE);
            }
            (vid, p.catalog.snapshot_txg(origin))
        };
        let mut stats = SplitStats::default();
        self.split_records(vid, origin_txg, control, &mut stats)?;
        if stats.stopped {
            return Ok(stats);
        }
        self.split_tree(vid, &mut stats)?;
        let mut p = self.lock();
        p.writable()?;
        p.commit()?;
        let v = p
            .catalog
            .volumes
            .get(&vid)
            .ok_or_else(|| Error::NotFound(format!("volume {name} (deleted during split)")))?;
        let mut all = Vec::new();
        collect_born_after(&p.io, &v.record.phys.tree_root, 0, &mut HashSet::new(), &mut all)?;
        let left = all.iter().filter(|bp| bp.birth_txg <= origin_txg).count();
        if left > 0 {
            return Err(Error::Busy(format!(
                "clone {name} still shares {left} blocks with its origin (written to while splitting?): run the split again"
            )));
        }
        let dl = v.record.phys.deadlist;
        for bp in p.catalog.deadlist_entries(&p.io, dl, 0)? {
            let PoolInner { io, catalog: crate::catalog::Catalog { tree: catalog, .. }, .. } = &mut *p;
            catalog.remove(io, &crate::pool::snapshot::deadlist_key(dl, bp.birth_txg, bp.addr))?;
        }
        let v = p.catalog.volumes.get_mut(&vid).expect("checked");
        v.record.phys.parent = 0;
        v.record.phys.origin = 0;
        v.record.phys.deadlist = 0;
        v.record.parent_txg = 0;
        v.record.phys.written_sectors = v.record.phys.used_sectors;
        v.record.phys.total_sectors = v.record.phys.used_sectors;
        v.dirty.changed = true;
        p.catalog.dirty = true;
        p.commit()?;
        Ok(stats)
    }

    /// Copy every data record born at or before `origin_txg`.
    fn split_records(
        &self,
        vid: VolumeId,
        origin_txg: u64,
        control: Option<&dyn crate::pool::control::WalkControl>,
        stats: &mut SplitStats,
    ) -> Result<()> {
        let gone = || Error::NotFound("volume deleted during split".into());
        let mut after = None;
        loop {
            let mut p = self.lock();
            p.writable()?;
            let ids = {
                let PoolInner { io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
                volumes.get_mut(&vid).ok_or_else(gone)?.objset.list_objects(io, after, 64)?
            };
            let Some(&last) = ids.last() else { return Ok(()) };
            let mut pending = 0;
            for obj in ids {
                let (rs, size, old) = {
                    let PoolInner { io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
                    let dn = volumes.get_mut(&vid).ok_or_else(gone)?.dnode_phys(io, obj)?;
                    let mut old: Vec<(u8, u64, BlockPtr)> = Vec::new();
                    blocktree::walk(io, &dn.root, dn.levels, &mut |bp, level, first| {
                        if bp.birth_txg <= origin_txg {
                            old.push((level, first, *bp));
                        }
                        Ok(())
                    })?;
                    (dn.record_size as u64, dn.size, old)
                };
                // Old blocks stay allocated (the origin holds them) across the commits below.
                for (level, first, bp) in old {
                    let PoolInner { io, alloc, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
                    let v = volumes.get_mut(&vid).ok_or_else(gone)?;
                    if level == 0 {
                        // Only the bytes within the object: a record past its size is zeros and
                        // writing them would grow it.
                        let data = io.read_block(&bp)?;
                        let len = size.saturating_sub(first * rs).min(rs) as usize;
                        v.write(io, alloc, obj, first * rs, &data[..len.min(data.len())])?;
                        stats.copied_bytes += rs;
                        pending += rs;
                        if control.is_some_and(|c| !c.block_done(bp.psize as u64)) {
                            p.commit()?;
                            stats.stopped = true;
                            return Ok(());
                        }
                    } else {
                        let dn = v.dnode_phys(io, obj)?;
                        if blocktree::lookup(io, &dn.root, dn.levels, first)?.is_hole() {
                            // An old indirect block with no records under it: a hole placed
                            // below it makes the path new.
                            v.dirty.shared_records.insert((obj, first), BlockPtr::HOLE);
                            v.dirty.changed = true;
                        }
                    }
                    if pending >= BATCH_BYTES {
                        p.commit()?;
                        pending = 0;
                    }
                }
            }
            after = Some(last);
            p.commit()?;
        }
    }

    /// Write every key of the volume tree again, so every node is born after the origin.
    fn split_tree(&self, vid: VolumeId, stats: &mut SplitStats) -> Result<()> {
        let mut start: Vec<u8> = Vec::new();
        loop {
            let mut p = self.lock();
            p.writable()?;
            let PoolInner { io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
            let v = volumes.get_mut(&vid).ok_or_else(|| Error::NotFound("volume deleted during split".into()))?;
            let batch = v.objset.tree.range(io, &start, None, BATCH_KEYS)?;
            let Some((last, _)) = batch.last() else { return Ok(()) };
            start = last.clone();
            start.push(0);
            for (k, val) in &batch {
                v.objset.tree.insert(io, k, val)?;
            }
            v.dirty.changed = true;
            stats.rewritten_keys += batch.len() as u64;
            p.commit()?;
        }
    }
}
