//! The sync gate: whoever decides whether this pool may acknowledge a sync of a volume —
//! the daemon's failover lease (a daemon that cannot prove it still owns a volume must not
//! tell a database its writes are durable: another host may be serving the volume).
//!
//! A sync of a gated volume (`Pool::sync_object`, or `Pool::sync_log` while any volume is
//! gated) asks the gate before its log write and again after it (and after the sync tap's
//! wait): a lease that ran out while the sync waited fails it, so no sync is acknowledged
//! after the moment the gate closed. A refused sync fails with an I/O error (EIO through
//! the file system, the NBD and iSCSI servers); what it wrote stays in the pool.

use crate::error::{Error, Result};
use crate::pool::Pool;
use std::sync::Arc;

/// Decides whether syncs may be acknowledged.
pub trait SyncGate: Send + Sync {
    /// Ok if a sync of volume `vol` (None: of the whole pool) may be acknowledged now;
    /// else why not.
    fn check(&self, vol: Option<u64>) -> std::result::Result<(), String>;
}

impl Pool {
    /// Install `gate` (or remove it with None).
    pub fn set_sync_gate(&self, gate: Option<Arc<dyn SyncGate>>) {
        self.lock().gate = gate;
    }

    pub(crate) fn check_gate(gate: &Option<Arc<dyn SyncGate>>, vol: Option<u64>) -> Result<()> {
        match gate.as_ref().map(|g| g.check(vol)) {
            Some(Err(why)) => Err(Error::Io {
                context: "acknowledge a sync",
                source: std::io::Error::other(format!("{why}: the sync is refused (fenced)")),
            }),
            _ => Ok(()),
        }
    }
}
