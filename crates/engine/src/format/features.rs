//! Feature flags: how the format evolves (OpenZFS `zfeature.c`).
//!
//! Three masks are stored in every label:
//! - `compat`: readers that do not know the feature may read and write the pool;
//! - `ro_compat`: readers that do not know it may only read (they would corrupt its data if
//!   they wrote);
//! - `incompat`: readers that do not know it must refuse the pool.
//!
//! The base format (this file's first version) sets no feature. A change to an on-disk
//! structure adds a bit here, a test that opens an image written before the change, and a
//! note in docs/engine-format.md.

/// Feature bits this build understands, per mask.
pub const KNOWN_COMPAT: u64 = COMPAT_HOST_STATE;
pub const KNOWN_RO_COMPAT: u64 = RO_COMPAT_ASYNC_DESTROY;
pub const KNOWN_INCOMPAT: u64 = INCOMPAT_COMPRESSION
    | INCOMPAT_PACKS
    | INCOMPAT_DEDUP
    | INCOMPAT_LOG_DEVICE
    | INCOMPAT_DEVICE_SET
    | INCOMPAT_DEVICE_GROUPS;

/// Data records may be stored compressed (lz4, zstd) and volume records carry a compression
/// policy in their flags. Set in the labels when a volume's compression is first turned on
/// (compress.rs, space.rs); a pool that never compressed stays readable by older builds.
/// Bit 8: the storage-efficiency features take bits from 8 up.
pub const INCOMPAT_COMPRESSION: u64 = 1 << 8;

/// Small compressed data records may be packed (compaction): block pointers with the
/// PACKED flag at sector offsets, the pack table in the catalog (`format::space::PackPhys`),
/// and space figures with sector remainders (`format::records`). An older build would
/// free a packed record's pointer as if it owned whole units — freeing its neighbours.
/// Set together with `INCOMPAT_COMPRESSION` (and on opening a pool that has that bit but
/// not this one); packing happens only on pools that carry it.
pub const INCOMPAT_PACKS: u64 = 1 << 9;

/// Data records may be references to deduplicated blocks (DEDUP pointers, the dedup table
/// in the catalog, `format::space::DedupPhys`), and volume records carry a dedup flag. An
/// older build would free a shared block with its first reference. Set when a volume first
/// turns dedup on.
pub const INCOMPAT_DEDUP: u64 = 1 << 10;

/// The intent log lives on a separate log device (`format::logdev`), named by the label's
/// `log_device_guid`. An older build would ignore that field, write its log into the unused
/// in-pool region and never replay the blocks on the log device — losing acknowledged syncs
/// — so it must refuse the pool. Set at creation with a log device; cleared when a missing
/// log device is discarded (`PoolOptions::discard_missing_log`). Bit 16: the txg and
/// intent-log features take bits from 16 up.
pub const INCOMPAT_LOG_DEVICE: u64 = 1 << 16;

/// The pool lives in the logical space of a device set (mirror): its devices start with
/// member labels (`format::member`) and the pool label sits after them. Set at creation on
/// a set. An older build would find no pool label on a member; a build that knows member
/// labels but not this bit must not treat the set's logical space as a plain device (it
/// would read one member and write one, leaving the others stale). Bit 32: the device
/// features take bits from 32 up.
pub const INCOMPAT_DEVICE_SET: u64 = 1 << 32;

/// The pool spans several device groups (`strata pool add`): the labels carry a group table
/// (`format::label::GroupPhys`), and each added group starts with its own space map region
/// for the units it adds. An older build would see only the first group's units: it would
/// write the shared space map chunks without the added units' bits (freeing them) and
/// never read blocks placed there — so it must refuse the pool. Set by the first `pool add`.
pub const INCOMPAT_DEVICE_GROUPS: u64 = 1 << 33;

/// Uberblocks carry the host that wrote them and the pool's state (`host_id`, `pool_state`:
/// active or exported), in bytes that were reserved zeros (`format::uberblock`). A compat
/// feature: older builds never read those bytes, accept such roots, and write zeros there
/// again (which reads as "unknown"), so they may read and write the pool. Set in the labels
/// before the first root that records a host state is written (txg.rs `sync`), and kept:
/// it says the pool has been used by host-aware builds, whose import checks apply to it.
/// Bit 16: the txg and intent-log features take bits from 16 up, in every mask.
pub const COMPAT_HOST_STATE: u64 = 1 << 16;

/// Deleted volumes are freed over several commits: the catalog holds a destroy queue
/// (`format::destroy`, pool/destroy.rs) whose blocks are allocated but in no volume. A
/// read-only-compatible feature: an older build reads the pool fine, but its writes would
/// never free the queue's blocks and its checker would call them leaked. Set in the labels
/// before the first commit that writes a queue entry; kept. Bit 24: the catalog features
/// take bits from 24 up.
pub const RO_COMPAT_ASYNC_DESTROY: u64 = 1 << 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    pub compat: u64,
    pub ro_compat: u64,
    pub incompat: u64,
}

/// What this build may do with a pool carrying `f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    ReadWrite,
    ReadOnly { unknown_ro_compat: u64 },
    Refuse { unknown_incompat: u64 },
}

impl Features {
    pub fn access(&self) -> Access {
        let unknown_incompat = self.incompat & !KNOWN_INCOMPAT;
        if unknown_incompat != 0 {
            return Access::Refuse { unknown_incompat };
        }
        let unknown_ro_compat = self.ro_compat & !KNOWN_RO_COMPAT;
        if unknown_ro_compat != 0 {
            return Access::ReadOnly { unknown_ro_compat };
        }
        Access::ReadWrite
    }
}
