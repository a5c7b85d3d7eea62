//! /v1/mounts and /v1/exports.

use super::D;
use crate::access::Caller;
use crate::http::blocking;
use crate::http::extract::{Body, Path};
use crate::service::{split_volume, ApiError, Daemon};
use axum::http::StatusCode;
use axum::{Extension, Json};
use std::sync::Arc;
use strata_api::*;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<Daemon>> {
    OpenApiRouter::new()
        .routes(routes!(list_mounts, mount, unmount))
        .routes(routes!(list_exports, create_export))
        .routes(routes!(show_export, delete_export))
}

#[utoipa::path(get, path = "/v1/mounts", tag = "mounts", security(("token" = ["viewer"])),
    responses((status = 200, body = Vec<MountInfo>)))]
async fn list_mounts(d: D) -> Result<Json<Vec<MountInfo>>, ApiError> {
    blocking(&d, |d| Ok(d.list_mounts())).await.map(Json)
}

/// Mount a volume through FUSE at an empty directory of the daemon's host (an operator:
/// under /mnt, /srv, /data, /var/lib/postgresql or /var/lib/mysql only).
#[utoipa::path(post, path = "/v1/mounts", tag = "mounts", security(("token" = ["operator"])),
    request_body = MountRequest, responses((status = 201, body = MountInfo)))]
async fn mount(
    d: D,
    Extension(caller): Extension<Caller>,
    Body(req): Body<MountRequest>,
) -> Result<(StatusCode, Json<MountInfo>), ApiError> {
    blocking(&d, move |d| {
        split_volume(&req.volume)?;
        if caller.role < Role::Admin {
            crate::service::mounts::check_operator_mount_path(&req.path)?;
        }
        let _g = d.admin.lock().expect("admin");
        d.mount(&req.volume, &req.path, true)?;
        Ok(MountInfo { volume: req.volume, path: req.path, active: true })
    })
    .await
    .map(|m| (StatusCode::CREATED, Json(m)))
}

#[utoipa::path(delete, path = "/v1/mounts", tag = "mounts", security(("token" = ["operator"])),
    request_body = UnmountRequest, responses((status = 200, body = Done)))]
async fn unmount(d: D, Body(req): Body<UnmountRequest>) -> Result<Json<Done>, ApiError> {
    blocking(&d, move |d| {
        let _g = d.admin.lock().expect("admin");
        d.unmount(&req.path, true)?;
        Ok(Done { target: req.path.display().to_string(), also: Vec::new() })
    })
    .await
    .map(Json)
}

#[utoipa::path(get, path = "/v1/exports", tag = "exports", security(("token" = ["viewer"])),
    responses((status = 200, body = Vec<ExportInfo>)))]
async fn list_exports(d: D) -> Result<Json<Vec<ExportInfo>>, ApiError> {
    blocking(&d, |d| Ok(d.list_exports())).await.map(Json)
}

/// Export a volume (NFSv3).
#[utoipa::path(post, path = "/v1/exports", tag = "exports", security(("token" = ["operator"])),
    request_body = CreateExport, responses((status = 201, body = ExportInfo)))]
async fn create_export(d: D, Body(req): Body<CreateExport>) -> Result<(StatusCode, Json<ExportInfo>), ApiError> {
    blocking(&d, move |d| d.create_export(req)).await.map(|e| (StatusCode::CREATED, Json(e)))
}

#[utoipa::path(get, path = "/v1/exports/{id}", tag = "exports", security(("token" = ["viewer"])),
    params(("id" = u32, Path)), responses((status = 200, body = ExportInfo)))]
async fn show_export(d: D, Path(id): Path<u32>) -> Result<Json<ExportInfo>, ApiError> {
    blocking(&d, move |d| d.export(id)).await.map(Json)
}

/// Delete an export: its clients' file handles become STALE.
#[utoipa::path(delete, path = "/v1/exports/{id}", tag = "exports", security(("token" = ["operator"])),
    params(("id" = u32, Path)), responses((status = 200, body = Done)))]
async fn delete_export(d: D, Path(id): Path<u32>) -> Result<Json<Done>, ApiError> {
    blocking(&d, move |d| d.delete_export(id)).await.map(Json)
}
