//! Strata's test kit: what the engine's tests drive it with.
//!
//! - [`SimDisk`]: an in-memory [`BlockDevice`](strata_engine::BlockDevice) that records
//!   writes and flushes, builds crash images, and injects read/write/flush errors and bit rot.
//! - [`SimRng`]: a small seeded generator, so every random test prints its seed and replays
//!   ([`run_seeds`]).
//! - [`damage`]: damage that checksums cannot see (a decoded structure changed and every
//!   checksum above it repaired), and a pass that meets it with the checker and the commit.
//! - [`model`]: obviously-right reference models and a reader that captures a pool's
//!   visible state for comparison.

pub mod damage;
pub mod devset;
pub mod model;
pub mod rng;
pub mod simdisk;
pub mod workload;

pub use rng::SimRng;
pub use simdisk::{CrashMode, PowerLost, SimDisk, SimPower};

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

/// Whether `STRATA_SEED` is set: a run replays one seed, so assertions about what many
/// seeds covered do not apply.
pub fn replaying_seed() -> bool {
    std::env::var("STRATA_SEED").is_ok()
}

/// Run a randomized test `f` once per seed: `default_base`, `default_base + 1`, ...
/// (`STRATA_ITERS` seeds, else `default_iters`), or only `STRATA_SEED` if set. A seed that
/// fails (panics) is named, with how to replay it.
pub fn run_seeds(name: &str, default_base: u64, default_iters: u64, f: impl Fn(u64)) {
    let base = seed_from_env(default_base);
    let iters = if replaying_seed() { 1 } else { iters_from_env(default_iters) };
    for i in 0..iters {
        let seed = base.wrapping_add(i);
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(seed))).is_err() {
            panic!("{name} failed with seed {seed}: replay with STRATA_SEED={seed}");
        }
    }
}

/// Whether an engine error is the simulated power failure of a [`SimDisk`] (an I/O error
/// whose source is [`PowerLost`]) rather than anything else: an injected EIO, corruption,
/// no space, a refusal. Crash tests stop at the power failure and fail on anything else.
pub fn is_power_failure(e: &strata_engine::Error) -> bool {
    matches!(e, strata_engine::Error::Io { source, .. } if simdisk::is_power_lost(source))
}

/// Assert that `e` is the simulated power failure of `disk`, and that the disk did refuse
/// an I/O for lack of power: any other error is a failure of the test, with its seed.
pub fn assert_power_failure(e: &strata_engine::Error, disk: &SimDisk, seed: u64, during: &str) {
    assert!(is_power_failure(e), "seed {seed}: {during} failed, and not because the power went: {e}");
    assert!(disk.refused_ios() > 0, "seed {seed}: {during} returned a power failure the disk never produced: {e}");
}
