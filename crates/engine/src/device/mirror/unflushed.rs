//! What the members may hold only in their volatile caches: the logical ranges written since
//! the last flush that ended, so that a member that fails (FAULTED, REMOVED) is covered by the
//! missed map for them as well as for the writes that skip it afterwards. A device that
//! vanished or was power-cycled may come back without its unflushed writes; with these
//! ranges in the map, `online` resyncs what it may lack instead of every live extent (the
//! dirty time log OpenZFS keeps for a vdev that faults: vdev_dtl_dirty on a failed write,
//! resilver of the DTL when it returns).
//!
//! - A write is recorded when it completes (`note_written`), whatever its members' results,
//!   tagged with the flush epoch it completed in. A flush takes a new epoch when it starts
//!   (`begin_flush`); when it ends, every range tagged before it is on stable media on every
//!   member still in use (`flushed`). Recording at completion, not at issue, keeps a write
//!   that finishes after a flush started from being dropped by that flush. A durable write
//!   (FUA, DSYNC: the intent log's blocks) that every member took is not recorded: it is in
//!   no cache; one that failed on a member is.
//! - A member that leaves use with a fault takes every range still recorded into the map
//!   (`fault`: mod.rs) before its label says FAULTED. A write that completes after that
//!   marks the map itself (`note_written` marks while the map covers anyone): it may have
//!   reached the failed member's cache just before the failure.
//! - Bounded: past `RANGES_MAX` ranges the record stops and a fault meanwhile does not cover
//!   the member (it is rebuilt whole, as before the map), until a flush that started after
//!   the overflow ends.
//! - Not recorded: repair and rebuild writes to one member (a repaired copy lost from a
//!   cache is found again by the checksum that found it the first time).

use std::collections::VecDeque;

/// Most ranges kept between flushes (24 bytes each).
const RANGES_MAX: usize = 1 << 16;

#[derive(Debug, Default)]
pub(super) struct Unflushed {
    /// (start, end, epoch it completed in), in completion order (epochs ascending).
    ranges: VecDeque<(u64, u64, u64)>,
    /// The epoch of the flush started last (0: none yet).
    epoch: u64,
    /// The newest epoch a completed write went unrecorded in.
    overflow: Option<u64>,
}

impl Unflushed {
    /// A write of logical `start..end` completed.
    pub(super) fn add(&mut self, start: u64, end: u64) {
        let epoch = self.epoch;
        if start >= end {
            return;
        }
        if self.overflow.is_some() {
            // The newest epoch a write went unrecorded in: only a flush after it clears.
            self.overflow = Some(epoch);
            return;
        }
        if let Some(last) = self.ranges.back_mut() {
            // A commit's runs: consecutive writes extend the last range.
            if last.2 == epoch && start <= last.1 && end >= last.0 {
                *last = (last.0.min(start), last.1.max(end), epoch);
                return;
            }
        }
        if self.ranges.len() >= RANGES_MAX {
            self.overflow = Some(epoch);
            return;
        }
        self.ranges.push_back((start, end, epoch));
    }

    /// A flush starts: its epoch, for `flushed`.
    pub(super) fn begin_flush(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch
    }

    /// The flush of `epoch` ended on every member in use: what completed before it started
    /// is on stable media.
    pub(super) fn flushed(&mut self, epoch: u64) {
        while self.ranges.front().is_some_and(|r| r.2 < epoch) {
            self.ranges.pop_front();
        }
        if self.overflow.is_some_and(|o| o < epoch) {
            self.overflow = None;
        }
    }

    /// Every range a member that fails now may lack from its cache; None if the record
    /// overflowed (then nothing short of a whole rebuild says it).
    pub(super) fn ranges(&self) -> Option<Vec<(u64, u64)>> {
        match self.overflow {
            Some(_) => None,
            None => Some(self.ranges.iter().map(|&(s, e, _)| (s, e)).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_drops_only_what_completed_before_it_started() {
        let mut u = Unflushed::default();
        u.add(0, 100);
        u.add(100, 200);
        let e1 = u.begin_flush();
        // Completed while the flush ran: not covered by it.
        u.add(500, 600);
        let e2 = u.begin_flush();
        u.add(900, 1000);
        u.flushed(e1);
        assert_eq!(u.ranges(), Some(vec![(500, 600), (900, 1000)]));
        u.flushed(e2);
        assert_eq!(u.ranges(), Some(vec![(900, 1000)]));
        // A flush that ends out of order drops nothing it did not cover.
        u.flushed(e1);
        assert_eq!(u.ranges(), Some(vec![(900, 1000)]));
    }

    #[test]
    fn an_overflowing_record_says_so_until_a_later_flush_ends() {
        let mut u = Unflushed::default();
        for k in 0..=RANGES_MAX as u64 {
            u.add(k * 10, k * 10 + 5);
        }
        assert_eq!(u.ranges(), None);
        let e = u.begin_flush();
        u.add(1, 2);
        assert_eq!(u.ranges(), None, "a write after the overflow, before a flush ended");
        u.flushed(e);
        // The write dropped after that flush started is not covered by it.
        assert_eq!(u.ranges(), None, "a flush cleared a write that completed after it started");
        let e = u.begin_flush();
        u.flushed(e);
        assert_eq!(u.ranges(), Some(vec![]));
    }
}
