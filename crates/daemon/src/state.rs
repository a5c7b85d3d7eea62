//! The daemon's persistent state file: which pools to open and what to mount.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolRecord {
    pub name: String,
    pub device: PathBuf,
    /// The pool's separate intent-log device; absent for pools without one (and in state
    /// files of older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_device: Option<PathBuf>,
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
    pub policies: Vec<crate::policy::PolicyRecord>,
    /// NFS exports (crate::nfs); absent in state files of older daemons.
    #[serde(default)]
    pub exports: Vec<crate::nfs::ExportRecord>,
    /// The next export id: ids are never reused, so old file handles cannot reach a new export.
    #[serde(default)]
    pub next_export_id: u32,
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

    /// Write to a temporary file, fsync, rename over, fsync the directory.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(serde_json::to_string_pretty(self).expect("state serialises").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}
