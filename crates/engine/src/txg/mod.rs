//! Transaction groups: the commit protocol and the uberblock ring.
//!
//! Commit of txg N (`sync`, pool/commit.rs), in this order:
//! 1. every dirty volume writes its changed records, block-tree paths, dnodes and tree
//!    nodes as *new* blocks (allocated only from units no root in the deferral window
//!    references), then the catalog tree does the same with the volume records;
//! 2. the blocks they replaced are freed in the allocator (held from reuse until N + 1 is
//!    durable), and the changed space-map chunks are written to their non-current slots;
//! 3. flush — everything root N points to is now durable;
//! 4. uberblock N is written to slot N % RING_SLOTS of both labels;
//! 5. flush — root N is durable; the txg is committed.
//!
//! Why a crash anywhere is safe: before step 5 completes, the newest valid uberblock on the
//! device is N - 1 (or N, if its write happened to land), and nothing N - 1 references was
//! written in steps 1–4: new blocks went to units free in N - 1's space map and not held
//! (so not referenced by N - 1 or N - 2), and chunk slots are written only where N - 1's
//! versions are not. A torn uberblock fails its self-checksum and the ring scan skips it.
//! After step 5 the device holds root N whole.
//!
//! Every root also records the host that wrote it and whether the pool is active or
//! exported (pool/host_state.rs); the first such root of a pool rewrites the labels first, to
//! name the `COMPAT_HOST_STATE` feature.
//!
//! Any error from step 1 onward latches the pool read-only (DESIGN.md §3.8): in-memory
//! state is then ahead of the device, and the only way forward is to reopen from the ring.

pub mod intent_log;

use crate::alloc::Allocator;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::uberblock::{UberblockPhys, UBER_SLOT_SIZE};
use crate::format::{LABEL_SIZE, RING_SLOTS, UNIT_SIZE};

/// Byte address of ring slot `slot` in label `label`.
pub fn ring_slot_addr(label: u64, slot: u64) -> u64 {
    label * LABEL_SIZE + UNIT_SIZE + slot * UBER_SLOT_SIZE as u64
}

/// Every valid uberblock of `pool_guid` found in either label's ring, newest first (one per
/// txg), plus the problems met along the way (torn or damaged slots).
pub fn scan_ring(dev: &dyn BlockDevice, pool_guid: u64) -> Result<(Vec<UberblockPhys>, Vec<String>)> {
    let mut found: Vec<UberblockPhys> = Vec::new();
    let mut problems = Vec::new();
    let mut buf = vec![0u8; UBER_SLOT_SIZE];
    for label in 0..2 {
        let base = ring_slot_addr(label, 0);
        for slot in 0..RING_SLOTS as usize {
            let addr = base + (slot * UBER_SLOT_SIZE) as u64;
            // Per slot, the newest valid copy a device set holds: a crash may have left a
            // root on some of its members only (device/mirror.rs `read_best`).
            let score = |b: &[u8]| match UberblockPhys::decode(b, addr) {
                Ok(Some(ub)) if ub.pool_guid == pool_guid && ub.txg % RING_SLOTS == slot as u64 => Some(ub.txg),
                _ => None,
            };
            dev.read_best(&mut buf, addr, &score).map_err(|e| Error::io("read uberblock ring", e))?;
            match UberblockPhys::decode(&buf, addr) {
                Ok(Some(ub)) if ub.pool_guid == pool_guid && ub.txg % RING_SLOTS == slot as u64 => found.push(ub),
                Ok(Some(ub)) => problems
                    .push(format!("label {label} slot {slot}: uberblock of txg {} does not belong here", ub.txg)),
                Ok(None) => {}
                Err(c) => problems.push(format!("label {label} slot {slot}: {c}")),
            }
        }
    }
    found.sort_by_key(|ub| std::cmp::Reverse(ub.txg));
    found.dedup_by(|a, b| a.txg == b.txg && a == b);
    Ok((found, problems))
}

/// The error for a pool none of whose roots verifies (`problems`: what the ring scan met).
pub(crate) fn no_valid_root(pool_name: &str, dev: &dyn BlockDevice, problems: &[String]) -> Error {
    Error::Corruption(crate::error::Corruption::new(
        "uberblock ring",
        None,
        format!(
            "pool {pool_name} on {} has no valid root (creation never completed, or the rings are destroyed){}",
            dev.describe(),
            if problems.is_empty() { String::new() } else { format!(": {}", problems.join("; ")) }
        ),
    ))
}

/// Steps 3–5 of the commit: flush, write uberblock to both rings, flush.
pub fn write_root(dev: &dyn BlockDevice, alloc: &mut Allocator, ub: &UberblockPhys) -> Result<()> {
    dev.flush().map_err(|e| Error::io("flush blocks of the txg", e))?;
    let raw = ub.encode();
    let slot = ub.txg % RING_SLOTS;
    for label in 0..2 {
        dev.write_at(&raw, ring_slot_addr(label, slot)).map_err(|e| Error::io("write uberblock", e))?;
    }
    dev.flush().map_err(|e| Error::io("flush uberblock", e))?;
    alloc.txg_synced(ub.txg);
    Ok(())
}

/// The transaction-group state of an open pool: which txg is durable, which is open, the
/// newest root, and where the commit in flight is (pool/quiesce.rs).
pub struct TxgState {
    /// The newest durable txg, and its root.
    pub synced: u64,
    pub root: UberblockPhys,
    /// The open txg: what writes now belong to.
    pub next: u64,
    /// The last intent-log group of the txg a commit froze (`freeze`), until it syncs.
    pub frozen_lsn: Option<u64>,
    /// A commit is writing its frozen data without the lock (pool/quiesce.rs): only data
    /// writes, reads and attribute changes run meanwhile; everything else waits.
    pub quiescing: bool,
    /// Commits that go on to skip their early prewrite passes (`begin_commit`).
    pub skip_early_passes: u8,
    /// Intent-log blocks written as of the last commit's start.
    pub log_blocks_at_commit: u64,
}
