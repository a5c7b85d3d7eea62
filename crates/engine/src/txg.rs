//! Transaction groups: the commit protocol and the uberblock ring.
//!
//! Commit of txg N (`sync`), in this order:
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
//! exported (host_state.rs); the first such root of a pool rewrites the labels first, to
//! name the `COMPAT_HOST_STATE` feature.
//!
//! Any error from step 1 onward latches the pool read-only (DESIGN.md §3.8): in-memory
//! state is then ahead of the device, and the only way forward is to reopen from the ring.

use crate::alloc::Allocator;
use crate::device::BlockDevice;
use crate::error::{Error, ErrorKind, Result};
use crate::format::features::COMPAT_HOST_STATE;
use crate::format::label::LabelPhys;
use crate::format::space::{DedupPhys, PackPhys};
use crate::format::uberblock::{HostState, UberblockPhys, UBER_SLOT_SIZE};
use crate::format::{LABEL_SIZE, RING_SLOTS, UNIT_SIZE};
use crate::pool::{volume_key, PoolInner, VolumeId};

/// Byte address of ring slot `slot` in label `label`.
pub fn ring_slot_addr(label: u64, slot: u64) -> u64 {
    label * LABEL_SIZE + UNIT_SIZE + slot * UBER_SLOT_SIZE as u64
}

/// Every valid uberblock of `pool_guid` found in either label's ring, newest first (one per
/// txg), plus the problems met along the way (torn or damaged slots).
pub fn scan_ring(dev: &dyn BlockDevice, pool_guid: u64) -> Result<(Vec<UberblockPhys>, Vec<String>)> {
    let mut found: Vec<UberblockPhys> = Vec::new();
    let mut problems = Vec::new();
    let ring_bytes = (RING_SLOTS * UBER_SLOT_SIZE as u64) as usize;
    let mut buf = vec![0u8; ring_bytes];
    for label in 0..2 {
        let base = ring_slot_addr(label, 0);
        dev.read_at(&mut buf, base).map_err(|e| Error::io("read uberblock ring", e))?;
        for slot in 0..RING_SLOTS as usize {
            let addr = base + (slot * UBER_SLOT_SIZE) as u64;
            match UberblockPhys::decode(&buf[slot * UBER_SLOT_SIZE..(slot + 1) * UBER_SLOT_SIZE], addr) {
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

/// The commit of the open txg (steps 1–5 above), and the state checks around it.
impl PoolInner {
    /// Replace both pool labels with `label`, one at a time, each flushed, so a crash leaves
    /// at least one valid label. A failure latches the pool (DESIGN.md §3.8).
    pub(crate) fn rewrite_labels(&mut self, label: LabelPhys, context: &'static str) -> Result<()> {
        for idx in 0..2u32 {
            let l = LabelPhys { label_index: idx, ..label.clone() };
            let r = self
                .dev
                .write_at(&l.encode(), idx as u64 * LABEL_SIZE)
                .map_err(|e| Error::io(context, e))
                .and_then(|_| self.dev.flush().map_err(|e| Error::io("flush pool label", e)));
            if let Err(e) = r {
                self.latched = Some(format!("label update failed: {e}"));
                return Err(e);
            }
        }
        self.label = label;
        Ok(())
    }

    /// An administrative change (deleting a snapshot or a volume) that met damage or a device
    /// error after it began changing the in-memory state cannot be undone: latch the pool, as
    /// a failed commit does, so the half-done change is never committed. Errors of other
    /// kinds are refusals raised before anything changed. Returns `e`.
    pub(crate) fn latch_part_way(&mut self, what: &str, e: Error) -> Error {
        if matches!(e.kind(), ErrorKind::Corruption | ErrorKind::Io) && self.latched.is_none() {
            self.latched = Some(format!("{what} failed part-way: {e}"));
        }
        e
    }

    pub(crate) fn writable(&self) -> Result<()> {
        if let Some(why) = &self.latched {
            return Err(Error::ReadOnly(format!("{why}; reopen the pool once the device is healthy")));
        }
        if self.read_only {
            return Err(Error::ReadOnly("opened read-only".into()));
        }
        Ok(())
    }

    pub(crate) fn volume_id(&self, name: &str) -> Result<VolumeId> {
        self.by_name.get(name).copied().ok_or_else(|| {
            Error::NotFound(format!("volume {name} in pool {} (see `strata volume list`)", self.label.pool_name))
        })
    }

    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.volumes.values().map(|v| v.dirty_bytes()).sum()
    }

    /// Whether the open txg's writers rewrite their data faster than commits come: more
    /// bytes were written again into records already dirty than are dirty. Early prewrite
    /// passes would write what is overwritten before the freeze (quiesce.rs).
    pub(crate) fn rewrites_outpace_commits(&self) -> bool {
        let dirty = self.dirty_bytes();
        dirty > 0 && self.volumes.values().map(|v| v.rewritten_bytes()).sum::<u64>() >= dirty
    }

    pub(crate) fn could_free_space(&self) -> bool {
        self.alloc.held_units() > 0 || self.volumes.values().any(|v| v.dirty || v.is_frozen())
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.catalog_dirty || self.volumes.values().any(|v| v.dirty || v.is_frozen()) || self.alloc.has_dirty_chunks()
    }

    /// Take the open txg's changes out of the live state for the commit (volume/freeze.rs):
    /// from here on, writes belong to the next txg, and so do the intent log's groups
    /// recorded after `frozen_lsn`.
    pub(crate) fn freeze(&mut self) {
        assert!(self.frozen_lsn.is_none(), "one commit at a time");
        self.frozen_lsn = Some(self.ilog.appended);
        for v in self.volumes.values_mut().filter(|v| v.dirty) {
            v.freeze();
        }
    }

    pub(crate) fn commit(&mut self) -> Result<u64> {
        self.writable()?;
        if !self.is_dirty() {
            return Ok(self.txg_synced);
        }
        self.commit_always()
    }

    /// Commit even with nothing dirty: advancing the txg is what releases held frees.
    pub(crate) fn commit_always(&mut self) -> Result<u64> {
        self.writable()?;
        let txg = self.next_txg;
        match self.sync(txg) {
            Ok(()) => {
                self.txg_synced = txg;
                self.next_txg = txg + 1;
                let freed = self.alloc.take_freed_keys();
                self.io.forget(&freed);
                Ok(txg)
            }
            Err(e) => {
                self.io.discard_writes();
                self.latched = Some(format!("commit of txg {txg} failed: {e}"));
                Err(e)
            }
        }
    }

    fn sync(&mut self, txg: u64) -> Result<()> {
        // A commit under the lock freezes and syncs in one step; `Pool::commit` froze
        // earlier and wrote the frozen data meanwhile.
        if self.frozen_lsn.is_none() {
            self.freeze();
        }
        // The labels name the host-state feature before the first root that uses it.
        let (host_id, pool_state) = self.host_stamp();
        if pool_state != HostState::Unknown {
            self.enable_host_state_feature()?;
        }
        // Prewritten blocks are referenced below: their writes must all have been issued
        // (this completes them, or waits for the prewriter doing it). If one failed, none
        // is used; the records are written again here.
        for b in std::mem::take(&mut self.prewrites) {
            b.complete(self.dev.as_ref())?;
        }
        {
            // Only frozen volumes sync; any other's prewritten blocks are nobody's.
            let PoolInner { volumes, alloc, .. } = self;
            for v in volumes.values_mut().filter(|v| !v.is_frozen()) {
                v.drop_prewritten(alloc, txg)?;
            }
        }
        let mut released = std::mem::take(&mut self.catalog_released);
        let dirty: Vec<VolumeId> = self.volumes.iter().filter(|(_, v)| v.is_frozen()).map(|(id, _)| *id).collect();
        for vid in dirty {
            let PoolInner { volumes, io, alloc, .. } = self;
            let v = volumes.get_mut(&vid).expect("listed above");
            let r = v.sync(io, alloc, txg)?;
            let dl = v.rec.deadlist;
            for bp in &r.dead {
                self.deadlist_insert(dl, bp)?;
            }
            released.extend(r.freed);
            self.take_pending_snapshots(vid, txg)?;
            let PoolInner { volumes, io, catalog, .. } = self;
            let v = &volumes[&vid];
            catalog.insert(io, &volume_key(&v.name), &v.rec.encode())?;
        }
        let PoolInner { io, alloc, catalog, .. } = self;
        // Frees come before the catalog is written: freeing a packed record changes the
        // pack table, which the catalog holds. (Freed units are held back from reuse, so the
        // catalog's new nodes cannot land on them.)
        for bp in &released {
            alloc.free_block(bp, txg)?;
        }
        for (hash, entry) in alloc.ddt.take_dirty() {
            match entry {
                Some(e) => {
                    catalog.insert(io, &DedupPhys::key(&hash), &e.encode())?;
                }
                None => {
                    catalog.remove(io, &DedupPhys::key(&hash))?;
                }
            }
        }
        for (addr, pack) in alloc.take_dirty_packs() {
            match pack {
                Some(pk) => {
                    catalog.insert(io, &PackPhys::key(addr), &pk.encode())?;
                }
                None => {
                    catalog.remove(io, &PackPhys::key(addr))?;
                }
            }
        }
        let catalog_root = catalog.write(io, alloc, txg)?;
        for bp in catalog.take_released() {
            alloc.free_block(&bp, txg)?;
        }
        io.finish_writes()?;
        alloc.write_dirty_chunks(self.dev.as_ref(), txg, self.label.pool_guid)?;
        let ub = UberblockPhys {
            txg,
            pool_guid: self.label.pool_guid,
            timestamp_ns: self.clock.now_ns(),
            catalog_root,
            allocated_units: alloc.allocated_units(),
            next_volume_id: self.next_volume_id,
            features_incompat: self.label.features.incompat,
            host_id,
            pool_state,
        };
        assert!(
            pool_state == HostState::Unknown || self.label.features.compat & COMPAT_HOST_STATE != 0,
            "a root recording a host state is written only under labels that name the feature"
        );
        write_root(self.dev.as_ref(), alloc, &ub)?;
        alloc.reset_reservations(self.volumes.values().map(|v| v.open_reserved_units()).sum());
        let frozen_lsn = self.frozen_lsn.take().expect("frozen above");
        self.retired_log = self.ilog.reset(txg, frozen_lsn);
        self.root = ub;
        self.catalog_dirty = false;
        Ok(())
    }
}
