//! Records stored as values in B+trees: `DnodePhys` (one object of a volume) and
//! `VolumeRecordPhys` (one volume in the pool catalog).
//!
//! `DnodePhys` (88 bytes + attribute):
//! ```text
//!   0  size          u64   object length in bytes
//!   8  record_size   u32   bytes per record (power of two, 4 KiB..1 MiB)
//!  12  levels        u8    indirect levels above the data records (0 = root is record 0)
//!  13  flags         u8    bits 0-2: data sectors mod 8 (see below); others zero
//!  14  attr_len      u16
//!  16  root          BlockPtrPhys (64)
//!  80  data_units    u64   data sectors div 8: with the flags' remainder, the sectors its
//!                            data records are charged (st_blocks; checked)
//!  88  attr          [u8; attr_len]   the caller's attribute record (≤ ATTR_MAX)
//! ```
//!
//! Space figures are kept in 512-byte sectors (`BlockPtr::sectors`: packed records are
//! charged less than a unit). On disk each is split into the whole units it makes, in the
//! field that always held units, and a remainder of 0-7 sectors in bytes that were zero
//! before compaction existed — so records of pools that never packed a record keep their
//! old bytes, and those of older builds decode unchanged.
//!
//! `VolumeRecordPhys` (192 bytes; records of 128 bytes written before snapshots existed
//! decode with the snapshot fields zero):
//! ```text
//!   0  id              u64
//!   8  record_size     u32   default record size of new objects
//!  12  flags           u32   bits 0-7: sync policy (0 standard, 1 always, 2 disabled);
//!                            bits 8-15: compression (0 off, 1 lz4, 2 zstd);
//!                            bits 16-23: zstd level (1-19; 0 otherwise); bit 24: dedup;
//!                            25-31 zero
//!  16  tree_root       BlockPtrPhys (64)  root of the volume's B+tree
//!  80  next_object_id  u64
//!  88  used_units      u64   units referenced by this volume (data + metadata)
//!  96  created_txg     u64
//! 104  created_ns      u64
//! 112  quota_bytes     u64   size limit; 0 = none
//! 120  saved_plus_one  u64   bytes the volume's data records save against storing every
//!                            record at its full size (compression and zero-tail trimming),
//!                            plus one; 0 = not tracked (written by a build before it)
//! 128  parent          u64   snapshot this head descends from (0 = none): blocks born at
//!                            or before its txg may be shared with it
//! 136  deadlist        u64   id of this head's deadlist (blocks of the parent it freed)
//! 144  written_units   u64   units of blocks born after the parent's txg (the head's own)
//! 152  origin          u64   snapshot of another volume this one was cloned from (0 = none)
//! 160  total_units     u64   units born in this volume still allocated (head + snapshots)
//! 168  remainders      [u8; 3]  used, written and total sectors mod 8 (units fields: div 8)
//! 171  reserved        [u8; 21]
//! ```
//!
//! `SnapshotRecordPhys` (160 bytes; the name is in the catalog key):
//! ```text
//!   0  id              u64
//!   8  volume          u64   volume the snapshot was taken of
//!  16  txg             u64   txg it was taken in: it holds exactly the blocks born ≤ txg
//!                            that its volume referenced then
//!  24  created_ns      u64
//!  32  tree_root       BlockPtrPhys (64)
//!  96  parent          u64   previous snapshot in its lineage (0 = none)
//! 104  deadlist        u64   blocks of the parent this snapshot does not hold
//! 112  referenced_units u64  units its tree occupies
//! 120  written_units   u64   units born after the parent's txg
//! 128  next_object_id  u64
//! 136  record_size     u32
//! 140  flags           u32   bits 0-7: referenced sectors mod 8, bits 8-15: written
//!                            sectors mod 8 (the units fields hold div 8); others zero
//! 144  group           u64   group snapshot id (0 = taken alone)
//! 152  saved_plus_one  u64   the volume's savings when taken, plus one (0 = not tracked)
//! ```

use super::codec::{Reader, Writer};
use super::node::INDIRECT_SHIFT;
use super::{BlockPtr, SECTORS_PER_UNIT, SECTOR_SIZE};
use crate::error::Corruption;

pub const ATTR_MAX: usize = 512;
pub const DNODE_FIXED: usize = 88;
pub const VOLUME_RECORD_SIZE: usize = 192;
/// Volume records written before snapshots existed.
pub const VOLUME_RECORD_SIZE_V1: usize = 128;
pub const SNAPSHOT_RECORD_SIZE: usize = 160;
pub const MIN_RECORD_SIZE: u32 = 4096;
pub const MAX_RECORD_SIZE: u32 = 1024 * 1024;
/// Enough indirect levels for 2^63 bytes at the smallest record size.
pub const MAX_LEVELS: u8 = 7;

/// The largest space figure a record may hold, in sectors: 2 EiB, past any pool, and small
/// enough that the engine's sums of a few figures in bytes stay inside u64 (`* SECTOR_SIZE`
/// never overflows). A larger one is damage, refused when decoded.
pub const SPACE_SECTORS_MAX: u64 = 1 << 52;

/// A space figure in sectors as stored: (whole units, remaining sectors 0-7).
fn split_sectors(sectors: u64) -> (u64, u8) {
    (sectors / SECTORS_PER_UNIT, (sectors % SECTORS_PER_UNIT) as u8)
}

/// The inverse of `split_sectors`; None for a remainder ≥ 8 or a figure past
/// `SPACE_SECTORS_MAX`.
fn join_sectors(units: u64, rem: u8) -> Option<u64> {
    if rem as u64 >= SECTORS_PER_UNIT {
        return None;
    }
    units.checked_mul(SECTORS_PER_UNIT)?.checked_add(rem as u64).filter(|&s| s <= SPACE_SECTORS_MAX)
}

/// A volume's or snapshot's savings as stored (plus one; 0 = not tracked): at most what
/// `SPACE_SECTORS_MAX` sectors hold, like every other space figure.
fn saved_from_disk(r: &Reader<'_>, saved_plus_one: u64) -> Result<Option<u64>, Corruption> {
    match saved_plus_one.checked_sub(1) {
        Some(saved) if saved > SPACE_SECTORS_MAX * SECTOR_SIZE => Err(r.corrupt(format!("savings of {saved} bytes"))),
        saved => Ok(saved),
    }
}

pub fn valid_record_size(rs: u32) -> bool {
    rs.is_power_of_two() && (MIN_RECORD_SIZE..=MAX_RECORD_SIZE).contains(&rs)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnodePhys {
    pub size: u64,
    pub record_size: u32,
    pub levels: u8,
    pub root: BlockPtr,
    /// Sectors its data records are charged (`BlockPtr::sectors`).
    pub data_sectors: u64,
    pub attr: Vec<u8>,
}

impl DnodePhys {
    /// Records addressable with `levels` indirect levels.
    pub fn capacity_records(levels: u8) -> u64 {
        1u64 << (INDIRECT_SHIFT * levels as u32).min(63)
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(self.attr.len() <= ATTR_MAX, "attribute size checked by the caller");
        let mut w = Writer::with_capacity(DNODE_FIXED + self.attr.len());
        let (units, rem) = split_sectors(self.data_sectors);
        w.u64(self.size).u32(self.record_size).u8(self.levels).u8(rem).u16(self.attr.len() as u16);
        self.root.encode_into(&mut w);
        w.u64(units);
        w.bytes(&self.attr);
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<DnodePhys, Corruption> {
        let mut r = Reader::new(buf, "dnode", None);
        let size = r.u64()?;
        let record_size = r.u32()?;
        let levels = r.u8()?;
        let flags = r.u8()?;
        let attr_len = r.u16()? as usize;
        let root = BlockPtr::decode_from(&mut r)?;
        let data_units = r.u64()?;
        let data_sectors = join_sectors(data_units, flags).ok_or_else(|| r.corrupt("data space out of range"))?;
        if attr_len > ATTR_MAX {
            return Err(r.corrupt(format!("attribute of {attr_len} bytes")));
        }
        let attr = r.take(attr_len)?.to_vec();
        if r.remaining() != 0 || flags >= SECTORS_PER_UNIT as u8 {
            return Err(r.corrupt("trailing bytes or unknown flags"));
        }
        if !valid_record_size(record_size) {
            return Err(r.corrupt(format!("record size {record_size}")));
        }
        if levels > MAX_LEVELS || size > i64::MAX as u64 {
            return Err(r.corrupt(format!("levels {levels}, size {size}")));
        }
        // The size may pass what `levels` addresses: records beyond are holes (a sparse
        // extension by truncate adds no levels).
        Ok(DnodePhys { size, record_size, levels, root, data_sectors, attr })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRecordPhys {
    pub id: u64,
    pub record_size: u32,
    /// 0 standard, 1 always, 2 disabled (see `pool::SyncPolicy`).
    pub sync_policy: u8,
    pub tree_root: BlockPtr,
    pub next_object_id: u64,
    /// Sectors referenced by this volume (data + metadata).
    pub used_sectors: u64,
    pub created_txg: u64,
    pub created_ns: u64,
    pub quota_bytes: u64,
    pub parent: u64,
    pub deadlist: u64,
    pub written_sectors: u64,
    pub origin: u64,
    pub total_sectors: u64,
    /// How new data records are compressed.
    pub compression: CompressionPolicy,
    /// Σ over the volume's data records of lsize − sectors × SECTOR_SIZE (what compression and
    /// zero-tail trimming save); `None` for volumes last written by a build that did not
    /// track it. Logical bytes = used + saved (docs/efficiency.md).
    pub saved_bytes: Option<u64>,
    /// New data records are deduplicated (`dedup.rs`).
    pub dedup: bool,
}

impl VolumeRecordPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(VOLUME_RECORD_SIZE);
        let (algo, level) = self.compression.to_bits();
        let flags = self.sync_policy as u32 | (algo as u32) << 8 | (level as u32) << 16 | (self.dedup as u32) << 24;
        w.u64(self.id).u32(self.record_size).u32(flags);
        self.tree_root.encode_into(&mut w);
        let (used, used_rem) = split_sectors(self.used_sectors);
        let (written, written_rem) = split_sectors(self.written_sectors);
        let (total, total_rem) = split_sectors(self.total_sectors);
        w.u64(self.next_object_id)
            .u64(used)
            .u64(self.created_txg)
            .u64(self.created_ns)
            .u64(self.quota_bytes)
            .u64(self.saved_bytes.map_or(0, |s| s + 1))
            .u64(self.parent)
            .u64(self.deadlist)
            .u64(written)
            .u64(self.origin)
            .u64(total)
            .u8(used_rem)
            .u8(written_rem)
            .u8(total_rem)
            .zeros(21);
        assert_eq!(w.len(), VOLUME_RECORD_SIZE);
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<VolumeRecordPhys, Corruption> {
        let mut r = Reader::new(buf, "volume record", None);
        if buf.len() != VOLUME_RECORD_SIZE && buf.len() != VOLUME_RECORD_SIZE_V1 {
            return Err(r.corrupt(format!("{} bytes, expected {VOLUME_RECORD_SIZE}", buf.len())));
        }
        let id = r.u64()?;
        let record_size = r.u32()?;
        let flags = r.u32()?;
        let tree_root = BlockPtr::decode_from(&mut r)?;
        let next_object_id = r.u64()?;
        let used_units = r.u64()?;
        let created_txg = r.u64()?;
        let created_ns = r.u64()?;
        let quota_bytes = r.u64()?;
        let saved_plus_one = r.u64()?;
        let (mut parent, mut deadlist, mut written_units, mut origin, mut total_units) =
            (0, 0, used_units, 0, used_units);
        let mut rems = [0u8; 3];
        if buf.len() == VOLUME_RECORD_SIZE {
            parent = r.u64()?;
            deadlist = r.u64()?;
            written_units = r.u64()?;
            origin = r.u64()?;
            total_units = r.u64()?;
            rems = r.array::<3>()?;
            if r.take(21)?.iter().any(|&b| b != 0) {
                return Err(r.corrupt("reserved bytes are not zero"));
            }
        }
        let (Some(used_sectors), Some(written_sectors), Some(total_sectors)) = (
            join_sectors(used_units, rems[0]),
            join_sectors(written_units, rems[1]),
            join_sectors(total_units, rems[2]),
        ) else {
            return Err(r.corrupt(format!("space figures out of range (remainders {rems:?})")));
        };
        let sync_policy = (flags & 0xff) as u8;
        let compression = CompressionPolicy::from_bits((flags >> 8) as u8, (flags >> 16) as u8);
        let Some(compression) = compression.filter(|_| sync_policy <= 2 && flags >> 25 == 0) else {
            return Err(r.corrupt(format!("flags {flags:#x}: unknown sync policy or compression")));
        };
        if !valid_record_size(record_size) {
            return Err(r.corrupt(format!("record size {record_size}")));
        }
        // A head with a parent snapshot keeps the parent's blocks it frees in its deadlist.
        if written_sectors > used_sectors || (parent == 0 && origin != 0) || (parent != 0 && deadlist == 0) {
            return Err(r.corrupt(format!(
                "written {written_sectors} of {used_sectors} sectors, parent {parent}, origin {origin}, deadlist {deadlist}"
            )));
        }
        Ok(VolumeRecordPhys {
            id,
            record_size,
            sync_policy,
            tree_root,
            next_object_id,
            used_sectors,
            created_txg,
            created_ns,
            quota_bytes,
            compression,
            saved_bytes: saved_from_disk(&r, saved_plus_one)?,
            dedup: flags >> 24 & 1 == 1,
            parent,
            deadlist,
            written_sectors,
            origin,
            total_sectors,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRecordPhys {
    pub id: u64,
    pub volume: u64,
    pub txg: u64,
    pub created_ns: u64,
    pub tree_root: BlockPtr,
    pub parent: u64,
    pub deadlist: u64,
    pub referenced_sectors: u64,
    pub written_sectors: u64,
    pub next_object_id: u64,
    pub record_size: u32,
    pub group: u64,
    /// The volume's `saved_bytes` when the snapshot was taken (clones and restores inherit it).
    pub saved_bytes: Option<u64>,
}

impl SnapshotRecordPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(SNAPSHOT_RECORD_SIZE);
        w.u64(self.id).u64(self.volume).u64(self.txg).u64(self.created_ns);
        self.tree_root.encode_into(&mut w);
        let (referenced, referenced_rem) = split_sectors(self.referenced_sectors);
        let (written, written_rem) = split_sectors(self.written_sectors);
        w.u64(self.parent)
            .u64(self.deadlist)
            .u64(referenced)
            .u64(written)
            .u64(self.next_object_id)
            .u32(self.record_size)
            .u32(referenced_rem as u32 | (written_rem as u32) << 8)
            .u64(self.group)
            .u64(self.saved_bytes.map_or(0, |s| s + 1));
        assert_eq!(w.len(), SNAPSHOT_RECORD_SIZE);
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<SnapshotRecordPhys, Corruption> {
        let mut r = Reader::new(buf, "snapshot record", None);
        if buf.len() != SNAPSHOT_RECORD_SIZE {
            return Err(r.corrupt(format!("{} bytes, expected {SNAPSHOT_RECORD_SIZE}", buf.len())));
        }
        let id = r.u64()?;
        let volume = r.u64()?;
        let txg = r.u64()?;
        let created_ns = r.u64()?;
        let tree_root = BlockPtr::decode_from(&mut r)?;
        let parent = r.u64()?;
        let deadlist = r.u64()?;
        let referenced_units = r.u64()?;
        let written_units = r.u64()?;
        let next_object_id = r.u64()?;
        let record_size = r.u32()?;
        let flags = r.u32()?;
        let group = r.u64()?;
        let saved_plus_one = r.u64()?;
        let sectors = (join_sectors(referenced_units, flags as u8), join_sectors(written_units, (flags >> 8) as u8));
        let (Some(referenced_sectors), Some(written_sectors), 0) = (sectors.0, sectors.1, flags >> 16) else {
            return Err(r.corrupt(format!("flags {flags:#x}: unknown bits or space figures out of range")));
        };
        if !valid_record_size(record_size) || txg == 0 || id == 0 || (parent != 0 && deadlist == 0) {
            return Err(r.corrupt(format!(
                "id {id}, txg {txg}, flags {flags}, record size {record_size}, parent {parent}, deadlist {deadlist}"
            )));
        }
        if written_sectors > referenced_sectors || (!tree_root.is_hole() && tree_root.birth_txg > txg) {
            return Err(r.corrupt(format!(
                "written {written_sectors} of {referenced_sectors} sectors; root born in txg {} after the snapshot's {txg}",
                tree_root.birth_txg
            )));
        }
        Ok(SnapshotRecordPhys {
            id,
            volume,
            txg,
            created_ns,
            tree_root,
            parent,
            deadlist,
            referenced_sectors,
            written_sectors,
            next_object_id,
            record_size,
            group,
            saved_bytes: saved_from_disk(&r, saved_plus_one)?,
        })
    }
}

/// `valid_record_size`, as the error a caller shows: what record sizes are allowed.
pub fn validate_record_size(rs: u32) -> crate::error::Result<()> {
    if valid_record_size(rs) {
        Ok(())
    } else {
        Err(crate::error::Error::invalid(format!(
            "record size {rs}: must be a power of two from 4096 to 1048576 bytes"
        )))
    }
}

/// Highest zstd level accepted. Levels 20-22 ("ultra") need large windows and are far too
/// slow for a commit path; 19 is already ~50x slower than level 3.
pub const ZSTD_LEVEL_MAX: u8 = 19;
/// zstd's own default: most of the ratio of higher levels at a fraction of their cost.
pub const ZSTD_LEVEL_DEFAULT: u8 = 3;
/// How a volume compresses the data records it writes (applies to new writes only): the
/// stored setting. What it means for a write (and parsing, names) is the pipeline's
/// (pipeline/compress.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressionPolicy {
    #[default]
    Off,
    Lz4,
    /// Zstandard at `level` (1..=ZSTD_LEVEL_MAX).
    Zstd {
        level: u8,
    },
}

impl CompressionPolicy {
    /// On-disk form: (algorithm, level) as stored in bits 8-15 and 16-23 of a volume
    /// record's flags (format/records.rs). Algorithm 0 off, 1 lz4, 2 zstd; level 0 unless zstd.
    pub fn to_bits(self) -> (u8, u8) {
        match self {
            CompressionPolicy::Off => (0, 0),
            CompressionPolicy::Lz4 => (1, 0),
            CompressionPolicy::Zstd { level } => (2, level),
        }
    }

    pub fn from_bits(algo: u8, level: u8) -> Option<CompressionPolicy> {
        match (algo, level) {
            (0, 0) => Some(CompressionPolicy::Off),
            (1, 0) => Some(CompressionPolicy::Lz4),
            (2, l) if (1..=ZSTD_LEVEL_MAX).contains(&l) => Some(CompressionPolicy::Zstd { level: l }),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn volume() -> VolumeRecordPhys {
        VolumeRecordPhys {
            id: 1,
            record_size: 16384,
            sync_policy: 0,
            tree_root: BlockPtr::HOLE,
            next_object_id: 2,
            used_sectors: 80,
            created_txg: 1,
            created_ns: 0,
            quota_bytes: 0,
            parent: 0,
            deadlist: 0,
            written_sectors: 80,
            origin: 0,
            total_sectors: 80,
            compression: CompressionPolicy::Off,
            saved_bytes: Some(0),
            dedup: false,
        }
    }

    /// Space figures past what any pool holds are refused when decoded: the engine
    /// multiplies and adds them in bytes (`* SECTOR_SIZE`) without overflow checks.
    #[test]
    fn space_figures_past_any_pool_are_corruption() {
        let max = SPACE_SECTORS_MAX;
        let ok = VolumeRecordPhys { used_sectors: max, written_sectors: max, total_sectors: max, ..volume() };
        assert_eq!(VolumeRecordPhys::decode(&ok.encode()).unwrap(), ok);
        for bad in [
            VolumeRecordPhys { total_sectors: max + 1, ..volume() },
            VolumeRecordPhys { used_sectors: max + 8, written_sectors: 0, ..volume() },
            VolumeRecordPhys { saved_bytes: Some(max * SECTOR_SIZE + 1), ..volume() },
        ] {
            assert!(VolumeRecordPhys::decode(&bad.encode()).is_err(), "{bad:?} accepted");
        }
        let dn = DnodePhys {
            size: 0,
            record_size: 4096,
            levels: 0,
            root: BlockPtr::HOLE,
            data_sectors: max + 1,
            attr: vec![],
        };
        assert!(DnodePhys::decode(&dn.encode()).is_err());
        assert!(DnodePhys::decode(&DnodePhys { data_sectors: max, ..dn }.encode()).is_ok());
        let snap = SnapshotRecordPhys {
            id: 3,
            volume: 1,
            txg: 5,
            created_ns: 0,
            tree_root: BlockPtr::HOLE,
            parent: 0,
            deadlist: 2,
            referenced_sectors: max + 1,
            written_sectors: 0,
            next_object_id: 2,
            record_size: 4096,
            group: 0,
            saved_bytes: None,
        };
        assert!(SnapshotRecordPhys::decode(&snap.encode()).is_err());
        assert!(SnapshotRecordPhys::decode(&SnapshotRecordPhys { referenced_sectors: max, ..snap }.encode()).is_ok());
    }

    /// A head or snapshot with a parent keeps a deadlist (the parent's blocks it freed):
    /// one without is damage, refused before anything frees into deadlist 0.
    #[test]
    fn a_parent_without_a_deadlist_is_corruption() {
        let child = VolumeRecordPhys { parent: 4, deadlist: 5, ..volume() };
        assert_eq!(VolumeRecordPhys::decode(&child.encode()).unwrap(), child);
        assert!(VolumeRecordPhys::decode(&VolumeRecordPhys { deadlist: 0, ..child }.encode()).is_err());
        let snap = SnapshotRecordPhys {
            id: 6,
            volume: 1,
            txg: 5,
            created_ns: 0,
            tree_root: BlockPtr::HOLE,
            parent: 4,
            deadlist: 5,
            referenced_sectors: 8,
            written_sectors: 8,
            next_object_id: 2,
            record_size: 4096,
            group: 0,
            saved_bytes: None,
        };
        assert!(SnapshotRecordPhys::decode(&snap.encode()).is_ok());
        assert!(SnapshotRecordPhys::decode(&SnapshotRecordPhys { deadlist: 0, ..snap }.encode()).is_err());
        assert!(SnapshotRecordPhys::decode(&SnapshotRecordPhys { deadlist: 0, parent: 0, ..snap }.encode()).is_ok());
    }
}
