//! Block pointers: how every block is found and verified by its parent (DESIGN.md §3.2).
//!
//! `BlockPtrPhys` (64 bytes, little-endian):
//!
//! ```text
//!   0  addr        u64  byte offset on the device: unit aligned, or sector aligned for a
//!                       packed record; 0 with birth 0 = hole
//!   8  birth_txg   u64  txg in which the block was written (space accounting, snapshots)
//!  16  psize       u32  stored bytes (after compression / zero-tail trimming)
//!  20  lsize       u32  logical bytes the block expands to
//!  24  device      u16  device index within the pool
//!  26  kind        u8   BlockKind
//!  27  compression u8   Compression
//!  28  checksum    u8   ChecksumAlgo
//!  29  flags       u8   bit 0 PACKED, bit 1 DEDUP (data records only); others zero
//!  30  reserved    [u8; 2] (zero)
//!  32  checksum    [u8; 32] of the stored psize bytes
//! ```
//!
//! The space a block occupies is `psize` rounded up to whole units — unless it is
//! *packed* (compaction): then it starts at a sector inside a pack, a run of units shared
//! with other small records and freed when its last record is (the pack table, `alloc.rs`,
//! `format::space::PackPhys`), and it is charged `psize` rounded up to whole sectors.
//!
//! A *dedup* record (`DEDUP`) is one reference to a block shared by identical records:
//! its address, sizes and BLAKE3 checksum are the block's, its birth is when this reference
//! was made; the dedup table (`dedup.rs`, `format::space::DedupPhys`, keyed by the
//! checksum) counts the references and frees the block with the last.

use super::codec::{Reader, Writer};
use super::{round_up_sector, round_up_unit, MAX_BLOCK_SIZE, SECTORS_PER_UNIT, SECTOR_SIZE, UNIT_SIZE};
use crate::error::Corruption;

pub const BLKPTR_SIZE: usize = 64;
/// `flags` bit: the block is a record inside a pack.
const FLAG_PACKED: u8 = 1;
/// `flags` bit: the block is one reference to a deduplicated block.
const FLAG_DEDUP: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BlockKind {
    /// A node of a keyed copy-on-write B+tree (catalog, volume tree).
    BtreeNode = 1,
    /// An indirect block of an object's block tree: an array of block pointers.
    Indirect = 2,
    /// A data record of an object.
    Data = 3,
}

impl BlockKind {
    pub fn from_u8(v: u8) -> Option<BlockKind> {
        match v {
            1 => Some(BlockKind::BtreeNode),
            2 => Some(BlockKind::Indirect),
            3 => Some(BlockKind::Data),
            _ => None,
        }
    }
}

/// How the stored bytes expand to the logical block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Compression {
    /// The stored bytes are the logical block's first `psize` bytes; the rest are zeros
    /// (trailing zeros are never stored).
    None = 0,
    /// One LZ4 block (raw block format) of the logical block's zero-trimmed prefix; the
    /// rest is zeros. Data records only (compress.rs, docs/efficiency.md).
    Lz4 = 1,
    /// One Zstandard frame of the logical block's zero-trimmed prefix; the rest is zeros.
    /// Data records only.
    Zstd = 2,
}

impl Compression {
    pub fn from_u8(v: u8) -> Option<Compression> {
        match v {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChecksumAlgo {
    /// CRC-32C (hardware accelerated): catches every burst error up to 32 bits and all but
    /// 2^-32 of random damage. Cheapest.
    Crc32c = 1,
    /// BLAKE3-256: cryptographic, so it can double as the dedup content hash.
    Blake3 = 2,
}

impl ChecksumAlgo {
    pub fn from_u8(v: u8) -> Option<ChecksumAlgo> {
        match v {
            1 => Some(ChecksumAlgo::Crc32c),
            2 => Some(ChecksumAlgo::Blake3),
            _ => None,
        }
    }

    pub fn compute(self, data: &[u8]) -> [u8; 32] {
        let mut out = [0u8; 32];
        match self {
            ChecksumAlgo::Crc32c => out[..4].copy_from_slice(&crc32c::crc32c(data).to_le_bytes()),
            ChecksumAlgo::Blake3 => out = *blake3::hash(data).as_bytes(),
        }
        out
    }

    /// [`ChecksumAlgo::compute`] of every input, in order; BLAKE3 hashes records of 2, 4
    /// and 8 KiB side by side in the SIMD lanes (`lanes`), about twice as fast for 4 KiB.
    pub fn compute_many(self, inputs: &[&[u8]]) -> Vec<[u8; 32]> {
        match self {
            ChecksumAlgo::Crc32c => inputs.iter().map(|b| self.compute(b)).collect(),
            ChecksumAlgo::Blake3 => super::lanes::blake3_many(inputs),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockPtr {
    pub addr: u64,
    pub birth_txg: u64,
    pub psize: u32,
    pub lsize: u32,
    pub device: u16,
    pub kind: BlockKind,
    pub compression: Compression,
    pub checksum_algo: ChecksumAlgo,
    /// A record inside a pack (sector aligned; shares units with other records).
    pub packed: bool,
    /// One reference to a deduplicated block (the dedup table counts them).
    pub dedup: bool,
    pub checksum: [u8; 32],
}

impl std::fmt::Debug for BlockPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_hole() {
            return write!(f, "BlockPtr(hole)");
        }
        write!(
            f,
            "BlockPtr({:?}{}{} @{}:{} p{} l{} birth {})",
            self.kind,
            if self.packed { " packed" } else { "" },
            if self.dedup { " dedup" } else { "" },
            self.device,
            self.addr,
            self.psize,
            self.lsize,
            self.birth_txg
        )
    }
}

impl BlockPtr {
    /// The pointer to nothing: a sparse region, or an empty tree.
    pub const HOLE: BlockPtr = BlockPtr {
        addr: 0,
        birth_txg: 0,
        psize: 0,
        lsize: 0,
        device: 0,
        kind: BlockKind::Data,
        compression: Compression::None,
        checksum_algo: ChecksumAlgo::Crc32c,
        packed: false,
        dedup: false,
        checksum: [0; 32],
    };

    pub fn is_hole(&self) -> bool {
        self.addr == 0 && self.birth_txg == 0
    }

    /// Whole units this block occupies on its device; 0 for a packed record (its pack's
    /// units belong to the pack, `Allocator::free_block`).
    pub fn units(&self) -> u64 {
        if self.is_hole() || self.packed {
            0
        } else {
            round_up_unit(self.psize as u64) / UNIT_SIZE
        }
    }

    /// The space charged for this block, in sectors: its units, or for a packed record its
    /// own bytes rounded up to a sector. Every space figure (volume used and written,
    /// snapshot referenced, an object's st_blocks) adds these.
    pub fn sectors(&self) -> u64 {
        if self.packed {
            round_up_sector(self.psize as u64) / SECTOR_SIZE
        } else {
            self.units() * SECTORS_PER_UNIT
        }
    }

    /// The unit-aligned byte range `(start, len)` a read of this block covers (O_DIRECT
    /// reads whole units; a packed record is read with the units around it).
    /// Saturating: an address from disk near the end of the address space gives a span the
    /// caller's data-area check refuses, not an overflow.
    pub fn read_span(&self) -> (u64, u64) {
        let start = self.addr / UNIT_SIZE * UNIT_SIZE;
        let end = self.addr.saturating_add(self.psize as u64).div_ceil(UNIT_SIZE).saturating_mul(UNIT_SIZE);
        (start, end.saturating_sub(start))
    }

    pub fn encode_into(&self, w: &mut Writer) {
        if self.is_hole() {
            w.zeros(BLKPTR_SIZE);
            return;
        }
        w.u64(self.addr)
            .u64(self.birth_txg)
            .u32(self.psize)
            .u32(self.lsize)
            .u16(self.device)
            .u8(self.kind as u8)
            .u8(self.compression as u8)
            .u8(self.checksum_algo as u8)
            .u8(if self.packed { FLAG_PACKED } else { 0 } | if self.dedup { FLAG_DEDUP } else { 0 })
            .zeros(2)
            .bytes(&self.checksum);
    }

    pub fn decode_from(r: &mut Reader<'_>) -> Result<BlockPtr, Corruption> {
        let raw = r.take(BLKPTR_SIZE)?;
        if raw.iter().all(|&b| b == 0) {
            return Ok(BlockPtr::HOLE);
        }
        let mut f = Reader::new(raw, "block pointer", None);
        let addr = f.u64()?;
        let birth_txg = f.u64()?;
        let psize = f.u32()?;
        let lsize = f.u32()?;
        let device = f.u16()?;
        let kind_raw = f.u8()?;
        let comp_raw = f.u8()?;
        let algo_raw = f.u8()?;
        let flags = f.u8()?;
        let reserved = f.array::<2>()?;
        let checksum = f.array::<32>()?;
        let kind = BlockKind::from_u8(kind_raw)
            .ok_or_else(|| r.corrupt(format!("block pointer has unknown kind {kind_raw}")))?;
        let compression = Compression::from_u8(comp_raw)
            .ok_or_else(|| r.corrupt(format!("block pointer has unknown compression {comp_raw}")))?;
        let checksum_algo = ChecksumAlgo::from_u8(algo_raw)
            .ok_or_else(|| r.corrupt(format!("block pointer has unknown checksum {algo_raw}")))?;
        if reserved != [0; 2] || flags & !(FLAG_PACKED | FLAG_DEDUP) != 0 {
            return Err(r.corrupt("block pointer reserved bytes or flags are not zero"));
        }
        let packed = flags & FLAG_PACKED != 0;
        let dedup = flags & FLAG_DEDUP != 0;
        if (packed || dedup) && kind != BlockKind::Data {
            return Err(
                r.corrupt(format!("a {kind:?} block pointer is marked packed or dedup (only data records are)"))
            );
        }
        if dedup && checksum_algo != ChecksumAlgo::Blake3 {
            return Err(r.corrupt("a dedup block pointer without a BLAKE3 checksum"));
        }
        let align = if packed { SECTOR_SIZE } else { UNIT_SIZE };
        if addr == 0 || addr % align != 0 {
            return Err(r.corrupt(format!("block pointer address {addr} is not a {align}-byte aligned address")));
        }
        if birth_txg == 0 {
            return Err(r.corrupt("block pointer has birth txg 0"));
        }
        if psize == 0 || psize > lsize || lsize as u64 > MAX_BLOCK_SIZE {
            return Err(r.corrupt(format!("block pointer sizes p{psize} l{lsize} are impossible")));
        }
        Ok(BlockPtr {
            addr,
            birth_txg,
            psize,
            lsize,
            device,
            kind,
            compression,
            checksum_algo,
            packed,
            dedup,
            checksum,
        })
    }

    pub fn encode(&self) -> [u8; BLKPTR_SIZE] {
        let mut w = Writer::with_capacity(BLKPTR_SIZE);
        self.encode_into(&mut w);
        let bytes = w.into_inner();
        debug_assert_eq!(bytes.len(), BLKPTR_SIZE);
        let mut out = [0u8; BLKPTR_SIZE];
        out.iter_mut().zip(bytes).for_each(|(o, b)| *o = b);
        out
    }
}

const _: () = assert!(BLKPTR_SIZE == 64);

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_hole() {
        let bp = BlockPtr {
            addr: 1 << 20,
            birth_txg: 7,
            psize: 5000,
            lsize: 16384,
            device: 0,
            kind: BlockKind::Data,
            compression: Compression::None,
            checksum_algo: ChecksumAlgo::Blake3,
            packed: false,
            dedup: false,
            checksum: [9; 32],
        };
        let enc = bp.encode();
        let back = BlockPtr::decode_from(&mut Reader::new(&enc, "t", None)).unwrap();
        assert_eq!(back, bp);
        assert_eq!(bp.units(), 2);
        let hole = BlockPtr::HOLE.encode();
        assert!(BlockPtr::decode_from(&mut Reader::new(&hole, "t", None)).unwrap().is_hole());
        let mut bad = enc;
        bad[26] = 77;
        assert!(BlockPtr::decode_from(&mut Reader::new(&bad, "t", None)).is_err());
        // A packed record: sector aligned, charged its own sectors, read with its units.
        let p = BlockPtr { addr: (1 << 20) + 3 * 512, psize: 1000, packed: true, ..bp };
        let back = BlockPtr::decode_from(&mut Reader::new(&p.encode(), "t", None)).unwrap();
        assert_eq!(back, p);
        assert_eq!((p.units(), p.sectors()), (0, 2));
        assert_eq!(p.read_span(), (1 << 20, 4096));
        let straddling = BlockPtr { addr: (1 << 20) + 7 * 512, ..p };
        assert_eq!(straddling.read_span(), (1 << 20, 8192));
        let unpacked_misaligned = BlockPtr { packed: false, ..p };
        assert!(BlockPtr::decode_from(&mut Reader::new(&unpacked_misaligned.encode(), "t", None)).is_err());
        let d = BlockPtr { dedup: true, ..p };
        assert_eq!(BlockPtr::decode_from(&mut Reader::new(&d.encode(), "t", None)).unwrap(), d);
        let crc_dedup = BlockPtr { checksum_algo: ChecksumAlgo::Crc32c, ..d };
        assert!(BlockPtr::decode_from(&mut Reader::new(&crc_dedup.encode(), "t", None)).is_err());
        let packed_node = BlockPtr { kind: BlockKind::BtreeNode, addr: 1 << 20, ..p };
        assert!(BlockPtr::decode_from(&mut Reader::new(&packed_node.encode(), "t", None)).is_err());
    }
}
