//! The control API over HTTP: routes (one file per resource under routes/), the guard
//! every request passes (guard.rs: who is calling, may they, and the audit record), the
//! listeners (server.rs), and the OpenAPI document generated from the routes and the
//! strata-api types (served at /v1/openapi.json, kept in docs/openapi.json; a test fails
//! when the two differ or a route is missing from it).
//!
//! Each route's required role is its OpenAPI security scope (`token: [operator]`), and the
//! guard reads the roles from the generated document: what the document says is what is
//! enforced, and a route without a scope is refused to everyone.

pub(crate) mod console;
mod extract;
pub(crate) mod guard;
mod routes;
pub(crate) mod server;

use crate::service::{ApiError, Daemon};
use axum::Router;
use serde_json::{json, Value};
use std::sync::Arc;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Strata control API",
        description = "Every `strata` CLI verb is one call here. Callers: the Unix socket (root and the daemon's group are admins) or TCP with `Authorization: Bearer TOKEN`. Every request that changes something must be `Content-Type: application/json`. Errors are `{\"error\": {\"kind\", \"message\", \"hint\"}}`.",
        license(name = "Apache-2.0")
    ),
    components(schemas(strata_api::ErrorBody, strata_api::ErrorKind, strata_api::Role))
)]
struct ApiDoc;

/// Run a service call on the blocking pool (services do I/O and take locks). A panic in it
/// ends this request with an Internal error; the daemon goes on.
pub(crate) async fn blocking<T: Send + 'static>(
    d: &Arc<Daemon>,
    f: impl FnOnce(&Daemon) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let d = d.clone();
    tokio::task::spawn_blocking(move || f(&d))
        .await
        .map_err(|e| ApiError::internal(format!("the request's handler failed: {e}")))?
}

/// `blocking` for services that start background work and so need the daemon's `Arc`.
pub(crate) async fn blocking_arc<T: Send + 'static>(
    d: &Arc<Daemon>,
    f: impl FnOnce(&Arc<Daemon>) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let d = d.clone();
    tokio::task::spawn_blocking(move || f(&d))
        .await
        .map_err(|e| ApiError::internal(format!("the request's handler failed: {e}")))?
}

/// The router (without the guard and the daemon) and the OpenAPI document of its routes.
pub(crate) fn routes() -> (Router<Arc<Daemon>>, Value) {
    let (router, api) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(routes::access::routes())
        .merge(routes::pools::routes())
        .merge(routes::volumes::routes())
        .merge(routes::snapshots::routes())
        .merge(routes::exports::routes())
        .merge(routes::mirrors::routes())
        .merge(routes::events::routes())
        .merge(routes::jobs::routes())
        .merge(routes::stats::routes())
        .merge(routes::peers::routes())
        .split_for_parts();
    let mut doc = serde_json::to_value(&api).expect("the OpenAPI document serialises");
    complete_document(&mut doc);
    (router, doc)
}

/// The OpenAPI document as docs/openapi.json holds it.
pub fn openapi_document() -> String {
    let (_, doc) = routes();
    serde_json::to_string_pretty(&doc).expect("serialises") + "\n"
}

/// What every route can answer besides its own successes: the guard's refusals and the
/// error kinds of the services, all with the error body; and the bearer scheme.
fn complete_document(doc: &mut Value) {
    let err = |d: &str| json!({"description": d, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}});
    let common = [
        ("400", "InvalidArgument: the request is wrong; the message says which field"),
        ("401", "Unauthenticated: no token or an unknown one (TCP)"),
        ("403", "PermissionDenied: the caller's role may not do this, or a browser's cross-origin request"),
        ("404", "NotFound: no such pool, volume, snapshot, export, token or route"),
        ("409", "AlreadyExists, Conflict or ReadOnly: deal with what the message names first"),
        ("413", "InvalidArgument: the request body is over 64 KiB"),
        ("415", "UnsupportedMediaType: a request that changes something must be application/json"),
        ("500", "Io, Corruption or Internal"),
        ("503", "Unavailable: the pool's device is missing or unreadable"),
        ("507", "NoSpace"),
    ];
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for item in paths.values_mut() {
            let Some(ops) = item.as_object_mut() else { continue };
            for op in ops.values_mut() {
                let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else { continue };
                for (code, what) in common {
                    responses.entry(code).or_insert_with(|| err(what));
                }
            }
        }
    }
    doc["components"]["securitySchemes"] = json!({
        "token": {"type": "http", "scheme": "bearer",
                  "description": "A token from `strata token create`; its role (viewer, operator, admin) is the scope. Unix-socket callers need none: root and the daemon's group are admins."}
    });
}
