//! `SpacemapChunkPhys`: one 4 KiB slot of the allocation bitmap.
//!
//! The bitmap (one bit per unit of the data area, 1 = allocated) is cut into chunks of
//! BITS_PER_CHUNK bits. Each chunk has two fixed slots (A and B) in the space map region;
//! a txg that changes a chunk writes it to the slot that does *not* hold the chunk's
//! newest committed version, stamped with the txg. Opening at root txg R takes, per chunk,
//! the valid slot with the highest txg ≤ R. Because the slot being written never holds the
//! committed version, a crash at any point leaves the committed bitmap readable, and the
//! bitmap itself never needs allocating (no recursion between allocator and its own map).
//!
//! ```text
//!   0  magic        [u8; 4]  "STSM"
//!   4  chunk_index  u32
//!   8  txg          u64
//!  16  pool_guid    u64
//!  24  reserved     [u8; 8]
//!  32  checksum     [u8; 32] BLAKE3 of the slot with this field zeroed
//!  64  bits         [u8; 4032]
//! ```

use super::codec::{seal, self_checksum_ok, Reader, Writer};
use super::UNIT_SIZE;
use crate::error::Corruption;

pub const CHUNK_MAGIC: [u8; 4] = *b"STSM";
pub const CHUNK_SLOT_SIZE: usize = UNIT_SIZE as usize;
const HEADER: usize = 64;
const CHECKSUM_FIELD: usize = 32;
pub const CHUNK_BITS_BYTES: usize = CHUNK_SLOT_SIZE - HEADER;
/// Units covered by one chunk: 32,256 units = 126 MiB of data area.
pub const BITS_PER_CHUNK: u64 = (CHUNK_BITS_BYTES * 8) as u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpacemapChunkPhys {
    pub chunk_index: u32,
    pub txg: u64,
    pub pool_guid: u64,
    pub bits: Vec<u8>,
}

impl SpacemapChunkPhys {
    pub fn encode(&self) -> Vec<u8> {
        assert_eq!(self.bits.len(), CHUNK_BITS_BYTES, "chunk bitmaps are fixed size");
        let mut w = Writer::with_capacity(CHUNK_SLOT_SIZE);
        w.bytes(&CHUNK_MAGIC).u32(self.chunk_index).u64(self.txg).u64(self.pool_guid).zeros(8).zeros(32);
        w.bytes(&self.bits);
        let mut buf = w.into_inner();
        seal(&mut buf, CHECKSUM_FIELD);
        buf
    }

    /// `Ok(None)` for a never-written (all-zero) slot.
    pub fn decode(buf: &[u8], addr: u64) -> Result<Option<SpacemapChunkPhys>, Corruption> {
        let mut r = Reader::new(buf, "space map chunk", Some(addr));
        let Some(buf) = buf.get(..CHUNK_SLOT_SIZE) else {
            return Err(r.corrupt(format!("slot is {} bytes", buf.len())));
        };
        if buf.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if !buf.starts_with(&CHUNK_MAGIC) {
            return Err(r.corrupt("bad magic"));
        }
        if !self_checksum_ok(buf, CHECKSUM_FIELD) {
            return Err(r.corrupt("checksum mismatch"));
        }
        r.take(4)?;
        let chunk_index = r.u32()?;
        let txg = r.u64()?;
        let pool_guid = r.u64()?;
        r.take(HEADER - r.pos())?;
        let bits = r.take(CHUNK_BITS_BYTES)?.to_vec();
        Ok(Some(SpacemapChunkPhys { chunk_index, txg, pool_guid, bits }))
    }
}
