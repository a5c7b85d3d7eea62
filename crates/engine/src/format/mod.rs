//! The on-disk format, in one place.
//!
//! Every structure that reaches a device is encoded here, little-endian, with fixed field
//! widths (never `usize`), and has a decoder that returns a typed [`Corruption`] on any input
//! it cannot accept. Decoders are fuzzed (`fuzz/` and the `decoders_survive_arbitrary_bytes`
//! test): no input may make them panic or allocate without bound.
//!
//! Layout of a device (byte offsets):
//!
//! ```text
//!   0        label 0: LabelPhys (4 KiB) + uberblock ring (RING_SLOTS × 4 KiB)
//!   256 KiB  label 1: a second copy of the same
//!   512 KiB  space map: two 4 KiB slots per bitmap chunk (A/B), see `spacemap`
//!   log_offset (1 MiB aligned)    intent log region, see `intent`
//!   data_offset                   allocatable units of UNIT_SIZE bytes
//! ```
//!
//! A pool may keep its intent log on a separate log device instead (`logdev`); the in-pool
//! region is then reserved but unused, so the geometry is the same either way.
//!
//! Format evolution uses feature flags (`features`), not a single version number: a pool
//! that sets an incompatible feature this build does not know is refused with
//! `Unsupported`; an unknown read-only-compatible feature opens the pool read-only.
//! See docs/engine-format.md for the byte layouts and the commit protocol.
//!
//! Everything here reads bytes from disk, so indexing, slicing, `unwrap` and `expect` are
//! denied (docs/failure-policy.md): a decoder uses the `codec::Reader`, `get`, `split_at_checked`
//! or `try_into` with a typed error. Tests may allow them in their own `mod tests`.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

pub mod blkptr;
pub mod codec;
pub mod destroy;
pub mod features;
pub mod intent;
pub mod label;
pub mod lanes;
pub mod logdev;
pub mod member;
pub mod missed_map;
pub mod node;
pub mod records;
pub mod space;
pub mod spacemap;
pub mod uberblock;

pub use blkptr::{BlockKind, BlockPtr, ChecksumAlgo, Compression};

/// The allocation unit and the device sector size the pool is written for. Every block
/// occupies a whole number of units; every address is unit aligned (also what O_DIRECT
/// needs). 4 KiB matches today's SSDs and page size; a smaller unit would cut the waste
/// of small compressed records but multiply the space map — compaction (packing small
/// records into shared units) is the answer to that waste, not a smaller unit.
pub const UNIT_SIZE: u64 = 4096;
pub const UNIT_SHIFT: u32 = 12;

/// The accounting granularity, and where a packed record may start inside its pack
/// (compaction: small compressed records share units, `blkptr::BlockPtr::is_packed`).
/// Space figures (volume used, written, snapshot referenced, st_blocks) count sectors.
pub const SECTOR_SIZE: u64 = 512;
pub const SECTORS_PER_UNIT: u64 = UNIT_SIZE / SECTOR_SIZE;

/// Bytes reserved for each of the two labels.
pub const LABEL_SIZE: u64 = 256 * 1024;
/// Uberblock slots per label: the label minus its 4 KiB header. 63 roots of history is far
/// more than fallback needs (a handful) and costs nothing.
pub const RING_SLOTS: u64 = (LABEL_SIZE - UNIT_SIZE) / UNIT_SIZE;
/// Where the space map region starts.
pub const SPACEMAP_OFFSET: u64 = 2 * LABEL_SIZE;
/// Smallest device we accept: labels, space map and a little room to allocate.
pub const MIN_DEVICE_SIZE: u64 = 16 * 1024 * 1024;
/// Largest block the pipeline writes (the largest record size).
pub const MAX_BLOCK_SIZE: u64 = 1024 * 1024;

/// Where a pool's fixed regions end on a device of `device_size` bytes: (intent log offset,
/// intent log bytes, data area offset). The space map follows the labels, the intent log the
/// space map (1 MiB aligned), the data area the log. Each grows with the device size
/// (never shrinks), which a parity2 set relies on to bound it (device/mirror/parity.rs).
pub fn fixed_regions(device_size: u64) -> (u64, u64, u64) {
    let chunks = (device_size / UNIT_SIZE).div_ceil(spacemap::BITS_PER_CHUNK);
    let spacemap_bytes = chunks * 2 * spacemap::CHUNK_SLOT_SIZE as u64;
    let log_offset = (SPACEMAP_OFFSET + spacemap_bytes).next_multiple_of(1 << 20);
    // The intent log holds what fsyncs wrote since the last commit: 1/64 of the device,
    // 4 MiB to 256 MiB (a full log forces a commit, which empties it).
    let log_bytes = (device_size / 64).clamp(4 << 20, 256 << 20) / (1 << 20) * (1 << 20);
    (log_offset, log_bytes, log_offset + log_bytes)
}

/// Round `n` up to a multiple of the allocation unit.
pub fn round_up_unit(n: u64) -> u64 {
    n.div_ceil(UNIT_SIZE) * UNIT_SIZE
}

/// Round `n` up to a multiple of the sector.
pub fn round_up_sector(n: u64) -> u64 {
    n.div_ceil(SECTOR_SIZE) * SECTOR_SIZE
}

/// Run every on-disk structure's decoder over `bytes`. Decoders must return errors on bad
/// input, never panic; this returns how many accepted it. (`pipeline::decode_all` adds the
/// payload decoders: the fuzz targets' entry point.)
pub fn decode_all(bytes: &[u8]) -> usize {
    let mut ok = 0;
    ok += label::LabelPhys::decode(bytes, 0).is_ok() as usize;
    ok += logdev::LogDeviceLabelPhys::decode(bytes).is_ok() as usize;
    ok += member::MemberLabelPhys::decode(bytes, 0).is_ok() as usize;
    ok += missed_map::MissedMapPhys::decode(bytes, 0).is_ok() as usize;
    ok += uberblock::UberblockPhys::decode(bytes, 0).is_ok() as usize;
    ok += spacemap::SpacemapChunkPhys::decode(bytes, 0).is_ok() as usize;
    ok += node::BtreeNodePhys::decode(bytes, None).is_ok() as usize;
    ok += node::IndirectPhys::decode(bytes, None).is_ok() as usize;
    ok += records::DnodePhys::decode(bytes).is_ok() as usize;
    ok += records::VolumeRecordPhys::decode(bytes).is_ok() as usize;
    ok += records::SnapshotRecordPhys::decode(bytes).is_ok() as usize;
    ok += BlockPtr::decode_from(&mut codec::Reader::new(bytes, "fuzz", None)).is_ok() as usize;
    ok += intent::LogBlockPhys::decode(bytes).is_some() as usize;
    ok += intent::LogRecord::decode_all(bytes).is_ok() as usize;
    ok += space::VolumeSpacePhys::decode(bytes).is_ok() as usize;
    ok += space::PoolSpacePhys::decode(bytes).is_ok() as usize;
    ok += space::PackPhys::decode(bytes).is_ok() as usize;
    ok += space::DedupPhys::decode(bytes).is_ok() as usize;
    ok += destroy::DestroyPhys::decode(bytes).is_ok() as usize;
    ok += destroy::DestroyTreePhys::decode(bytes).is_ok() as usize;
    ok
}
