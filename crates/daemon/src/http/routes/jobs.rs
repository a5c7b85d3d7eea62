//! /v1/jobs: long operations as resources (service/jobs.rs).

use super::D;
use crate::http::blocking;
use crate::http::extract::Path;
use crate::service::ApiError;
use axum::Json;
use std::sync::Arc;
use strata_api::JobInfo;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) fn routes() -> OpenApiRouter<Arc<crate::service::Daemon>> {
    OpenApiRouter::new().routes(routes!(list_jobs)).routes(routes!(show_job)).routes(routes!(cancel_job))
}

/// The jobs — checks, scrubs, clone splits, mirror transfers, rebuilds — running and the
/// newest 200 ended, oldest first.
#[utoipa::path(get, path = "/v1/jobs", tag = "jobs", security(("token" = ["viewer"])),
    responses((status = 200, body = Vec<JobInfo>)))]
async fn list_jobs(d: D) -> Result<Json<Vec<JobInfo>>, ApiError> {
    blocking(&d, |d| Ok(d.jobs.list())).await.map(Json)
}

/// One job: its state, progress, rate and ETA; at its end, its result or error.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", security(("token" = ["viewer"])),
    params(("id" = u64, Path)), responses((status = 200, body = JobInfo)))]
async fn show_job(d: D, Path(id): Path<u64>) -> Result<Json<JobInfo>, ApiError> {
    blocking(&d, move |d| d.jobs.get(id)).await.map(Json)
}

/// Stop a running job at its next step (what it did so far stays done); it ends `cancelled`.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "jobs", security(("token" = ["operator"])),
    params(("id" = u64, Path)), responses((status = 200, body = JobInfo)))]
async fn cancel_job(d: D, Path(id): Path<u64>) -> Result<Json<JobInfo>, ApiError> {
    blocking(&d, move |d| d.jobs.cancel(id)).await.map(Json)
}
