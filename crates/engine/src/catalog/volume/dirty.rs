//! A volume's dirty set: what the open txg changed and a commit has not written yet — the
//! dirty records of OpenZFS (`dbuf_dirty_record_t`) and the dataset's place on the txg's
//! dirty list, with the space they reserved.
//!
//! Writes go to whole records held in memory until the txg syncs (`records`); a write
//! smaller than a record reads the record once, then edits it in memory (read-modify-write
//! in the txg, never on disk). `None` in `records` is a record that becomes a hole (punched
//! or truncated away). Space is reserved when a record first becomes dirty, so a full pool
//! reports NoSpace to the writer, not to the commit. A commit's freeze moves the records
//! into `frozen` (freeze.rs) and `VolumeState::sync` empties that.
//!
//! Mutated under the pool's lock (`Pool::inner`, lock 2 of the table in pool/mod.rs)
//! only: by the volume's object operations (pool/guard.rs, the intent log's replay), by
//! administrative operations once no commit is quiescing (`pending_snapshots`,
//! `shared_records`, the `changed` flag), by the prewriter registering the blocks it wrote
//! (`prewritten`, prewrite.rs; also while a commit quiesces), and by the commit (freeze,
//! sync). While a commit quiesces, the only other changes are data writes and attribute
//! changes, to the live records and flag; the frozen set stays as the freeze left it. The
//! prewriter and the commit read records outside the lock only through the `Arc`s they took
//! under it.

use super::freeze::Frozen;
use super::ObjectId;
use crate::alloc::Allocator;
use crate::error::Result;
use crate::format::BlockPtr;
use crate::pipeline::dedup::DedupTable;
use std::collections::{BTreeMap, HashMap};
use std::ops::RangeBounds;
use std::sync::Arc;

/// A dirty record already written to a block of the open txg (pool/prewrite.rs).
pub(crate) struct Prewritten {
    pub content: Arc<Vec<u8>>,
    pub bp: BlockPtr,
}

#[derive(Default)]
pub struct DirtySet {
    /// Shared with a prewrite in flight (prewrite.rs): editing a record then copies it
    /// (`Arc::make_mut`), so the prewritten block is used only if it is still the content.
    pub(super) records: BTreeMap<(ObjectId, u64), Option<Arc<Vec<u8>>>>,
    /// Dirty records already written to a block of the open txg by a prewrite, with the
    /// content they were written from (prewrite.rs). foldhash (seeded per process), not
    /// std's SipHash: a lookup per record in the prewrite, its check and the commit.
    pub(crate) prewritten: HashMap<(ObjectId, u64), Prewritten, foldhash::fast::RandomState>,
    /// Dirty records with content (not holes) per object: `st_blocks` in O(1).
    pub(super) counts: HashMap<ObjectId, u64>,
    pub(super) dirty_bytes: u64,
    /// Bytes written in the open txg into records it had already dirtied (about: a write
    /// spanning dirty and clean records counts its share). More of them than dirty bytes: a
    /// writer rewriting its data faster than commits come, whom early prewrite passes
    /// would chase in vain (quiesce.rs).
    pub(super) rewritten_bytes: u64,
    pub(super) reserved_units: u64,
    /// Blocks this volume stopped referencing in the open txg (deleted objects).
    pub(super) released: Vec<BlockPtr>,
    /// Something changed since the last sync: the next commit freezes and syncs this volume.
    pub changed: bool,
    /// Snapshots to take when this txg syncs: (snapshot id, name, group id).
    pub pending_snapshots: Vec<(u64, String, u64)>,
    /// Records to point at existing blocks (or holes) when the txg syncs: a single-file
    /// restore re-acquiring blocks of a snapshot (see restore.rs). Only ever set on a volume
    /// committed clean, under the lock, and committed before the lock is released.
    pub(crate) shared_records: BTreeMap<(ObjectId, u64), BlockPtr>,
    /// What a commit in flight is writing: the open txg's changes as they stood when the
    /// commit froze them (freeze.rs). Reads look here after `records`.
    pub(super) frozen: Option<Frozen>,
}

impl DirtySet {
    /// Units reserved by this volume's dirty data: the open txg's and a commit's in flight.
    pub fn reserved_units(&self) -> u64 {
        self.reserved_units + self.frozen_reserved_units()
    }

    /// Units reserved by the open txg's dirty data (written since a commit's freeze).
    pub(crate) fn open_reserved_units(&self) -> u64 {
        self.reserved_units
    }

    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes
    }

    /// Bytes the open txg wrote again into records it had already dirtied.
    pub(crate) fn rewritten_bytes(&self) -> u64 {
        self.rewritten_bytes
    }

    /// Records of `obj` with content, dirty or frozen (each counted at full record size in
    /// `st_blocks`).
    pub(super) fn records_with_content(&self, obj: ObjectId) -> u64 {
        let dirty = self.counts.get(&obj).copied().unwrap_or(0);
        debug_assert_eq!(
            dirty,
            self.records.range((obj, 0)..=(obj, u64::MAX)).filter(|(_, c)| c.is_some()).count() as u64,
            "per-object dirty count"
        );
        let frozen = self.frozen.as_ref().and_then(|f| f.counts.get(&obj)).copied().unwrap_or(0);
        dirty + frozen
    }

    /// Dirty records with contents not yet prewritten as they stand (prewrite.rs).
    pub(crate) fn prewrite_candidates(&self) -> Vec<((ObjectId, u64), Arc<Vec<u8>>)> {
        self.commit_records()
            .iter()
            .filter_map(|(k, c)| c.as_ref().map(|c| (*k, c)))
            .filter(|(k, c)| !self.prewritten.get(k).is_some_and(|pw| Arc::ptr_eq(&pw.content, c)))
            .map(|(k, c)| (k, c.clone()))
            .collect()
    }

    /// Record `key`'s dirty content if it is exactly `bytes`.
    pub(crate) fn dirty_content_equal(&self, key: (ObjectId, u64), bytes: &[u8]) -> Option<Arc<Vec<u8>>> {
        match self.records.get(&key) {
            Some(Some(c)) if c.as_slice() == bytes => Some(c.clone()),
            _ => None,
        }
    }

    /// Whether record `key` is still dirty with exactly `content` (the same allocation).
    pub(crate) fn still_holds(&self, key: (ObjectId, u64), content: &Arc<Vec<u8>>) -> bool {
        matches!(self.commit_records().get(&key), Some(Some(c)) if Arc::ptr_eq(c, content))
    }

    /// Forget every prewritten block (their writes failed), freeing them. A block the
    /// allocator cannot free was freed before through a damaged pointer to its units.
    pub(crate) fn drop_prewritten(&mut self, alloc: &mut Allocator, ddt: &mut DedupTable, txg: u64) -> Result<()> {
        for (_, pw) in self.prewritten.drain() {
            ddt.free(alloc, &pw.bp, txg)?;
        }
        Ok(())
    }

    /// Make record `recno` dirty with `content` (a full record), its space already reserved.
    pub(super) fn replace_record(&mut self, obj: ObjectId, recno: u64, content: Vec<u8>) {
        let len = content.len() as u64;
        match self.records.insert((obj, recno), Some(Arc::new(content))) {
            Some(Some(_)) => {}
            _ => {
                self.dirty_bytes += len;
                *self.counts.entry(obj).or_insert(0) += 1;
            }
        }
    }

    /// Forget the dirty records of `obj` in `range`, holes too, with their accounting.
    pub(super) fn discard(&mut self, obj: ObjectId, range: impl RangeBounds<(ObjectId, u64)>) {
        let gone: Vec<u64> = self.records.range(range).map(|(&(_, r), _)| r).collect();
        for r in gone {
            if let Some(Some(buf)) = self.records.remove(&(obj, r)) {
                self.dirty_bytes -= buf.len() as u64;
                self.uncount(obj);
            }
        }
    }

    pub(super) fn has_records(&self, obj: ObjectId) -> bool {
        self.records.range((obj, 0)..=(obj, u64::MAX)).next().is_some()
            || self.frozen.as_ref().is_some_and(|f| f.records.range((obj, 0)..=(obj, u64::MAX)).next().is_some())
    }

    fn uncount(&mut self, obj: ObjectId) {
        if let Some(n) = self.counts.get_mut(&obj) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&obj);
            }
        }
    }

    /// Records in [first, last] of `obj` that are not dirty yet (each needs a reservation).
    pub(super) fn clean_records(&self, obj: ObjectId, first: u64, last: u64) -> u64 {
        let dirty = self.records.range((obj, first)..=(obj, last)).filter(|(_, c)| c.is_some()).count() as u64;
        last - first + 1 - dirty
    }
}
