//! Request extractors whose refusals are the API's error body (not axum's plain text), and
//! the response of an error.

use crate::service::ApiError;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use strata_api::{ErrorBody, ErrorInfo, ErrorKind};

/// Request bodies are small JSON documents; anything larger is refused before parsing.
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;

/// The error message of a failed request, for the audit record (guard.rs).
#[derive(Clone)]
pub(crate) struct Failure(pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.kind.http_status()).expect("valid status");
        // Faults of the daemon or its devices are logged as errors; the caller's conditions
        // (no space, an UNAVAILABLE pool, an unsupported request) are answered, not logged.
        if matches!(self.kind, ErrorKind::Io | ErrorKind::Corruption | ErrorKind::Internal) {
            tracing::error!("{}", self.message);
        }
        let failure = Failure(self.message.clone());
        let body = ErrorBody { error: ErrorInfo { kind: self.kind, message: self.message, hint: self.hint } };
        let mut r = (status, axum::Json(body)).into_response();
        r.extensions_mut().insert(failure);
        r
    }
}

/// A JSON body of type T (the guard has checked the Content-Type and the size).
pub(crate) struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, ApiError> {
        let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES).await.map_err(|e| {
            ApiError::bad_request(format!("reading the request body: {e}"), "send a JSON body under 64 KiB")
        })?;
        if bytes.is_empty() {
            return serde_json::from_slice(b"{}").map(Body).map_err(|e| {
                ApiError::bad_request(
                    format!("this request needs a JSON body: {e}"),
                    "see docs/openapi.json for the fields",
                )
            });
        }
        serde_json::from_slice(&bytes).map(Body).map_err(|e| {
            ApiError::bad_request(format!("invalid JSON body: {e}"), "see docs/openapi.json for the fields")
        })
    }
}

/// Path parameters, percent-decoded.
pub(crate) struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, s)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ApiError::bad_request(format!("path: {e}"), "names in paths are percent-encoded UTF-8"))
    }
}

/// Query parameters.
pub(crate) struct Query<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, s)
            .await
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::bad_request(format!("query: {e}"), "see docs/openapi.json for the parameters"))
    }
}
