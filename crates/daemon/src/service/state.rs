//! The daemon's persistent state file: which pools to open and what to mount.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolRecord {
    pub name: String,
    /// The pool's device; for a mirror, its first member.
    pub device: PathBuf,
    /// The member devices of a mirror; absent for a pool on one device (and in state
    /// files of older daemons).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<PathBuf>,
    /// The members of each device group added after creation (`pool add`); absent when
    /// none (and in older state files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Vec<PathBuf>>,
    /// The pool's separate intent-log device; absent for pools without one (and in state
    /// files of older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_device: Option<PathBuf>,
    /// Hot spares of a mirror: devices that replace a member that faults or disappears
    /// (devices.rs); absent when none (and in state files of older daemons).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spares: Vec<PathBuf>,
    /// The pool's scrub schedule; absent when it has none (and in older state files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub_schedule: Option<ScrubSchedule>,
    /// Bounds of a rebuild's copy rate beside clients (`pool set --rebuild-rate-min/-max`);
    /// absent: the defaults (and in older state files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuild_rate: Option<RateBounds>,
    /// Bounds of a scrub's rate beside clients (`pool set --scrub-rate-min/-max`); absent:
    /// the defaults (and in older state files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub_rate: Option<RateBounds>,
    /// A scrub under way when the state was saved: the next start of the daemon resumes it
    /// (service/scrub.rs); absent when none was (and in older state files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub_progress: Option<ScrubProgress>,
}

/// How far a scrub got: every data record up to `bookmark` (tree id, object id, record;
/// engine `WalkBookmark`) is verified; `None`: none yet (it starts over).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubProgress {
    pub bookmark: Option<(u64, u64, u64)>,
    /// Paused by an administrator: it comes back paused.
    pub paused: bool,
    /// When the scrub first started (wall clock, ns): kept across its resumptions.
    pub started_ns: u64,
}

/// How fast a rebuild copies (or a scrub verifies) while the pool serves clients: at least
/// `min`, at most `max` bytes per second, the rate between them following the clients'
/// latency (client_pace.rs). An idle pool is rebuilt and scrubbed at full speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateBounds {
    pub min_bytes_per_second: u64,
    pub max_bytes_per_second: u64,
}

/// A pool scrubbed every `every_seconds`; the next scrub is due at `next_ns` (wall clock),
/// so the schedule keeps its phase across restarts of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubSchedule {
    pub every_seconds: u64,
    pub next_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MountRecord {
    /// POOL/VOLUME
    pub volume: String,
    pub path: PathBuf,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    pub pools: Vec<PoolRecord>,
    pub mounts: Vec<MountRecord>,
    #[serde(default)]
    pub policies: Vec<crate::service::policy::PolicyRecord>,
    /// NFS exports (crate::nfs); absent in state files of older daemons.
    #[serde(default)]
    pub exports: Vec<crate::service::exports::ExportRecord>,
    /// The next export id: ids are never reused, so old file handles cannot reach a new export.
    #[serde(default)]
    pub next_export_id: u32,
    /// NBD and iSCSI exports of LUNs (service/blockexports.rs); absent in older state files.
    #[serde(default)]
    pub block_exports: Vec<crate::service::blockexports::BlockExportRecord>,
    /// Mirrors and their transfers in progress (service/mirrors/); absent in older state files.
    #[serde(default)]
    pub mirrors: Vec<crate::service::mirrors::MirrorRecord>,
    /// Paired daemons (service/peers/); absent in older state files.
    #[serde(default)]
    pub peers: Vec<crate::service::peers::PeerRecord>,
}

impl State {
    pub fn load(path: &Path) -> Result<Option<State>, String> {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| format!("{} is damaged ({e}): fix or remove it", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("read {}: {e}", path.display())),
        }
    }

    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        write_atomic(path, serde_json::to_string_pretty(self).expect("state serialises").as_bytes(), 0o600)
    }
}

/// Replace `path` with `bytes`: write a temporary file (mode `mode`), fsync, rename over,
/// fsync the directory. A crash leaves the old file or the new one, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
