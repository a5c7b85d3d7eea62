//! The control API: JSON over HTTP/1.1 on 127.0.0.1. Every CLI verb is one call here.
//! Reference: docs/api.md (and GET /v1/openapi.json).
//!
//! Errors are `{"error": {"kind", "message", "hint"}}` with a fitting status: 400 bad
//! request, 404 unknown name, 409 conflict (exists, busy, read-only), 507 no space, 500
//! I/O or corruption.

use crate::{split_volume, Daemon};
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::Read;
use std::path::PathBuf;
use strata_engine::{CheckOptions, ChecksumAlgo, CompressionPolicy, PoolStatus, SyncPolicy, VolumeInfo, VolumeOptions};

#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub kind: String,
    pub message: String,
    pub hint: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>, hint: &str) -> ApiError {
        ApiError { status: 400, kind: "InvalidArgument".into(), message: message.into(), hint: hint.into() }
    }
    pub fn not_found(message: impl Into<String>, hint: &str) -> ApiError {
        ApiError { status: 404, kind: "NotFound".into(), message: message.into(), hint: hint.into() }
    }
    pub fn conflict(message: impl Into<String>, hint: &str) -> ApiError {
        ApiError { status: 409, kind: "Conflict".into(), message: message.into(), hint: hint.into() }
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError { status: 500, kind: "Internal".into(), message: message.into(), hint: "see the daemon log".into() }
    }
}

pub(crate) type Reply = Result<(u16, Value), ApiError>;

const OPENAPI: &str = include_str!("../../../docs/openapi.json");
/// Bodies are small JSON documents; anything larger is refused before parsing.
const MAX_BODY: u64 = 64 * 1024;

pub(crate) fn body<T: for<'de> Deserialize<'de>>(req: &mut tiny_http::Request) -> Result<T, ApiError> {
    let mut raw = Vec::new();
    req.as_reader()
        .take(MAX_BODY + 1)
        .read_to_end(&mut raw)
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}"), "send a JSON body"))?;
    if raw.len() as u64 > MAX_BODY {
        return Err(ApiError::bad_request("request body over 64 KiB", "send a small JSON document"));
    }
    serde_json::from_slice(&raw)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}"), "see docs/api.md for the fields"))
}

pub fn pool_json(name: &str, s: &PoolStatus) -> Value {
    json!({
        "name": name, "guid": format!("{:016x}", s.pool_guid), "device": s.device, "log_device": s.log_device,
        "txg": s.txg,
        "size_bytes": s.size_bytes, "allocated_bytes": s.allocated_bytes, "free_bytes": s.free_bytes,
        "held_bytes": s.held_bytes, "volumes": s.volumes, "read_only": s.read_only, "latched": s.latched,
        "corruptions_detected": s.corruptions_detected, "open_notes": s.open_notes,
        "logical_bytes": s.space.logical_bytes, "saved_bytes": s.space.saved_bytes,
        "compress_ratio": ratio(s.space.logical_bytes, s.allocated_bytes),
        "untracked_volumes": s.space.untracked_volumes,
        "reserved_bytes": s.space.reserved_bytes, "available_bytes": s.space.available_bytes,
        "capacity_alert_percent": s.space.capacity_alert_percent, "warnings": s.space.warnings,
        "compressed_blocks_written": s.space.compressed_blocks_written,
        "compression_skipped": s.space.compression_skipped,
        "zero_records_elided": s.space.zero_records_elided,
        "packs": s.space.packs, "packed_records_written": s.space.packed_records_written,
        "dedup_blocks": s.space.dedup_blocks, "dedup_saved_bytes": s.space.dedup_saved_bytes,
        "dedup_table_max": s.space.dedup_table_max,
        "log_blocks_written": s.log_blocks_written, "log_bytes_written": s.log_bytes_written, "log_bytes_by_reference": s.log_bytes_by_reference, "log_full_commits": s.log_full_commits, "log_memory_bytes": s.log_memory_bytes,
        "data_cache_bytes": s.data_cache_bytes, "data_cache_capacity_bytes": s.data_cache_capacity,
        "data_cache_hits": s.data_cache_hits,
        "commits": {
            "count": s.commits.count, "prewrite_us_total": s.commits.prewrite_us_total,
            "locked_us_total": s.commits.locked_us_total, "locked_us_max": s.commits.locked_us_max,
            "locked_us_last": s.commits.locked_us_last, "locked_blocks_read": s.commits.locked_blocks_read,
            "early_passes_skipped": s.commits.early_passes_skipped,
        },
    })
}

/// logical / physical, rounded to 2 decimals; 1.0 for an empty pool or volume.
fn ratio(logical: u64, physical: u64) -> f64 {
    if physical == 0 {
        return 1.0;
    }
    (logical as f64 / physical as f64 * 100.0).round() / 100.0
}

/// A checker report as the API and `strata check --json` show it.
pub fn check_json(r: &strata_engine::CheckReport) -> Value {
    json!({
        "clean": r.is_clean(), "txg": r.txg, "volumes": r.volumes, "snapshots": r.snapshots, "objects": r.objects,
        "metadata_blocks": r.metadata_blocks, "data_blocks": r.data_blocks,
        "referenced_bytes": r.referenced_units * 4096, "allocated_bytes": r.allocated_units * 4096,
        "data_bytes_verified": r.data_bytes_verified, "compressed_blocks": r.compressed_blocks,
        "saved_bytes": r.saved_bytes, "errors": r.errors, "notes": r.notes,
    })
}

pub(crate) fn volume_json(pool: &str, v: &VolumeInfo, mounted_at: Option<&PathBuf>) -> Value {
    json!({
        "pool": pool, "name": v.name, "id": v.id.0, "record_size": v.record_size, "used_bytes": v.used_bytes,
        "size_bytes": v.quota_bytes, "sync": v.sync.name(), "created_txg": v.created_txg, "created_ns": v.created_ns,
        "mounted_at": mounted_at, "written_bytes": v.written_bytes, "total_bytes": v.total_bytes,
        "snapshots": v.snapshots, "parent_snapshot": v.parent_snapshot, "origin": v.origin,
        "mounted_at": mounted_at, "compression": v.space.compression.name(),
        "reservation_bytes": v.space.reservation_bytes, "logical_bytes": v.space.logical_bytes,
        "saved_bytes": v.space.saved_bytes, "dedup": v.space.dedup,
        "compress_ratio": v.space.logical_bytes.map(|l| ratio(l, v.used_bytes)),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreatePool {
    name: String,
    device: PathBuf,
    size_bytes: Option<u64>,
    checksum: Option<String>,
    /// A separate intent-log device (an existing file or block device of at least 16 MiB).
    log_device: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateVolume {
    name: String,
    record_size: Option<u32>,
    size_bytes: Option<u64>,
    sync: Option<String>,
    compression: Option<String>,
    reservation_bytes: Option<u64>,
    dedup: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetVolume {
    size_bytes: Option<u64>,
    sync: Option<String>,
    compression: Option<String>,
    reservation_bytes: Option<u64>,
    dedup: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetPool {
    capacity_alert_percent: Option<u8>,
    /// Add this separate intent-log device to the pool.
    log_device: Option<PathBuf>,
    /// Stop using the pool's separate log device (the log goes back into the pool).
    remove_log_device: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MountReq {
    volume: String,
    path: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UnmountReq {
    path: PathBuf,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CheckReq {
    verify_data: Option<bool>,
}

pub(crate) fn mounted_at(d: &Daemon, pool: &str, vol: &str) -> Option<PathBuf> {
    d.mounts.lock().expect("mounts").iter().find(|(_, m)| m.pool == pool && m.volume == vol).map(|(p, _)| p.clone())
}

fn route(d: &Daemon, req: &mut tiny_http::Request) -> Reply {
    let method = req.method().as_str().to_string();
    let url = req.url().split('?').next().unwrap_or("").to_string();
    let parts: Vec<&str> = url.trim_matches('/').split('/').collect();
    if let Some(reply) = crate::snapshots::route(d, &method, &parts, req) {
        return reply;
    }
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["v1", "health"]) => Ok((200, json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}))),
        ("GET", ["v1", "openapi.json"]) => {
            Ok((200, serde_json::from_str(OPENAPI).map_err(|e| ApiError::internal(e.to_string()))?))
        }
        ("GET", ["v1", "pools"]) => {
            let pools = d.pools.lock().expect("pools");
            Ok((200, Value::Array(pools.iter().map(|(n, e)| pool_json(n, &e.pool.status())).collect())))
        }
        ("POST", ["v1", "pools"]) => {
            let b: CreatePool = body(req)?;
            let checksum = match b.checksum.as_deref() {
                None | Some("blake3") => ChecksumAlgo::Blake3,
                Some("crc32c") => ChecksumAlgo::Crc32c,
                Some(o) => return Err(ApiError::bad_request(format!("checksum {o:?}"), "use blake3 or crc32c")),
            };
            if !b.device.exists() && b.size_bytes.is_none() {
                return Err(ApiError::bad_request(
                    format!("{} does not exist", b.device.display()),
                    "give size_bytes to create an image file",
                ));
            }
            let _g = d.admin.lock().expect("admin");
            d.create_pool(&b.name, &b.device, b.size_bytes, b.log_device.as_deref(), checksum, true)?;
            Ok((201, pool_json(&b.name, &d.pool(&b.name)?.status())))
        }
        ("GET", ["v1", "pools", p]) => Ok((200, pool_json(p, &d.pool(p)?.status()))),
        ("PATCH", ["v1", "pools", p]) => {
            let b: SetPool = body(req)?;
            let pool = d.pool(p)?;
            if let Some(percent) = b.capacity_alert_percent {
                pool.set_capacity_alert(percent)?;
            }
            match (&b.log_device, b.remove_log_device) {
                (Some(_), Some(true)) => {
                    return Err(ApiError::bad_request(
                        "log_device and remove_log_device together".to_string(),
                        "add a log device or remove one, not both",
                    ))
                }
                (Some(log), _) => d.add_log_device(p, log)?,
                (None, Some(true)) => d.remove_log_device(p)?,
                _ => {}
            }
            pool.commit()?;
            Ok((200, pool_json(p, &pool.status())))
        }
        ("POST", ["v1", "pools", p, "check"]) => {
            let b: CheckReq = body(req).unwrap_or_default();
            let r = d.pool(p)?.check(CheckOptions { verify_data: b.verify_data.unwrap_or(true) })?;
            Ok((200, check_json(&r)))
        }
        ("GET", ["v1", "pools", p, "volumes"]) => {
            let pool = d.pool(p)?;
            Ok((
                200,
                Value::Array(
                    pool.volumes().iter().map(|v| volume_json(p, v, mounted_at(d, p, &v.name).as_ref())).collect(),
                ),
            ))
        }
        ("POST", ["v1", "pools", p, "volumes"]) => {
            let b: CreateVolume = body(req)?;
            let pool = d.pool(p)?;
            let opts = VolumeOptions {
                record_size: b.record_size.unwrap_or(VolumeOptions::default().record_size),
                quota_bytes: b.size_bytes.unwrap_or(0),
                sync: b.sync.as_deref().map(SyncPolicy::parse).transpose()?.unwrap_or_default(),
                compression: b.compression.as_deref().map(CompressionPolicy::parse).transpose()?.unwrap_or_default(),
                reservation_bytes: b.reservation_bytes.unwrap_or(0),
                dedup: b.dedup.unwrap_or(false),
            };
            let _g = d.admin.lock().expect("admin");
            let id = pool.create_volume(&b.name, &opts)?;
            pool.commit()?;
            Ok((201, volume_json(p, &pool.volume_info(id)?, None)))
        }
        ("GET", ["v1", "pools", p, "volumes", v]) => {
            let pool = d.pool(p)?;
            let id = pool.volume_id(v)?;
            Ok((200, volume_json(p, &pool.volume_info(id)?, mounted_at(d, p, v).as_ref())))
        }
        ("PATCH", ["v1", "pools", p, "volumes", v]) => {
            let b: SetVolume = body(req)?;
            let pool = d.pool(p)?;
            let id = pool.volume_id(v)?;
            // Parse everything before changing anything.
            let sync = b.sync.as_deref().map(SyncPolicy::parse).transpose()?;
            let compression = b.compression.as_deref().map(CompressionPolicy::parse).transpose()?;
            // Dedup first: it is the change the pool can refuse for what it is (its checksums).
            if let Some(on) = b.dedup {
                pool.set_dedup(id, on)?;
            }
            let old_quota = pool.volume_info(id)?.quota_bytes;
            if let Some(size) = b.size_bytes {
                pool.set_quota(id, size)?;
            }
            if let Some(r) = b.reservation_bytes {
                // Checked against the new size; a refusal puts the old size back.
                if let Err(e) = pool.set_reservation(id, r) {
                    pool.set_quota(id, old_quota)?;
                    return Err(e.into());
                }
            }
            if let Some(sync) = sync {
                pool.set_sync_policy(id, sync)?;
            }
            if let Some(c) = compression {
                pool.set_compression(id, c)?;
            }
            pool.commit()?;
            Ok((200, volume_json(p, &pool.volume_info(id)?, mounted_at(d, p, v).as_ref())))
        }
        ("DELETE", ["v1", "pools", p, "volumes", v]) => {
            let _g = d.admin.lock().expect("admin");
            if let Some(id) = d.nfs.exported(p, v) {
                return Err(ApiError::conflict(
                    format!("volume {p}/{v} is exported (export {id})"),
                    "delete the export first (`strata export delete`)",
                ));
            }
            if let Some(at) = mounted_at(d, p, v) {
                return Err(ApiError::conflict(
                    format!("volume {p}/{v} is mounted at {}", at.display()),
                    "unmount it first (`strata unmount`)",
                ));
            }
            let pool = d.pool(p)?;
            pool.delete_volume(v)?;
            pool.commit()?;
            if d.policies.lock().expect("policies").remove(&format!("{p}/{v}")).is_some() {
                d.save_state()?;
            }
            Ok((200, json!({"deleted": format!("{p}/{v}")})))
        }
        ("GET", ["v1", "mounts"]) => {
            let mounts = d.mounts.lock().expect("mounts");
            Ok((
                200,
                Value::Array(
                    mounts
                        .iter()
                        .map(|(path, m)| json!({"volume": format!("{}/{}", m.pool, m.volume), "path": path, "active": m.session.is_some()}))
                        .collect(),
                ),
            ))
        }
        ("POST", ["v1", "mounts"]) => {
            let b: MountReq = body(req)?;
            split_volume(&b.volume)?;
            let _g = d.admin.lock().expect("admin");
            d.mount(&b.volume, &b.path, true)?;
            Ok((201, json!({"volume": b.volume, "path": b.path})))
        }
        ("DELETE", ["v1", "mounts"]) => {
            let b: UnmountReq = body(req)?;
            let _g = d.admin.lock().expect("admin");
            d.unmount(&b.path, true)?;
            Ok((200, json!({"unmounted": b.path})))
        }
        (_, ["v1", "exports", ..]) => crate::nfs::route(d, &method, &parts, req),
        (_, ["v1", ..]) => Err(ApiError::not_found(format!("no endpoint {method} {url}"), "see docs/api.md")),
        _ => Err(ApiError::not_found(format!("no endpoint {method} {url}"), "the API lives under /v1/")),
    }
}

pub fn handle(d: &Daemon, mut req: tiny_http::Request) {
    let (status, v) = match route(d, &mut req) {
        Ok(ok) => ok,
        Err(e) => {
            // 507 (no space) is the caller's condition to act on, not a fault of the daemon.
            if e.status >= 500 && e.status != 507 {
                tracing::error!(method = %req.method(), url = req.url(), "{}", e.message);
            }
            (e.status, json!({"error": {"kind": e.kind, "message": e.message, "hint": e.hint}}))
        }
    };
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]).expect("static header");
    let resp = tiny_http::Response::from_string(v.to_string()).with_status_code(status).with_header(header);
    let _ = req.respond(resp);
}
