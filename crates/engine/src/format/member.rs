//! `MemberLabelPhys`: which device set a device belongs to, where in it, and what the set's
//! members were when it was last written (OpenZFS keeps the same in each vdev label).
//!
//! A device of a redundant layout (mirror, parity2) starts with a member area of
//! MEMBER_AREA_BYTES holding two copies of this label (at 0 and MEMBER_LABEL_COPY_1); the
//! set's logical space — pool labels, uberblock rings, space map, intent log, data — starts
//! after it. Every member carries the whole member table, so any one member tells which
//! others belong to the set and which of them had fallen out of sync (not `Online`) the
//! last time the set's configuration changed. The copy with the highest `generation` among
//! the members found is the configuration; a member whose own label is older missed a
//! change while it was away and is not read until it has been rebuilt.
//!
//! ```text
//!   0  magic          [u8; 8]  "STRATAMB"
//!   8  version        u32      1, or 2 while a missed map is kept (`missed_map`): a build
//!                              that does not keep it must not write to the set
//!  12  layout         u8       1 = mirror, 2 = parity2
//!  13  reserved       [u8; 3]
//!  16  pool_guid      u64
//!  24  set_guid       u64
//!  32  member_guid    u64      the device this copy is on
//!  40  member_index   u32      its place in the table
//!  44  member_count   u32      2..=MEMBERS_MAX
//!  48  generation     u64      bumped by every configuration change
//!  56  logical_size   u64      bytes of the set's logical space (unit multiple)
//!  64  created_ns     u64
//!  72  rows_start     u64      parity2: logical offset of the first parity row (below it
//!                              every member holds every byte, as a mirror); 0 for mirror
//!  80  reserved       [u8; 16]
//!  96  checksum       [u8; 32] BLAKE3 of the 4 KiB label with this field zeroed
//! 128  members        member_count × 32 bytes:
//!        guid u64 · state u8 · reserved [u8; 7] · since_txg u64 · rebuild_cursor u64
//!      zero padding to 4096
//! ```
//!
//! The pool label inside the logical space carries `INCOMPAT_DEVICE_SET`; an older build
//! given a member device finds no pool label at offset 0 and refuses it.

use super::codec::{seal, self_checksum_ok, Reader, Writer};
use super::UNIT_SIZE;
use crate::error::Corruption;

pub const MEMBER_MAGIC: [u8; 8] = *b"STRATAMB";
pub const MEMBER_LABEL_VERSION: u32 = 1;
/// The version of a label written while the set keeps a missed map (format/missed_map.rs)
/// for a member taken offline: builds before it refuse the member (they would write to the
/// set without marking the map, and a later resync would trust it).
pub const MEMBER_LABEL_VERSION_MISSED_MAP: u32 = 2;
pub const MEMBER_LABEL_SIZE: usize = UNIT_SIZE as usize;
/// Where the second copy of the member label is.
pub const MEMBER_LABEL_COPY_1: u64 = 32 * 1024;
/// Bytes at the start of every member before the set's logical space.
pub const MEMBER_AREA_BYTES: u64 = 64 * 1024;
/// Most members one set may have.
pub const MEMBERS_MAX: usize = 16;
const CHECKSUM_FIELD: usize = 96;
const TABLE: usize = 128;
const ENTRY: usize = 32;

/// How a set keeps its data redundant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Every member holds every byte (2- or 3-way).
    Mirror = 1,
    /// Double parity (device/mirror/parity.rs): rows of members - 2 data units and two
    /// Reed-Solomon parity units; any two members may fail.
    Parity2 = 2,
}

impl Layout {
    pub fn from_u8(v: u8) -> Option<Layout> {
        match v {
            1 => Some(Layout::Mirror),
            2 => Some(Layout::Parity2),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Layout::Mirror => "mirror",
            Layout::Parity2 => "parity2",
        }
    }
}

/// A member's state as the set's configuration records it. Everything but `Online` means
/// "not in sync: do not read; rebuild before use".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberPhysState {
    Online = 0,
    /// Taken offline by the administrator.
    Offline = 1,
    /// Failed (I/O errors past the threshold, or gone while the pool ran).
    Faulted = 2,
    /// Missing when the pool was opened for writing: it misses what was written since.
    Stale = 3,
    /// Being rebuilt: everything below `rebuild_cursor` (a logical offset) is in sync.
    Rebuilding = 4,
}

impl MemberPhysState {
    pub fn from_u8(v: u8) -> Option<MemberPhysState> {
        Some(match v {
            0 => MemberPhysState::Online,
            1 => MemberPhysState::Offline,
            2 => MemberPhysState::Faulted,
            3 => MemberPhysState::Stale,
            4 => MemberPhysState::Rebuilding,
            _ => return None,
        })
    }
}

/// One row of the member table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberEntryPhys {
    pub guid: u64,
    pub state: MemberPhysState,
    /// The txg from which the member is out of sync (0 when online).
    pub since_txg: u64,
    /// While rebuilding: logical bytes below this are in sync.
    pub rebuild_cursor: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberLabelPhys {
    pub layout: Layout,
    pub pool_guid: u64,
    pub set_guid: u64,
    pub member_guid: u64,
    pub member_index: u32,
    pub generation: u64,
    pub logical_size: u64,
    pub created_ns: u64,
    /// Parity2: logical offset of the first row (0 for a mirror).
    pub rows_start: u64,
    pub members: Vec<MemberEntryPhys>,
    /// A missed map is kept for a member taken offline (written as label version 2).
    pub missed_map: bool,
}

impl MemberLabelPhys {
    pub fn encode(&self) -> Vec<u8> {
        assert!((2..=MEMBERS_MAX).contains(&self.members.len()), "member count validated before encoding");
        let mut w = Writer::with_capacity(MEMBER_LABEL_SIZE);
        w.bytes(&MEMBER_MAGIC)
            .u32(if self.missed_map { MEMBER_LABEL_VERSION_MISSED_MAP } else { MEMBER_LABEL_VERSION })
            .u8(self.layout as u8)
            .zeros(3)
            .u64(self.pool_guid)
            .u64(self.set_guid)
            .u64(self.member_guid)
            .u32(self.member_index)
            .u32(self.members.len() as u32)
            .u64(self.generation)
            .u64(self.logical_size)
            .u64(self.created_ns)
            .u64(self.rows_start)
            .zeros(16);
        assert_eq!(w.len(), CHECKSUM_FIELD);
        w.zeros(32);
        for m in &self.members {
            w.u64(m.guid).u8(m.state as u8).zeros(7).u64(m.since_txg).u64(m.rebuild_cursor);
        }
        w.zeros(MEMBER_LABEL_SIZE - w.len());
        let mut buf = w.into_inner();
        seal(&mut buf, CHECKSUM_FIELD);
        buf
    }

    pub fn decode(buf: &[u8], addr: u64) -> Result<MemberLabelPhys, Corruption> {
        let mut r = Reader::new(buf, "member label", Some(addr));
        let Some(buf) = buf.get(..MEMBER_LABEL_SIZE) else {
            return Err(r.corrupt(format!("member label is {} bytes, expected {MEMBER_LABEL_SIZE}", buf.len())));
        };
        if !buf.starts_with(&MEMBER_MAGIC) {
            return Err(r.corrupt("bad magic: not a member of a Strata device set (or its label is destroyed)"));
        }
        if !self_checksum_ok(buf, CHECKSUM_FIELD) {
            return Err(r.corrupt("member label checksum mismatch"));
        }
        r.take(8)?;
        let version = r.u32()?;
        if version != MEMBER_LABEL_VERSION && version != MEMBER_LABEL_VERSION_MISSED_MAP {
            return Err(r.corrupt(format!(
                "member label version {version} (this build reads {MEMBER_LABEL_VERSION} and \
                 {MEMBER_LABEL_VERSION_MISSED_MAP}): written by a newer Strata"
            )));
        }
        let layout_raw = r.u8()?;
        let layout = Layout::from_u8(layout_raw).ok_or_else(|| r.corrupt(format!("unknown layout {layout_raw}")))?;
        r.take(3)?;
        let pool_guid = r.u64()?;
        let set_guid = r.u64()?;
        let member_guid = r.u64()?;
        let member_index = r.u32()?;
        let member_count = r.u32()? as usize;
        let generation = r.u64()?;
        let logical_size = r.u64()?;
        let created_ns = r.u64()?;
        let rows_start = r.u64()?;
        if !(2..=MEMBERS_MAX).contains(&member_count) || member_index as usize >= member_count {
            return Err(r.corrupt(format!("member {member_index} of {member_count} (2..={MEMBERS_MAX} members)")));
        }
        if logical_size % UNIT_SIZE != 0 {
            return Err(r.corrupt(format!("logical size {logical_size} is not a multiple of the unit")));
        }
        if rows_start % UNIT_SIZE != 0 || rows_start > logical_size || (layout == Layout::Mirror && rows_start != 0) {
            return Err(r.corrupt(format!("rows start {rows_start} does not fit a {} set", layout.name())));
        }
        r.take(16 + 32)?;
        debug_assert_eq!(r.pos(), TABLE);
        let mut members = Vec::with_capacity(member_count);
        for i in 0..member_count {
            let guid = r.u64()?;
            let state_raw = r.u8()?;
            let state = MemberPhysState::from_u8(state_raw)
                .ok_or_else(|| r.corrupt(format!("member {i}: unknown state {state_raw}")))?;
            r.take(7)?;
            let since_txg = r.u64()?;
            let rebuild_cursor = r.u64()?;
            if members.iter().any(|m: &MemberEntryPhys| m.guid == guid) {
                return Err(r.corrupt(format!("member {i}: guid {guid:#x} appears twice")));
            }
            members.push(MemberEntryPhys { guid, state, since_txg, rebuild_cursor });
        }
        debug_assert!(r.pos() <= TABLE + MEMBERS_MAX * ENTRY);
        if members.get(member_index as usize).map(|m| m.guid) != Some(member_guid) {
            return Err(r.corrupt(format!("member guid {member_guid:#x} is not entry {member_index} of its table")));
        }
        Ok(MemberLabelPhys {
            layout,
            pool_guid,
            set_guid,
            member_guid,
            member_index,
            generation,
            logical_size,
            created_ns,
            rows_start,
            members,
            missed_map: version == MEMBER_LABEL_VERSION_MISSED_MAP,
        })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> MemberLabelPhys {
        MemberLabelPhys {
            layout: Layout::Mirror,
            pool_guid: 7,
            set_guid: 9,
            member_guid: 22,
            member_index: 1,
            generation: 3,
            logical_size: 1 << 30,
            created_ns: 5,
            rows_start: 0,
            members: vec![
                MemberEntryPhys { guid: 21, state: MemberPhysState::Faulted, since_txg: 40, rebuild_cursor: 0 },
                MemberEntryPhys { guid: 22, state: MemberPhysState::Online, since_txg: 0, rebuild_cursor: 0 },
            ],
            missed_map: false,
        }
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let l = sample();
        let buf = l.encode();
        assert_eq!(buf.len(), MEMBER_LABEL_SIZE);
        assert_eq!(MemberLabelPhys::decode(&buf, 0).unwrap(), l);
        for at in [0, 12, 40, 130, 4000] {
            let mut bad = buf.clone();
            bad[at] ^= 1;
            assert!(MemberLabelPhys::decode(&bad, 0).is_err(), "flip at {at} accepted");
        }
        assert!(MemberLabelPhys::decode(&buf[..100], 0).is_err());
        // Version 2: the same layout, with a missed map kept.
        let l2 = MemberLabelPhys { missed_map: true, ..l.clone() };
        let buf2 = l2.encode();
        assert_eq!(&buf2[8..12], &MEMBER_LABEL_VERSION_MISSED_MAP.to_le_bytes());
        assert_eq!(MemberLabelPhys::decode(&buf2, 0).unwrap(), l2);
        // A label as the build before the missed map wrote it (version 1) reads as one
        // without a map; a later version is refused.
        assert_eq!(&buf[8..12], &1u32.to_le_bytes());
        let mut v3 = buf.clone();
        v3[8..12].copy_from_slice(&3u32.to_le_bytes());
        seal(&mut v3, CHECKSUM_FIELD);
        assert!(MemberLabelPhys::decode(&v3, 0).unwrap_err().detail.contains("newer Strata"));
    }

    #[test]
    fn rejects_tables_that_cannot_be() {
        // Sealed but inconsistent: the checksum cannot catch what the encoder wrote.
        let mut l = sample();
        l.members[0].guid = 22;
        assert!(MemberLabelPhys::decode(&l.encode(), 0).unwrap_err().detail.contains("twice"));
        let mut l = sample();
        l.member_guid = 99;
        assert!(MemberLabelPhys::decode(&l.encode(), 0).unwrap_err().detail.contains("not entry"));
    }
}
