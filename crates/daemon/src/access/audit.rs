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
    /// ROTATE_BYTES (smaller in tests).
    rotate_bytes: u64,
}

fn open_append(path: &PathBuf) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}

impl History {
    pub(crate) fn open(path: PathBuf) -> Result<History, String> {
        let mut file = open_append(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
        // A line torn by a crash is ended, so the next entry starts a line of its own.
        let torn = std::fs::read(&path).map(|b| b.last().is_some_and(|&c| c != b'\n')).unwrap_or(false);
        if torn {
            file.write_all(b"\n").map_err(|e| format!("write {}: {e}", path.display()))?;
        }
        Ok(History { path, file: Mutex::new(file), rotate_bytes: ROTATE_BYTES })
    }

    pub(crate) fn record(&self, entry: &HistoryEntry) {
        let mut line = serde_json::to_vec(entry).expect("history entries serialise");
        line.push(b'\n');
        let mut f = self.file.lock().expect("history");
        let result = (|| -> std::io::Result<()> {
            if f.metadata()?.len() + line.len() as u64 > self.rotate_bytes {
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
    let path = e.target.split('?').next().unwrap_or("");
    let in_target = path == prefix || path.starts_with(&format!("{prefix}/"));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(target: &str, request: Option<&str>) -> HistoryEntry {
        HistoryEntry {
            time_ns: 1,
            caller: "uid 0 (root)".into(),
            operation: "X".into(),
            target: target.into(),
            request: request.map(String::from),
            status: 200,
            result: "ok".into(),
        }
    }

    #[test]
    fn entries_belong_to_the_pool_they_name() {
        assert!(about_pool(&entry("/v1/pools/tank", None), "tank"));
        assert!(about_pool(&entry("/v1/pools/tank?confirm=tank&force=false", None), "tank"));
        assert!(about_pool(&entry("/v1/pools/tank/volumes/db?recursive=true", None), "tank"));
        assert!(!about_pool(&entry("/v1/pools/tanker/volumes", None), "tank"));
        assert!(about_pool(&entry("/v1/pools", Some(r#"{"name":"tank","device":"/x"}"#)), "tank"));
        assert!(!about_pool(&entry("/v1/pools/other/volumes", Some(r#"{"name":"tank"}"#)), "tank"));
        assert!(about_pool(&entry("/v1/exports", Some(r#"{"volume":"tank/db"}"#)), "tank"));
        assert!(about_pool(&entry("/v1/import", Some(r#"{"pool":"tank","dir":"/d"}"#)), "tank"));
    }

    #[test]
    fn the_history_rotates_and_reads_across_both_files() {
        let dir = std::env::temp_dir().join(format!("strata-history-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.jsonl");
        let mut h = History::open(path.clone()).unwrap();
        h.rotate_bytes = 64 << 10;
        let big = "x".repeat(1000);
        let n = (h.rotate_bytes / 1000) as usize + 20;
        let record = |h: &History, i: usize| {
            let mut e = entry(&format!("/v1/pools/p{}", i % 2), Some(&big));
            e.time_ns = i as u64;
            h.record(&e);
        };
        for i in 0..n {
            record(&h, i);
        }
        assert!(dir.join("history.jsonl.1").exists(), "rotated past {} bytes", h.rotate_bytes);
        let all = h.read(None, usize::MAX).unwrap();
        assert_eq!(all.len(), n, "both files are read");
        assert!(all.windows(2).all(|w| w[0].time_ns < w[1].time_ns), "oldest first");
        let last = h.read(Some("p1"), 3).unwrap();
        let want: Vec<u64> = (0..n as u64).filter(|i| i % 2 == 1).collect();
        assert_eq!(last.iter().map(|e| e.time_ns).collect::<Vec<_>>(), want[want.len() - 3..].to_vec());
        // A torn last line (a crash mid-write) is skipped, not fatal, and the next start
        // ends it so that new entries are whole.
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"time_ns\":").unwrap();
        assert_eq!(h.read(None, usize::MAX).unwrap().len(), n);
        drop(h);
        let mut h = History::open(path.clone()).unwrap();
        h.rotate_bytes = 64 << 10;
        record(&h, n);
        assert_eq!(h.read(None, 1).unwrap()[0].time_ns, n as u64, "the entry after a torn line is whole");
        // Far past the bound: the oldest file is dropped, the history stays bounded.
        for i in n + 1..4 * n {
            record(&h, i);
        }
        let kept = h.read(None, usize::MAX).unwrap();
        assert!(kept.len() <= 2 * n, "{} entries kept", kept.len());
        assert_eq!(kept.last().unwrap().time_ns, 4 * n as u64 - 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
