//! What a member taken offline missed: the logical ranges written while it was OFFLINE (a
//! dirty time log, as OpenZFS keeps per vdev, here in memory), so that `online` copies the
//! live extents that overlap them and nothing else — an hour offline under a database that
//! rewrote 200 MB copies about 200 MB, not every live byte.
//!
//! - `offline` covers the member in the missed map (missed_map.rs), writes the labels, then
//!   starts the record and marks the member OFFLINE under the record's lock; a write picks
//!   its targets with `written_or_missed`, which for a member it leaves out adds the write's
//!   range to the record under the same lock (and to the map, durably, before the write is
//!   issued). So a write either picked the member (and reaches it: the device stays
//!   attached while offline) or is in the record and the map.
//! - `online` marks the member REBUILDING and takes the record under that lock too
//!   (`replace`): a write after that reaches the member, one before is in what was taken.
//!   The rebuild then copies, window by window, the pool's live extents that overlap a
//!   missed range (`Missed::clip`). Everything else on the member is as it was when it went
//!   offline, in sync then (only members in use can be taken offline).
//! - After a restart with the member still offline the record is rebuilt from the missed
//!   map (its regions: coarser, at least 64 KiB each). A restart during a resync resumes at
//!   the persisted cursor copying every live extent above it: below it, the missed ranges
//!   were copied and the rest was in sync.
//! - Bounded: past `RANGES_MAX` ranges they are merged with neighbours up to `COARSE_GAP`
//!   apart (copying the free space between them too, harmless); if that is not enough the
//!   in-memory record is dropped and `online` resyncs the missed map's regions instead.
//!   The map is marked under the record's lock, so when `online` takes the lock every
//!   write that skipped the member is in the map.
//! - A write that chose the member before it went offline and failed there drops the
//!   record (`forget_missed`): the member lacks that write too. The map has it (every
//!   completed write marks the map while it covers a member: `note_written`), so `online`
//!   resyncs the map's regions.
//! - Only OFFLINE members keep an in-memory record. A member that fails while in sync
//!   (FAULTED, REMOVED) is covered by the map instead, with what it may have lost from its
//!   cache (unflushed.rs); one that fails while being rebuilt, a STALE one (missing at
//!   open) and a replaced one are rebuilt whole.

use super::errors::Causes;
use super::{lock, MemberState, MirrorDevice};
use crate::device::BlockDevice;
use crate::sync::atomic::Ordering;
use std::sync::Arc;

/// Most ranges a record keeps (16 bytes each) before it merges neighbours.
pub(super) const RANGES_MAX: usize = 1 << 20;
/// Ranges less than this apart are merged when the record is full.
const COARSE_GAP: u64 = 1 << 20;

/// Logical ranges (start, end) a member missed, in the order written until `normalize`d.
#[derive(Debug, Default)]
pub(super) struct Missed {
    ranges: Vec<(u64, u64)>,
    /// Ranges were merged with their neighbours (the record is coarser than the writes).
    coarse: bool,
}

impl Missed {
    /// A record of whole regions (from the missed map), sorted and disjoint.
    pub(super) fn from_regions(ranges: Vec<(u64, u64)>) -> Missed {
        Missed { ranges, coarse: true }
    }

    /// Add `start..end`; false when the record gave up (too many ranges even merged).
    fn add(&mut self, start: u64, end: u64, max: usize) -> bool {
        if start >= end {
            return true;
        }
        // Consecutive writes (a commit's runs) extend the last range.
        if let Some(last) = self.ranges.last_mut() {
            if start <= last.1 && end >= last.0 {
                *last = (last.0.min(start), last.1.max(end));
                return true;
            }
        }
        self.ranges.push((start, end));
        if self.ranges.len() < max {
            return true;
        }
        self.normalize(0);
        if self.ranges.len() >= max / 2 {
            self.normalize(COARSE_GAP);
            self.coarse = true;
        }
        self.ranges.len() < max / 2
    }

    /// Sort the ranges and merge those overlapping or less than `gap` apart.
    fn normalize(&mut self, gap: u64) {
        self.ranges.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.ranges.len());
        for &(s, e) in &self.ranges {
            match out.last_mut() {
                Some(last) if s <= last.1.saturating_add(gap) => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        self.ranges = out;
    }

    /// The record, sorted and merged: what a resync copies (`clip`).
    pub(super) fn finish(mut self) -> Missed {
        self.normalize(0);
        self
    }

    /// Bytes the record covers (after `finish`).
    pub(super) fn bytes(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    pub(super) fn ranges(&self) -> usize {
        self.ranges.len()
    }

    pub(super) fn coarse(&self) -> bool {
        self.coarse
    }

    /// The parts of `extents` ((offset, length), ascending) inside the record (after
    /// `finish`), ascending.
    pub(super) fn clip(&self, extents: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for &(o, l) in extents {
            let end = o.saturating_add(l);
            // The first range that ends after `o`.
            let first = self.ranges.partition_point(|r| r.1 <= o);
            for &(s, e) in self.ranges.iter().skip(first).take_while(|r| r.0 < end) {
                let (a, b) = (s.max(o), e.min(end));
                if a < b {
                    out.push((a, b - a));
                }
            }
        }
        out
    }
}

impl MirrorDevice {
    /// Member `i`'s device if writes go to it. If they do not and the member keeps a record
    /// of what it misses, `range` (logical start, end) is added to it, under the record's
    /// lock, which `offline` and `online` change the member's state under.
    /// Errors its map writes met go to `causes` (reported if the write fails).
    pub(super) fn written_or_missed(
        &self,
        i: usize,
        range: Option<(u64, u64)>,
        causes: &mut Causes,
    ) -> Option<Arc<dyn BlockDevice>> {
        let m = self.members.get(i)?;
        if let Some(d) = m.written() {
            return Some(d);
        }
        let mut rec = lock(&m.missed);
        if let Some(d) = m.written() {
            return Some(d);
        }
        let (start, end) = range?;
        if let Some(missed) = rec.as_mut() {
            if !missed.add(start, end, self.missed_ranges_max.load(Ordering::Relaxed)) {
                *rec = None;
                m.set_note(
                    "taken offline; it missed too many separate writes to track them one by one: online resyncs \
                     the regions of the missed map"
                        .into(),
                );
            }
        }
        // Under the record's lock: `take_missed` then finds every skipped write in the map
        // (the map covers offline members and failed ones: unflushed.rs).
        causes.add_recording(self.map_mark(start, end));
        None
    }

    /// Ranges an in-memory record of what a member missed keeps before it gives up (tests
    /// lower it).
    #[doc(hidden)]
    pub fn set_missed_ranges_max(&self, max: usize) {
        self.missed_ranges_max.store(max.max(2), Ordering::Relaxed);
    }

    /// A write to member `i` failed: if it is offline (the write chose it before), what it
    /// lacks is no longer only what its record says, so the record goes and `online`
    /// resyncs the map's regions, which hold the failed write (`note_written` marked it
    /// before the error was handled).
    pub(super) fn forget_missed(&self, i: usize) {
        let Some(m) = self.members.get(i) else { return };
        if lock(&m.missed).take().is_some() {
            m.set_note(
                "taken offline; a write to it failed as it went: online resyncs the regions of the missed map".into(),
            );
        }
    }

    /// Mark member `i` OFFLINE and start recording what it misses; false if it is no
    /// longer in use (it failed meanwhile).
    pub(super) fn start_missed(&self, i: usize) -> bool {
        let Some(m) = self.members.get(i) else { return false };
        let mut rec = lock(&m.missed);
        let mut cur = m.state.load(Ordering::Acquire);
        while MemberState::from_usize(cur).in_use() {
            match m.state.compare_exchange(cur, MemberState::Offline.to_usize(), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    *rec = Some(Missed::default());
                    return true;
                }
                Err(now) => cur = now,
            }
        }
        false
    }

    /// Mark member `i` REBUILDING and take its record, if `resync` and it has one (else the
    /// record is dropped).
    pub(super) fn take_missed(&self, i: usize, resync: bool) -> Option<Missed> {
        let m = self.members.get(i)?;
        let mut rec = lock(&m.missed);
        // Offline, or failed while in sync (the map then covers it: unflushed.rs).
        let was_out = matches!(m.state(), MemberState::Offline | MemberState::Faulted | MemberState::Removed);
        m.state.store(MemberState::Rebuilding.to_usize(), Ordering::Release);
        // A record that gave up: the map's regions (it is marked under this lock).
        let taken = rec.take().or_else(|| self.map_record(i));
        drop(rec);
        // Its label says REBUILDING from now on: the map no longer speaks for it.
        self.map_uncover(i);
        (resync && was_out).then_some(taken).flatten().map(Missed::finish)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_merges_what_touches_and_clips_extents_to_itself() {
        let mut m = Missed::default();
        for (s, e) in [(100, 200), (200, 300), (50, 120), (1000, 1100), (400, 500)] {
            assert!(m.add(s, e, RANGES_MAX));
        }
        let m = m.finish();
        assert_eq!(m.ranges, vec![(50, 300), (400, 500), (1000, 1100)]);
        assert_eq!(m.bytes(), 250 + 100 + 100);
        assert_eq!(
            m.clip(&[(0, 60), (250, 200), (600, 100), (1050, 10), (1090, 500)]),
            vec![(50, 10), (250, 50), (400, 50), (1050, 10), (1090, 10)]
        );
        assert_eq!(m.clip(&[(0, 10_000)]), vec![(50, 250), (400, 100), (1000, 100)]);
    }

    #[test]
    fn a_full_record_coarsens_then_gives_up() {
        let mut m = Missed::default();
        // Ranges 2 MiB apart do not merge at COARSE_GAP: the record fills and gives up.
        let mut kept = true;
        for k in 0..RANGES_MAX as u64 {
            kept = m.add(k * (2 << 20), k * (2 << 20) + 4096, RANGES_MAX);
            if !kept {
                break;
            }
        }
        assert!(!kept, "a record of {} scattered ranges was kept", RANGES_MAX);
        // Ranges 64 KiB apart merge into one.
        let mut m = Missed::default();
        for k in 0..RANGES_MAX as u64 {
            assert!(m.add(k * (64 << 10), k * (64 << 10) + 4096, RANGES_MAX), "gave up at {k}");
        }
        assert!(m.coarse());
        assert_eq!(m.finish().ranges(), 1);
    }
}
