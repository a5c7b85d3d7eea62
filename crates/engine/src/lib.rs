//! Strata's storage engine: a crash-safe copy-on-write pool of volumes and objects.
//!
//! Layers, bottom up (DESIGN.md §2), one module each:
//! `device` (BlockDevice, file-backed) → `alloc` (free space, space map, deferred frees) →
//! `pipeline` (checksum, allocate, write; read, verify) → `tree` (CoW B+tree and per-object
//! block trees) → `txg` (commit protocol, uberblock ring) → `volume` + `pool` (catalog,
//! objects, key-value space) → `check` (the offline checker). `format` holds every on-disk
//! structure.
//!
//! The engine has no FUSE, NFS or HTTP dependency and reads neither the wall clock nor OS
//! randomness: time comes through [`Clock`], identities through [`CreateOptions`].

pub mod alloc;
pub mod cache;
pub mod check;
pub mod clock;
pub mod clone;
pub mod compress;
pub mod dedup;
pub mod device;
pub mod error;
pub mod failpoint;
pub mod format;
pub mod host_state;
pub mod intent_log;
mod intent_log_ref;
mod intent_log_replay;
pub mod log_device;
mod log_sync;
pub mod pipeline;
pub mod pool;
pub mod pool_status;
pub mod prewrite;
mod quiesce;
pub mod restore;
pub mod snapshot;
pub mod space;
pub mod sync;
pub mod tree;
pub mod txg;
pub mod txn;
pub mod volume;

pub use check::{CheckOptions, CheckReport};
pub use clock::{Clock, ManualClock};
pub use clone::SplitStats;
pub use compress::CompressionPolicy;
pub use device::{BlockDevice, FileDevice, FileDeviceOptions};
pub use error::{Corruption, Error, ErrorKind, NoSpace, Result, SpaceReason};
pub use format::uberblock::HostState;
pub use format::ChecksumAlgo;
pub use host_state::{read_pool_identity, PoolIdentity};
pub use log_device::LogDeviceSpec;
pub use pool::{
    CommitStats, CreateOptions, Pool, PoolOptions, PoolStatus, SyncPolicy, VolumeId, VolumeInfo, VolumeOptions,
};
pub use prewrite::PrewriteStats;
pub use quiesce::QuiescingTxg;
pub use restore::FileRestoreStats;
pub use snapshot::{SnapshotInfo, SNAPSHOTS_PER_VOLUME_MAX};
pub use space::{PoolSpace, VolumeSpace};
pub use txn::{SpaceInfo, Txn};
pub use volume::ObjectId;
