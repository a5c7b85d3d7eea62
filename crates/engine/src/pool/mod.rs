//! The pool: one device, one allocator, one commit point, and the catalog of volumes.
//!
//! `Pool` is the engine's public face. Its state (`PoolInner`) sits behind one mutex:
//! simple and obviously race-free, at the price of serialising operations on different
//! volumes; the quiescing commit (quiesce.rs), prewrite (prewrite.rs), log writes
//! (log_sync.rs) and pinned reads (read_pin.rs) do their device I/O without it.
//!
//! Locking (OpenZFS spa_misc.c style): every lock and flag of the engine, what it
//! protects, and the order. Take them only in this order; a leaf is never held while
//! taking anything else.
//!
//! | # | lock | protects | taken |
//! |---|------|----------|-------|
//! | 1 | `Pool::commit_gate` (Mutex<()>) | one `begin_commit`..`finish` at a time, and the destroy walk (destroy.rs) | before 2 |
//! | 2 | `Pool::inner` (Mutex<PoolInner>), "the pool lock" | everything in `PoolInner`: catalog, volumes, snapshots, destroy queue, txg numbers, allocator, dedup table, intent log state, health | `lock()` also waits out a quiescing commit; `lock_raw()` and `txn_data()` do not |
//! | 2a | `PoolInner::quiescing` (flag under 2) | while set, only data writes, attribute changes and reads may use the live state; everything else waits in `lock()` on `Pool::settled` | set by `begin_commit`, cleared by `finish` / `Settle` |
//! | 2b | `PoolInner::ilog.in_flight` (flag under 2) | one intent-log block write outside the lock at a time; others wait on `Pool::log_done` | log_sync.rs |
//! | 3 | `PrewriteBatch::state` (Mutex) | a batch's device writes: issued once, by the prewriter or by the commit that needs them | under 2 (the commit) or alone (the prewriter) |
//! | leaf | `BlockIo::{batch, cache, data_cache}` (Mutex each) | the pipeline's pending combined writes, metadata cache, data cache | with or without 2; never two at once |
//! | leaf | `ReadPins::pins` (Mutex) | reads in flight and the txg each pins | under 2 (pin, commit) or alone (unpin) |
//! | — | `Pool::waiting_on_commit` (AtomicUsize) | a hint: threads waiting for a commit to sync | relaxed, no lock |
//!
//! Condition variables: `Pool::settled` (with 2: a quiescing commit settled) and
//! `Pool::log_done` (with 2: an intent-log write finished). A panic while 2 is held latches
//! the pool read-only (`latch_if_poisoned`, docs/failure-policy.md).
//!
//! Opening scans both uberblock rings and takes the newest root whose space map and catalog
//! verify; if the newest does not, it falls back to older ones and says so in
//! `PoolStatus::open_notes`. A pool opened on a fallback root rewrites its whole space map in
//! its first txg, so versions stamped by the abandoned roots can never be picked later.

pub mod clone;
mod commit;
pub(crate) mod destroy;
pub mod host_state;
pub mod log_device;
mod log_ref;
mod log_sync;
pub mod prewrite;
mod quiesce;
mod read_pin;
mod replay;
pub mod restore;
pub mod snapshot;
pub mod space;
pub mod status;
pub mod txn;

use crate::alloc::{Allocator, Geometry};
use crate::catalog::volume::{validate_record_size, ObjectId, VolumeState, USER_KEY_MAX};
use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::features::{Access, Features};
use crate::format::label::{LabelPhys, LABEL_PHYS_SIZE, POOL_NAME_MAX};
use crate::format::records::{SnapshotRecordPhys, VolumeRecordPhys};
use crate::format::uberblock::{HostState, UberblockPhys};
use crate::format::{BlockPtr, ChecksumAlgo, LABEL_SIZE, MIN_DEVICE_SIZE, SECTOR_SIZE, UNIT_SIZE};
use crate::pipeline::compress::CompressionPolicy;
use crate::pipeline::dedup::{DedupTable, DEDUP_TABLE_MAX_DEFAULT};
use crate::pipeline::BlockIo;
use crate::pool::log_device::{LogAtOpen, LogDeviceSpec};
use crate::pool::snapshot::{SnapshotState, KEY_SNAPSHOT};
pub use crate::pool::status::{CommitStats, PoolStatus, VolumeInfo};
use crate::pool::txn::Txn;
use crate::sync::atomic::Ordering;
use crate::sync::{Condvar, Mutex};
use crate::tree::btree::BTree;
use crate::txg;
use crate::txg::intent_log::{IntentLog, LogPlace};
use crate::txg::TxgState;
pub use quiesce::QuiescingTxg;
pub use read_pin::PinnedRead;
use std::collections::BTreeMap;
use std::sync::Arc;

const KEY_VOLUME: u8 = 0x01;
pub const VOLUME_NAME_MAX: usize = 255;
pub const DEFAULT_RECORD_SIZE: u32 = 16 * 1024;

pub use crate::catalog::VolumeId;

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
    /// Blocks a commit frees of a deleted volume (destroy.rs); the rest waits for the next.
    pub destroy_frees_per_txg: usize,
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
            destroy_frees_per_txg: destroy::DESTROY_FREES_PER_TXG_DEFAULT,
            dedup_table_max: crate::pipeline::dedup::DEDUP_TABLE_MAX_DEFAULT,
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

/// A pool's state behind its lock, one part per layer (DESIGN.md §2): block I/O and space
/// (device, pipeline, allocator, dedup table, labels), the txg state, the intent log, the
/// catalog, the pool's health, and what the pool layer itself keeps.
pub struct PoolInner {
    // Devices, pipeline, allocator.
    pub dev: Arc<dyn BlockDevice>,
    pub io: Arc<BlockIo>,
    pub alloc: Allocator,
    /// The dedup table: blocks shared by identical records, with their reference counts.
    pub ddt: DedupTable,
    pub label: LabelPhys,
    // Txg + log.
    pub txg: TxgState,
    pub ilog: IntentLog,
    /// What the last commit retired from the intent log, dropped by `Pool::commit` after it
    /// releases the lock.
    pub(crate) retired_log: crate::txg::intent_log::RetiredGroups,
    // Catalog.
    pub catalog: Catalog,
    /// Deleted volumes whose blocks are being freed, by volume id (destroy.rs).
    pub(crate) destroying: BTreeMap<u64, destroy::Destroying>,
    // The pool.
    pub health: Health,
    pub clock: Arc<dyn Clock>,
    pub dirty_limit_bytes: u64,
    /// `PoolOptions::destroy_frees_per_txg`.
    pub(crate) destroy_frees_per_txg: usize,
    /// Prewrites of the open txg (prewrite.rs); the commit completes and drains them.
    pub(crate) prewrites: Vec<Arc<crate::pool::prewrite::PrewriteBatch>>,
    pub commit_stats: CommitStats,
    /// `PoolOptions::host_id`: what every root this opener commits records (host_state.rs).
    pub(crate) host_id: u64,
    /// Reads planned under the lock and reading outside it (read_pin.rs).
    pub(crate) read_pins: Arc<read_pin::ReadPins>,
}

/// Whether the pool may change, and what opening it met.
#[derive(Default)]
pub struct Health {
    /// Why the pool refuses writes: a failed commit, label update or device (latched
    /// until reopened, DESIGN.md §3.8), or a panic under the lock (quiesce.rs).
    pub latched: Option<String>,
    /// Opened read-only.
    pub read_only: bool,
    /// What opening met: skipped torn or damaged roots, fallbacks, a discarded log.
    pub open_notes: Vec<String>,
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
    pub(crate) waiting_on_commit: crate::sync::atomic::AtomicUsize,
    /// Named places where tests stop or fail a thread (failpoint.rs).
    pub(crate) failpoints: crate::failpoint::Failpoints,
}

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
        let io = Arc::new(BlockIo::new(dev.clone(), geo, create.checksum, opts.cache_blocks, opts.data_cache_bytes));
        let inner = PoolInner {
            dev,
            io,
            alloc: Allocator::new_empty(geo),
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
        let log_at_open = crate::pool::log_device::resolve(
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
                    let by_name = volumes.iter().map(|(id, v)| (v.name.clone(), *id)).collect();
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
                        catalog: Catalog { volumes, by_name, snapshots, ..Catalog::new(catalog, ub.next_volume_id) },
                        destroying,
                        health: Health { latched: None, read_only, open_notes: notes, exporting: false },
                        clock: opts.clock,
                        dirty_limit_bytes: opts.dirty_limit_bytes,
                        destroy_frees_per_txg: opts.destroy_frees_per_txg,
                        prewrites: Vec::new(),
                        commit_stats: CommitStats::default(),
                        host_id: opts.host_id,
                        read_pins: Arc::default(),
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
                volumes.insert(VolumeId(rec.id), VolumeState::new(name, rec));
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
                snapshots.insert(rec.id, SnapshotState { name, rec });
            }
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
        crate::pool::space::load(io, &catalog, &mut volumes)?;
        let mut alloc = alloc;
        let mut ddt = DedupTable::new(DEDUP_TABLE_MAX_DEFAULT);
        crate::pool::space::load_packs(io, &catalog, &mut alloc, &mut ddt)?;
        let destroying = destroy::load(io, &catalog)?;
        Ok(LoadedRoot { alloc, ddt, catalog, volumes, snapshots, destroying })
    }

    /// Commit what is dirty and close the pool, reporting a failure to commit.
    pub fn close(self) -> Result<()> {
        let r = {
            let mut p = self.lock();
            if p.health.read_only {
                Ok(0)
            } else {
                p.commit()
            }
        };
        r.map(|_| ())
    }

    /// The root the pool stands on: the newest committed uberblock.
    pub fn committed_root(&self) -> UberblockPhys {
        self.lock_raw().txg.root
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
            txg: p.txg.synced,
            size_bytes: size,
            allocated_bytes: allocated,
            held_bytes: held,
            free_bytes: size - allocated - held,
            volumes: p.catalog.volumes.len(),
            read_only: p.health.read_only,
            latched: p.health.latched.clone(),
            corruptions_detected: p.io.stats.corruptions_detected.load(Ordering::Relaxed),
            blocks_written: p.io.stats.blocks_written.load(Ordering::Relaxed),
            blocks_read: p.io.stats.blocks_read.load(Ordering::Relaxed),
            open_notes: p.health.open_notes.clone(),
            space: p.pool_space(),
            host_id: p.txg.root.host_id,
            pool_state: p.txg.root.pool_state,
            features: p.label.features,
        }
    }

    pub fn create_volume(&self, name: &str, opts: &VolumeOptions) -> Result<VolumeId> {
        validate_volume_name(name)?;
        validate_record_size(opts.record_size)?;
        let mut p = self.lock();
        p.writable()?;
        if p.catalog.by_name.contains_key(name) {
            return Err(Error::AlreadyExists(format!("volume {name} in pool {}", p.label.pool_name)));
        }
        p.prepare_volume(name, opts.compression, opts.reservation_bytes, opts.quota_bytes)?;
        if opts.dedup {
            p.enable_dedup_feature()?;
        }
        let id = VolumeId(p.catalog.next_id);
        p.catalog.next_id += 1;
        let rec = VolumeRecordPhys {
            id: id.0,
            record_size: opts.record_size,
            sync_policy: opts.sync.as_u8(),
            tree_root: BlockPtr::HOLE,
            next_object_id: 1,
            used_sectors: 0,
            created_txg: p.txg.next,
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
        p.catalog.volumes.insert(id, v);
        p.catalog.by_name.insert(name.to_string(), id);
        p.catalog.dirty = true;
        if opts.reservation_bytes > 0 {
            p.store_reservation(id, opts.reservation_bytes)?;
        }
        Ok(id)
    }

    /// Delete a volume with its snapshots and everything in them (refused while clones
    /// depend on its snapshots). The volume is gone at once; its blocks are freed by the
    /// following commits (destroy.rs), `PoolSpace::destroying_bytes` counting down.
    pub fn delete_volume(&self, name: &str) -> Result<()> {
        let mut p = self.lock();
        p.writable()?;
        let id = p.volume_id(name)?;
        p.refuse_delete_with_clones(id)?;
        p.queue_destroy(id)?;
        let snaps: Vec<(u64, String)> = p
            .catalog
            .snapshots
            .iter()
            .filter(|(_, s)| s.rec.volume == id.0)
            .map(|(sid, s)| (*sid, s.name.clone()))
            .collect();
        for (sid, sname) in snaps {
            let PoolInner { io, catalog: crate::catalog::Catalog { tree: catalog, .. }, .. } = &mut *p;
            catalog.remove(io, &crate::pool::snapshot::snapshot_key(id.0, &sname))?;
            p.catalog.snapshots.remove(&sid);
            p.catalog.views.remove(&VolumeId(sid)); // an open read-only view
        }
        let key = volume_key(name);
        {
            let PoolInner { io, catalog: crate::catalog::Catalog { tree: catalog, .. }, .. } = &mut *p;
            catalog.remove(io, &key)?;
            catalog.remove(io, &crate::pool::space::volume_space_key(name))?;
        }
        if let Some(mut v) = p.catalog.volumes.remove(&id) {
            let txg = p.txg.next;
            let PoolInner { alloc, ddt, .. } = &mut *p;
            v.drop_prewritten(alloc, ddt, txg); // blocks of the open txg nobody will reference
        }
        p.catalog.by_name.remove(name);
        p.catalog.dirty = true;
        Ok(())
    }

    pub fn volume_id(&self, name: &str) -> Result<VolumeId> {
        self.lock_raw().volume_id(name)
    }

    pub fn volumes(&self) -> Vec<VolumeInfo> {
        let p = self.lock_raw();
        p.catalog.volumes.iter().map(|(id, v)| info(&p, *id, v)).collect()
    }

    pub fn volume_info(&self, vol: VolumeId) -> Result<VolumeInfo> {
        let p = self.lock_raw();
        if let Some(view) = p.catalog.views.get(&vol) {
            return Ok(VolumeInfo { read_only: true, ..info(&p, vol, view) });
        }
        let v = p.catalog.volumes.get(&vol).ok_or_else(|| Error::NotFound(format!("volume id {}", vol.0)))?;
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
        Ok(crate::catalog::volume::SharedBytes::concat(&self.read_shared(vol, obj, offset, len)?))
    }

    /// Up to `len` bytes from `offset` (fewer past the object's end), as pieces of the
    /// buffers that hold them: no copy at all (a server sends them from there). The range
    /// is resolved under the pool's lock and its device reads done outside it
    /// (`ReadPlan`).
    /// The bytes of a read as shared pieces of the buffers holding them (see
    /// `ReadPlan::finish_shared`): planned under the lock, read from the device outside it,
    /// its blocks pinned in between (read_pin.rs).
    pub fn read_shared(
        &self,
        vol: VolumeId,
        obj: ObjectId,
        offset: u64,
        len: usize,
    ) -> Result<Vec<crate::catalog::volume::SharedBytes>> {
        self.plan_read(vol, obj, offset, len)?.finish()
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

fn info(p: &PoolInner, id: VolumeId, v: &VolumeState) -> VolumeInfo {
    let snapshot_name = |sid: u64| {
        p.catalog.snapshots.get(&sid).map(|s| {
            let vol = p.catalog.volumes.get(&VolumeId(s.rec.volume)).map_or("?", |v| v.name.as_str());
            format!("{vol}@{}", s.name)
        })
    };
    VolumeInfo {
        snapshots: p.catalog.snapshots.values().filter(|s| s.rec.volume == id.0).count(),
        written_bytes: v.rec.written_sectors * SECTOR_SIZE,
        total_bytes: v.rec.total_sectors * SECTOR_SIZE,
        parent_snapshot: snapshot_name(v.rec.parent),
        origin: snapshot_name(v.rec.origin),
        read_only: false,
        name: v.name.clone(),
        id,
        record_size: v.rec.record_size,
        used_bytes: v.rec.used_sectors * SECTOR_SIZE,
        quota_bytes: v.rec.quota_bytes,
        sync: SyncPolicy::from_u8(v.rec.sync_policy),
        created_txg: v.rec.created_txg,
        created_ns: v.rec.created_ns,
        space: crate::pool::space::volume_space(v),
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
