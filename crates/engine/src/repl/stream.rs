//! The send stream: what a mirror transfer carries from a snapshot of one volume to a volume
//! of another pool (same daemon or over the network), version 1.
//!
//! A stream is a sequence of frames:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | type (1 begin, 2 object, 3 free object, 4 data, 5 hole, 6 key put, 7 key delete, 8 end) |
//! | 1–3 | zero (reserved) |
//! | 4–7 | payload length, u32 LE (≤ `MAX_PAYLOAD`) |
//! | 8–15 | frame index, u64 LE: 0 for begin, then 1, 2, 3 … without gaps |
//! | 16 … | payload |
//! | last 16 | MAC: BLAKE3 keyed hash of type, index and payload, first 16 bytes |
//!
//! The begin frame's MAC key is fixed; every later frame's key is derived from the begin
//! frame's payload, so a frame cannot be moved into another stream, reordered, dropped or
//! altered without the receiver noticing (end to end, whatever carries the bytes). The
//! index is what a resumed transfer starts after: a sender asked to resume after frame N
//! sends the begin frame again, then frames N+1 … (send.rs); frames are deterministic for
//! a pair of snapshots, so the same index always names the same frame.
//!
//! Payloads (integers LE; `str` = u16 length + UTF-8 bytes; `bytes` = the rest):
//! - begin: magic `STRATAMS`, version u16 = 1, features u16 = 0, source pool guid u64,
//!   base snapshot txg u64 (0 = a full stream), base created_ns u64, snapshot txg u64,
//!   snapshot created_ns u64, volume record size u32, next object id u64, estimated data
//!   bytes u64, volume str, base snapshot name str (empty for none), snapshot name str;
//! - object: id u64, size u64, record size u32, attribute (u16 length + bytes);
//! - free object: id u64;
//! - data: object u64, offset u64, record bytes (trailing zeros trimmed; the receiver
//!   writes the whole record, zero-filled up to the object's end);
//! - hole: object u64, offset u64, length u64;
//! - key put: key (u16 length + bytes), value bytes;  key delete: key bytes;
//! - end: frames before it u64, data bytes sent u64.

use crate::error::{Error, Result};
use std::io::{Read, Write};

pub const STREAM_MAGIC: &[u8; 8] = b"STRATAMS";
pub const STREAM_VERSION: u16 = 1;
/// Largest payload: a 1 MiB record (the largest record size) and its 16-byte prefix, with
/// room to spare; keys and values are far smaller.
pub const MAX_PAYLOAD: usize = (1 << 20) + 4096;
const FRAME_HEAD: usize = 16;
const MAC_BYTES: usize = 16;
const BEGIN_CONTEXT: &str = "strata send stream v1 begin frame";
const STREAM_CONTEXT: &str = "strata send stream v1 frames";

/// A snapshot as a stream names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapRef {
    pub name: String,
    pub txg: u64,
    pub created_ns: u64,
}

/// What a stream carries (its begin frame).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHeader {
    pub source_pool: u64,
    pub volume: String,
    /// The snapshot the receiver must already hold; `None`: a full stream.
    pub base: Option<SnapRef>,
    pub snapshot: SnapRef,
    pub record_size: u32,
    pub next_object_id: u64,
    /// Data bytes the stream will carry, estimated before sending (for progress).
    pub estimate_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendRecord {
    Begin(StreamHeader),
    Object { obj: u64, size: u64, record_size: u32, attr: Vec<u8> },
    FreeObject { obj: u64 },
    Data { obj: u64, offset: u64, data: Vec<u8> },
    Hole { obj: u64, offset: u64, len: u64 },
    KvPut { key: Vec<u8>, value: Vec<u8> },
    KvDelete { key: Vec<u8> },
    End { frames: u64, data_bytes: u64 },
}

impl SendRecord {
    fn kind(&self) -> u8 {
        match self {
            SendRecord::Begin(_) => 1,
            SendRecord::Object { .. } => 2,
            SendRecord::FreeObject { .. } => 3,
            SendRecord::Data { .. } => 4,
            SendRecord::Hole { .. } => 5,
            SendRecord::KvPut { .. } => 6,
            SendRecord::KvDelete { .. } => 7,
            SendRecord::End { .. } => 8,
        }
    }

    fn payload(&self) -> Vec<u8> {
        let mut w = Vec::new();
        match self {
            SendRecord::Begin(h) => {
                w.extend_from_slice(STREAM_MAGIC);
                w.extend_from_slice(&STREAM_VERSION.to_le_bytes());
                w.extend_from_slice(&0u16.to_le_bytes());
                w.extend_from_slice(&h.source_pool.to_le_bytes());
                let (btxg, bns) = h.base.as_ref().map_or((0, 0), |b| (b.txg, b.created_ns));
                for v in [btxg, bns, h.snapshot.txg, h.snapshot.created_ns] {
                    w.extend_from_slice(&v.to_le_bytes());
                }
                w.extend_from_slice(&h.record_size.to_le_bytes());
                w.extend_from_slice(&h.next_object_id.to_le_bytes());
                w.extend_from_slice(&h.estimate_bytes.to_le_bytes());
                for s in [h.volume.as_str(), h.base.as_ref().map_or("", |b| b.name.as_str()), h.snapshot.name.as_str()]
                {
                    put_str(&mut w, s.as_bytes());
                }
            }
            SendRecord::Object { obj, size, record_size, attr } => {
                w.extend_from_slice(&obj.to_le_bytes());
                w.extend_from_slice(&size.to_le_bytes());
                w.extend_from_slice(&record_size.to_le_bytes());
                put_str(&mut w, attr);
            }
            SendRecord::FreeObject { obj } => w.extend_from_slice(&obj.to_le_bytes()),
            SendRecord::Data { obj, offset, data } => {
                w.extend_from_slice(&obj.to_le_bytes());
                w.extend_from_slice(&offset.to_le_bytes());
                w.extend_from_slice(data);
            }
            SendRecord::Hole { obj, offset, len } => {
                for v in [obj, offset, len] {
                    w.extend_from_slice(&v.to_le_bytes());
                }
            }
            SendRecord::KvPut { key, value } => {
                put_str(&mut w, key);
                w.extend_from_slice(value);
            }
            SendRecord::KvDelete { key } => w.extend_from_slice(key),
            SendRecord::End { frames, data_bytes } => {
                w.extend_from_slice(&frames.to_le_bytes());
                w.extend_from_slice(&data_bytes.to_le_bytes());
            }
        }
        w
    }

    fn decode(kind: u8, p: &[u8], index: u64) -> Result<SendRecord> {
        let bad = |what: &str| Error::invalid(format!("send stream frame {index}: {what}"));
        let mut r = Cursor { p, at: 0 };
        let rec = match kind {
            1 => {
                if r.take(8).ok_or_else(|| bad("short begin frame"))? != STREAM_MAGIC {
                    return Err(bad("not a Strata send stream (bad magic)"));
                }
                let version = r.u16().ok_or_else(|| bad("short begin frame"))?;
                let features = r.u16().ok_or_else(|| bad("short begin frame"))?;
                if version != STREAM_VERSION || features != 0 {
                    return Err(Error::Unsupported(format!(
                        "send stream version {version} with features {features:#x}: this build reads version \
                         {STREAM_VERSION} without features; upgrade the receiving daemon"
                    )));
                }
                let mut n = [0u64; 5];
                for v in &mut n {
                    *v = r.u64().ok_or_else(|| bad("short begin frame"))?;
                }
                let record_size = r.u32().ok_or_else(|| bad("short begin frame"))?;
                let next_object_id = r.u64().ok_or_else(|| bad("short begin frame"))?;
                let estimate_bytes = r.u64().ok_or_else(|| bad("short begin frame"))?;
                let mut names = Vec::new();
                for _ in 0..3 {
                    let s = r.str().ok_or_else(|| bad("short begin frame"))?;
                    names.push(String::from_utf8(s.to_vec()).map_err(|_| bad("a name that is not UTF-8"))?);
                }
                let [volume, base_name, snap_name]: [String; 3] = names.try_into().expect("three names read");
                if (n[1] == 0) != base_name.is_empty() || n[3] == 0 || snap_name.is_empty() || volume.is_empty() {
                    return Err(bad("begin frame names no snapshot, or a base without a txg"));
                }
                let base = (n[1] != 0).then(|| SnapRef { name: base_name, txg: n[1], created_ns: n[2] });
                SendRecord::Begin(StreamHeader {
                    source_pool: n[0],
                    volume,
                    base,
                    snapshot: SnapRef { name: snap_name, txg: n[3], created_ns: n[4] },
                    record_size,
                    next_object_id,
                    estimate_bytes,
                })
            }
            2 => {
                let (obj, size, record_size) = (r.u64(), r.u64(), r.u32());
                let attr = r.str().map(|a| a.to_vec());
                match (obj, size, record_size, attr) {
                    (Some(obj), Some(size), Some(record_size), Some(attr)) => {
                        SendRecord::Object { obj, size, record_size, attr }
                    }
                    _ => return Err(bad("short object frame")),
                }
            }
            3 => SendRecord::FreeObject { obj: r.u64().ok_or_else(|| bad("short free-object frame"))? },
            4 => {
                let (obj, offset) = (r.u64(), r.u64());
                match (obj, offset) {
                    (Some(obj), Some(offset)) => SendRecord::Data { obj, offset, data: r.rest().to_vec() },
                    _ => return Err(bad("short data frame")),
                }
            }
            5 => match (r.u64(), r.u64(), r.u64()) {
                (Some(obj), Some(offset), Some(len)) => SendRecord::Hole { obj, offset, len },
                _ => return Err(bad("short hole frame")),
            },
            6 => {
                let key = r.str().ok_or_else(|| bad("short key-put frame"))?.to_vec();
                SendRecord::KvPut { key, value: r.rest().to_vec() }
            }
            7 => SendRecord::KvDelete { key: r.rest().to_vec() },
            8 => match (r.u64(), r.u64()) {
                (Some(frames), Some(data_bytes)) => SendRecord::End { frames, data_bytes },
                _ => return Err(bad("short end frame")),
            },
            k => return Err(bad(&format!("unknown frame type {k}"))),
        };
        if r.at != p.len() && !matches!(kind, 4 | 6 | 7) {
            return Err(bad("trailing bytes in the frame"));
        }
        Ok(rec)
    }
}

fn put_str(w: &mut Vec<u8>, s: &[u8]) {
    let n = u16::try_from(s.len()).expect("names, keys and attributes are far below 64 KiB");
    w.extend_from_slice(&n.to_le_bytes());
    w.extend_from_slice(s);
}

struct Cursor<'a> {
    p: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.p.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes(b.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn str(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.p[self.at..];
        self.at = self.p.len();
        s
    }
}

fn mac(key: &[u8; 32], kind: u8, index: u64, payload: &[u8]) -> [u8; MAC_BYTES] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&[kind]);
    h.update(&index.to_le_bytes());
    h.update(payload);
    let mut out = [0u8; MAC_BYTES];
    out.copy_from_slice(&h.finalize().as_bytes()[..MAC_BYTES]);
    out
}

fn begin_key() -> [u8; 32] {
    blake3::derive_key(BEGIN_CONTEXT, b"")
}

fn stream_key(begin_payload: &[u8]) -> [u8; 32] {
    blake3::derive_key(STREAM_CONTEXT, begin_payload)
}

/// Encodes frames onto a byte sink.
pub struct StreamWriter<W: Write> {
    out: W,
    key: Option<[u8; 32]>,
    /// Bytes written so far (frames, heads and MACs included).
    pub bytes: u64,
}

impl<W: Write> StreamWriter<W> {
    pub fn new(out: W) -> StreamWriter<W> {
        StreamWriter { out, key: None, bytes: 0 }
    }

    pub fn write(&mut self, index: u64, rec: &SendRecord) -> Result<()> {
        let payload = rec.payload();
        assert!(payload.len() <= MAX_PAYLOAD, "frames are built within the limit");
        let key = match rec {
            SendRecord::Begin(_) => {
                self.key = Some(stream_key(&payload));
                begin_key()
            }
            _ => self.key.expect("the begin frame comes first"),
        };
        let mut frame = Vec::with_capacity(FRAME_HEAD + payload.len() + MAC_BYTES);
        frame.extend_from_slice(&[rec.kind(), 0, 0, 0]);
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&index.to_le_bytes());
        frame.extend_from_slice(&payload);
        frame.extend_from_slice(&mac(&key, rec.kind(), index, &payload));
        self.out.write_all(&frame).map_err(|e| Error::io("write send stream", e))?;
        self.bytes += frame.len() as u64;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| Error::io("flush send stream", e))
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Decodes and verifies frames from a byte source: MACs, and indexes that start at the
/// begin frame and then go up by one from the first data-carrying frame.
pub struct StreamReader<R: Read> {
    input: R,
    key: Option<[u8; 32]>,
    last: Option<u64>,
    /// Bytes read so far.
    pub bytes: u64,
}

impl<R: Read> StreamReader<R> {
    pub fn new(input: R) -> StreamReader<R> {
        StreamReader { input, key: None, last: None, bytes: 0 }
    }

    /// The next frame; `None` at a clean end of input between frames.
    pub fn next_frame(&mut self) -> Result<Option<(u64, SendRecord)>> {
        let mut head = [0u8; FRAME_HEAD];
        match read_full(&mut self.input, &mut head)? {
            0 => return Ok(None),
            n if n < FRAME_HEAD => {
                return Err(Error::invalid("send stream ends inside a frame (the transfer was cut)"))
            }
            _ => {}
        }
        let kind = head[0];
        let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
        let index = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        if head[1..4] != [0, 0, 0] || len > MAX_PAYLOAD {
            return Err(Error::invalid(format!(
                "send stream frame {index}: bad frame head (type {kind}, {len} bytes): not a Strata send stream, or damaged"
            )));
        }
        let mut body = vec![0u8; len + MAC_BYTES];
        if read_full(&mut self.input, &mut body)? < body.len() {
            return Err(Error::invalid("send stream ends inside a frame (the transfer was cut)"));
        }
        self.bytes += (FRAME_HEAD + body.len()) as u64;
        let (payload, tag) = body.split_at(len);
        let key = match (kind, self.key) {
            (1, _) => begin_key(),
            (_, Some(k)) => k,
            (_, None) => return Err(Error::invalid("send stream does not start with a begin frame")),
        };
        if mac(&key, kind, index, payload)[..] != tag[..] {
            return Err(Error::invalid(format!(
                "send stream frame {index}: MAC mismatch (altered, reordered or from another stream); nothing of it was applied"
            )));
        }
        let rec = SendRecord::decode(kind, payload, index)?;
        match (&rec, self.last) {
            (SendRecord::Begin(_), None) if index == 0 => self.key = Some(stream_key(payload)),
            (SendRecord::Begin(_), _) => return Err(Error::invalid("send stream has a second begin frame")),
            (_, Some(last)) if last != 0 && index != last + 1 => {
                return Err(Error::invalid(format!("send stream frame {index} after frame {last}: frames are missing")))
            }
            (_, Some(_)) if index == 0 => return Err(Error::invalid("send stream frame 0 is not a begin frame")),
            _ => {}
        }
        self.last = Some(index);
        Ok(Some((index, rec)))
    }
}

/// Read until `buf` is full or the input ends; the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut at = 0;
    while at < buf.len() {
        match r.read(&mut buf[at..]) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read send stream", e)),
        }
    }
    Ok(at)
}
