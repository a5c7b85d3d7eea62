//! Async destroy (OpenZFS `bptree` / async_destroy): deleting a volume takes it out of the
//! namespace at once and frees its blocks over the following commits, so a large volume's
//! delete neither walks its trees nor frees millions of blocks inside one commit.
//!
//! `Pool::delete_volume` queues the volume (`PoolInner::queue_destroy`): its head and every
//! snapshot tree go into the catalog's destroy queue (format/destroy.rs) with the volume's
//! origin txg; the volume, its snapshots and reservation leave the catalog. Then:
//! 1. *walk*: at the start of a commit, outside the pool's lock (`Pool::prepare_destroy`),
//!    the queue's first entry is walked like `collect_born_after` — the blocks born in the
//!    volume, shared ones once — and split into data records and metadata (tree nodes,
//!    indirect blocks). Nothing else can free those blocks, so no lock is needed;
//! 2. *free*: each commit's sync (`PoolInner::destroy_step`) frees up to
//!    `PoolOptions::destroy_frees_per_txg` of them: data records first, in walk order,
//!    then the deadlist entries of the trees, and last, in one step, the metadata and the
//!    queue entry. The header's `freed_data` and `sectors_left` are rewritten in the same
//!    commit as the frees.
//!
//! Crash safety: frees and the header commit together, so after a crash the header says
//! exactly how many data records of the walk order are gone. The metadata is freed only
//! with the entry itself, so a walk after a reopen reads intact trees, finds the same
//! order, and skips `freed_data` records. `PoolSpace::destroying_bytes` shows what is
//! still to come back; `held_bytes` and then `available_bytes` show it arriving.

use crate::error::{ErrorKind, Result};
use crate::format::destroy::{destroy_key, parse_destroy_key, DestroyPhys, DestroyTreePhys, KEY_DESTROY};
use crate::format::features::RO_COMPAT_ASYNC_DESTROY;
use crate::format::{BlockKind, BlockPtr};
use crate::pipeline::BlockIo;
use crate::pool::snapshot::{collect_born_after, deadlist_key};
use crate::pool::{Pool, PoolInner, VolumeId};
use crate::tree::btree::BTree;
use std::collections::{BTreeMap, HashSet};

/// Frees per commit by default: ~1 GiB of 16 KiB records; a few tens of ms of a commit.
pub const DESTROY_FREES_PER_TXG_DEFAULT: usize = 65_536;

/// A deleted volume whose blocks are being freed.
pub(crate) struct Destroying {
    pub(crate) phys: DestroyPhys,
    pub(crate) trees: Vec<DestroyTreePhys>,
    /// The blocks to free, once walked (again after every open).
    walk: Option<Walk>,
    /// Why the walk failed (damage): the entry stays, nothing more is freed, the pool's
    /// space warnings say so, and `strata check` tells the rest.
    pub(crate) stuck: Option<String>,
}

struct Walk {
    data: Vec<BlockPtr>,
    meta: Vec<BlockPtr>,
}

/// The blocks of `trees` born after `after_txg` (each once), data records and metadata
/// apart, in the one order every walk of the same trees yields.
pub(crate) fn walk_trees(
    io: &BlockIo,
    trees: &[DestroyTreePhys],
    after_txg: u64,
) -> Result<(Vec<BlockPtr>, Vec<BlockPtr>)> {
    let mut seen = HashSet::new();
    let mut all = Vec::new();
    for t in trees {
        collect_born_after(io, &t.root, after_txg, &mut seen, &mut all)?;
    }
    Ok(all.into_iter().partition(|bp| bp.kind == BlockKind::Data))
}

/// The destroy queue as committed in `catalog` (opening a pool).
pub(crate) fn load(io: &BlockIo, catalog: &BTree) -> Result<BTreeMap<u64, Destroying>> {
    let mut headers: BTreeMap<u64, DestroyPhys> = BTreeMap::new();
    let mut trees: BTreeMap<u64, BTreeMap<u32, DestroyTreePhys>> = BTreeMap::new();
    let mut start = vec![KEY_DESTROY];
    loop {
        let batch = catalog.range(io, &start, Some(&[KEY_DESTROY + 1]), 1024)?;
        let Some((last, _)) = batch.last() else { break };
        start = last.clone();
        start.push(0);
        for (k, v) in &batch {
            let malformed = || crate::error::Corruption::new("destroy queue", None, format!("malformed key {k:02x?}"));
            match parse_destroy_key(k).ok_or_else(malformed)? {
                (id, 0) => {
                    headers.insert(id, DestroyPhys::decode(v)?);
                }
                (id, slot) => {
                    trees.entry(id).or_default().insert(slot, DestroyTreePhys::decode(v)?);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    for (id, phys) in headers {
        let t: Vec<DestroyTreePhys> = trees.remove(&id).unwrap_or_default().into_values().collect();
        if t.len() != phys.trees as usize {
            let detail = format!("entry {id} names {} trees, the catalog holds {}", phys.trees, t.len());
            return Err(crate::error::Corruption::new("destroy queue", None, detail).into());
        }
        out.insert(id, Destroying { phys, trees: t, walk: None, stuck: None });
    }
    if let Some(id) = trees.keys().next() {
        let detail = format!("trees of entry {id} without its header");
        return Err(crate::error::Corruption::new("destroy queue", None, detail).into());
    }
    Ok(out)
}

impl PoolInner {
    /// Take volume `vol` (its head and snapshots; clones already refused) out of the
    /// catalog and queue its blocks for freeing (see the module comment).
    pub(crate) fn queue_destroy(&mut self, vol: VolumeId) -> Result<()> {
        let Some(head) = self.catalog.volumes.get(&vol) else { return Ok(()) };
        let after_txg = self.catalog.snapshot_txg(head.record.phys.origin);
        let mut trees = vec![DestroyTreePhys { root: head.record.phys.tree_root, deadlist: head.record.phys.deadlist }];
        trees.extend(
            self.catalog
                .snapshots
                .values()
                .filter(|s| s.rec.volume == vol.0)
                .map(|s| DestroyTreePhys { root: s.rec.tree_root, deadlist: s.rec.deadlist }),
        );
        let phys = DestroyPhys {
            after_txg,
            trees: trees.len() as u32,
            freed_data: 0,
            sectors_left: head.record.phys.total_sectors,
        };
        if self.label.features.ro_compat & RO_COMPAT_ASYNC_DESTROY == 0 {
            let mut label = self.label.clone();
            label.features.ro_compat |= RO_COMPAT_ASYNC_DESTROY;
            self.rewrite_labels(label, "write pool label (enable async destroy)")?;
        }
        self.catalog.tree.insert(&self.io, &destroy_key(vol.0, 0), &phys.encode())?;
        for (slot, t) in (1u32..).zip(&trees) {
            self.catalog.tree.insert(&self.io, &destroy_key(vol.0, slot), &t.encode())?;
        }
        self.destroying.insert(vol.0, Destroying { phys, trees, walk: None, stuck: None });
        self.catalog.dirty = true;
        Ok(())
    }

    /// Whether the queue has work a commit can do.
    pub(crate) fn destroy_pending(&self) -> bool {
        self.destroying.values().any(|d| d.stuck.is_none())
    }

    /// Bytes the queue will still free.
    pub(crate) fn destroying_bytes(&self) -> u64 {
        self.destroying.values().map(|d| d.phys.sectors_left * crate::format::SECTOR_SIZE).sum()
    }

    /// The queue's warnings (entries whose walk met damage).
    pub(crate) fn destroy_warnings(&self) -> Vec<String> {
        self.destroying
            .iter()
            .filter_map(|(id, d)| d.stuck.as_ref().map(|why| format!("destroy of volume id {id} is stuck: {why}")))
            .collect()
    }

    /// Part of the commit of txg `txg` (pool/commit.rs): free the next blocks of the
    /// walked queue entries, in id order, up to `destroy_frees_per_txg` frees in all.
    pub(crate) fn destroy_step(&mut self, txg: u64) -> Result<()> {
        let mut budget = self.destroy_frees_per_txg.max(1);
        let ids: Vec<u64> = self.destroying.iter().filter(|(_, d)| d.stuck.is_none()).map(|(id, _)| *id).collect();
        for id in ids {
            match self.destroy_entry_step(id, txg, budget) {
                Ok(Some(used)) => budget -= used,
                Ok(None) => break,
                // Damage in a deleted volume stops its destroy, not the pool: what was freed
                // so far is in the header, the rest stays allocated, and the pool's space
                // warnings name it (the checker tells the rest). Every free checks before
                // it changes anything, so the step stopped between two frees.
                Err(e) if e.kind() == ErrorKind::Corruption => {
                    let PoolInner { destroying, catalog, io, .. } = &mut *self;
                    if let Some(d) = destroying.get_mut(&id) {
                        d.stuck = Some(format!("{e}; run `strata check`"));
                        d.walk = None;
                        catalog.tree.insert(io, &destroy_key(id, 0), &d.phys.encode())?;
                    }
                }
                Err(e) => return Err(e),
            }
            if budget == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Free up to `budget` blocks and deadlist entries of entry `id`. Returns what it
    /// used if the entry is finished (and so the next may go on), None otherwise.
    fn destroy_entry_step(&mut self, id: u64, txg: u64, budget: usize) -> Result<Option<usize>> {
        let PoolInner { destroying, alloc, ddt, .. } = self;
        let Some(d) = destroying.get_mut(&id) else { return Ok(Some(0)) };
        let Some(walk) = &d.walk else { return Ok(None) };
        let mut done = 0;
        let first = usize::try_from(d.phys.freed_data).unwrap_or(usize::MAX);
        for bp in walk.data.iter().skip(first).take(budget) {
            ddt.free(alloc, bp, txg)?;
            d.phys.freed_data += 1;
            d.phys.sectors_left = d.phys.sectors_left.saturating_sub(bp.sectors());
            done += 1;
        }
        let data_done = d.phys.freed_data as usize >= walk.data.len();
        let trees = d.trees.clone();
        self.catalog.dirty = true;
        if data_done {
            for t in &trees {
                if done >= budget {
                    break;
                }
                let entries = self.catalog.deadlist_entries(&self.io, t.deadlist, 0)?;
                for bp in entries.iter().take(budget - done) {
                    self.catalog.tree.remove(&self.io, &deadlist_key(t.deadlist, bp.birth_txg, bp.addr))?;
                    done += 1;
                }
            }
        }
        let PoolInner { destroying, alloc, ddt, io, catalog: crate::catalog::Catalog { tree: catalog, .. }, .. } = self;
        let d = destroying.get_mut(&id).expect("looked up above");
        if !data_done || done >= budget {
            catalog.insert(io, &destroy_key(id, 0), &d.phys.encode())?;
            return Ok(None);
        }
        // Last step: the metadata (read by every walk until now) and the entry, all checked
        // first so that damage stops the step before it frees any.
        if let Some(walk) = &d.walk {
            for bp in walk.meta.iter().filter(|bp| !bp.packed) {
                alloc.freeable(bp.addr, bp.units())?;
            }
        }
        if let Some(walk) = d.walk.take() {
            for bp in &walk.meta {
                ddt.free(alloc, bp, txg)?;
                d.phys.sectors_left = d.phys.sectors_left.saturating_sub(bp.sectors());
            }
        }
        for slot in 0..=d.phys.trees {
            catalog.remove(io, &destroy_key(id, slot))?;
        }
        destroying.remove(&id);
        Ok(Some(done + 1))
    }
}

impl Pool {
    /// Walk the queue entries not walked yet, outside the pool's lock (step 1 of the
    /// module comment). Runs at the start of a commit, under its gate: only a commit frees
    /// queue blocks, and the metadata this reads is freed only after it is walked.
    pub(crate) fn prepare_destroy(&self) {
        loop {
            let (id, trees, after_txg, io) = {
                let p = self.lock_raw();
                let Some((id, d)) = p.destroying.iter().find(|(_, d)| d.walk.is_none() && d.stuck.is_none()) else {
                    return;
                };
                (*id, d.trees.clone(), d.phys.after_txg, p.io.clone())
            };
            let walked = walk_trees(&io, &trees, after_txg);
            let mut p = self.lock_raw();
            let Some(d) = p.destroying.get_mut(&id) else { continue };
            match walked {
                Ok((data, meta)) if d.phys.freed_data <= data.len() as u64 => d.walk = Some(Walk { data, meta }),
                Ok((data, _)) => {
                    d.stuck = Some(format!(
                        "its header says {} data records are freed, the walk finds {}; run `strata check`",
                        d.phys.freed_data,
                        data.len()
                    ))
                }
                Err(e) => d.stuck = Some(format!("{e}; run `strata check`")),
            }
        }
    }
}
