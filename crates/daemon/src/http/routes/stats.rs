//! /metrics (Prometheus) and /v1/stats (the typed sample `strata iostat` reads).

use super::D;
use crate::http::blocking;
use crate::http::extract::Query;
use crate::service::ApiError;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use std::sync::Arc;
use strata_api::*;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<crate::service::Daemon>> {
    OpenApiRouter::new().routes(routes!(metrics)).routes(routes!(stats))
}

/// The I/O counters of every volume served (by protocol and class of operation) and the
/// figures of every open pool, in the OpenMetrics 1.0 text format that Prometheus scrapes
/// (docs/observability.md). Needs a viewer token over TCP, like every route.
#[utoipa::path(get, path = "/metrics", tag = "stats", security(("token" = ["viewer"])),
    responses((status = 200, description = "OpenMetrics text", body = String,
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")))]
async fn metrics(d: D) -> Result<impl IntoResponse, ApiError> {
    let text = blocking(&d, |d| Ok(d.metrics_text())).await?;
    Ok(([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text))
}

/// A sample of the counters: per volume and protocol, operations, bytes, errors and latency
/// (percentiles and histogram) of reads, writes, syncs, trims and other operations since
/// the daemon started; per pool, space and commits. Two samples make rates (`strata iostat`).
#[utoipa::path(get, path = "/v1/stats", tag = "stats", security(("token" = ["viewer"])),
    params(StatsQuery), responses((status = 200, body = IoStats)))]
async fn stats(d: D, Query(q): Query<StatsQuery>) -> Result<Json<IoStats>, ApiError> {
    blocking(&d, move |d| d.io_stats(&q)).await.map(Json)
}
