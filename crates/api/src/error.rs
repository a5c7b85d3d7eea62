//! The error body every failed request gets, and what each kind asks of the caller.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The kinds of failure. Each says what the caller should do (SlateDB RFC 0007's shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum ErrorKind {
    /// The request is wrong (a field, a name, a size): fix it and send it again.
    InvalidArgument,
    /// No credentials, or credentials the daemon does not know: send a valid token.
    Unauthenticated,
    /// The caller's role may not do this: ask an administrator.
    PermissionDenied,
    /// The request's Content-Type is not application/json.
    UnsupportedMediaType,
    /// No such pool, volume, snapshot, export, token or route: check the name.
    NotFound,
    /// The name is taken: choose another.
    AlreadyExists,
    /// The request conflicts with the state (mounted, exported, has snapshots, in use,
    /// another host's pool): deal with what the message names first.
    Conflict,
    /// The pool refuses writes (latched after an I/O error, or opened read-only).
    ReadOnly,
    /// Out of space (pool or volume limit): free space or grow.
    NoSpace,
    /// The pool's device failed: check it; the daemon's log has the detail.
    Io,
    /// Damage was found on disk: run `strata check`, restore from a replica or backup.
    Corruption,
    /// The pool or request needs something this build does not have.
    Unsupported,
    /// The pool cannot be served now (a device is missing or unreadable).
    Unavailable,
    /// A fault of the daemon: see its log.
    Internal,
}

impl ErrorKind {
    /// The HTTP status the daemon answers with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::InvalidArgument => 400,
            ErrorKind::Unauthenticated => 401,
            ErrorKind::PermissionDenied => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::AlreadyExists | ErrorKind::Conflict | ErrorKind::ReadOnly => 409,
            ErrorKind::UnsupportedMediaType => 415,
            ErrorKind::Unsupported => 501,
            ErrorKind::Unavailable => 503,
            ErrorKind::NoSpace => 507,
            ErrorKind::Io | ErrorKind::Corruption | ErrorKind::Internal => 500,
        }
    }

    /// The CLI's exit status for this kind (documented in docs/api.md and `strata --help`):
    /// 2 usage, 3 not found, 4 conflict, 5 refused access, 1 any other failure.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::InvalidArgument | ErrorKind::UnsupportedMediaType => EXIT_USAGE,
            ErrorKind::NotFound => EXIT_NOT_FOUND,
            ErrorKind::AlreadyExists | ErrorKind::Conflict | ErrorKind::ReadOnly => EXIT_CONFLICT,
            ErrorKind::Unauthenticated | ErrorKind::PermissionDenied => EXIT_ACCESS,
            _ => EXIT_FAILURE,
        }
    }
}

/// Exit statuses of the `strata` command.
pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_NOT_FOUND: u8 = 3;
pub const EXIT_CONFLICT: u8 = 4;
pub const EXIT_ACCESS: u8 = 5;
/// The daemon could not be reached at all.
pub const EXIT_UNREACHABLE: u8 = 6;

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorInfo {
    pub kind: ErrorKind,
    /// What went wrong, with the names and numbers involved.
    pub message: String,
    /// What to do next.
    pub hint: String,
}

/// The body of every response with a status of 400 or more.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorInfo,
}
