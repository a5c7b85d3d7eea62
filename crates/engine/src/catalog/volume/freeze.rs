//! Freezing a volume's open txg for a commit (the quiescing txg, docs/txg-pipeline.md).
//!
//! A commit takes the open txg's changes out of the live state in one step under the
//! pool's lock (`freeze`): the dirty set's records (dirty.rs), the object set's dnodes of
//! the objects that changed (objset.rs) and the dirty accounting move into a [`Frozen`]
//! set, kept in the dirty set, and the live state starts empty. The commit then writes the
//! frozen records without the lock (prewrite.rs, which reads them from here) while writes
//! go on into the live state — a record written again after the freeze is a new live
//! record; one read or partly rewritten finds the frozen content (`dirty_entry`). Finally
//! `VolumeState::sync` (sync.rs) writes the frozen set as the txg and hands the live
//! dnodes their new block-tree roots.
//!
//! Only data writes and attribute changes may run between the freeze and the sync (the
//! pool's lock makes everything else wait, `Pool::lock`): they touch the live records and
//! dnodes alone, never the volume tree, the block trees or the volume record, which the
//! sync writes. So the txg holds exactly the state at the freeze.

use super::{DirtySet, ObjectId, VolumeState};
use crate::format::records::DnodePhys;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The open txg's changes of one volume, as a commit in flight writes them.
#[derive(Default)]
pub(crate) struct Frozen {
    pub(super) records: BTreeMap<(ObjectId, u64), Option<Arc<Vec<u8>>>>,
    /// The dnodes as they stood at the freeze, of every object that changed.
    pub(super) dnodes: Vec<(ObjectId, DnodePhys)>,
    /// Records with content per object (`st_blocks` while the commit runs).
    pub(super) counts: HashMap<ObjectId, u64>,
    /// Units the frozen records reserved (released when the txg is durable).
    pub(super) reserved_units: u64,
    /// Of those, units the pool's allocator already gave back because the frozen pass of
    /// the prewrite allocated the records' blocks (pool/prewrite.rs): a frozen record cannot
    /// change any more, so its block is the one the commit would have allocated with that
    /// reservation. The volume keeps counting them (its quota) until the txg is durable.
    pub(super) handed_to_prewrite: u64,
}

impl VolumeState {
    /// Move the open txg's changes into a frozen set for the commit (see the module
    /// comment). A volume with nothing changed is frozen empty, so that its record (quota,
    /// snapshots to take) is written all the same.
    pub(crate) fn freeze(&mut self) {
        let d = &mut self.dirty;
        assert!(d.frozen.is_none(), "one commit at a time");
        let records = std::mem::take(&mut d.records);
        let mut dnodes: Vec<(ObjectId, DnodePhys)> = Vec::new();
        let mut last = None;
        let with_records = records.keys().map(|(o, _)| *o).filter(|o| last.replace(*o) != Some(*o));
        let changed: Vec<ObjectId> = with_records.collect();
        for (obj, st) in self.objset.objects.iter_mut() {
            if st.dirty || changed.binary_search(obj).is_ok() {
                st.dirty = false;
                dnodes.push((*obj, st.dnode.clone()));
            }
        }
        dnodes.sort_by_key(|(o, _)| *o);
        d.frozen = Some(Frozen {
            records,
            dnodes,
            counts: std::mem::take(&mut d.counts),
            reserved_units: std::mem::take(&mut d.reserved_units),
            handed_to_prewrite: 0,
        });
        d.dirty_bytes = 0;
        d.rewritten_bytes = 0;
        d.changed = false;
    }
}

impl DirtySet {
    /// Whether a commit has frozen this volume's changes and not yet synced them.
    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen.is_some()
    }

    /// Units reserved by the frozen records.
    pub(crate) fn frozen_reserved_units(&self) -> u64 {
        self.frozen.as_ref().map_or(0, |f| f.reserved_units)
    }

    /// Units of the frozen records' reservation the allocator still holds for them.
    pub(crate) fn frozen_reservation_held(&self) -> u64 {
        self.frozen.as_ref().map_or(0, |f| f.reserved_units - f.handed_to_prewrite)
    }

    /// The frozen pass allocated `units` for frozen records: up to that many of their
    /// reservation are no longer needed by the allocator. Returns how many to release.
    pub(crate) fn hand_frozen_reservation(&mut self, units: u64) -> u64 {
        let Some(f) = self.frozen.as_mut() else { return 0 };
        let n = units.min(f.reserved_units - f.handed_to_prewrite);
        f.handed_to_prewrite += n;
        n
    }

    /// The records a commit writes: the frozen ones while a commit is in flight, else the
    /// open txg's (a commit under the lock freezes and syncs in one step).
    pub(crate) fn commit_records(&self) -> &BTreeMap<(ObjectId, u64), Option<Arc<Vec<u8>>>> {
        self.frozen.as_ref().map_or(&self.records, |f| &f.records)
    }

    /// A record's content in memory: written since the freeze, else frozen; `Some(None)`
    /// is a record becoming a hole; `None`: the block tree has it.
    pub(super) fn dirty_entry(&self, key: (ObjectId, u64)) -> Option<&Option<Arc<Vec<u8>>>> {
        self.records.get(&key).or_else(|| self.frozen.as_ref()?.records.get(&key))
    }
}
