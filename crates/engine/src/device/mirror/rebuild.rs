//! Rebuild (resilver): filling a replaced, returning or new member from the members in sync,
//! while the pool keeps writing (OpenZFS vdev_rebuild.c's sequential rebuild: copy what is
//! allocated, in address order, without reading block pointers).
//!
//! The pool above decides *what* to copy (the fixed regions and the allocated units of the
//! data area: pool/rebuild.rs) and how fast; this layer copies it and keeps the copy right:
//! - From `replace`/`online` on, the member is REBUILDING: every write goes to it, no read
//!   does. Below the cursor it is in sync.
//! - A copy of a range and a write to the same range must not interleave (the copy could
//!   read the old bytes, the write land, then the copy overwrite it with the old ones). Every
//!   write registers its range (`begin_write`); `copy` marks its range, waits for the writes
//!   in flight there to finish, and holds new ones off until it is done.
//! - The cursor is written to the labels (flushing the member first) after every
//!   CURSOR_PERSIST_BYTES copied: a restart resumes there (`MirrorDevice::open`); ranges
//!   the pool does not use cost a restart only their bitmap scan, so moving over them does
//!   not count. At the end the member is ONLINE in the labels.
//!
//! The copy reads one in-sync member per range (round robin) without verifying: a block that
//! is damaged there is copied damaged, then found and repaired from another copy by a read
//! or a scrub (a 2-way mirror being rebuilt has no other copy: that is what a scrub before a
//! replacement is for).

use super::missed::Missed;
use super::{lock, MemberState, MirrorDevice};
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::member::{MemberEntryPhys, MemberPhysState, MEMBER_AREA_BYTES};
use crate::sync::atomic::Ordering;
use std::io;
use std::sync::Arc;

/// How often the cursor reaches the labels: after this many bytes copied.
pub const CURSOR_PERSIST_BYTES: u64 = 16 << 20;
/// Largest single read/write of a copy.
const COPY_CHUNK: u64 = 1 << 20;
/// Chunks of a mirror's copy in flight at once, by default; a caller pacing the rebuild
/// beside clients asks for fewer, one rebuilding an idle pool for more (`rebuild_copy_lanes`).
pub const COPY_LANES: usize = 4;
/// Chunks in flight when the pool is idle (the daemon's choice): a database's live space is
/// tens of thousands of extents of ~100 KiB, and small chunks need many in flight to keep
/// the devices busy. A/B on one pool (pgbench scale 75 on a mirror of two 10 GiB direct-I/O
/// loop devices, 2.29 GB live in 27,303 extents, idle rebuild, 5 rounds, 2026-11-28): gap
/// 128 KiB with 4 lanes (copies 3.13 GB) 3.25–3.77 s, median 3.50; gap 32 KiB with 8 lanes
/// (2.52 GB) median 3.36; no gap with 16 lanes (2.29 GB) 3.31; gap 32 KiB with 16 lanes
/// 3.15–3.31 s, median 3.20.
pub const IDLE_COPY_LANES: usize = 16;
/// Extents less than this apart are copied as one range, the gap with them: fewer and
/// larger I/Os for some free space copied for nothing (a database's space is fragmented: a
/// pgbench data set rebuilt 2.5–5× slower than one file of the same size). Copying free
/// space is harmless: nothing reads it, and a copy excludes writes to its range like any
/// other. 1 MiB until 2026-11-27 (in an A/B, 128 KiB and four lanes copied a 700 MB rebuild
/// in 0.70–0.80 s against 0.99–1.18 s), 128 KiB until 2026-11-28 (on the pool above it
/// copied 37 % more than is live; 32 KiB copies 10 % more, and with IDLE_COPY_LANES the
/// smaller I/Os keep the devices as busy). parity2 keeps 1 MiB, for fewer decodes.
const MERGE_GAP: u64 = 32 << 10;
const PARITY_MERGE_GAP: u64 = 1 << 20;
/// Largest logical range of a parity2 set's rows rebuilt at once: a decode has a large fixed
/// cost (reed-solomon-simd evaluates a polynomial over the whole field), so rows are
/// reconstructed many at a time.
const PARITY_COPY_CHUNK: u64 = 4 << 20;

/// The rebuild in progress, and the writes in flight (behind `MirrorDevice::rebuild`).
#[derive(Default)]
pub(super) struct RebuildState {
    pub active: Option<Rebuild>,
    /// The ranges being copied now (a mirror's copy reads one while it writes the one
    /// before): writes overlapping them wait.
    pub copying: Vec<(u64, u64)>,
    /// Ranges of writes in flight (a copy waits for those overlapping it).
    pub in_flight: Vec<(u64, u64)>,
    /// Writes waiting for a copy of their range to finish.
    pub waiting: usize,
}

pub(super) struct Rebuild {
    member: usize,
    cursor: u64,
    /// Bytes copied since the cursor last reached the labels.
    unpersisted: u64,
    /// A resync (`online` after `offline` in this process): only what the member missed
    /// is copied (missed.rs). None: every live extent.
    only: Option<Missed>,
}

impl Rebuild {
    pub fn resume(member: usize, cursor: u64) -> Rebuild {
        Rebuild { member, cursor, unpersisted: 0, only: None }
    }
}

/// A rebuild's progress (`SetStatus::rebuild`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildStatus {
    pub member: usize,
    pub device: String,
    /// Logical bytes in sync (from 0).
    pub cursor: u64,
    /// The logical size: the rebuild is done when `cursor` reaches it.
    pub end: u64,
}

/// `extents` (ascending) with those less than `gap` apart joined, the gaps with them.
fn merged(extents: &[(u64, u64)], gap: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(extents.len());
    for &(o, l) in extents.iter().filter(|e| e.1 > 0) {
        match out.last_mut() {
            Some((po, pl)) if o >= *po + *pl && o - (*po + *pl) < gap => *pl = o + l - *po,
            _ => out.push((o, l)),
        }
    }
    out
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// A write in flight, unregistered when dropped.
pub(super) struct WriteGuard<'a> {
    mirror: &'a MirrorDevice,
    range: (u64, u64),
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.mirror.rebuild);
        if let Some(i) = st.in_flight.iter().position(|r| *r == self.range) {
            st.in_flight.swap_remove(i);
        }
        if !st.copying.is_empty() {
            self.mirror.rebuild_cv.notify_all();
        }
    }
}

impl MirrorDevice {
    /// Register a write of `len` bytes at `offset` (waiting while a copy holds its range).
    pub(super) fn begin_write(&self, offset: u64, len: u64) -> WriteGuard<'_> {
        let range = (offset, offset.saturating_add(len));
        let mut st = lock(&self.rebuild);
        while st.copying.iter().any(|c| overlaps(*c, range)) {
            st.waiting += 1;
            st = self.rebuild_cv.wait(st).unwrap_or_else(crate::sync::PoisonError::into_inner);
            st.waiting -= 1;
        }
        st.in_flight.push(range);
        WriteGuard { mirror: self, range }
    }

    /// Writes waiting for a rebuild copy of their range (tests).
    pub fn writes_waiting(&self) -> usize {
        lock(&self.rebuild).waiting
    }

    /// The rebuild in progress, if any.
    pub fn rebuild_status(&self) -> Option<RebuildStatus> {
        let st = lock(&self.rebuild);
        let r = st.active.as_ref()?;
        let device = self.members.get(r.member).map(|m| m.device()).unwrap_or_default();
        Some(RebuildStatus { member: r.member, device, cursor: r.cursor, end: self.logical_size })
    }

    /// Put `dev` in the place of member `index` (a failed, missing or healthy one) and start
    /// rebuilding it. `guid` names the new member (a returning device keeps its old one).
    pub fn replace(&self, index: usize, dev: Arc<dyn BlockDevice>, guid: u64) -> Result<()> {
        self.start_rebuild(index, dev, guid, false)
    }

    /// `replace`; with `resync`, a member coming back from OFFLINE gets only what it missed
    /// (missed.rs), if it was recorded.
    fn start_rebuild(&self, index: usize, dev: Arc<dyn BlockDevice>, guid: u64, resync: bool) -> Result<()> {
        if !self.writable {
            return Err(Error::invalid("the pool is open read-only: nothing can be rebuilt"));
        }
        let m = self.members.get(index).ok_or_else(|| Error::invalid(format!("no member {index}")))?;
        if let Some(r) = lock(&self.rebuild).active.as_ref() {
            return Err(Error::invalid(format!(
                "member {} is being rebuilt; wait for it to finish, then replace another",
                r.member
            )));
        }
        let others = self.members.iter().enumerate().filter(|(j, o)| *j != index && o.in_use().is_some()).count();
        if others < self.min_in_use() {
            return Err(Error::invalid(format!(
                "too few other members are in sync to rebuild from ({others}, the {} set needs {})",
                self.layout.name(),
                self.min_in_use()
            )));
        }
        if dev.size_bytes() < self.member_bytes() {
            return Err(Error::invalid(format!(
                "device {} has {} bytes; a member of this set needs {}",
                dev.describe(),
                dev.size_bytes(),
                self.member_bytes()
            )));
        }
        if self.members.iter().enumerate().any(|(j, o)| j != index && o.guid() == guid) {
            return Err(Error::invalid("that guid belongs to another member"));
        }
        let txg = self.txg.load(Ordering::Relaxed);
        {
            let mut slot = lock(&m.slot);
            slot.device = dev.describe();
            slot.dev = Some(dev);
            slot.guid = guid;
        }
        for c in [&m.read_errors, &m.write_errors, &m.checksum_errors, &m.repaired_bytes] {
            c.store(0, Ordering::Relaxed);
        }
        // Writes reach it from here on; the copy starts at 0 (rebuild_copy).
        let only = self.take_missed(index, resync);
        *lock(&m.note) = Some(match &only {
            Some(o) => format!(
                "being resynced: {} bytes in {} ranges it missed{}",
                o.bytes(),
                o.ranges(),
                if o.coarse() { " (ranges merged)" } else { "" }
            ),
            None => "being rebuilt".into(),
        });
        lock(&self.rebuild).active = Some(Rebuild { member: index, cursor: 0, unpersisted: 0, only });
        let failed = self.persist(|cfg| {
            if let Some(e) = cfg.members.get_mut(index) {
                *e = MemberEntryPhys { guid, state: MemberPhysState::Rebuilding, since_txg: txg, rebuild_cursor: 0 };
            }
        });
        if m.state() != MemberState::Rebuilding {
            lock(&self.rebuild).active = None;
            let why = failed.map_or_else(|| "its label could not be written".to_string(), |e| e.to_string());
            return Err(Error::io("start the rebuild", io::Error::other(why)));
        }
        Ok(())
    }

    /// Rebuild member `index` onto its own device (it came back, or was taken offline).
    pub fn online(&self, index: usize) -> Result<()> {
        let m = self.members.get(index).ok_or_else(|| Error::invalid(format!("no member {index}")))?;
        match m.state() {
            MemberState::Online | MemberState::Degraded => return Ok(()),
            MemberState::Rebuilding => return Ok(()),
            _ => {}
        }
        let dev = m.dev().ok_or_else(|| {
            Error::invalid(format!(
                "member {} has no device (it was not found at open); replace it with a device, or restart \
                 the daemon once it is back",
                m.device()
            ))
        })?;
        self.start_rebuild(index, dev, m.guid(), true)
    }

    /// Stop using member `index` (it keeps its data; `online` rebuilds what it missed).
    pub fn offline(&self, index: usize) -> Result<()> {
        let m = self.members.get(index).ok_or_else(|| Error::invalid(format!("no member {index}")))?;
        if !m.state().in_use() {
            return Err(Error::invalid(format!("member {} is {}, not in use", m.device(), m.state())));
        }
        let others = self.members.iter().enumerate().filter(|(j, o)| *j != index && o.in_use().is_some()).count();
        if others < self.min_in_use() {
            return Err(Error::invalid(format!(
                "member {} is needed: without it too few members are in sync ({others}, the {} set needs {}) and the \
                 pool would be suspended",
                m.device(),
                self.layout.name(),
                self.min_in_use()
            )));
        }
        // The map names the member before its label says OFFLINE, and both are on the
        // members before a write skips it (missed_map.rs): a power cut in between leaves a
        // member the labels call ONLINE (and it was, it missed nothing) or one the map
        // covers from its first missed write.
        self.map_cover(index).map_err(|e| Error::io("record the member in the missed map", e))?;
        let txg = self.txg.load(Ordering::Relaxed);
        self.persist(|cfg| {
            if let Some(e) = cfg.members.get_mut(index).filter(|e| e.state == MemberPhysState::Online) {
                e.state = MemberPhysState::Offline;
                e.since_txg = txg;
            }
        });
        if !self.start_missed(index) {
            if self.map_uncover(index) {
                self.map_persist();
            }
            return Err(Error::invalid(format!(
                "member {} failed as it was being taken offline: it is {} ({})",
                m.device(),
                m.state(),
                lock(&m.note).clone().unwrap_or_default()
            )));
        }
        *lock(&m.note) = Some("taken offline".into());
        Ok(())
    }

    /// Copy `extents` (logical (offset, length), ascending, at or after the cursor and
    /// before `end`) from the members in sync to the member being rebuilt, then move the
    /// cursor to `end` (the bytes between the extents need no copy: the pool does not use
    /// them). Returns the bytes copied.
    pub fn rebuild_copy(&self, extents: &[(u64, u64)], end: u64) -> Result<u64> {
        self.rebuild_copy_lanes(extents, end, COPY_LANES)
    }

    /// `rebuild_copy` with `lanes` chunks of a mirror's copy in flight (at least 1).
    pub fn rebuild_copy_lanes(&self, extents: &[(u64, u64)], end: u64, lanes: usize) -> Result<u64> {
        let lanes = lanes.max(1);
        let end = end.min(self.logical_size);
        let (member, extents) = {
            let st = lock(&self.rebuild);
            let r = st.active.as_ref().ok_or_else(|| Error::invalid("no rebuild in progress"))?;
            let start = r.cursor;
            if extents.iter().any(|&(o, l)| o < start || o.saturating_add(l) > end) || end < start {
                return Err(Error::invalid(format!("extents outside the rebuild window {start}..{end}")));
            }
            // A resync copies only what the member missed of them.
            (r.member, r.only.as_ref().map_or_else(|| extents.to_vec(), |o| o.clip(extents)))
        };
        let target = self.members.get(member).and_then(|m| m.written()).ok_or_else(|| {
            // Why it failed (its note: the error that faulted it) says what to look at.
            let why = self.members.get(member).and_then(|m| lock(&m.note).clone()).unwrap_or_default();
            Error::io("rebuild", io::Error::other(format!("the member being rebuilt failed ({why}); replace it again")))
        })?;
        let chunk = if self.rows.is_some() { PARITY_COPY_CHUNK } else { COPY_CHUNK };
        let mut chunks = Vec::new();
        let gap = if self.rows.is_some() { PARITY_MERGE_GAP } else { MERGE_GAP };
        for (offset, len) in merged(&extents, gap) {
            let mut at = offset;
            while at < offset + len {
                let n = (offset + len - at).min(chunk);
                chunks.push((at, n));
                at += n;
            }
        }
        let copied = chunks.iter().map(|c| c.1).sum::<u64>();
        if self.rows.is_some() {
            let mut buf = vec![0u8; chunk as usize];
            for &(at, n) in &chunks {
                self.copy_range(member, &target, at, &mut buf[..n as usize])?;
            }
        } else {
            self.copy_pipelined(member, &target, &chunks, lanes)?;
        }
        let persist_now = {
            let mut st = lock(&self.rebuild);
            let r = st.active.as_mut().ok_or_else(|| Error::invalid("the rebuild was cancelled"))?;
            r.cursor = end;
            r.unpersisted += copied;
            end >= self.logical_size || r.unpersisted >= CURSOR_PERSIST_BYTES
        };
        if persist_now {
            self.persist_cursor(member, &target, end)?;
        }
        Ok(copied)
    }

    /// Copy one range to the member being rebuilt, excluding writes to it meanwhile.
    fn copy_range(&self, member: usize, target: &Arc<dyn BlockDevice>, at: u64, buf: &mut [u8]) -> Result<()> {
        if let Some(rows) = self.rows {
            // Parity2: the rows are reconstructed, under their row lock (parity.rs); the
            // part before them is copied as a mirror's.
            let len = buf.len() as u64;
            if at + len > rows.start {
                let mirrored = rows.start.saturating_sub(at).min(len) as usize;
                if mirrored > 0 {
                    self.copy_range(member, target, at, &mut buf[..mirrored])?;
                }
                return self.failpoints.hit(crate::failpoint::MIRROR_REBUILD_COPY).and_then(|()| {
                    self.parity_rebuild(&rows, member, at.max(rows.start), len - mirrored as u64)
                        .map_err(|e| Error::io("rebuild", e))
                });
            }
        }
        let range = (at, at + buf.len() as u64);
        self.hold(range);
        let result = self
            .read_at(buf, at)
            .map_err(|e| Error::io("rebuild read", e))
            .and_then(|()| self.failpoints.hit(crate::failpoint::MIRROR_REBUILD_COPY))
            .and_then(|()| {
                target.write_at(buf, at + MEMBER_AREA_BYTES).map_err(|e| {
                    self.write_error(member, "rebuild write", &e);
                    Error::io("rebuild write", e)
                })
            });
        self.release(range);
        result
    }

    /// Copy a mirror's `chunks` (ascending (offset, length), at most COPY_CHUNK each) to the
    /// member being rebuilt, COPY_LANES chunks at a time: lane k copies chunks k, k + LANES,
    /// ... (read, then write), so the source's reads and the target's writes overlap and
    /// both devices see several requests at once, as `btrfs replace`'s bios do; the chunks
    /// in flight are adjacent, so the copy still moves in address order. Each chunk's range
    /// is held against writes from before its read until its write has landed. The first
    /// error stops every lane at its next chunk. Threads come from crate::sync (the
    /// simulator schedules them).
    fn copy_pipelined(
        &self,
        member: usize,
        target: &Arc<dyn BlockDevice>,
        chunks: &[(u64, u64)],
        lanes: usize,
    ) -> Result<()> {
        let failed = crate::sync::atomic::AtomicBool::new(false);
        let lane = |k: usize| -> Result<()> {
            let mut buf: Vec<u8> = Vec::new();
            for &(at, n) in chunks.iter().skip(k).step_by(lanes) {
                if failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                buf.resize(n as usize, 0);
                let range = (at, at + n);
                self.hold(range);
                let r = self
                    .read_at(&mut buf, at)
                    .map_err(|e| Error::io("rebuild read", e))
                    .and_then(|()| self.failpoints.hit(crate::failpoint::MIRROR_REBUILD_COPY))
                    .and_then(|()| {
                        target.write_at(&buf, at + MEMBER_AREA_BYTES).map_err(|e| {
                            self.write_error(member, "rebuild write", &e);
                            Error::io("rebuild write", e)
                        })
                    });
                self.release(range);
                if r.is_err() {
                    failed.store(true, Ordering::Relaxed);
                    return r;
                }
            }
            Ok(())
        };
        let lanes = lanes.min(chunks.len());
        if lanes <= 1 {
            return lane(0);
        }
        crate::sync::thread::scope(|s| {
            let lane = &lane;
            let others: Vec<_> = (1..lanes).map(|k| s.spawn(move || lane(k))).collect();
            let mut result = lane(0);
            for h in others {
                let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                result = result.and(r);
            }
            result
        })
    }

    /// Hold `range` against new writes and wait for those in flight there to finish.
    fn hold(&self, range: (u64, u64)) {
        let mut st = lock(&self.rebuild);
        st.copying.push(range);
        while st.in_flight.iter().any(|w| overlaps(*w, range)) {
            st = self.rebuild_cv.wait(st).unwrap_or_else(crate::sync::PoisonError::into_inner);
        }
    }

    /// Let writes to `range` go on.
    fn release(&self, range: (u64, u64)) {
        let mut st = lock(&self.rebuild);
        if let Some(i) = st.copying.iter().position(|r| *r == range) {
            st.copying.swap_remove(i);
        }
        drop(st);
        self.rebuild_cv.notify_all();
    }

    /// Flush the member being rebuilt and record the cursor (and, at the end, the member
    /// ONLINE) in every label.
    fn persist_cursor(&self, member: usize, target: &Arc<dyn BlockDevice>, cursor: u64) -> Result<()> {
        target.flush().map_err(|e| {
            self.write_error(member, "rebuild flush", &e);
            Error::io("rebuild flush", e)
        })?;
        let done = cursor >= self.logical_size;
        if done {
            if let Some(m) = self.members.get(member) {
                m.state.store(MemberState::Online.to_usize(), Ordering::Release);
                *lock(&m.note) = None;
            }
        }
        let failed = self.persist(|cfg| {
            if let Some(e) = cfg.members.get_mut(member) {
                e.state = if done { MemberPhysState::Online } else { MemberPhysState::Rebuilding };
                e.rebuild_cursor = if done { 0 } else { cursor };
                if done {
                    e.since_txg = 0;
                }
            }
        });
        let mut st = lock(&self.rebuild);
        if done {
            st.active = None;
        } else if let Some(r) = st.active.as_mut() {
            r.unpersisted = 0;
        }
        // A member whose label could not be written is faulted (persist); the step says so
        // (the copy itself stands: a restart resumes at the cursor the labels hold).
        match failed {
            Some(e) => Err(Error::io("record the rebuild cursor in the labels", e)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::merged;

    #[test]
    fn extents_close_together_are_copied_as_one() {
        let e = [(0, 4096), (8192, 4096), (3 << 20, 4096), (3 << 20 | 4096, 8192), (10 << 20, 0)];
        assert_eq!(merged(&e, 1 << 20), vec![(0, 12288), (3 << 20, 12288)]);
        assert_eq!(merged(&e, 4096), vec![(0, 4096), (8192, 4096), (3 << 20, 12288)]);
        assert_eq!(merged(&[], 1 << 20), vec![]);
    }
}
