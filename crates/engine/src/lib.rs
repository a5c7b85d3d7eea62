//! Strata's storage engine: a crash-safe copy-on-write pool of volumes and objects.
//!
//! Layers, bottom up (DESIGN.md §2), one folder each: `format` (every on-disk structure)
//! → `device` (BlockDevice, file-backed) → `alloc` (free space, space map, deferred frees)
//! → `pipeline` (compress, checksum, dedup, allocate, write; read, verify, caches) → `tree`
//! (CoW B+tree and per-object block trees) → `txg` (commit protocol, uberblock ring, intent
//! log) → `catalog` (volumes: records, object sets, dirty state) → `pool` (the public
//! face: commits, snapshots, clones, restores, destroy, intent-log sync and replay) →
//! `check` (the offline checker) → `repl` (send/receive streams for mirrors). Each imports
//! only the layers before it and the foundations (`error`, `clock`, `sync`, `failpoint`);
//! `tests/layers.rs` fails otherwise.
//!
//! The engine has no FUSE, NFS or HTTP dependency and reads neither the wall clock nor OS
//! randomness: time comes through [`Clock`], identities through [`CreateOptions`].

// Foundations, usable from every layer.
pub mod clock;
pub mod error;
pub mod failpoint;
pub mod sync;

// The layers (in their order above; rustfmt sorts these lines).
pub mod alloc;
pub mod catalog;
pub mod check;
pub mod device;
pub mod format;
pub mod pipeline;
pub mod pool;
pub mod repl;
pub mod tree;
pub mod txg;

pub use catalog::volume::ObjectId;
pub use check::{CheckOptions, CheckReport, ScrubOutcome};
pub use clock::{Clock, ManualClock};
pub use device::{
    read_member_identity, BlockDevice, FileDevice, FileDeviceOptions, GroupedDevice, MemberIdentity, MemberState,
    MemberStatus, MirrorDevice, SetHealth, SetStatus, PARITY2_MEMBERS,
};
pub use error::{Corruption, Error, ErrorKind, NoSpace, Result, SpaceReason};
pub use format::member::Layout;
pub use format::uberblock::HostState;
pub use format::ChecksumAlgo;
pub use pipeline::compress::CompressionPolicy;
pub use pool::clone::SplitStats;
pub use pool::control::{WalkBookmark, WalkControl};
pub use pool::guard::{PoolGuard, SpaceInfo};
pub use pool::host_state::{read_pool_identity, PoolIdentity};
pub use pool::log_device::LogDeviceSpec;
pub use pool::prewrite::PrewriteStats;
pub use pool::restore::FileRestoreStats;
pub use pool::snapshot::{SnapshotInfo, SNAPSHOTS_PER_VOLUME_MAX};
pub use pool::space::{PoolSpace, VolumeSpace};
pub use pool::{
    CommitStats, CreateOptions, Pool, PoolOptions, PoolStatus, QuiescingTxg, SyncPolicy, VolumeId, VolumeInfo,
    VolumeOptions,
};
