//! Roles, tokens and the audit history.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// What a caller may do. Ordered: each role may do everything the ones before it may.
/// - `viewer`: read anything, change nothing.
/// - `operator`: also volumes, snapshots, clones, restores, mounts, exports and policies —
///   no pool or device changes, no tokens.
/// - `admin`: everything (root and members of the daemon's socket group on the Unix socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// `POST /v1/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// A name to recognise it by in `token list` and the history (1-64 of a-z 0-9 . _ -).
    pub name: String,
    pub role: Role,
}

/// A token as listed: never its secret (only a hash of it is kept).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    pub name: String,
    pub role: Role,
    pub created_ns: u64,
    /// Who created it.
    pub created_by: String,
}

/// The answer to `POST /v1/tokens`: the secret, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedToken {
    #[serde(flatten)]
    pub info: TokenInfo,
    /// Send as `Authorization: Bearer TOKEN` (the CLI: STRATA_TOKEN).
    pub token: String,
}

/// One change the daemon was asked for, and what came of it (`strata history`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HistoryEntry {
    pub time_ns: u64,
    /// `uid 0 (root)`, `token ci (operator)`, or `daemon` for its own actions.
    pub caller: String,
    /// The route: `DELETE /v1/pools/{pool}/volumes/{volume}`.
    pub operation: String,
    /// The request's path with its names: `/v1/pools/tank/volumes/db`.
    pub target: String,
    /// The request body as sent (JSON, cut at 1 KiB), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    pub status: u16,
    /// `ok`, or the error's message.
    pub result: String,
}

/// Query of `GET /v1/history`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Only entries about this pool.
    pub pool: Option<String>,
    /// At most this many of the newest entries (default 1000).
    pub limit: Option<u32>,
}
