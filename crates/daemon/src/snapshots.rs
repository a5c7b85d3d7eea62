//! The snapshot, restore and clone endpoints of the control API (docs/api.md).
//!
//! A snapshot of a mounted volume first flushes the mount (syncfs), so what the kernel still
//! holds in its write cache is in the snapshot, as it would be on a local file system.
//! Restoring a mounted volume unmounts it (refused while files are open: stop the database
//! first), restores, and mounts it again at the same place.

use crate::api::{body, mounted_at, volume_json, ApiError, Reply};
use crate::quiesce::Held;
use crate::Daemon;
use serde::Deserialize;
use serde_json::{json, Value};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use strata_engine::SnapshotInfo;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateSnapshot {
    name: String,
    /// For a group snapshot (POST /v1/pools/{p}/snapshots): every volume to include.
    volumes: Option<Vec<String>>,
    /// Connection URL of a database to quiesce around the snapshot (see quiesce.rs).
    quiesce: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreReq {
    snapshot: String,
    /// More volumes of a group snapshot, restored in the same txg.
    group: Option<Vec<String>>,
    /// Restore this one file (a path inside the volume) instead of the whole volume.
    file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloneReq {
    /// VOLUME@SNAPSHOT in the same pool.
    origin: String,
    name: String,
    /// More clones made in the same txg (the other volumes of a group snapshot).
    group: Option<Vec<CloneOne>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloneOne {
    origin: String,
    name: String,
}

pub(crate) fn snapshot_json(pool: &str, s: &SnapshotInfo) -> Value {
    json!({
        "pool": pool, "volume": s.volume, "name": s.name, "id": s.id, "txg": s.txg, "created_ns": s.created_ns,
        "referenced_bytes": s.referenced_bytes, "written_bytes": s.written_bytes, "unique_bytes": s.unique_bytes,
        "clones": s.clones, "group": s.group,
    })
}

/// Push what the kernel caches for a mount to the daemon (dirty pages become FUSE writes).
fn flush_mount(path: &Path) {
    match std::fs::File::open(path) {
        // SAFETY: syncfs on a descriptor we own for the duration of the call.
        Ok(f) => {
            if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
                tracing::warn!(path = %path.display(), "syncfs: {}", std::io::Error::last_os_error());
            }
        }
        Err(e) => tracing::warn!(path = %path.display(), "syncfs: open: {e}"),
    }
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

pub(crate) fn create(d: &Daemon, pool: &str, volumes: &[String], name: &str, quiesce: Option<&str>) -> Reply {
    let p = d.pool(pool)?;
    for v in volumes {
        p.volume_id(v)?; // a clear NotFound before quiescing anything
    }
    let held = quiesce.map(Held::begin).transpose()?;
    for v in volumes {
        if let Some(at) = mounted_at(d, pool, v) {
            flush_mount(&at);
        }
    }
    let refs: Vec<&str> = volumes.iter().map(|s| s.as_str()).collect();
    let t0 = std::time::Instant::now();
    let taken = p.create_snapshots(&refs, name);
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let released = held.map(Held::release).transpose();
    let infos = taken?;
    tracing::info!(pool, volumes = ?refs, name, ms, quiesced = quiesce.is_some(), "snapshot taken");
    let mut out: Vec<Value> = infos.iter().map(|s| snapshot_json(pool, s)).collect();
    if let Err(e) = released {
        tracing::warn!(pool, name, "snapshot taken, but releasing the database failed: {}", e.message);
        for o in &mut out {
            o["warning"] = json!(format!("snapshot taken, but releasing the database failed: {}", e.message));
        }
    }
    Ok((201, if out.len() == 1 { out[0].clone() } else { Value::Array(out) }))
}

/// Restore `vols` (one, or the volumes of a group snapshot) to their snapshots `snapshot`
/// in one txg, unmounting and remounting the mounted ones.
fn restore(d: &Daemon, pool: &str, vols: &[String], snapshot: &str) -> Reply {
    let p = d.pool(pool)?;
    for vol in vols {
        p.snapshot(vol, snapshot)?; // a clear NotFound before touching any mount
    }
    let _g = d.admin.lock().expect("admin");
    for vol in vols {
        if let Some(id) = d.nfs.exported(pool, vol) {
            return Err(ApiError::conflict(
                format!("volume {pool}/{vol} is exported over NFS (export {id})"),
                "delete the export (`strata export delete`), restore, and export it again: NFS clients must not keep handles to files the restore replaces",
            ));
        }
    }
    let mounted: Vec<(String, PathBuf)> =
        vols.iter().filter_map(|v| mounted_at(d, pool, v).map(|at| (v.clone(), at))).collect();
    let mut unmounted: Vec<&(String, PathBuf)> = Vec::new();
    for m in &mounted {
        let (vol, path) = m;
        flush_mount(path);
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
    let r = p.restore_volumes(&list);
    for (vol, path) in &mounted {
        d.mount(&format!("{pool}/{vol}"), path, false)?;
    }
    r?;
    tracing::info!(pool, volumes = ?vols, snapshot, "restored");
    let mut out = Vec::new();
    for vol in vols {
        out.push(volume_json(pool, &p.volume_info(p.volume_id(vol)?)?, mounted_at(d, pool, vol).as_ref()));
    }
    Ok((200, if out.len() == 1 { out.remove(0) } else { Value::Array(out) }))
}

fn restore_file(d: &Daemon, pool: &str, vol: &str, snapshot: &str, file: &str) -> Reply {
    let p = d.pool(pool)?;
    p.snapshot(vol, snapshot)?;
    let at = mounted_at(d, pool, vol);
    if let Some(path) = &at {
        flush_mount(path); // so no cached write lands on the file after the restore
    }
    let fs = d.filesystems.get(pool, vol, p.clone())?;
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
    Ok((
        200,
        json!({"volume": format!("{pool}/{vol}"), "snapshot": snapshot, "file": file, "created": r.created,
               "shared_bytes": r.stats.shared_bytes, "copied_bytes": r.stats.copied_bytes,
               "unchanged_bytes": r.stats.unchanged_bytes}),
    ))
}

/// The snapshot endpoints; None when the path is not one of them.
pub(crate) fn route(d: &Daemon, method: &str, parts: &[&str], req: &mut tiny_http::Request) -> Option<Reply> {
    let reply = match (method, parts) {
        ("GET", ["v1", "pools", p, "snapshots"]) => (|| {
            let pool = d.pool(p)?;
            Ok((200, Value::Array(pool.snapshots(None)?.iter().map(|s| snapshot_json(p, s)).collect())))
        })(),
        ("POST", ["v1", "pools", p, "snapshots"]) => (|| {
            let b: CreateSnapshot = body(req)?;
            let vols = b.volumes.filter(|v| !v.is_empty()).ok_or_else(|| {
                ApiError::bad_request("no volumes given", "list the volumes of the group in \"volumes\"")
            })?;
            create(d, p, &vols, &b.name, b.quiesce.as_deref())
        })(),
        ("GET", ["v1", "pools", p, "volumes", v, "snapshots"]) => (|| {
            let pool = d.pool(p)?;
            Ok((200, Value::Array(pool.snapshots(Some(v))?.iter().map(|s| snapshot_json(p, s)).collect())))
        })(),
        ("POST", ["v1", "pools", p, "volumes", v, "snapshots"]) => (|| {
            let b: CreateSnapshot = body(req)?;
            if b.volumes.is_some() {
                return Err(ApiError::bad_request(
                    "\"volumes\" given for a one-volume snapshot",
                    "POST /v1/pools/{pool}/snapshots for a group",
                ));
            }
            create(d, p, &[v.to_string()], &b.name, b.quiesce.as_deref())
        })(),
        ("GET", ["v1", "pools", p, "volumes", v, "snapshots", s]) => {
            (|| Ok((200, snapshot_json(p, &d.pool(p)?.snapshot(v, s)?))))()
        }
        ("DELETE", ["v1", "pools", p, "volumes", v, "snapshots", s]) => (|| {
            let pool = d.pool(p)?;
            let _g = d.admin.lock().expect("admin");
            pool.delete_snapshot(v, s)?;
            tracing::info!(pool = p, volume = v, snapshot = s, "snapshot deleted");
            Ok((200, json!({"deleted": format!("{p}/{v}@{s}")})))
        })(),
        ("POST", ["v1", "pools", p, "volumes", v, "restore"]) => (|| {
            let b: RestoreReq = body(req)?;
            match &b.file {
                Some(_) if b.group.is_some() => {
                    Err(ApiError::bad_request("\"file\" and \"group\" together", "restore one file of one volume"))
                }
                Some(f) => restore_file(d, p, v, &b.snapshot, f),
                None => {
                    let mut vols = vec![v.to_string()];
                    vols.extend(b.group.unwrap_or_default());
                    restore(d, p, &vols, &b.snapshot)
                }
            }
        })(),
        ("POST", ["v1", "pools", p, "clones"]) => (|| {
            let b: CloneReq = body(req)?;
            let mut all = vec![(b.origin.clone(), b.name.clone())];
            all.extend(b.group.unwrap_or_default().into_iter().map(|c| (c.origin, c.name)));
            let mut list = Vec::new();
            for (origin, name) in &all {
                let (v, s) = parse_origin(origin)?;
                list.push((v, s, name.as_str()));
            }
            let pool = d.pool(p)?;
            let _g = d.admin.lock().expect("admin");
            let t0 = std::time::Instant::now();
            let ids = pool.clone_volumes(&list)?;
            tracing::info!(pool = p, clones = ?all, ms = t0.elapsed().as_secs_f64() * 1e3, "clones created");
            let mut out = Vec::new();
            for id in ids {
                out.push(volume_json(p, &pool.volume_info(id)?, None));
            }
            Ok((201, if out.len() == 1 { out.remove(0) } else { Value::Array(out) }))
        })(),
        ("POST", ["v1", "pools", p, "volumes", v, "split"]) => (|| {
            let pool = d.pool(p)?;
            let t0 = std::time::Instant::now();
            let st = pool.split_clone(v)?;
            let secs = t0.elapsed().as_secs_f64();
            tracing::info!(pool = p, volume = v, copied = st.copied_bytes, secs, "clone split");
            let id = pool.volume_id(v)?;
            let mut out = volume_json(p, &pool.volume_info(id)?, mounted_at(d, p, v).as_ref());
            out["copied_bytes"] = json!(st.copied_bytes);
            out["rewritten_keys"] = json!(st.rewritten_keys);
            Ok((200, out))
        })(),
        (m, ["v1", "pools", p, "volumes", v, "policy"]) => crate::policy::route(d, m, p, v, req),
        _ => return None,
    };
    Some(reply)
}
