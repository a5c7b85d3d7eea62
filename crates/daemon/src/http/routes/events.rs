//! /v1/events: the event history (service/events.rs).

use super::D;
use crate::http::blocking;
use crate::http::extract::Query;
use crate::service::ApiError;
use axum::Json;
use std::sync::Arc;
use strata_api::{EventInfo, EventsQuery};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<crate::service::Daemon>> {
    OpenApiRouter::new().routes(routes!(events))
}

/// What happened to the storage, oldest first: mirror transfers and failures, breaks,
/// scrubs, device state changes, refused requests. Follow with `?after=LAST_ID`.
#[utoipa::path(get, path = "/v1/events", tag = "events", security(("token" = ["viewer"])),
    params(EventsQuery), responses((status = 200, body = Vec<EventInfo>)))]
async fn events(d: D, Query(q): Query<EventsQuery>) -> Result<Json<Vec<EventInfo>>, ApiError> {
    blocking(&d, move |d| Ok(d.events.list(q.after.unwrap_or(0), q.limit.unwrap_or(100).min(10_000) as usize)))
        .await
        .map(Json)
}
