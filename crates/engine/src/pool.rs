//! The pool: one device, one allocator, one commit point, and the catalog of volumes.
//!
//! `Pool` is the engine's public face. All state sits behind one mutex: simple and
//! obviously race-free, at the price of serialising operations on different volumes. The
//! front ends measure where that lock hurts before it is split (per volume state is
//! already separate, see `volume.rs`).
//!
//! Opening scans both uberblock rings and takes the newest root whose space map and catalog
//! verify; if the newest does not, it falls back to older ones and says so in
//! `PoolStatus::open_notes`. A pool opened on a fallback root rewrites its whole space map in
//! its first txg, so versions stamped by the abandoned roots can never be picked later.

use crate::alloc::{Allocator, Geometry};
use crate::clock::Clock;
use crate::compress::CompressionPolicy;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::features::{Access, Features};
use crate::format::label::{LabelPhys, LABEL_PHYS_SIZE, POOL_NAME_MAX};
use crate::format::records::{SnapshotRecordPhys, VolumeRecordPhys};
use crate::format::uberblock::{HostState, UberblockPhys};
use crate::format::{BlockPtr, ChecksumAlgo, LABEL_SIZE, MIN_DEVICE_SIZE, SECTOR_SIZE, UNIT_SIZE};
use crate::intent_log::{IntentLog, LogPlace};
use crate::log_device::{LogAtOpen, LogDeviceSpec};
use crate::pipeline::BlockIo;
pub use crate::pool_status::{CommitStats, PoolStatus, VolumeInfo};
use crate::snapshot::{SnapshotState, KEY_SNAPSHOT};
use crate::tree::btree::BTree;
use crate::txg;
use crate::txn::Txn;
use crate::volume::{validate_record_size, ObjectId, VolumeState, USER_KEY_MAX};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

const KEY_VOLUME: u8 = 0x01;
pub const VOLUME_NAME_MAX: usize = 255;
pub const DEFAULT_RECORD_SIZE: u32 = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeId(pub u64);

pub struct PoolOptions {
    pub clock: Arc<dyn Clock>,
    /// Decoded metadata blocks cached (≤ 16 KiB each). 8192 ≈ 128 MiB at most: the tree
    /// paths of a few hundred GiB of 16 KiB records stay in memory.
    pub cache_blocks: usize,
    /// Bytes of data records cached (the ARC role): reads that hit are served from memory,
    /// partial rewrites skip their read. 64 MiB for a library default; the daemon sizes it
    /// from the machine's memory (`--cache-size`).
    pub data_cache_bytes: u64,
    /// Dirty data that forces a txg commit from the writer. 256 MiB bounds memory and the
    /// work one commit does, and is several seconds of writes at SSD speed.
    pub dirty_limit_bytes: u64,
    /// Open without ever writing (the checker, `pool status` of a damaged pool).
    pub read_only: bool,
    /// Open a pool whose separate log device is missing, damaged or not the right one, at
    /// its last commit, losing the sync writes acknowledged since (`zpool import -m`).
    /// Read-write, the pool then forgets the log device and logs in its own region. Off by
    /// default: losing acknowledged writes must be the operator's explicit choice.
    pub discard_missing_log: bool,
    /// Entries the dedup table may hold (about 100 bytes of memory each); when full, new
    /// unique records are stored without one (dedup.rs).
    pub dedup_table_max: usize,
    /// This host's id, recorded in every root a read-write open commits (host_state.rs):
    /// the pool then says "active on this host" until [`Pool::export`] says "exported".
    /// 0 records no host, as builds before host states did; it is the default so that
    /// tools and tests are unchanged. A daemon sets its own (`DATA_DIR/host-id`).
    pub host_id: u64,
}

impl PoolOptions {
    pub fn new(clock: Arc<dyn Clock>) -> PoolOptions {
        PoolOptions {
            clock,
            cache_blocks: 8192,
            data_cache_bytes: 64 << 20,
            dirty_limit_bytes: 256 << 20,
            read_only: false,
            discard_missing_log: false,
            dedup_table_max: crate::dedup::DEDUP_TABLE_MAX_DEFAULT,
            host_id: 0,
        }
    }
}

pub struct CreateOptions {
    pub name: String,
    /// Identity of the pool; the caller supplies it (the engine uses no OS randomness).
    pub pool_guid: u64,
    pub device_guid: u64,
    pub checksum: ChecksumAlgo,
}

/// How a volume treats synchronous writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Honour fsync, fdatasync, O_SYNC and O_DSYNC (the default).
    #[default]
    Standard,
    /// Treat every write as synchronous (data is durable when write returns).
    Always,
    /// Ignore sync requests: fast and UNSAFE — a crash loses up to the last few seconds
    /// of acknowledged writes. For scratch data only.
    Disabled,
}

impl SyncPolicy {
    pub fn from_u8(v: u8) -> SyncPolicy {
        match v {
            1 => SyncPolicy::Always,
            2 => SyncPolicy::Disabled,
            _ => SyncPolicy::Standard,
        }
    }
    pub fn as_u8(self) -> u8 {
        match self {
            SyncPolicy::Standard => 0,
            SyncPolicy::Always => 1,
            SyncPolicy::Disabled => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SyncPolicy::Standard => "standard",
            SyncPolicy::Always => "always",
            SyncPolicy::Disabled => "disabled",
        }
    }
    pub fn parse(s: &str) -> Result<SyncPolicy> {
        match s {
            "standard" => Ok(SyncPolicy::Standard),
            "always" => Ok(SyncPolicy::Always),
            "disabled" => Ok(SyncPolicy::Disabled),
            other => Err(Error::invalid(format!("sync policy {other:?}: use standard, always or disabled"))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeOptions {
    pub record_size: u32,
    /// Size limit in bytes; 0 = none (thin: a limit, never a reservation).
    pub quota_bytes: u64,
    pub sync: SyncPolicy,
    /// Compression of data records (space.rs, compress.rs).
    pub compression: CompressionPolicy,
    /// Space the pool keeps for the volume (thick); 0 = thin.
    pub reservation_bytes: u64,
    /// Deduplicate new data records (dedup.rs); needs a pool with BLAKE3 checksums.
    pub dedup: bool,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            record_size: DEFAULT_RECORD_SIZE,
            quota_bytes: 0,
            sync: SyncPolicy::Standard,
            compression: CompressionPolicy::Off,
            reservation_bytes: 0,
            dedup: false,
        }
    }
}

pub struct PoolInner {
    pub dev: Arc<dyn BlockDevice>,
    pub io: Arc<BlockIo>,
    pub alloc: Allocator,
    pub label: LabelPhys,
    pub catalog: BTree,
    pub volumes: BTreeMap<VolumeId, VolumeState>,
    pub by_name: BTreeMap<String, VolumeId>,
    pub txg_synced: u64,
    pub next_txg: u64,
    pub next_volume_id: u64,
    pub catalog_dirty: bool,
    pub catalog_released: Vec<BlockPtr>,
    pub latched: Option<String>,
    pub read_only: bool,
    pub clock: Arc<dyn Clock>,
    pub dirty_limit_bytes: u64,
    pub open_notes: Vec<String>,
    /// The newest committed root.
    pub root: UberblockPhys,
    pub ilog: IntentLog,
    /// What the last commit retired from the intent log, dropped by `Pool::commit` after it
    /// releases the lock.
    pub(crate) retired_log: crate::intent_log::RetiredGroups,
    /// Every snapshot of every volume, by id.
    pub snapshots: BTreeMap<u64, SnapshotState>,
    /// Prewrites of the open txg (prewrite.rs); the commit completes and drains them.
    pub(crate) prewrites: Vec<Arc<crate::prewrite::PrewriteBatch>>,
    pub commit_stats: CommitStats,
    /// The last intent-log group of the txg a commit froze (txg.rs `freeze`), until it syncs.
    pub(crate) frozen_lsn: Option<u64>,
    /// A commit is writing its frozen data without the lock (quiesce.rs): only data
    /// writes, reads and attribute changes run meanwhile; everything else waits.
    pub(crate) quiescing: bool,
    /// Commits that go on to skip their early prewrite passes (quiesce.rs `begin_commit`).
    pub(crate) skip_early_passes: u8,
    /// Intent-log blocks written as of the last commit's start (quiesce.rs).
    pub(crate) log_blocks_at_commit: u64,
    /// `PoolOptions::host_id`: what every root this opener commits records (host_state.rs).
    pub(crate) host_id: u64,
    /// Set by `Pool::export`: from then on, roots say `Exported` instead of `Active`.
    pub(crate) exporting: bool,
}

pub struct Pool {
    pub(crate) inner: Mutex<PoolInner>,
    /// Signalled when an intent log write finishes.
    pub(crate) log_done: Condvar,
    /// One prewrite-and-commit (`Pool::commit`) at a time; taken before `inner`.
    pub(crate) commit_gate: Mutex<()>,
    /// Signalled when a commit in flight has synced (quiesce.rs): `lock` waits for it.
    pub(crate) settled: Condvar,
    /// Threads waiting in `lock` for a commit in flight to sync (a sync's log write, say):
    /// while there are any, the commit keeps the CPU (prewrite.rs `YIELD_EVERY_BYTES`).
    pub(crate) waiting_on_commit: std::sync::atomic::AtomicUsize,
}

pub(crate) fn volume_key(name: &str) -> Vec<u8> {
    let mut k = vec![KEY_VOLUME];
    k.extend_from_slice(name.as_bytes());
    k
}

/// Volume names: 1–255 bytes of letters, digits and `-_.:`, not starting with `.` or `-`.
pub fn validate_volume_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= VOLUME_NAME_MAX
        && !name.starts_with('.')
        && !name.starts_with('-')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "volume name {name:?}: use 1-{VOLUME_NAME_MAX} letters, digits, '-', '_', '.', ':' (not starting with '.' or '-')"
        )))
    }
}

pub(crate) fn read_label(dev: &dyn BlockDevice) -> Result<(LabelPhys, Vec<String>)> {
    let mut notes = Vec::new();
    let mut buf = vec![0u8; LABEL_PHYS_SIZE];
    let mut first_err = None;
    for idx in 0..2u64 {
        let addr = idx * LABEL_SIZE;
        if let Err(e) = dev.read_at(&mut buf, addr) {
            return Err(Error::io("read pool label", e));
        }
        match LabelPhys::decode(&buf, addr) {
            Ok(l) => {
                if idx == 1 {
                    notes.push(format!(
                        "label 0 unusable ({}); used label 1",
                        first_err.as_ref().expect("label 0 failed")
                    ));
                }
                return Ok((l, notes));
            }
            Err(c) => {
                if first_err.is_none() {
                    first_err = Some(c);
                }
            }
        }
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
                ..Features::default()
            },
            created_ns: opts.clock.now_ns(),
            checksum_algo: create.checksum,
            pool_name: create.name.clone(),
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
                let place = crate::log_device::format_log_device(spec, &label)?;
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
        let io = Arc::new(BlockIo::new(dev.clone(), geo, create.checksum, opts.cache_blocks, opts.data_cache_bytes));
        let inner = PoolInner {
            dev,
            io,
            alloc: {
                let mut a = Allocator::new_empty(geo);
                a.ddt.set_max_entries(opts.dedup_table_max);
                a
            },
            label,
            catalog: BTree::new(),
            volumes: BTreeMap::new(),
            by_name: BTreeMap::new(),
            txg_synced: 0,
            next_txg: 1,
            next_volume_id: 1,
            catalog_dirty: true,
            catalog_released: Vec::new(),
            prewrites: Vec::new(),
            commit_stats: CommitStats::default(),
            frozen_lsn: None,
            quiescing: false,
            skip_early_passes: 0,
            log_blocks_at_commit: 0,
            host_id: opts.host_id,
            exporting: false,
            latched: None,
            read_only: false,
            clock: opts.clock,
            dirty_limit_bytes: opts.dirty_limit_bytes,
            open_notes: Vec::new(),
            ilog: IntentLog::new(place, 0),
            retired_log: Default::default(),
            snapshots: BTreeMap::new(),
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
        let geo = Geometry {
            spacemap_offset: label.spacemap_offset,
            spacemap_chunks: label.spacemap_chunks,
            data_offset: label.data_offset,
            data_units: label.data_units,
            log_offset: label.log_offset,
            log_bytes: label.log_bytes,
        };
        let expected = Geometry::for_device(label.device_size)
            .map(|g| (g.spacemap_chunks, g.data_offset, g.data_units, g.log_offset, g.log_bytes));
        if expected != Some((geo.spacemap_chunks, geo.data_offset, geo.data_units, geo.log_offset, geo.log_bytes)) {
            return Err(Error::Corruption(crate::error::Corruption::new(
                "pool label",
                Some(0),
                "geometry does not match the device size",
            )));
        }
        let log_at_open = crate::log_device::resolve(
            &label,
            LogPlace::in_pool(dev.clone(), &geo),
            log_dev,
            opts.discard_missing_log,
        )?;
        let (roots, problems) = txg::scan_ring(dev.as_ref(), label.pool_guid)?;
        notes.extend(problems);
        let newest_txg = roots.first().map(|u| u.txg);
        let mut last_err = None;
        for (i, ub) in roots.iter().enumerate() {
            let io =
                Arc::new(BlockIo::new(dev.clone(), geo, label.checksum_algo, opts.cache_blocks, opts.data_cache_bytes));
            match Pool::load_root(&io, dev.as_ref(), geo, &label, ub) {
                Ok((mut alloc, catalog, volumes, snapshots)) => {
                    alloc.ddt.set_max_entries(opts.dedup_table_max);
                    if i > 0 {
                        notes.push(format!(
                            "fell back from txg {} to txg {}: {}",
                            newest_txg.expect("roots non-empty"),
                            ub.txg,
                            last_err.as_ref().map_or(String::new(), |e: &Error| e.to_string())
                        ));
                        alloc.mark_all_dirty();
                    }
                    let by_name = volumes.iter().map(|(id, v)| (v.name.clone(), *id)).collect();
                    let (place, discarded) = match &log_at_open {
                        LogAtOpen::Use(place) => (place.clone(), None),
                        LogAtOpen::Discard(why) => (LogPlace::in_pool(dev.clone(), &geo), Some(why.clone())),
                    };
                    let inner = PoolInner {
                        dev,
                        io,
                        alloc,
                        label,
                        catalog,
                        volumes,
                        by_name,
                        txg_synced: ub.txg,
                        next_txg: newest_txg.expect("roots non-empty").max(ub.txg) + 1,
                        next_volume_id: ub.next_volume_id,
                        catalog_dirty: false,
                        catalog_released: Vec::new(),
                        prewrites: Vec::new(),
                        commit_stats: CommitStats::default(),
                        frozen_lsn: None,
                        quiescing: false,
                        skip_early_passes: 0,
                        log_blocks_at_commit: 0,
                        host_id: opts.host_id,
                        exporting: false,
                        latched: None,
                        read_only,
                        clock: opts.clock,
                        dirty_limit_bytes: opts.dirty_limit_bytes,
                        open_notes: notes,
                        root: *ub,
                        ilog: IntentLog::new(place, ub.txg),
                        retired_log: Default::default(),
                        snapshots,
                    };
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
        } else if f & INCOMPAT_COMPRESSION != 0 && !p.read_only {
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
    ) -> Result<(Allocator, BTree, BTreeMap<VolumeId, VolumeState>, BTreeMap<u64, SnapshotState>)> {
        let alloc = Allocator::load(dev, geo, label.pool_guid, ub.txg)?;
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
            .flat_map(|v| [v.rec.id, v.rec.deadlist])
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
            if v.rec.parent != 0 {
                v.parent_txg = snapshots.get(&v.rec.parent).map(|s: &SnapshotState| s.rec.txg).ok_or_else(|| {
                    crate::error::Corruption::new(
                        "catalog",
                        None,
                        format!("volume {}: parent snapshot {} does not exist", v.name, v.rec.parent),
                    )
                })?;
            }
        }
        crate::space::load(io, &catalog, &mut volumes)?;
        let mut alloc = alloc;
        crate::space::load_packs(io, &catalog, &mut alloc)?;
        Ok((alloc, catalog, volumes, snapshots))
    }

    /// Commit what is dirty and close the pool, reporting a failure to commit.
    pub fn close(self) -> Result<()> {
        let r = {
            let mut p = self.lock();
            if p.read_only {
                Ok(0)
            } else {
                p.commit()
            }
        };
        r.map(|_| ())
    }

    /// The root the pool stands on: the newest committed uberblock.
    pub fn committed_root(&self) -> UberblockPhys {
        self.lock_raw().root
    }

    /// Commit timings since open (also in `status`, without building all of it).
    pub fn status_commits(&self) -> CommitStats {
        self.lock_raw().commit_stats
    }

    /// Dirty data of the open txg, in bytes.
    pub fn dirty_bytes(&self) -> u64 {
        self.lock_raw().dirty_bytes()
    }

    /// The dirty data at which writers commit themselves (`commit_if_over_dirty_limit`).
    pub fn dirty_limit_bytes(&self) -> u64 {
        self.lock_raw().dirty_limit_bytes
    }

    pub fn status(&self) -> PoolStatus {
        let p = self.lock_raw();
        let size = p.label.data_units * UNIT_SIZE;
        let allocated = p.alloc.allocated_units() * UNIT_SIZE;
        let held = p.alloc.held_units() * UNIT_SIZE;
        PoolStatus {
            name: p.label.pool_name.clone(),
            pool_guid: p.label.pool_guid,
            device: p.dev.describe(),
            log_device: Some(p.ilog.place()).filter(|l| l.is_separate()).map(|l| l.dev.describe()),
            log_blocks_written: p.ilog.blocks_written,
            log_bytes_written: p.ilog.bytes_written,
            log_bytes_by_reference: p.ilog.ref_bytes,
            log_full_commits: p.ilog.full_commits,
            log_memory_bytes: p.ilog.memory_bytes(),
            data_cache_bytes: p.io.data_cache_usage().0,
            data_cache_capacity: p.io.data_cache_usage().1,
            data_cache_hits: p.io.stats.data_cache_hits.load(Ordering::Relaxed),
            commits: p.commit_stats,
            txg: p.txg_synced,
            size_bytes: size,
            allocated_bytes: allocated,
            held_bytes: held,
            free_bytes: size - allocated - held,
            volumes: p.volumes.values().filter(|v| !v.read_only_view).count(),
            read_only: p.read_only,
            latched: p.latched.clone(),
            corruptions_detected: p.io.stats.corruptions_detected.load(Ordering::Relaxed),
            blocks_written: p.io.stats.blocks_written.load(Ordering::Relaxed),
            blocks_read: p.io.stats.blocks_read.load(Ordering::Relaxed),
            open_notes: p.open_notes.clone(),
            space: p.pool_space(),
            host_id: p.root.host_id,
            pool_state: p.root.pool_state,
        }
    }

    pub fn create_volume(&self, name: &str, opts: &VolumeOptions) -> Result<VolumeId> {
        validate_volume_name(name)?;
        validate_record_size(opts.record_size)?;
        let mut p = self.lock();
        p.writable()?;
        if p.by_name.contains_key(name) {
            return Err(Error::AlreadyExists(format!("volume {name} in pool {}", p.label.pool_name)));
        }
        p.prepare_volume(name, opts.compression, opts.reservation_bytes, opts.quota_bytes)?;
        if opts.dedup {
            p.enable_dedup_feature()?;
        }
        let id = VolumeId(p.new_id()?);
        let rec = VolumeRecordPhys {
            id: id.0,
            record_size: opts.record_size,
            sync_policy: opts.sync.as_u8(),
            tree_root: BlockPtr::HOLE,
            next_object_id: 1,
            used_sectors: 0,
            created_txg: p.next_txg,
            created_ns: p.clock.now_ns(),
            quota_bytes: opts.quota_bytes,
            parent: 0,
            deadlist: 0,
            written_sectors: 0,
            origin: 0,
            total_sectors: 0,
            compression: opts.compression,
            saved_bytes: Some(0),
            dedup: opts.dedup,
        };
        let mut v = VolumeState::new(name.to_string(), rec);
        v.dirty = true;
        p.volumes.insert(id, v);
        p.by_name.insert(name.to_string(), id);
        p.catalog_dirty = true;
        if opts.reservation_bytes > 0 {
            p.store_reservation(id, opts.reservation_bytes)?;
        }
        Ok(id)
    }

    /// Delete a volume with its snapshots and everything in them (refused while clones
    /// depend on its snapshots).
    pub fn delete_volume(&self, name: &str) -> Result<()> {
        let mut p = self.lock();
        p.writable()?;
        let id = p.volume_id(name)?;
        match p.delete_volume(id, name) {
            Ok(()) => Ok(()),
            Err(e) => Err(p.latch_part_way("deleting a volume", e)),
        }
    }

    pub fn volume_id(&self, name: &str) -> Result<VolumeId> {
        self.lock_raw().volume_id(name)
    }

    pub fn volumes(&self) -> Vec<VolumeInfo> {
        let p = self.lock_raw();
        p.volumes.iter().filter(|(_, v)| !v.read_only_view).map(|(id, v)| info(&p, *id, v)).collect()
    }

    pub fn volume_info(&self, vol: VolumeId) -> Result<VolumeInfo> {
        let p = self.lock_raw();
        let v = p.volumes.get(&vol).ok_or_else(|| Error::NotFound(format!("volume id {}", vol.0)))?;
        Ok(info(&p, vol, v))
    }

    pub fn set_quota(&self, vol: VolumeId, quota_bytes: u64) -> Result<()> {
        self.txn().set_quota(vol, quota_bytes)
    }

    pub fn set_sync_policy(&self, vol: VolumeId, sync: SyncPolicy) -> Result<()> {
        self.txn().set_sync_policy(vol, sync)
    }

    /// Begin a group of operations that no commit can split: the pool's lock is held until
    /// the returned [`Txn`] is dropped. A file system uses it so that a rename or an unlink
    /// lands in one txg whole. Nothing inside commits on its own (no NoSpace retries, no
    /// dirty-limit commits); see [`Pool::commit_for_space`].
    pub fn txn(&self) -> Txn<'_> {
        Txn::new(self.lock())
    }

    /// After a NoSpace inside a [`Txn`]: commit (even with nothing dirty) so that held frees
    /// are released. Returns whether retrying can help.
    pub fn commit_for_space(&self) -> Result<bool> {
        let mut p = self.lock();
        if !p.could_free_space() {
            return Ok(false);
        }
        p.commit_always()?;
        Ok(true)
    }

    pub fn create_object(&self, vol: VolumeId, attr: &[u8]) -> Result<ObjectId> {
        self.txn().create_object(vol, attr)
    }

    pub fn delete_object(&self, vol: VolumeId, obj: ObjectId) -> Result<()> {
        self.txn().delete_object(vol, obj)
    }

    pub fn object_exists(&self, vol: VolumeId, obj: ObjectId) -> Result<bool> {
        self.txn_data().object_exists(vol, obj)
    }

    pub fn object_size(&self, vol: VolumeId, obj: ObjectId) -> Result<u64> {
        self.txn_data().object_size(vol, obj)
    }

    pub fn get_attr(&self, vol: VolumeId, obj: ObjectId) -> Result<Vec<u8>> {
        self.txn_data().get_attr(vol, obj)
    }

    pub fn set_attr(&self, vol: VolumeId, obj: ObjectId, attr: &[u8]) -> Result<()> {
        self.txn_data().set_attr(vol, obj, attr)
    }

    pub fn list_objects(&self, vol: VolumeId, after: Option<ObjectId>, limit: usize) -> Result<Vec<ObjectId>> {
        self.txn_data().list_objects(vol, after, limit)
    }

    /// Write `data` at `offset` (with NoSpace retries, see `with_space_retry`).
    pub fn write(&self, vol: VolumeId, obj: ObjectId, offset: u64, data: &[u8]) -> Result<()> {
        self.with_space_retry(|t| t.write(vol, obj, offset, data))
    }

    /// Read up to `len` bytes at `offset` (fewer past the object's end), copied once out of
    /// [`Pool::read_shared`]'s pieces. The device reads happen outside the pool's lock, so
    /// reads of many threads (and writes) proceed in parallel.
    pub fn read(&self, vol: VolumeId, obj: ObjectId, offset: u64, len: usize) -> Result<Vec<u8>> {
        Ok(crate::volume::SharedBytes::concat(&self.read_shared(vol, obj, offset, len)?))
    }

    /// Up to `len` bytes from `offset` (fewer past the object's end), as pieces of the
    /// buffers that hold them: no copy at all (a server sends them from there). The range
    /// is resolved under the pool's lock and its device reads done outside it
    /// (`ReadPlan`).
    pub fn read_shared(
        &self,
        vol: VolumeId,
        obj: ObjectId,
        offset: u64,
        len: usize,
    ) -> Result<Vec<crate::volume::SharedBytes>> {
        let (plan, io, txg) = {
            let mut t = self.txn_data();
            let plan = t.plan_read(vol, obj, offset, len)?;
            let p = t.inner();
            (plan, p.io.clone(), p.txg_synced)
        };
        match plan.finish_shared(&io) {
            Ok(pieces) => Ok(pieces),
            Err(e) => {
                if !(matches!(e, Error::Corruption(_)) && self.lock().txg_synced >= txg + 2) {
                    return Err(e);
                }
                // The block may have been freed and reused by commits since the plan was
                // made: read again, all under the lock. A real corruption fails again.
                let again = self.txn().read(vol, obj, offset, len)?;
                Ok(vec![crate::volume::SharedBytes::owned(again)])
            }
        }
    }

    pub fn truncate(&self, vol: VolumeId, obj: ObjectId, size: u64) -> Result<()> {
        self.with_space_retry(|t| t.truncate(vol, obj, size))
    }

    pub fn punch_hole(&self, vol: VolumeId, obj: ObjectId, offset: u64, len: u64) -> Result<()> {
        self.with_space_retry(|t| t.punch_hole(vol, obj, offset, len))
    }

    /// The root of an object's block tree and its indirect levels, as last committed —
    /// for diagnostics (`strata debug`) and fault-injection tests.
    pub fn object_block_root(&self, vol: VolumeId, obj: ObjectId) -> Result<(BlockPtr, u8)> {
        self.txn_data().object_block_root(vol, obj)
    }

    pub fn kv_get(&self, vol: VolumeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.txn_data().kv_get(vol, key)
    }

    pub fn kv_put(&self, vol: VolumeId, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.txn().kv_put(vol, key, value)
    }

    pub fn kv_delete(&self, vol: VolumeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.txn().kv_delete(vol, key)
    }

    /// Entries with `start <= key < end`, at most `limit`, in key order.
    pub fn kv_range(
        &self,
        vol: VolumeId,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.txn_data().kv_range(vol, start, end, limit)
    }

    /// The longest key a volume's key-value space accepts.
    pub const KV_KEY_MAX: usize = USER_KEY_MAX;
}

impl PoolInner {
    /// `Pool::delete_volume` under the lock: the catalog entries of the volume, its
    /// snapshots and their deadlists go, and its blocks are released for the commit.
    fn delete_volume(&mut self, id: VolumeId, name: &str) -> Result<()> {
        let (blocks, deadlists) = self.volume_blocks_for_delete(id)?;
        for dl in deadlists {
            for bp in self.deadlist_entries(dl, 0)? {
                let PoolInner { catalog, io, .. } = &mut *self;
                catalog.remove(io, &crate::snapshot::deadlist_key(dl, bp.birth_txg, bp.addr))?;
            }
        }
        let snaps: Vec<(u64, String)> = self
            .snapshots
            .iter()
            .filter(|(_, s)| s.rec.volume == id.0)
            .map(|(sid, s)| (*sid, s.name.clone()))
            .collect();
        for (sid, sname) in snaps {
            let PoolInner { catalog, io, .. } = &mut *self;
            catalog.remove(io, &crate::snapshot::snapshot_key(id.0, &sname))?;
            self.snapshots.remove(&sid);
            self.volumes.remove(&VolumeId(sid)); // an open read-only view
        }
        let key = volume_key(name);
        {
            let PoolInner { catalog, io, .. } = &mut *self;
            catalog.remove(io, &key)?;
            catalog.remove(io, &crate::space::volume_space_key(name))?;
        }
        self.catalog_released.extend(blocks);
        if let Some(mut v) = self.volumes.remove(&id) {
            let txg = self.next_txg;
            v.drop_prewritten(&mut self.alloc, txg)?; // blocks of the open txg nobody will reference
        }
        self.by_name.remove(name);
        self.catalog_dirty = true;
        Ok(())
    }
}

fn info(p: &PoolInner, id: VolumeId, v: &VolumeState) -> VolumeInfo {
    let snapshot_name = |sid: u64| {
        p.snapshots.get(&sid).map(|s| {
            let vol = p.volumes.get(&VolumeId(s.rec.volume)).map_or("?", |v| v.name.as_str());
            format!("{vol}@{}", s.name)
        })
    };
    VolumeInfo {
        snapshots: p.snapshots.values().filter(|s| s.rec.volume == id.0).count(),
        written_bytes: v.rec.written_sectors * SECTOR_SIZE,
        total_bytes: v.rec.total_sectors * SECTOR_SIZE,
        parent_snapshot: snapshot_name(v.rec.parent),
        origin: snapshot_name(v.rec.origin),
        read_only: v.read_only_view,
        name: v.name.clone(),
        id,
        record_size: v.rec.record_size,
        used_bytes: v.rec.used_sectors * SECTOR_SIZE,
        quota_bytes: v.rec.quota_bytes,
        sync: SyncPolicy::from_u8(v.rec.sync_policy),
        created_txg: v.rec.created_txg,
        created_ns: v.rec.created_ns,
        space: crate::space::volume_space(v),
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing commits what is dirty, as a clean shutdown should. Errors cannot be
        // returned from drop; they latch and are visible to anyone still holding status.
        let mut p = self.lock();
        if p.writable().is_ok() {
            let _ = p.commit();
        }
    }
}
