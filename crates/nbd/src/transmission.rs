//! The transmission phase: reading requests and carrying them out on the LUN.
//!
//! [`read_header`] and [`payload_len`] cut the stream into requests (the server's reader
//! thread reads a WRITE's whole payload before anything runs, so a client that leaves
//! mid-payload changes nothing); [`execute`] checks a request and runs it, building the
//! whole reply before any of it is sent, so an error found late can still be the reply.
//! Replies: simple replies unless structured replies were negotiated, in which case READ
//! answers with OFFSET_DATA / OFFSET_HOLE chunks following the LUN's allocation map (one
//! chunk with NBD_CMD_FLAG_DF) and errors are error chunks carrying the LUN's message.
//!
//! Statistics: with `Export::stats`, every request [`execute`] runs is counted
//! (strata-stats): READ as read and WRITE as write (with their length when they succeed),
//! FLUSH as sync, TRIM and WRITE_ZEROES as trim, BLOCK_STATUS and CACHE as other; an error
//! reply is an error. Latency is the request's run, not its wait in the queue nor its send.
//!
//! Errors (proto.md "Error values"): unknown command or flag, zero length, a read or trim
//! past the end → NBD_EINVAL; a write or write-zeroes past the end → NBD_ENOSPC; writes
//! to a read-only export → NBD_EPERM; a read over 32 MiB → NBD_EOVERFLOW with DF, else
//! NBD_EINVAL; a WRITE over 32 MiB ends the connection without its payload being read.

use crate::handshake::{Ended, Negotiated};
use crate::proto::*;
use std::io::{Read, Write};
use std::ops::Range;

use strata_lun::{Extent, Lun, LunError, LunErrorKind, SharedBytes};
use strata_stats::OpClass;

/// Most block-status descriptors in one reply (8 bytes each: a 128 KiB reply). The spec
/// lets a server answer less than asked; clients ask again from where the reply ended.
const MAX_DESCRIPTORS: usize = 16 << 10;

/// Read one request header. End of stream before it, or a bad magic, ends the connection.
pub(crate) fn read_header<R: Read>(r: &mut R) -> Result<RequestHeader, Ended> {
    let mut b = [0u8; REQUEST_HEADER_BYTES];
    r.read_exact(&mut b)?;
    decode_request(&b).ok_or_else(|| Ended::Protocol("bad request magic".into()))
}

/// Bytes of payload that follow `h` (a WRITE's data); a WRITE larger than the maximum
/// payload ends the connection (its payload is never read into memory).
pub(crate) fn payload_len(h: &RequestHeader) -> Result<usize, Ended> {
    if h.kind != CMD_WRITE {
        return Ok(0);
    }
    if h.length > MAX_PAYLOAD_BYTES {
        return Err(Ended::Protocol(format!("WRITE of {} bytes (at most {MAX_PAYLOAD_BYTES})", h.length)));
    }
    Ok(h.length as usize)
}

/// Bytes a request holds in memory while in flight (its payload or its reply's data).
pub(crate) fn request_cost(h: &RequestHeader) -> usize {
    match h.kind {
        CMD_READ | CMD_WRITE => (h.length.min(MAX_PAYLOAD_BYTES) as usize).max(1),
        _ => 1,
    }
}

/// A reply: the pieces to send, in order, some of them ranges of `data` (a READ's data
/// as the engine holds it: pieces of cached and dirty records, sent from there).
pub(crate) struct Reply {
    bytes: Vec<Vec<u8>>,
    data: Vec<SharedBytes>,
    layout: Vec<Piece>,
}

enum Piece {
    Bytes(usize),
    Data(Range<usize>),
}

impl Reply {
    fn new() -> Reply {
        Reply { bytes: Vec::new(), data: Vec::new(), layout: Vec::new() }
    }

    fn push(&mut self, b: Vec<u8>) {
        self.layout.push(Piece::Bytes(self.bytes.len()));
        self.bytes.push(b);
    }

    fn push_data(&mut self, r: Range<usize>) {
        self.layout.push(Piece::Data(r));
    }

    /// The slices to send, in order. `Data` ranges come in increasing order (they cut the
    /// data into chunks front to back), so one pass over the data's pieces serves them all.
    pub fn parts(&self) -> Vec<&[u8]> {
        let mut out = Vec::with_capacity(self.layout.len() + self.data.len());
        // The data piece under the cursor, and where it starts in the data.
        let (mut i, mut start) = (0usize, 0usize);
        for p in &self.layout {
            match p {
                Piece::Bytes(b) => out.push(self.bytes[*b].as_slice()),
                Piece::Data(r) => {
                    while i < self.data.len() && start < r.end {
                        let s = self.data[i].as_slice();
                        let end = start + s.len();
                        if end > r.start {
                            out.push(&s[r.start.max(start) - start..r.end.min(end) - start]);
                        }
                        if end > r.end {
                            break; // the next range starts in this piece
                        }
                        i += 1;
                        start = end;
                    }
                }
            }
        }
        out
    }

    /// The error reply to `h`: an error chunk with the message when structured.
    pub fn error(n: &Negotiated, h: &RequestHeader, errno: u32, message: &str) -> Reply {
        let mut r = Reply::new();
        if n.structured {
            r.push(error_chunk(h.cookie, errno, message));
        } else {
            r.push(simple_reply(errno, h.cookie).to_vec());
        }
        r
    }

    fn ok(h: &RequestHeader) -> Reply {
        let mut r = Reply::new();
        r.push(simple_reply(0, h.cookie).to_vec());
        r
    }
}

/// A refusal before the LUN is asked.
struct Refused(u32, String);

fn refuse(errno: u32, message: impl Into<String>) -> Refused {
    Refused(errno, message.into())
}

impl From<LunError> for Refused {
    fn from(e: LunError) -> Refused {
        match e.kind {
            LunErrorKind::Io | LunErrorKind::NoSpace => tracing::warn!("NBD request failed on the LUN: {e}"),
            _ => tracing::debug!("NBD request refused by the LUN: {e}"),
        }
        Refused(e.errno(), e.message)
    }
}

fn allowed_flags(kind: u16, structured: bool) -> Option<u16> {
    Some(match kind {
        CMD_READ if structured => CMD_FLAG_FUA | CMD_FLAG_DF,
        CMD_READ | CMD_WRITE | CMD_FLUSH | CMD_TRIM | CMD_CACHE => CMD_FLAG_FUA,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_BLOCK_STATUS => CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
        _ => return None,
    })
}

/// Check `h`'s range against the export: `errno` if it runs past the end (or is empty).
fn check_range(lun: &dyn Lun, h: &RequestHeader, errno: u32) -> Result<(), Refused> {
    if h.length == 0 {
        return Err(refuse(EINVAL, "zero-length request"));
    }
    strata_lun::check_range(h.offset, u64::from(h.length), lun.size()).map_err(|e| Refused(errno, e.message))
}

/// Carry out one request (not DISC, which the reader handles) and build its reply.
pub(crate) fn execute(n: &Negotiated, h: &RequestHeader, payload: &[u8]) -> Reply {
    let t = std::time::Instant::now();
    let r = run(n, h, payload);
    if let Some(s) = &n.entry.export.stats {
        let class = match h.kind {
            CMD_READ => OpClass::Read,
            CMD_WRITE => OpClass::Write,
            CMD_FLUSH => OpClass::Sync,
            CMD_TRIM | CMD_WRITE_ZEROES => OpClass::Trim,
            _ => OpClass::Other,
        };
        let bytes = if matches!(h.kind, CMD_READ | CMD_WRITE) && r.is_ok() { u64::from(h.length) } else { 0 };
        s.record(class, bytes, t.elapsed(), r.is_ok());
    }
    match r {
        Ok(r) => r,
        Err(Refused(errno, msg)) => Reply::error(n, h, errno, &msg),
    }
}

fn run(n: &Negotiated, h: &RequestHeader, payload: &[u8]) -> Result<Reply, Refused> {
    let lun: &dyn Lun = &*n.entry.export.lun;
    let Some(allowed) = allowed_flags(h.kind, n.structured) else {
        return Err(refuse(EINVAL, format!("unknown command {}", h.kind)));
    };
    if h.flags & !allowed != 0 {
        return Err(refuse(EINVAL, format!("command {} with unknown flags {:#x}", h.kind, h.flags)));
    }
    let fua = h.flags & CMD_FLAG_FUA != 0;
    let writes = matches!(h.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && n.read_only {
        return Err(refuse(EPERM, "the export is read-only"));
    }
    match h.kind {
        CMD_READ => read(n, lun, h),
        CMD_WRITE => {
            check_range(lun, h, ENOSPC)?;
            lun.write(h.offset, payload, fua)?;
            Ok(Reply::ok(h))
        }
        CMD_FLUSH => {
            lun.flush()?;
            Ok(Reply::ok(h))
        }
        CMD_TRIM => {
            check_range(lun, h, EINVAL)?;
            lun.trim(h.offset, u64::from(h.length), fua)?;
            Ok(Reply::ok(h))
        }
        CMD_WRITE_ZEROES => {
            check_range(lun, h, ENOSPC)?;
            let may_trim = h.flags & CMD_FLAG_NO_HOLE == 0;
            // Zeroing by deallocation is fast; zeroing that must keep the space writes
            // zero data, no faster than a WRITE.
            if h.flags & CMD_FLAG_FAST_ZERO != 0 && !may_trim {
                return Err(refuse(ENOTSUP, "zeroing with NO_HOLE writes zeros: not fast"));
            }
            lun.write_zeroes(h.offset, u64::from(h.length), may_trim, fua)?;
            Ok(Reply::ok(h))
        }
        CMD_CACHE => {
            // Nothing to prefetch into: reads go to the engine's own caches.
            check_range(lun, h, EINVAL)?;
            Ok(Reply::ok(h))
        }
        CMD_BLOCK_STATUS => block_status(n, lun, h),
        _ => Err(refuse(EINVAL, format!("unknown command {}", h.kind))),
    }
}

/// The allocation map of `offset..offset+len`, merged into alternating runs and clipped
/// to the range; at most `max` runs. At least one run unless the LUN answers nothing.
fn allocation(lun: &dyn Lun, offset: u64, len: u64, max: usize) -> Result<Vec<Extent>, LunError> {
    let end = offset + len;
    let mut runs: Vec<Extent> = Vec::new();
    let mut at = offset;
    while at < end {
        let got = lun.extents(at, end - at)?;
        let before = at;
        for e in got {
            let l = e.len.min(end - at);
            if l == 0 {
                continue;
            }
            let full = runs.len() == max;
            match runs.last_mut() {
                Some(last) if last.hole == e.hole => last.len += l,
                _ if full => return Ok(runs),
                _ => runs.push(Extent { len: l, hole: e.hole }),
            }
            at += l;
            if at == end {
                break;
            }
        }
        if at == before {
            break; // the LUN answered nothing: report what we have
        }
    }
    Ok(runs)
}

fn read(n: &Negotiated, lun: &dyn Lun, h: &RequestHeader) -> Result<Reply, Refused> {
    let df = h.flags & CMD_FLAG_DF != 0;
    if h.length > MAX_PAYLOAD_BYTES {
        let errno = if df { EOVERFLOW } else { EINVAL };
        return Err(refuse(errno, format!("READ of {} bytes (at most {MAX_PAYLOAD_BYTES})", h.length)));
    }
    check_range(lun, h, EINVAL)?;
    let len = h.length as usize;
    let mut r = Reply::new();
    r.data = lun.read_shared(h.offset, len)?;
    if r.data.iter().map(SharedBytes::len).sum::<usize>() != len {
        return Err(refuse(EIO, "the LUN returned a short read"));
    }
    if !n.structured {
        r.push(simple_reply(0, h.cookie).to_vec());
        r.push_data(0..len);
        return Ok(r);
    }
    // The map only shapes the reply; without one, the data goes as one chunk. A hole
    // reads as zeros, so data with no zero sector has none: its map is not looked up.
    let runs = if let Some(runs) = known_runs(&r.data) {
        runs
    } else if may_hold_holes(&r.data, h.offset) {
        allocation(lun, h.offset, len as u64, usize::MAX).unwrap_or_default()
    } else {
        vec![Extent { len: len as u64, hole: false }]
    };
    let covered: u64 = runs.iter().map(|e| e.len).sum();
    let runs = if covered != len as u64 {
        vec![Extent { len: len as u64, hole: false }]
    } else if df {
        vec![Extent { len: len as u64, hole: runs.iter().all(|e| e.hole) }]
    } else {
        runs
    };
    let mut at = 0usize;
    let last = runs.len() - 1;
    for (i, e) in runs.iter().enumerate() {
        let l = e.len as usize;
        let flags = if i == last { REPLY_FLAG_DONE } else { 0 };
        let offset = h.offset + at as u64;
        if e.hole {
            let mut c = chunk_header(flags, REPLY_TYPE_OFFSET_HOLE, h.cookie, 12).to_vec();
            c.extend_from_slice(&offset.to_be_bytes());
            c.extend_from_slice(&(l as u32).to_be_bytes());
            r.push(c);
        } else {
            let mut c = chunk_header(flags, REPLY_TYPE_OFFSET_DATA, h.cookie, 8 + l as u32).to_vec();
            c.extend_from_slice(&offset.to_be_bytes());
            r.push(c);
            r.push_data(at..at + l);
        }
        at += l;
    }
    Ok(r)
}

/// The allocation map of `data` when the LUN said what every piece is (a hole or a
/// record's bytes, as the engine's reads do): no map lookup, no look at the bytes.
fn known_runs(data: &[SharedBytes]) -> Option<Vec<Extent>> {
    let mut runs: Vec<Extent> = Vec::new();
    for piece in data {
        let hole = match (piece.is_hole(), piece.is_record()) {
            (true, _) => true,
            (false, true) => false,
            (false, false) => return None,
        };
        match runs.last_mut() {
            Some(e) if e.hole == hole => e.len += piece.len() as u64,
            _ => runs.push(Extent { len: piece.len() as u64, hole }),
        }
    }
    (!runs.is_empty()).then_some(runs)
}

/// Whether `data` (pieces), read at `offset`, may cover a hole: a 512-byte sector of it
/// is all zeros, or a piece does not start and end on sector boundaries (holes are whole
/// blocks, and blocks are sectors or multiples of them).
fn may_hold_holes(data: &[SharedBytes], offset: u64) -> bool {
    const SECTOR: usize = 512;
    let mut at = offset;
    for piece in data {
        let d = piece.as_slice();
        if !at.is_multiple_of(SECTOR as u64) || !d.len().is_multiple_of(SECTOR) {
            return true;
        }
        if d.chunks_exact(SECTOR).any(|s| s.iter().all(|&b| b == 0)) {
            return true;
        }
        at += d.len() as u64;
    }
    false
}

fn block_status(n: &Negotiated, lun: &dyn Lun, h: &RequestHeader) -> Result<Reply, Refused> {
    if !n.structured || !n.base_allocation {
        return Err(refuse(EINVAL, "BLOCK_STATUS without base:allocation negotiated"));
    }
    check_range(lun, h, EINVAL)?;
    let req_one = h.flags & CMD_FLAG_REQ_ONE != 0;
    let runs = allocation(lun, h.offset, u64::from(h.length), if req_one { 1 } else { MAX_DESCRIPTORS })?;
    if runs.is_empty() {
        return Err(refuse(EIO, "the LUN reported no allocation map"));
    }
    let mut body = META_ID_BASE_ALLOCATION.to_be_bytes().to_vec();
    for e in &runs {
        // Clipped to the request, whose length is 32 bits: each run fits.
        body.extend_from_slice(&(e.len as u32).to_be_bytes());
        let state = if e.hole { STATE_HOLE | STATE_ZERO } else { 0 };
        body.extend_from_slice(&state.to_be_bytes());
    }
    let mut r = Reply::new();
    let mut c = chunk_header(REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, h.cookie, body.len() as u32).to_vec();
    c.extend_from_slice(&body);
    r.push(c);
    Ok(r)
}

/// Serve requests one at a time until the client leaves or breaks the protocol: the
/// transmission phase without threads, for the fuzz target (the server's reader and
/// workers do the same with many requests in flight).
pub(crate) fn serve_serially<R: Read, W: Write>(r: &mut R, w: &mut W, n: &Negotiated) -> Result<(), Ended> {
    loop {
        let h = read_header(r)?;
        let len = payload_len(&h)?;
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload)?;
        if h.kind == CMD_DISC {
            return Err(Ended::Client);
        }
        let reply = if n.entry.removed() {
            Reply::error(n, &h, ESHUTDOWN, "the export was removed")
        } else {
            execute(n, &h, &payload)
        };
        for p in reply.parts() {
            w.write_all(p)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::{Export, ExportTable};
    use crate::memlun::MemLun;
    use std::sync::Arc;

    fn negotiated(structured: bool, base_allocation: bool) -> Negotiated {
        negotiated_counted(structured, base_allocation, None)
    }

    fn negotiated_counted(
        structured: bool,
        base_allocation: bool,
        stats: Option<Arc<strata_stats::ProtocolStats>>,
    ) -> Negotiated {
        let t = ExportTable::new();
        let lun = Arc::new(MemLun::new(1 << 20, 512));
        lun.write(0, &[7u8; 4096], false).unwrap();
        lun.write(12288, &[9u8; 4096], false).unwrap();
        t.add("", Export { stats, ..Export::new(lun) }).unwrap();
        let entry = t.lookup("", "127.0.0.1".parse().unwrap()).unwrap();
        Negotiated { entry, structured, base_allocation, read_only: false, flags: 0 }
    }

    #[test]
    fn only_data_with_a_zero_sector_or_odd_edges_may_hold_holes() {
        let one = |d: Vec<u8>| vec![SharedBytes::owned(d)];
        let mut d = vec![1u8; 8192];
        assert!(!may_hold_holes(&one(d.clone()), 4096));
        d[512..1024].fill(0);
        assert!(may_hold_holes(&one(d), 4096));
        // Zeros across a sector boundary are not a zero sector.
        let mut d = vec![1u8; 8192];
        d[256..768].fill(0);
        assert!(!may_hold_holes(&one(d), 0));
        assert!(may_hold_holes(&one(vec![1u8; 1000]), 0));
        assert!(may_hold_holes(&one(vec![1u8; 1024]), 100));
        // Pieces: each is looked at where it lies.
        let two = vec![SharedBytes::owned(vec![1u8; 4096]), SharedBytes::owned(vec![2u8; 512])];
        assert!(!may_hold_holes(&two, 0));
        let two = vec![SharedBytes::owned(vec![1u8; 4096]), SharedBytes::owned(vec![0u8; 512])];
        assert!(may_hold_holes(&two, 0));
        let odd = vec![SharedBytes::owned(vec![1u8; 100]), SharedBytes::owned(vec![2u8; 412])];
        assert!(may_hold_holes(&odd, 0));
    }

    /// A reply's data ranges are cut out of the data's pieces, across piece boundaries.
    #[test]
    fn reply_parts_cut_ranges_across_pieces() {
        let mut r = Reply::new();
        r.data = vec![
            SharedBytes::owned(b"abcd".to_vec()),
            SharedBytes::owned(b"efgh".to_vec()),
            SharedBytes::owned(b"ij".to_vec()),
        ];
        r.push(b"<".to_vec());
        r.push_data(0..3);
        r.push(b"|".to_vec());
        r.push_data(3..3);
        r.push_data(3..9);
        r.push(b"|".to_vec());
        r.push_data(9..10);
        assert_eq!(bytes(&r), b"<abc|defghi|j");
    }

    fn header(kind: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
        RequestHeader { flags, kind, cookie: 0xc0, offset, length }
    }

    fn bytes(r: &Reply) -> Vec<u8> {
        r.parts().concat()
    }

    /// (flags, type, payload) of each chunk in a structured reply.
    fn chunks(mut b: &[u8]) -> Vec<(u16, u16, Vec<u8>)> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let mut d = Decoder::new(b);
            assert_eq!(d.u32(), Some(STRUCTURED_REPLY_MAGIC));
            let (flags, kind, cookie, len) = (d.u16().unwrap(), d.u16().unwrap(), d.u64().unwrap(), d.u32().unwrap());
            assert_eq!(cookie, 0xc0);
            out.push((flags, kind, b[20..20 + len as usize].to_vec()));
            b = &b[20 + len as usize..];
        }
        out
    }

    #[test]
    fn structured_read_follows_the_map() {
        let n = negotiated(true, false);
        let c = chunks(&bytes(&execute(&n, &header(CMD_READ, 0, 0, 16384), &[])));
        let kinds: Vec<(u16, u16)> = c.iter().map(|(f, k, _)| (*f, *k)).collect();
        assert_eq!(
            kinds,
            vec![(0, REPLY_TYPE_OFFSET_DATA), (0, REPLY_TYPE_OFFSET_HOLE), (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA)]
        );
        assert_eq!(c[0].2[..8], 0u64.to_be_bytes());
        assert!(c[0].2[8..].iter().all(|&b| b == 7) && c[0].2.len() == 8 + 4096);
        assert_eq!(c[1].2, [4096u64.to_be_bytes().as_slice(), &8192u32.to_be_bytes()].concat());
        assert_eq!(c[2].2[..8], 12288u64.to_be_bytes());
        // DF: one data chunk over the lot; a hole alone stays a hole.
        let c = chunks(&bytes(&execute(&n, &header(CMD_READ, CMD_FLAG_DF, 0, 16384), &[])));
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].0, c[0].1, c[0].2.len()), (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 8 + 16384));
        let c = chunks(&bytes(&execute(&n, &header(CMD_READ, CMD_FLAG_DF, 4096, 8192), &[])));
        assert_eq!((c.len(), c[0].1), (1, REPLY_TYPE_OFFSET_HOLE));
    }

    #[test]
    fn simple_read_and_errors() {
        let n = negotiated(false, false);
        let b = bytes(&execute(&n, &header(CMD_READ, 0, 0, 512), &[]));
        assert_eq!(b[..16], simple_reply(0, 0xc0));
        assert_eq!(b.len(), 16 + 512);
        let b = bytes(&execute(&n, &header(CMD_READ, 0, 1 << 20, 512), &[]));
        assert_eq!(b, simple_reply(EINVAL, 0xc0), "past the end: EINVAL, no data");
        let b = bytes(&execute(&n, &header(CMD_WRITE, 0, (1 << 20) - 256, 512), &[0; 512]));
        assert_eq!(b, simple_reply(ENOSPC, 0xc0));
        let b = bytes(&execute(&n, &header(CMD_READ, CMD_FLAG_DF, 0, 512), &[]));
        assert_eq!(b, simple_reply(EINVAL, 0xc0), "DF without structured replies");
        // Structured: an error chunk with the message.
        let n = negotiated(true, false);
        let c = chunks(&bytes(&execute(&n, &header(CMD_READ, CMD_FLAG_DF, 0, MAX_PAYLOAD_BYTES + 1), &[])));
        assert_eq!((c[0].0, c[0].1), (REPLY_FLAG_DONE, REPLY_TYPE_ERROR));
        assert_eq!(c[0].2[..4], EOVERFLOW.to_be_bytes());
        let c = chunks(&bytes(&execute(&n, &header(CMD_BLOCK_STATUS, 0, 0, 512), &[])));
        assert_eq!(c[0].2[..4], EINVAL.to_be_bytes(), "no base:allocation negotiated");
    }

    #[test]
    fn requests_are_counted_by_class() {
        let stats = Arc::new(strata_stats::ProtocolStats::default());
        let n = negotiated_counted(true, true, Some(stats.clone()));
        let ok = |r: &Reply| {
            let b = bytes(r);
            if b[..4] == STRUCTURED_REPLY_MAGIC.to_be_bytes() {
                chunks(&b).iter().all(|c| c.1 != REPLY_TYPE_ERROR)
            } else {
                b[4..8] == [0; 4] // a simple reply's error field
            }
        };
        assert!(ok(&execute(&n, &header(CMD_WRITE, 0, 0, 4096), &[1; 4096])));
        assert!(ok(&execute(&n, &header(CMD_WRITE, CMD_FLAG_FUA, 4096, 512), &[2; 512])));
        assert!(!ok(&execute(&n, &header(CMD_WRITE, 0, 1 << 20, 512), &[0; 512])), "past the end");
        assert!(ok(&execute(&n, &header(CMD_READ, 0, 0, 8192), &[])));
        assert!(ok(&execute(&n, &header(CMD_FLUSH, 0, 0, 0), &[])));
        assert!(ok(&execute(&n, &header(CMD_TRIM, 0, 0, 4096), &[])));
        assert!(ok(&execute(&n, &header(CMD_WRITE_ZEROES, 0, 4096, 4096), &[])));
        assert!(ok(&execute(&n, &header(CMD_BLOCK_STATUS, 0, 0, 4096), &[])));
        let get = |c| {
            let s = stats.snapshot(c);
            (s.ops, s.bytes, s.errors, s.latency.count())
        };
        assert_eq!(get(OpClass::Write), (3, 4608, 1, 3));
        assert_eq!(get(OpClass::Read), (1, 8192, 0, 1));
        assert_eq!(get(OpClass::Sync), (1, 0, 0, 1));
        assert_eq!(get(OpClass::Trim), (2, 0, 0, 2));
        assert_eq!(get(OpClass::Other), (1, 0, 0, 1));
    }

    #[test]
    fn block_status_descriptors() {
        let n = negotiated(true, true);
        let c = chunks(&bytes(&execute(&n, &header(CMD_BLOCK_STATUS, 0, 0, 20480), &[])));
        assert_eq!((c.len(), c[0].0, c[0].1), (1, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS));
        let words: Vec<u32> = c[0].2.chunks(4).map(|w| u32::from_be_bytes(w.try_into().unwrap())).collect();
        let hole = STATE_HOLE | STATE_ZERO;
        assert_eq!(words, vec![META_ID_BASE_ALLOCATION, 4096, 0, 8192, hole, 4096, 0, 4096, hole]);
        let c = chunks(&bytes(&execute(&n, &header(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 2048, 20480), &[])));
        let words: Vec<u32> = c[0].2.chunks(4).map(|w| u32::from_be_bytes(w.try_into().unwrap())).collect();
        assert_eq!(words, vec![META_ID_BASE_ALLOCATION, 2048, 0]);
    }
}
