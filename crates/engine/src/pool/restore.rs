//! Restore: a whole volume (or the volumes of a group snapshot, in one txg) to a snapshot,
//! and single-file restore.
//!
//! A volume restore makes the head's tree the snapshot's (constant metadata), frees what the
//! head wrote since its parent snapshot (the blocks only it held), drops its deadlist and
//! takes the snapshot as its parent. Every snapshot stays, later ones included: if they
//! exist, the history branches at the restored snapshot (see snapshot.rs, "pinned").
//!
//! Single-file restore makes one object of a volume equal to an object of one of its
//! snapshots, sharing blocks where that is safe and copying where it is not.
//!
//! Which blocks can be shared: exactly those on the head's deadlist. D(head) is the set of
//! blocks its parent snapshot holds and the head does not (snapshot.rs), so a block there
//! is allocated, held by the snapshots, and absent from the live tree: pointing a record at
//! it again, and taking it off the deadlist, keeps every invariant. A block of the snapshot
//! that the head still holds elsewhere, or that later snapshots freed, is copied instead
//! (no block may appear twice in one tree). Records already equal are left alone.
//!
//! The work happens under the pool's lock between two commits: the first makes the head
//! clean (so its deadlist is current), the second makes the result durable. A restore that
//! copies more than `COPY_BATCH` bytes commits in between, so a crash may leave the file
//! partly restored: run the restore again.

use crate::catalog::volume::{ObjectId, VolumeState};
use crate::error::{Corruption, Error, Result};
use crate::format::records::VolumeRecordPhys;
use crate::format::BlockPtr;
use crate::pool::snapshot::{collect_born_after, deadlist_key};
use crate::pool::{Pool, PoolInner, VolumeId};
use crate::tree::blocktree;
use std::collections::{BTreeSet, HashSet};

/// Copied bytes held in memory before an intermediate commit.
const COPY_BATCH: u64 = 256 << 20;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileRestoreStats {
    /// Bytes now pointing at the snapshot's blocks again (no data written).
    pub shared_bytes: u64,
    /// Bytes written anew (the snapshot's blocks were not shareable).
    pub copied_bytes: u64,
    /// Bytes whose records were already the snapshot's.
    pub unchanged_bytes: u64,
}

impl Pool {
    /// Make the volume's contents those of its snapshot `name` (see the module comment).
    /// The volume must not be in use by a file system above.
    pub fn restore_volume(&self, volume: &str, name: &str) -> Result<()> {
        self.restore_volumes(&[(volume, name)])
    }

    /// Restore several volumes, each to its own snapshot, in one txg: all or none (the
    /// volumes of a group snapshot: a database's data and log).
    pub fn restore_volumes(&self, list: &[(&str, &str)]) -> Result<()> {
        self.commit_then(|p| {
            // Damage met once the catalog is being changed latches the pool: the
            // half-done change must never be committed (docs/failure-policy.md).
            let r = (|| -> Result<_> {
                p.writable()?;
                // What was written while the commit quiesced (the replaced head must hold no
                // dirty or prewritten records): little, so synced under the lock.
                p.commit()?;
                let mut plan = Vec::new();
                for (volume, name) in list {
                    let vid = p.volume_id(volume)?;
                    if plan.iter().any(|(v, _, _): &(VolumeId, u64, Vec<BlockPtr>)| *v == vid) {
                        return Err(Error::invalid(format!("volume {volume} named twice")));
                    }
                    let sid = p.catalog.snapshot_id(vid, name)?;
                    let head = &p.catalog.volumes[&vid].record;
                    let mut freed = Vec::new();
                    collect_born_after(&p.io, &head.phys.tree_root, head.parent_txg, &mut HashSet::new(), &mut freed)?;
                    let sectors: u64 = freed.iter().map(|b| b.sectors()).sum();
                    if sectors != head.phys.written_sectors || head.phys.total_sectors < sectors {
                        return Err(Corruption::new(
                            "volume record",
                            None,
                            format!(
                                "volume {volume}: blocks born since its parent snapshot occupy {sectors} sectors, the record says {} (of {} in all); run `strata check`",
                                head.phys.written_sectors, head.phys.total_sectors
                            ),
                        )
                        .into());
                    }
                    plan.push((vid, sid, freed));
                }
                let mut new = p.catalog.new_ids(plan.len() as u64)?;
                for (vid, sid, freed) in plan {
                    let old = p.catalog.volumes[&vid].record.phys.clone();
                    for bp in p.catalog.deadlist_entries(&p.io, old.deadlist, 0)? {
                        let PoolInner { io, catalog: crate::catalog::Catalog { tree: catalog, .. }, .. } = &mut *p;
                        catalog.remove(io, &deadlist_key(old.deadlist, bp.birth_txg, bp.addr))?;
                    }
                    let s = p.catalog.snapshots[&sid].rec.clone();
                    let dl = new.next().expect("an id per restored volume");
                    let sectors: u64 = freed.iter().map(|b| b.sectors()).sum();
                    let rec = VolumeRecordPhys {
                        tree_root: s.tree_root,
                        next_object_id: old.next_object_id.max(s.next_object_id),
                        used_sectors: s.referenced_sectors,
                        parent: sid,
                        deadlist: dl,
                        written_sectors: 0,
                        total_sectors: old.total_sectors - sectors,
                        saved_bytes: s.saved_bytes,
                        ..old
                    };
                    let name = p.catalog.volumes[&vid].record.name.clone();
                    let mut v = VolumeState::new(name, rec);
                    v.record.parent_txg = s.txg;
                    v.dirty.changed = true;
                    p.catalog.volumes.insert(vid, v);
                    p.catalog.released.extend(freed);
                }
                p.catalog.dirty = true;
                p.commit_always()?;
                Ok(())
            })();
            r.map_err(|e| p.latch_part_way("restoring volumes", e))
        })
    }

    /// Make object `obj` of volume `vol` hold exactly the data (and size) of object `src` of
    /// the snapshot view `view` (see [`Pool::open_snapshot_view`]). The object's attribute
    /// is left alone: the caller decides what else to restore.
    pub fn restore_object(
        &self,
        vol: VolumeId,
        obj: ObjectId,
        view: VolumeId,
        src: ObjectId,
    ) -> Result<FileRestoreStats> {
        let mut p = self.lock();
        p.writable()?;
        if !p.catalog.views.contains_key(&view) {
            return Err(Error::invalid(format!("volume id {} is not an open snapshot view", view.0)));
        }
        if !p.catalog.volumes.contains_key(&vol) {
            return Err(Error::NotFound(format!("volume id {}", vol.0)));
        }
        p.commit()?;
        let src_dn = {
            let PoolInner { io, catalog: crate::catalog::Catalog { views, .. }, .. } = &mut *p;
            views.get_mut(&view).expect("checked").dnode_phys(io, src)?
        };
        let rs = src_dn.record_size;
        let reshape = {
            let PoolInner { io, alloc, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
            let h = volumes.get_mut(&vol).expect("checked");
            let dst = h.dnode_phys(io, obj)?;
            if dst.record_size != rs {
                h.truncate(io, alloc, obj, 0)?;
                true
            } else {
                false
            }
        };
        if reshape {
            p.commit()?;
        }
        let mut stats = FileRestoreStats::default();
        let mut pending_copy = 0u64;
        {
            let PoolInner { io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
            let h = volumes.get_mut(&vol).expect("checked");
            let size = h.dnode_phys(io, obj)?.size;
            h.set_shape(io, obj, size, rs)?;
        }
        let mut dst_dn = {
            let PoolInner { io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
            volumes.get_mut(&vol).expect("checked").dnode_phys(io, obj)?
        };
        let records: BTreeSet<u64> = {
            let io = &p.io;
            let mut r: BTreeSet<u64> =
                blocktree::allocated_records(io, &src_dn.root, src_dn.levels, 0, u64::MAX)?.into_iter().collect();
            r.extend(blocktree::allocated_records(io, &dst_dn.root, dst_dn.levels, 0, u64::MAX)?);
            r
        };
        for r in records {
            let (sbp, dbp) = {
                let io = &p.io;
                (
                    blocktree::lookup(io, &src_dn.root, src_dn.levels, r)?,
                    blocktree::lookup(io, &dst_dn.root, dst_dn.levels, r)?,
                )
            };
            if sbp == dbp {
                stats.unchanged_bytes += rs as u64;
                continue;
            }
            let dl = p.catalog.volumes[&vol].record.phys.deadlist;
            let key = deadlist_key(dl, sbp.birth_txg, sbp.addr);
            let shareable = !sbp.is_hole() && dl != 0 && p.catalog.tree.get(&p.io, &key)?.is_some();
            if sbp.is_hole() || shareable {
                if shareable {
                    let PoolInner { io, catalog: crate::catalog::Catalog { tree: catalog, .. }, .. } = &mut *p;
                    catalog.remove(io, &key)?;
                    p.catalog.dirty = true;
                    stats.shared_bytes += rs as u64;
                }
                let h = p.catalog.volumes.get_mut(&vol).expect("checked");
                h.dirty.shared_records.insert((obj, r), if sbp.is_hole() { BlockPtr::HOLE } else { sbp });
                h.dirty.changed = true;
                continue;
            }
            let data = p.io.read_block(&sbp)?;
            {
                let PoolInner { io, alloc, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
                volumes.get_mut(&vol).expect("checked").write(io, alloc, obj, r * rs as u64, &data)?;
            }
            stats.copied_bytes += rs as u64;
            pending_copy += rs as u64;
            if pending_copy >= COPY_BATCH {
                p.commit()?;
                pending_copy = 0;
                // The committed tree replaced the blocks of the old one: look up the rest in it.
                let PoolInner { io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
                dst_dn = volumes.get_mut(&vol).expect("checked").dnode_phys(io, obj)?;
            }
        }
        {
            let PoolInner { io, catalog: crate::catalog::Catalog { volumes, .. }, .. } = &mut *p;
            volumes.get_mut(&vol).expect("checked").set_shape(io, obj, src_dn.size, rs)?;
        }
        p.commit()?;
        Ok(stats)
    }
}
