//! Errors of the engine.
//!
//! Three kinds, kept apart on purpose (STYLE.md "Errors and assertions"):
//! - operating errors (`NoSpace`, `Io`, `InvalidArgument`, ...) are ordinary `Result`s the
//!   caller can act on;
//! - detected corruption is a typed [`Corruption`] value that says what was expected and what
//!   was found, and is counted; it is never a panic and never silently returned data;
//! - programmer errors are assertions.
//!
//! [`Error::kind`] maps every error onto the small public set of [`ErrorKind`]s; each kind's
//! documentation says what a caller should do about it.

use std::fmt;

/// What a caller should do, by error kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request itself is wrong (bad name, size, offset, record size): fix the request.
    InvalidArgument,
    /// The named pool, volume or object does not exist: check the name or id.
    NotFound,
    /// The name is taken: pick another name or delete the existing one.
    AlreadyExists,
    /// The pool is out of space (or a volume at its quota): free space, then retry.
    /// [`Error::space_reason`] says which limit was met.
    NoSpace,
    /// A device read, write or flush failed: check the device, then reopen the pool.
    Io,
    /// Stored bytes failed verification: restore from redundancy or backup; run `strata check`.
    Corruption,
    /// The pool refuses writes (opened read-only, or latched after a failed write or flush):
    /// reopen the pool once the device is healthy.
    ReadOnly,
    /// The pool uses a format feature this build does not know: upgrade Strata.
    Unsupported,
    /// Something depends on what the request would remove or change (a snapshot with
    /// clones): deal with the dependents named in the message first.
    Busy,
}

/// Verification of stored bytes failed: what was being read, where, and what differed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// Which structure was being decoded ("uberblock", "btree node", "data block", ...).
    pub what: &'static str,
    /// Byte address on the device, when known.
    pub addr: Option<u64>,
    /// What was expected and what was found.
    pub detail: String,
}

impl Corruption {
    pub fn new(what: &'static str, addr: Option<u64>, detail: impl Into<String>) -> Corruption {
        Corruption { what, addr, detail: detail.into() }
    }
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            Some(addr) => write!(f, "corrupt {} at byte {}: {}", self.what, addr, self.detail),
            None => write!(f, "corrupt {}: {}", self.what, self.detail),
        }
    }
}

/// Which limit a [`Error::NoSpace`] met; front ends map it (a volume's size limit is a quota,
/// EDQUOT; everything else is ENOSPC), never the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceReason {
    /// The pool is full (or what is left is held for other volumes' reservations): free
    /// space or grow the pool.
    Pool,
    /// The volume is at its size limit (`quota_bytes`): free space in it or raise the limit.
    Quota,
    /// A reservation cannot be honoured by the pool: lower it, free space or grow the pool.
    Reservation,
    /// The volume has as many snapshots as it may have: delete old ones first.
    Snapshots,
}

/// A [`Error::NoSpace`]: which limit was met, and the message shown to people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoSpace {
    pub reason: SpaceReason,
    pub message: String,
}

impl fmt::Display for NoSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("already exists: {0}")]
    AlreadyExists(String),
    #[error("no space left: {0}")]
    NoSpace(NoSpace),
    #[error("I/O error while trying to {context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Corruption(Corruption),
    #[error("pool is read-only: {0}")]
    ReadOnly(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("in use: {0}")]
    Busy(String),
    /// A change other than a data write, asked for in a [`crate::Pool::txn_data`] while a
    /// commit writes its data (quiesce.rs): run it again in a [`crate::Pool::txn`].
    #[error("in use: a commit is writing the txg this change would alter; retry once it has synced")]
    CommitInFlight,
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::AlreadyExists(_) => ErrorKind::AlreadyExists,
            Error::NoSpace(_) => ErrorKind::NoSpace,
            Error::Io { .. } => ErrorKind::Io,
            Error::Corruption(_) => ErrorKind::Corruption,
            Error::ReadOnly(_) => ErrorKind::ReadOnly,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::Busy(_) | Error::CommitInFlight => ErrorKind::Busy,
        }
    }

    /// Which limit a `NoSpace` met; `None` for every other error.
    pub fn space_reason(&self) -> Option<SpaceReason> {
        match self {
            Error::NoSpace(n) => Some(n.reason),
            _ => None,
        }
    }

    pub(crate) fn no_space(reason: SpaceReason, message: impl Into<String>) -> Error {
        Error::NoSpace(NoSpace { reason, message: message.into() })
    }

    pub(crate) fn io(context: &'static str, source: std::io::Error) -> Error {
        Error::Io { context, source }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Error {
        Error::InvalidArgument(msg.into())
    }
}

impl From<Corruption> for Error {
    fn from(c: Corruption) -> Error {
        Error::Corruption(c)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_space_keeps_its_kind_message_and_reason() {
        for reason in [SpaceReason::Pool, SpaceReason::Quota, SpaceReason::Reservation, SpaceReason::Snapshots] {
            let e = Error::no_space(reason, "volume v is at its size limit of 4096 bytes");
            assert_eq!(e.kind(), ErrorKind::NoSpace);
            assert_eq!(e.space_reason(), Some(reason));
            assert_eq!(e.to_string(), "no space left: volume v is at its size limit of 4096 bytes");
        }
        assert_eq!(Error::invalid("size limit").space_reason(), None);
    }
}
