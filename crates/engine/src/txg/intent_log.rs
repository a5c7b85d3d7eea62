//! The intent log: synchronous writes acknowledged before their txg commits (DESIGN.md
//! §3.5, the ZIL / NVRAM role).
//!
//! Every mutation an engine `PoolGuard` makes is also recorded, as a logical redo record, in
//! memory; the end of the `PoolGuard` closes a *group*. A sync writes the groups it needs as one
//! checksummed block into the log region and flushes: one sequential write and one flush
//! instead of a commit. The write and flush happen outside the pool's lock, so other
//! requests go on meanwhile; syncers that arrive during it wait, and the next writer takes
//! what they need too (group commit). Only one block is in flight at a time.
//!
//! What a sync needs: `Pool::sync_log` everything; `Pool::sync_object` (fsync of a file, NFS
//! COMMIT) the groups private to that object (its writes, truncates, attributes) and every
//! *shared* group (creates, deletes, key-value changes: names), each shared group preceded
//! by the private groups before it of the objects it touches. Other objects' private groups
//! stay in memory until their own sync or the commit (ZFS's asynchronous itxs): an fsync of
//! a redo log does not carry the page writes its tablespaces received meanwhile. Replay
//! then meets every object's operations in their order, and the shared ones in theirs;
//! only the interleaving of independent objects differs from the order they were made in.
//!
//! The log is tied to the committed root it builds on: blocks carry `base_txg` and a
//! sequence number, and a commit that makes root N durable restarts the log at the region's
//! start with base N. Replay on open (read-write) reads blocks from the start while they
//! verify and carry (base = root txg, seq = 0, 1, ...), and applies the complete groups, in
//! order, to the state of the root — then commits, which retires the log.
//!
//! Why this is exactly-once and in order: records apply to the state they were made on as
//! far as the objects they touch are concerned (root N plus those objects' groups before
//! them, and all shared groups before them), engine operations are deterministic and touch
//! only the objects they name, and a block either verifies whole or ends the replay. An acknowledged sync wrote its block and
//! flushed before returning, so every group it covered is replayed; a torn block was never
//! acknowledged. After a commit, stale blocks of older bases stop the scan at once.
//!
//! Where: the in-pool region of the pool's device, or the region of a separate log device
//! (`format::logdev`, the SLOG / NVRAM role) — a [`LogPlace`] either way. `sync_log` writes
//! and flushes only the device the log is on, so a small fast log device takes the fsync
//! latency off the pool's devices.
//!
//! Small writes carry their bytes (a logical log), so their data is written twice (log,
//! then txg). Large whole-record writes are written in place and logged by block pointer
//! (intent_log_ref.rs, ZFS's WR_INDIRECT): written once, the commit reusing the blocks.
//!
//! A write is recorded without its bytes (ZFS's WR_NEED_COPY): the group notes where its
//! record goes and what range it wrote, and the sync that writes the group reads the range
//! from the volume as it is *then*. Most writes are never synced before their txg commits
//! (NFS UNSTABLE writes, a database's page writes), so they cost the log nothing — no copy,
//! no memory held twice. Why reading later is exact: the block that carries an object's
//! deferred writes carries *all* of that object's waiting groups (`select`), so replay ends
//! the object exactly in the state it had when the block was formed. Of each byte, the last
//! operation that touched it decides its value: if that is a deferred write, the byte has
//! not changed since, so the volume still holds the write's value; if it is a later write,
//! truncate or punch, that operation is in the block too, and replay applies it after. A
//! range the object no longer has (truncated, deleted) reads as zeros, which a later
//! operation in the same block then cuts or removes. Sizes come out right because replay
//! writes the same ranges.

use crate::alloc::Geometry;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::codec::Writer;
use crate::format::intent::{LogBlockPhys, LogRecord, WRITE_DATA_MAX, WRITE_HEADER};
use crate::format::UNIT_SIZE;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// Groups a commit retired (`IntentLog::reset`), to be dropped without the pool's lock.
#[derive(Default)]
pub struct RetiredGroups {
    _groups: BTreeMap<u64, Group>,
    _shared: BTreeSet<u64>,
    _private: HashMap<(u64, u64), BTreeSet<u64>>,
}

/// The device and byte range the intent log's blocks go to.
#[derive(Clone)]
pub struct LogPlace {
    pub dev: Arc<dyn BlockDevice>,
    pub offset: u64,
    pub bytes: u64,
    /// 0: the in-pool region of the pool's device; else the separate log device's guid.
    pub log_device_guid: u64,
}

impl LogPlace {
    /// The in-pool region of `dev` (the pool's device).
    pub fn in_pool(dev: Arc<dyn BlockDevice>, geo: &Geometry) -> LogPlace {
        LogPlace { dev, offset: geo.log_offset, bytes: geo.log_bytes, log_device_guid: 0 }
    }

    pub fn is_separate(&self) -> bool {
        self.log_device_guid != 0
    }

    /// Write zeros over the region (its first `PREFILL_MAX` bytes), once, when the pool or
    /// the log device is made. On an image file the host file system then allocates the
    /// region now, not during the log's first lap — where every newly touched extent turns
    /// an fsync's flush into a host journal commit (fdatasync p99 of 840–946 µs on a fresh
    /// sparse image against 561–676 µs on a written one, docs/intent-log.md). Zeros never
    /// verify as a log block, so this changes nothing replay sees.
    pub fn prefill(&self) -> Result<()> {
        const CHUNK: usize = 1 << 20;
        let zeros = crate::device::AlignedBuf::zeroed(CHUNK);
        let end = self.bytes.min(PREFILL_MAX);
        let mut at = 0;
        while at < end {
            let n = (end - at).min(CHUNK as u64) as usize;
            self.dev.write_at(&zeros[..n], self.offset + at).map_err(|e| Error::io("prefill intent log region", e))?;
            at += n as u64;
        }
        Ok(())
    }
}

/// How much of a log region `LogPlace::prefill` writes: all of an in-pool region (at most
/// 256 MiB), the first 256 MiB of a log device.
pub const PREFILL_MAX: u64 = 256 << 20;

/// What a sync must make durable: everything (`Pool::sync_log`), or one object
/// (`Pool::sync_object`: fsync of a file, an NFS COMMIT) — its own operations and every
/// operation that is not private to one object (creates, deletes, key-value changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncTarget {
    All,
    Object { vol: u64, obj: u64 },
}

/// Whom a group of records concerns. A group of data records (write, truncate, punch, set
/// attribute) of one object is *private* to it: a sync of another object leaves it in
/// memory (ZFS's asynchronous itx), so that an fsync of a database's redo log does not
/// carry the page writes its tablespaces received meanwhile. Any other group is *shared*:
/// every sync writes it, with the private groups that came before it of the objects it
/// touches (replay then meets each object's operations in their order).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Scope {
    Private((u64, u64)),
    Shared(Vec<(u64, u64)>),
}

struct Group {
    /// The encoded records but the writes.
    bytes: Vec<u8>,
    scope: Scope,
    /// The writes, read from their volumes when a sync writes the group.
    writes: Vec<LaterWrite>,
}

impl Group {
    /// Bytes of its records with every write carrying its data.
    fn encoded_len(&self) -> usize {
        self.bytes.len() + self.writes.iter().map(|w| WRITE_HEADER + w.len).sum::<usize>()
    }
}

/// A write recorded without its bytes: its record goes at `at` among the group's encoded
/// records.
#[derive(Clone, Debug)]
struct LaterWrite {
    at: usize,
    vol: u64,
    obj: u64,
    offset: u64,
    len: usize,
}

/// A large write a sync may log by reference: which group and which of its writes, and
/// the range written (`data` is filled by the caller, from the volume).
pub struct RefCandidate {
    pub lsn: u64,
    pub index: usize,
    pub vol: u64,
    pub obj: u64,
    pub offset: u64,
    pub len: usize,
    pub data: Vec<u8>,
}

/// Writes at least this large are candidates for by-reference logging (ZFS's
/// zfs_immediate_write_sz is 32 KiB as well).
pub const BY_REF_MIN: usize = 32 << 10;

impl Scope {
    /// Whether a sync of `target` needs this group for itself (not counting the groups
    /// shared groups drag along).
    fn wanted_by(&self, target: SyncTarget) -> bool {
        match (target, self) {
            (SyncTarget::All, _) | (_, Scope::Shared(_)) => true,
            (SyncTarget::Object { vol, obj }, Scope::Private(o)) => *o == (vol, obj),
        }
    }
}

pub struct IntentLog {
    place: LogPlace,
    base_txg: u64,
    head: u64,
    seq: u64,
    /// The group being recorded (by a `PoolGuard`), and whom it concerns so far.
    open: Vec<u8>,
    open_objects: Vec<(u64, u64)>,
    open_shared: bool,
    open_writes: Vec<LaterWrite>,
    group_open: bool,
    /// Whole groups not yet written, by lsn; and indexes of them: the shared ones, and the
    /// private ones per object (so that a sync costs what it writes, not what waits).
    groups: BTreeMap<u64, Group>,
    shared: BTreeSet<u64>,
    private: HashMap<(u64, u64), BTreeSet<u64>>,
    /// The groups of the block being written: their lsns and scopes.
    in_flight_groups: Vec<(u64, Scope)>,
    /// Groups recorded since the pool opened: the last group's log sequence number.
    pub appended: u64,
    /// A block is being written and flushed outside the pool's lock; one at a time.
    pub in_flight: bool,
    pub blocks_written: u64,
    pub bytes_written: u64,
    /// Bytes of large writes logged by reference (written in place, not into the log).
    pub ref_bytes: u64,
    /// Syncs that found the log region full and had to wait for a whole commit instead.
    pub full_commits: u64,
}

impl IntentLog {
    pub fn new(place: LogPlace, base_txg: u64) -> IntentLog {
        IntentLog {
            place,
            base_txg,
            head: 0,
            seq: 0,
            open: Vec::new(),
            open_objects: Vec::new(),
            open_shared: false,
            open_writes: Vec::new(),
            group_open: false,
            groups: BTreeMap::new(),
            shared: BTreeSet::new(),
            private: HashMap::new(),
            in_flight_groups: Vec::new(),
            appended: 0,
            in_flight: false,
            blocks_written: 0,
            bytes_written: 0,
            ref_bytes: 0,
            full_commits: 0,
        }
    }

    pub fn record(&mut self, r: &LogRecord) {
        let mut w = Writer::from_vec(std::mem::take(&mut self.open));
        r.encode_into(&mut w);
        self.open = w.into_inner();
        let (object, shared) = match r {
            LogRecord::Write { vol, obj, .. }
            | LogRecord::Truncate { vol, obj, .. }
            | LogRecord::Punch { vol, obj, .. }
            | LogRecord::SetAttr { vol, obj, .. }
            | LogRecord::WriteRef { vol, obj, .. } => (Some((*vol, *obj)), false),
            LogRecord::CreateObject { vol, obj, .. } | LogRecord::DeleteObject { vol, obj } => {
                (Some((*vol, *obj)), true)
            }
            LogRecord::KvPut { .. } | LogRecord::KvDelete { .. } => (None, true),
            LogRecord::GroupEnd => (None, false),
        };
        self.recorded(object, shared);
    }

    /// Record a write of `len` bytes at `offset`, made to the volume just now. Its bytes are
    /// read from the volume if a sync writes it (see the module comment).
    pub fn record_write(&mut self, vol: u64, obj: u64, offset: u64, len: usize) {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(WRITE_DATA_MAX);
            self.open_writes.push(LaterWrite { at: self.open.len(), vol, obj, offset: offset + done as u64, len: n });
            done += n;
        }
        self.recorded(Some((vol, obj)), false);
    }

    /// A record was appended to the open group: note whom it concerns.
    fn recorded(&mut self, object: Option<(u64, u64)>, shared: bool) {
        self.group_open = true;
        self.open_shared |= shared;
        if let Some(o) = object {
            if !self.open_objects.contains(&o) {
                self.open_objects.push(o);
            }
        }
    }

    pub fn end_group(&mut self) {
        if self.group_open {
            self.record(&LogRecord::GroupEnd);
            self.group_open = false;
            self.appended += 1;
            let objects = std::mem::take(&mut self.open_objects);
            let scope = if !self.open_shared && objects.len() == 1 {
                Scope::Private(objects[0])
            } else {
                Scope::Shared(objects)
            };
            self.open_shared = false;
            let writes = std::mem::take(&mut self.open_writes);
            let lsn = self.appended;
            match &scope {
                Scope::Private(o) => {
                    self.private.entry(*o).or_default().insert(lsn);
                }
                Scope::Shared(_) => {
                    self.shared.insert(lsn);
                }
            }
            self.groups.insert(lsn, Group { bytes: std::mem::take(&mut self.open), scope, writes });
        }
    }

    /// The lsns (ascending) of the groups a sync of `target` must write now: the ones it
    /// wants; before each shared group, the private groups of the objects that group
    /// touches; and all waiting groups of every object a picked group writes to (its
    /// deferred writes are read as the volume is now: the module comment says why).
    fn select(&self, target: SyncTarget) -> Vec<u64> {
        let SyncTarget::Object { vol, obj } = target else {
            return self.groups.keys().copied().collect();
        };
        let mut picked: BTreeSet<u64> = self.shared.iter().copied().collect();
        if let Some(own) = self.private.get(&(vol, obj)) {
            picked.extend(own);
        }
        for s in &self.shared {
            let Scope::Shared(objs) = &self.groups[s].scope else { unreachable!("indexed as shared") };
            for o in objs {
                if let Some(theirs) = self.private.get(o) {
                    picked.extend(theirs.range(..*s));
                }
            }
        }
        let written: BTreeSet<(u64, u64)> =
            picked.iter().flat_map(|l| self.groups[l].writes.iter().map(|w| (w.vol, w.obj))).collect();
        for o in written {
            // Private groups hold one object's records only: no further groups follow.
            if let Some(theirs) = self.private.get(&o) {
                picked.extend(theirs);
            }
        }
        picked.into_iter().collect()
    }

    /// Whether a sync of `target` that began when `upto` groups were recorded is not yet
    /// durable: a group it needs is still to be written, or in the block in flight.
    pub fn needs(&self, target: SyncTarget, upto: u64) -> bool {
        let in_flight = self.in_flight_groups.iter().any(|(lsn, scope)| *lsn <= upto && scope.wanted_by(target));
        let first = |set: Option<&BTreeSet<u64>>| set.and_then(|s| s.first().copied()).is_some_and(|l| l <= upto);
        let waiting = match target {
            SyncTarget::All => self.groups.first_key_value().is_some_and(|(l, _)| *l <= upto),
            SyncTarget::Object { vol, obj } => first(Some(&self.shared)) || first(self.private.get(&(vol, obj))),
        };
        in_flight || waiting
    }

    /// Whether the groups a sync of `target` writes fit in what is left of the region.
    pub fn fits(&self, target: SyncTarget) -> bool {
        self.fits_groups(&self.select(target))
    }

    fn fits_groups(&self, lsns: &[u64]) -> bool {
        let len: usize = lsns.iter().map(|l| self.groups[l].encoded_len()).sum();
        self.head + LogBlockPhys::units_for(len) * UNIT_SIZE <= self.place.bytes
    }

    /// The large writes (at least `BY_REF_MIN` bytes) among the groups a sync of `target`
    /// would write now; their bytes are for the caller to read.
    pub fn ref_candidates(&self, target: SyncTarget) -> Vec<RefCandidate> {
        let mut out = Vec::new();
        for l in self.select(target) {
            for (index, w) in self.groups[&l].writes.iter().enumerate().filter(|(_, w)| w.len >= BY_REF_MIN) {
                out.push(RefCandidate {
                    lsn: l,
                    index,
                    vol: w.vol,
                    obj: w.obj,
                    offset: w.offset,
                    len: w.len,
                    data: Vec::new(),
                });
            }
        }
        out
    }

    /// Memory held by the operations waiting (their records but the writes' bytes).
    pub fn memory_bytes(&self) -> u64 {
        let per_write = std::mem::size_of::<LaterWrite>();
        let held = |bytes: usize, writes: usize| (bytes + writes * per_write) as u64;
        held(self.open.len(), self.open_writes.len())
            + self.groups.values().map(|g| held(g.bytes.len(), g.writes.len())).sum::<u64>()
    }

    /// Whether group `lsn` is still waiting to be written.
    pub fn is_pending(&self, lsn: u64) -> bool {
        self.groups.contains_key(&lsn)
    }

    /// Remove group `lsn` from the waiting ones and their indexes.
    fn remove(&mut self, lsn: u64) -> Group {
        let g = self.groups.remove(&lsn).expect("selected groups are waiting");
        match &g.scope {
            Scope::Private(o) => {
                if let Some(set) = self.private.get_mut(o) {
                    set.remove(&lsn);
                    if set.is_empty() {
                        self.private.remove(o);
                    }
                }
            }
            Scope::Shared(_) => {
                self.shared.remove(&lsn);
            }
        }
        g
    }

    /// Take the groups a sync of `target` needs (and anything recorded since that it would
    /// need too, so that syncers waiting meanwhile are served) as the next block: returns
    /// its bytes and device address. The head advances now, so the next block goes after
    /// it; `in_flight` keeps a second writer (and the reuse of the region after a commit)
    /// waiting until this one is flushed, and `written` ends it.
    ///
    /// `refs` replaces large writes, by (group lsn, index among its writes), with
    /// references to the blocks their bytes were written to. `read(vol, obj, offset, buf)`
    /// fills `buf` (zeroed) with the range as the volume holds it now, leaving zeros where
    /// the object or its data no longer is. A failed read leaves everything as it was.
    pub fn take_block(
        &mut self,
        pool_guid: u64,
        target: SyncTarget,
        refs: &std::collections::HashMap<(u64, usize), Vec<crate::format::BlockPtr>>,
        read: &mut dyn FnMut(u64, u64, u64, &mut [u8]) -> Result<()>,
    ) -> Result<(Vec<u8>, u64)> {
        assert!(!self.group_open, "only whole groups are written");
        assert!(!self.in_flight, "one log write at a time");
        let picked = self.select(target);
        assert!(self.fits_groups(&picked));
        let len = picked.iter().map(|l| self.groups[l].encoded_len()).sum();
        let mut payload = Writer::with_capacity(len);
        for l in &picked {
            let g = &self.groups[l];
            let mut at = 0;
            for (index, w) in g.writes.iter().enumerate() {
                payload.bytes(&g.bytes[at..w.at]);
                at = w.at;
                if let Some(bps) = refs.get(&(*l, index)) {
                    LogRecord::WriteRef { vol: w.vol, obj: w.obj, offset: w.offset, bps: bps.clone() }
                        .encode_into(&mut payload);
                    continue;
                }
                LogRecord::encode_write_header(&mut payload, w.vol, w.obj, w.offset, w.len);
                read(w.vol, w.obj, w.offset, payload.zeros_mut(w.len))?;
            }
            payload.bytes(&g.bytes[at..]);
        }
        for l in picked {
            let g = self.remove(l);
            self.in_flight_groups.push((l, g.scope));
        }
        let payload = payload.into_inner();
        let block = LogBlockPhys { pool_guid, base_txg: self.base_txg, seq: self.seq, payload };
        let raw = block.encode();
        let at = self.place.offset + self.head;
        self.head += raw.len() as u64;
        self.seq += 1;
        self.blocks_written += 1;
        self.bytes_written += raw.len() as u64;
        self.in_flight = true;
        Ok((raw, at))
    }

    /// The block in flight landed (or failed: the pool then latches).
    pub fn written(&mut self) {
        self.in_flight = false;
        self.in_flight_groups.clear();
    }

    /// Move the (empty: just committed, nothing in flight) log to `place`.
    pub fn move_to(&mut self, place: LogPlace) {
        assert!(!self.in_flight && self.groups.is_empty() && !self.group_open, "only an empty log moves");
        self.place = place;
        self.head = 0;
        self.seq = 0;
    }

    /// The block in flight failed on a separate log device and a commit has since made
    /// every group durable but those recorded after its freeze: nothing is in the region
    /// since (the failed block kept the next writer waiting). Move to `place`; the groups
    /// still to be written go there. The block stays in flight until `written`. False (and
    /// nothing moved) when the log is not in that state.
    pub fn fail_over_to(&mut self, place: LogPlace) -> bool {
        if !self.in_flight || self.head != 0 || self.group_open {
            return false;
        }
        self.place = place;
        self.seq = 0;
        true
    }

    /// The bytes of the pool's own log region that replay could read now: from its start
    /// to the head (the block in flight included), or 0 when the log is on a separate
    /// device. Past the head the region holds only blocks of older bases or seqs, which end
    /// a replay whatever they are — so a rebuild copies only this much of the region
    /// (pool/rebuild.rs): blocks written later reach the member being rebuilt by their own
    /// writes.
    pub fn live_in_pool(&self) -> u64 {
        if self.place.is_separate() {
            0
        } else {
            self.head
        }
    }

    /// Where the log's blocks go (the device to write them to and flush).
    pub fn place(&self) -> &LogPlace {
        &self.place
    }

    /// Root `txg` is durable, and with it every group up to `through` (the last group
    /// recorded when the commit froze the txg: `PoolInner::freeze`). Those are retired;
    /// groups recorded since belong to the next txg and stay, to be written under the new
    /// base — none of them was written yet: log writes wait while a commit is in flight.
    /// Returns the retired groups, for the caller to drop once the pool's lock is released
    /// (tens of thousands of small allocations after a busy txg: a third of a commit's
    /// locked CPU time in one profile).
    pub fn reset(&mut self, txg: u64, through: u64) -> RetiredGroups {
        // A block still in flight keeps the next writer waiting (`in_flight`), so nothing is
        // written at the region's start until it has landed.
        self.base_txg = txg;
        self.head = 0;
        self.seq = 0;
        // A commit inside a `PoolGuard` (space retries) covers the group being recorded, too.
        self.open.clear();
        self.open_objects.clear();
        self.open_shared = false;
        self.open_writes.clear();
        self.group_open = false;
        let kept = self.groups.split_off(&(through + 1));
        let retired = RetiredGroups {
            _groups: std::mem::replace(&mut self.groups, kept),
            _shared: std::mem::take(&mut self.shared),
            _private: std::mem::take(&mut self.private),
        };
        for (lsn, g) in &self.groups {
            match &g.scope {
                Scope::Private(o) => {
                    self.private.entry(*o).or_default().insert(*lsn);
                }
                Scope::Shared(_) => {
                    self.shared.insert(*lsn);
                }
            }
        }
        retired
    }
}
