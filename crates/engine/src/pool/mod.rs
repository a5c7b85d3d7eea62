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
//! | — | `Pool::counters` (std atomics, counters.rs) | commit-duration histograms for monitoring; nothing reads them to decide | relaxed, no lock |
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
pub mod control;
pub mod counters;
pub(crate) mod destroy;
pub mod groups;
pub mod guard;
pub mod host_state;
pub mod log_device;
mod log_ref;
mod log_sync;
mod open;
pub mod prewrite;
mod quiesce;
pub(crate) mod read_pin;
pub mod rebuild;
mod replay;
pub mod restore;
pub mod snapshot;
pub mod space;
pub mod status;
pub mod sync_gate;
pub mod sync_tap;
pub mod transfer;

use crate::alloc::Allocator;
use crate::catalog::volume::{validate_record_size, ObjectId, VolumeState, USER_KEY_MAX};
use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::label::LabelPhys;
use crate::format::records::VolumeRecordPhys;
use crate::format::uberblock::UberblockPhys;
use crate::format::{BlockPtr, ChecksumAlgo, SECTOR_SIZE, UNIT_SIZE};
use crate::pipeline::compress::CompressionPolicy;
use crate::pipeline::dedup::DedupTable;
use crate::pipeline::BlockIo;
use crate::pool::guard::PoolGuard;
pub use crate::pool::status::{CommitStats, PoolStatus, VolumeInfo};
use crate::sync::atomic::Ordering;
use crate::sync::{Condvar, Mutex};
use crate::txg::intent_log::IntentLog;
use crate::txg::TxgState;
pub(crate) use open::read_label;
pub use quiesce::QuiescingTxg;
pub use read_pin::PinnedRead;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) const KEY_VOLUME: u8 = 0x01;
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
    /// The sync tap of a synchronous mirror, if one is installed (sync_tap.rs).
    pub(crate) tap: Option<sync_tap::TapState>,
    /// Whoever may refuse to acknowledge syncs (a failover lease; sync_gate.rs).
    pub(crate) gate: Option<std::sync::Arc<dyn sync_gate::SyncGate>>,
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
    /// The separate log device failed and the log moved into the pool (log_device.rs,
    /// `fail_over_log`): which device, why, and since which txg.
    pub log_failover: Option<String>,
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
    /// Commit durations for monitoring (counters.rs): atomics, no lock.
    pub(crate) counters: counters::PoolCounters,
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

impl Pool {
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

    /// A writer short of space asked the running scrub to give back the freed space its pin
    /// holds: a scrub's driver waiting (paused, paced) should return to it now.
    pub fn scrub_yield_requested(&self) -> bool {
        self.lock_raw().read_pins.scrub_should_yield()
    }

    /// The pool's identity, fixed at creation (names it to the outside: LUN identities).
    pub fn guid(&self) -> u64 {
        self.lock_raw().label.pool_guid
    }

    /// Commit-duration histograms since open (counters.rs), read without the pool's lock.
    pub fn counters(&self) -> counters::CounterValues {
        self.counters.read()
    }

    /// Commit timings since open (also in `status`, without building all of it).
    pub fn status_commits(&self) -> CommitStats {
        self.lock_raw().commit_stats
    }

    /// Foreground I/O counters (blocks read, blocks written, intent-log blocks written),
    /// without building a whole status: what a background job looks at to see whether the
    /// pool is busy.
    pub fn io_activity(&self) -> (u64, u64, u64) {
        let p = self.lock_raw();
        let s = &p.io.stats;
        (s.blocks_read.load(Ordering::Relaxed), s.blocks_written.load(Ordering::Relaxed), p.ilog.blocks_written)
    }

    /// Why the separate log device is no longer used, if it failed since open
    /// (log_device.rs, `fail_over_log`).
    pub fn log_failover(&self) -> Option<String> {
        self.lock_raw().health.log_failover.clone()
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
        let size = p.alloc.geometry().total_units() * UNIT_SIZE;
        let allocated = p.alloc.allocated_units() * UNIT_SIZE;
        let held = p.alloc.held_units() * UNIT_SIZE;
        let trapped = p.alloc.trapped_units() * UNIT_SIZE;
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
            data_cache_misses: p.io.stats.data_cache_misses.load(Ordering::Relaxed),
            metadata_cache_hits: p.io.stats.cache_hits.load(Ordering::Relaxed),
            metadata_cache_misses: p.io.stats.cache_misses.load(Ordering::Relaxed),
            commits: p.commit_stats,
            txg: p.txg.synced,
            size_bytes: size,
            allocated_bytes: allocated,
            held_bytes: held,
            trapped_bytes: trapped,
            free_bytes: size - allocated - held - trapped,
            volumes: p.catalog.volumes.len(),
            read_only: p.health.read_only,
            latched: p.health.latched.clone(),
            corruptions_detected: p.io.stats.corruptions_detected.load(Ordering::Relaxed),
            blocks_written: p.io.stats.blocks_written.load(Ordering::Relaxed),
            blocks_read: p.io.stats.blocks_read.load(Ordering::Relaxed),
            open_notes: p.health.open_notes.clone(),
            log_failover: p.health.log_failover.clone(),
            space: p.pool_space(),
            host_id: p.txg.root.host_id,
            pool_state: p.txg.root.pool_state,
            features: p.label.features,
            devices: p.dev.set_status(),
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
        let id = VolumeId(p.catalog.new_id()?);
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
        v.dirty.changed = true;
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
        self.guard().set_quota(vol, quota_bytes)
    }

    pub fn set_sync_policy(&self, vol: VolumeId, sync: SyncPolicy) -> Result<()> {
        self.guard().set_sync_policy(vol, sync)
    }

    /// Begin a group of operations that no commit can split: the pool's lock is held until
    /// the returned [`PoolGuard`] is dropped. A file system uses it so that a rename or an unlink
    /// lands in one txg whole. Nothing inside commits on its own (no NoSpace retries, no
    /// dirty-limit commits); see [`Pool::commit_for_space`].
    pub fn guard(&self) -> PoolGuard<'_> {
        PoolGuard::new(self.lock())
    }

    /// After a NoSpace inside a [`PoolGuard`]: commit (even with nothing dirty) so that held frees
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
        self.guard().create_object(vol, attr)
    }

    pub fn delete_object(&self, vol: VolumeId, obj: ObjectId) -> Result<()> {
        self.guard().delete_object(vol, obj)
    }

    pub fn object_exists(&self, vol: VolumeId, obj: ObjectId) -> Result<bool> {
        self.guard_for_data().object_exists(vol, obj)
    }

    pub fn object_size(&self, vol: VolumeId, obj: ObjectId) -> Result<u64> {
        self.guard_for_data().object_size(vol, obj)
    }

    pub fn get_attr(&self, vol: VolumeId, obj: ObjectId) -> Result<Vec<u8>> {
        self.guard_for_data().get_attr(vol, obj)
    }

    pub fn set_attr(&self, vol: VolumeId, obj: ObjectId, attr: &[u8]) -> Result<()> {
        self.guard_for_data().set_attr(vol, obj, attr)
    }

    pub fn list_objects(&self, vol: VolumeId, after: Option<ObjectId>, limit: usize) -> Result<Vec<ObjectId>> {
        self.guard_for_data().list_objects(vol, after, limit)
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
        self.guard_for_data().object_block_root(vol, obj)
    }

    pub fn kv_get(&self, vol: VolumeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.guard_for_data().kv_get(vol, key)
    }

    pub fn kv_put(&self, vol: VolumeId, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.guard().kv_put(vol, key, value)
    }

    pub fn kv_delete(&self, vol: VolumeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.guard().kv_delete(vol, key)
    }

    /// Entries with `start <= key < end`, at most `limit`, in key order.
    pub fn kv_range(
        &self,
        vol: VolumeId,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.guard_for_data().kv_range(vol, start, end, limit)
    }

    /// The longest key a volume's key-value space accepts.
    pub const KV_KEY_MAX: usize = USER_KEY_MAX;
}

impl PoolInner {
    /// `Pool::delete_volume` under the lock, clones refused: the volume goes into the
    /// destroy queue (destroy.rs), its catalog entries and those of its snapshots go.
    fn delete_volume(&mut self, id: VolumeId, name: &str) -> Result<()> {
        self.queue_destroy(id)?;
        let snaps: Vec<(u64, String)> = self
            .catalog
            .snapshots
            .iter()
            .filter(|(_, s)| s.rec.volume == id.0)
            .map(|(sid, s)| (*sid, s.name.clone()))
            .collect();
        let Catalog { tree, snapshots, views, .. } = &mut self.catalog;
        for (sid, sname) in snaps {
            tree.remove(&self.io, &crate::pool::snapshot::snapshot_key(id.0, &sname))?;
            snapshots.remove(&sid);
            views.remove(&VolumeId(sid)); // an open read-only view
        }
        tree.remove(&self.io, &volume_key(name))?;
        tree.remove(&self.io, &crate::pool::space::volume_space_key(name))?;
        if let Some(mut v) = self.catalog.volumes.remove(&id) {
            // Blocks of the open txg nobody will reference.
            v.dirty.drop_prewritten(&mut self.alloc, &mut self.ddt, self.txg.next)?;
        }
        self.catalog.by_name.remove(name);
        self.catalog.dirty = true;
        Ok(())
    }
}

fn info(p: &PoolInner, id: VolumeId, v: &VolumeState) -> VolumeInfo {
    let snapshot_name = |sid: u64| {
        p.catalog.snapshots.get(&sid).map(|s| {
            let vol = p.catalog.volumes.get(&VolumeId(s.rec.volume)).map_or("?", |v| v.record.name.as_str());
            format!("{vol}@{}", s.name)
        })
    };
    VolumeInfo {
        snapshots: p.catalog.snapshots.values().filter(|s| s.rec.volume == id.0).count(),
        written_bytes: v.record.phys.written_sectors * SECTOR_SIZE,
        total_bytes: v.record.phys.total_sectors * SECTOR_SIZE,
        parent_snapshot: snapshot_name(v.record.phys.parent),
        origin: snapshot_name(v.record.phys.origin),
        read_only: false,
        name: v.record.name.clone(),
        id,
        record_size: v.record.phys.record_size,
        used_bytes: v.record.phys.used_sectors * SECTOR_SIZE,
        quota_bytes: v.record.phys.quota_bytes,
        sync: SyncPolicy::from_u8(v.record.phys.sync_policy),
        created_txg: v.record.phys.created_txg,
        created_ns: v.record.phys.created_ns,
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
