//! Volumes: create, list, show, change (all fields or none; never a size limit below what
//! the volume uses) and delete (with its snapshots and their clones only when asked).

use super::pools::ratio;
use super::{ApiError, Daemon};
use std::sync::Arc;
use strata_api::{CreateVolume, Done, SetVolume, VolumeInfo};
use strata_engine::{CompressionPolicy, Pool, SyncPolicy, VolumeId, VolumeOptions};

impl Daemon {
    pub(crate) fn volume_info(&self, pool_name: &str, pool: &Arc<Pool>, id: VolumeId) -> Result<VolumeInfo, ApiError> {
        let v = pool.volume_info(id)?;
        let mounted_at = self.mounted_at(pool_name, &v.name);
        let lun = self.lun_info(pool_name, pool, &v.name);
        Ok(VolumeInfo {
            pool: pool_name.into(),
            id: v.id.0,
            record_size: v.record_size,
            used_bytes: v.used_bytes,
            size_bytes: v.quota_bytes,
            sync: v.sync.name().into(),
            created_txg: v.created_txg,
            created_ns: v.created_ns,
            written_bytes: v.written_bytes,
            total_bytes: v.total_bytes,
            snapshots: v.snapshots as u64,
            parent_snapshot: v.parent_snapshot.clone(),
            origin: v.origin.clone(),
            mounted_at,
            compression: v.space.compression.name(),
            reservation_bytes: v.space.reservation_bytes,
            logical_bytes: v.space.logical_bytes,
            saved_bytes: v.space.saved_bytes,
            dedup: v.space.dedup,
            compress_ratio: v.space.logical_bytes.map(|l| ratio(l, v.used_bytes)),
            lun,
            name: v.name,
        })
    }

    pub(crate) fn volume(&self, pool_name: &str, vol: &str) -> Result<VolumeInfo, ApiError> {
        let pool = self.pool(pool_name)?;
        let id = pool.volume_id(vol)?;
        self.volume_info(pool_name, &pool, id)
    }

    pub(crate) fn list_volumes(&self, pool_name: &str) -> Result<Vec<VolumeInfo>, ApiError> {
        let pool = self.pool(pool_name)?;
        pool.volumes().iter().map(|v| self.volume_info(pool_name, &pool, v.id)).collect()
    }

    pub(crate) fn create_volume(&self, pool_name: &str, req: &CreateVolume) -> Result<VolumeInfo, ApiError> {
        let pool = self.pool(pool_name)?;
        let opts = VolumeOptions {
            record_size: req.record_size.unwrap_or(VolumeOptions::default().record_size),
            quota_bytes: req.size_bytes.unwrap_or(0),
            sync: req.sync.as_deref().map(SyncPolicy::parse).transpose()?.unwrap_or_default(),
            compression: req.compression.as_deref().map(CompressionPolicy::parse).transpose()?.unwrap_or_default(),
            reservation_bytes: req.reservation_bytes.unwrap_or(0),
            dedup: req.dedup.unwrap_or(false),
        };
        if req.lun_bytes.is_none() && req.lun_sector_bytes.is_some() {
            return Err(ApiError::bad_request(
                "lun_sector_bytes is given without lun_bytes",
                "give the LUN's size too (`--lun SIZE`), or leave the sector size out",
            ));
        }
        let _g = self.admin.lock().expect("admin");
        let id = pool.create_volume(&req.name, &opts)?;
        if let Some(size) = req.lun_bytes {
            if let Err(e) = self.make_lun(pool_name, &pool, &req.name, size, req.lun_sector_bytes.unwrap_or(512)) {
                if let Err(de) = pool.delete_volume(&req.name) {
                    tracing::error!(pool = pool_name, volume = %req.name, "removing the volume of a refused LUN: {de}");
                }
                return Err(e);
            }
        }
        pool.commit()?;
        self.volume_info(pool_name, &pool, id)
    }

    /// `PATCH`: parse and check every field, then apply; if one is refused, the ones
    /// applied before it are put back, so the volume ends as it was.
    pub(crate) fn set_volume(&self, pool_name: &str, vol: &str, req: &SetVolume) -> Result<VolumeInfo, ApiError> {
        let pool = self.pool(pool_name)?;
        let id = pool.volume_id(vol)?;
        let sync = req.sync.as_deref().map(SyncPolicy::parse).transpose()?;
        let compression = req.compression.as_deref().map(CompressionPolicy::parse).transpose()?;
        let _g = self.admin.lock().expect("admin");
        let old = pool.volume_info(id)?;
        if req.lun_bytes.is_some() && self.lun_info(pool_name, &pool, vol).is_none() {
            return Err(ApiError::bad_request(
                format!("{pool_name}/{vol} is not a LUN"),
                "only a LUN volume (`volume create --lun`) has a LUN size",
            ));
        }
        if let Some(size) = req.size_bytes {
            if size != 0 && size < old.used_bytes {
                return Err(ApiError::conflict(
                    format!(
                        "size limit of {size} bytes is below what {pool_name}/{vol} uses now ({} bytes)",
                        old.used_bytes
                    ),
                    "give a size of at least the used bytes (delete data or snapshots first to go lower)",
                ));
            }
        }
        // Each applied change with the call that undoes it.
        let mut undo: Vec<Box<dyn Fn(&Pool) -> strata_engine::Result<()>>> = Vec::new();
        let result = (|| -> Result<(), ApiError> {
            if let Some(on) = req.dedup {
                pool.set_dedup(id, on)?;
                let was = old.space.dedup;
                undo.push(Box::new(move |p| p.set_dedup(id, was)));
            }
            // Reservation and size limit: the engine checks the reservation against the
            // limit, so grow the limit first and shrink it last.
            let quota_first = req.size_bytes.is_some_and(|s| s == 0 || s >= old.quota_bytes);
            let set_quota = |undo: &mut Vec<Box<dyn Fn(&Pool) -> strata_engine::Result<()>>>| -> Result<(), ApiError> {
                if let Some(size) = req.size_bytes {
                    pool.set_quota(id, size)?;
                    let was = old.quota_bytes;
                    undo.push(Box::new(move |p| p.set_quota(id, was)));
                }
                Ok(())
            };
            if quota_first {
                set_quota(&mut undo)?;
            }
            if let Some(r) = req.reservation_bytes {
                pool.set_reservation(id, r)?;
                let was = old.space.reservation_bytes;
                undo.push(Box::new(move |p| p.set_reservation(id, was)));
            }
            if !quota_first {
                set_quota(&mut undo)?;
            }
            if let Some(s) = sync {
                pool.set_sync_policy(id, s)?;
                let was = old.sync;
                undo.push(Box::new(move |p| p.set_sync_policy(id, was)));
            }
            if let Some(c) = compression {
                pool.set_compression(id, c)?;
                let was = old.space.compression;
                undo.push(Box::new(move |p| p.set_compression(id, was)));
            }
            // Last: a LUN does not shrink back, so nothing may be refused after it grew.
            if let Some(size) = req.lun_bytes {
                self.grow_lun(pool_name, vol, size)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            for u in undo.iter().rev() {
                if let Err(ue) = u(&pool) {
                    tracing::error!(pool = pool_name, volume = vol, "putting back a setting after a refusal: {ue}");
                }
            }
            return Err(e);
        }
        pool.commit()?;
        self.volume_info(pool_name, &pool, id)
    }

    /// Delete a volume. One with snapshots (and clones of them) needs `recursive`; the
    /// refusal names them. Clones are deleted first, then the volume with its snapshots.
    pub(crate) fn delete_volume(&self, pool_name: &str, vol: &str, recursive: bool) -> Result<Done, ApiError> {
        let pool = self.pool(pool_name)?;
        pool.volume_id(vol)?;
        let _g = self.admin.lock().expect("admin");
        self.refuse_mirror_target(pool_name, vol, "deleting it")?;
        self.refuse_mirror_source(pool_name, vol, None)?;
        // Everything that goes with it: its snapshots, and clones of them (and theirs).
        let mut doomed = vec![vol.to_string()];
        let mut also = Vec::new();
        let mut i = 0;
        while i < doomed.len() {
            for s in pool.snapshots(Some(&doomed[i]))? {
                also.push(format!("{pool_name}/{}@{}", s.volume, s.name));
                for c in s.clones {
                    also.push(format!("{pool_name}/{c}"));
                    doomed.push(c);
                }
            }
            i += 1;
        }
        if !also.is_empty() && !recursive {
            return Err(ApiError::conflict(
                format!("volume {pool_name}/{vol} has snapshots or clones: {}", also.join(", ")),
                "delete them too with --recursive (the API's ?recursive=true), or delete them first",
            ));
        }
        for v in &doomed {
            self.refuse_mirror_target(pool_name, v, "deleting it")?;
            self.refuse_mirror_source(pool_name, v, None)?;
            if let Some(id) = self.nfs.exported(pool_name, v).or_else(|| self.blocks.exported(pool_name, v)) {
                return Err(ApiError::conflict(
                    format!("volume {pool_name}/{v} is exported (export {id})"),
                    "delete the export first (`strata export delete`)",
                ));
            }
            if let Some(at) = self.mounted_at(pool_name, v) {
                return Err(ApiError::conflict(
                    format!("volume {pool_name}/{v} is mounted at {}", at.display()),
                    "unmount it first (`strata unmount`)",
                ));
            }
        }
        // Clones before their origins (the engine refuses an origin with clones).
        for v in doomed.iter().rev() {
            pool.delete_volume(v)?;
            self.stats.forget_volume(pool_name, v);
            if self.policies.lock().expect("policies").remove(&format!("{pool_name}/{v}")).is_some() {
                self.save_state()?;
            }
        }
        pool.commit()?;
        tracing::info!(pool = pool_name, volume = vol, also = ?also, "volume deleted");
        Ok(Done { target: format!("{pool_name}/{vol}"), also })
    }
}
