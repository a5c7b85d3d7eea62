//! The journal of a synchronous mirror's target: the source's tap frames
//! (pool/sync_tap.rs), appended to an object of a volume of the target pool and synced
//! there before the source's sync returns; replayed onto the mirror's volumes when the
//! mirror is broken (docs/mirrors.md, "Synchronous mode").
//!
//! The mirror's volumes stay at the newest transferred snapshot S while it is a mirror;
//! the frames are not applied until a break, which restores the volumes to S and replays
//! every frame of a txg after S's (the frames of txgs up to it are in S). Transfers retire
//! the frames they cover.
//!
//! On disk (the object's bytes, from the offset in key `journal.start`):
//!
//! ```text
//!   0  magic     [u8; 4]  "STJF"
//!   4  len       u32      payload bytes
//!   8  seq       u64      1, 2, 3, ... over the journal's life (never restarts)
//!  16  txg       u64      the source txg of the frame's operations
//!  24  checksum  [u8; 32] BLAKE3 of bytes 0..24 and the payload
//!  56  payload   encoded intent-log records (format/intent.rs), the last a GroupEnd
//! ```
//!
//! A frame torn by a crash of the target fails its checksum, and the journal ends before
//! it (it was never acknowledged: the append syncs before it returns). Keys of the
//! journal's volume: `journal.object` (the object id), `journal.start`,
//! `journal.snap.<name>` (the source txg of the transferred snapshot `<name>`, noted before
//! its transfer starts, so that a break finds the txg of whichever snapshot the volume
//! last received), and `journal.gap` (see below).
//!
//! **Gaps.** When the source stops shipping frames for a while (the mirror fell back to
//! asynchronous; the source daemon restarted), the frames after that point are not
//! complete on top of the base snapshot: `mark_gap` records the last frame before the gap,
//! and a replay stops there, until a snapshot taken after the frames resumed has been
//! transferred (`clear_gap`).

use crate::catalog::volume::ObjectId;
use crate::error::{Corruption, Error, Result};
use crate::format::intent::LogRecord;
use crate::format::UNIT_SIZE;
use crate::pool::sync_tap::TapFrame;
use crate::pool::{Pool, VolumeId};

const MAGIC: [u8; 4] = *b"STJF";
const HEADER: usize = 56;
/// Largest frame payload read back: one guard's operations (a LUN write of 32 MiB is the
/// largest a front end makes), with room.
const PAYLOAD_MAX: u32 = 256 << 20;
const KEY_OBJECT: &[u8] = b"journal.object";
const KEY_START: &[u8] = b"journal.start";
const KEY_SNAP: &[u8] = b"journal.snap.";
const KEY_GAP: &[u8] = b"journal.gap";

/// A journal (see the module comment): its object and where it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    vol: VolumeId,
    obj: ObjectId,
    start: u64,
    end: u64,
    last_seq: u64,
    last_txg: u64,
}

/// A frame read back from a journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalFrame {
    pub seq: u64,
    pub txg: u64,
    pub records: Vec<u8>,
}

/// What a replay applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    pub frames: u64,
    pub operations: u64,
    /// The journal sequence number of the last frame applied (0: none).
    pub last_seq: u64,
}

fn encode_frame(seq: u64, txg: u64, payload: &[u8], out: &mut Vec<u8>) {
    let at = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&txg.to_le_bytes());
    let mut h = blake3::Hasher::new();
    h.update(&out[at..at + 24]);
    h.update(payload);
    out.extend_from_slice(h.finalize().as_bytes());
    out.extend_from_slice(payload);
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn u64_value(v: Option<Vec<u8>>, what: &str) -> Result<Option<u64>> {
    match v {
        None => Ok(None),
        Some(b) if b.len() == 8 => Ok(Some(u64_at(&b, 0))),
        Some(b) => {
            Err(Corruption::new("sync journal", None, format!("key {what} holds {} bytes, not 8", b.len())).into())
        }
    }
}

impl Journal {
    /// A new, empty journal in volume `vol` (which holds nothing else), durable on return.
    pub fn create(pool: &Pool, vol: VolumeId) -> Result<Journal> {
        if pool.kv_get(vol, KEY_OBJECT)?.is_some() {
            return Err(Error::AlreadyExists("a sync journal in this volume".into()));
        }
        let obj = pool.create_object(vol, b"sync journal")?;
        pool.kv_put(vol, KEY_OBJECT, &obj.0.to_le_bytes())?;
        pool.kv_put(vol, KEY_START, &0u64.to_le_bytes())?;
        pool.sync_object(vol, obj)?;
        Ok(Journal { vol, obj, start: 0, end: 0, last_seq: 0, last_txg: 0 })
    }

    /// The journal of volume `vol`, read through to its last whole frame.
    pub fn open(pool: &Pool, vol: VolumeId) -> Result<Journal> {
        let obj = u64_value(pool.kv_get(vol, KEY_OBJECT)?, "journal.object")?
            .ok_or_else(|| Error::NotFound("no sync journal in this volume".into()))?;
        let start = u64_value(pool.kv_get(vol, KEY_START)?, "journal.start")?.unwrap_or(0);
        let mut j = Journal { vol, obj: ObjectId(obj), start, end: start, last_seq: 0, last_txg: 0 };
        j.scan(pool, &mut |_, _| Ok(true))?;
        Ok(j)
    }

    /// Visit every whole frame from the start, with its offset, while `f` says go on;
    /// after a complete walk, `end`, `last_seq` and `last_txg` are at the last frame.
    fn scan(&mut self, pool: &Pool, f: &mut dyn FnMut(&JournalFrame, u64) -> Result<bool>) -> Result<()> {
        let mut at = self.start;
        let mut last_seq = None;
        let mut last_txg = 0;
        loop {
            let h = pool.read(self.vol, self.obj, at, HEADER)?;
            if h.len() < HEADER || h[0..4] != MAGIC {
                break;
            }
            let mut len4 = [0u8; 4];
            len4.copy_from_slice(&h[4..8]);
            let len = u32::from_le_bytes(len4);
            let (seq, txg) = (u64_at(&h, 8), u64_at(&h, 16));
            // Frames follow each other by sequence number: anything else is damage, and
            // the journal ends before it.
            if len > PAYLOAD_MAX || last_seq.is_some_and(|s: u64| seq != s + 1) || txg < last_txg {
                break;
            }
            let payload = pool.read(self.vol, self.obj, at + HEADER as u64, len as usize)?;
            if payload.len() != len as usize {
                break;
            }
            let mut hasher = blake3::Hasher::new();
            hasher.update(&h[0..24]);
            hasher.update(&payload);
            if hasher.finalize().as_bytes()[..] != h[24..56] {
                break;
            }
            let frame = JournalFrame { seq, txg, records: payload };
            if !f(&frame, at)? {
                return Ok(());
            }
            at += (HEADER + frame.records.len()) as u64;
            last_seq = Some(seq);
            last_txg = txg;
        }
        self.end = at;
        self.last_seq = last_seq.unwrap_or(self.last_seq);
        self.last_txg = last_txg.max(self.last_txg);
        Ok(())
    }

    /// The journal's sequence number of its last frame (0: none since it was created).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Append `frames` (the tap's, in order) and make them durable.
    pub fn append(&mut self, pool: &Pool, frames: &[TapFrame]) -> Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(frames.iter().map(|f| HEADER + f.records.len()).sum());
        let mut seq = self.last_seq;
        let mut txg = self.last_txg;
        for f in frames {
            if f.txg < txg {
                return Err(Error::InvalidArgument(format!(
                    "sync frame of txg {} after one of txg {txg}: frames must come in order",
                    f.txg
                )));
            }
            if f.records.len() as u64 > u64::from(PAYLOAD_MAX) {
                return Err(Error::InvalidArgument(format!("sync frame of {} bytes", f.records.len())));
            }
            seq += 1;
            txg = f.txg;
            encode_frame(seq, f.txg, &f.records, &mut buf);
        }
        pool.write(self.vol, self.obj, self.end, &buf)?;
        pool.sync_object(self.vol, self.obj)?;
        self.end += buf.len() as u64;
        self.last_seq = seq;
        self.last_txg = txg;
        Ok(())
    }

    /// Note, durably, that snapshot `name` of the mirror's volumes is the source's state
    /// at txg `txg`. Before that snapshot's transfer starts.
    pub fn note_snapshot(&self, pool: &Pool, name: &str, txg: u64) -> Result<()> {
        let key = [KEY_SNAP, name.as_bytes()].concat();
        pool.kv_put(self.vol, &key, &txg.to_le_bytes())?;
        pool.sync_object(self.vol, self.obj)
    }

    /// The source txg noted for snapshot `name`.
    pub fn snapshot_txg(&self, pool: &Pool, name: &str) -> Result<Option<u64>> {
        let key = [KEY_SNAP, name.as_bytes()].concat();
        u64_value(pool.kv_get(self.vol, &key)?, "journal.snap")
    }

    /// Drop the frames a transferred snapshot of txg `txg` contains (a prefix: frames come
    /// in txg order). Not synced: a crash may bring them back, and a replay skips them.
    pub fn retire(&mut self, pool: &Pool, txg: u64) -> Result<()> {
        let mut cut = self.end;
        self.clone().scan(pool, &mut |f, at| {
            if f.txg > txg {
                cut = at;
                return Ok(false);
            }
            Ok(true)
        })?;
        if cut <= self.start {
            return Ok(());
        }
        // The start key first: a crash may keep it and lose the punch, never the reverse
        // (a start inside a punched range would end the journal at once). Whole units
        // before the cut go back to the pool.
        pool.kv_put(self.vol, KEY_START, &cut.to_le_bytes())?;
        let (from, to) = (self.start / UNIT_SIZE * UNIT_SIZE, cut / UNIT_SIZE * UNIT_SIZE);
        self.start = cut;
        if to > from {
            pool.punch_hole(self.vol, self.obj, from, to - from)?;
        }
        Ok(())
    }

    /// Record that frames after the last one appended may not follow on from it (see the
    /// module comment); durable on return. A gap already marked stays where it is.
    pub fn mark_gap(&self, pool: &Pool) -> Result<()> {
        if self.gap(pool)?.is_some() {
            return Ok(());
        }
        pool.kv_put(self.vol, KEY_GAP, &self.last_seq.to_le_bytes())?;
        pool.sync_object(self.vol, self.obj)
    }

    /// The last frame a replay may apply, if a gap is marked.
    pub fn gap(&self, pool: &Pool) -> Result<Option<u64>> {
        u64_value(pool.kv_get(self.vol, KEY_GAP)?, "journal.gap")
    }

    /// A snapshot taken after the frames resumed has been transferred: the frames that
    /// follow it are complete again. Durable on return.
    pub fn clear_gap(&self, pool: &Pool) -> Result<()> {
        pool.kv_delete(self.vol, KEY_GAP)?;
        pool.sync_object(self.vol, self.obj)
    }

    /// Apply every frame of a txg after `after_txg` to the mirror's volumes (`volume_of`
    /// maps a source volume id to the target's), in order, then make them durable. The
    /// volumes must be at the snapshot of `after_txg`. Stops at a marked gap, and at the
    /// first operation that fails, with an error naming the frame.
    pub fn replay(&self, pool: &Pool, after_txg: u64, volume_of: &dyn Fn(u64) -> Option<VolumeId>) -> Result<Replayed> {
        let mut done = Replayed::default();
        let gap = self.gap(pool)?;
        self.clone().scan(pool, &mut |f, _| {
            if gap.is_some_and(|g| f.seq > g) {
                return Ok(false);
            }
            if f.txg <= after_txg {
                return Ok(true);
            }
            let records = LogRecord::decode_all(&f.records)?;
            let n = apply_frame(pool, &records, volume_of).map_err(|e| in_frame(e, f))?;
            done.frames += 1;
            done.operations += n;
            done.last_seq = f.seq;
            Ok(true)
        })?;
        pool.sync_log()?;
        Ok(done)
    }
}

/// `e`, saying which frame met it.
fn in_frame(e: Error, f: &JournalFrame) -> Error {
    let at = format!("replay of sync frame {} (source txg {})", f.seq, f.txg);
    match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{at}: {m}")),
        Error::NotFound(m) => Error::NotFound(format!("{at}: {m}")),
        Error::AlreadyExists(m) => Error::AlreadyExists(format!("{at}: {m}")),
        Error::ReadOnly(m) => Error::ReadOnly(format!("{at}: {m}")),
        Error::Unsupported(m) => Error::Unsupported(format!("{at}: {m}")),
        Error::Busy(m) => Error::Busy(format!("{at}: {m}")),
        other => other,
    }
}

/// One frame's operations under one guard (a group: all or nothing after a crash).
fn apply_frame(pool: &Pool, records: &[LogRecord], volume_of: &dyn Fn(u64) -> Option<VolumeId>) -> Result<u64> {
    let mut t = pool.guard();
    let mut n = 0;
    let map = |vol: u64| {
        volume_of(vol).ok_or_else(|| {
            Error::invalid(format!("an operation on source volume {vol}, which the mirror does not hold"))
        })
    };
    for r in records {
        match r {
            LogRecord::Write { vol, obj, offset, data } => t.write(map(*vol)?, ObjectId(*obj), *offset, data)?,
            LogRecord::Truncate { vol, obj, size } => t.truncate(map(*vol)?, ObjectId(*obj), *size)?,
            LogRecord::Punch { vol, obj, offset, len } => t.punch_hole(map(*vol)?, ObjectId(*obj), *offset, *len)?,
            LogRecord::SetAttr { vol, obj, attr } => t.set_attr(map(*vol)?, ObjectId(*obj), attr)?,
            LogRecord::CreateObject { vol, obj, attr } => t.create_object_at(map(*vol)?, ObjectId(*obj), attr)?,
            LogRecord::DeleteObject { vol, obj } => t.delete_object(map(*vol)?, ObjectId(*obj))?,
            LogRecord::KvPut { vol, key, value } => {
                t.kv_put(map(*vol)?, key, value)?;
            }
            LogRecord::KvDelete { vol, key } => {
                t.kv_delete(map(*vol)?, key)?;
            }
            LogRecord::WriteRef { .. } => {
                return Err(Corruption::new("sync journal", None, "a by-reference write in a tap frame").into())
            }
            LogRecord::GroupEnd => continue,
        }
        n += 1;
    }
    Ok(n)
}
