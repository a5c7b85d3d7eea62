//! Block LUNs: volumes holding one fixed-size file that the block front ends (NBD, iSCSI)
//! serve (strata-lun, DESIGN.md §4). `volume create --lun SIZE` makes one; `volume set
//! --lun-size` grows it.
//!
//! One `VolumeLun` per volume while anything serves it (a registry of weak references, as
//! for file systems): growing a LUN changes the size every export of it answers. A LUN's
//! identity (SCSI serial and designator, NBD description) comes from the pool's guid and the
//! volume's id, so it stays the same across restarts and differs for a clone.

use super::{ApiError, Daemon};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use strata_api::LunInfo;
use strata_engine::Pool;
use strata_lun::{LunError, LunErrorKind, VolumeLun};

#[derive(Default)]
pub(crate) struct LunRegistry {
    open: Mutex<HashMap<(String, String), Weak<VolumeLun>>>,
}

/// A LUN's identity: pool guid and volume id, hashed (stable, distinct per volume).
pub(crate) fn lun_identity(pool_guid: u64, volume_id: u64) -> [u8; 16] {
    let mut h = blake3::Hasher::new();
    h.update(b"strata lun identity v1");
    h.update(&pool_guid.to_le_bytes());
    h.update(&volume_id.to_le_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.finalize().as_bytes()[..16]);
    out
}

pub(crate) fn lun_error(what: &str, e: LunError) -> ApiError {
    match e.kind {
        LunErrorKind::Invalid | LunErrorKind::OutOfRange => {
            ApiError::bad_request(format!("{what}: {}", e.message), "fix the size (see `strata volume create --help`)")
        }
        LunErrorKind::NoSpace => {
            ApiError::new(strata_api::ErrorKind::NoSpace, format!("{what}: {}", e.message), "free space")
        }
        LunErrorKind::ReadOnly => {
            ApiError::new(strata_api::ErrorKind::ReadOnly, format!("{what}: {}", e.message), "the pool refuses writes")
        }
        LunErrorKind::Io => ApiError::internal(format!("{what}: {}", e.message)),
    }
}

impl Daemon {
    /// The LUN of `pool_name/vol`, if the volume is one.
    pub(crate) fn lun_info(&self, pool_name: &str, pool: &Arc<Pool>, vol: &str) -> Option<LunInfo> {
        if let Some(l) = self.luns.open.lock().expect("luns").get(&(pool_name.to_string(), vol.to_string())) {
            if let Some(l) = l.upgrade() {
                use strata_lun::Lun;
                return Some(LunInfo { size_bytes: l.size(), sector_bytes: l.block_size() });
            }
        }
        // Read only: mounting the live file system would create one in a volume that has
        // none yet (and charge the volume for it), just to be asked whether it is a LUN.
        let id = pool.volume_id(vol).ok()?;
        let fs = strata_fs::VolumeFs::mount_read_only(pool.clone(), id, Arc::new(crate::SystemClock)).ok()?;
        VolumeLun::probe(&fs).map(|(size_bytes, sector_bytes)| LunInfo { size_bytes, sector_bytes })
    }

    /// The served LUN of the live volume `pool_name/vol` (opened if nobody serves it yet).
    pub(crate) fn open_lun(&self, pool_name: &str, vol: &str) -> Result<Arc<VolumeLun>, ApiError> {
        let pool = self.pool(pool_name)?;
        let id = pool.volume_id(vol)?;
        let key = (pool_name.to_string(), vol.to_string());
        let mut open = self.luns.open.lock().expect("luns");
        open.retain(|_, w| w.strong_count() > 0);
        if let Some(l) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(l);
        }
        let fs = self.filesystems.get(pool_name, vol, pool.clone())?;
        let lun = VolumeLun::open(fs, lun_identity(pool.guid(), id.0), false).map_err(|e| {
            ApiError::bad_request(
                format!("{pool_name}/{vol}: {}", e.message),
                "create a LUN volume with `strata volume create POOL/VOL --lun SIZE`",
            )
        })?;
        let lun = Arc::new(lun);
        open.insert(key, Arc::downgrade(&lun));
        Ok(lun)
    }

    /// Make the new, empty volume `pool_name/vol` a LUN of `size` bytes.
    pub(crate) fn make_lun(
        &self,
        pool_name: &str,
        pool: &Arc<Pool>,
        vol: &str,
        size: u64,
        sector: u32,
    ) -> Result<(), ApiError> {
        let fs = self.filesystems.get(pool_name, vol, pool.clone())?;
        VolumeLun::create(&fs, size, sector).map_err(|e| lun_error(&format!("make {pool_name}/{vol} a LUN"), e))
    }

    /// Grow the LUN of `pool_name/vol` to `size` bytes (every export of it sees the new size).
    pub(crate) fn grow_lun(&self, pool_name: &str, vol: &str, size: u64) -> Result<(), ApiError> {
        let lun = self.open_lun(pool_name, vol)?;
        lun.grow(size).map_err(|e| lun_error(&format!("grow the LUN {pool_name}/{vol}"), e))
    }
}
