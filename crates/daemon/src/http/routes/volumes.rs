//! /v1/pools/{pool}/volumes: list, create, show, change, delete.

use super::D;
use crate::http::blocking;
use crate::http::extract::{Body, Path, Query};
use crate::service::{ApiError, Daemon};
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;
use strata_api::*;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<Daemon>> {
    OpenApiRouter::new().routes(routes!(list_volumes, create_volume)).routes(routes!(
        show_volume,
        set_volume,
        delete_volume
    ))
}

#[utoipa::path(get, path = "/v1/pools/{pool}/volumes", tag = "volumes", security(("token" = ["viewer"])),
    params(("pool" = String, Path)), responses((status = 200, body = Vec<VolumeInfo>)))]
async fn list_volumes(d: D, Path(pool): Path<String>) -> Result<Json<Vec<VolumeInfo>>, ApiError> {
    blocking(&d, move |d| d.list_volumes(&pool)).await.map(Json)
}

#[utoipa::path(post, path = "/v1/pools/{pool}/volumes", tag = "volumes", security(("token" = ["operator"])),
    params(("pool" = String, Path)), request_body = CreateVolume, responses((status = 201, body = VolumeInfo)))]
async fn create_volume(
    d: D,
    Path(pool): Path<String>,
    Body(req): Body<CreateVolume>,
) -> Result<(StatusCode, Json<VolumeInfo>), ApiError> {
    blocking(&d, move |d| d.create_volume(&pool, &req)).await.map(|v| (StatusCode::CREATED, Json(v)))
}

#[utoipa::path(get, path = "/v1/pools/{pool}/volumes/{volume}", tag = "volumes", security(("token" = ["viewer"])),
    params(("pool" = String, Path), ("volume" = String, Path)), responses((status = 200, body = VolumeInfo)))]
async fn show_volume(d: D, Path((pool, vol)): Path<(String, String)>) -> Result<Json<VolumeInfo>, ApiError> {
    blocking(&d, move |d| d.volume(&pool, &vol)).await.map(Json)
}

/// Change a volume's settings: all the fields given, or none of them.
#[utoipa::path(patch, path = "/v1/pools/{pool}/volumes/{volume}", tag = "volumes", security(("token" = ["operator"])),
    params(("pool" = String, Path), ("volume" = String, Path)), request_body = SetVolume,
    responses((status = 200, body = VolumeInfo)))]
async fn set_volume(
    d: D,
    Path((pool, vol)): Path<(String, String)>,
    Body(req): Body<SetVolume>,
) -> Result<Json<VolumeInfo>, ApiError> {
    blocking(&d, move |d| d.set_volume(&pool, &vol, &req)).await.map(Json)
}

/// Delete a volume; one with snapshots or clones needs `recursive=true`.
#[utoipa::path(delete, path = "/v1/pools/{pool}/volumes/{volume}", tag = "volumes", security(("token" = ["operator"])),
    params(("pool" = String, Path), ("volume" = String, Path), DeleteVolumeQuery),
    responses((status = 200, body = Done)))]
async fn delete_volume(
    d: D,
    Path((pool, vol)): Path<(String, String)>,
    Query(q): Query<DeleteVolumeQuery>,
) -> Result<Json<Done>, ApiError> {
    blocking(&d, move |d| d.delete_volume(&pool, &vol, q.recursive.unwrap_or(false))).await.map(Json)
}
