//! /v1/pools: list, create, status, settings, check; destroy, export, import.

use super::D;
use crate::access::Caller;
use crate::http::blocking;
use crate::http::extract::{Body, Path, Query};
use crate::service::{ApiError, Daemon};
use axum::http::StatusCode;
use axum::{Extension, Json};
use std::sync::Arc;
use strata_api::*;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<Daemon>> {
    OpenApiRouter::new()
        .routes(routes!(list_pools, create_pool))
        .routes(routes!(show_pool, set_pool, destroy_pool))
        .routes(routes!(check_pool))
        .routes(routes!(scrub_pool, scrub_status))
        .routes(routes!(change_device))
        .routes(routes!(add_group))
        .routes(routes!(sync_pool))
        .routes(routes!(export_pool))
        .routes(routes!(scan_importable))
        .routes(routes!(import_pool))
}

/// Every pool, open or UNAVAILABLE.
#[utoipa::path(get, path = "/v1/pools", tag = "pools", security(("token" = ["viewer"])),
    responses((status = 200, body = Vec<PoolInfo>)))]
async fn list_pools(d: D) -> Result<Json<Vec<PoolInfo>>, ApiError> {
    blocking(&d, |d| Ok(d.list_pools())).await.map(Json)
}

/// Make a pool on an image file or block device (refused over data unless `force`).
#[utoipa::path(post, path = "/v1/pools", tag = "pools", security(("token" = ["admin"])),
    request_body = CreatePool, responses((status = 201, body = PoolInfo)))]
async fn create_pool(d: D, Body(req): Body<CreatePool>) -> Result<(StatusCode, Json<PoolInfo>), ApiError> {
    blocking(&d, move |d| {
        let _g = d.admin.lock().expect("admin");
        d.create_pool(&req)?;
        d.pool_info(&req.name)
    })
    .await
    .map(|p| (StatusCode::CREATED, Json(p)))
}

#[utoipa::path(get, path = "/v1/pools/{pool}", tag = "pools", security(("token" = ["viewer"])),
    params(("pool" = String, Path)), responses((status = 200, body = PoolInfo)))]
async fn show_pool(d: D, Path(pool): Path<String>) -> Result<Json<PoolInfo>, ApiError> {
    blocking(&d, move |d| d.pool_info(&pool)).await.map(Json)
}

/// Change a pool's settings: all the fields given, or none of them.
#[utoipa::path(patch, path = "/v1/pools/{pool}", tag = "pools", security(("token" = ["admin"])),
    params(("pool" = String, Path)), request_body = SetPool, responses((status = 200, body = PoolInfo)))]
async fn set_pool(d: D, Path(pool): Path<String>, Body(req): Body<SetPool>) -> Result<Json<PoolInfo>, ApiError> {
    blocking(&d, move |d| {
        let _g = d.admin.lock().expect("admin");
        d.set_pool(&pool, &req)?;
        d.pool_info(&pool)
    })
    .await
    .map(Json)
}

/// Destroy a pool: every volume, snapshot and clone in it. `confirm` must repeat its name.
#[utoipa::path(delete, path = "/v1/pools/{pool}", tag = "pools", security(("token" = ["admin"])),
    params(("pool" = String, Path), DestroyPoolQuery), responses((status = 200, body = Done)))]
async fn destroy_pool(
    d: D,
    Path(pool): Path<String>,
    Query(q): Query<DestroyPoolQuery>,
) -> Result<Json<Done>, ApiError> {
    blocking(&d, move |d| d.destroy_pool(&pool, q.confirm.as_deref(), q.force.unwrap_or(false))).await.map(Json)
}

/// Verify every invariant of the pool (and, by default, every data block's checksum), as a
/// job: 202 with the job; its result, once it has succeeded, is the check's report.
#[utoipa::path(post, path = "/v1/pools/{pool}/check", tag = "pools", security(("token" = ["operator"])),
    params(("pool" = String, Path)), request_body = CheckRequest,
    responses((status = 202, body = JobInfo, description = "the check's job; `result` is a CheckReport")))]
async fn check_pool(
    d: D,
    Extension(caller): Extension<Caller>,
    Path(pool): Path<String>,
    Body(req): Body<CheckRequest>,
) -> Result<(StatusCode, Json<JobInfo>), ApiError> {
    blocking(&d, move |d| d.start_check(&pool, req.verify_data.unwrap_or(true), &caller.name))
        .await
        .map(|j| (StatusCode::ACCEPTED, Json(j)))
}

/// Scrub: read every copy of every block (of a mirror: each device's), verify it, and
/// repair damaged copies from a good one; also runs every check. `start` runs it in the
/// background (outside the pool's lock, paced while the pool serves I/O) and returns at
/// once; `pause`, `resume` and `cancel` drive it; `GET` shows its progress and, at the end,
/// its report.
#[utoipa::path(post, path = "/v1/pools/{pool}/scrub", tag = "pools", security(("token" = ["operator"])),
    params(("pool" = String, Path)), request_body = ScrubRequest,
    responses((status = 202, body = ScrubStatus, description = "started: `job` is its job"),
        (status = 200, body = ScrubStatus, description = "paused, resumed or cancelled")))]
async fn scrub_pool(
    d: D,
    Extension(caller): Extension<Caller>,
    Path(pool): Path<String>,
    Body(req): Body<ScrubRequest>,
) -> Result<(StatusCode, Json<ScrubStatus>), ApiError> {
    let action = req.action.unwrap_or_else(|| "start".into());
    let code = if action == "start" { StatusCode::ACCEPTED } else { StatusCode::OK };
    blocking(&d, move |d| d.scrub_action(&pool, &action, &caller.name)).await.map(|s| (code, Json(s)))
}

/// The pool's scrub: running (progress, rate, ETA) or the last one since the daemon started.
#[utoipa::path(get, path = "/v1/pools/{pool}/scrub", tag = "pools", security(("token" = ["viewer"])),
    params(("pool" = String, Path)), responses((status = 200, body = ScrubStatus)))]
async fn scrub_status(d: D, Path(pool): Path<String>) -> Result<Json<ScrubStatus>, ApiError> {
    blocking(&d, move |d| d.scrub_status(&pool)).await.map(Json)
}

/// Change a device of a mirror: offline, online (rebuilds what it missed) or replace (the
/// new device is rebuilt from the others in the background; `pool status` shows progress).
#[utoipa::path(post, path = "/v1/pools/{pool}/devices", tag = "pools", security(("token" = ["admin"])),
    params(("pool" = String, Path)), request_body = DeviceChange, responses((status = 200, body = PoolInfo)))]
async fn change_device(
    d: D,
    Path(pool): Path<String>,
    Body(req): Body<DeviceChange>,
) -> Result<Json<PoolInfo>, ApiError> {
    blocking(&d, move |d| {
        d.change_device(&pool, &req)?;
        d.pool_info(&pool)
    })
    .await
    .map(Json)
}

/// Add a device group: a new set of the pool's layout (a mirror of 2 or 3 devices, a parity2
/// set of 4 to 16) whose space extends the pool's; new blocks are spread over every group.
/// Refused over data unless `force`.
#[utoipa::path(post, path = "/v1/pools/{pool}/groups", tag = "pools", security(("token" = ["admin"])),
    params(("pool" = String, Path)), request_body = AddGroup, responses((status = 200, body = PoolInfo)))]
async fn add_group(d: D, Path(pool): Path<String>, Body(req): Body<AddGroup>) -> Result<Json<PoolInfo>, ApiError> {
    blocking(&d, move |d| {
        d.add_group(&pool, &req)?;
        d.pool_info(&pool)
    })
    .await
    .map(Json)
}

/// Commit the pool's open txg now and wait until it is durable (`zpool sync`): what was
/// written before is in the pool proper, not only in the intent log, and the background
/// commit has nothing of it left to do. Nothing dirty: no I/O.
#[utoipa::path(post, path = "/v1/pools/{pool}/sync", tag = "pools", security(("token" = ["operator"])),
    params(("pool" = String, Path)), responses((status = 200, body = PoolSynced)))]
async fn sync_pool(d: D, Path(pool): Path<String>) -> Result<Json<PoolSynced>, ApiError> {
    blocking(&d, move |d| {
        let txg = d.pool(&pool)?.commit()?;
        Ok(PoolSynced { pool, txg })
    })
    .await
    .map(Json)
}

/// Close the pool cleanly and forget it: its devices can be imported here or elsewhere.
#[utoipa::path(post, path = "/v1/pools/{pool}/export", tag = "pools", security(("token" = ["admin"])),
    params(("pool" = String, Path)), request_body = ExportPoolRequest, responses((status = 200, body = Done)))]
async fn export_pool(
    d: D,
    Path(pool): Path<String>,
    Body(req): Body<ExportPoolRequest>,
) -> Result<Json<Done>, ApiError> {
    blocking(&d, move |d| d.export_pool(&pool, req.force)).await.map(Json)
}

/// Pools found by their labels on a device or in a directory.
#[utoipa::path(get, path = "/v1/import/scan", tag = "pools", security(("token" = ["admin"])),
    params(ImportScanQuery), responses((status = 200, body = Vec<ImportCandidate>)))]
async fn scan_importable(d: D, Query(q): Query<ImportScanQuery>) -> Result<Json<Vec<ImportCandidate>>, ApiError> {
    blocking(&d, move |d| d.scan_importable(q.device.as_deref(), q.dir.as_deref())).await.map(Json)
}

/// Import a pool found by the scan, by name or guid.
#[utoipa::path(post, path = "/v1/import", tag = "pools", security(("token" = ["admin"])),
    request_body = ImportPoolRequest, responses((status = 201, body = PoolInfo)))]
async fn import_pool(d: D, Body(req): Body<ImportPoolRequest>) -> Result<(StatusCode, Json<PoolInfo>), ApiError> {
    blocking(&d, move |d| d.import_pool(&req)).await.map(|p| (StatusCode::CREATED, Json(p)))
}
