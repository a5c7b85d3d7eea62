//! Space settings kept as values in the pool catalog, beside the volume records (so the
//! 128-byte `VolumeRecordPhys` keeps its layout).
//!
//! Catalog key `0x10 ++ volume name` → `VolumeSpacePhys` (16 bytes), present only for a
//! volume with a reservation:
//! ```text
//!   0  reservation_bytes  u64   space the pool keeps for this volume (thick); > 0
//!   8  reserved           u64   zero
//! ```
//!
//! Catalog key `0x11` → `PoolSpacePhys` (16 bytes), present once set:
//! ```text
//!   0  capacity_alert_percent  u8    warn when available space < this % of the pool (1-99)
//!   1  reserved                [u8; 15] zero
//! ```
//!
//! Catalog key `0x12 ++ pack address (u64 big-endian)` → `PackPhys` (16 bytes), one per
//! pack (compaction: small compressed data records sharing units; `alloc.rs`):
//! ```text
//!   0  units     u32   units the pack occupies (1..=PACK_UNITS_MAX)
//!   4  live      u32   packed block pointers that still reference it (> 0), over every
//!                      tree, snapshot and deadlist of the root this catalog belongs to
//!   8  reserved  u64   zero
//! ```
//!
//! Catalog key `0x13 ++ BLAKE3 checksum of the stored bytes (32)` → `DedupPhys` (32 bytes),
//! one per deduplicated block (`dedup.rs`):
//! ```text
//!   0  addr         u64   the block's address (a packed record's own sector address)
//!   8  psize        u32
//!  12  lsize        u32
//!  16  compression  u8
//!  17  flags        u8    bit 0: the block is packed
//!  18  reserved     u16   zero
//!  20  refs         u32   DEDUP block pointers that reference it (> 0), over every tree,
//!                         snapshot and deadlist of the root
//!  24  reserved     u64   zero
//! ```

use super::codec::{Reader, Writer};
use crate::error::Corruption;

pub const KEY_VOLUME_SPACE: u8 = 0x10;
pub const KEY_POOL_SPACE: u8 = 0x11;
pub const VOLUME_SPACE_SIZE: usize = 16;
pub const POOL_SPACE_SIZE: usize = 16;
pub const KEY_PACK: u8 = 0x12;
pub const PACK_SIZE: usize = 16;
/// Largest pack: 32 KiB, a few dozen small records; one device write.
pub const PACK_UNITS_MAX: u32 = 8;
pub const KEY_DEDUP: u8 = 0x13;
pub const DEDUP_SIZE: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeSpacePhys {
    pub reservation_bytes: u64,
}

impl VolumeSpacePhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(VOLUME_SPACE_SIZE);
        w.u64(self.reservation_bytes).zeros(8);
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<VolumeSpacePhys, Corruption> {
        let mut r = Reader::new(buf, "volume space record", None);
        if buf.len() != VOLUME_SPACE_SIZE {
            return Err(r.corrupt(format!("{} bytes, expected {VOLUME_SPACE_SIZE}", buf.len())));
        }
        let reservation_bytes = r.u64()?;
        let reserved = r.u64()?;
        if reserved != 0 || reservation_bytes == 0 {
            return Err(r.corrupt(format!("reservation {reservation_bytes}, reserved field {reserved:#x}")));
        }
        Ok(VolumeSpacePhys { reservation_bytes })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpacePhys {
    pub capacity_alert_percent: u8,
}

impl PoolSpacePhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(POOL_SPACE_SIZE);
        w.u8(self.capacity_alert_percent).zeros(15);
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<PoolSpacePhys, Corruption> {
        let mut r = Reader::new(buf, "pool space record", None);
        if buf.len() != POOL_SPACE_SIZE {
            return Err(r.corrupt(format!("{} bytes, expected {POOL_SPACE_SIZE}", buf.len())));
        }
        let capacity_alert_percent = r.u8()?;
        let rest = r.take(15)?;
        if !(1..=99).contains(&capacity_alert_percent) || rest.iter().any(|&b| b != 0) {
            return Err(r.corrupt(format!("capacity alert {capacity_alert_percent}% or reserved bytes set")));
        }
        Ok(PoolSpacePhys { capacity_alert_percent })
    }
}

/// One pack of the pack table (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackPhys {
    pub units: u32,
    pub live: u32,
}

impl PackPhys {
    pub fn key(addr: u64) -> [u8; 9] {
        let mut k = [KEY_PACK; 9];
        k[1..].copy_from_slice(&addr.to_be_bytes());
        k
    }

    /// The pack address in a catalog key made by `key`.
    pub fn addr_of_key(key: &[u8]) -> Option<u64> {
        match key.split_first() {
            Some((&KEY_PACK, addr)) => <[u8; 8]>::try_from(addr).ok().map(u64::from_be_bytes),
            _ => None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(PACK_SIZE);
        w.u32(self.units).u32(self.live).zeros(8);
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<PackPhys, Corruption> {
        let mut r = Reader::new(buf, "pack record", None);
        if buf.len() != PACK_SIZE {
            return Err(r.corrupt(format!("{} bytes, expected {PACK_SIZE}", buf.len())));
        }
        let units = r.u32()?;
        let live = r.u32()?;
        let reserved = r.u64()?;
        if !(1..=PACK_UNITS_MAX).contains(&units) || live == 0 || reserved != 0 {
            return Err(r.corrupt(format!("pack of {units} units with {live} live records, reserved {reserved:#x}")));
        }
        Ok(PackPhys { units, live })
    }
}

/// One entry of the dedup table (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupPhys {
    pub addr: u64,
    pub psize: u32,
    pub lsize: u32,
    pub compression: super::Compression,
    pub packed: bool,
    pub refs: u32,
}

impl DedupPhys {
    pub fn key(hash: &[u8; 32]) -> [u8; 33] {
        let mut k = [KEY_DEDUP; 33];
        k[1..].copy_from_slice(hash);
        k
    }

    /// The checksum in a catalog key made by `key`.
    pub fn hash_of_key(key: &[u8]) -> Option<[u8; 32]> {
        match key.split_first() {
            Some((&KEY_DEDUP, hash)) => <[u8; 32]>::try_from(hash).ok(),
            _ => None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(DEDUP_SIZE);
        w.u64(self.addr)
            .u32(self.psize)
            .u32(self.lsize)
            .u8(self.compression as u8)
            .u8(self.packed as u8)
            .zeros(2)
            .u32(self.refs)
            .zeros(8);
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<DedupPhys, Corruption> {
        let mut r = Reader::new(buf, "dedup table entry", None);
        if buf.len() != DEDUP_SIZE {
            return Err(r.corrupt(format!("{} bytes, expected {DEDUP_SIZE}", buf.len())));
        }
        let addr = r.u64()?;
        let psize = r.u32()?;
        let lsize = r.u32()?;
        let comp = r.u8()?;
        let flags = r.u8()?;
        let reserved = r.u16()?;
        let refs = r.u32()?;
        let reserved2 = r.u64()?;
        let compression = super::Compression::from_u8(comp);
        let Some(compression) = compression.filter(|_| flags <= 1 && reserved == 0 && reserved2 == 0) else {
            return Err(r.corrupt(format!("compression {comp}, flags {flags}, reserved bytes set")));
        };
        if addr == 0 || psize == 0 || psize > lsize || refs == 0 {
            return Err(r.corrupt(format!("address {addr}, sizes p{psize} l{lsize}, {refs} references")));
        }
        Ok(DedupPhys { addr, psize, lsize, compression, packed: flags == 1, refs })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let v = VolumeSpacePhys { reservation_bytes: 1 << 30 };
        assert_eq!(VolumeSpacePhys::decode(&v.encode()).unwrap(), v);
        assert!(VolumeSpacePhys::decode(&VolumeSpacePhys { reservation_bytes: 0 }.encode()).is_err());
        assert!(VolumeSpacePhys::decode(&v.encode()[..8]).is_err());
        let p = PoolSpacePhys { capacity_alert_percent: 10 };
        assert_eq!(PoolSpacePhys::decode(&p.encode()).unwrap(), p);
        assert!(PoolSpacePhys::decode(&PoolSpacePhys { capacity_alert_percent: 100 }.encode()).is_err());
        let mut bad = p.encode();
        bad[5] = 1;
        assert!(PoolSpacePhys::decode(&bad).is_err());
        let pk = PackPhys { units: 3, live: 17 };
        assert_eq!(PackPhys::decode(&pk.encode()).unwrap(), pk);
        assert_eq!(PackPhys::addr_of_key(&PackPhys::key(1 << 20)), Some(1 << 20));
        assert!(PackPhys::decode(&PackPhys { units: 9, live: 1 }.encode()).is_err());
        assert!(PackPhys::decode(&PackPhys { units: 1, live: 0 }.encode()).is_err());
        let d = DedupPhys {
            addr: 1 << 20,
            psize: 900,
            lsize: 16384,
            compression: crate::format::Compression::Zstd,
            packed: true,
            refs: 3,
        };
        assert_eq!(DedupPhys::decode(&d.encode()).unwrap(), d);
        assert_eq!(DedupPhys::hash_of_key(&DedupPhys::key(&[7; 32])), Some([7; 32]));
        assert!(DedupPhys::decode(&DedupPhys { refs: 0, ..d }.encode()).is_err());
    }
}
