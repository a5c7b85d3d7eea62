//! The snapshot, restore and clone endpoints of the control API (docs/api.md).
//!
//! A snapshot of a mounted volume first flushes the mount (syncfs), so what the kernel still
//! holds in its write cache is in the snapshot, as it would be on a local file system.
//! Restoring a mounted volume unmounts it (refused while files are open: stop the database
//! first), restores, and mounts it again at the same place.

use super::db_freeze::FrozenDatabase;
use super::jobs::JobSpec;
use super::{ApiError, Daemon};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strata_api::{CloneOne, Done, JobInfo, RestoredFile, SnapshotInfo, SplitResult, VolumeInfo};

pub(crate) fn snapshot_info(pool: &str, s: strata_engine::SnapshotInfo) -> SnapshotInfo {
    SnapshotInfo {
        pool: pool.into(),
        volume: s.volume,
        name: s.name,
        id: s.id,
        txg: s.txg,
        created_ns: s.created_ns,
        referenced_bytes: s.referenced_bytes,
        written_bytes: s.written_bytes,
        unique_bytes: s.unique_bytes,
        clones: s.clones,
        group: s.group,
        warning: None,
    }
}

/// Push what the kernel caches for a mount to the daemon (dirty pages become FUSE writes).
/// A failure is the caller's error: a snapshot, restore or clone over a mount whose dirty
/// data did not arrive would silently miss writes the application made.
fn flush_mount(path: &Path) -> Result<(), ApiError> {
    let failed = |e: std::io::Error| {
        ApiError::new(
            strata_api::ErrorKind::Io,
            format!("flush the mount at {} (syncfs): {e}", path.display()),
            "nothing was taken or changed; check the daemon log and the mount, then retry",
        )
    };
    let f = std::fs::File::open(path).map_err(failed)?;
    // SAFETY: syncfs on a descriptor we own for the duration of the call.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    Ok(())
}

fn parse_origin(origin: &str) -> Result<(&str, &str), ApiError> {
    match origin.split_once('@') {
        Some((v, s)) if !v.is_empty() && !s.is_empty() => Ok((v, s)),
        _ => Err(ApiError::bad_request(
            format!("origin {origin:?} is not VOLUME@SNAPSHOT"),
            "e.g. pgdata@before-upgrade",
        )),
    }
}

pub(crate) fn create(
    d: &Daemon,
    pool: &str,
    volumes: &[String],
    name: &str,
    quiesce: Option<&str>,
) -> Result<Vec<SnapshotInfo>, ApiError> {
    let p = d.pool(pool)?;
    if volumes.is_empty() {
        return Err(ApiError::bad_request("no volumes given", "list the volumes of the group in \"volumes\""));
    }
    for v in volumes {
        p.volume_id(v)?; // a clear NotFound before quiescing anything
    }
    let held = quiesce.map(FrozenDatabase::begin).transpose()?;
    for v in volumes {
        if let Some(at) = d.mounted_at(pool, v) {
            flush_mount(&at)?;
        }
    }
    let refs: Vec<&str> = volumes.iter().map(|s| s.as_str()).collect();
    let t0 = std::time::Instant::now();
    let taken = p.create_snapshots(&refs, name);
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let released = held.map(FrozenDatabase::release).transpose();
    let infos = taken?;
    tracing::info!(pool, volumes = ?refs, name, ms, quiesced = quiesce.is_some(), "snapshot taken");
    let mut out: Vec<SnapshotInfo> = infos.into_iter().map(|s| snapshot_info(pool, s)).collect();
    if let Err(e) = released {
        tracing::warn!(pool, name, "snapshot taken, but releasing the database failed: {}", e.message);
        for o in &mut out {
            o.warning = Some(format!("snapshot taken, but releasing the database failed: {}", e.message));
        }
    }
    Ok(out)
}

pub(crate) fn list(d: &Daemon, pool: &str, volume: Option<&str>) -> Result<Vec<SnapshotInfo>, ApiError> {
    Ok(d.pool(pool)?.snapshots(volume)?.into_iter().map(|s| snapshot_info(pool, s)).collect())
}

pub(crate) fn show(d: &Daemon, pool: &str, volume: &str, name: &str) -> Result<SnapshotInfo, ApiError> {
    Ok(snapshot_info(pool, d.pool(pool)?.snapshot(volume, name)?))
}

pub(crate) fn delete(d: &Daemon, pool: &str, volume: &str, name: &str) -> Result<Done, ApiError> {
    let p = d.pool(pool)?;
    let _g = d.admin.lock().expect("admin");
    d.refuse_mirror_source(pool, volume, Some(name))?;
    if let Some(id) = d.blocks.snapshot_exported(pool, volume, name) {
        return Err(ApiError::conflict(
            format!("snapshot {pool}/{volume}@{name} is exported (export {id})"),
            "delete the export first (`strata export delete`)",
        ));
    }
    p.delete_snapshot(volume, name)?;
    tracing::info!(pool, volume, snapshot = name, "snapshot deleted");
    Ok(Done { target: format!("{pool}/{volume}@{name}"), also: Vec::new() })
}

/// Restore `vols` (one, or the volumes of a group snapshot) to their snapshots `snapshot`
/// in one txg, unmounting and remounting the mounted ones.
pub(crate) fn restore(d: &Daemon, pool: &str, vols: &[String], snapshot: &str) -> Result<Vec<VolumeInfo>, ApiError> {
    let p = d.pool(pool)?;
    for vol in vols {
        p.snapshot(vol, snapshot)?; // a clear NotFound before touching any mount
    }
    let _g = d.admin.lock().expect("admin");
    for vol in vols {
        d.refuse_mirror_target(pool, vol, "a restore")?;
        if let Some(id) = d.blocks.records().iter().find(|r| r.volume == format!("{pool}/{vol}")).map(|r| r.id) {
            return Err(ApiError::conflict(
                format!("LUN {pool}/{vol} is exported (export {id})"),
                "disconnect its clients and delete the export (`strata export delete`), restore, and export it again: a client must not keep cached blocks the restore replaces",
            ));
        }
        if let Some(id) = d.nfs.exported(pool, vol) {
            return Err(ApiError::conflict(
                format!("volume {pool}/{vol} is exported over NFS (export {id})"),
                "delete the export (`strata export delete`), restore, and export it again: NFS clients must not keep handles to files the restore replaces",
            ));
        }
    }
    let mounted: Vec<(String, PathBuf)> =
        vols.iter().filter_map(|v| d.mounted_at(pool, v).map(|at| (v.clone(), at))).collect();
    for (_, path) in &mounted {
        flush_mount(path)?;
    }
    let mut unmounted: Vec<&(String, PathBuf)> = Vec::new();
    for m in &mounted {
        let (vol, path) = m;
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| ApiError::bad_request("mount path contains NUL", "fix the path"))?;
        // SAFETY: a plain umount2 of a path we mounted; fails with EBUSY while files are open.
        if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
            let e = std::io::Error::last_os_error();
            for (v, at) in unmounted {
                d.unmount(at, false)?;
                d.mount(&format!("{pool}/{v}"), at, false)?;
            }
            return Err(ApiError::conflict(
                format!("volume {pool}/{vol} is in use at {}: {e}", path.display()),
                "stop what has files open there (the database), then restore",
            ));
        }
        unmounted.push(m);
    }
    for (_, path) in &mounted {
        d.unmount(path, false)?;
    }
    let list: Vec<(&str, &str)> = vols.iter().map(|v| (v.as_str(), snapshot)).collect();
    // A sync mirror of these volumes stops journaling first: no frame of the restored
    // state may follow the frames of the old one (it is armed again afterwards).
    d.sync_source_changed(pool, vols);
    let r = p.restore_volumes(&list);
    for (vol, path) in &mounted {
        d.mount(&format!("{pool}/{vol}"), path, false)?;
    }
    r?;
    tracing::info!(pool, volumes = ?vols, snapshot, "restored");
    vols.iter().map(|vol| d.volume(pool, vol)).collect()
}

pub(crate) fn restore_file(
    d: &Daemon,
    pool: &str,
    vol: &str,
    snapshot: &str,
    file: &str,
) -> Result<RestoredFile, ApiError> {
    let p = d.pool(pool)?;
    p.snapshot(vol, snapshot)?;
    let at = d.mounted_at(pool, vol);
    if let Some(path) = &at {
        flush_mount(path)?; // so no cached write lands on the file after the restore
    }
    let fs = d.filesystems.get(pool, vol, p.clone())?;
    // Blocks shared from the snapshot are not operations the sync tap sees: a sync mirror
    // of the volume stops journaling first (and is armed again afterwards).
    d.sync_source_changed(pool, &[vol.to_string()]);
    let t0 = std::time::Instant::now();
    let r = fs.restore_file(snapshot, file.as_bytes()).map_err(|e| {
        ApiError::bad_request(
            format!("restore {file} from {pool}/{vol}@{snapshot}: {e}"),
            "give the file's path inside the volume (as under .snapshot/NAME/)",
        )
    })?;
    if let Some(path) = &at {
        if let Some(m) = d.mounts.lock().expect("mounts").get(path) {
            if let Some(s) = &m.session {
                let leaf = file.rsplit('/').next().unwrap_or(file);
                strata_fuse::invalidate(s, r.ino, r.parent, std::ffi::OsStr::new(leaf));
            }
        }
    }
    tracing::info!(pool, volume = vol, snapshot, file, ms = t0.elapsed().as_secs_f64() * 1e3, stats = ?r.stats, "file restored");
    Ok(RestoredFile {
        volume: format!("{pool}/{vol}"),
        snapshot: snapshot.into(),
        file: file.into(),
        created: r.created,
        shared_bytes: r.stats.shared_bytes,
        copied_bytes: r.stats.copied_bytes,
        unchanged_bytes: r.stats.unchanged_bytes,
    })
}

/// Clones (one, or one per volume of a group snapshot) in one txg.
pub(crate) fn clone(d: &Daemon, pool: &str, all: &[CloneOne]) -> Result<Vec<VolumeInfo>, ApiError> {
    let mut list = Vec::new();
    for c in all {
        let (v, s) = parse_origin(&c.origin)?;
        list.push((v, s, c.name.as_str()));
    }
    let p = d.pool(pool)?;
    // Clones are made from committed snapshots; a mounted origin's cached writes are not
    // in its snapshots anyway, so there is nothing to flush here.
    let _g = d.admin.lock().expect("admin");
    let t0 = std::time::Instant::now();
    let ids = p.clone_volumes(&list)?;
    let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
    tracing::info!(pool, clones = ?names, ms = t0.elapsed().as_secs_f64() * 1e3, "clones created");
    ids.into_iter().map(|id| d.volume_info(pool, &p, id)).collect()
}

/// Start splitting clone `pool/vol` from its origin, as a job (cancel stops it between
/// records: the volume stays a clone, and a new split goes on from what was copied).
pub(crate) fn start_split(d: &Arc<Daemon>, pool: &str, vol: &str, caller: &str) -> Result<JobInfo, ApiError> {
    let p = d.pool(pool)?;
    let info = d.volume(pool, vol)?;
    if info.origin.is_none() {
        return Err(ApiError::bad_request(
            format!("volume {pool}/{vol} is not a clone: nothing to split"),
            "split a clone (`strata clone list`)",
        ));
    }
    if let Some(j) = d.jobs.running("split", pool, Some(vol)) {
        return Err(ApiError::conflict(
            format!("clone {pool}/{vol} is being split already (job {})", j.id),
            "follow it with `strata job show ID`",
        ));
    }
    let spec = JobSpec { kind: "split", pool, target: Some(vol), caller, cancellable: true };
    let (d2, pool_name, vol_name) = (d.clone(), pool.to_string(), vol.to_string());
    d.jobs.spawn(spec, move |job| {
        let t0 = std::time::Instant::now();
        let st = p.split_clone_observed(&vol_name, Some(job))?;
        tracing::info!(
            pool = pool_name,
            volume = vol_name,
            copied = st.copied_bytes,
            stopped = st.stopped,
            secs = t0.elapsed().as_secs_f64(),
            "clone split"
        );
        let r = SplitResult {
            volume: d2.volume(&pool_name, &vol_name)?,
            copied_bytes: st.copied_bytes,
            rewritten_keys: st.rewritten_keys,
        };
        Ok(serde_json::to_value(r).expect("results serialise"))
    })
}
