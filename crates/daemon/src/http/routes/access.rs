//! Health, the OpenAPI document, tokens and the history.

use super::D;
use crate::access::Caller;
use crate::http::blocking;
use crate::http::extract::{Body, Path, Query};
use crate::service::{ApiError, Daemon};
use crate::SystemClock;
use axum::http::StatusCode;
use axum::{Extension, Json};
use std::sync::Arc;
use strata_api::*;
use strata_engine::Clock;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<Daemon>> {
    OpenApiRouter::new()
        .routes(routes!(health))
        .routes(routes!(openapi))
        .routes(routes!(list_tokens, create_token))
        .routes(routes!(revoke_token))
        .routes(routes!(history))
}

/// The daemon is up; who it takes the caller for.
#[utoipa::path(get, path = "/v1/health", tag = "access", security(("token" = ["viewer"])),
    responses((status = 200, body = Health)))]
async fn health(Extension(c): Extension<Caller>) -> Json<Health> {
    Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into(), caller: c.name, role: c.role })
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "access", security(("token" = ["viewer"])),
    responses((status = 200, description = "The OpenAPI 3.1 document of this API")))]
async fn openapi(Extension(doc): Extension<Arc<serde_json::Value>>) -> Json<serde_json::Value> {
    Json((*doc).clone())
}

#[utoipa::path(get, path = "/v1/tokens", tag = "access", security(("token" = ["admin"])),
    responses((status = 200, body = Vec<TokenInfo>)))]
async fn list_tokens(d: D) -> Result<Json<Vec<TokenInfo>>, ApiError> {
    blocking(&d, |d| Ok(d.tokens.list())).await.map(Json)
}

/// A new token for TCP callers; its secret is in this answer only.
#[utoipa::path(post, path = "/v1/tokens", tag = "access", security(("token" = ["admin"])),
    request_body = CreateToken, responses((status = 201, body = CreatedToken)))]
async fn create_token(
    d: D,
    Extension(c): Extension<Caller>,
    Body(req): Body<CreateToken>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    blocking(&d, move |d| d.tokens.create(&req.name, req.role, &c.name, SystemClock.now_ns()))
        .await
        .map(|t| (StatusCode::CREATED, Json(t)))
}

#[utoipa::path(delete, path = "/v1/tokens/{name}", tag = "access", security(("token" = ["admin"])),
    params(("name" = String, Path)), responses((status = 200, body = Done)))]
async fn revoke_token(d: D, Path(name): Path<String>) -> Result<Json<Done>, ApiError> {
    blocking(&d, move |d| {
        d.tokens.revoke(&name)?;
        Ok(Done { target: format!("token {name}"), also: Vec::new() })
    })
    .await
    .map(Json)
}

/// Every change asked of the daemon, oldest first: who, what, on what, and what came of it.
#[utoipa::path(get, path = "/v1/history", tag = "access", security(("token" = ["viewer"])),
    params(HistoryQuery), responses((status = 200, body = Vec<HistoryEntry>)))]
async fn history(d: D, Query(q): Query<HistoryQuery>) -> Result<Json<Vec<HistoryEntry>>, ApiError> {
    blocking(&d, move |d| d.history.read(q.pool.as_deref(), q.limit.unwrap_or(1000) as usize)).await.map(Json)
}
