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
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The pins in flight, by open txg. Its lock is a leaf: taken under the pool's lock (pin,
/// and the commit reading the oldest) or alone (unpin), never the other way round.
#[derive(Default)]
pub(crate) struct ReadPins {
    pins: Mutex<BTreeMap<u64, usize>>,
    /// Scrubs walking a pinned root (`RootPin`): their pins hold back every free made while
    /// they run, so a pool short of space asks them to yield (`ask_scrubs_to_yield`).
    scrubs: AtomicUsize,
    yield_requested: AtomicBool,
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

    /// A writer is short of space while units are held: ask the scrubs to stop and drop
    /// their pins (they do before their next block read). True if there were any.
    pub(crate) fn ask_scrubs_to_yield(&self) -> bool {
        let any = self.scrubs.load(Ordering::Acquire) > 0;
        if any {
            self.yield_requested.store(true, Ordering::Release);
        }
        any
    }

    pub(crate) fn scrub_should_yield(&self) -> bool {
        self.yield_requested.load(Ordering::Acquire)
    }

    pub(crate) fn scrubs_running(&self) -> bool {
        self.scrubs.load(Ordering::Acquire) > 0
    }

    /// After `ask_scrubs_to_yield`, wait (without the pool's lock) until they dropped their
    /// pins: a scrub stops before its next block read, so this takes milliseconds — bounded
    /// at 5 s for a scrub whose driver is slow to come back. (The simulator runs no scrub.)
    pub(crate) fn wait_scrubs_gone(&self) {
        #[cfg(not(strata_sim))]
        for _ in 0..5000 {
            if !self.scrubs_running() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
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

/// A pin of the committed root for a walk of it outside the pool's lock (a background
/// scrub, check/mod.rs): the blocks it reaches are not reused until it is dropped.
pub(crate) struct RootPin {
    pins: Arc<ReadPins>,
    txg: u64,
}

impl RootPin {
    /// Pin under the lock (`p` is the pool's locked state).
    pub(crate) fn new(p: &crate::pool::PoolInner) -> RootPin {
        let txg = p.txg.next;
        p.read_pins.pin(txg);
        if p.read_pins.scrubs.fetch_add(1, Ordering::AcqRel) == 0 {
            p.read_pins.yield_requested.store(false, Ordering::Release);
        }
        RootPin { pins: p.read_pins.clone(), txg }
    }

    /// The pool asked the scrub holding this pin to stop (it is short of space).
    pub(crate) fn asked_to_yield(&self) -> bool {
        self.pins.scrub_should_yield()
    }
}

impl Drop for RootPin {
    fn drop(&mut self) {
        self.pins.unpin(self.txg);
        if self.pins.scrubs.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.pins.yield_requested.store(false, Ordering::Release);
        }
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
