//! The errors of a device set's I/O: which of the members' errors a call returns (a gone
//! device explains only itself; recording a fault that failed explains a suspended set),
//! and the error of a set with no member left in use.

use std::io;

/// The error of a mirror with no member left in use; `cause`: why the last member in use
/// was taken out (the power went, say: the error an I/O that found the set suspended
/// reports, as the one that suspended it did).
pub(super) fn suspended_because(what: &str, cause: Option<&str>) -> io::Error {
    let cause = cause.map(|c| format!("; the last member out: {c}")).unwrap_or_default();
    io::Error::other(format!(
        "{what}: no device of the mirror is in use (pool suspended{cause}); bring a device back and reopen the pool"
    ))
}

/// Errors that say the device itself is gone, not that one I/O failed.
pub(super) fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENODEV | libc::ENXIO | libc::ENOENT | libc::ESTALE | libc::ENOTCONN | libc::ECONNABORTED)
    )
}

/// Of two errors met by one call, the one to return: a device that is gone explains only
/// itself, so an error of another device (the power went, say) is kept over it.
pub(super) fn keep(last: Option<io::Error>, new: Option<io::Error>) -> Option<io::Error> {
    match (last, new) {
        (Some(old), Some(new)) if is_gone(&new) && !is_gone(&old) => Some(old),
        (old, None) => old,
        (_, new) => new,
    }
}

/// The errors the members met in one call that writes to several of them, and the one to
/// return. A gone device explains only itself: any other error is returned over it. A
/// member's own failure is absorbed while the set is usable; if the call fails, the set
/// stopped being usable when recording a fault failed (the label writes to the other
/// members: the power went, say), so that error is returned over the members' own. Then
/// the error most members met over one only a member met; among equals, the latest.
#[derive(Default)]
pub(super) struct Causes(Vec<(io::Error, bool)>);

impl Causes {
    /// A member's own error in the call.
    pub(super) fn add(&mut self, e: Option<io::Error>) {
        self.0.extend(e.map(|e| (e, false)));
    }

    /// An error met while recording a member's fault in the other members' labels.
    pub(super) fn add_recording(&mut self, e: Option<io::Error>) {
        self.0.extend(e.map(|e| (e, true)));
    }

    pub(super) fn take(self) -> Option<io::Error> {
        let rank = |(e, recording): &(io::Error, bool)| {
            let same = self.0.iter().filter(|(o, _)| o.kind() == e.kind() && o.to_string() == e.to_string()).count();
            (!is_gone(e), *recording, same)
        };
        let best = (0..self.0.len()).max_by_key(|&i| (rank(&self.0[i]), i))?;
        self.0.into_iter().nth(best).map(|(e, _)| e)
    }
}
