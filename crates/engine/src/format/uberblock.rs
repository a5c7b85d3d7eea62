//! `UberblockPhys`: the root of the pool at one txg. The newest valid uberblock in the
//! ring is the pool's committed state (DESIGN.md §3.3).
//!
//! Txg `t` is written to slot `t % RING_SLOTS` of both labels' rings, so the previous
//! RING_SLOTS - 1 roots survive a torn or lost write of the newest one.
//!
//! ```text
//!   0  magic            [u8; 8]  "STRATAUB"
//!   8  txg              u64
//!  16  pool_guid        u64
//!  24  timestamp_ns     u64      from the engine's injected clock
//!  32  catalog_root     BlockPtrPhys (64)   root of the catalog B+tree
//!  96  allocated_units  u64      must equal the space map's count (checked)
//! 104  next_volume_id   u64
//! 112  features_incompat u64     features in use when this root was written
//! 120  reserved         [u8; 40]
//! 160  checksum         [u8; 32] BLAKE3 of the 4 KiB slot with this field zeroed
//! ```

use super::codec::{self_checksum, Reader, Writer};
use super::{BlockPtr, UNIT_SIZE};
use crate::error::Corruption;

pub const UBER_MAGIC: [u8; 8] = *b"STRATAUB";
pub const UBER_SLOT_SIZE: usize = UNIT_SIZE as usize;
const CHECKSUM_FIELD: usize = 160;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UberblockPhys {
    pub txg: u64,
    pub pool_guid: u64,
    pub timestamp_ns: u64,
    pub catalog_root: BlockPtr,
    pub allocated_units: u64,
    pub next_volume_id: u64,
    pub features_incompat: u64,
}

impl UberblockPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(UBER_SLOT_SIZE);
        w.bytes(&UBER_MAGIC).u64(self.txg).u64(self.pool_guid).u64(self.timestamp_ns);
        self.catalog_root.encode_into(&mut w);
        w.u64(self.allocated_units).u64(self.next_volume_id).u64(self.features_incompat).zeros(40);
        assert_eq!(w.len(), CHECKSUM_FIELD);
        w.zeros(UBER_SLOT_SIZE - CHECKSUM_FIELD);
        let mut buf = w.into_inner();
        let sum = self_checksum(&buf, CHECKSUM_FIELD);
        buf[CHECKSUM_FIELD..CHECKSUM_FIELD + 32].copy_from_slice(&sum);
        buf
    }

    /// Decode one ring slot. `Ok(None)` is an empty slot (all zeros); anything else that
    /// does not verify is corruption (a torn or rotten write), which the ring scan skips.
    pub fn decode(buf: &[u8], addr: u64) -> Result<Option<UberblockPhys>, Corruption> {
        let mut r = Reader::new(buf, "uberblock", Some(addr));
        if buf.len() < UBER_SLOT_SIZE {
            return Err(r.corrupt(format!("slot is {} bytes", buf.len())));
        }
        let buf = &buf[..UBER_SLOT_SIZE];
        if buf.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if buf[..8] != UBER_MAGIC {
            return Err(r.corrupt("bad magic"));
        }
        let stored: [u8; 32] = buf[CHECKSUM_FIELD..CHECKSUM_FIELD + 32].try_into().expect("32 bytes");
        if self_checksum(buf, CHECKSUM_FIELD) != stored {
            return Err(r.corrupt("checksum mismatch (torn or damaged)"));
        }
        r.take(8)?;
        let txg = r.u64()?;
        let pool_guid = r.u64()?;
        let timestamp_ns = r.u64()?;
        let catalog_root = BlockPtr::decode_from(&mut r)?;
        let allocated_units = r.u64()?;
        let next_volume_id = r.u64()?;
        let features_incompat = r.u64()?;
        if txg == 0 {
            return Err(r.corrupt("txg 0"));
        }
        if !catalog_root.is_hole() && catalog_root.birth_txg > txg {
            return Err(r.corrupt(format!(
                "catalog root born in txg {} after its uberblock's txg {txg}",
                catalog_root.birth_txg
            )));
        }
        Ok(Some(UberblockPhys {
            txg,
            pool_guid,
            timestamp_ns,
            catalog_root,
            allocated_units,
            next_volume_id,
            features_incompat,
        }))
    }
}
