//! The audit history: every change asked of the daemon — time, caller, operation, target,
//! request, result — one JSON line each in DATA_DIR/history.jsonl (`strata history`;
//! `zpool history -l` is the model). Reads are not recorded; refused requests are.
//!
//! Each entry is written and fdatasync'ed before the response goes out, so a change the
//! caller saw answered is in the history after any crash. The file is bounded: past
//! `ROTATE_BYTES` it becomes history.jsonl.1 (the previous .1 is dropped), so the newest
//! 16-32 MiB of history are kept — years of administration, hours of a flood of refused
//! requests.

use crate::service::ApiError;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Mutex;
use strata_api::HistoryEntry;

/// Size at which the history file is rotated (see the module comment).
const ROTATE_BYTES: u64 = 16 << 20;

pub(crate) struct History {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

fn open_append(path: &PathBuf) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}

impl History {
    pub(crate) fn open(path: PathBuf) -> Result<History, String> {
        let file = open_append(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
        Ok(History { path, file: Mutex::new(file) })
    }

    pub(crate) fn record(&self, entry: &HistoryEntry) {
        let mut line = serde_json::to_vec(entry).expect("history entries serialise");
        line.push(b'\n');
        let mut f = self.file.lock().expect("history");
        let result = (|| -> std::io::Result<()> {
            if f.metadata()?.len() + line.len() as u64 > ROTATE_BYTES {
                let mut old = self.path.as_os_str().to_owned();
                old.push(".1");
                std::fs::rename(&self.path, PathBuf::from(old))?;
                *f = open_append(&self.path)?;
            }
            f.write_all(&line)?;
            f.sync_data()
        })();
        if let Err(e) = result {
            tracing::error!(path = %self.path.display(), "record history: {e}");
        }
    }

    /// The newest `limit` entries (oldest first), of pool `pool` if given.
    pub(crate) fn read(&self, pool: Option<&str>, limit: usize) -> Result<Vec<HistoryEntry>, ApiError> {
        let _g = self.file.lock().expect("history");
        let mut old = self.path.as_os_str().to_owned();
        old.push(".1");
        let mut out = Vec::new();
        for path in [PathBuf::from(old), self.path.clone()] {
            let f = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ApiError::internal(format!("read {}: {e}", path.display()))),
            };
            for line in std::io::BufReader::new(f).lines() {
                let line = line.map_err(|e| ApiError::internal(format!("read {}: {e}", path.display())))?;
                // A line torn by a crash mid-write is skipped, not fatal.
                let Ok(e) = serde_json::from_str::<HistoryEntry>(&line) else { continue };
                if pool.is_none_or(|p| about_pool(&e, p)) {
                    out.push(e);
                }
            }
        }
        let skip = out.len().saturating_sub(limit);
        Ok(out.split_off(skip))
    }
}

/// Is the entry about pool `p`? Its target is /v1/pools/P/..., or the request names it.
fn about_pool(e: &HistoryEntry, p: &str) -> bool {
    let prefix = format!("/v1/pools/{p}");
    let in_target = e.target == prefix || e.target.starts_with(&format!("{prefix}/"));
    let in_body = e.request.as_deref().is_some_and(|r| {
        serde_json::from_str::<serde_json::Value>(r).is_ok_and(|v| {
            v.get("name").and_then(|n| n.as_str()) == Some(p) && e.target == "/v1/pools"
                || v.get("volume").and_then(|n| n.as_str()).is_some_and(|vol| vol.split('/').next() == Some(p))
                || v.get("pool").and_then(|n| n.as_str()) == Some(p)
                || v.get("new_name").and_then(|n| n.as_str()) == Some(p)
        })
    });
    in_target || in_body
}
