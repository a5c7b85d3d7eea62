//! The pool's commit (OpenZFS `spa_sync`): the open txg's volumes, snapshots, deadlists,
//! dedup and pack tables and catalog written as new blocks, then the root (txg/mod.rs has
//! the protocol and why a crash anywhere in it is safe).

use crate::error::{Error, ErrorKind, Result};
use crate::format::features::COMPAT_HOST_STATE;
use crate::format::label::LabelPhys;
use crate::format::space::{DedupPhys, PackPhys};
use crate::format::uberblock::{HostState, UberblockPhys};
use crate::format::LABEL_SIZE;
use crate::pool::{volume_key, PoolInner, VolumeId};
use crate::txg::write_root;

/// The commit of the open txg (steps 1–5 above), and the state checks around it.
impl PoolInner {
    /// Replace both pool labels with `label`, one at a time, each flushed, so a crash leaves
    /// at least one valid label. A failure latches the pool (DESIGN.md §3.8).
    pub(crate) fn rewrite_labels(&mut self, label: LabelPhys, context: &'static str) -> Result<()> {
        let label = LabelPhys { generation: self.label.generation + 1, ..label };
        for idx in 0..2u32 {
            let l = LabelPhys { label_index: idx, ..label.clone() };
            let r = self
                .dev
                .write_at(&l.encode(), idx as u64 * LABEL_SIZE)
                .map_err(|e| Error::io(context, e))
                .and_then(|_| self.dev.flush().map_err(|e| Error::io("flush pool label", e)));
            if let Err(e) = r {
                self.health.latched = Some(format!("label update failed: {e}"));
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
        if matches!(e.kind(), ErrorKind::Corruption | ErrorKind::Io) && self.health.latched.is_none() {
            self.health.latched = Some(format!("{what} failed part-way: {e}"));
        }
        e
    }

    pub(crate) fn writable(&self) -> Result<()> {
        if let Some(why) = &self.health.latched {
            return Err(Error::ReadOnly(format!("{why}; reopen the pool once the device is healthy")));
        }
        if self.health.read_only {
            return Err(Error::ReadOnly("opened read-only".into()));
        }
        Ok(())
    }

    pub(crate) fn volume_id(&self, name: &str) -> Result<VolumeId> {
        self.catalog.by_name.get(name).copied().ok_or_else(|| {
            Error::NotFound(format!("volume {name} in pool {} (see `strata volume list`)", self.label.pool_name))
        })
    }

    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.catalog.volumes.values().map(|v| v.dirty.dirty_bytes()).sum()
    }

    /// Whether the open txg's writers rewrite their data faster than commits come: more
    /// bytes were written again into records already dirty than are dirty. Early prewrite
    /// passes would write what is overwritten before the freeze (quiesce.rs).
    pub(crate) fn rewrites_outpace_commits(&self) -> bool {
        let dirty = self.dirty_bytes();
        dirty > 0 && self.catalog.volumes.values().map(|v| v.dirty.rewritten_bytes()).sum::<u64>() >= dirty
    }

    /// Asked by a writer short of space: a scrub's pin holds back the frees made while it
    /// runs, so a scrub in progress is asked to yield it (check/mod.rs).
    pub(crate) fn could_free_space(&self) -> bool {
        if self.alloc.held_units() > 0 {
            self.read_pins.ask_scrubs_to_yield();
        }
        self.alloc.held_units() > 0
            || self.catalog.volumes.values().any(|v| v.dirty.changed || v.dirty.is_frozen())
            || self.destroy_pending()
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.catalog.dirty
            || self.catalog.volumes.values().any(|v| v.dirty.changed || v.dirty.is_frozen())
            || self.alloc.has_dirty_chunks()
            || self.destroy_pending()
    }

    /// Take the open txg's changes out of the live state for the commit (volume/freeze.rs):
    /// from here on, writes belong to the next txg, and so do the intent log's groups
    /// recorded after `frozen_lsn`.
    pub(crate) fn freeze(&mut self) {
        assert!(self.txg.frozen_lsn.is_none(), "one commit at a time");
        // A guard that commits inside: its operations so far are in this txg.
        self.tap_end_frame();
        self.txg.frozen_lsn = Some(self.ilog.appended);
        for v in self.catalog.volumes.values_mut().filter(|v| v.dirty.changed) {
            v.freeze();
        }
    }

    pub(crate) fn commit(&mut self) -> Result<u64> {
        self.writable()?;
        if !self.is_dirty() {
            return Ok(self.txg.synced);
        }
        self.commit_always()
    }

    /// Commit even with nothing dirty: advancing the txg is what releases held frees.
    pub(crate) fn commit_always(&mut self) -> Result<u64> {
        self.writable()?;
        let txg = self.txg.next;
        match self.sync(txg) {
            Ok(()) => {
                self.txg.synced = txg;
                self.txg.next = txg + 1;
                // What a device set records as the first txg a member that fails from now on misses.
                self.dev.note_txg(txg + 1);
                let freed = self.alloc.take_freed_keys();
                self.io.forget(&freed);
                Ok(txg)
            }
            Err(e) => {
                self.io.discard_writes();
                self.health.latched = Some(format!("commit of txg {txg} failed: {e}"));
                Err(e)
            }
        }
    }

    fn sync(&mut self, txg: u64) -> Result<()> {
        // A commit under the lock freezes and syncs in one step; `Pool::commit` froze
        // earlier and wrote the frozen data meanwhile.
        if self.txg.frozen_lsn.is_none() {
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
            let PoolInner { alloc, ddt, catalog: crate::catalog::Catalog { volumes, .. }, .. } = self;
            for v in volumes.values_mut().filter(|v| !v.dirty.is_frozen()) {
                v.dirty.drop_prewritten(alloc, ddt, txg)?;
            }
        }
        let mut released = std::mem::take(&mut self.catalog.released);
        let dirty: Vec<VolumeId> =
            self.catalog.volumes.iter().filter(|(_, v)| v.dirty.is_frozen()).map(|(id, _)| *id).collect();
        for vid in dirty {
            let PoolInner { io, alloc, ddt, catalog: crate::catalog::Catalog { volumes, .. }, .. } = self;
            let v = volumes.get_mut(&vid).expect("listed above");
            let r = v.sync(io, alloc, ddt, txg)?;
            let dl = v.record.phys.deadlist;
            for bp in &r.dead {
                self.catalog.deadlist_insert(&self.io, dl, bp)?;
            }
            released.extend(r.freed);
            self.take_pending_snapshots(vid, txg)?;
            let PoolInner { io, catalog: crate::catalog::Catalog { volumes, tree: catalog, .. }, .. } = self;
            let v = &volumes[&vid];
            catalog.insert(io, &volume_key(&v.record.name), &v.record.phys.encode())?;
        }
        // A deleted volume's next blocks (destroy.rs): before the catalog is written.
        self.destroy_step(txg)?;
        let PoolInner { io, alloc, ddt, catalog: crate::catalog::Catalog { tree: catalog, .. }, .. } = self;
        // Frees come before the catalog is written: freeing a packed record changes the
        // pack table, which the catalog holds. (Freed units are held back from reuse, so the
        // catalog's new nodes cannot land on them.)
        for bp in &released {
            ddt.free(alloc, bp, txg)?;
        }
        for (hash, entry) in ddt.take_dirty() {
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
            next_volume_id: self.catalog.next_id,
            features_incompat: self.label.features.incompat,
            host_id,
            pool_state,
        };
        assert!(
            pool_state == HostState::Unknown || self.label.features.compat & COMPAT_HOST_STATE != 0,
            "a root recording a host state is written only under labels that name the feature"
        );
        alloc.set_oldest_read_pin(self.read_pins.oldest());
        write_root(self.dev.as_ref(), alloc, &ub)?;
        alloc.reset_reservations(self.catalog.volumes.values().map(|v| v.dirty.open_reserved_units()).sum());
        let frozen_lsn = self.txg.frozen_lsn.take().expect("frozen above");
        self.retired_log = self.ilog.reset(txg, frozen_lsn);
        self.txg.root = ub;
        self.catalog.dirty = false;
        Ok(())
    }
}
