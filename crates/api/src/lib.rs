//! The control API's vocabulary: every request and response body, the error body and its
//! kinds, and the roles — one set of types for the daemon (which serves them and generates
//! the OpenAPI document from them, docs/openapi.json) and the CLI (which reads them: no
//! untyped maps, no silent defaults).
//!
//! Conventions: requests refuse unknown fields (a typo is an error, not a no-op); responses
//! accept fields they do not know (a newer daemon may add some); sizes are bytes, times are
//! nanoseconds since 1970 (`_ns`) or seconds (`_seconds`), names are the DESIGN.md
//! vocabulary. This crate knows nothing of HTTP beyond the status each error kind maps to.

mod access;
mod error;
mod exports;
mod jobs;
mod mirrors;
mod peers;
mod pools;
mod snapshots;
mod stats;
mod volumes;

pub use access::*;
pub use error::*;
pub use exports::*;
pub use jobs::*;
pub use mirrors::*;
pub use peers::*;
pub use pools::*;
pub use snapshots::*;
pub use stats::*;
pub use volumes::*;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /v1/health`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
    /// Who the daemon takes the caller for, and the caller's role.
    pub caller: String,
    pub role: Role,
}

/// What a delete or similar action did, in words and names.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Done {
    /// What was acted on: POOL, POOL/VOLUME, POOL/VOLUME@SNAPSHOT, an export id, a path.
    pub target: String,
    /// Everything else the action removed or changed (e.g. the snapshots a recursive
    /// delete took with it).
    #[serde(default)]
    pub also: Vec<String>,
}

/// `GET /v1/events`: one event of the history (service/events.rs).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventInfo {
    /// Grows by one per event, across restarts: follow with `?after=ID`.
    pub id: u64,
    pub time_ns: u64,
    /// `info`, `warning` or `error`.
    pub severity: String,
    /// What happened: `mirror.transfer`, `mirror.failed`, `mirror.break`, `mirror.resync`,
    /// `mirror.reverse`, `scrub.finished`, `scrub.failed`, `device.state`, `request.refused`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The volume, mirror, device or caller concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub message: String,
}

/// Query of `GET /v1/events`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events after this id (to follow: the last id seen).
    pub after: Option<u64>,
    /// At most this many of the newest (default 100).
    pub limit: Option<u32>,
}
