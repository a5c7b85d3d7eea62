//! `LogDeviceLabelPhys`: the label of a separate intent-log device (the ZFS SLOG / ONTAP
//! NVRAM role). Written once, at pool creation, at byte 0 of the log device; the log region
//! (`LogBlockPhys` blocks, see `format::intent`) follows at `region_offset`.
//!
//! Layout of a log device:
//!
//! ```text
//!   0                 LogDeviceLabelPhys (4 KiB)
//!   4 KiB .. 64 KiB   reserved (zero)
//!   region_offset     intent log region: LogBlockPhys blocks, as in the in-pool region
//! ```
//!
//! `LogDeviceLabelPhys` (4 KiB):
//! ```text
//!   0  magic            [u8; 8]  "STRATALD"
//!   8  version          u32      1
//!  12  unit_shift       u32      log2 of the unit (12)
//!  16  pool_guid        u64      the pool this log belongs to
//!  24  log_device_guid  u64      this device; the pool label names it (`log_device_guid`)
//!  32  device_size      u64      bytes of the device the log uses
//!  40  region_offset    u64      where the log region starts (64 KiB)
//!  48  region_bytes     u64      its length, a whole number of units
//!  56  created_ns       u64
//!  64  pool_name        [u8; 64] UTF-8, zero padded (for messages only)
//! 128  checksum         [u8; 32] BLAKE3 of the 4 KiB label with this field zeroed
//! 160  zero padding to 4096
//! ```
//!
//! One copy only: the label is written once and never again, and a log device whose label
//! is gone is a lost log device either way — the pool refuses to open without it unless told
//! to discard the log (`PoolOptions::discard_missing_log`), which costs at most the syncs
//! since the last commit. A second copy would not change that outcome.
//!
//! The version field is a guard for this small, separate structure: the pool label's
//! `INCOMPAT_LOG_DEVICE` feature is what keeps older builds away from such pools.

use super::codec::{seal, self_checksum_ok, Reader, Writer};
use super::{UNIT_SHIFT, UNIT_SIZE};
use crate::error::Corruption;

pub const LOG_DEVICE_MAGIC: [u8; 8] = *b"STRATALD";
pub const LOG_DEVICE_VERSION: u32 = 1;
pub const LOG_DEVICE_LABEL_SIZE: usize = UNIT_SIZE as usize;
/// Where the log region starts: the label plus room for later additions (a second label
/// copy, say) without moving the region.
pub const LOG_DEVICE_REGION_OFFSET: u64 = 64 * 1024;
/// Smallest log device accepted. 16 MiB holds several seconds of fsync-heavy database
/// traffic between commits (the in-pool region is 4–256 MiB); a smaller log would make
/// most syncs fall back to a full commit, which defeats the point of a separate device.
pub const MIN_LOG_DEVICE_SIZE: u64 = 16 * 1024 * 1024;
const CHECKSUM_FIELD: usize = 128;
const POOL_NAME_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDeviceLabelPhys {
    pub pool_guid: u64,
    pub log_device_guid: u64,
    pub device_size: u64,
    pub region_offset: u64,
    pub region_bytes: u64,
    pub created_ns: u64,
    pub pool_name: String,
}

impl LogDeviceLabelPhys {
    /// The label for a new log device of `device_size` bytes (rounded down to units), or
    /// None when the device is smaller than [`MIN_LOG_DEVICE_SIZE`].
    pub fn for_device(
        pool_guid: u64,
        log_device_guid: u64,
        device_size: u64,
        created_ns: u64,
        pool_name: &str,
    ) -> Option<LogDeviceLabelPhys> {
        let size = device_size / UNIT_SIZE * UNIT_SIZE;
        if size < MIN_LOG_DEVICE_SIZE {
            return None;
        }
        Some(LogDeviceLabelPhys {
            pool_guid,
            log_device_guid,
            device_size: size,
            region_offset: LOG_DEVICE_REGION_OFFSET,
            region_bytes: size - LOG_DEVICE_REGION_OFFSET,
            created_ns,
            pool_name: pool_name.to_string(),
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(self.pool_name.len() <= POOL_NAME_MAX, "pool name validated before encoding");
        assert!(self.log_device_guid != 0, "guid 0 means the log is in the pool");
        let mut name = [0u8; POOL_NAME_MAX];
        name.iter_mut().zip(self.pool_name.as_bytes()).for_each(|(n, b)| *n = *b);
        let mut w = Writer::with_capacity(LOG_DEVICE_LABEL_SIZE);
        w.bytes(&LOG_DEVICE_MAGIC)
            .u32(LOG_DEVICE_VERSION)
            .u32(UNIT_SHIFT)
            .u64(self.pool_guid)
            .u64(self.log_device_guid)
            .u64(self.device_size)
            .u64(self.region_offset)
            .u64(self.region_bytes)
            .u64(self.created_ns)
            .bytes(&name);
        assert_eq!(w.len(), CHECKSUM_FIELD);
        w.zeros(LOG_DEVICE_LABEL_SIZE - CHECKSUM_FIELD);
        let mut buf = w.into_inner();
        seal(&mut buf, CHECKSUM_FIELD);
        buf
    }

    pub fn decode(buf: &[u8]) -> Result<LogDeviceLabelPhys, Corruption> {
        let mut r = Reader::new(buf, "log device label", Some(0));
        let Some(buf) = buf.get(..LOG_DEVICE_LABEL_SIZE) else {
            return Err(r.corrupt(format!("label is {} bytes, expected {}", buf.len(), LOG_DEVICE_LABEL_SIZE)));
        };
        if !buf.starts_with(&LOG_DEVICE_MAGIC) {
            return Err(r.corrupt("bad magic: this is not a Strata log device (or its label is destroyed)"));
        }
        if !self_checksum_ok(buf, CHECKSUM_FIELD) {
            return Err(r.corrupt("log device label checksum mismatch"));
        }
        r.take(8)?;
        let version = r.u32()?;
        let unit_shift = r.u32()?;
        let pool_guid = r.u64()?;
        let log_device_guid = r.u64()?;
        let device_size = r.u64()?;
        let region_offset = r.u64()?;
        let region_bytes = r.u64()?;
        let created_ns = r.u64()?;
        let name_raw = r.take(POOL_NAME_MAX)?;
        if version != LOG_DEVICE_VERSION {
            return Err(r.corrupt(format!(
                "log device label version {version} (this build reads {LOG_DEVICE_VERSION}); upgrade Strata"
            )));
        }
        if unit_shift != UNIT_SHIFT {
            return Err(r.corrupt(format!("unit shift {unit_shift} is not supported (expected {UNIT_SHIFT})")));
        }
        if log_device_guid == 0 {
            return Err(r.corrupt("log device guid is 0"));
        }
        let end = region_offset.checked_add(region_bytes).ok_or_else(|| r.corrupt("log region overflows"))?;
        if region_offset < LOG_DEVICE_LABEL_SIZE as u64
            || region_offset % UNIT_SIZE != 0
            || region_bytes % UNIT_SIZE != 0
            || region_bytes == 0
            || end > device_size
        {
            return Err(r.corrupt(format!(
                "impossible log region at {region_offset} of {region_bytes} bytes on {device_size} bytes"
            )));
        }
        let name = name_raw.split(|&b| b == 0).next().unwrap_or_default();
        let pool_name = std::str::from_utf8(name).map_err(|_| r.corrupt("pool name is not UTF-8"))?.to_string();
        Ok(LogDeviceLabelPhys {
            pool_guid,
            log_device_guid,
            device_size,
            region_offset,
            region_bytes,
            created_ns,
            pool_name,
        })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn label_round_trips_and_rejects_damage() {
        let l = LogDeviceLabelPhys::for_device(5, 9, (32 << 20) + 100, 77, "tank").expect("big enough");
        assert_eq!(l.device_size, 32 << 20);
        assert_eq!(l.region_offset + l.region_bytes, 32 << 20);
        let enc = l.encode();
        assert_eq!(enc.len(), LOG_DEVICE_LABEL_SIZE);
        assert_eq!(LogDeviceLabelPhys::decode(&enc), Ok(l));
        for at in [0usize, 9, 20, 70, 130, 4000] {
            let mut bad = enc.clone();
            bad[at] ^= 0x10;
            assert!(LogDeviceLabelPhys::decode(&bad).is_err(), "flip at {at} accepted");
        }
        assert!(LogDeviceLabelPhys::decode(&enc[..100]).is_err());
        assert!(LogDeviceLabelPhys::for_device(5, 9, MIN_LOG_DEVICE_SIZE - 4096, 0, "t").is_none());
    }
}
