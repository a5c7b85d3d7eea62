//! Strata's deterministic simulator (issue 24; TigerBeetle's VOPR, OpenZFS's ztest):
//! one seed drives a whole run — the workload of several threads on one pool, how they
//! interleave (under `--cfg strata_sim`, see sched.rs), where the power fails, which fault
//! is injected, which crash images are built — and the run checks the
//! acknowledged-state rule on every image (history.rs, check.rs).
//!
//! Scenarios, chosen by the seed:
//! - `mixed` (mixed.rs, 5 seeds in 8): writers (object writes, truncates, punches,
//!   attributes, keys, reads, fsyncs, pool syncs, commits), a committer (commits,
//!   prewrites, syncs) and an admin (snapshots, restores, clones, snapshot and volume
//!   deletes, its own writes) on one pool; the power fails at a random device operation
//!   (or a device write/flush error or a failpoint error is injected instead); then crash
//!   images that drop, keep, or tear and reorder the unflushed writes, and in a quarter of
//!   the seeds one with a rotted bit.
//! - `set` (mixed.rs on a device set, rig.rs; 2 seeds in 8): the same threads on a 2- or
//!   3-way mirror or a parity2 set of 4–6 simulated disks on one power supply, each member
//!   its own scheduled device; up to as many members as the layout tolerates get a fault
//!   (a write, flush or read error, a pulled disk, or bits flipped in what it wrote) at a
//!   random I/O, which the workload must never see; then every member tears its unflushed
//!   writes its own way, the set reopens (sometimes with a faulted or spare member left
//!   out), and a scrub must leave nothing for a second one.
//! - `syncs` (syncs.rs, 1 seed in 8): the scenario of testkit's tests/concurrency.rs.
//!
//! docs/simulator.md says how to run, replay and soak it.

pub mod admin;
pub mod check;
pub mod disk;
pub mod history;
pub mod mixed;
pub mod ops;
pub mod resync;
pub mod rig;
pub mod sched;
pub mod syncs;
pub mod threads;

/// Whether `STRATA_SIM_TRACE` asks for every operation to be printed.
pub fn tracing() -> bool {
    std::env::var_os("STRATA_SIM_TRACE").is_some()
}

/// What one run did (two runs of one seed under the scheduler must be equal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub seed: u64,
    pub scenario: &'static str,
    /// What went wrong besides the power failure.
    pub trouble: String,
    /// Whether an injected fault actually hit.
    pub injected: bool,
    /// Device writes and flushes until the power failed.
    pub device_ops: u64,
    /// Whether the power failed while the workload's threads ran (not after them).
    pub crashed_in_workload: bool,
    /// Of the I/O sequence (disk.rs).
    pub fingerprint: u64,
    /// Crash images reopened and checked.
    pub images: usize,
}

/// Run seed `seed` under the scheduler; panics (naming the seed) if it fails.
pub fn simulate(seed: u64) -> Outcome {
    sched::run_scheduled(seed, move || if seed % 8 == 7 { syncs::run(seed) } else { mixed::run(seed) })
}

/// The command that replays `seed`.
pub fn replay_command(seed: u64) -> String {
    format!("STRATA_SIM_SEED={seed} scripts/sim.sh")
}

/// Run `seed`; on failure, the seed and the command that replays it, then the panic again.
pub fn simulate_reporting(seed: u64) -> Outcome {
    match std::panic::catch_unwind(|| simulate(seed)) {
        Ok(o) => o,
        Err(panic) => {
            eprintln!("\nSIMULATION FAILED: seed {seed}");
            if sched::REPLAYABLE {
                eprintln!("replay it: {}\n", replay_command(seed));
            } else {
                eprintln!(
                    "(built without --cfg strata_sim: the interleaving was the machine's; \
                     {} replays the seed's workload under the scheduler)\n",
                    replay_command(seed)
                );
            }
            std::panic::resume_unwind(panic)
        }
    }
}
