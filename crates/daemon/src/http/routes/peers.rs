//! /v1/peers: other daemons paired with this one (for mirrors between daemons): invite,
//! add (pair with an invitation's token), list, show, ping, delete.

use super::D;
use crate::http::blocking;
use crate::http::extract::{Body, Path};
use crate::service::ApiError;
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;
use strata_api::*;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<crate::service::Daemon>> {
    OpenApiRouter::new()
        .routes(routes!(list_peers, add_peer))
        .routes(routes!(create_invitation))
        .routes(routes!(show_peer, delete_peer))
        .routes(routes!(ping_peer))
}

/// Every paired peer: name, address, pinned fingerprint, grants.
#[utoipa::path(get, path = "/v1/peers", tag = "peers", security(("token" = ["viewer"])),
    responses((status = 200, body = Vec<PeerInfo>)))]
async fn list_peers(d: D) -> Result<Json<Vec<PeerInfo>>, ApiError> {
    blocking(&d, |d| Ok(d.list_peers())).await.map(Json)
}

/// Pair with the daemon at `address` that made the invitation `token`: its fingerprint
/// (from the token) is pinned, this daemon proves the token's secret, and both record
/// each other. The token is spent.
#[utoipa::path(post, path = "/v1/peers", tag = "peers", security(("token" = ["admin"])),
    request_body = AddPeer, responses((status = 201, body = PeerInfo)))]
async fn add_peer(d: D, Body(req): Body<AddPeer>) -> Result<(StatusCode, Json<PeerInfo>), ApiError> {
    blocking(&d, move |d| d.add_peer(&req)).await.map(|p| (StatusCode::CREATED, Json(p)))
}

/// A one-time invitation for another daemon to pair with this one (valid 10 minutes; its
/// token is in this answer only). Needs the replication listener (`serve --repl-port`).
#[utoipa::path(post, path = "/v1/peers/invitations", tag = "peers", security(("token" = ["admin"])),
    request_body = CreateInvitation, responses((status = 201, body = Invitation)))]
async fn create_invitation(
    d: D,
    Body(req): Body<CreateInvitation>,
) -> Result<(StatusCode, Json<Invitation>), ApiError> {
    blocking(&d, move |d| d.create_invitation(&req)).await.map(|i| (StatusCode::CREATED, Json(i)))
}

#[utoipa::path(get, path = "/v1/peers/{name}", tag = "peers", security(("token" = ["viewer"])),
    params(("name" = String, Path)), responses((status = 200, body = PeerInfo)))]
async fn show_peer(d: D, Path(name): Path<String>) -> Result<Json<PeerInfo>, ApiError> {
    blocking(&d, move |d| d.peer_info(&name)).await.map(Json)
}

/// Forget a peer: its certificate is refused from now on (the peer's own record of this
/// daemon stays until it is deleted there).
#[utoipa::path(delete, path = "/v1/peers/{name}", tag = "peers", security(("token" = ["admin"])),
    params(("name" = String, Path)), responses((status = 200, body = Done)))]
async fn delete_peer(d: D, Path(name): Path<String>) -> Result<Json<Done>, ApiError> {
    blocking(&d, move |d| d.delete_peer(&name)).await.map(Json)
}

/// Connect to the peer (mutually authenticated) and ping it: both versions and the times.
#[utoipa::path(get, path = "/v1/peers/{name}/ping", tag = "peers", security(("token" = ["viewer"])),
    params(("name" = String, Path)), responses((status = 200, body = PeerPing)))]
async fn ping_peer(d: D, Path(name): Path<String>) -> Result<Json<PeerPing>, ApiError> {
    blocking(&d, move |d| d.ping_peer(&name)).await.map(Json)
}
