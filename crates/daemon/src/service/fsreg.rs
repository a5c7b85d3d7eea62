//! Open volume file systems, shared by the front ends: a volume that is both FUSE-mounted
//! and NFS-exported is served by one `VolumeFs`, so both see the same state (and only one
//! instance ever reclaims the volume's orphans at open, which two instances would race on).
//!
//! The registry holds weak references: a file system lives as long as a mount or an
//! export holds it, and the next user opens it again.

use super::ApiError;
use crate::SystemClock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use strata_engine::Pool;
use strata_fs::{Caller, VolumeFs};

#[derive(Default)]
pub(crate) struct FsRegistry {
    open: Mutex<HashMap<(String, String), Weak<VolumeFs>>>,
}

impl FsRegistry {
    /// The file system of `pool_name/vol_name`: the one already open, or a new one.
    pub fn get(&self, pool_name: &str, vol_name: &str, pool: Arc<Pool>) -> Result<Arc<VolumeFs>, ApiError> {
        let mut open = self.open.lock().expect("open file systems");
        open.retain(|_, w| w.strong_count() > 0);
        let key = (pool_name.to_string(), vol_name.to_string());
        if let Some(fs) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(fs);
        }
        let vol = pool.volume_id(vol_name).map_err(ApiError::from)?;
        let fs = VolumeFs::mount(pool, vol, Arc::new(SystemClock), Caller { uid: 0, gid: 0 })
            .map_err(|e| ApiError::internal(format!("open file system of {pool_name}/{vol_name}: {e}")))?;
        let fs = Arc::new(fs);
        open.insert(key, Arc::downgrade(&fs));
        Ok(fs)
    }
}
