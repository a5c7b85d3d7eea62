//! Pools: status, creation, settings, lifecycle (destroy, export, import) and the checker.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use utoipa::{IntoParams, ToSchema};

/// A pool's health as the daemon sees it (`zpool status`'s first line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum PoolState {
    /// Open and served, every device in use.
    Online,
    /// Open and served with fewer copies than its layout has: a device of a mirror is
    /// faulted, removed, offline, missing or out of sync (see `devices`).
    Degraded,
    /// Open, but no device of its set is left in use: I/O fails until one comes back.
    Suspended,
    /// Known to the daemon but not open: a device is missing or unreadable (see `reason`).
    /// Its mounts and exports wait for it; `pool export` forgets it.
    Unavailable,
}

/// `GET /v1/pools`, `GET /v1/pools/{pool}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PoolInfo {
    pub name: String,
    pub state: PoolState,
    /// Why the pool is not ONLINE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[schema(value_type = String)]
    pub device: PathBuf,
    #[schema(value_type = Option<String>)]
    pub log_device: Option<PathBuf>,
    /// The member devices of a mirror (empty for a pool on one device).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>)]
    pub members: Vec<PathBuf>,
    /// The members of each device group `pool add` added (group 1 first); empty when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Vec<String>>)]
    pub groups: Vec<Vec<PathBuf>>,
    /// Hot spares of a mirror, not yet used: the first replaces a member that faults or
    /// disappears, and is rebuilt at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>)]
    pub spares: Vec<PathBuf>,
    /// The scrub schedule: every this many seconds, the next one due then (ns since 1970).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub_every_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub_next_ns: Option<u64>,
    /// How fast a rebuild copies while the pool serves clients: at least the first, at
    /// most the second (bytes per second), the rate between them following the clients'
    /// latency. An idle pool is rebuilt at full speed.
    #[serde(default)]
    pub rebuild_rate_min_bytes_per_second: u64,
    #[serde(default)]
    pub rebuild_rate_max_bytes_per_second: u64,
    /// How fast a scrub verifies while the pool serves clients: at least the first, at most
    /// the second (bytes per second), the rate between them following the clients'
    /// latency. An idle pool is scrubbed at full speed (`serve --scrub-rate` overrides
    /// both).
    #[serde(default)]
    pub scrub_rate_min_bytes_per_second: u64,
    #[serde(default)]
    pub scrub_rate_max_bytes_per_second: u64,
    /// Space, commits and caches: present when the pool is open.
    #[serde(flatten)]
    pub status: Option<PoolFigures>,
}

/// A rebuild in progress (`pool replace`, `pool online`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RebuildFigures {
    /// The device being rebuilt.
    pub device: String,
    /// Logical bytes in sync (the rebuild walks the pool's space in address order and
    /// copies what is in use).
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub percent: f64,
    /// Bytes copied so far (what the pool uses of `done_bytes`).
    pub copied_bytes: u64,
    /// How fast `done_bytes` grows.
    pub scan_bytes_per_second: u64,
    pub eta_seconds: Option<u64>,
    /// The copy rate allowed now, while the pool serves clients (bytes per second; it
    /// follows their latency between the pool's rebuild-rate bounds); absent while the
    /// pool is idle and the rebuild runs at full speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes_per_second: Option<u64>,
}

/// `POST /v1/pools/{pool}/devices`: take a device of a mirror offline, bring it back
/// online (rebuilding what it missed), or replace it with another (rebuilt from the others).
/// With several device groups, `device` may also be `GROUP.INDEX` (`1.0`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeviceChange {
    /// `offline`, `online` or `replace` a member; `spare` (add `device` as a hot spare) or
    /// `unspare` (remove it).
    pub action: String,
    /// The device as `pool status` lists it, its recorded path, or its index.
    pub device: String,
    /// For `replace`: the new device (image file or block device).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub new_device: Option<PathBuf>,
    /// For `replace`: create the image file with this size if it does not exist.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// For `replace`: format the new device even though it holds data.
    #[serde(default)]
    pub force: bool,
}

/// One device of an open pool, as `zpool status` lists them.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeviceFigures {
    /// The device path (or what the set remembers of a missing member).
    pub device: String,
    /// The device group it belongs to: 0 the pool's first, 1 and up those `pool add` added.
    #[serde(default)]
    pub group: u32,
    /// ONLINE, DEGRADED (too many checksum errors, still used), FAULTED, OFFLINE, REMOVED,
    /// UNAVAILABLE or STALE (out of sync: needs a rebuild).
    pub state: String,
    pub read_errors: u64,
    pub write_errors: u64,
    /// Copies that failed verification while another copy verified (then repaired).
    pub checksum_errors: u64,
    /// Bytes rewritten on this device from a good copy (self-healing reads, scrubs).
    pub repaired_bytes: u64,
    /// Why it is not ONLINE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What an open pool reports.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PoolFigures {
    /// The pool's unique id (hex), as `pool import` takes it.
    pub guid: String,
    /// How the engine opened the device: its path and I/O mode, e.g. `/dev/sdb (O_DIRECT)`.
    pub device_io: String,
    /// `single` or `mirror`.
    pub layout: String,
    /// The devices with their state and error counters (one for a single-device pool).
    pub devices: Vec<DeviceFigures>,
    /// The scrub running, or the last one since the daemon started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub: Option<ScrubStatus>,
    /// The rebuild of a mirror member in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild: Option<RebuildFigures>,
    pub txg: u64,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    /// Freed in the last txgs, reusable shortly (deferred frees).
    pub held_bytes: u64,
    /// parity2: free bytes in rows that still hold a block, allocatable once their row is
    /// wholly free (absent in older daemons' answers).
    #[serde(default)]
    pub trapped_bytes: u64,
    /// Of deleted volumes, still to be freed by the coming commits (async destroy).
    pub destroying_bytes: u64,
    pub volumes: u64,
    pub read_only: bool,
    /// Why the pool refuses writes, if it latched after an I/O error.
    pub latched: Option<String>,
    pub corruptions_detected: u64,
    /// What opening met: skipped torn or damaged roots, fallbacks.
    pub open_notes: Vec<String>,
    /// The separate log device failed while the pool ran and the intent log moved into the
    /// pool (which device, why, since which txg): the pool goes on; replace the device and
    /// add it again with `strata pool set POOL --log-device DEV`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_failover: Option<String>,
    pub logical_bytes: u64,
    pub saved_bytes: u64,
    /// logical / allocated, 2 decimals.
    pub compress_ratio: f64,
    /// Volumes written by an older build, whose savings are not counted.
    pub untracked_volumes: u64,
    /// Unused parts of volume reservations.
    pub reserved_bytes: u64,
    pub available_bytes: u64,
    pub capacity_alert_percent: u8,
    pub warnings: Vec<String>,
    pub compressed_blocks_written: u64,
    pub compression_skipped: u64,
    pub zero_records_elided: u64,
    pub packs: u64,
    pub packed_records_written: u64,
    pub dedup_blocks: u64,
    pub dedup_saved_bytes: u64,
    pub dedup_table_max: u64,
    pub log_blocks_written: u64,
    pub log_bytes_written: u64,
    pub log_bytes_by_reference: u64,
    pub log_full_commits: u64,
    pub log_memory_bytes: u64,
    pub data_cache_bytes: u64,
    pub data_cache_capacity_bytes: u64,
    pub data_cache_hits: u64,
    #[serde(default)]
    pub data_cache_misses: u64,
    #[serde(default)]
    pub metadata_cache_hits: u64,
    #[serde(default)]
    pub metadata_cache_misses: u64,
    pub commits: CommitFigures,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CommitFigures {
    pub count: u64,
    pub prewrite_us_total: u64,
    pub locked_us_total: u64,
    pub locked_us_max: u64,
    pub locked_us_last: u64,
    pub locked_blocks_read: u64,
    pub early_passes_skipped: u64,
}

/// `POST /v1/pools`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePool {
    pub name: String,
    /// Image file (created when `size_bytes` is given and it does not exist) or block device,
    /// for a pool on one device (layout `single`).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub device: Option<PathBuf>,
    /// `single` (one `device`, the default) or `mirror` (2 or 3 `devices`, each holding
    /// every byte).
    #[serde(default)]
    pub layout: Option<String>,
    /// The devices of a mirror, as `device` is for one.
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub devices: Vec<PathBuf>,
    /// Hot spares of a mirror (existing devices, or image files created with `size_bytes`):
    /// one replaces a member that faults or disappears, and is rebuilt at once.
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub spares: Vec<PathBuf>,
    /// Creates missing image files of this size (each device of a mirror).
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// `blake3` (default) or `crc32c`.
    #[serde(default)]
    pub checksum: Option<String>,
    /// A separate intent-log device (an existing file or block device of at least 16 MiB).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub log_device: Option<PathBuf>,
    /// Format the device even though it holds a file system, a partition table, a label or
    /// other data (what was found is named in the refusal).
    #[serde(default)]
    pub force: bool,
}

/// `PATCH /v1/pools/{pool}`: every field given is applied, or none is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPool {
    /// Warn when available space falls below this percentage (1-99).
    #[serde(default)]
    pub capacity_alert_percent: Option<u8>,
    /// Add this separate intent-log device to the pool.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub log_device: Option<PathBuf>,
    /// Stop using the pool's separate log device (the log goes back into the pool).
    #[serde(default)]
    pub remove_log_device: Option<bool>,
    /// Scrub the pool every this many seconds (the first one that long from now); 0 stops
    /// the schedule.
    #[serde(default)]
    pub scrub_every_seconds: Option<u64>,
    /// The least a rebuild copies per second while the pool serves clients (at least
    /// 1 MiB/s).
    #[serde(default)]
    pub rebuild_rate_min_bytes_per_second: Option<u64>,
    /// The most a rebuild copies per second while the pool serves clients (at least the
    /// minimum).
    #[serde(default)]
    pub rebuild_rate_max_bytes_per_second: Option<u64>,
    /// The least a scrub verifies per second while the pool serves clients (at least
    /// 1 MiB/s).
    #[serde(default)]
    pub scrub_rate_min_bytes_per_second: Option<u64>,
    /// The most a scrub verifies per second while the pool serves clients (at least the
    /// minimum).
    #[serde(default)]
    pub scrub_rate_max_bytes_per_second: Option<u64>,
}

/// Query of `DELETE /v1/pools/{pool}` (destroy).
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DestroyPoolQuery {
    /// The pool's name again: destroying erases every volume, snapshot and clone in it.
    pub confirm: Option<String>,
    /// Unmount and unexport its volumes first instead of refusing.
    pub force: Option<bool>,
}

/// `POST /v1/pools/{pool}/sync`: what the commit made durable.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PoolSynced {
    pub pool: String,
    /// The txg now durable: every write that came before the request is in it or an
    /// earlier one (and no longer needs the intent log).
    pub txg: u64,
}

/// `POST /v1/pools/{pool}/export`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportPoolRequest {
    /// Unmount and unexport its volumes first instead of refusing.
    #[serde(default)]
    pub force: bool,
}

/// Query of `GET /v1/pools/importable`: where to look for pools.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ImportScanQuery {
    /// One device or image file.
    #[param(value_type = Option<String>)]
    pub device: Option<PathBuf>,
    /// Every regular file and block device in this directory (not recursive).
    #[param(value_type = Option<String>)]
    pub dir: Option<PathBuf>,
}

/// A pool found by its labels, as `pool import` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ImportCandidate {
    pub name: String,
    pub guid: String,
    /// Its device; for a device set (mirror, parity2), its first member found.
    #[schema(value_type = String)]
    pub device: PathBuf,
    /// A device set's members found (by member index); empty for a pool on one device. A
    /// set with members missing imports DEGRADED, as long as its layout tolerates it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>)]
    pub members: Vec<PathBuf>,
    /// The members of each device group `pool add` added, found the same way (group 1
    /// first); empty when the pool has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Vec<String>>)]
    pub groups: Vec<Vec<PathBuf>>,
    /// A device set's member count (its labels'), 0 for a pool on one device.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub set_members: u32,
    /// Its separate log device, by guid (hex), if it has one.
    pub log_device_guid: Option<String>,
    pub txg: u64,
    /// `exported` (cleanly), `active` (open or not closed cleanly), or `unknown` (a pool
    /// written before pools recorded their host).
    pub pool_state: String,
    /// The host id that last had it open (hex; 0 if unknown).
    pub host_id: String,
    /// This daemon's host id wrote it.
    pub this_host: bool,
    /// Already served by this daemon.
    pub imported: bool,
    /// Why importing it would be refused without `force`, if it would.
    pub refusal: Option<String>,
}

/// `POST /v1/pools/import`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportPoolRequest {
    /// The pool's name or guid (hex), as the scan lists it.
    pub pool: String,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub device: Option<PathBuf>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub dir: Option<PathBuf>,
    /// Its separate log device, if it has one.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub log_device: Option<PathBuf>,
    /// Serve it under another name.
    #[serde(default)]
    pub new_name: Option<String>,
    /// Import a pool another host still has open (it must really be closed there: two
    /// hosts writing one pool destroy it).
    #[serde(default)]
    pub force: bool,
}

/// `POST /v1/pools/{pool}/check`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// Read and verify every data block too (default true).
    #[serde(default)]
    pub verify_data: Option<bool>,
}

/// A checker report (`strata check`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CheckReport {
    pub clean: bool,
    pub txg: u64,
    pub volumes: u64,
    pub snapshots: u64,
    pub objects: u64,
    pub metadata_blocks: u64,
    pub data_blocks: u64,
    pub referenced_bytes: u64,
    pub allocated_bytes: u64,
    pub data_bytes_verified: u64,
    pub compressed_blocks: u64,
    pub saved_bytes: u64,
    /// Invariant violations; empty when clean.
    pub errors: Vec<String>,
    pub notes: Vec<String>,
}

/// What a finished scrub found: every copy of every block verified, the damaged ones
/// repaired from a good copy.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ScrubReport {
    /// The checker's report of the same pass (a scrub checks every invariant too).
    pub check: CheckReport,
    /// Blocks whose every copy was read and verified.
    pub blocks_verified: u64,
    /// Copies found damaged by this scrub (and repaired, unless no copy was intact: then
    /// the block is in `check.errors`).
    pub checksum_errors: u64,
    /// Bytes rewritten from good copies by this scrub.
    pub repaired_bytes: u64,
    pub seconds: f64,
    /// The devices after the scrub.
    pub devices: Vec<DeviceFigures>,
}

/// `POST /v1/pools/{pool}/scrub`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScrubRequest {
    /// `start` (default), `pause`, `resume` or `cancel`.
    #[serde(default)]
    pub action: Option<String>,
}

/// A pool's scrub: the one running, or the last one since the daemon started.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ScrubStatus {
    /// `running`, `paused`, `finished`, `cancelled`, `yielded` (stopped: writers needed the
    /// space its pin held; start it again), `failed`, or `none` (no scrub since the start).
    pub state: String,
    /// Bytes verified (each block counted once, all its copies read).
    pub done_bytes: u64,
    /// Bytes the pool had allocated when the scrub started.
    pub total_bytes: u64,
    pub percent: f64,
    pub bytes_per_second: u64,
    /// Seconds to the end at the current rate (running scrubs).
    pub eta_seconds: Option<f64>,
    /// Seconds since it started (to its end, once ended).
    pub seconds: f64,
    /// Of those, the seconds it waited to keep to its rate while the pool served clients
    /// (`serve --scrub-rate`, or the rate that follows their latency between the pool's
    /// scrub-rate bounds); 0 on an idle pool.
    #[serde(default)]
    pub paced_seconds: f64,
    /// The rate allowed now (bytes per second): while the pool serves clients, the one
    /// that follows their latency; always `serve --scrub-rate` when the daemon has one.
    /// Absent while the pool is idle and the scrub runs at full speed, and once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes_per_second: Option<u64>,
    /// What it found, once ended (`finished`, `cancelled`, `yielded`: up to where it got).
    pub report: Option<ScrubReport>,
    /// Why it failed, or what to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Its job (`GET /v1/jobs/{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `POST /v1/pools/{pool}/groups`: add a device group — a new set of the pool's layout
/// (a mirror of 2 or 3 devices, a parity2 set of 4 to 16) whose space extends the pool's; new blocks are spread over
/// every group (ZFS `zpool add`). Refused over data unless `force`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddGroup {
    /// The new group's devices (image files or block devices), absolute paths.
    #[schema(value_type = Vec<String>)]
    pub devices: Vec<PathBuf>,
    /// Create the image files with this size where they do not exist.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// Format devices that hold data (a file system, another pool's label).
    #[serde(default)]
    pub force: bool,
}
