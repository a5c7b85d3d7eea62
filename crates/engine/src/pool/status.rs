//! What a pool reports about itself and its volumes (`Pool::status`, `Pool::volume_info`):
//! plain values, taken under the pool's lock and handed out; nothing here is on disk.

use crate::format::uberblock::HostState;
use crate::pool::space::{PoolSpace, VolumeSpace};
use crate::pool::{SyncPolicy, VolumeId};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeInfo {
    pub name: String,
    pub id: VolumeId,
    pub record_size: u32,
    pub used_bytes: u64,
    pub quota_bytes: u64,
    pub sync: SyncPolicy,
    pub created_txg: u64,
    pub created_ns: u64,
    /// Bytes born since the latest snapshot (what only the live volume holds).
    pub written_bytes: u64,
    /// Bytes born in this volume still allocated: live data plus what its snapshots keep.
    pub total_bytes: u64,
    pub snapshots: usize,
    /// `vol@snap` the live volume descends from (its latest snapshot, or a restore point).
    pub parent_snapshot: Option<String>,
    /// `vol@snap` this volume was cloned from.
    pub origin: Option<String>,
    /// A read-only snapshot view.
    pub read_only: bool,
    /// Compression, reservation, logical bytes and savings (space.rs).
    pub space: VolumeSpace,
}

#[derive(Debug, Clone)]
pub struct PoolStatus {
    pub name: String,
    pub pool_guid: u64,
    pub device: String,
    /// The separate intent-log device, if the pool has one.
    pub log_device: Option<String>,
    /// The separate log device failed since open and the log moved into the pool: which
    /// device, why, since which txg (the pool goes on; its labels no longer name it).
    pub log_failover: Option<String>,
    /// Intent-log blocks written, and syncs that found the log full and waited for a
    /// commit instead (a sign the log region is too small for the sync write load).
    pub log_blocks_written: u64,
    pub log_bytes_written: u64,
    /// Bytes of large synced writes logged by reference: written in place, once.
    pub log_bytes_by_reference: u64,
    pub log_full_commits: u64,
    /// Memory the intent log holds for operations not yet synced nor committed (writes are
    /// held as ranges, not bytes: intent_log.rs).
    pub log_memory_bytes: u64,
    /// Bytes in the data cache, its capacity, and reads it served and missed, since open.
    pub data_cache_bytes: u64,
    pub data_cache_capacity: u64,
    pub data_cache_hits: u64,
    pub data_cache_misses: u64,
    /// Metadata blocks served from the metadata cache and missed, since open.
    pub metadata_cache_hits: u64,
    pub metadata_cache_misses: u64,
    /// How long commits took, since open (the txg history of `zpool iostat`/kstats).
    pub commits: CommitStats,
    pub txg: u64,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    /// Freed in the last txgs, reusable shortly (deferred frees; longer while a read that
    /// planned them is in flight, read_pin.rs).
    pub held_bytes: u64,
    /// Parity2: free bytes in rows that hold a block, not allocatable until their row is
    /// free (alloc/rows.rs); 0 for other layouts.
    pub trapped_bytes: u64,
    pub free_bytes: u64,
    pub volumes: usize,
    pub read_only: bool,
    /// Why the pool refuses writes, if it latched after an I/O error.
    pub latched: Option<String>,
    pub corruptions_detected: u64,
    pub blocks_written: u64,
    pub blocks_read: u64,
    /// What opening met: skipped torn or damaged roots, fallbacks.
    pub open_notes: Vec<String>,
    /// Logical vs physical, reservations, available space, capacity warnings (space.rs).
    pub space: PoolSpace,
    /// The host and state the newest committed root records (host_state.rs): for a pool
    /// open read-write with a host id, that host and `Active`.
    pub host_id: u64,
    pub pool_state: HostState,
    /// The feature flags in the pool's labels (format/features.rs).
    pub features: crate::format::features::Features,
    /// The pool's device set (layout, health, members with their error counters); `None`
    /// for a pool on one device.
    pub devices: Option<crate::device::SetStatus>,
}

/// Commit timings since the pool was opened. `locked` is the part that holds the pool's
/// lock (tree rewrites, space maps, the root): every reader and writer waits for it, so its
/// maximum is the worst stall a commit caused. `prewrite` runs beside them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    pub count: u64,
    pub prewrite_us_total: u64,
    pub locked_us_total: u64,
    pub locked_us_max: u64,
    pub locked_us_last: u64,
    /// Blocks read from the device while the lock was held (metadata cache misses).
    pub locked_blocks_read: u64,
    /// Commits that skipped their early prewrite passes (quiesce.rs `begin_commit`).
    pub early_passes_skipped: u64,
}

impl CommitStats {
    pub(crate) fn record(&mut self, prewrite: Duration, locked: Duration, blocks_read: u64) {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.count += 1;
        self.prewrite_us_total = self.prewrite_us_total.saturating_add(us(prewrite));
        self.locked_us_total = self.locked_us_total.saturating_add(us(locked));
        self.locked_us_max = self.locked_us_max.max(us(locked));
        self.locked_us_last = us(locked);
        self.locked_blocks_read += blocks_read;
    }
}
