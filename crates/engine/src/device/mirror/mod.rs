//! A mirror: two or three member devices that each hold every byte of one logical device
//! (OpenZFS vdev_mirror.c). The pool above sees a plain [`BlockDevice`]; this layer
//! writes every write to each member in use, reads from one (round robin), and keeps the
//! set's configuration in each member's label (`format::member`).
//!
//! Failure handling:
//! - A write or flush that fails on a member faults it at once (it now lacks data); the
//!   write succeeds if another member took it. Before that write returns, the new
//!   configuration (the member FAULTED from the current txg) is on every member still in
//!   use, so a later open never reads the faulted member as if it were in sync.
//! - A read that fails tries the next member; a member faults after READ_ERRORS_TO_FAULT
//!   read errors. Errors that mean the device is gone (ENODEV, ENXIO, ENOENT, ESTALE, ENOTCONN,
//!   ECONNABORTED) mark
//!   it REMOVED at once.
//! - `read_verified`: a copy that fails the caller's checksum is replaced by the next copy
//!   that passes, and rewritten with it (self-healing read; counted per member).
//! - With no member left in use every I/O fails ("suspended"); the pool above latches.
//! - Opening finds the members by their labels: the label with the highest generation is
//!   the configuration; members it lists as out of sync (FAULTED, OFFLINE, STALE) are not
//!   used; members it lists that are missing are UNAVAILABLE, and on a writable open are
//!   recorded as STALE (they miss what is written from now on).
//!
//! Writes and flushes go to the members at the same time (`on_all`); reads go to one.
//!
//! Locks: `config` (the configuration, held while labels are rewritten), then a member's
//! `note`. Neither is held across I/O of the logical device.

use super::aio::AioOp;
use super::status::{MemberState, MemberStatus, SetHealth, SetStatus};
use super::BlockDevice;

mod errors;
pub(crate) mod fan_out;
mod faults;
mod missed;
mod missed_map;
mod open_rows;
mod parity;
mod rebuild;
mod scrub;
mod unflushed;
use crate::error::{Corruption, Error, Result};
use crate::format::member::{
    Layout, MemberEntryPhys, MemberLabelPhys, MemberPhysState, MEMBERS_MAX, MEMBER_AREA_BYTES, MEMBER_LABEL_COPY_1,
    MEMBER_LABEL_SIZE,
};
use crate::format::missed_map::MissedMapPhys;
use crate::format::UNIT_SIZE;
use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use errors::{keep, suspended_because, Causes};
pub use parity::{Rows, PARITY2_MEMBERS};
pub use rebuild::{RebuildStatus, COPY_LANES, IDLE_COPY_LANES};
use std::io;
use std::ops::Range;
use std::sync::Arc;

/// Read errors a member may return before it is faulted. Write and flush errors fault at
/// once: the member then lacks data.
pub const READ_ERRORS_TO_FAULT: u64 = 16;
/// Checksum errors after which a member shows DEGRADED (still used: its other blocks are
/// fine, and every bad copy is repaired as it is met).
pub const CHECKSUM_ERRORS_TO_DEGRADE: u64 = 64;
/// Members a mirror may have.
pub const MIRROR_WAYS: Range<usize> = 2..4;

struct Member {
    /// The device, its guid and name: replaced by `replace` (rebuild.rs).
    slot: Mutex<Slot>,
    state: AtomicUsize,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    checksum_errors: AtomicU64,
    repaired_bytes: AtomicU64,
    note: Mutex<Option<String>>,
    /// While OFFLINE: the logical ranges written since (missed.rs).
    missed: Mutex<Option<missed::Missed>>,
}

struct Slot {
    dev: Option<Arc<dyn BlockDevice>>,
    guid: u64,
    device: String,
}

impl Member {
    fn state(&self) -> MemberState {
        MemberState::from_usize(self.state.load(Ordering::Acquire))
    }

    fn dev(&self) -> Option<Arc<dyn BlockDevice>> {
        lock(&self.slot).dev.clone()
    }

    fn guid(&self) -> u64 {
        lock(&self.slot).guid
    }

    fn device(&self) -> String {
        lock(&self.slot).device.clone()
    }

    /// The device, if the member is in use (read and written).
    fn in_use(&self) -> Option<Arc<dyn BlockDevice>> {
        self.state().in_use().then(|| self.dev()).flatten()
    }

    /// The device, if writes go to it: in use, or being rebuilt.
    fn written(&self) -> Option<Arc<dyn BlockDevice>> {
        let s = self.state();
        (s.in_use() || s == MemberState::Rebuilding).then(|| self.dev()).flatten()
    }

    fn set_note(&self, note: String) {
        *self.note.lock().unwrap_or_else(PoisonError::into_inner) = Some(note);
    }
}

pub struct MirrorDevice {
    layout: Layout,
    /// Parity2: where the rows are (parity.rs); None for a mirror.
    rows: Option<Rows>,
    /// Rows being written, repaired or rebuilt (parity.rs `lock_rows`).
    row_locks: Mutex<Vec<(u64, u64)>>,
    row_cv: Condvar,
    /// Why the member taken out of use last was (member index and reason).
    last_fault: Mutex<Option<String>>,
    /// Parity2: the data units last written to rows written in part (open_rows.rs).
    open_rows: Mutex<open_rows::OpenRows>,
    members: Vec<Member>,
    /// The rebuild in progress and the writes in flight (rebuild.rs).
    rebuild: Mutex<rebuild::RebuildState>,
    rebuild_cv: Condvar,
    failpoints: crate::failpoint::Failpoints,
    logical_size: u64,
    /// The newest configuration (its `member_guid`/`member_index` are those of whichever
    /// member it was read from; `write_labels` sets them per member).
    config: Mutex<MemberLabelPhys>,
    /// What members taken offline missed, as the members in use hold it (missed_map.rs).
    missed_map: Mutex<MissedMapPhys>,
    /// Ranges an in-memory record keeps before it gives up (missed.rs).
    missed_ranges_max: AtomicUsize,
    /// What the members may hold only in their caches (unflushed.rs).
    unflushed: Mutex<unflushed::Unflushed>,
    next_read: AtomicUsize,
    writable: bool,
    txg: AtomicU64,
    /// Member I/O at the same time (fan_out.rs).
    fan: fan_out::FanOut,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a device set's member says of itself (its member label): which pool and set it
/// belongs to, its place, and the set's configuration generation. For a scan of devices
/// (`strata pool import --dir`): members of one set share `set_guid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberIdentity {
    pub pool_guid: u64,
    pub set_guid: u64,
    pub member_guid: u64,
    pub member_index: u32,
    pub members: u32,
    pub generation: u64,
    /// The members of the set as this label knows them (by guid; a replaced device is not
    /// among those of a newer generation).
    pub member_guids: Vec<u64>,
}

/// `dev`'s member label, if it is a member of a device set (an error otherwise).
pub fn read_member_identity(dev: &dyn BlockDevice) -> Result<MemberIdentity> {
    let l = read_member_label(dev)?;
    Ok(MemberIdentity {
        pool_guid: l.pool_guid,
        set_guid: l.set_guid,
        member_guid: l.member_guid,
        member_index: l.member_index,
        members: l.members.len() as u32,
        generation: l.generation,
        member_guids: l.members.iter().map(|m| m.guid).collect(),
    })
}

/// Read both copies of a device's member label; the valid one with the higher generation.
fn read_member_label(dev: &dyn BlockDevice) -> Result<MemberLabelPhys> {
    let mut best: Option<MemberLabelPhys> = None;
    let mut first_err = None;
    let mut buf = vec![0u8; MEMBER_LABEL_SIZE];
    for addr in [0, MEMBER_LABEL_COPY_1] {
        dev.read_at(&mut buf, addr).map_err(|e| Error::io("read member label", e))?;
        match MemberLabelPhys::decode(&buf, addr) {
            Ok(l) if best.as_ref().is_none_or(|b| l.generation > b.generation) => best = Some(l),
            Ok(_) => {}
            Err(c) => first_err = first_err.or(Some(c)),
        }
    }
    best.ok_or_else(|| {
        let c = first_err.map_or_else(String::new, |c| c.detail);
        Error::Corruption(Corruption::new(
            "member label",
            Some(0),
            format!("{} carries no valid member label ({c}): not a member of a Strata mirror", dev.describe()),
        ))
    })
}

impl MirrorDevice {
    /// Make a new device set of `devs` (device, member guid) with `layout`, writing every
    /// member's label. The logical device is as large as the smallest member allows.
    pub fn create(
        layout: Layout,
        devs: Vec<(Arc<dyn BlockDevice>, u64)>,
        pool_guid: u64,
        set_guid: u64,
        created_ns: u64,
    ) -> Result<MirrorDevice> {
        let counts = match layout {
            Layout::Mirror => MIRROR_WAYS,
            Layout::Parity2 => PARITY2_MEMBERS,
        };
        if !counts.contains(&devs.len()) {
            return Err(Error::invalid(format!(
                "a {} set has {} to {} devices; {} given{}",
                layout.name(),
                counts.start,
                counts.end - 1,
                devs.len(),
                if layout == Layout::Mirror { " (use --layout single for one device)" } else { "" }
            )));
        }
        for (i, (d, g)) in devs.iter().enumerate() {
            for (e, h) in devs.iter().skip(i + 1) {
                if std::ptr::addr_eq(Arc::as_ptr(d), Arc::as_ptr(e)) {
                    return Err(Error::invalid(format!("device {} is given twice", d.describe())));
                }
                if g == h || *g == 0 {
                    return Err(Error::invalid("member guids must be distinct and non-zero"));
                }
            }
        }
        let smallest = devs.iter().map(|(d, _)| d.size_bytes()).min().unwrap_or(0);
        let avail = smallest.saturating_sub(MEMBER_AREA_BYTES) / UNIT_SIZE * UNIT_SIZE;
        let (rows, logical_size) = match layout {
            Layout::Mirror => (None, avail),
            Layout::Parity2 => {
                let (rows, logical) = Rows::plan(devs.len(), avail).ok_or_else(|| {
                    Error::invalid(format!("devices of {smallest} bytes are too small for a parity2 set"))
                })?;
                (Some(rows), logical)
            }
        };
        let config = MemberLabelPhys {
            layout,
            pool_guid,
            set_guid,
            member_guid: devs.first().map_or(0, |(_, g)| *g),
            member_index: 0,
            generation: 1,
            logical_size,
            created_ns,
            rows_start: rows.map_or(0, |r| r.start),
            members: devs
                .iter()
                .map(|(_, g)| MemberEntryPhys {
                    guid: *g,
                    state: MemberPhysState::Online,
                    since_txg: 0,
                    rebuild_cursor: 0,
                })
                .collect(),
            missed_map: false,
        };
        let members = devs
            .into_iter()
            .map(|(dev, guid)| Member::new(Some(dev.clone()), guid, dev.describe(), MemberState::Online))
            .collect();
        let m = MirrorDevice {
            layout,
            rows,
            row_locks: Mutex::new(Vec::new()),
            row_cv: Condvar::new(),
            open_rows: Default::default(),
            last_fault: Mutex::new(None),
            members,
            rebuild: Mutex::new(rebuild::RebuildState::default()),
            rebuild_cv: Condvar::new(),
            failpoints: Default::default(),
            logical_size,
            missed_map: Mutex::new(MissedMapPhys::new(set_guid, logical_size)),
            missed_ranges_max: AtomicUsize::new(missed::RANGES_MAX),
            unflushed: Mutex::default(),
            config: Mutex::new(config),
            next_read: AtomicUsize::new(0),
            writable: true,
            txg: AtomicU64::new(0),
            fan: fan_out::FanOut::new(),
        };
        let cfg = lock(&m.config).clone();
        for (i, member) in m.members.iter().enumerate() {
            let dev = member.dev().ok_or_else(|| Error::invalid("member without device"))?;
            write_label(dev.as_ref(), &cfg, i).map_err(|e| Error::io("write member label", e))?;
        }
        Ok(m)
    }

    /// Open the mirror `found` belongs to: each entry is a device, or why one named for
    /// the set could not be opened (a message). Returns the mirror and notes for the log
    /// (members missing or out of sync).
    pub fn open(
        found: Vec<std::result::Result<Arc<dyn BlockDevice>, String>>,
        writable: bool,
    ) -> Result<(MirrorDevice, Vec<String>)> {
        let mut notes = Vec::new();
        let mut present: Vec<(Arc<dyn BlockDevice>, MemberLabelPhys)> = Vec::new();
        for f in found {
            match f {
                // A device whose label cannot be read (I/O errors, damaged) is missing:
                // the set opens from the others, degraded, and says why.
                Ok(dev) => match read_member_label(dev.as_ref()) {
                    Ok(label) => present.push((dev, label)),
                    Err(e) => notes.push(format!("device {}: {e}", dev.describe())),
                },
                Err(why) => notes.push(format!("device {why}")),
            }
        }
        let config =
            present.iter().map(|(_, l)| l).max_by_key(|l| l.generation).cloned().ok_or_else(|| {
                Error::invalid(format!("no device of the mirror could be opened: {}", notes.join("; ")))
            })?;
        for (dev, l) in &present {
            if l.pool_guid != config.pool_guid || l.set_guid != config.set_guid {
                return Err(Error::invalid(format!(
                    "device {} belongs to another pool or set (pool {:016x}, set {:016x}; expected {:016x}/{:016x})",
                    dev.describe(),
                    l.pool_guid,
                    l.set_guid,
                    config.pool_guid,
                    config.set_guid
                )));
            }
            if !config.members.iter().any(|m| m.guid == l.member_guid) {
                return Err(Error::invalid(format!(
                    "device {} was a member of this mirror but has been replaced; leave it out",
                    dev.describe()
                )));
            }
            let needed = member_bytes(&config);
            if dev.size_bytes() < needed {
                return Err(Error::invalid(format!(
                    "device {} has {} bytes; a member of this set needs {needed}",
                    dev.describe(),
                    dev.size_bytes(),
                )));
            }
        }
        let mut newly_stale = Vec::new();
        let mut rebuilding_seen: Option<bool> = None;
        let members: Vec<Member> = config
            .members
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let dev = present.iter().find(|(_, l)| l.member_guid == e.guid).map(|(d, _)| d.clone());
                let (state, note) = match (e.state, &dev) {
                    (MemberPhysState::Online, Some(_)) => (MemberState::Online, None),
                    (MemberPhysState::Online, None) => {
                        newly_stale.push(i);
                        (MemberState::Unavailable, Some("not found when the pool was opened".to_string()))
                    }
                    (MemberPhysState::Offline, _) => (MemberState::Offline, Some("taken offline".to_string())),
                    (MemberPhysState::Faulted, _) => {
                        (MemberState::Faulted, Some(format!("faulted at txg {}; replace it", e.since_txg)))
                    }
                    (MemberPhysState::Rebuilding, Some(_)) if rebuilding_seen.replace(true).is_none() => {
                        (MemberState::Rebuilding, Some(format!("being rebuilt, {} bytes done", e.rebuild_cursor)))
                    }
                    (MemberPhysState::Stale | MemberPhysState::Rebuilding, _) => {
                        (MemberState::Stale, Some(format!("out of sync since txg {}; rebuild it", e.since_txg)))
                    }
                };
                let device = dev.as_ref().map_or_else(|| format!("(missing member {:016x})", e.guid), |d| d.describe());
                let m = Member::new(dev, e.guid, device, state);
                if let Some(n) = note {
                    m.set_note(n);
                }
                m
            })
            .collect();
        for m in members.iter().filter(|m| !m.state().in_use()) {
            notes.push(format!(
                "mirror member {} is {}: {}",
                m.device(),
                m.state(),
                lock(&m.note).clone().unwrap_or_default()
            ));
        }
        let rebuilding = members.iter().position(|m| m.state() == MemberState::Rebuilding).map(|i| {
            let cursor = config.members.get(i).map_or(0, |e| e.rebuild_cursor);
            rebuild::Rebuild::resume(i, cursor)
        });
        let in_use: Vec<Arc<dyn BlockDevice>> = members.iter().filter_map(|m| m.in_use()).collect();
        let (map, records) = missed_map::load_map(&in_use, &config, &mut notes);
        let mirror = MirrorDevice {
            layout: config.layout,
            rows: rows_of(&config),
            row_locks: Mutex::new(Vec::new()),
            row_cv: Condvar::new(),
            open_rows: Default::default(),
            last_fault: Mutex::new(None),
            rebuild: Mutex::new(rebuild::RebuildState { active: rebuilding, ..Default::default() }),
            rebuild_cv: Condvar::new(),
            failpoints: Default::default(),
            logical_size: config.logical_size,
            members,
            missed_map: Mutex::new(map),
            missed_ranges_max: AtomicUsize::new(missed::RANGES_MAX),
            unflushed: Mutex::default(),
            config: Mutex::new(config),
            next_read: AtomicUsize::new(0),
            writable,
            txg: AtomicU64::new(0),
            fan: fan_out::FanOut::new(),
        };
        mirror.adopt_records(records);
        if !mirror.usable() {
            return Err(Error::invalid(format!(
                "too few members of the {} set are in sync and present (it needs {}): {}; bring a member back",
                mirror.layout.name(),
                mirror.min_in_use(),
                notes.join("; ")
            )));
        }
        // A member whose label is behind the set's (a power cut in the middle of `persist`,
        // e.g. at the end of a rebuild) gets the set's again now: it may be the last member
        // left one day, and its own label must then say what the set knows of it.
        let behind = present.iter().any(|(_, l)| l.generation < mirror.generation());
        if writable && (behind || !newly_stale.is_empty()) {
            mirror.persist(|cfg| {
                for &i in &newly_stale {
                    if let Some(e) = cfg.members.get_mut(i) {
                        e.state = MemberPhysState::Stale;
                    }
                }
            });
        }
        Ok((mirror, notes))
    }

    /// The mirror's failpoints (`mirror.rebuild_copy`: failpoint.rs).
    pub fn failpoints(&self) -> &crate::failpoint::Failpoints {
        &self.failpoints
    }

    /// The configuration's generation (tests, status).
    pub fn generation(&self) -> u64 {
        lock(&self.config).generation
    }

    /// Members that must be in use for the set to serve: one copy of a mirror; the data
    /// units of a parity2 row.
    fn min_in_use(&self) -> usize {
        self.rows.map_or(1, |r| r.data)
    }

    /// Whether enough members are in use to serve every byte.
    /// The error of an I/O that found no member in use (see `suspended_because`).
    fn suspended(&self, what: &str) -> io::Error {
        suspended_because(what, lock(&self.last_fault).as_deref())
    }

    fn usable(&self) -> bool {
        self.members.iter().filter(|m| m.in_use().is_some()).count() >= self.min_in_use()
    }

    /// Bytes a member needs (member area included).
    pub fn member_bytes(&self) -> u64 {
        member_bytes(&lock(&self.config))
    }

    /// Members in use, starting at the next one in the round robin.
    fn read_order(&self) -> impl Iterator<Item = (usize, Arc<dyn BlockDevice>)> + '_ {
        let n = self.members.len();
        let start = self.next_read.fetch_add(1, Ordering::Relaxed) % n.max(1);
        (0..n).filter_map(move |k| {
            let i = (start + k) % n;
            self.members.get(i).and_then(|m| m.in_use()).map(|d| (i, d))
        })
    }

    /// Run `op` on every member written to (in use or being rebuilt), at the same time (as
    /// one submission of `aio` from this thread where the members allow it, else one thread
    /// per member beyond the first: fan_out.rs — a mirror's write or flush takes as long as
    /// its slowest member, not the sum); Ok if at least one succeeded.
    /// `range`: the logical bytes a write changes (members offline record it: missed.rs);
    /// `durable`: the write is on stable media on each member that took it (FUA, DSYNC).
    fn on_all(
        &self,
        what: &str,
        range: Option<(u64, u64)>,
        durable: bool,
        aio: AioOp<'_>,
        op: impl Fn(&dyn BlockDevice) -> io::Result<()> + Sync,
    ) -> io::Result<()> {
        let mut causes = Causes::default();
        let targets: Vec<(usize, Arc<dyn BlockDevice>)> = (0..self.members.len())
            .filter_map(|i| self.written_or_missed(i, range, &mut causes).map(|d| (i, d)))
            .collect();
        if range.is_some() {
            // A pause only (tests): an injected failure here would be no member's.
            let _ = self.failpoints.hit(crate::failpoint::MIRROR_WRITE_TARGETS);
        }
        // A flush covers what completed before it started (unflushed.rs).
        let epoch = range.is_none().then(|| lock(&self.unflushed).begin_flush());
        let results = self.fan.map_io(&targets, aio, op);
        if let Some((start, end)) = range {
            // Before the errors are handled: a member the write failed on is faulted
            // with this range among those it may lack. A durable write that every member
            // took is in no cache (intent-log writes between two commits' flushes).
            if !durable || results.iter().any(|r| r.is_err()) {
                causes.add_recording(self.note_written(start, end));
            }
        }
        let results = targets.iter().map(|(i, _)| *i).zip(results);
        let mut done = 0;
        for (i, r) in results {
            match r {
                Ok(()) => done += 1,
                Err(e) => {
                    let later = self.write_error(i, what, &e);
                    causes.add(Some(e));
                    causes.add_recording(later);
                }
            }
        }
        let last = causes.take();
        if let Some(epoch) = epoch.filter(|_| done > 0) {
            // Every member still in use flushed; the ones that failed were faulted above.
            lock(&self.unflushed).flushed(epoch);
        }
        // Ok only while a member is still in use: one that took the write may have been
        // faulted since (its label write failed), and then the pool is suspended.
        if done > 0 && self.usable() {
            return Ok(());
        }
        // The member's own error, unwrapped: callers look at its kind and source.
        Err(last.unwrap_or_else(|| self.suspended(what)))
    }
}

impl Member {
    fn new(dev: Option<Arc<dyn BlockDevice>>, guid: u64, device: String, state: MemberState) -> Member {
        Member {
            slot: Mutex::new(Slot { dev, guid, device }),
            state: AtomicUsize::new(state.to_usize()),
            read_errors: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            checksum_errors: AtomicU64::new(0),
            repaired_bytes: AtomicU64::new(0),
            note: Mutex::new(None),
            missed: Mutex::new(None),
        }
    }
}

/// Write both copies of member `i`'s label (the configuration `cfg` as seen from it), then
/// flush.
fn write_label(dev: &dyn BlockDevice, cfg: &MemberLabelPhys, i: usize) -> io::Result<()> {
    let mut l = cfg.clone();
    l.member_index = i as u32;
    l.member_guid = cfg.members.get(i).map_or(0, |m| m.guid);
    debug_assert!(l.members.len() <= MEMBERS_MAX);
    let raw = l.encode();
    dev.write_at(&raw, 0)?;
    dev.write_at(&raw, MEMBER_LABEL_COPY_1)?;
    dev.flush()
}

/// The rows of a parity2 configuration.
fn rows_of(cfg: &MemberLabelPhys) -> Option<Rows> {
    (cfg.layout == Layout::Parity2).then(|| Rows {
        start: cfg.rows_start,
        data: cfg.members.len().saturating_sub(2).max(1),
        members: cfg.members.len(),
    })
}

/// Bytes each member of `cfg`'s set needs.
fn member_bytes(cfg: &MemberLabelPhys) -> u64 {
    match rows_of(cfg) {
        None => cfg.logical_size + MEMBER_AREA_BYTES,
        Some(r) => {
            let rows = (cfg.logical_size - r.start) / (r.data as u64 * UNIT_SIZE);
            MEMBER_AREA_BYTES + r.start + rows * UNIT_SIZE
        }
    }
}

/// Where a request falls in a parity2 set: all before the rows, all in them, or across.
enum Region {
    Mirrored,
    Rows(Rows),
    Across(Rows),
}

impl MirrorDevice {
    /// `read_verified` (one copy, others only when it fails) or, with `scrub`, `scrub_read`
    /// (every copy, and a parity2 row's parity).
    fn verified_read(
        &self,
        buf: &mut [u8],
        offset: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
        scrub: bool,
    ) -> io::Result<bool> {
        match self.region(offset, buf.len()) {
            Region::Mirrored if scrub => self.mirror_scrub_read(buf, offset, heal, verify),
            Region::Mirrored => self.mirror_read_verified(buf, offset, heal, verify),
            Region::Rows(r) => self.parity_verified(&r, buf, offset, heal, verify, scrub),
            // The allocator keeps blocks on one side of the rows' start (alloc/rows.rs).
            Region::Across(_) => {
                self.read_at(buf, offset)?;
                Ok(verify(buf))
            }
        }
    }

    fn region(&self, offset: u64, len: usize) -> Region {
        match self.rows {
            None => Region::Mirrored,
            Some(r) if offset + len as u64 <= r.start => Region::Mirrored,
            Some(r) if offset >= r.start => Region::Rows(r),
            Some(r) => Region::Across(r),
        }
    }
}

impl MirrorDevice {
    fn mirror_read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut last = None;
        for (i, dev) in self.read_order() {
            match dev.read_at(buf, offset + MEMBER_AREA_BYTES) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let later = self.read_error(i, "read", &e);
                    last = keep(keep(last, Some(e)), later);
                }
            }
        }
        Err(last.unwrap_or_else(|| self.suspended("read")))
    }

    fn mirror_write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let _w = self.begin_write(offset, buf.len() as u64);
        let range = Some((offset, offset + buf.len() as u64));
        let at = offset + MEMBER_AREA_BYTES;
        let op = AioOp::Write { buf, offset: at, dsync: false };
        self.on_all("write", range, false, op, |d| d.write_at(buf, at))
    }

    fn mirror_flush(&self) -> io::Result<()> {
        self.on_all("flush", None, false, AioOp::Fdsync, |d| d.flush())
    }

    fn mirror_write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let _w = self.begin_write(offset, buf.len() as u64);
        let range = Some((offset, offset + buf.len() as u64));
        let at = offset + MEMBER_AREA_BYTES;
        let op = AioOp::Write { buf, offset: at, dsync: true };
        self.on_all("durable write", range, true, op, |d| d.write_durable(buf, at))
    }

    fn mirror_read_verified(
        &self,
        buf: &mut [u8],
        offset: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> io::Result<bool> {
        let mut bad: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut failed = Vec::new();
        let mut last = None;
        for (i, dev) in self.read_order() {
            if let Err(e) = dev.read_at(buf, offset + MEMBER_AREA_BYTES) {
                failed.push(i);
                let later = self.read_error(i, "read", &e);
                last = keep(keep(last, Some(e)), later);
                continue;
            }
            if verify(buf) {
                for (j, copy) in bad {
                    self.heal(j, offset, copy, buf, heal.clone());
                }
                // A sector that failed to read is rewritten too: devices remap on write.
                for j in failed {
                    self.rewrite(j, offset, buf, buf.len() as u64);
                }
                return Ok(true);
            }
            bad.push((i, buf.to_vec()));
        }
        match bad.into_iter().next() {
            // No copy verified: the caller reports the corruption (it may also be a block
            // that was never written, which no copy holds).
            Some((_, first)) => {
                buf.copy_from_slice(&first);
                Ok(false)
            }
            None => Err(last.unwrap_or_else(|| self.suspended("read"))),
        }
    }

    fn mirror_read_best(
        &self,
        buf: &mut [u8],
        offset: u64,
        score: &dyn Fn(&[u8]) -> Option<u64>,
    ) -> io::Result<Option<u64>> {
        let mut copies: Vec<(usize, Option<u64>, Vec<u8>)> = Vec::new();
        let mut last = None;
        for (i, dev) in self.read_order() {
            let mut copy = vec![0u8; buf.len()];
            match dev.read_at(&mut copy, offset + MEMBER_AREA_BYTES) {
                Ok(()) => copies.push((i, score(&copy), copy)),
                Err(e) => {
                    let later = self.read_error(i, "read", &e);
                    last = keep(keep(last, Some(e)), later);
                }
            }
        }
        // The highest score; the first copy read among equals.
        let Some(best) = copies.iter().enumerate().max_by_key(|(k, c)| (c.1, std::cmp::Reverse(*k))).map(|(k, _)| k)
        else {
            return Err(last.unwrap_or_else(|| self.suspended("read")));
        };
        let (_, best_score, best_copy) = copies.swap_remove(best);
        buf.copy_from_slice(&best_copy);
        if best_score.is_some() {
            for (i, s, copy) in copies {
                if s < best_score && copy != best_copy {
                    self.rewrite(i, offset, &best_copy, best_copy.len() as u64);
                }
            }
        }
        Ok(best_score)
    }
}

impl BlockDevice for MirrorDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self.region(offset, buf.len()) {
            Region::Mirrored => self.mirror_read_at(buf, offset),
            Region::Rows(r) => self.parity_read(&r, buf, offset),
            Region::Across(r) => {
                let (a, b) = buf.split_at_mut((r.start - offset) as usize);
                self.mirror_read_at(a, offset)?;
                self.parity_read(&r, b, r.start)
            }
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.region(offset, buf.len()) {
            Region::Mirrored => self.mirror_write_at(buf, offset),
            Region::Rows(r) => self.parity_write(&r, buf, offset),
            Region::Across(r) => {
                let (a, b) = buf.split_at((r.start - offset) as usize);
                self.mirror_write_at(a, offset)?;
                self.parity_write(&r, b, r.start)
            }
        }
    }

    fn flush(&self) -> io::Result<()> {
        self.mirror_flush()
    }

    fn write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.region(offset, buf.len()) {
            Region::Mirrored => self.mirror_write_durable(buf, offset),
            _ => {
                self.write_at(buf, offset)?;
                self.mirror_flush()
            }
        }
    }

    fn read_verified(
        &self,
        buf: &mut [u8],
        offset: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> io::Result<bool> {
        self.verified_read(buf, offset, heal, verify, false)
    }

    fn scrub_read(
        &self,
        buf: &mut [u8],
        offset: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> io::Result<bool> {
        self.verified_read(buf, offset, heal, verify, true)
    }

    fn scrub_read_run(
        &self,
        buf: &mut [u8],
        offset: u64,
        blocks: &[(Range<usize>, Range<usize>)],
        verify: &(dyn Fn(usize, &[u8]) -> bool + Sync),
    ) -> Vec<io::Result<bool>> {
        let run = match self.region(offset, buf.len()) {
            Region::Mirrored => self.mirror_scrub_run(buf, offset, blocks, verify),
            _ => None,
        };
        run.unwrap_or_else(|| super::scrub_blocks_one_by_one(self, buf, offset, blocks, verify))
    }

    fn read_best(&self, buf: &mut [u8], offset: u64, score: &dyn Fn(&[u8]) -> Option<u64>) -> io::Result<Option<u64>> {
        match self.region(offset, buf.len()) {
            Region::Mirrored => self.mirror_read_best(buf, offset, score),
            _ => {
                self.read_at(buf, offset)?;
                Ok(score(buf))
            }
        }
    }

    fn rows(&self) -> Option<(u64, u64)> {
        self.rows.map(|r| (r.start, r.data as u64))
    }

    fn size_bytes(&self) -> u64 {
        self.logical_size
    }

    fn describe(&self) -> String {
        let names: Vec<String> = self.members.iter().map(|m| m.device()).collect();
        format!("mirror of {}", names.join(", "))
    }

    fn note_txg(&self, txg: u64) {
        self.txg.store(txg, Ordering::Relaxed);
    }

    fn set_status(&self) -> Option<SetStatus> {
        let members: Vec<MemberStatus> = self
            .members
            .iter()
            .enumerate()
            .map(|(index, m)| MemberStatus {
                group: 0,
                index,
                guid: m.guid(),
                device: m.device(),
                state: m.state(),
                read_errors: m.read_errors.load(Ordering::Relaxed),
                write_errors: m.write_errors.load(Ordering::Relaxed),
                checksum_errors: m.checksum_errors.load(Ordering::Relaxed),
                repaired_bytes: m.repaired_bytes.load(Ordering::Relaxed),
                note: lock(&m.note).clone(),
            })
            .collect();
        let in_use = members.iter().filter(|m| m.state.in_use()).count();
        let health = match in_use {
            n if n < self.min_in_use() => SetHealth::Suspended,
            n if n == members.len() && members.iter().all(|m| m.state == MemberState::Online) => SetHealth::Online,
            _ => SetHealth::Degraded,
        };
        Some(SetStatus {
            layout: self.layout,
            set_guid: lock(&self.config).set_guid,
            health,
            members,
            rebuild: self.rebuild_status(),
        })
    }

    fn as_mirror(&self) -> Option<&MirrorDevice> {
        Some(self)
    }
}
