//! parity2: double parity over N members (4..=16), the data path of a device set whose
//! layout is `Parity2` (docs/redundancy.md, "parity2").
//!
//! The logical space has two parts:
//! - below `Rows::start`: the pool's fixed regions (labels, uberblock rings, space map,
//!   intent log) and a few data units. Every member holds every byte there, as in a mirror:
//!   they are rewritten in place, which parity could not do without a write hole.
//! - from `start` on: rows. Row r is one unit at member offset `start + r × UNIT` on every
//!   member: `data` = N − 2 data units, then two Reed-Solomon parity units
//!   (reed-solomon-simd), rotated by one member per row so that parity is spread evenly.
//!   Logical unit k of the rows is data unit k % data of row k / data: a run of logical
//!   units is a run of rows on every member (sequential I/O stays sequential).
//!
//! No write hole: the allocator (alloc/rows.rs) never puts a block into a row that holds
//! committed or acknowledged data, so a row's parity is only ever rewritten while the row
//! holds nothing a crash could lose. A write covering a whole row computes its parity from
//! the new data; a write covering part of a row reads the row's other units first (their
//! bytes, whatever they are, are what the parity must cover). Writes to one row are
//! serialized (`lock_rows`).
//!
//! Reads take the data units from their members. A member that is not in use, or whose
//! read fails, is reconstructed from the others (any two missing). A block whose checksum
//! fails (`read_verified`) is reconstructed under each hypothesis of one, then two, bad
//! members until it verifies (RAIDZ's combinatorial reconstruction); the members found bad
//! are rewritten with the reconstructed units (self-healing). A scrub also checks each
//! row's parity against its data: a parity unit that alone disagrees is rewritten.

use super::{keep, lock, Causes, MirrorDevice};
use crate::format::member::MEMBER_AREA_BYTES;
use crate::format::UNIT_SIZE;
use std::collections::BTreeMap;
use std::io;
use std::ops::Range;

const U: usize = UNIT_SIZE as usize;
/// Members of a parity2 set.
pub const PARITY2_MEMBERS: Range<usize> = 4..17;

/// Where a parity2 set's rows are and how wide they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    /// Logical offset of row 0 (a unit multiple).
    pub start: u64,
    /// Data units per row (members − 2).
    pub data: usize,
    pub members: usize,
}

impl Rows {
    /// The rows of a set of `members` devices with `avail` bytes each after the member
    /// area: (rows, logical size). The mirrored part must hold the pool's fixed regions for
    /// the logical size; those grow with the size, so computing them for an upper bound of
    /// it (every member byte as data) leaves enough room.
    pub fn plan(members: usize, avail: u64) -> Option<(Rows, u64)> {
        let data = members.checked_sub(2).filter(|d| *d >= 2)?;
        let upper = avail.checked_mul(data as u64)?;
        let (_, _, start) = crate::format::fixed_regions(upper);
        let rows = avail.checked_sub(start)? / UNIT_SIZE;
        let logical = start + rows * data as u64 * UNIT_SIZE;
        Some((Rows { start, data, members }, logical))
    }

    /// (row, data unit index) of logical offset `off` (at or past `start`).
    fn locate(&self, off: u64) -> (u64, usize) {
        let k = (off - self.start) / UNIT_SIZE;
        (k / self.data as u64, (k % self.data as u64) as usize)
    }

    /// The member holding position `k` of row `r`: 0..data are data units, data and
    /// data + 1 the two parity units.
    fn member_of(&self, r: u64, k: usize) -> usize {
        ((r % self.members as u64) as usize + k) % self.members
    }

    /// Member offset of row `r`.
    fn dev_offset(&self, r: u64) -> u64 {
        MEMBER_AREA_BYTES + self.start + r * UNIT_SIZE
    }

    /// Logical offset of row `r`'s first data unit.
    fn row_offset(&self, r: u64) -> u64 {
        self.start + r * self.data as u64 * UNIT_SIZE
    }
}

/// The units of rows `first..first + count` as read from every member (`None`: not in
/// use, or its read failed), each member's rows one after another.
struct RowSet {
    first: u64,
    count: usize,
    units: Vec<Option<Vec<u8>>>,
    /// The error a member's read met, to return when too few members answered (it may say
    /// more than "suspended": the power went, say).
    error: Option<io::Error>,
}

impl RowSet {
    fn unit(&self, m: usize, i: usize) -> Option<&[u8]> {
        self.units.get(m)?.as_deref()?.get(i * U..(i + 1) * U)
    }
}

std::thread_local! {
    /// Each thread's encoder, reset per row (its work buffers are kept).
    static ENCODER: std::cell::RefCell<Option<reed_solomon_simd::ReedSolomonEncoder>> =
        const { std::cell::RefCell::new(None) };
}

std::thread_local! {
    /// Each thread's decoder, reset per row (its work buffers are kept).
    static DECODER: std::cell::RefCell<Option<reed_solomon_simd::ReedSolomonDecoder>> =
        const { std::cell::RefCell::new(None) };
}

/// The data units of a row of `data` units missing from `originals` (index, unit), restored
/// from them and the parity units in `recovery` (0 or 1, unit).
fn decode(
    data: usize,
    originals: &[(usize, &[u8])],
    recovery: &[(usize, &[u8])],
) -> io::Result<BTreeMap<usize, Vec<u8>>> {
    let err = |e: reed_solomon_simd::Error| io::Error::other(format!("parity decode: {e}"));
    if originals.len() == data {
        return Ok(BTreeMap::new());
    }
    let shard = originals.first().or(recovery.first()).map_or(U, |(_, u)| u.len());
    DECODER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let dec = match slot.as_mut() {
            Some(d) => {
                d.reset(data, 2, shard).map_err(err)?;
                d
            }
            None => slot.insert(reed_solomon_simd::ReedSolomonDecoder::new(data, 2, shard).map_err(err)?),
        };
        for (i, u) in originals {
            dec.add_original_shard(*i, u).map_err(err)?;
        }
        for (i, u) in recovery {
            dec.add_recovery_shard(*i, u).map_err(err)?;
        }
        let out = dec.decode().map_err(err)?;
        Ok(out.restored_original_iter().map(|(i, u)| (i, u.to_vec())).collect())
    })
}

/// What one member's direct read gave: (index of the run's first unit in its plan, the
/// run's bytes), or the error that stopped it (None: the member is not in use).
type MemberRuns = Result<Vec<(usize, Vec<u8>)>, Option<io::Error>>;

/// The two parity units of a row's data units (4 KiB each).
fn encode(data: &[&[u8]]) -> io::Result<Vec<Vec<u8>>> {
    let err = |e: reed_solomon_simd::Error| io::Error::other(format!("parity encode: {e}"));
    let shard = data.first().map_or(U, |d| d.len());
    ENCODER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let enc = match slot.as_mut() {
            Some(e) => {
                e.reset(data.len(), 2, shard).map_err(err)?;
                e
            }
            None => slot.insert(reed_solomon_simd::ReedSolomonEncoder::new(data.len(), 2, shard).map_err(err)?),
        };
        for d in data {
            enc.add_original_shard(d).map_err(err)?;
        }
        let out = enc.encode().map_err(err)?;
        Ok(out.recovery_iter().map(<[u8]>::to_vec).collect())
    })
}

impl MirrorDevice {
    /// Where logical byte `offset` is kept: (member, byte offset on the member) of every
    /// copy — each member of a mirror (and of a parity2 set's mirrored part), the one member
    /// holding it in a parity2 row. For tests and tools that must find a block on disk.
    pub fn placement(&self, offset: u64) -> Vec<(usize, u64)> {
        match self.rows.filter(|r| offset >= r.start) {
            None => (0..self.members.len()).map(|m| (m, offset + MEMBER_AREA_BYTES)).collect(),
            Some(rows) => {
                let (r, k) = rows.locate(offset);
                vec![(rows.member_of(r, k), rows.dev_offset(r) + offset % UNIT_SIZE)]
            }
        }
    }

    /// The two parity units of the row holding logical `offset`: (member, byte offset on
    /// it). Empty outside a parity2 set's rows.
    pub fn parity_placement(&self, offset: u64) -> Vec<(usize, u64)> {
        let Some(rows) = self.rows.filter(|r| offset >= r.start) else { return Vec::new() };
        let (r, _) = rows.locate(offset);
        (0..2).map(|p| (rows.member_of(r, rows.data + p), rows.dev_offset(r))).collect()
    }

    /// Hold rows `first..=last` against other writers (and rebuild copies, heals).
    fn lock_rows(&self, first: u64, last: u64) -> RowLock<'_> {
        let mut busy = lock(&self.row_locks);
        while busy.iter().any(|&(a, b)| a <= last && first <= b) {
            busy = self.row_cv.wait(busy).unwrap_or_else(crate::sync::PoisonError::into_inner);
        }
        busy.push((first, last));
        RowLock { dev: self, range: (first, last) }
    }

    /// Read rows `first..first + count` of every member in use except `skip`, one read per
    /// member, the members at the same time.
    fn read_rows(&self, rows: &Rows, first: u64, count: usize, skip: &[usize]) -> RowSet {
        let targets: Vec<(usize, std::sync::Arc<dyn crate::device::BlockDevice>)> = (0..rows.members)
            .filter(|m| !skip.contains(m))
            .filter_map(|m| self.members.get(m).and_then(|x| x.in_use()).map(|d| (m, d)))
            .collect();
        let read = |d: &dyn crate::device::BlockDevice| {
            let mut b = vec![0u8; count * U];
            d.read_at(&mut b, rows.dev_offset(first)).map(|()| b)
        };
        let got =
            self.fan.map(&targets, |(_, d)| read(d.as_ref()), || Err(io::Error::other("a member's read panicked")));
        let results = targets.iter().map(|(m, _)| *m).zip(got);
        let mut units = vec![None; rows.members];
        let mut error = None;
        for (m, r) in results {
            match r {
                Ok(b) => units[m] = Some(b),
                Err(e) => {
                    let later = self.read_error(m, "read", &e);
                    error = keep(keep(error, Some(e)), later);
                }
            }
        }
        RowSet { first, count, units, error }
    }

    /// Fill in the units of `erased` members and of members missing from `set`, row by row,
    /// from the others. False when more than two are unknown.
    fn reconstruct(&self, rows: &Rows, set: &mut RowSet, erased: &[usize]) -> io::Result<bool> {
        let unknown: Vec<usize> =
            (0..rows.members).filter(|m| erased.contains(m) || set.units.get(*m).is_none_or(|u| u.is_none())).collect();
        if unknown.len() > 2 {
            return Ok(false);
        }
        if unknown.is_empty() {
            return Ok(true);
        }
        let mut filled: Vec<Vec<u8>> = unknown.iter().map(|_| vec![0u8; set.count * U]).collect();
        // Rows one rotation apart have the same members at the same positions: their units
        // are decoded together, position by position (a decode costs about the same for one
        // unit as for hundreds: most of it is fixed).
        let n = rows.members;
        for class in 0..n.min(set.count) {
            let idx: Vec<usize> = (class..set.count).step_by(n).collect();
            let rot = ((set.first + class as u64) % n as u64) as usize;
            let pos = |m: usize| (m + n - rot) % n;
            let shard = |k: usize| -> Option<Vec<u8>> {
                let m = (rot + k) % n;
                if unknown.contains(&m) {
                    return None;
                }
                let mut v = Vec::with_capacity(idx.len() * U);
                for &i in &idx {
                    v.extend_from_slice(set.unit(m, i)?);
                }
                Some(v)
            };
            let mut data: Vec<Option<Vec<u8>>> = (0..rows.data).map(shard).collect();
            if data.iter().any(Option::is_none) {
                let recovery: Vec<(usize, Vec<u8>)> =
                    (0..2).filter_map(|p| shard(rows.data + p).map(|s| (p, s))).collect();
                let originals: Vec<(usize, &[u8])> =
                    data.iter().enumerate().filter_map(|(k, d)| d.as_deref().map(|d| (k, d))).collect();
                let recovery: Vec<(usize, &[u8])> = recovery.iter().map(|(p, s)| (*p, s.as_slice())).collect();
                let restored = decode(rows.data, &originals, &recovery)?;
                for (k, u) in restored {
                    if let Some(slot) = data.get_mut(k) {
                        *slot = Some(u);
                    }
                }
            }
            let data: Vec<&[u8]> = data
                .iter()
                .map(|d| d.as_deref().ok_or_else(|| io::Error::other("parity decode left a data unit unknown")))
                .collect::<io::Result<_>>()?;
            let parity = if unknown.iter().any(|&m| pos(m) >= rows.data) { encode(&data)? } else { Vec::new() };
            for (slot, &m) in unknown.iter().enumerate() {
                let k = pos(m);
                let src: &[u8] = if k < rows.data { data[k] } else { &parity[k - rows.data] };
                for (j, &i) in idx.iter().enumerate() {
                    filled[slot][i * U..(i + 1) * U].copy_from_slice(&src[j * U..(j + 1) * U]);
                }
            }
        }
        for (slot, m) in unknown.iter().enumerate() {
            set.units[*m] = Some(std::mem::take(&mut filled[slot]));
        }
        Ok(true)
    }

    /// Copy the logical bytes `off..off + buf.len()` (in the rows) out of `set`.
    fn gather(rows: &Rows, set: &RowSet, buf: &mut [u8], off: u64) {
        let mut at = 0usize;
        while at < buf.len() {
            let (r, k) = rows.locate(off + at as u64);
            let m = rows.member_of(r, k);
            let i = (r - set.first) as usize;
            let n = U.min(buf.len() - at);
            if let Some(u) = set.unit(m, i) {
                buf[at..at + n].copy_from_slice(&u[..n]);
            }
            at += n;
        }
    }

    /// The rows `off..off + len` touches: (first, count).
    fn span(rows: &Rows, off: u64, len: usize) -> (u64, usize) {
        let (first, _) = rows.locate(off);
        let (last, _) = rows.locate(off + len as u64 - 1);
        (first, (last - first + 1) as usize)
    }

    /// Read logical bytes in the rows: each data unit from its member; with a member out
    /// of use or failing, the rows from all members, reconstructed.
    pub(super) fn parity_read(&self, rows: &Rows, buf: &mut [u8], off: u64) -> io::Result<()> {
        if let Some((start, skip, mut whole)) = widen(off, buf.len()) {
            self.parity_read(rows, &mut whole, start)?;
            buf.copy_from_slice(&whole[skip..skip + buf.len()]);
            return Ok(());
        }
        // Per member: the data units it holds, in row order (contiguous rows: one read).
        let mut plan: BTreeMap<usize, Vec<(u64, usize)>> = BTreeMap::new();
        let mut at = 0usize;
        while at < buf.len() {
            let (r, k) = rows.locate(off + at as u64);
            plan.entry(rows.member_of(r, k)).or_default().push((r, at));
            at += U;
        }
        // Each member's runs of rows, read at the same time when several members hold units.
        let read_member = |m: usize, units: &[(u64, usize)]| -> MemberRuns {
            let dev = self.members.get(m).and_then(|x| x.in_use()).ok_or(None)?;
            let mut got = Vec::with_capacity(units.len());
            let mut i = 0;
            while i < units.len() {
                let mut j = i + 1;
                while j < units.len() && units[j].0 == units[j - 1].0 + 1 {
                    j += 1;
                }
                let mut tmp = vec![0u8; (j - i) * U];
                if let Err(e) = dev.read_at(&mut tmp, rows.dev_offset(units[i].0)) {
                    let later = self.read_error(m, "read", &e);
                    return Err(keep(Some(e), later));
                }
                got.push((i, tmp));
                i = j;
            }
            Ok(got)
        };
        let items: Vec<_> = plan.iter().map(|(&m, units)| (m, units)).collect();
        let got = self.fan.map(
            &items,
            |(m, units)| read_member(*m, units),
            || Err(Some(io::Error::other("a member's read panicked"))),
        );
        let results: Vec<(usize, MemberRuns)> = items.iter().map(|(m, _)| *m).zip(got).collect();
        let mut direct_ok = true;
        let mut failure: Option<io::Error> = None;
        for (m, r) in results {
            match r {
                Ok(runs) => {
                    let units = &plan[&m];
                    for (i, tmp) in runs {
                        for (n, chunk) in tmp.chunks(U).enumerate() {
                            let pos = units[i + n].1;
                            buf[pos..pos + U].copy_from_slice(chunk);
                        }
                    }
                }
                Err(e) => {
                    direct_ok = false;
                    failure = keep(failure, e);
                }
            }
        }
        if direct_ok {
            return Ok(());
        }
        let (first, count) = Self::span(rows, off, buf.len());
        let mut set = self.read_rows(rows, first, count, &[]);
        if !self.reconstruct(rows, &mut set, &[])? {
            return Err(keep(failure, set.error.take()).unwrap_or_else(|| self.suspended("read")));
        }
        Self::gather(rows, &set, buf, off);
        Ok(())
    }

    /// Write logical bytes in the rows: whole rows from the new data alone, partial rows
    /// after reading their other units; each member gets its units of the rows in one write.
    pub(super) fn parity_write(&self, rows: &Rows, buf: &[u8], off: u64) -> io::Result<()> {
        check_aligned(off, buf.len())?;
        let (first, count) = Self::span(rows, off, buf.len());
        let _held = self.lock_rows(first, first + count as u64 - 1);
        let end = off + buf.len() as u64;
        let partial = rows.row_offset(first) < off || rows.row_offset(first + count as u64) > end;
        // The rows as they are (only when a row is written in part).
        let mut old = if partial {
            let mut s = self.read_rows(rows, first, count, &[]);
            if !self.reconstruct(rows, &mut s, &[])? {
                return Err(s.error.take().unwrap_or_else(|| self.suspended("write")));
            }
            Some(s)
        } else {
            None
        };
        // Each member's new units for the rows, and which rows changed for it.
        let mut out: Vec<Vec<u8>> = (0..rows.members).map(|_| vec![0u8; count * U]).collect();
        let mut changed: Vec<Option<(usize, usize)>> = vec![None; rows.members];
        let mut note = |m: usize, i: usize| {
            changed[m] = Some(changed[m].map_or((i, i), |(a, b)| (a.min(i), b.max(i))));
        };
        // The rows' data units by position (shard k: unit k of every row), encoded at once.
        // A unit this write does not cover: the bytes this set last wrote there if it
        // remembers them (open_rows.rs: never bytes that went bad on a member since),
        // else as read.
        let mut shards: Vec<Vec<u8>> = (0..rows.data).map(|_| vec![0u8; count * U]).collect();
        let mut open_rows = lock(&self.open_rows);
        for i in 0..count {
            let r = first + i as u64;
            let row_off = rows.row_offset(r);
            for (k, shard) in shards.iter_mut().enumerate() {
                let m = rows.member_of(r, k);
                let u_off = row_off + (k * U) as u64;
                let dst = &mut shard[i * U..(i + 1) * U];
                if u_off >= off && u_off < end {
                    let s = (u_off - off) as usize;
                    dst.copy_from_slice(&buf[s..s + U]);
                    note(m, i);
                } else if let Some(u) = open_rows.unit(r, k).or_else(|| old.as_ref().and_then(|o| o.unit(m, i))) {
                    dst.copy_from_slice(u);
                }
            }
            // A row written in part may be written in part again (the open row of a txg):
            // remember what its parity covers now. One written whole is done.
            let whole = row_off >= off && rows.row_offset(r + 1) <= end;
            if whole {
                open_rows.forget(r);
            } else {
                let units = shards.iter().map(|sh| Some(sh[i * U..(i + 1) * U].to_vec().into_boxed_slice())).collect();
                open_rows.remember(r, units);
            }
        }
        drop(open_rows);
        let parity = encode(&shards.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
        for i in 0..count {
            let r = first + i as u64;
            for k in 0..rows.members {
                let m = rows.member_of(r, k);
                let src = if k < rows.data { &shards[k] } else { &parity[k - rows.data] };
                out[m][i * U..(i + 1) * U].copy_from_slice(&src[i * U..(i + 1) * U]);
                if k >= rows.data {
                    note(m, i);
                }
            }
        }
        // Members whose units were not read (being rebuilt, or the read failed) get every
        // unit of the rows: what they hold there may be anything.
        if let Some(o) = old.as_mut() {
            for (m, c) in changed.iter_mut().enumerate() {
                let read = self.members.get(m).is_some_and(|x| x.in_use().is_some()) && o.units[m].is_some();
                if !read {
                    *c = Some((0, count - 1));
                }
            }
        }
        let mut causes = Causes::default();
        let targets: Vec<(usize, std::sync::Arc<dyn crate::device::BlockDevice>, (usize, usize))> = (0..rows.members)
            .filter_map(|m| {
                // Looked up first: a member offline records the write (missed.rs).
                let d = self.written_or_missed(m, Some((off, end)), &mut causes)?;
                let (a, b) = changed[m]?;
                Some((m, d, (a, b)))
            })
            .collect();
        let write = |(m, d, (a, b)): &(usize, std::sync::Arc<dyn crate::device::BlockDevice>, (usize, usize))| {
            d.write_at(&out[*m][a * U..(b + 1) * U], rows.dev_offset(first + *a as u64))
        };
        let got = self.fan.map(&targets, write, || Err(io::Error::other("a member's write panicked")));
        // Before the errors are handled, as `on_all` does (unflushed.rs).
        causes.add_recording(self.note_written(off, end));
        let results = targets.iter().map(|(m, _, _)| *m).zip(got);
        // A read of the rows may have faulted members already (and met the real cause).
        causes.add(old.as_mut().and_then(|o| o.error.take()));
        for (m, r) in results {
            if let Err(e) = r {
                let later = self.write_error(m, "write", &e);
                causes.add(Some(e));
                causes.add_recording(later);
            }
        }
        if self.usable() {
            return Ok(());
        }
        Err(causes.take().unwrap_or_else(|| self.suspended("write")))
    }

    /// `read_verified` and `scrub_read` in the rows: the data as read if it verifies;
    /// otherwise reconstructed assuming one, then two members bad, until it verifies; the
    /// bad members' units rewritten. With `scrub`, also every row's parity checked.
    pub(super) fn parity_verified(
        &self,
        rows: &Rows,
        buf: &mut [u8],
        off: u64,
        heal: Range<usize>,
        verify: &dyn Fn(&[u8]) -> bool,
        scrub: bool,
    ) -> io::Result<bool> {
        if let Some((start, skip, mut whole)) = widen(off, buf.len()) {
            let len = buf.len();
            let inner = |w: &[u8]| w.get(skip..skip + len).is_some_and(verify);
            let heal = heal.start + skip..heal.end + skip;
            let ok = self.parity_verified(rows, &mut whole, start, heal, &inner, scrub)?;
            buf.copy_from_slice(&whole[skip..skip + len]);
            return Ok(ok);
        }
        if !scrub && self.parity_read(rows, buf, off).is_ok() && verify(buf) {
            return Ok(true);
        }
        let (first, count) = Self::span(rows, off, buf.len());
        let _held = self.lock_rows(first, first + count as u64 - 1);
        let set = self.read_rows(rows, first, count, &[]);
        let missing: Vec<usize> = (0..rows.members).filter(|&m| set.units[m].is_none()).collect();
        // The suspects: first the members holding data units of the request, then every
        // other member of the rows — a reconstruction reads the rows' parity and other
        // blocks' units too, and one of those may be the bad one (a rotted parity unit with
        // a member missing: found by the simulator, seed 85590291).
        let mut suspects: Vec<usize> = Vec::new();
        let mut at = 0usize;
        while at < buf.len() {
            let (r, k) = rows.locate(off + at as u64);
            let m = rows.member_of(r, k);
            if !suspects.contains(&m) && !missing.contains(&m) {
                suspects.push(m);
            }
            at += U;
        }
        for m in 0..rows.members {
            if !suspects.contains(&m) && !missing.contains(&m) {
                suspects.push(m);
            }
        }
        let mut hypotheses: Vec<Vec<usize>> = vec![Vec::new()];
        hypotheses.extend(suspects.iter().map(|&m| vec![m]));
        for (i, &a) in suspects.iter().enumerate() {
            hypotheses.extend(suspects[i + 1..].iter().map(|&b| vec![a, b]));
        }
        let mut found = None;
        for h in hypotheses {
            if h.len() + missing.len() > 2 {
                continue;
            }
            let mut trial = RowSet { first, count, units: set.units.clone(), error: None };
            if !self.reconstruct(rows, &mut trial, &h)? {
                continue;
            }
            Self::gather(rows, &trial, buf, off);
            if verify(buf) {
                found = Some((h, trial));
                break;
            }
        }
        let Some((bad, good)) = found else {
            // Nothing verifies: the caller reports the damage (the bytes as the members hold them).
            if missing.len() > 2 {
                return Err(set.error.unwrap_or_else(|| self.suspended("read")));
            }
            self.parity_read(rows, buf, off)?;
            return Ok(false);
        };
        // Rewrite what the bad members hold of the block, and the units of members whose read
        // failed (devices remap a sector on write).
        let heal_abs = (off + heal.start as u64, off + heal.end as u64);
        for &m in bad.iter().chain(missing.iter()) {
            let in_heal = |i: usize| {
                let r = first + i as u64;
                (0..rows.data).any(|k| {
                    let u_off = rows.row_offset(r) + (k * U) as u64;
                    rows.member_of(r, k) == m && u_off < heal_abs.1 && u_off + UNIT_SIZE > heal_abs.0
                })
            };
            let is_bad = bad.contains(&m);
            for i in (0..count).filter(|&i| in_heal(i) || !is_bad) {
                let (Some(unit), Some(before)) = (good.unit(m, i), set.unit(m, i).or(Some(&[][..]))) else { continue };
                if unit != before {
                    if is_bad {
                        self.count_checksum_error(m);
                    }
                    self.rewrite_unit(rows, m, first + i as u64, unit);
                }
            }
        }
        if scrub {
            self.check_parity(rows, &good, &set);
        }
        Ok(true)
    }

    /// A scrub's parity check: each row's parity recomputed from its data (as verified or
    /// reconstructed). A parity unit that alone disagrees is rewritten. Both disagreeing
    /// means one unit of the row's data differs from what the parity covers (another
    /// block's, or free space): with two parities a single bad unit can be located — the
    /// one whose reconstruction from the others makes both parities agree — and rewritten.
    /// Two bad units in one row cannot be told apart here and are left to the blocks' own
    /// verification.
    fn check_parity(&self, rows: &Rows, good: &RowSet, read: &RowSet) {
        // Every row's parity computed at once (shard k: data unit k of every row).
        let mut shards: Vec<Vec<u8>> = (0..rows.data).map(|_| vec![0u8; good.count * U]).collect();
        let mut complete = vec![true; good.count];
        for (i, whole) in complete.iter_mut().enumerate() {
            let r = good.first + i as u64;
            for (k, shard) in shards.iter_mut().enumerate() {
                match good.unit(rows.member_of(r, k), i) {
                    Some(u) => shard[i * U..(i + 1) * U].copy_from_slice(u),
                    None => *whole = false,
                }
            }
        }
        let Ok(all_parity) = encode(&shards.iter().map(Vec::as_slice).collect::<Vec<_>>()) else { return };
        for i in (0..good.count).filter(|&i| complete[i]) {
            let r = good.first + i as u64;
            let data: Vec<&[u8]> = shards.iter().map(|s| &s[i * U..(i + 1) * U]).collect();
            let parity: Vec<&[u8]> = all_parity.iter().map(|p| &p[i * U..(i + 1) * U]).collect();
            let stored: Vec<Option<&[u8]>> = (0..2).map(|p| read.unit(rows.member_of(r, rows.data + p), i)).collect();
            let wrong: Vec<usize> = (0..2).filter(|&p| stored[p].is_some_and(|u| u != parity[p])).collect();
            match wrong[..] {
                [p] => {
                    let m = rows.member_of(r, rows.data + p);
                    self.count_checksum_error(m);
                    self.rewrite_unit(rows, m, r, parity[p]);
                }
                [_, _] => {
                    let (Some(p0), Some(q0)) = (stored[0], stored[1]) else { continue };
                    if let Some((k, unit)) = locate_single_error(&data, p0, q0) {
                        let m = rows.member_of(r, k);
                        self.count_checksum_error(m);
                        self.rewrite_unit(rows, m, r, &unit);
                    }
                }
                _ => {}
            }
        }
    }

    /// Write one unit of row `r` to member `m` (a repair; the caller holds the row).
    fn rewrite_unit(&self, rows: &Rows, m: usize, r: u64, unit: &[u8]) {
        if !self.writable {
            return;
        }
        let Some(member) = self.members.get(m) else { return };
        let Some(dev) = member.written() else { return };
        match dev.write_at(unit, rows.dev_offset(r)) {
            Ok(()) => {
                member.repaired_bytes.fetch_add(unit.len() as u64, crate::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => {
                self.write_error(m, "repair write", &e);
            }
        }
    }

    /// Rebuild member `m`'s units of the rows under logical `off..off + len`: reconstructed
    /// from the others and written to it.
    pub(super) fn parity_rebuild(&self, rows: &Rows, m: usize, off: u64, len: u64) -> io::Result<()> {
        let off = off.max(rows.start);
        if len == 0 || off >= self.logical_size {
            return Ok(());
        }
        let (first, count) = Self::span(rows, off, len as usize);
        let _held = self.lock_rows(first, first + count as u64 - 1);
        let mut set = self.read_rows(rows, first, count, &[m]);
        if !self.reconstruct(rows, &mut set, &[m])? {
            return Err(set.error.take().unwrap_or_else(|| self.suspended("rebuild read")));
        }
        let target = self.members.get(m).and_then(|x| x.written()).ok_or_else(|| self.suspended("rebuild write"))?;
        let units = set.units.get(m).and_then(|u| u.as_deref()).ok_or_else(|| self.suspended("rebuild"))?;
        target.write_at(units, rows.dev_offset(first)).inspect_err(|e| {
            self.write_error(m, "rebuild write", e);
        })
    }
}

/// The one data unit of a row that, reconstructed from the others and the first parity,
/// makes the second parity agree too: (its index, its reconstruction). None when no unit or
/// more than one does.
fn locate_single_error(data: &[&[u8]], p: &[u8], q: &[u8]) -> Option<(usize, Vec<u8>)> {
    let mut found = None;
    for k in 0..data.len() {
        let others: Vec<(usize, &[u8])> =
            data.iter().enumerate().filter(|(j, _)| *j != k).map(|(j, u)| (j, *u)).collect();
        let Ok(mut restored) = decode(data.len(), &others, &[(0, p)]) else { continue };
        let Some(unit) = restored.remove(&k) else { continue };
        let mut row: Vec<&[u8]> = data.to_vec();
        row[k] = &unit;
        if encode(&row).is_ok_and(|par| par[1] == q) {
            if found.is_some() {
                return None;
            }
            found = Some((k, unit));
        }
    }
    found
}

/// A hold on rows, released when dropped.
struct RowLock<'a> {
    dev: &'a MirrorDevice,
    range: (u64, u64),
}

impl Drop for RowLock<'_> {
    fn drop(&mut self) {
        let mut busy = lock(&self.dev.row_locks);
        if let Some(i) = busy.iter().position(|r| *r == self.range) {
            busy.swap_remove(i);
        }
        self.dev.row_cv.notify_all();
    }
}

/// A read of `len` bytes at `off` that is not whole units: the units around it (start,
/// where the request begins in them, a buffer for them). None when it is whole units.
fn widen(off: u64, len: usize) -> Option<(u64, usize, Vec<u8>)> {
    if off.is_multiple_of(UNIT_SIZE) && (len as u64).is_multiple_of(UNIT_SIZE) && len > 0 {
        return None;
    }
    let start = off / UNIT_SIZE * UNIT_SIZE;
    let end = (off + len.max(1) as u64).next_multiple_of(UNIT_SIZE);
    Some((start, (off - start) as usize, vec![0u8; (end - start) as usize]))
}

fn check_aligned(off: u64, len: usize) -> io::Result<()> {
    if !off.is_multiple_of(UNIT_SIZE) || !(len as u64).is_multiple_of(UNIT_SIZE) || len == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("parity2 I/O of {len} bytes at {off}: must be whole 4 KiB units"),
        ));
    }
    Ok(())
}
