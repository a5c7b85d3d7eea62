//! Mirrors: replication of a volume (or a group of volumes, as one unit) to another pool.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/mirrors`: mirror `source` (POOL/VOLUME) and `group` to `dest_pool`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMirror {
    /// POOL/VOLUME of the source.
    pub source: String,
    /// More volumes of the source's pool, mirrored with it as one unit (every transfer is
    /// one group snapshot: a database's data and log volumes always match on the target).
    #[serde(default)]
    pub group: Vec<String>,
    /// The pool that receives: POOL of this daemon, or PEER:POOL of a paired daemon
    /// (docs/peers.md). The target volumes get the source names.
    pub dest_pool: String,
    /// Transfer every this many seconds (none: only on `update`).
    #[serde(default)]
    pub every_seconds: Option<u64>,
    /// Transferred snapshots kept on each side (default 2, at least 1; the newest common one
    /// is always kept).
    #[serde(default)]
    pub keep: Option<u32>,
    /// Send at most this many record bytes per second (none: as fast as the pools go).
    #[serde(default)]
    pub limit_bytes_per_second: Option<u64>,
    /// Synchronous: `on` (an fsync of a source volume returns once the target's journal
    /// holds it; if the target fails, the mirror falls back to asynchronous and catches up
    /// by itself) or `strict` (the fsync fails instead). To a pool of this daemon or of a
    /// paired peer (the journal is kept there).
    #[serde(default)]
    pub sync: Option<String>,
    /// Failover of a synchronous mirror to a peer through an etcd lease: the daemon that
    /// holds the lease serves the volumes; the target takes over once the source's lease
    /// has run out (docs/mirrors.md, "Failover").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<CreateFailover>,
}

/// `mirror create --etcd URL[,URL] [--failover-ttl SECONDS] [--failover-mount DIR]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateFailover {
    /// etcd endpoints, e.g. `http://10.0.0.5:2379`.
    pub etcd: Vec<String>,
    /// The lease's time to live (default 10 s, 2 to 300): a source that cannot renew it
    /// stops acknowledging syncs after half of it; the target takes over after all of it.
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// On the target: after a takeover, mount each volume at DIR/VOLUME (under /mnt, /srv,
    /// /data, /var/lib/postgresql or /var/lib/mysql: the target mounts on a peer's word).
    #[serde(default)]
    pub mount_dir: Option<String>,
}

/// `POST /v1/mirrors/{pool}/{volume}`: `update` (transfer now), `break` (make the target
/// writable), `resync` (a broken mirror again: the target's writes since the break are
/// kept as a snapshot, then it is restored to the common snapshot), `reverse` (a broken
/// mirror with the roles swapped; the old source's writes since then kept as a snapshot;
/// the mirror is then named by the new target), `pause`, `resume`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MirrorAction {
    pub action: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MirrorTransfer {
    /// The snapshot transferred (or being transferred).
    pub snapshot: String,
    /// Incremental from this snapshot; none: a full transfer.
    pub base: Option<String>,
    /// Record bytes sent so far (all volumes of the group).
    pub done_bytes: u64,
    /// Record bytes the transfer carries, estimated when it started.
    pub total_bytes: u64,
    pub percent: f64,
    pub bytes_per_second: u64,
    /// Seconds to the end at the current rate (transfers in progress).
    pub eta_seconds: Option<f64>,
    pub seconds: f64,
    /// When it ended (ns since 1970); none while running.
    pub finished_ns: Option<u64>,
    /// Its job (`GET /v1/jobs/{id}`), while the daemon that runs it has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MirrorInfo {
    /// DEST_POOL/VOLUME: the mirror's name.
    pub name: String,
    pub source_pool: String,
    /// The volumes mirrored (one, or a group), by name in both pools.
    pub volumes: Vec<String>,
    pub dest_pool: String,
    /// `uninitialized`, `transferring`, `mirrored`, `broken`, `paused`, or `failed` (the last
    /// transfer failed; `message` says why; the next update retries).
    pub state: String,
    pub every_seconds: Option<u64>,
    pub keep: u32,
    #[serde(default)]
    pub limit_bytes_per_second: Option<u64>,
    /// The newest snapshot both sides hold (what the next update sends from).
    pub common_snapshot: Option<String>,
    /// RPO: seconds since the newest snapshot the target has was taken on the source.
    pub lag_seconds: Option<f64>,
    pub last_transfer: Option<MirrorTransfer>,
    pub transfer: Option<MirrorTransfer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The daemon (a paired peer) the mirror comes from, on its target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_peer: Option<String>,
    /// The daemon the mirror goes to, on its source (the mirror is then named PEER:POOL/VOL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest_peer: Option<String>,
    /// A synchronous mirror's link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<MirrorSync>,
    /// Failover through an etcd lease (`mirror create --etcd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<MirrorFailover>,
}

/// The failover lease of a synchronous mirror, as this daemon sees it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MirrorFailover {
    pub etcd: Vec<String>,
    /// The owner key in etcd.
    pub key: String,
    pub ttl_seconds: u64,
    /// This daemon's part: `serving` (it holds the lease and acknowledges syncs),
    /// `acquiring` (it should serve but does not hold the lease: syncs are refused),
    /// `standby` (the target: takes over when the lease runs out), `fenced` (another
    /// daemon took over: this one does not serve the volumes), or `off`.
    pub role: String,
    /// Who holds the lease, as last seen in etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When this daemon took the volumes over (ns since 1970).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_over_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The link of a synchronous mirror (`mirror create --sync`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MirrorSync {
    /// `on` or `strict`.
    pub mode: String,
    /// `catching-up` (a transfer brings the target's journal back to complete; syncs do
    /// not wait yet, strict ones fail), `in-sync` (every sync waits for the target),
    /// `degraded` (the target failed; the mirror is being armed again), or `off` (broken
    /// or paused).
    pub state: String,
    /// Why it is degraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Frames (groups of operations) and their bytes journaled on the target since the
    /// link was armed.
    pub frames: u64,
    pub bytes: u64,
}
