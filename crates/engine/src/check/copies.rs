//! The scrub's part for the fixed structures (`CheckOptions::all_copies`): every copy a
//! device set holds of the pool labels, the uberblock rings and the space map slots is
//! read, and the copies that are damaged, or older than the best copy, are rewritten from
//! it (device/mirror.rs `read_best`). Run under the pool's lock, so no commit writes these
//! meanwhile. The intent log region is not scrubbed: it is written outside the lock, and
//! replay already reads past a damaged copy.

use crate::alloc::Geometry;
use crate::device::BlockDevice;
use crate::format::label::{LabelPhys, LABEL_PHYS_SIZE};
use crate::format::spacemap::{SpacemapChunkPhys, CHUNK_SLOT_SIZE};
use crate::format::uberblock::{UberblockPhys, UBER_SLOT_SIZE};
use crate::format::{LABEL_SIZE, RING_SLOTS};
use crate::txg::ring_slot_addr;

/// Scrub the fixed structures; returns the problems found (copies no device holds intact).
pub(crate) fn scrub_fixed(dev: &dyn BlockDevice, geo: &Geometry, pool_guid: u64, root_txg: u64) -> Vec<String> {
    let mut problems = Vec::new();
    let mut label = vec![0u8; LABEL_PHYS_SIZE];
    for idx in 0..2u64 {
        let addr = idx * LABEL_SIZE;
        let score = |b: &[u8]| LabelPhys::decode(b, addr).ok().map(|_| 0);
        match dev.read_best(&mut label, addr, &score) {
            Ok(Some(_)) => {}
            Ok(None) => problems.push(format!("pool label {idx}: no intact copy")),
            Err(e) => problems.push(format!("pool label {idx}: {e}")),
        }
    }
    let mut slot_buf = vec![0u8; UBER_SLOT_SIZE];
    for label in 0..2 {
        for slot in 0..RING_SLOTS {
            let addr = ring_slot_addr(label, slot);
            let score = |b: &[u8]| match UberblockPhys::decode(b, addr) {
                Ok(Some(ub)) if ub.pool_guid == pool_guid && ub.txg % RING_SLOTS == slot => Some(ub.txg),
                _ => None,
            };
            if let Err(e) = dev.read_best(&mut slot_buf, addr, &score) {
                problems.push(format!("uberblock ring {label} slot {slot}: {e}"));
            }
        }
    }
    let mut chunk = vec![0u8; CHUNK_SLOT_SIZE];
    for c in 0..geo.total_chunks() {
        for slot in 0..2u8 {
            let addr = geo.slot_addr(c, slot);
            let score = |b: &[u8]| match SpacemapChunkPhys::decode(b, addr) {
                Ok(Some(ch)) if ch.chunk_index as u64 == c && ch.pool_guid == pool_guid && ch.txg <= root_txg => {
                    Some(ch.txg)
                }
                _ => None,
            };
            if let Err(e) = dev.read_best(&mut chunk, addr, &score) {
                problems.push(format!("space map chunk {c} slot {slot}: {e}"));
            }
        }
    }
    problems
}
