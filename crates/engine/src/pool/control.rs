//! What drives a long walk over a pool — a scrub, a check, a clone split — from outside the
//! engine (which has no clock): told the bytes to walk at the start, then each block's size
//! as it is done; it may wait in `block_done` (a paused or paced scrub) and returns false to
//! stop the walk there (cancelled). The daemon's jobs implement it (progress, cancel).
//!
//! A scrub can resume where an earlier one stopped (a restart of the daemon): the walk
//! visits data records in [`WalkBookmark`] order and tells the control each position up to
//! which every record is verified (`reached`); a walk given `resume_after` does not read the
//! records at or before it again (`block_skipped`). Records written since were checksummed
//! as they were written, and the metadata is walked (and verified) whole every time.

/// A data record's place in a scrub's walk: the volume or snapshot tree (by id), the object
/// in it, the record in the object. Trees are walked by id, objects by id, records in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WalkBookmark {
    pub tree: u64,
    pub object: u64,
    pub record: u64,
}

pub trait WalkControl: Sync {
    fn begin(&self, total_bytes: u64);
    fn block_done(&self, bytes: u64) -> bool;
    /// Data records at or before this position were verified by an earlier walk: not read
    /// again.
    fn resume_after(&self) -> Option<WalkBookmark> {
        None
    }
    /// A data block of `bytes` not read again (at or before `resume_after`).
    fn block_skipped(&self, _bytes: u64) {}
    /// Every data record up to `at` (in walk order) is verified.
    fn reached(&self, _at: WalkBookmark) {}
}
