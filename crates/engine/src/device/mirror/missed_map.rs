//! The missed map on the members (format/missed_map.rs): what members taken offline or
//! faulted missed, in regions, durable before any write that skips them is issued — so a
//! restart with a member still offline resyncs only the regions written since, not every
//! live extent, and a member that failed and works again gets those regions plus what it
//! may have lost from its cache as it failed (unflushed.rs).
//!
//! - `offline` covers the member (`map_cover`: the map, naming it, written to every member
//!   written to and flushed) before its label says OFFLINE and before any write skips it.
//! - A write that skips a covered member sets its regions' bits (`map_mark`); a bit newly
//!   set makes the map durable before the write is issued (write-intent, as md's bitmap).
//!   A bit already set was made durable by whoever set it, under the map's lock.
//! - A member in sync that faults (`fault`: mod.rs) is named in the map (in memory) before
//!   its state changes, under its record lock, so that every write that skips it marks the
//!   map; then the ranges the members may hold only in their caches are marked and the map
//!   written (`map_cover_unflushed`), and only then do its labels say FAULTED. A member
//!   being rebuilt that faults is not covered: it is rebuilt whole.
//! - `online` and `replace` uncover the member lazily: its label then says REBUILDING, and
//!   the map is trusted for a member only while the labels say it is OFFLINE or FAULTED
//!   with the same guid. Every completed write marks the map while it covers anyone
//!   (`note_written`), so a write that failed on an offline member is in it too.
//! - With no member covered the bits are cleared and the labels go back to version 1.
//! - The in-memory record (missed.rs) stays the finer one; the map is what a restart has.
//!
//! Lock order: a member's `missed` (held while its map marks are written: `online` then
//! finds them all), then `missed_map`; the fault handling of a failed map write runs after
//! the map's lock is released and takes `config`, which `persist` reads the map under, and
//! the record lock of the member it failed on — never one the caller holds: a mark is
//! written under an OFFLINE member's lock and never to that member, and `forget_missed`
//! writes the map after releasing its lock.

use super::errors::Causes;
use super::missed::Missed;
use super::{lock, MemberState, MirrorDevice};
use crate::device::BlockDevice;
use crate::format::member::{MemberLabelPhys, MemberPhysState};
use crate::format::missed_map::{MissedMapPhys, MISSED_MAP_COPIES};
use std::io;
use std::sync::Arc;

impl MirrorDevice {
    /// Write `map` (its `seq` bumped; copy `seq % 2`) to every member written to, each
    /// flushed: a write that skips a member may be a durable write (`write_durable`: FUA,
    /// `RWF_DSYNC`), which makes only itself durable, not the map written before it. (The
    /// simulated disks flush everything on a durable write, so the crash tests cannot tell
    /// this flush is missing: seen with it removed, 400 seeds passing.) Returns the members
    /// that failed, to be handled once the map's lock is released, and how many took it.
    fn write_map(&self, map: &mut MissedMapPhys) -> (Vec<(usize, io::Error)>, usize) {
        map.seq += 1;
        let raw = map.encode();
        let at = MISSED_MAP_COPIES[(map.seq % 2) as usize];
        let targets: Vec<(usize, Arc<dyn BlockDevice>)> =
            self.members.iter().enumerate().filter_map(|(i, m)| m.written().map(|d| (i, d))).collect();
        let op = |(_, d): &(usize, Arc<dyn BlockDevice>)| d.write_at(&raw, at).and_then(|()| d.flush());
        let results = self.fan.map(&targets, op, || Err(io::Error::other("a member's map write panicked")));
        let mut failed = Vec::new();
        let mut took = 0;
        for ((i, _), r) in targets.iter().zip(results) {
            match r {
                Ok(()) => took += 1,
                Err(e) => failed.push((*i, e)),
            }
        }
        (failed, took)
    }

    /// Fault the members a map write failed on (after the map's lock is released); the
    /// error to report if the call that wrote the map fails (the power went, say).
    fn map_write_failed(&self, failed: Vec<(usize, io::Error)>) -> Option<io::Error> {
        let mut causes = Causes::default();
        for (i, e) in failed {
            let later = self.write_error(i, "missed map write", &e);
            causes.add_recording(Some(e));
            causes.add_recording(later);
        }
        causes.take()
    }

    /// Start covering member `i` (about to go offline): its entry in the map, durable on
    /// every member written to. An error when no member took it.
    pub(super) fn map_cover(&self, i: usize) -> io::Result<()> {
        if !self.writable {
            return Ok(());
        }
        let guid = self.members.get(i).map_or(0, |m| m.guid());
        let (failed, took) = {
            let mut map = lock(&self.missed_map);
            map.covered.retain(|&(j, _)| j as usize != i);
            if map.covered.is_empty() {
                map.clear();
            }
            map.covered.push((i as u32, guid));
            self.write_map(&mut map)
        };
        let first = failed.first().map(|(_, e)| io::Error::new(e.kind(), e.to_string()));
        self.map_write_failed(failed);
        match (took, first) {
            (0, Some(e)) => Err(e),
            (0, None) => Err(self.suspended("missed map write")),
            _ => Ok(()),
        }
    }

    /// Name member `i` (in use, about to be faulted) in the map, in memory: writes that
    /// skip it from now on mark the map. `map_cover_unflushed` then makes it durable with
    /// what the member may have lost. Whether the map covers it.
    pub(super) fn map_cover_pending(&self, i: usize) -> bool {
        if !self.writable {
            return false;
        }
        let guid = self.members.get(i).map_or(0, |m| m.guid());
        let mut map = lock(&self.missed_map);
        if !map.covered.iter().any(|&(j, _)| j as usize == i) {
            if map.covered.is_empty() {
                map.clear();
            }
            map.covered.push((i as u32, guid));
        }
        true
    }

    /// Member `i` was faulted while covered (`map_cover_pending`): mark what the members
    /// may hold only in their caches (unflushed.rs) and write the map, before the labels
    /// say FAULTED. If that record overflowed, the member is uncovered instead (rebuilt
    /// whole when it comes back).
    pub(super) fn map_cover_unflushed(&self, i: usize) -> Option<io::Error> {
        if !self.writable {
            return None;
        }
        let ranges = lock(&self.unflushed).ranges();
        let failed = {
            let mut map = lock(&self.missed_map);
            match ranges {
                Some(ranges) => {
                    for (start, end) in ranges {
                        map.mark(start, end);
                    }
                }
                None => {
                    map.covered.retain(|&(j, _)| j as usize != i);
                    if map.covered.is_empty() {
                        map.clear();
                    }
                }
            }
            self.write_map(&mut map).0
        };
        self.map_write_failed(failed)
    }

    /// A write of logical `start..end` completed (whatever its members' results): record
    /// it until a flush covers it, and mark the map if it covers anyone (a member faulted
    /// just now may have taken the write into its cache only).
    pub(super) fn note_written(&self, start: u64, end: u64) -> Option<io::Error> {
        lock(&self.unflushed).add(start, end);
        self.map_mark(start, end)
    }

    /// A write of logical `start..end` skips a covered member: set its regions, durable
    /// before the write is issued. The error its map writes met, for the write to report
    /// if it fails.
    pub(super) fn map_mark(&self, start: u64, end: u64) -> Option<io::Error> {
        if !self.writable {
            return None;
        }
        let failed = {
            let mut map = lock(&self.missed_map);
            if map.covered.is_empty() || !map.mark(start, end) {
                return None;
            }
            self.write_map(&mut map).0
        };
        self.map_write_failed(failed)
    }

    /// Stop covering member `i` (in memory; `map_persist` makes it durable); whether it
    /// was covered.
    pub(super) fn map_uncover(&self, i: usize) -> bool {
        if !self.writable {
            return false;
        }
        let mut map = lock(&self.missed_map);
        let before = map.covered.len();
        map.covered.retain(|&(j, _)| j as usize != i);
        if map.covered.is_empty() {
            map.clear();
        }
        map.covered.len() != before
    }

    /// Write the map as it is now to the members written to. Called without a member's
    /// record lock: a member the write fails on is faulted (`forget_missed`, which takes
    /// its record's lock).
    pub(super) fn map_persist(&self) {
        if !self.writable {
            return;
        }
        let failed = self.write_map(&mut lock(&self.missed_map)).0;
        self.map_write_failed(failed);
    }

    /// The map's regions as a record for member `i`, if the map covers it (its in-memory
    /// record gave up).
    pub(super) fn map_record(&self, i: usize) -> Option<Missed> {
        let map = lock(&self.missed_map);
        map.covered.iter().any(|&(j, _)| j as usize == i).then(|| Missed::from_regions(map.ranges()))
    }

    /// Whether the map covers a member (the labels then say so: version 2).
    pub(super) fn map_in_use(&self) -> bool {
        !lock(&self.missed_map).covered.is_empty()
    }
}

/// The newest valid map of set `cfg` among `devs` (the members in use at open), keeping
/// only the members it covers that the labels (version 2: a map is kept) still say are
/// OFFLINE or FAULTED with the same guid;
/// and, per member, the record a resync can use (`None`: not covered). An empty map when
/// none is found.
pub(super) fn load_map(
    devs: &[Arc<dyn BlockDevice>],
    cfg: &MemberLabelPhys,
    notes: &mut Vec<String>,
) -> (MissedMapPhys, Vec<Option<Missed>>) {
    let mut best: Option<MissedMapPhys> = None;
    let mut buf = vec![0u8; crate::format::missed_map::MISSED_MAP_SIZE];
    for d in devs {
        for at in MISSED_MAP_COPIES {
            // A copy that cannot be read or decoded is one a power cut tore (or the member
            // never had a map): the other copy, or another member, has it.
            if d.read_at(&mut buf, at).is_err() {
                continue;
            }
            let Ok(m) = MissedMapPhys::decode(&buf, at) else { continue };
            if m.set_guid == cfg.set_guid
                && m.logical_size == cfg.logical_size
                && best.as_ref().is_none_or(|b| m.seq > b.seq)
            {
                best = Some(m);
            }
        }
    }
    let mut records: Vec<Option<Missed>> = (0..cfg.members.len()).map(|_| None).collect();
    let Some(mut map) = best else {
        if cfg.missed_map {
            notes.push("the labels say a missed map is kept, but no member in use holds one".into());
        }
        return (MissedMapPhys::new(cfg.set_guid, cfg.logical_size), records);
    };
    // Labels written without the flag come from a build (or a moment) that kept no map up
    // to date: one before the map, or one that drops the cover of FAULTED members at open
    // and writes on without marking for them.
    map.covered.retain(|&(i, guid)| {
        cfg.missed_map
            && cfg.members.get(i as usize).is_some_and(|e| {
                e.guid == guid && matches!(e.state, MemberPhysState::Offline | MemberPhysState::Faulted)
            })
    });
    if map.covered.is_empty() {
        map.clear();
        return (map, records);
    }
    let ranges = map.ranges();
    for &(i, _) in &map.covered {
        if let Some(r) = records.get_mut(i as usize) {
            *r = Some(Missed::from_regions(ranges.clone()));
        }
    }
    (map, records)
}

impl MirrorDevice {
    /// After `open`: give each offline member the record the map holds for it.
    pub(super) fn adopt_records(&self, records: Vec<Option<Missed>>) {
        for (m, rec) in self.members.iter().zip(records) {
            let Some(rec) = rec else {
                if m.state() == MemberState::Offline {
                    m.set_note("taken offline before a restart that left no record of what it missed: online copies everything".into());
                }
                continue;
            };
            let (bytes, regions) = (rec.bytes(), rec.ranges());
            match m.state() {
                MemberState::Offline => m.set_note(format!(
                    "taken offline; {bytes} bytes in {regions} regions written since (the missed map): online resyncs them"
                )),
                MemberState::Faulted => {
                    let why = lock(&m.note).clone().unwrap_or_default();
                    m.set_note(format!(
                        "{why}; {bytes} bytes in {regions} regions written since or unflushed then (the missed map): \
                         once the device works, online resyncs them (a scrub then verifies the rest), or replace it"
                    ))
                }
                _ => continue,
            }
            *lock(&m.missed) = Some(rec);
        }
    }
}
