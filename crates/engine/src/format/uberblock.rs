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
//! 120  host_id          u64      the host that wrote this root (0: none recorded)
//! 128  pool_state       u8       0 unknown, 1 active, 2 exported (`HostState`)
//! 129  reserved         [u8; 31]
//! 160  checksum         [u8; 32] BLAKE3 of the 4 KiB slot with this field zeroed
//! ```
//!
//! `host_id` and `pool_state` (feature `COMPAT_HOST_STATE`) say which host last had the pool
//! open and whether it let go of it cleanly: every root a host writes says "active, host H";
//! the last root of `Pool::export` says "exported, host H". An import on another host reads
//! them without opening the pool (`host_state::read_pool_identity`) and refuses a pool that
//! is still active elsewhere unless forced (ZFS `hostid` and `POOL_STATE_EXPORTED`).
//!
//! Compatibility. Bytes 120..160 were reserved and always written as zeros, and `decode`
//! never looked at them (the self-checksum covers them, and any value verifies). So:
//! - a root written before this change decodes as host 0, `HostState::Unknown`;
//! - an older build accepts roots that carry a host state (it ignores the bytes) and writes
//!   zeros again: a pool it wrote last reads `Unknown`, which is the truth.
//!
//! Hence a compat feature, not an incompat one. A `pool_state` this build does not know
//! (from a later build) decodes as `Unknown` rather than as corruption: rejecting it would
//! make the ring scan skip the newest roots and open the pool on an older one.

use super::codec::{seal, self_checksum_ok, Reader, Writer};
use super::{BlockPtr, UNIT_SIZE};
use crate::error::Corruption;

pub const UBER_MAGIC: [u8; 8] = *b"STRATAUB";
pub const UBER_SLOT_SIZE: usize = UNIT_SIZE as usize;
const CHECKSUM_FIELD: usize = 160;
/// Where the host fields start: the first of the formerly reserved bytes.
const HOST_ID_FIELD: usize = 120;
/// Reserved zeros after `pool_state`, up to the checksum.
const RESERVED_AFTER_STATE: usize = CHECKSUM_FIELD - HOST_ID_FIELD - 8 - 1;
const _: () = assert!(HOST_ID_FIELD == 32 + super::blkptr::BLKPTR_SIZE + 3 * 8);
const _: () = assert!(RESERVED_AFTER_STATE == 31);
const _: () = assert!(CHECKSUM_FIELD + 32 <= UBER_SLOT_SIZE);

/// Whether the host that wrote a root still had the pool open (`pool_state`, byte 128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum HostState {
    /// No state recorded: written by a build before host states, or by an opener that
    /// records no host (`PoolOptions::host_id` 0). It may or may not be open elsewhere.
    #[default]
    Unknown,
    /// Open read-write by `host_id` (or that host stopped without exporting it).
    Active,
    /// Cleanly exported by `host_id`: nobody has it open.
    Exported,
}

impl HostState {
    pub fn as_u8(self) -> u8 {
        match self {
            HostState::Unknown => 0,
            HostState::Active => 1,
            HostState::Exported => 2,
        }
    }

    /// Values this build does not know (a later build's states) read as `Unknown`; see the
    /// module comment for why they are not corruption.
    pub fn from_u8(v: u8) -> HostState {
        match v {
            1 => HostState::Active,
            2 => HostState::Exported,
            _ => HostState::Unknown,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HostState::Unknown => "unknown",
            HostState::Active => "active",
            HostState::Exported => "exported",
        }
    }
}

impl std::fmt::Display for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UberblockPhys {
    pub txg: u64,
    pub pool_guid: u64,
    pub timestamp_ns: u64,
    pub catalog_root: BlockPtr,
    pub allocated_units: u64,
    pub next_volume_id: u64,
    pub features_incompat: u64,
    /// The host that wrote this root; 0 = none recorded.
    pub host_id: u64,
    pub pool_state: HostState,
}

impl UberblockPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(UBER_SLOT_SIZE);
        w.bytes(&UBER_MAGIC).u64(self.txg).u64(self.pool_guid).u64(self.timestamp_ns);
        self.catalog_root.encode_into(&mut w);
        w.u64(self.allocated_units).u64(self.next_volume_id).u64(self.features_incompat);
        assert_eq!(w.len(), HOST_ID_FIELD);
        w.u64(self.host_id).u8(self.pool_state.as_u8()).zeros(RESERVED_AFTER_STATE);
        assert_eq!(w.len(), CHECKSUM_FIELD);
        w.zeros(UBER_SLOT_SIZE - CHECKSUM_FIELD);
        let mut buf = w.into_inner();
        seal(&mut buf, CHECKSUM_FIELD);
        buf
    }

    /// Decode one ring slot. `Ok(None)` is an empty slot (all zeros); anything else that
    /// does not verify is corruption (a torn or rotten write), which the ring scan skips.
    pub fn decode(buf: &[u8], addr: u64) -> Result<Option<UberblockPhys>, Corruption> {
        let mut r = Reader::new(buf, "uberblock", Some(addr));
        let Some(buf) = buf.get(..UBER_SLOT_SIZE) else {
            return Err(r.corrupt(format!("slot is {} bytes", buf.len())));
        };
        if buf.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if !buf.starts_with(&UBER_MAGIC) {
            return Err(r.corrupt("bad magic"));
        }
        if !self_checksum_ok(buf, CHECKSUM_FIELD) {
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
        debug_assert_eq!(r.pos(), HOST_ID_FIELD);
        let host_id = r.u64()?;
        let pool_state = HostState::from_u8(r.u8()?);
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
            host_id,
            pool_state,
        }))
    }
}
