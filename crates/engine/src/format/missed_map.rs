//! `MissedMapPhys`: what the members of a device set that were taken offline missed, kept
//! on the members still in use so that it survives a restart (md's write-intent bitmap;
//! OpenZFS keeps a vdev's dirty time log in space maps). One bit per region of the set's
//! logical space: set (and the map durable) before a write that skips an offline member is
//! issued, so every byte such a member lacks lies in a set region (device/mirror/missed_map.rs).
//!
//! It lives in the member area (`member`), beside the two label copies, in two copies
//! written in turn (copy `seq % 2`): a write torn by a power cut leaves the other, older
//! copy whole, and the older copy covers every write issued before the torn one started.
//!
//! ```text
//!   0  magic          [u8; 8]  "STRATAMM"
//!   8  version        u32      1
//!  12  region_shift   u8       log2 of the logical bytes one bit covers (16..=48)
//!  13  covered_count  u8       0..=MEMBERS_MAX
//!  14  reserved       [u8; 2]
//!  16  set_guid       u64
//!  24  seq            u64      bumped by every write of the map
//!  32  logical_size   u64
//!  40  reserved       [u8; 8]
//!  48  checksum       [u8; 32] BLAKE3 of the map with this field zeroed
//!  80  covered        MEMBERS_MAX × 16 bytes: guid u64 · index u32 · reserved u32 — the
//!                     members (offline since before the first bit was set) it speaks for
//! 336  bits           to MISSED_MAP_SIZE: region k is bit k % 8 of byte k / 8
//! ```
//!
//! A build that does not keep the map must not write to a set while it is in use: the
//! member labels then carry version 2 (`MemberLabelPhys::missed_map`), which builds before
//! it refuse.

use super::codec::{seal, self_checksum_ok, Reader, Writer};
use super::member::{MEMBERS_MAX, MEMBER_LABEL_COPY_1, MEMBER_LABEL_SIZE};
use crate::error::Corruption;

pub const MISSED_MAP_MAGIC: [u8; 8] = *b"STRATAMM";
pub const MISSED_MAP_VERSION: u32 = 1;
/// Bytes of one copy.
pub const MISSED_MAP_SIZE: usize = 28 * 1024;
/// Where the two copies are on a member (after each label copy).
pub const MISSED_MAP_COPIES: [u64; 2] = [MEMBER_LABEL_SIZE as u64, MEMBER_LABEL_COPY_1 + MEMBER_LABEL_SIZE as u64];
const CHECKSUM_FIELD: usize = 48;
const COVERED: usize = 80;
const ENTRY: usize = 16;
const BITS_AT: usize = COVERED + MEMBERS_MAX * ENTRY;
/// Regions one map can tell apart.
pub const MISSED_MAP_REGIONS: u64 = ((MISSED_MAP_SIZE - BITS_AT) * 8) as u64;
/// The smallest region (64 KiB): finer would cost more map writes than it saves copying.
const MIN_SHIFT: u8 = 16;
const MAX_SHIFT: u8 = 48;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissedMapPhys {
    pub set_guid: u64,
    pub seq: u64,
    pub logical_size: u64,
    pub region_shift: u8,
    /// (member index, member guid) of the members the map speaks for.
    pub covered: Vec<(u32, u64)>,
    bits: Vec<u8>,
}

impl MissedMapPhys {
    /// An empty map for a set of `logical_size` bytes, with the smallest region that lets
    /// MISSED_MAP_REGIONS bits cover it.
    pub fn new(set_guid: u64, logical_size: u64) -> MissedMapPhys {
        let mut shift = MIN_SHIFT;
        while shift < MAX_SHIFT && logical_size.div_ceil(1 << shift) > MISSED_MAP_REGIONS {
            shift += 1;
        }
        MissedMapPhys {
            set_guid,
            seq: 0,
            logical_size,
            region_shift: shift,
            covered: Vec::new(),
            bits: vec![0; MISSED_MAP_SIZE - BITS_AT],
        }
    }

    /// Set the bits of the regions `start..end` touches; whether one was not set before.
    pub fn mark(&mut self, start: u64, end: u64) -> bool {
        if start >= end {
            return false;
        }
        let (first, last) = (start >> self.region_shift, (end - 1) >> self.region_shift);
        let mut changed = false;
        for k in first..=last.min(MISSED_MAP_REGIONS - 1) {
            if let Some(b) = self.bits.get_mut((k / 8) as usize) {
                changed |= *b & (1 << (k % 8)) == 0;
                *b |= 1 << (k % 8);
            }
        }
        changed
    }

    /// Clear every bit (no member is covered any more).
    pub fn clear(&mut self) {
        self.bits.fill(0);
    }

    /// The set regions as logical (start, end) ranges, ascending, neighbours joined.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (i, &b) in self.bits.iter().enumerate().filter(|(_, b)| **b != 0) {
            for bit in (0..8).filter(|bit| b & (1 << bit) != 0) {
                let k = i as u64 * 8 + bit;
                let (s, e) = (k << self.region_shift, ((k + 1) << self.region_shift).min(self.logical_size));
                if s >= e {
                    continue;
                }
                match out.last_mut() {
                    Some(last) if last.1 == s => last.1 = e,
                    _ => out.push((s, e)),
                }
            }
        }
        out
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(self.covered.len() <= MEMBERS_MAX, "covered members validated before encoding");
        let mut w = Writer::with_capacity(MISSED_MAP_SIZE);
        w.bytes(&MISSED_MAP_MAGIC)
            .u32(MISSED_MAP_VERSION)
            .u8(self.region_shift)
            .u8(self.covered.len() as u8)
            .zeros(2)
            .u64(self.set_guid)
            .u64(self.seq)
            .u64(self.logical_size)
            .zeros(8);
        assert_eq!(w.len(), CHECKSUM_FIELD);
        w.zeros(32);
        for &(index, guid) in &self.covered {
            w.u64(guid).u32(index).zeros(4);
        }
        w.zeros(BITS_AT - w.len());
        w.bytes(&self.bits);
        let mut buf = w.into_inner();
        debug_assert_eq!(buf.len(), MISSED_MAP_SIZE);
        seal(&mut buf, CHECKSUM_FIELD);
        buf
    }

    pub fn decode(buf: &[u8], addr: u64) -> Result<MissedMapPhys, Corruption> {
        let mut r = Reader::new(buf, "missed map", Some(addr));
        let Some(buf) = buf.get(..MISSED_MAP_SIZE) else {
            return Err(r.corrupt(format!("missed map is {} bytes, expected {MISSED_MAP_SIZE}", buf.len())));
        };
        if !buf.starts_with(&MISSED_MAP_MAGIC) {
            return Err(r.corrupt("bad magic: no missed map here"));
        }
        if !self_checksum_ok(buf, CHECKSUM_FIELD) {
            return Err(r.corrupt("missed map checksum mismatch"));
        }
        r.take(8)?;
        let version = r.u32()?;
        if version != MISSED_MAP_VERSION {
            return Err(r.corrupt(format!("missed map version {version} (this build reads {MISSED_MAP_VERSION})")));
        }
        let region_shift = r.u8()?;
        let count = r.u8()? as usize;
        r.take(2)?;
        let set_guid = r.u64()?;
        let seq = r.u64()?;
        let logical_size = r.u64()?;
        if !(MIN_SHIFT..=MAX_SHIFT).contains(&region_shift) {
            return Err(r.corrupt(format!("region shift {region_shift} outside {MIN_SHIFT}..={MAX_SHIFT}")));
        }
        if logical_size.div_ceil(1 << region_shift) > MISSED_MAP_REGIONS {
            return Err(r.corrupt(format!("{logical_size} bytes do not fit the map at 2^{region_shift} per bit")));
        }
        if count > MEMBERS_MAX {
            return Err(r.corrupt(format!("{count} covered members (at most {MEMBERS_MAX})")));
        }
        r.take(8 + 32)?;
        let mut covered = Vec::with_capacity(count);
        for _ in 0..count {
            let guid = r.u64()?;
            let index = r.u32()?;
            r.take(4)?;
            if index as usize >= MEMBERS_MAX || covered.iter().any(|&(i, _)| i == index) {
                return Err(r.corrupt(format!("covered member {index} is out of range or repeated")));
            }
            covered.push((index, guid));
        }
        r.take(BITS_AT - r.pos())?;
        let bits = r.take(MISSED_MAP_SIZE - BITS_AT)?.to_vec();
        Ok(MissedMapPhys { set_guid, seq, logical_size, region_shift, covered, bits })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::member::MEMBER_AREA_BYTES;

    #[test]
    fn the_copies_fit_the_member_area_beside_the_labels() {
        assert_eq!(MISSED_MAP_COPIES[0] + MISSED_MAP_SIZE as u64, MEMBER_LABEL_COPY_1);
        assert_eq!(MISSED_MAP_COPIES[1] + MISSED_MAP_SIZE as u64, MEMBER_AREA_BYTES);
        assert_eq!(MISSED_MAP_SIZE % 4096, 0);
    }

    #[test]
    fn marks_round_trip_as_ranges_and_damage_is_refused() {
        let mut m = MissedMapPhys::new(9, 1 << 30);
        assert_eq!(m.region_shift, 16);
        assert!(m.mark(100, 200));
        assert!(!m.mark(0, 65536), "a region set again is no change");
        assert!(m.mark(65536 * 3 - 1, 65536 * 3 + 1));
        assert!(m.mark((1 << 30) - 1, 1 << 30));
        m.covered = vec![(1, 0xabc), (3, 0xdef)];
        m.seq = 7;
        assert_eq!(m.ranges(), vec![(0, 65536), (65536 * 2, 65536 * 4), ((1 << 30) - 65536, 1 << 30)]);
        let buf = m.encode();
        assert_eq!(buf.len(), MISSED_MAP_SIZE);
        let back = MissedMapPhys::decode(&buf, 4096).unwrap();
        assert_eq!(back, m);
        for at in [0, 9, 12, 30, 90, 400, MISSED_MAP_SIZE - 1] {
            let mut bad = buf.clone();
            bad[at] ^= 1;
            assert!(MissedMapPhys::decode(&bad, 0).is_err(), "flip at {at} accepted");
        }
        assert!(MissedMapPhys::decode(&buf[..1000], 0).is_err());
        assert!(MissedMapPhys::decode(&vec![0u8; MISSED_MAP_SIZE], 0).is_err());
        m.clear();
        assert!(m.ranges().is_empty());
    }

    #[test]
    fn a_large_set_gets_larger_regions_and_every_byte_a_bit() {
        let size = 16u64 << 40;
        let mut m = MissedMapPhys::new(1, size);
        assert!(size.div_ceil(1 << m.region_shift) <= MISSED_MAP_REGIONS);
        assert!(size.div_ceil(1 << (m.region_shift - 1)) > MISSED_MAP_REGIONS, "not the smallest region");
        assert!(m.mark(size - 1, size));
        assert_eq!(m.ranges().last().unwrap().1, size);
    }
}
