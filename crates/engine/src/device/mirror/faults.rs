//! Failure handling of a device set: faulting a member (in memory, in the missed map, then
//! in the labels of the members left), counting read, write and checksum errors, and the
//! repairs that rewrite a bad copy. See mod.rs for the rules.

use super::errors::{is_gone, keep};
use super::{lock, write_label, MemberState, MirrorDevice, CHECKSUM_ERRORS_TO_DEGRADE, READ_ERRORS_TO_FAULT};
use crate::format::member::{MemberLabelPhys, MemberPhysState, MEMBER_AREA_BYTES};
use crate::sync::atomic::Ordering;
use std::io;
use std::ops::Range;

impl MirrorDevice {
    /// Apply `change` to the configuration, bump its generation and write it to every
    /// member in use (a member whose label write fails is faulted, and the labels are
    /// written again without it). Does nothing on a read-only mirror. Returns the last
    /// error a label write met (it may say more than the error that caused the change:
    /// the power went, not only one device).
    pub(super) fn persist(&self, change: impl FnOnce(&mut MemberLabelPhys)) -> Option<io::Error> {
        if !self.writable {
            return None;
        }
        let mut last = None;
        let mut cfg = lock(&self.config);
        change(&mut cfg);
        cfg.missed_map = self.map_in_use();
        for _ in 0..=self.members.len() {
            cfg.generation += 1;
            let mut failed = false;
            for (i, m) in self.members.iter().enumerate() {
                let Some(dev) = m.written() else { continue };
                if let Err(e) = write_label(dev.as_ref(), &cfg, i) {
                    m.write_errors.fetch_add(1, Ordering::Relaxed);
                    let state = if is_gone(&e) { MemberState::Removed } else { MemberState::Faulted };
                    m.state.store(state.to_usize(), Ordering::Release);
                    m.set_note(format!("label write failed: {e}"));
                    *lock(&self.last_fault) = Some(format!("member {i}: label write failed: {e}"));
                    if let Some(entry) = cfg.members.get_mut(i) {
                        entry.state = MemberPhysState::Faulted;
                        entry.since_txg = self.txg.load(Ordering::Relaxed);
                    }
                    failed = true;
                    // A gone device explains only itself: another member's error (the
                    // power went) is the one to report.
                    last = keep(last, Some(e));
                }
            }
            if !failed {
                break;
            }
        }
        last
    }

    /// Take member `i` out of use (`state`: FAULTED or REMOVED) because of `why`, and record
    /// it in the labels of the members left. Returns what `persist` returns.
    pub(super) fn fault(&self, i: usize, state: MemberState, why: String) -> Option<io::Error> {
        let m = self.members.get(i)?;
        // Under the member's record lock, which a write that skips it takes to mark the
        // map: a member in sync is named in the map before any write may skip it.
        let (cur, covered) = {
            let _rec = lock(&m.missed);
            let mut cur = m.state.load(Ordering::Acquire);
            let mut covered = false;
            loop {
                let s = MemberState::from_usize(cur);
                if !s.in_use() && s != MemberState::Rebuilding {
                    if covered {
                        self.map_uncover(i);
                    }
                    return None;
                }
                // A member being rebuilt is not in sync anywhere past its cursor: it is
                // rebuilt whole when it comes back.
                if s.in_use() && !covered {
                    covered = self.map_cover_pending(i);
                } else if !s.in_use() && covered {
                    covered = !self.map_uncover(i);
                }
                match m.state.compare_exchange(cur, state.to_usize(), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(now) => cur = now,
                }
            }
            (cur, covered)
        };
        *lock(&self.last_fault) = Some(format!("member {i}: {why}"));
        // What it may have lost from its cache, durable before its label says FAULTED.
        let map_failed = if covered { self.map_cover_unflushed(i) } else { None };
        m.set_note(match self.map_record(i) {
            Some(_) => format!("{why}; once the device works, online resyncs what it missed (the missed map)"),
            None => why,
        });
        if MemberState::from_usize(cur) == MemberState::Rebuilding {
            lock(&self.rebuild).active = None;
        }
        let txg = self.txg.load(Ordering::Relaxed);
        let recorded = self.persist(|cfg| {
            if let Some(e) = cfg.members.get_mut(i) {
                e.state = MemberPhysState::Faulted;
                e.since_txg = txg;
            }
        });
        keep(map_failed, recorded)
    }

    /// Count a read error of member `i` (faulting it past the threshold, or at once if the
    /// device is gone); returns a later error the fault's label writes met.
    pub(super) fn read_error(&self, i: usize, what: &str, e: &io::Error) -> Option<io::Error> {
        let m = self.members.get(i)?;
        let n = m.read_errors.fetch_add(1, Ordering::Relaxed) + 1;
        if is_gone(e) {
            self.fault(i, MemberState::Removed, format!("{what}: {e} (the device is gone)"))
        } else if n >= READ_ERRORS_TO_FAULT {
            self.fault(i, MemberState::Faulted, format!("{n} read errors, the last: {what}: {e}"))
        } else {
            None
        }
    }

    /// Count a write error of member `i` and fault it; returns a later error the fault's
    /// label writes met.
    pub(super) fn write_error(&self, i: usize, what: &str, e: &io::Error) -> Option<io::Error> {
        let m = self.members.get(i)?;
        m.write_errors.fetch_add(1, Ordering::Relaxed);
        // A write that chose the member before it went offline failed there: its record
        // no longer says all it lacks (missed.rs).
        self.forget_missed(i);
        match is_gone(e) {
            true => self.fault(i, MemberState::Removed, format!("{what}: {e} (the device is gone)")),
            false => self.fault(i, MemberState::Faulted, format!("{what}: {e}")),
        }
    }

    /// Rewrite a copy that failed verification: `bad` is what the member returned, `good`
    /// the verified copy; only `heal` is taken from `good` (the rest of the span may hold
    /// other blocks).
    pub(super) fn heal(&self, i: usize, offset: u64, mut bad: Vec<u8>, good: &[u8], heal: Range<usize>) {
        self.count_checksum_error(i);
        let (Some(dst), Some(src)) = (bad.get_mut(heal.clone()), good.get(heal.clone())) else { return };
        dst.copy_from_slice(src);
        self.rewrite(i, offset, &bad, heal.len() as u64);
    }

    /// Count a copy of member `i` that failed verification (DEGRADED past the threshold).
    pub(super) fn count_checksum_error(&self, i: usize) {
        let Some(m) = self.members.get(i) else { return };
        let n = m.checksum_errors.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= CHECKSUM_ERRORS_TO_DEGRADE {
            let _ = m.state.compare_exchange(
                MemberState::Online.to_usize(),
                MemberState::Degraded.to_usize(),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            m.set_note(format!("{n} checksum errors (repaired)"));
        }
    }

    /// Write `bytes` at logical `offset` on member `i` (repairs), counting `repaired`.
    pub(super) fn rewrite(&self, i: usize, offset: u64, bytes: &[u8], repaired: u64) {
        if !self.writable {
            return;
        }
        let Some(m) = self.members.get(i) else { return };
        let Some(dev) = m.in_use() else { return };
        match dev.write_at(bytes, offset + MEMBER_AREA_BYTES) {
            Ok(()) => {
                m.repaired_bytes.fetch_add(repaired, Ordering::Relaxed);
            }
            Err(e) => {
                self.write_error(i, "repair write", &e);
            }
        }
    }
}
