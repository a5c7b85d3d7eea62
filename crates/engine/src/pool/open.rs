//! Creating and opening a pool: labels written or read (either copy may be damaged),
//! the uberblock rings scanned, the newest root whose space map and catalog verify loaded
//! (older ones as fallback, with a note), the intent log replayed.

use crate::alloc::{Allocator, Geometry};
use crate::catalog::volume::VolumeState;
use crate::catalog::Catalog;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::features::{Access, Features, INCOMPAT_DEVICE_SET};
use crate::format::label::{LabelPhys, LABEL_PHYS_SIZE, POOL_NAME_MAX};
use crate::format::records::{SnapshotRecordPhys, VolumeRecordPhys};
use crate::format::uberblock::{HostState, UberblockPhys};
use crate::format::{BlockPtr, LABEL_SIZE, MIN_DEVICE_SIZE, UNIT_SIZE};
use crate::pipeline::dedup::{DedupTable, DEDUP_TABLE_MAX_DEFAULT};
use crate::pipeline::BlockIo;
use crate::pool::log_device::{LogAtOpen, LogDeviceSpec};
use crate::pool::snapshot::{SnapshotState, KEY_SNAPSHOT};
use crate::pool::{destroy, CommitStats, CreateOptions, Health, Pool, PoolInner, PoolOptions, VolumeId, KEY_VOLUME};
use crate::tree::btree::BTree;
use crate::txg;
use crate::txg::intent_log::{IntentLog, LogPlace};
use crate::txg::TxgState;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What opening reads from a root: the space map, dedup table, catalog, volumes,
/// snapshots and the destroy queue.
struct LoadedRoot {
    alloc: Allocator,
    ddt: DedupTable,
    catalog: BTree,
    volumes: BTreeMap<VolumeId, VolumeState>,
    snapshots: BTreeMap<u64, SnapshotState>,
    destroying: BTreeMap<u64, destroy::Destroying>,
}

/// The pool's label: of both copies (and, on a device set, of every member's), the valid
/// one with the highest generation — a crash while the labels were rewritten can leave
/// copies of two generations; every reader must pick the same one (`groups::assemble` and
/// `Pool::open` both read it). A device set rewrites the copies that lost.
pub(crate) fn read_label(dev: &dyn BlockDevice) -> Result<(LabelPhys, Vec<String>)> {
    let mut notes = Vec::new();
    let mut buf = vec![0u8; LABEL_PHYS_SIZE];
    let mut best: Option<LabelPhys> = None;
    let mut first_err = None;
    for idx in 0..2u64 {
        let addr = idx * LABEL_SIZE;
        let score = |b: &[u8]| LabelPhys::decode(b, addr).ok().map(|l| l.generation);
        if let Err(e) = dev.read_best(&mut buf, addr, &score) {
            return Err(Error::io("read pool label", e));
        }
        match LabelPhys::decode(&buf, addr) {
            Ok(l) => {
                if best.as_ref().is_none_or(|b| l.generation > b.generation) {
                    best = Some(l);
                }
            }
            Err(c) => {
                if idx == 0 {
                    notes.push(format!("label 0 unusable ({c}); used label 1"));
                }
                first_err = first_err.or(Some(c));
            }
        }
    }
    if let Some(l) = best {
        return Ok((l, notes));
    }
    let c = first_err.expect("both labels failed");
    Err(Error::Corruption(crate::error::Corruption::new(
        "pool label",
        Some(0),
        format!("no valid label on {} ({}): not a Strata pool, or both labels are damaged", dev.describe(), c.detail),
    )))
}
impl Pool {
    /// Make a new pool on `dev`, destroying whatever the device held.
    pub fn create(dev: Arc<dyn BlockDevice>, create: CreateOptions, opts: PoolOptions) -> Result<Pool> {
        Pool::create_with_log(dev, create, None, opts)
    }

    /// Make a new pool on `dev` whose intent log lives on a separate log device (`log`),
    /// or in `dev`'s own region (`None`, the same as [`Pool::create`]).
    pub fn create_with_log(
        dev: Arc<dyn BlockDevice>,
        create: CreateOptions,
        log: Option<LogDeviceSpec>,
        opts: PoolOptions,
    ) -> Result<Pool> {
        if create.name.is_empty() || create.name.len() > POOL_NAME_MAX || create.name.contains(['/', '@', '\0']) {
            return Err(Error::invalid(format!("pool name {:?}: 1-{POOL_NAME_MAX} bytes, no '/', '@'", create.name)));
        }
        if opts.read_only {
            return Err(Error::invalid("cannot create a pool read-only"));
        }
        let size = dev.size_bytes() / UNIT_SIZE * UNIT_SIZE;
        let geo = Geometry::for_device(size).filter(|_| size >= MIN_DEVICE_SIZE).ok_or_else(|| {
            Error::invalid(format!(
                "device {} has {size} bytes; a pool needs at least {MIN_DEVICE_SIZE}",
                dev.describe()
            ))
        })?;
        let mut label = LabelPhys {
            label_index: 0,
            pool_guid: create.pool_guid,
            device_guid: create.device_guid,
            device_index: 0,
            device_count: 1,
            device_size: size,
            spacemap_offset: geo.spacemap_offset,
            spacemap_chunks: geo.spacemap_chunks,
            data_offset: geo.data_offset,
            data_units: geo.data_units,
            log_offset: geo.log_offset,
            log_bytes: geo.log_bytes,
            log_device_guid: 0,
            // A pool made by a host records it from its first root on (host_state.rs).
            features: Features {
                compat: if opts.host_id != 0 { crate::format::features::COMPAT_HOST_STATE } else { 0 },
                incompat: if dev.set_status().is_some() { INCOMPAT_DEVICE_SET } else { 0 },
                ..Features::default()
            },
            created_ns: opts.clock.now_ns(),
            checksum_algo: create.checksum,
            pool_name: create.name.clone(),
            generation: 0,
            groups: Vec::new(),
        };
        // The log device's label before the pool's: a pool label never names a log device
        // that does not carry its label.
        let place = match &log {
            None => {
                let place = LogPlace::in_pool(dev.clone(), &geo);
                place.prefill()?;
                place
            }
            Some(spec) => {
                // The same device object; the daemon also compares the paths' inodes.
                if std::ptr::addr_eq(Arc::as_ptr(&spec.dev), Arc::as_ptr(&dev)) {
                    return Err(Error::invalid(format!(
                        "log device {} is the pool's own device; use a different device for the log",
                        dev.describe()
                    )));
                }
                let place = crate::pool::log_device::format_log_device(spec, &label)?;
                label.log_device_guid = spec.log_device_guid;
                label.features.incompat |= crate::format::features::INCOMPAT_LOG_DEVICE;
                place
            }
        };
        // Labels first, with empty rings (an old pool's roots must never be found), then
        // txg 1 writes the whole space map and the first root.
        let empty_ring = vec![0u8; (LABEL_SIZE - UNIT_SIZE) as usize];
        for idx in 0..2u32 {
            let l = LabelPhys { label_index: idx, ..label.clone() };
            let base = idx as u64 * LABEL_SIZE;
            dev.write_at(&l.encode(), base).map_err(|e| Error::io("write pool label", e))?;
            dev.write_at(&empty_ring, base + UNIT_SIZE).map_err(|e| Error::io("clear uberblock ring", e))?;
        }
        dev.flush().map_err(|e| Error::io("flush pool label", e))?;
        let io =
            Arc::new(BlockIo::new(dev.clone(), geo.clone(), create.checksum, opts.cache_blocks, opts.data_cache_bytes));
        let alloc = with_rows(Allocator::new_empty(geo), dev.as_ref())?;
        let inner = PoolInner {
            dev,
            io,
            alloc,
            ddt: DedupTable::new(opts.dedup_table_max),
            label,
            txg: TxgState {
                synced: 0,
                root: UberblockPhys {
                    txg: 0,
                    pool_guid: create.pool_guid,
                    timestamp_ns: 0,
                    catalog_root: BlockPtr::HOLE,
                    allocated_units: 0,
                    next_volume_id: 1,
                    features_incompat: 0,
                    host_id: 0,
                    pool_state: HostState::Unknown,
                },
                next: 1,
                frozen_lsn: None,
                quiescing: false,
                skip_early_passes: 0,
                log_blocks_at_commit: 0,
            },
            ilog: IntentLog::new(place, 0),
            retired_log: Default::default(),
            tap: None,
            gate: None,
            catalog: Catalog { dirty: true, ..Catalog::new(BTree::new(), 1) },
            destroying: BTreeMap::new(),
            health: Health::default(),
            clock: opts.clock,
            dirty_limit_bytes: opts.dirty_limit_bytes,
            destroy_frees_per_txg: opts.destroy_frees_per_txg,
            prewrites: Vec::new(),
            commit_stats: CommitStats::default(),
            host_id: opts.host_id,
            read_pins: Arc::default(),
        };
        let pool = Pool::from_inner(inner);
        pool.commit()?;
        Ok(pool)
    }

    /// Open the pool on `dev` at its newest valid root.
    pub fn open(dev: Arc<dyn BlockDevice>, opts: PoolOptions) -> Result<Pool> {
        Pool::open_with_log(dev, None, opts)
    }

    /// Open the pool on `dev` with its separate log device `log_dev` (required when the pool
    /// has one, refused when it has none; see `log_device.rs` and
    /// `PoolOptions::discard_missing_log`).
    pub fn open_with_log(
        dev: Arc<dyn BlockDevice>,
        log_dev: Option<Arc<dyn BlockDevice>>,
        opts: PoolOptions,
    ) -> Result<Pool> {
        let (label, mut notes) = read_label(dev.as_ref())?;
        let mut read_only = opts.read_only;
        match label.features.access() {
            Access::Refuse { unknown_incompat } => {
                return Err(Error::Unsupported(format!(
                    "pool {} uses format features {unknown_incompat:#x} this build does not know; upgrade Strata",
                    label.pool_name
                )))
            }
            Access::ReadOnly { unknown_ro_compat } => {
                notes.push(format!("unknown read-only-compatible features {unknown_ro_compat:#x}: opened read-only"));
                read_only = true;
            }
            Access::ReadWrite => {}
        }
        match (label.features.incompat & INCOMPAT_DEVICE_SET != 0, dev.set_status().is_some()) {
            (true, false) => {
                return Err(Error::invalid(format!(
                    "pool {} lives on a device set (mirror); open it with all of its devices, not {} alone",
                    label.pool_name,
                    dev.describe()
                )))
            }
            (false, true) => {
                return Err(Error::Corruption(crate::error::Corruption::new(
                    "pool label",
                    Some(0),
                    format!("{} holds a pool label without the device-set feature", dev.describe()),
                )))
            }
            _ => {}
        }
        if dev.size_bytes() < label.device_size {
            return Err(Error::Corruption(crate::error::Corruption::new(
                "pool label",
                Some(0),
                format!(
                    "device {} has {} bytes but the pool was made for {}",
                    dev.describe(),
                    dev.size_bytes(),
                    label.device_size
                ),
            )));
        }
        let geo = Geometry::from_label(&label).ok_or_else(|| {
            Error::Corruption(crate::error::Corruption::new(
                "pool label",
                Some(0),
                "geometry does not match the device size, or a device group overlaps another",
            ))
        })?;
        let groups_ok = match dev.as_groups() {
            Some(g) => {
                let bases: Vec<u64> = g.groups().iter().skip(1).map(|(b, _)| *b).collect();
                bases == label.groups.iter().map(|g| g.base).collect::<Vec<_>>()
            }
            None => label.groups.is_empty(),
        };
        if !groups_ok {
            return Err(Error::invalid(format!(
                "pool {} has {} device groups: open it with all of them (pool::groups::assemble)",
                label.pool_name,
                label.groups.len() + 1
            )));
        }
        if dev.size_bytes() < geo.end() {
            return Err(Error::invalid(format!(
                "device {} has {} bytes but the pool's {} device groups end at {}: open it with every group",
                dev.describe(),
                dev.size_bytes(),
                label.groups.len() + 1,
                geo.end()
            )));
        }
        let log_at_open = crate::pool::log_device::resolve(
            &label,
            LogPlace::in_pool(dev.clone(), &geo),
            log_dev,
            opts.discard_missing_log,
            &mut notes,
        )?;
        let (roots, problems) = txg::scan_ring(dev.as_ref(), label.pool_guid)?;
        notes.extend(problems);
        let newest_txg = roots.first().map(|u| u.txg);
        let mut last_err = None;
        for (i, ub) in roots.iter().enumerate() {
            let io = Arc::new(BlockIo::new(
                dev.clone(),
                geo.clone(),
                label.checksum_algo,
                opts.cache_blocks,
                opts.data_cache_bytes,
            ));
            match Pool::load_root(&io, dev.as_ref(), geo.clone(), &label, ub) {
                Ok(LoadedRoot { mut alloc, mut ddt, catalog, volumes, snapshots, destroying }) => {
                    ddt.set_max_entries(opts.dedup_table_max);
                    if i > 0 {
                        notes.push(format!(
                            "fell back from txg {} to txg {}: {}",
                            newest_txg.expect("roots non-empty"),
                            ub.txg,
                            last_err.as_ref().map_or(String::new(), |e: &Error| e.to_string())
                        ));
                        alloc.mark_all_dirty();
                    }
                    let by_name = volumes.iter().map(|(id, v)| (v.record.name.clone(), *id)).collect();
                    let (place, discarded) = match &log_at_open {
                        LogAtOpen::Use(place) => (place.clone(), None),
                        LogAtOpen::Discard(why) => (LogPlace::in_pool(dev.clone(), &geo), Some(why.clone())),
                    };
                    let inner = PoolInner {
                        dev,
                        io,
                        alloc,
                        ddt,
                        label,
                        txg: TxgState {
                            synced: ub.txg,
                            root: *ub,
                            next: newest_txg.expect("roots non-empty").max(ub.txg) + 1,
                            frozen_lsn: None,
                            quiescing: false,
                            skip_early_passes: 0,
                            log_blocks_at_commit: 0,
                        },
                        ilog: IntentLog::new(place, ub.txg),
                        retired_log: Default::default(),
                        tap: None,
                        gate: None,
                        catalog: Catalog { volumes, by_name, snapshots, ..Catalog::new(catalog, ub.next_volume_id) },
                        destroying,
                        health: Health {
                            latched: None,
                            read_only,
                            open_notes: notes,
                            exporting: false,
                            log_failover: None,
                        },
                        clock: opts.clock,
                        dirty_limit_bytes: opts.dirty_limit_bytes,
                        destroy_frees_per_txg: opts.destroy_frees_per_txg,
                        prewrites: Vec::new(),
                        commit_stats: CommitStats::default(),
                        host_id: opts.host_id,
                        read_pins: Arc::default(),
                    };
                    inner.dev.note_txg(ub.txg + 1);
                    let pool = Pool::from_inner(inner);
                    pool.start_packing()?;
                    match discarded {
                        None => pool.replay_intent_log()?,
                        Some(why) => pool.discard_log_device(&why)?,
                    }
                    pool.record_host_at_open()?;
                    return Ok(pool);
                }
                Err(e) => last_err = Some(e),
            }
        }
        match last_err {
            Some(e) => Err(e),
            None => Err(txg::no_valid_root(&label.pool_name, dev.as_ref(), &notes)),
        }
    }

    /// Pack small compressed records if the pool carries the packs feature; a writable
    /// pool that compresses but predates packs gets the feature now (its labels rewritten).
    fn start_packing(&self) -> Result<()> {
        use crate::format::features::{INCOMPAT_COMPRESSION, INCOMPAT_PACKS};
        let mut p = self.lock();
        let f = p.label.features.incompat;
        if f & INCOMPAT_PACKS != 0 {
            p.io.set_packing(true);
        } else if f & INCOMPAT_COMPRESSION != 0 && !p.health.read_only {
            p.enable_compression_feature()?;
        }
        Ok(())
    }

    fn load_root(
        io: &BlockIo,
        dev: &dyn BlockDevice,
        geo: Geometry,
        label: &LabelPhys,
        ub: &UberblockPhys,
    ) -> Result<LoadedRoot> {
        let alloc = with_rows(Allocator::load(dev, geo, label.pool_guid, ub.txg)?, dev)?;
        if alloc.allocated_units() != ub.allocated_units {
            return Err(Error::Corruption(crate::error::Corruption::new(
                "space map",
                None,
                format!(
                    "{} units allocated, root of txg {} says {}",
                    alloc.allocated_units(),
                    ub.txg,
                    ub.allocated_units
                ),
            )));
        }
        let catalog = BTree::open(ub.catalog_root);
        let mut volumes = BTreeMap::new();
        let mut start = vec![KEY_VOLUME];
        loop {
            let batch = catalog.range(io, &start, Some(&[KEY_VOLUME + 1]), 256)?;
            let Some((last, _)) = batch.last() else { break };
            start = last.clone();
            start.push(0);
            for (k, v) in batch {
                let rec = VolumeRecordPhys::decode(&v)?;
                let name = String::from_utf8(k[1..].to_vec()).map_err(|_| {
                    crate::error::Corruption::new("catalog", None, format!("volume name {:02x?} is not UTF-8", &k[1..]))
                })?;
                if !rec.tree_root.is_hole() {
                    io.read_node(&rec.tree_root)?;
                }
                let id = rec.id;
                if volumes.insert(VolumeId(id), VolumeState::new(name, rec)).is_some() {
                    return Err(
                        crate::error::Corruption::new("catalog", None, format!("two volumes with id {id}")).into()
                    );
                }
            }
        }
        let mut snapshots = BTreeMap::new();
        let mut start = vec![KEY_SNAPSHOT];
        loop {
            let batch = catalog.range(io, &start, Some(&[KEY_SNAPSHOT + 1]), 256)?;
            let Some((last, _)) = batch.last() else { break };
            start = last.clone();
            start.push(0);
            for (k, v) in batch {
                let rec = SnapshotRecordPhys::decode(&v)?;
                let name = k
                    .get(9..)
                    .filter(|_| k[1..9] == rec.volume.to_be_bytes())
                    .and_then(|n| String::from_utf8(n.to_vec()).ok())
                    .ok_or_else(|| {
                        crate::error::Corruption::new("catalog", None, format!("snapshot key {k:02x?} is malformed"))
                    })?;
                if !volumes.contains_key(&VolumeId(rec.volume)) {
                    return Err(crate::error::Corruption::new(
                        "catalog",
                        None,
                        format!("snapshot {name} belongs to volume id {} which does not exist", rec.volume),
                    )
                    .into());
                }
                let id = rec.id;
                if volumes.contains_key(&VolumeId(id)) || snapshots.insert(id, SnapshotState { name, rec }).is_some() {
                    return Err(crate::error::Corruption::new(
                        "catalog",
                        None,
                        format!("two volumes or snapshots with id {id}"),
                    )
                    .into());
                }
            }
        }
        // New ids (volumes, snapshots, deadlists, groups) come from the root's counter: it
        // must be past every id in use, or a new one would take an existing one's place.
        let max_id = volumes
            .values()
            .flat_map(|v| [v.record.phys.id, v.record.phys.deadlist])
            .chain(snapshots.values().flat_map(|s| [s.rec.id, s.rec.deadlist, s.rec.group]))
            .max()
            .unwrap_or(0);
        if ub.next_volume_id <= max_id {
            return Err(crate::error::Corruption::new(
                "uberblock",
                None,
                format!("next volume id {} is not past id {max_id}, which is in use", ub.next_volume_id),
            )
            .into());
        }
        for v in volumes.values_mut() {
            if v.record.phys.parent != 0 {
                v.record.parent_txg =
                    snapshots.get(&v.record.phys.parent).map(|s: &SnapshotState| s.rec.txg).ok_or_else(|| {
                        crate::error::Corruption::new(
                            "catalog",
                            None,
                            format!(
                                "volume {}: parent snapshot {} does not exist",
                                v.record.name, v.record.phys.parent
                            ),
                        )
                    })?;
            }
        }
        crate::pool::space::load(io, &catalog, &mut volumes)?;
        let mut alloc = alloc;
        let mut ddt = DedupTable::new(DEDUP_TABLE_MAX_DEFAULT);
        crate::pool::space::load_packs(io, &catalog, &mut alloc, &mut ddt)?;
        let destroying = destroy::load(io, &catalog)?;
        Ok(LoadedRoot { alloc, ddt, catalog, volumes, snapshots, destroying })
    }
}

/// The allocator of a pool on `dev`, told where each parity2 set's rows are (alloc/rows.rs):
/// the device itself, or each of its device groups.
fn with_rows(mut alloc: Allocator, dev: &dyn BlockDevice) -> Result<Allocator> {
    let sets = match dev.as_groups() {
        Some(g) => g.groups(),
        None => Vec::new(),
    };
    if sets.is_empty() {
        if let Some(rows) = dev.rows() {
            set_rows(&mut alloc, 0, rows, dev)?;
        }
    }
    for (base, d) in sets {
        if let Some(rows) = d.rows() {
            set_rows(&mut alloc, base, rows, d.as_ref())?;
        }
    }
    Ok(alloc)
}

/// Rows of the set `dev` whose logical space starts at `base` of the pool's: (logical offset
/// of its first row in the set, data units per row).
pub(crate) fn set_rows(
    alloc: &mut Allocator,
    base: u64,
    (start, width): (u64, u64),
    dev: &dyn BlockDevice,
) -> Result<()> {
    let geo = alloc.geometry();
    let origin = geo.unit_of(base + start).filter(|_| width > 0).ok_or_else(|| {
        Error::invalid(format!(
            "device {}: its rows start at {start}, outside the pool's data area (a set made for another size?)",
            dev.describe()
        ))
    })?;
    alloc.set_rows(crate::alloc::RowLayout { origin, width });
    Ok(())
}
