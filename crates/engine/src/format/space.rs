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

use super::codec::{Reader, Writer};
use crate::error::Corruption;

pub const KEY_VOLUME_SPACE: u8 = 0x10;
pub const KEY_POOL_SPACE: u8 = 0x11;
pub const VOLUME_SPACE_SIZE: usize = 16;
pub const POOL_SPACE_SIZE: usize = 16;

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

#[cfg(test)]
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
    }
}
