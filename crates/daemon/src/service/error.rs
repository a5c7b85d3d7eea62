//! The services' error: a kind from the API's vocabulary, what went wrong, what to do.
//! Services know nothing of HTTP; the HTTP layer turns the kind into a status.

use strata_api::ErrorKind;
use strata_engine::{Error, ErrorKind as EngineKind};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    pub hint: String,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>, hint: impl Into<String>) -> ApiError {
        ApiError { kind, message: message.into(), hint: hint.into() }
    }
    pub fn bad_request(message: impl Into<String>, hint: &str) -> ApiError {
        ApiError::new(ErrorKind::InvalidArgument, message, hint)
    }
    pub fn not_found(message: impl Into<String>, hint: &str) -> ApiError {
        ApiError::new(ErrorKind::NotFound, message, hint)
    }
    pub fn conflict(message: impl Into<String>, hint: &str) -> ApiError {
        ApiError::new(ErrorKind::Conflict, message, hint)
    }
    pub fn unavailable(message: impl Into<String>, hint: &str) -> ApiError {
        ApiError::new(ErrorKind::Unavailable, message, hint)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Internal, message, "see the daemon log")
    }
    /// The body's part of the error (what a job keeps of its failure).
    pub fn info(&self) -> strata_api::ErrorInfo {
        strata_api::ErrorInfo { kind: self.kind, message: self.message.clone(), hint: self.hint.clone() }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.hint)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let (kind, hint) = match e.kind() {
            EngineKind::InvalidArgument => (ErrorKind::InvalidArgument, "fix the request (see docs/api.md)"),
            EngineKind::NotFound => (ErrorKind::NotFound, "check the name (`strata pool list`, `strata volume list`)"),
            EngineKind::AlreadyExists => (ErrorKind::AlreadyExists, "choose another name"),
            EngineKind::NoSpace => (ErrorKind::NoSpace, "free space or grow the pool"),
            EngineKind::Io => (ErrorKind::Io, "check the device; the pool may need a restart of the daemon"),
            EngineKind::Corruption => (ErrorKind::Corruption, "run `strata check`; restore from a replica or backup"),
            EngineKind::ReadOnly => {
                (ErrorKind::ReadOnly, "the pool refuses writes: restart the daemon once the device is healthy")
            }
            EngineKind::Unsupported => (ErrorKind::Unsupported, "upgrade Strata"),
            EngineKind::Busy => (ErrorKind::Conflict, "deal with what depends on it first (named in the message)"),
        };
        ApiError { kind, message: e.to_string(), hint: hint.into() }
    }
}
