//! Read pins (redb's read transactions): a read is planned under the pool's lock and its
//! device reads are done outside it (`Pool::read_shared`). Between the two, commits may
//! free the blocks the plan points at; the allocator holds a freed unit back for a txg
//! (alloc/mod.rs) but no longer, so a slow read could find the unit reused. A pin closes
//! that: taken under the lock with the plan, it names the open txg P the plan was made
//! in; until it is dropped, nothing freed in txg P or later is released for reuse (the
//! commit hands the oldest pin to the allocator before each root, `set_oldest_read_pin`).
//!
//! So no read depends on a checksum to notice reuse — on a CRC-32C pool a reused block
//! could even pass — and a checksum mismatch counts as corruption only when it is one.
//!
//! Blocks freed before P cannot be in the plan: the plan reads the live state of txg P,
//! which no longer references them. A pin delays reuse, never correctness: the commit
//! goes on; units stay held a little longer (released by the first commit after the
//! last pin older than them is dropped).

use crate::catalog::volume::{ObjectId, ReadPlan, SharedBytes};
use crate::error::Result;
use crate::pipeline::BlockIo;
use crate::pool::{Pool, VolumeId};
use crate::sync::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The pins in flight, by open txg. Its lock is a leaf: taken under the pool's lock (pin,
/// and the commit reading the oldest) or alone (unpin), never the other way round.
#[derive(Default)]
pub(crate) struct ReadPins {
    pins: Mutex<BTreeMap<u64, usize>>,
}

impl ReadPins {
    fn pins(&self) -> MutexGuard<'_, BTreeMap<u64, usize>> {
        // The map is updated by single inserts and removes: a panic elsewhere cannot leave
        // it half-changed, so a poisoned lock is still a consistent map.
        self.pins.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn pin(&self, txg: u64) {
        *self.pins().entry(txg).or_insert(0) += 1;
    }

    fn unpin(&self, txg: u64) {
        let mut pins = self.pins();
        if let Some(n) = pins.get_mut(&txg) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&txg);
            }
        }
    }

    /// The open txg of the oldest read in flight.
    pub(crate) fn oldest(&self) -> Option<u64> {
        self.pins().keys().next().copied()
    }

    /// Reads in flight (for tests and status).
    pub(crate) fn count(&self) -> usize {
        self.pins().values().sum()
    }
}

/// A read planned under the pool's lock whose blocks cannot be reused until it is dropped.
pub struct PinnedRead {
    plan: ReadPlan,
    io: Arc<BlockIo>,
    pins: Arc<ReadPins>,
    txg: u64,
}

impl PinnedRead {
    /// Bytes the read returns (the range clipped at the object's end).
    pub fn len(&self) -> usize {
        self.plan.len
    }

    pub fn is_empty(&self) -> bool {
        self.plan.len == 0
    }

    /// Do the device reads: the read's bytes as shared pieces (no copy of memory-resident
    /// records). Any checksum mismatch here is real damage (or a failing device).
    pub fn finish(&self) -> Result<Vec<SharedBytes>> {
        self.plan.finish_shared(&self.io)
    }
}

impl Drop for PinnedRead {
    fn drop(&mut self) {
        self.pins.unpin(self.txg);
    }
}

impl Pool {
    /// Plan a read of `len` bytes at `offset` of `obj` and pin what it will read: the
    /// device reads are done by [`PinnedRead::finish`], without the pool's lock.
    pub fn plan_read(&self, vol: VolumeId, obj: ObjectId, offset: u64, len: usize) -> Result<PinnedRead> {
        let mut t = self.guard_for_data();
        let plan = t.plan_read(vol, obj, offset, len)?;
        let p = t.inner();
        let txg = p.txg.next;
        p.read_pins.pin(txg);
        Ok(PinnedRead { plan, io: p.io.clone(), pins: p.read_pins.clone(), txg })
    }

    /// Reads planned and not finished yet (each holds back the reuse of freed blocks).
    pub fn reads_in_flight(&self) -> usize {
        self.lock_raw().read_pins.count()
    }
}
