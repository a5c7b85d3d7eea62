//! The intent log on disk: `LogBlockPhys` blocks in the log region, each carrying encoded
//! `LogRecord`s (a logical redo log of engine operations).
//!
//! `LogBlockPhys` (a whole number of 4 KiB units):
//! ```text
//!   0  magic        [u8; 8]  "STRATAIL"
//!   8  pool_guid    u64
//!  16  base_txg     u64      the committed txg these records apply on top of
//!  24  seq          u64      0, 1, 2, ... since that txg committed
//!  32  payload_len  u32      bytes of records that follow the header
//!  36  units        u32      size of this block in 4 KiB units
//!  40  checksum     [u8; 32] BLAKE3 of header (this field zeroed) and payload
//!  72  payload      records, then zero padding
//! ```
//!
//! A record: `tag u8, volume u64`, then by tag (all little-endian):
//! - 1 Write: object u64, offset u64, len u32, bytes
//! - 2 Truncate: object u64, size u64
//! - 3 Punch: object u64, offset u64, len u64
//! - 4 SetAttr: object u64, len u16, bytes
//! - 5 CreateObject: object u64 (the id it got), len u16, attr bytes
//! - 6 DeleteObject: object u64
//! - 7 KvPut: key len u16, key, value len u16, value
//! - 8 KvDelete: key len u16, key
//! - 9 GroupEnd (volume 0): the operations since the previous GroupEnd form one engine
//!   `PoolGuard`; replay applies whole groups only.
//! - 10 WriteRef: object u64, offset u64, count u32, then `count` block pointers (64 bytes
//!   each): a write of `count` whole records whose bytes were written to those blocks of
//!   the pool's device before this log block (intent_log_ref.rs, ZFS's WR_INDIRECT); the
//!   data is the blocks' contents in order, each `lsize` (= the record size) bytes.

use super::codec::{seal, self_checksum_ok, Reader, Writer};
use super::{BlockPtr, UNIT_SIZE};
use crate::error::Corruption;

pub const LOG_MAGIC: [u8; 8] = *b"STRATAIL";
pub const LOG_HEADER: usize = 72;
const CHECKSUM_FIELD: usize = 40;
/// Bytes of a Write record before its data.
pub const WRITE_HEADER: usize = 29;
/// Largest data of one Write record the log writes (longer writes become several).
pub const WRITE_DATA_MAX: usize = 1 << 20;
/// Largest payload of one record's byte string (a 1 MiB write, plus room).
pub const RECORD_DATA_MAX: usize = 1 << 21;
/// Most block pointers in one WriteRef (a 1 MiB write of 4 KiB records is 256).
pub const WRITE_REF_MAX: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord {
    Write { vol: u64, obj: u64, offset: u64, data: Vec<u8> },
    Truncate { vol: u64, obj: u64, size: u64 },
    Punch { vol: u64, obj: u64, offset: u64, len: u64 },
    SetAttr { vol: u64, obj: u64, attr: Vec<u8> },
    CreateObject { vol: u64, obj: u64, attr: Vec<u8> },
    DeleteObject { vol: u64, obj: u64 },
    KvPut { vol: u64, key: Vec<u8>, value: Vec<u8> },
    KvDelete { vol: u64, key: Vec<u8> },
    GroupEnd,
    WriteRef { vol: u64, obj: u64, offset: u64, bps: Vec<BlockPtr> },
}

impl LogRecord {
    /// The volume the record changes (None for `GroupEnd`).
    pub fn volume(&self) -> Option<u64> {
        match self {
            LogRecord::Write { vol, .. }
            | LogRecord::Truncate { vol, .. }
            | LogRecord::Punch { vol, .. }
            | LogRecord::SetAttr { vol, .. }
            | LogRecord::CreateObject { vol, .. }
            | LogRecord::DeleteObject { vol, .. }
            | LogRecord::KvPut { vol, .. }
            | LogRecord::KvDelete { vol, .. }
            | LogRecord::WriteRef { vol, .. } => Some(*vol),
            LogRecord::GroupEnd => None,
        }
    }

    /// A Write record's bytes up to its data (`WRITE_HEADER` bytes); `len` data bytes follow.
    pub fn encode_write_header(w: &mut Writer, vol: u64, obj: u64, offset: u64, len: usize) {
        w.u8(1).u64(vol).u64(obj).u64(offset).u32(len as u32);
    }

    pub fn encode_into(&self, w: &mut Writer) {
        match self {
            LogRecord::Write { vol, obj, offset, data } => {
                Self::encode_write_header(w, *vol, *obj, *offset, data.len());
                w.bytes(data);
            }
            LogRecord::Truncate { vol, obj, size } => {
                w.u8(2).u64(*vol).u64(*obj).u64(*size);
            }
            LogRecord::Punch { vol, obj, offset, len } => {
                w.u8(3).u64(*vol).u64(*obj).u64(*offset).u64(*len);
            }
            LogRecord::SetAttr { vol, obj, attr } => {
                w.u8(4).u64(*vol).u64(*obj).u16(attr.len() as u16).bytes(attr);
            }
            LogRecord::CreateObject { vol, obj, attr } => {
                w.u8(5).u64(*vol).u64(*obj).u16(attr.len() as u16).bytes(attr);
            }
            LogRecord::DeleteObject { vol, obj } => {
                w.u8(6).u64(*vol).u64(*obj);
            }
            LogRecord::KvPut { vol, key, value } => {
                w.u8(7).u64(*vol).u16(key.len() as u16).bytes(key).u16(value.len() as u16).bytes(value);
            }
            LogRecord::KvDelete { vol, key } => {
                w.u8(8).u64(*vol).u16(key.len() as u16).bytes(key);
            }
            LogRecord::GroupEnd => {
                w.u8(9).u64(0);
            }
            LogRecord::WriteRef { vol, obj, offset, bps } => {
                w.u8(10).u64(*vol).u64(*obj).u64(*offset).u32(bps.len() as u32);
                for bp in bps {
                    bp.encode_into(w);
                }
            }
        }
    }

    /// Decode every record of a payload.
    pub fn decode_all(payload: &[u8]) -> Result<Vec<LogRecord>, Corruption> {
        let mut r = Reader::new(payload, "intent log record", None);
        let mut out = Vec::new();
        while r.remaining() > 0 {
            let tag = r.u8()?;
            let vol = r.u64()?;
            let bytes16 = |r: &mut Reader<'_>| -> Result<Vec<u8>, Corruption> {
                let n = r.u16()? as usize;
                Ok(r.take(n)?.to_vec())
            };
            out.push(match tag {
                1 => {
                    let (obj, offset) = (r.u64()?, r.u64()?);
                    let n = r.u32()? as usize;
                    if n > RECORD_DATA_MAX {
                        return Err(r.corrupt(format!("write record of {n} bytes")));
                    }
                    LogRecord::Write { vol, obj, offset, data: r.take(n)?.to_vec() }
                }
                2 => LogRecord::Truncate { vol, obj: r.u64()?, size: r.u64()? },
                3 => LogRecord::Punch { vol, obj: r.u64()?, offset: r.u64()?, len: r.u64()? },
                4 => LogRecord::SetAttr { vol, obj: r.u64()?, attr: bytes16(&mut r)? },
                5 => LogRecord::CreateObject { vol, obj: r.u64()?, attr: bytes16(&mut r)? },
                6 => LogRecord::DeleteObject { vol, obj: r.u64()? },
                7 => LogRecord::KvPut { vol, key: bytes16(&mut r)?, value: bytes16(&mut r)? },
                8 => LogRecord::KvDelete { vol, key: bytes16(&mut r)? },
                9 => LogRecord::GroupEnd,
                10 => {
                    let (obj, offset) = (r.u64()?, r.u64()?);
                    let n = r.u32()? as usize;
                    if n == 0 || n > WRITE_REF_MAX {
                        return Err(r.corrupt(format!("write reference to {n} blocks")));
                    }
                    let mut bps = Vec::with_capacity(n);
                    for _ in 0..n {
                        let bp = BlockPtr::decode_from(&mut r)?;
                        if bp.is_hole() {
                            return Err(r.corrupt("write reference to a hole"));
                        }
                        bps.push(bp);
                    }
                    LogRecord::WriteRef { vol, obj, offset, bps }
                }
                other => return Err(r.corrupt(format!("unknown record tag {other}"))),
            });
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBlockPhys {
    pub pool_guid: u64,
    pub base_txg: u64,
    pub seq: u64,
    pub payload: Vec<u8>,
}

impl LogBlockPhys {
    pub fn units_for(payload_len: usize) -> u64 {
        ((LOG_HEADER + payload_len) as u64).div_ceil(UNIT_SIZE)
    }

    pub fn encode(&self) -> Vec<u8> {
        let units = Self::units_for(self.payload.len());
        let mut w = Writer::with_capacity((units * UNIT_SIZE) as usize);
        w.bytes(&LOG_MAGIC)
            .u64(self.pool_guid)
            .u64(self.base_txg)
            .u64(self.seq)
            .u32(self.payload.len() as u32)
            .u32(units as u32)
            .zeros(32)
            .bytes(&self.payload);
        let mut buf = w.into_inner();
        seal(&mut buf, CHECKSUM_FIELD);
        buf.resize((units * UNIT_SIZE) as usize, 0);
        buf
    }

    /// Decode the header from the first unit: `Ok((units, payload_len))` of a block that
    /// claims to be a log block; the checksum is verified by `verify` once it is all read.
    pub fn header(buf: &[u8]) -> Option<(u64, u64, u64, u32, u32)> {
        if buf.len() < LOG_HEADER || !buf.starts_with(&LOG_MAGIC) {
            return None;
        }
        let mut r = Reader::new(buf, "intent log block", None);
        r.take(LOG_MAGIC.len()).ok()?;
        Some((r.u64().ok()?, r.u64().ok()?, r.u64().ok()?, r.u32().ok()?, r.u32().ok()?))
    }

    /// A whole block (its `units` units) that verifies, or None (torn, stale, or not a block).
    pub fn decode(buf: &[u8]) -> Option<LogBlockPhys> {
        let (pool_guid, base_txg, seq, payload_len, units) = Self::header(buf)?;
        let end = LOG_HEADER.checked_add(payload_len as usize)?;
        if units as u64 != Self::units_for(payload_len as usize) {
            return None;
        }
        // The checksum covers the header and the payload, not the padding after it.
        let block = buf.get(..end)?;
        if !self_checksum_ok(block, CHECKSUM_FIELD) {
            return None;
        }
        Some(LogBlockPhys { pool_guid, base_txg, seq, payload: block.get(LOG_HEADER..)?.to_vec() })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn records_and_blocks_round_trip() {
        let recs = vec![
            LogRecord::Write { vol: 1, obj: 2, offset: 3, data: vec![4; 5000] },
            LogRecord::Truncate { vol: 1, obj: 2, size: 9 },
            LogRecord::Punch { vol: 1, obj: 2, offset: 0, len: 4096 },
            LogRecord::SetAttr { vol: 1, obj: 2, attr: b"a".to_vec() },
            LogRecord::CreateObject { vol: 1, obj: 7, attr: vec![] },
            LogRecord::DeleteObject { vol: 1, obj: 7 },
            LogRecord::KvPut { vol: 1, key: b"k".to_vec(), value: b"v".to_vec() },
            LogRecord::KvDelete { vol: 1, key: b"k".to_vec() },
            LogRecord::GroupEnd,
        ];
        let mut w = Writer::with_capacity(0);
        for r in &recs {
            r.encode_into(&mut w);
        }
        let payload = w.into_inner();
        assert_eq!(LogRecord::decode_all(&payload).unwrap(), recs);
        let b = LogBlockPhys { pool_guid: 5, base_txg: 6, seq: 7, payload };
        let enc = b.encode();
        assert_eq!(enc.len() % 4096, 0);
        assert_eq!(LogBlockPhys::decode(&enc), Some(b));
        let mut torn = enc.clone();
        torn[5000] ^= 1;
        assert_eq!(LogBlockPhys::decode(&torn), None);
        assert!(LogRecord::decode_all(&[1, 0, 0]).is_err());
    }
}
