//! What drives a long walk over a pool — a scrub, a check, a clone split — from outside the
//! engine (which has no clock): told the bytes to walk at the start, then each block's size
//! as it is done; it may wait in `block_done` (a paused or paced scrub) and returns false to
//! stop the walk there (cancelled). The daemon's jobs implement it (progress, cancel).

pub trait WalkControl: Sync {
    fn begin(&self, total_bytes: u64);
    fn block_done(&self, bytes: u64) -> bool;
}
