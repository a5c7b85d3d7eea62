//! /v1/mirrors: create, list, show, act on (update, break, resync, pause, resume), delete.
//! A mirror is named by its target, DEST_POOL/VOLUME.

use super::D;
use crate::access::Caller;
use crate::http::blocking_arc;
use crate::http::extract::{Body, Path};
use crate::service::ApiError;
use axum::http::StatusCode;
use axum::{Extension, Json};
use std::sync::Arc;
use strata_api::*;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<crate::service::Daemon>> {
    OpenApiRouter::new().routes(routes!(list_mirrors, create_mirror)).routes(routes!(
        show_mirror,
        act_on_mirror,
        delete_mirror
    ))
}

/// Every mirror with its state, lag and transfer in progress.
#[utoipa::path(get, path = "/v1/mirrors", tag = "mirrors", security(("token" = ["viewer"])),
    responses((status = 200, body = Vec<MirrorInfo>)))]
async fn list_mirrors(d: D) -> Result<Json<Vec<MirrorInfo>>, ApiError> {
    blocking_arc(&d, |d| Ok(d.list_mirrors())).await.map(Json)
}

/// Mirror a volume (or a group) to another pool: creates the target volumes and starts the
/// first, full transfer in the background (follow it with `GET /v1/mirrors/{pool}/{volume}`).
#[utoipa::path(post, path = "/v1/mirrors", tag = "mirrors", security(("token" = ["admin"])),
    request_body = CreateMirror, responses((status = 202, body = MirrorInfo)))]
async fn create_mirror(
    d: D,
    Extension(caller): Extension<Caller>,
    Body(req): Body<CreateMirror>,
) -> Result<(StatusCode, Json<MirrorInfo>), ApiError> {
    blocking_arc(&d, move |d| d.create_mirror(&req, &caller.name)).await.map(|m| (StatusCode::ACCEPTED, Json(m)))
}

#[utoipa::path(get, path = "/v1/mirrors/{pool}/{volume}", tag = "mirrors", security(("token" = ["viewer"])),
    params(("pool" = String, Path, description = "the target pool"), ("volume" = String, Path)),
    responses((status = 200, body = MirrorInfo)))]
async fn show_mirror(d: D, Path((pool, vol)): Path<(String, String)>) -> Result<Json<MirrorInfo>, ApiError> {
    blocking_arc(&d, move |d| d.mirror_info(&format!("{pool}/{vol}"))).await.map(Json)
}

/// `update` (a transfer now, in the background), `pause`, `resume`, `break` (the target
/// becomes writable, at the last transferred snapshot), `resync` (a broken mirror again; the
/// target's writes since the break are kept as a snapshot).
#[utoipa::path(post, path = "/v1/mirrors/{pool}/{volume}", tag = "mirrors", security(("token" = ["admin"])),
    params(("pool" = String, Path, description = "the target pool"), ("volume" = String, Path)),
    request_body = MirrorAction, responses((status = 200, body = MirrorInfo)))]
async fn act_on_mirror(
    d: D,
    Extension(caller): Extension<Caller>,
    Path((pool, vol)): Path<(String, String)>,
    Body(req): Body<MirrorAction>,
) -> Result<Json<MirrorInfo>, ApiError> {
    blocking_arc(&d, move |d| d.mirror_action(&format!("{pool}/{vol}"), &req.action, &caller.name)).await.map(Json)
}

/// End the relationship; the target volumes and their snapshots stay, writable.
#[utoipa::path(delete, path = "/v1/mirrors/{pool}/{volume}", tag = "mirrors", security(("token" = ["admin"])),
    params(("pool" = String, Path, description = "the target pool"), ("volume" = String, Path)),
    responses((status = 200, body = Done)))]
async fn delete_mirror(d: D, Path((pool, vol)): Path<(String, String)>) -> Result<Json<Done>, ApiError> {
    blocking_arc(&d, move |d| {
        let name = format!("{pool}/{vol}");
        d.delete_mirror(&name)?;
        Ok(Done { target: name, also: Vec::new() })
    })
    .await
    .map(Json)
}
