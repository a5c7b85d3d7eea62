//! Separate intent-log devices of the daemon's pools (`pool create --log-device`): the
//! checks made before one is formatted, so bad input fails before anything is written.

use super::ApiError;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use strata_engine::format::logdev::MIN_LOG_DEVICE_SIZE;
use strata_engine::pool::log_device::read_log_device_label;
use strata_engine::{BlockDevice, Pool, PoolOptions};

/// Open `log` as the log device of a new pool on `device`: it must exist, be another file
/// than `device`, hold at least `MIN_LOG_DEVICE_SIZE` bytes, and hold neither a pool nor
/// another pool's log.
pub(crate) fn open_new_log_device(device: &Path, log: &Path, force: bool) -> Result<Arc<dyn BlockDevice>, ApiError> {
    let meta = std::fs::metadata(log).map_err(|e| {
        ApiError::bad_request(
            format!("log device {}: {e}", log.display()),
            "give an existing block device or image file (e.g. `truncate -s 1G PATH`)",
        )
    })?;
    let same = match std::fs::metadata(device) {
        Ok(d) => d.dev() == meta.dev() && d.ino() == meta.ino(),
        Err(_) => std::path::absolute(device).ok() == std::path::absolute(log).ok(),
    };
    if same {
        return Err(ApiError::bad_request(
            format!("log device {} is the pool's device", log.display()),
            "the intent log needs a device of its own: give another file or block device",
        ));
    }
    let dev = super::open_device(log, None)?;
    if dev.size_bytes() < MIN_LOG_DEVICE_SIZE {
        return Err(ApiError::bad_request(
            format!(
                "log device {} has {} bytes; a log device needs at least {} MiB",
                log.display(),
                dev.size_bytes(),
                MIN_LOG_DEVICE_SIZE >> 20
            ),
            "use a larger device or image file (e.g. `truncate -s 1G PATH`)",
        ));
    }
    if Pool::open(dev.clone(), PoolOptions { read_only: true, discard_missing_log: true, ..super::pool_options() })
        .is_ok()
    {
        return Err(ApiError::conflict(
            format!("log device {} holds a Strata pool", log.display()),
            "give another device, or wipe this one first",
        ));
    }
    if let Ok(l) = read_log_device_label(dev.as_ref()) {
        return Err(ApiError::conflict(
            format!("{} is already the log device of pool {} ({:016x})", log.display(), l.pool_name, l.pool_guid),
            "give another device; if that pool is gone, wipe its first 4 KiB \
             (dd if=/dev/zero of=PATH bs=4096 count=1 conv=notrunc)",
        ));
    }
    super::devcheck::refuse_foreign_data(log, force)?;
    Ok(dev)
}
