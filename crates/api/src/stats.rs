//! I/O statistics: `GET /v1/stats` (what `strata iostat` samples). `GET /metrics` carries
//! the same figures in the Prometheus text format (docs/observability.md).

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `GET /v1/stats`: which pool and volume.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// Only this pool.
    pub pool: Option<String>,
    /// Only this volume of `pool` (a LUN's snapshot export is `VOLUME@SNAPSHOT`).
    pub volume: Option<String>,
}

/// One sample of the daemon's counters (all of them grow from the daemon's start; a rate
/// is the difference of two samples over the difference of their `uptime_seconds`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IoStats {
    /// Seconds since the daemon started, on a monotonic clock, when the sample was taken.
    pub uptime_seconds: f64,
    pub pools: Vec<PoolIoStats>,
    /// One entry per volume and protocol that has served I/O since the daemon started (or
    /// has been mounted or exported), by pool, volume and protocol.
    pub volumes: Vec<VolumeIoStats>,
}

/// A pool's figures: space (as `pool status`) and its commits.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PoolIoStats {
    pub pool: String,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    /// What the volumes hold before compression, dedup and zero elision (logical), vs
    /// `allocated_bytes` (physical).
    pub logical_bytes: u64,
    pub available_bytes: u64,
    pub txg: u64,
    /// Commits that synced a txg since the pool was opened, their total and the part that
    /// held the pool's lock; percentiles from fixed buckets (an upper bound: the bucket's).
    pub commits: u64,
    pub commit_seconds_total: f64,
    pub commit_locked_seconds_total: f64,
    /// Bytes of new blocks (data and metadata) the commits wrote, in all and the last one.
    #[serde(default)]
    pub commit_bytes_total: u64,
    #[serde(default)]
    pub last_commit_bytes: u64,
    pub commit_latency_us_p50: u64,
    pub commit_latency_us_p99: u64,
    /// Intent-log blocks and bytes written (synchronous writes acknowledged before their commit).
    pub log_blocks_written: u64,
    pub log_bytes_written: u64,
    /// Reads served from the data cache and missed (read from the devices); the same for
    /// metadata blocks. The hit ratio is hits / (hits + misses).
    pub data_cache_hits: u64,
    #[serde(default)]
    pub data_cache_misses: u64,
    #[serde(default)]
    pub metadata_cache_hits: u64,
    #[serde(default)]
    pub metadata_cache_misses: u64,
    /// Blocks read and written on the pool's devices (data, metadata and log).
    pub blocks_read: u64,
    pub blocks_written: u64,
    pub corruptions_detected: u64,
    /// Summed over the pool's devices.
    pub device_read_errors: u64,
    pub device_write_errors: u64,
    pub device_checksum_errors: u64,
}

/// One volume through one protocol.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VolumeIoStats {
    pub pool: String,
    pub volume: String,
    /// fuse, nfs, nbd or iscsi.
    pub protocol: String,
    pub read: IoClassStats,
    pub write: IoClassStats,
    /// fsync/fdatasync, NFS COMMIT, NBD FLUSH, SCSI SYNCHRONIZE CACHE.
    pub sync: IoClassStats,
    /// NBD TRIM/WRITE_ZEROES, SCSI UNMAP/WRITE SAME, fallocate punching or zeroing a range.
    pub trim: IoClassStats,
    /// Metadata: lookups, attributes, directories, NBD BLOCK_STATUS, other SCSI commands.
    pub other: IoClassStats,
}

/// One class of operations: counts since the daemon started and the latency histogram.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct IoClassStats {
    pub ops: u64,
    /// Data carried (0 for sync, trim and other).
    pub bytes: u64,
    pub errors: u64,
    /// Percentiles of the latency since the daemon started (µs, the highest value of the
    /// histogram bucket: at most 1.6 % above the true value); 0 with no operations.
    pub latency_us_p50: u64,
    pub latency_us_p99: u64,
    pub latency_us_p999: u64,
    pub latency_us_total: u64,
    /// The latency histogram: `[highest µs of the bucket, count]` for the buckets that hold
    /// anything (64 buckets per power of two), so that a client can take the difference of
    /// two samples and its percentiles.
    pub latency_us_buckets: Vec<[u64; 2]>,
}
