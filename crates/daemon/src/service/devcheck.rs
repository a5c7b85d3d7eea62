//! What `pool create` (and a new log device) must not format: a device holding a Strata
//! pool or log, and — unless forced — anything else recognisable in its first and last
//! MiB (a file system, a partition table, an LVM/RAID/ZFS label, any non-zero data). The
//! probe is the engine's (`device::probe`); this turns its finding into the refusal.

use super::ApiError;
use std::path::Path;
use strata_engine::device::{probe_foreign_data, ForeignData};

/// Refuse `path` if it holds something; `force` lets foreign data (not a Strata pool) go.
pub(crate) fn refuse_foreign_data(path: &Path, force: bool) -> Result<(), ApiError> {
    let found = probe_foreign_data(path).map_err(|e| {
        ApiError::bad_request(
            format!("read {} to see what it holds: {e}", path.display()),
            "check the path and permissions",
        )
    })?;
    match found {
        None => Ok(()),
        Some(f @ ForeignData::Strata { .. }) => Err(ApiError::conflict(
            format!("{} already holds a Strata pool or log device: {f}", path.display()),
            "import it (`strata pool import`), or destroy that pool first; a device holding a Strata pool is never formatted over",
        )),
        Some(_) if force => {
            tracing::warn!(device = %path.display(), "formatting over existing data (--force)");
            Ok(())
        }
        Some(f) => Err(ApiError::conflict(
            format!("{} holds {f}", path.display()),
            "if that data is no longer wanted, give --force (it will be overwritten); otherwise choose another device",
        )),
    }
}
