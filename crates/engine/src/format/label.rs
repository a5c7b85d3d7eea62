//! `LabelPhys`: who this device is and how its space is laid out. Written at pool creation
//! into both labels (at 0 and at LABEL_SIZE); read from whichever copy verifies.
//!
//! ```text
//!   0  magic            [u8; 8]  "STRATALB"
//!   8  label_index      u32      0 or 1
//!  12  unit_shift       u32      log2 of the allocation unit (12)
//!  16  pool_guid        u64
//!  24  device_guid      u64
//!  32  device_index     u32
//!  36  device_count     u32
//!  40  device_size      u64      bytes of the device the pool uses
//!  48  ring_slots       u64
//!  56  spacemap_offset  u64
//!  64  spacemap_chunks  u64
//!  72  data_offset      u64
//!  80  data_units       u64
//!  88  features compat, ro_compat, incompat  3 × u64
//! 112  created_ns       u64
//! 120  checksum_algo    u8       default checksum for new blocks
//! 121  reserved         [u8; 7]
//! 128  pool_name        [u8; 64] UTF-8, zero padded
//! 192  log_offset       u64      the intent log region (see `format::intent`)
//! 200  log_bytes        u64
//! 208  log_device_guid  u64      0: the log is the region above; else the guid of a
//!                                separate log device (`format::logdev`), with the
//!                                INCOMPAT_LOG_DEVICE feature set
//! 216  generation       u64      bumped by every rewrite of the labels: of several valid
//!                                copies (two per device, one per member of a set after
//!                                a crash), the highest is the pool's label. Zero in
//!                                labels written before it existed (reserved then).
//! 224  checksum         [u8; 32] BLAKE3 of the 4 KiB label with this field zeroed
//! 256  group_count      u32      device groups added after creation (`strata pool add`);
//!                                0 unless INCOMPAT_DEVICE_GROUPS is set
//! 260  reserved         u32
//! 264  groups           group_count × GroupPhys (32 bytes), in address order:
//!        0  set_guid    u64      the device set that holds the group
//!        8  base        u64      where its logical space starts in the pool's
//!       16  bytes       u64      its size (the set's logical size, unit aligned)
//!       24  reserved    u64
//!      ...  zero padding to 4096
//! ```
//!
//! A group's own layout (its space map region, then its data units) follows from `base` and
//! `bytes` alone (`alloc::Segment::lay_out`): nothing else needs storing. Labels written
//! before groups existed hold zeros from byte 256: no group.

use super::codec::{seal, self_checksum_ok, Reader, Writer};
use super::features::{Features, INCOMPAT_DEVICE_GROUPS, INCOMPAT_LOG_DEVICE};
use super::{ChecksumAlgo, RING_SLOTS, UNIT_SHIFT, UNIT_SIZE};
use crate::error::Corruption;

pub const LABEL_MAGIC: [u8; 8] = *b"STRATALB";
pub const LABEL_PHYS_SIZE: usize = UNIT_SIZE as usize;
const CHECKSUM_FIELD: usize = 224;
pub const POOL_NAME_MAX: usize = 64;
/// Device groups a pool may add to the one it was created on.
pub const GROUPS_MAX: usize = 64;
const GROUP_PHYS_SIZE: usize = 32;
const _: () = assert!(CHECKSUM_FIELD + 32 + 8 + GROUPS_MAX * GROUP_PHYS_SIZE <= LABEL_PHYS_SIZE);

/// A device group added to a pool (`strata pool add`): a device set whose logical space
/// extends the pool's at `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPhys {
    pub set_guid: u64,
    pub base: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelPhys {
    pub label_index: u32,
    pub pool_guid: u64,
    pub device_guid: u64,
    pub device_index: u32,
    pub device_count: u32,
    pub device_size: u64,
    pub spacemap_offset: u64,
    pub spacemap_chunks: u64,
    pub data_offset: u64,
    pub data_units: u64,
    pub log_offset: u64,
    pub log_bytes: u64,
    /// 0: the intent log is the in-pool region; else the separate log device's guid.
    pub log_device_guid: u64,
    pub features: Features,
    pub created_ns: u64,
    pub checksum_algo: ChecksumAlgo,
    pub pool_name: String,
    /// Rewrites of the labels since creation (see the layout).
    pub generation: u64,
    /// Groups added after creation, in address order (the first group, the one the pool
    /// was created on, is described by the fields above).
    pub groups: Vec<GroupPhys>,
}

impl LabelPhys {
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.pool_name.len() <= POOL_NAME_MAX, "pool name validated before encoding");
        let mut name = [0u8; POOL_NAME_MAX];
        name.iter_mut().zip(self.pool_name.as_bytes()).for_each(|(n, b)| *n = *b);
        let mut w = Writer::with_capacity(LABEL_PHYS_SIZE);
        w.bytes(&LABEL_MAGIC)
            .u32(self.label_index)
            .u32(UNIT_SHIFT)
            .u64(self.pool_guid)
            .u64(self.device_guid)
            .u32(self.device_index)
            .u32(self.device_count)
            .u64(self.device_size)
            .u64(RING_SLOTS)
            .u64(self.spacemap_offset)
            .u64(self.spacemap_chunks)
            .u64(self.data_offset)
            .u64(self.data_units)
            .u64(self.features.compat)
            .u64(self.features.ro_compat)
            .u64(self.features.incompat)
            .u64(self.created_ns)
            .u8(self.checksum_algo as u8)
            .zeros(7)
            .bytes(&name)
            .u64(self.log_offset)
            .u64(self.log_bytes)
            .u64(self.log_device_guid)
            .u64(self.generation);
        assert_eq!(w.len(), CHECKSUM_FIELD);
        assert!(self.groups.len() <= GROUPS_MAX, "group count validated before encoding");
        w.zeros(32).u32(self.groups.len() as u32).zeros(4);
        for g in &self.groups {
            w.u64(g.set_guid).u64(g.base).u64(g.bytes).zeros(8);
        }
        let used = w.len();
        w.zeros(LABEL_PHYS_SIZE - used);
        let mut buf = w.into_inner();
        seal(&mut buf, CHECKSUM_FIELD);
        buf
    }

    pub fn decode(buf: &[u8], addr: u64) -> Result<LabelPhys, Corruption> {
        let mut r = Reader::new(buf, "label", Some(addr));
        let Some(buf) = buf.get(..LABEL_PHYS_SIZE) else {
            return Err(r.corrupt(format!("label is {} bytes, expected {}", buf.len(), LABEL_PHYS_SIZE)));
        };
        if !buf.starts_with(&LABEL_MAGIC) {
            return Err(r.corrupt("bad magic: this is not a Strata device (or its label is destroyed)"));
        }
        if !self_checksum_ok(buf, CHECKSUM_FIELD) {
            return Err(r.corrupt("label checksum mismatch"));
        }
        r.take(8)?;
        let label_index = r.u32()?;
        let unit_shift = r.u32()?;
        let pool_guid = r.u64()?;
        let device_guid = r.u64()?;
        let device_index = r.u32()?;
        let device_count = r.u32()?;
        let device_size = r.u64()?;
        let ring_slots = r.u64()?;
        let spacemap_offset = r.u64()?;
        let spacemap_chunks = r.u64()?;
        let data_offset = r.u64()?;
        let data_units = r.u64()?;
        let features = Features { compat: r.u64()?, ro_compat: r.u64()?, incompat: r.u64()? };
        let created_ns = r.u64()?;
        let algo_raw = r.u8()?;
        r.take(7)?;
        let name_raw = r.take(POOL_NAME_MAX)?;
        let log_offset = r.u64()?;
        let log_bytes = r.u64()?;
        let log_device_guid = r.u64()?;
        let generation = r.u64()?;
        r.take(32)?;
        let group_count = r.u32()? as usize;
        r.take(4)?;
        if group_count > GROUPS_MAX || (group_count > 0) != (features.incompat & INCOMPAT_DEVICE_GROUPS != 0) {
            return Err(r.corrupt(format!(
                "{group_count} device groups (the device groups feature disagrees, or over {GROUPS_MAX})"
            )));
        }
        let mut groups: Vec<GroupPhys> = Vec::with_capacity(group_count);
        let mut prev_end = device_size;
        for i in 0..group_count {
            let g = GroupPhys { set_guid: r.u64()?, base: r.u64()?, bytes: r.u64()? };
            r.take(8)?;
            let end = g.base.checked_add(g.bytes);
            if g.base < prev_end
                || !g.base.is_multiple_of(UNIT_SIZE)
                || !g.bytes.is_multiple_of(UNIT_SIZE)
                || end.is_none()
            {
                return Err(r.corrupt(format!(
                    "device group {i} at {} of {} bytes overlaps the one before or is not unit aligned",
                    g.base, g.bytes
                )));
            }
            prev_end = end.unwrap_or(u64::MAX);
            groups.push(g);
        }
        if (log_device_guid != 0) != (features.incompat & INCOMPAT_LOG_DEVICE != 0) {
            return Err(
                r.corrupt(format!("log device guid {log_device_guid:#x} disagrees with the log device feature flag"))
            );
        }
        if unit_shift != UNIT_SHIFT {
            return Err(r.corrupt(format!("unit shift {unit_shift} is not supported (expected {UNIT_SHIFT})")));
        }
        if ring_slots != RING_SLOTS {
            return Err(r.corrupt(format!("ring of {ring_slots} slots (expected {RING_SLOTS})")));
        }
        let checksum_algo = ChecksumAlgo::from_u8(algo_raw)
            .ok_or_else(|| r.corrupt(format!("unknown checksum algorithm {algo_raw}")))?;
        let name = name_raw.split(|&b| b == 0).next().unwrap_or_default();
        let pool_name = std::str::from_utf8(name).map_err(|_| r.corrupt("pool name is not UTF-8"))?.to_string();
        let end = data_units
            .checked_mul(UNIT_SIZE)
            .and_then(|b| b.checked_add(data_offset))
            .ok_or_else(|| r.corrupt("data area overflows"))?;
        let log_end = log_offset.checked_add(log_bytes).ok_or_else(|| r.corrupt("log region overflows"))?;
        if log_offset % UNIT_SIZE != 0
            || log_bytes % UNIT_SIZE != 0
            || log_offset < spacemap_offset
            || log_end > data_offset
        {
            return Err(r.corrupt(format!("impossible intent log region at {log_offset} of {log_bytes} bytes")));
        }
        if data_offset % UNIT_SIZE != 0 || end > device_size || spacemap_offset >= data_offset {
            return Err(r.corrupt(format!(
                "impossible geometry: data at {data_offset} for {data_units} units on {device_size} bytes"
            )));
        }
        if device_count == 0 || device_index >= device_count {
            return Err(r.corrupt(format!("device {device_index} of {device_count}")));
        }
        Ok(LabelPhys {
            label_index,
            pool_guid,
            device_guid,
            device_index,
            device_count,
            device_size,
            spacemap_offset,
            spacemap_chunks,
            data_offset,
            data_units,
            log_offset,
            log_bytes,
            log_device_guid,
            features,
            created_ns,
            checksum_algo,
            pool_name,
            generation,
            groups,
        })
    }
}
