//! The routes, one module per resource. Each handler is a thin translation: extract the
//! typed request, call the service on the blocking pool, answer with the typed response.
//! The `security` of each path is the role it needs (guard.rs enforces it).

pub(crate) mod access;
pub(crate) mod events;
pub(crate) mod exports;
pub(crate) mod jobs;
pub(crate) mod mirrors;
pub(crate) mod peers;
pub(crate) mod pools;
pub(crate) mod snapshots;
pub(crate) mod stats;
pub(crate) mod volumes;

use crate::service::Daemon;
use std::sync::Arc;

pub(crate) type D = axum::extract::State<Arc<Daemon>>;
