//! Strata's test kit: what the engine's tests drive it with.
//!
//! - [`SimDisk`]: an in-memory [`BlockDevice`](strata_engine::BlockDevice) that records
//!   writes and flushes, builds crash images, and injects read/write/flush errors and bit rot.
//! - [`SimRng`]: a small seeded generator, so every random test prints its seed and replays.
//! - [`model`]: obviously-right reference models and a reader that captures a pool's
//!   visible state for comparison.

pub mod model;
pub mod rng;
pub mod simdisk;
pub mod workload;

pub use rng::SimRng;
pub use simdisk::{CrashMode, SimDisk};

use std::sync::Arc;
use strata_engine::{ChecksumAlgo, CreateOptions, ManualClock, PoolOptions};

/// Pool options for tests: a manual clock, small caches (so eviction paths run: 64
/// metadata blocks, 256 KiB of data records).
pub fn test_pool_options() -> PoolOptions {
    let mut o = PoolOptions::new(Arc::new(ManualClock::new(1_700_000_000_000_000_000)));
    o.cache_blocks = 64;
    o.data_cache_bytes = 256 << 10;
    o
}

pub fn test_create_options(seed: u64) -> CreateOptions {
    CreateOptions {
        name: "test".into(),
        pool_guid: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        device_guid: 7,
        checksum: ChecksumAlgo::Blake3,
    }
}

/// The seed for a randomized test: `STRATA_SEED` if set (to replay a failure), else `default`.
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var("STRATA_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Iterations for a randomized test: `STRATA_ITERS` if set, else `default`.
pub fn iters_from_env(default: u64) -> u64 {
    std::env::var("STRATA_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}
