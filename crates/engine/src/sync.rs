//! The engine's concurrency primitives, in one place: every mutex, guard, condition
//! variable, atomic and thread the engine (and the simulator's workloads) uses comes from
//! here, so that a seeded scheduler can replay an interleaving (STYLE.md "Concurrency and
//! failure"; TigerBeetle's VOPR, OpenZFS's ztest).
//!
//! - An ordinary build re-exports `std`: zero cost, the same types.
//! - A build with `RUSTFLAGS="--cfg strata_sim"` (scripts/sim.sh, crates/sim) re-exports
//!   the `shuttle` crate's versions instead. Shuttle runs every thread as a coroutine on one
//!   OS thread and, at every lock, unlock, wait, notify, atomic access, spawn, join and
//!   yield, lets a seeded scheduler pick which runnable thread goes next: the same seed
//!   gives the same interleaving. Its mutex keeps std's poisoning (`PoisonError`,
//!   `clear_poison`), which the pool's failure policy relies on (quiesce.rs
//!   `latch_if_poisoned`).
//!
//! A `cfg`, not a cargo feature: with feature unification, one crate of the workspace
//! asking for the simulated primitives would hand them to the daemon in the ordinary test
//! build (loom's `--cfg loom` is the same choice).
//!
//! Determinism also needs the engine's behaviour not to depend on anything but the seed:
//! it reads no clock or OS randomness (time comes through `Clock`); the number of
//! compression helpers comes from [`thread::available_parallelism`], fixed under the
//! simulator; and no decision depends on the iteration order of a `HashMap` (their
//! iterations free blocks into bitmaps, sum, or are sorted first: docs/simulator.md).
//!
//! Lock order: `Pool::commit_gate`, then `Pool::inner` (the pool's lock), then a
//! `PrewriteBatch`'s state or the block I/O's batch and caches (pipeline.rs). A failpoint's
//! own lock (failpoint.rs) is taken with none of these held, except `commit_gate` at
//! `commit.freeze_to_sync`; a paused failpoint therefore never holds up the pool's lock.

#[cfg(not(strata_sim))]
pub use std::sync::{Condvar, LockResult, Mutex, MutexGuard, PoisonError};

#[cfg(strata_sim)]
pub use shuttle::sync::{Condvar, LockResult, Mutex, MutexGuard, PoisonError};

/// Atomics: std's, or the simulator's (each access a scheduling point).
pub mod atomic {
    #[cfg(strata_sim)]
    pub use shuttle::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
    pub use std::sync::atomic::Ordering;
    #[cfg(not(strata_sim))]
    pub use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
}

/// Threads: std's, or the simulator's.
pub mod thread {
    #[cfg(strata_sim)]
    pub use shuttle::thread::{scope, spawn, yield_now, JoinHandle, Scope, ScopedJoinHandle};
    #[cfg(not(strata_sim))]
    pub use std::thread::{scope, spawn, yield_now, JoinHandle, Scope, ScopedJoinHandle};

    /// The threads worth running at once: the machine's cores; under the simulator a fixed
    /// 2, so that a seed replays the same on any machine.
    pub fn available_parallelism() -> usize {
        if cfg!(strata_sim) {
            2
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// Whether this build runs under the simulator's scheduler (`--cfg strata_sim`).
    pub const SIMULATED: bool = cfg!(strata_sim);
}
