//! A volume's record in the catalog: its name, the on-disk record (`VolumeRecordPhys`: tree
//! root, space figures, settings, parent snapshot and deadlist), and the in-memory facts
//! the pool keeps beside it (the parent snapshot's txg, the reservation, the opens of a
//! snapshot view) — the dataset record of OpenZFS (`dsl_dataset`), not its objects.
//!
//! Mutated under the pool's lock (`Pool::inner`, lock 2 of the table in pool/mod.rs)
//! only: by administrative operations, which wait until no commit is quiescing (quota, sync
//! policy, compression, reservation, snapshots, views, clones, restores: pool/*.rs), by
//! object creation (`next_object_id`, settled too), and by the commit: `VolumeState::sync`
//! (sync.rs) writes the txg's tree root and space figures into it, and the snapshots the
//! txg takes move its parent (pool/snapshot.rs). The data writes and attribute changes a
//! quiescing commit lets run read it (quota, record size, `parent_txg`) and change only
//! `held_for_others_units`, which the `PoolGuard` refreshes before every writing operation.

use crate::format::records::VolumeRecordPhys;
use crate::format::BlockPtr;

pub struct VolumeRecord {
    pub name: String,
    /// The record the catalog tree holds under the volume's name (written by each commit
    /// that syncs the volume).
    pub phys: VolumeRecordPhys,
    /// Txg of the parent snapshot (0 = none): blocks born at or before it are shared with
    /// the parent, so releasing them puts them on the deadlist instead of freeing them.
    pub parent_txg: u64,
    /// As a read-only view of a snapshot (`.snapshot/NAME`, `PoolInner::views`): opens not
    /// yet closed.
    pub view_refs: u32,
    /// Space the pool keeps for this volume (space.rs); 0 = thin.
    pub reservation_bytes: u64,
    /// Units other volumes' reservations keep from this one, refreshed by the `PoolGuard` before
    /// each writing operation (space.rs `held_for_others`).
    pub held_for_others_units: u64,
}

impl VolumeRecord {
    pub fn new(name: String, phys: VolumeRecordPhys) -> VolumeRecord {
        VolumeRecord { name, phys, parent_txg: 0, view_refs: 0, reservation_bytes: 0, held_for_others_units: 0 }
    }

    /// A data block only this head reads through its records: not shared with a snapshot
    /// (born after `parent_txg`), nor with other records (dedup, packs). Once its record is
    /// dirty, its cached copy is read by nobody.
    pub(super) fn only_this_head_reads(&self, bp: &BlockPtr) -> bool {
        bp.birth_txg > self.parent_txg && !bp.dedup && !bp.packed
    }
}
