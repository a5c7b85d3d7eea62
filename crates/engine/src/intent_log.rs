//! The intent log: synchronous writes acknowledged before their txg commits (DESIGN.md
//! §3.5, the ZIL / NVRAM role).
//!
//! Every mutation an engine `Txn` makes is also recorded, as a logical redo record, in
//! memory; the end of the `Txn` closes a *group*. A sync writes the groups it needs as one
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

use crate::alloc::Geometry;
use crate::device::BlockDevice;
use crate::error::{Corruption, Error, Result};
use crate::format::codec::Writer;
use crate::format::intent::{LogBlockPhys, LogRecord, LOG_HEADER};
use crate::format::UNIT_SIZE;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

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
    bytes: Vec<u8>,
    scope: Scope,
    /// Large writes in `bytes` that a sync may log by reference instead.
    big: Vec<BigWrite>,
}

/// A Write record of at least `BY_REF_MIN` bytes inside a group's encoded bytes.
#[derive(Clone, Debug)]
struct BigWrite {
    /// The whole encoded record, and where its data begins.
    start: usize,
    end: usize,
    data_at: usize,
    vol: u64,
    obj: u64,
    offset: u64,
}

/// A large write a sync may log by reference: which group and which of its large writes,
/// and the written bytes.
pub struct RefCandidate {
    pub lsn: u64,
    pub index: usize,
    pub vol: u64,
    pub obj: u64,
    pub offset: u64,
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
    /// The group being recorded (by a `Txn`), and whom it concerns so far.
    open: Vec<u8>,
    open_objects: Vec<(u64, u64)>,
    open_shared: bool,
    open_big: Vec<BigWrite>,
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
            open_big: Vec::new(),
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

    /// Record a write without first copying its bytes into a `LogRecord` (the hot path).
    pub fn record_write(&mut self, vol: u64, obj: u64, offset: u64, data: &[u8]) {
        let start = self.open.len();
        let mut w = Writer::from_vec(std::mem::take(&mut self.open));
        LogRecord::encode_write(&mut w, vol, obj, offset, data);
        self.open = w.into_inner();
        let end = self.open.len();
        if data.len() >= BY_REF_MIN {
            self.open_big.push(BigWrite { start, end, data_at: end - data.len(), vol, obj, offset });
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
            let big = std::mem::take(&mut self.open_big);
            let lsn = self.appended;
            match &scope {
                Scope::Private(o) => {
                    self.private.entry(*o).or_default().insert(lsn);
                }
                Scope::Shared(_) => {
                    self.shared.insert(lsn);
                }
            }
            self.groups.insert(lsn, Group { bytes: std::mem::take(&mut self.open), scope, big });
        }
    }

    /// The lsns (ascending) of the groups a sync of `target` must write, among those
    /// recorded up to `upto`: the ones it wants, and before each shared group, the private
    /// groups of the objects that group touches.
    fn select(&self, target: SyncTarget, upto: u64) -> Vec<u64> {
        let SyncTarget::Object { vol, obj } = target else {
            return self.groups.range(..=upto).map(|(l, _)| *l).collect();
        };
        let mut picked: BTreeSet<u64> = self.shared.range(..=upto).copied().collect();
        if let Some(own) = self.private.get(&(vol, obj)) {
            picked.extend(own.range(..=upto));
        }
        for s in self.shared.range(..=upto) {
            let Scope::Shared(objs) = &self.groups[s].scope else { unreachable!("indexed as shared") };
            for o in objs {
                if let Some(theirs) = self.private.get(o) {
                    picked.extend(theirs.range(..*s));
                }
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
        self.fits_groups(&self.select(target, u64::MAX))
    }

    fn fits_groups(&self, lsns: &[u64]) -> bool {
        let len: usize = lsns.iter().map(|l| self.groups[l].bytes.len()).sum();
        self.head + LogBlockPhys::units_for(len) * UNIT_SIZE <= self.place.bytes
    }

    /// The large writes among the groups a sync of `target` would write now, with their
    /// bytes (copied: the lock is released while they are written in place).
    pub fn ref_candidates(&self, target: SyncTarget) -> Vec<RefCandidate> {
        let mut out = Vec::new();
        for l in self.select(target, u64::MAX) {
            let g = &self.groups[&l];
            for (index, b) in g.big.iter().enumerate() {
                out.push(RefCandidate {
                    lsn: l,
                    index,
                    vol: b.vol,
                    obj: b.obj,
                    offset: b.offset,
                    data: g.bytes[b.data_at..b.end].to_vec(),
                });
            }
        }
        out
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
    /// `refs` replaces large writes, by (group lsn, index among its large writes), with
    /// references to the blocks their bytes were written to.
    pub fn take_block(
        &mut self,
        pool_guid: u64,
        target: SyncTarget,
        refs: &std::collections::HashMap<(u64, usize), Vec<crate::format::BlockPtr>>,
    ) -> (Vec<u8>, u64) {
        assert!(!self.group_open, "only whole groups are written");
        assert!(!self.in_flight, "one log write at a time");
        let picked = self.select(target, u64::MAX);
        assert!(self.fits_groups(&picked));
        let mut payload = Vec::with_capacity(picked.iter().map(|l| self.groups[l].bytes.len()).sum());
        for l in picked {
            let g = self.remove(l);
            let mut at = 0;
            for (index, b) in g.big.iter().enumerate() {
                let Some(bps) = refs.get(&(l, index)) else { continue };
                payload.extend_from_slice(&g.bytes[at..b.start]);
                let r = LogRecord::WriteRef { vol: b.vol, obj: b.obj, offset: b.offset, bps: bps.clone() };
                let mut w = Writer::with_capacity(0);
                r.encode_into(&mut w);
                payload.extend_from_slice(&w.into_inner());
                at = b.end;
            }
            payload.extend_from_slice(&g.bytes[at..]);
            self.in_flight_groups.push((l, g.scope));
        }
        let block = LogBlockPhys { pool_guid, base_txg: self.base_txg, seq: self.seq, payload };
        let raw = block.encode();
        let at = self.place.offset + self.head;
        self.head += raw.len() as u64;
        self.seq += 1;
        self.blocks_written += 1;
        self.bytes_written += raw.len() as u64;
        self.in_flight = true;
        (raw, at)
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

    /// Where the log's blocks go (the device to write them to and flush).
    pub fn place(&self) -> &LogPlace {
        &self.place
    }

    /// Root `txg` is durable: everything logged so far is in it.
    pub fn reset(&mut self, txg: u64) {
        // A block still in flight keeps the next writer waiting (`in_flight`), so nothing is
        // written at the region's start until it has landed.
        self.base_txg = txg;
        self.head = 0;
        self.seq = 0;
        self.open.clear();
        self.open_objects.clear();
        self.open_shared = false;
        self.open_big.clear();
        self.group_open = false;
        self.groups.clear();
        self.shared.clear();
        self.private.clear();
    }

    /// The complete groups logged on top of root `root_txg`, in order.
    /// `verify` sees every record of a block before any of its groups is taken: a false
    /// ends the log before that block (its referenced data did not land: never
    /// acknowledged).
    pub fn read(
        place: &LogPlace,
        pool_guid: u64,
        root_txg: u64,
        verify: &mut dyn FnMut(&LogRecord) -> bool,
    ) -> Result<Vec<Vec<LogRecord>>> {
        let (dev, log_offset, log_bytes) = (place.dev.as_ref(), place.offset, place.bytes);
        let mut groups = Vec::new();
        let mut current = Vec::new();
        let mut at = 0u64;
        let mut seq = 0u64;
        let mut first = vec![0u8; UNIT_SIZE as usize];
        while at + UNIT_SIZE <= log_bytes {
            dev.read_at(&mut first, log_offset + at).map_err(|e| Error::io("read intent log", e))?;
            let Some((guid, base, s, _len, units)) = LogBlockPhys::header(&first) else { break };
            let size = units as u64 * UNIT_SIZE;
            if guid != pool_guid || base != root_txg || s != seq || units == 0 || at + size > log_bytes {
                break;
            }
            let mut buf = vec![0u8; size as usize];
            dev.read_at(&mut buf, log_offset + at).map_err(|e| Error::io("read intent log", e))?;
            let Some(block) = LogBlockPhys::decode(&buf) else { break };
            debug_assert!(block.payload.len() + LOG_HEADER <= buf.len());
            let records = LogRecord::decode_all(&block.payload)?;
            if !records.iter().all(|r| verify(r)) {
                break;
            }
            for r in records {
                match r {
                    LogRecord::GroupEnd => groups.push(std::mem::take(&mut current)),
                    other => current.push(other),
                }
            }
            if !current.is_empty() {
                // Blocks hold whole groups; a verified block that ends mid-group is damage.
                return Err(Corruption::new("intent log", Some(log_offset + at), "block ends inside a group").into());
            }
            at += size;
            seq += 1;
        }
        Ok(groups)
    }
}

impl crate::pool::Pool {
    /// Apply what the intent log holds on top of the opened root, then commit (which
    /// retires the log). Read-only opens leave the log alone and say so.
    pub(crate) fn replay_intent_log(&self) -> Result<()> {
        let mut p = self.lock();
        let io = p.io.clone();
        let mut refs = crate::intent_log_ref::RefReader { io: &io, fetched: Default::default(), error: None };
        let groups = IntentLog::read(p.ilog.place(), p.label.pool_guid, p.root.txg, &mut |r| refs.verify(r))?;
        if let Some(e) = refs.error.take() {
            return Err(e);
        }
        if groups.is_empty() {
            return Ok(());
        }
        let ops: usize = groups.iter().map(|g| g.len()).sum();
        if p.read_only {
            p.open_notes.push(format!(
                "{ops} operations in the intent log were not replayed (opened read-only): the state shown is the last commit"
            ));
            return Ok(());
        }
        // The blocks the log references stay untouched until the commit below lands.
        let txg = p.next_txg;
        for r in groups.iter().flatten() {
            if let LogRecord::WriteRef { bps, .. } = r {
                for bp in bps {
                    p.alloc.hold(bp.addr, bp.units(), txg);
                }
            }
        }
        for g in &groups {
            for r in g {
                apply(&mut p, r, &refs)?;
            }
        }
        p.commit()?;
        p.open_notes.push(format!("replayed {ops} operations ({} groups) from the intent log", groups.len()));
        Ok(())
    }
}

fn apply(p: &mut crate::pool::PoolInner, r: &LogRecord, refs: &crate::intent_log_ref::RefReader<'_>) -> Result<()> {
    use crate::pool::{PoolInner, VolumeId};
    use crate::volume::ObjectId;
    let PoolInner { volumes, io, alloc, .. } = p;
    let vol_of = |r: &LogRecord| match r {
        LogRecord::Write { vol, .. }
        | LogRecord::Truncate { vol, .. }
        | LogRecord::Punch { vol, .. }
        | LogRecord::SetAttr { vol, .. }
        | LogRecord::CreateObject { vol, .. }
        | LogRecord::DeleteObject { vol, .. }
        | LogRecord::KvPut { vol, .. }
        | LogRecord::KvDelete { vol, .. }
        | LogRecord::WriteRef { vol, .. } => *vol,
        LogRecord::GroupEnd => 0,
    };
    let vol = vol_of(r);
    let v = volumes
        .get_mut(&VolumeId(vol))
        .ok_or_else(|| Corruption::new("intent log", None, format!("record for unknown volume {vol}")))?;
    match r {
        LogRecord::Write { obj, offset, data, .. } => v.write(io, alloc, ObjectId(*obj), *offset, data),
        LogRecord::Truncate { obj, size, .. } => v.truncate(io, alloc, ObjectId(*obj), *size),
        LogRecord::Punch { obj, offset, len, .. } => v.punch_hole(io, alloc, ObjectId(*obj), *offset, *len),
        LogRecord::SetAttr { obj, attr, .. } => v.set_attr(io, ObjectId(*obj), attr),
        LogRecord::CreateObject { obj, attr, .. } => {
            let got = v.create_object(attr)?;
            if got.0 != *obj {
                return Err(Corruption::new(
                    "intent log",
                    None,
                    format!("replayed create made object {} where the log recorded {obj}", got.0),
                )
                .into());
            }
            Ok(())
        }
        LogRecord::DeleteObject { obj, .. } => v.delete_object(io, ObjectId(*obj)),
        LogRecord::KvPut { key, value, .. } => v.kv_put(io, key, value).map(|_| ()),
        LogRecord::KvDelete { key, .. } => v.kv_delete(io, key).map(|_| ()),
        LogRecord::WriteRef { obj, offset, bps, .. } => v.write(io, alloc, ObjectId(*obj), *offset, &refs.data(bps)?),
        LogRecord::GroupEnd => Ok(()),
    }
}
