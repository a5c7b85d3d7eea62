//! Snapshots, restores, clones and snapshot policies.

use super::D;
use crate::access::Caller;
use crate::http::extract::{Body, Path};
use crate::http::{blocking, blocking_arc};
use crate::service::{snapshots, ApiError, Daemon};
use axum::http::StatusCode;
use axum::{Extension, Json};
use std::sync::Arc;
use strata_api::*;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<Daemon>> {
    OpenApiRouter::new()
        .routes(routes!(list_pool_snapshots, create_group_snapshot))
        .routes(routes!(list_snapshots, create_snapshot))
        .routes(routes!(show_snapshot, delete_snapshot))
        .routes(routes!(restore))
        .routes(routes!(restore_file))
        .routes(routes!(create_clones))
        .routes(routes!(split_clone))
        .routes(routes!(show_policy, set_policy, clear_policy))
}

type PV = Path<(String, String)>;

#[utoipa::path(get, path = "/v1/pools/{pool}/snapshots", tag = "snapshots", security(("token" = ["viewer"])),
    params(("pool" = String, Path)), responses((status = 200, body = Vec<SnapshotInfo>)))]
async fn list_pool_snapshots(d: D, Path(pool): Path<String>) -> Result<Json<Vec<SnapshotInfo>>, ApiError> {
    blocking(&d, move |d| snapshots::list(d, &pool, None)).await.map(Json)
}

/// One snapshot name of several volumes, in one txg (data + log volumes of a database).
#[utoipa::path(post, path = "/v1/pools/{pool}/snapshots", tag = "snapshots", security(("token" = ["operator"])),
    params(("pool" = String, Path)), request_body = CreateGroupSnapshot,
    responses((status = 201, body = Vec<SnapshotInfo>)))]
async fn create_group_snapshot(
    d: D,
    Path(pool): Path<String>,
    Body(req): Body<CreateGroupSnapshot>,
) -> Result<(StatusCode, Json<Vec<SnapshotInfo>>), ApiError> {
    blocking(&d, move |d| snapshots::create(d, &pool, &req.volumes, &req.name, req.quiesce.as_deref()))
        .await
        .map(|s| (StatusCode::CREATED, Json(s)))
}

#[utoipa::path(get, path = "/v1/pools/{pool}/volumes/{volume}/snapshots", tag = "snapshots",
    security(("token" = ["viewer"])), params(("pool" = String, Path), ("volume" = String, Path)),
    responses((status = 200, body = Vec<SnapshotInfo>)))]
async fn list_snapshots(d: D, Path((pool, vol)): PV) -> Result<Json<Vec<SnapshotInfo>>, ApiError> {
    blocking(&d, move |d| snapshots::list(d, &pool, Some(&vol))).await.map(Json)
}

#[utoipa::path(post, path = "/v1/pools/{pool}/volumes/{volume}/snapshots", tag = "snapshots",
    security(("token" = ["operator"])), params(("pool" = String, Path), ("volume" = String, Path)),
    request_body = CreateSnapshot, responses((status = 201, body = SnapshotInfo)))]
async fn create_snapshot(
    d: D,
    Path((pool, vol)): PV,
    Body(req): Body<CreateSnapshot>,
) -> Result<(StatusCode, Json<SnapshotInfo>), ApiError> {
    blocking(&d, move |d| {
        let mut s = snapshots::create(d, &pool, std::slice::from_ref(&vol), &req.name, req.quiesce.as_deref())?;
        s.pop().ok_or_else(|| ApiError::internal("a snapshot of one volume returned none"))
    })
    .await
    .map(|s| (StatusCode::CREATED, Json(s)))
}

#[utoipa::path(get, path = "/v1/pools/{pool}/volumes/{volume}/snapshots/{snapshot}", tag = "snapshots",
    security(("token" = ["viewer"])),
    params(("pool" = String, Path), ("volume" = String, Path), ("snapshot" = String, Path)),
    responses((status = 200, body = SnapshotInfo)))]
async fn show_snapshot(
    d: D,
    Path((pool, vol, snap)): Path<(String, String, String)>,
) -> Result<Json<SnapshotInfo>, ApiError> {
    blocking(&d, move |d| snapshots::show(d, &pool, &vol, &snap)).await.map(Json)
}

/// Delete a snapshot, freeing exactly what only it holds.
#[utoipa::path(delete, path = "/v1/pools/{pool}/volumes/{volume}/snapshots/{snapshot}", tag = "snapshots",
    security(("token" = ["operator"])),
    params(("pool" = String, Path), ("volume" = String, Path), ("snapshot" = String, Path)),
    responses((status = 200, body = Done)))]
async fn delete_snapshot(
    d: D,
    Path((pool, vol, snap)): Path<(String, String, String)>,
) -> Result<Json<Done>, ApiError> {
    blocking(&d, move |d| snapshots::delete(d, &pool, &vol, &snap)).await.map(Json)
}

/// Make the volume (and the group's other volumes) equal to the snapshot again; every
/// snapshot is kept.
#[utoipa::path(post, path = "/v1/pools/{pool}/volumes/{volume}/restore", tag = "snapshots",
    security(("token" = ["operator"])), params(("pool" = String, Path), ("volume" = String, Path)),
    request_body = RestoreRequest, responses((status = 200, body = Vec<VolumeInfo>)))]
async fn restore(
    d: D,
    Path((pool, vol)): PV,
    Body(req): Body<RestoreRequest>,
) -> Result<Json<Vec<VolumeInfo>>, ApiError> {
    blocking(&d, move |d| {
        let mut vols = vec![vol];
        vols.extend(req.group);
        snapshots::restore(d, &pool, &vols, &req.snapshot)
    })
    .await
    .map(Json)
}

/// Restore one file from a snapshot, sharing its blocks where possible.
#[utoipa::path(post, path = "/v1/pools/{pool}/volumes/{volume}/restore-file", tag = "snapshots",
    security(("token" = ["operator"])), params(("pool" = String, Path), ("volume" = String, Path)),
    request_body = RestoreFileRequest, responses((status = 200, body = RestoredFile)))]
async fn restore_file(
    d: D,
    Path((pool, vol)): PV,
    Body(req): Body<RestoreFileRequest>,
) -> Result<Json<RestoredFile>, ApiError> {
    blocking(&d, move |d| snapshots::restore_file(d, &pool, &vol, &req.snapshot, &req.file)).await.map(Json)
}

/// Writable clones of snapshots, in one txg.
#[utoipa::path(post, path = "/v1/pools/{pool}/clones", tag = "snapshots", security(("token" = ["operator"])),
    params(("pool" = String, Path)), request_body = CloneRequest, responses((status = 201, body = Vec<VolumeInfo>)))]
async fn create_clones(
    d: D,
    Path(pool): Path<String>,
    Body(req): Body<CloneRequest>,
) -> Result<(StatusCode, Json<Vec<VolumeInfo>>), ApiError> {
    blocking(&d, move |d| {
        let mut all = vec![CloneOne { origin: req.origin, name: req.name }];
        all.extend(req.group);
        snapshots::clone(d, &pool, &all)
    })
    .await
    .map(|v| (StatusCode::CREATED, Json(v)))
}

/// Copy what a clone shares with its origin, so the origin snapshot can be deleted; as a
/// job: 202 with the job; its result, once it has succeeded, is a SplitResult.
#[utoipa::path(post, path = "/v1/pools/{pool}/volumes/{volume}/split", tag = "snapshots",
    security(("token" = ["operator"])), params(("pool" = String, Path), ("volume" = String, Path)),
    responses((status = 202, body = JobInfo, description = "the split's job; `result` is a SplitResult")))]
async fn split_clone(
    d: D,
    Extension(caller): Extension<Caller>,
    Path((pool, vol)): PV,
) -> Result<(StatusCode, Json<JobInfo>), ApiError> {
    blocking_arc(&d, move |d| snapshots::start_split(d, &pool, &vol, &caller.name))
        .await
        .map(|j| (StatusCode::ACCEPTED, Json(j)))
}

#[utoipa::path(get, path = "/v1/pools/{pool}/volumes/{volume}/policy", tag = "snapshots",
    security(("token" = ["viewer"])), params(("pool" = String, Path), ("volume" = String, Path)),
    responses((status = 200, body = PolicyInfo)))]
async fn show_policy(d: D, Path((pool, vol)): PV) -> Result<Json<PolicyInfo>, ApiError> {
    blocking(&d, move |d| d.policy(&pool, &vol)).await.map(Json)
}

/// Replace the volume's snapshot schedules.
#[utoipa::path(put, path = "/v1/pools/{pool}/volumes/{volume}/policy", tag = "snapshots",
    security(("token" = ["operator"])), params(("pool" = String, Path), ("volume" = String, Path)),
    request_body = SetPolicy, responses((status = 200, body = PolicyInfo)))]
async fn set_policy(d: D, Path((pool, vol)): PV, Body(req): Body<SetPolicy>) -> Result<Json<PolicyInfo>, ApiError> {
    blocking(&d, move |d| d.set_policy(&pool, &vol, req.schedules)).await.map(Json)
}

/// Remove every schedule of the volume (its snapshots stay).
#[utoipa::path(delete, path = "/v1/pools/{pool}/volumes/{volume}/policy", tag = "snapshots",
    security(("token" = ["operator"])), params(("pool" = String, Path), ("volume" = String, Path)),
    responses((status = 200, body = PolicyInfo)))]
async fn clear_policy(d: D, Path((pool, vol)): PV) -> Result<Json<PolicyInfo>, ApiError> {
    blocking(&d, move |d| d.clear_policy(&pool, &vol)).await.map(Json)
}
