//! One seeded run under the scheduler.
//!
//! With `--cfg strata_sim` the body runs under shuttle (crates/engine/src/sync.rs): every
//! thread it spawns through `strata_engine::sync::thread` is a coroutine on this OS thread,
//! and a scheduler seeded with the run's seed picks the next runnable thread at every lock,
//! unlock, wait, notify, atomic access, spawn, join, yield, failpoint and device I/O. Even
//! seeds use shuttle's uniform random scheduler, odd ones PCT (priority-based, which finds
//! bugs that need a few preemptions at the right places more often). The same seed replays
//! the same interleaving, as long as the body depends on nothing but the seed.
//!
//! Without the cfg the body runs on OS threads: the workloads and checks are the same, the
//! interleaving is the machine's and does not replay.

/// Run `body` under the scheduler seeded with `seed`; a panic in any of its threads
/// propagates.
pub fn run_scheduled<T: Send + 'static>(seed: u64, body: impl Fn() -> T + Send + Sync + 'static) -> T {
    #[cfg(strata_sim)]
    {
        use shuttle::scheduler::{PctScheduler, RandomScheduler};
        use std::sync::{Arc, Mutex};
        let out = Arc::new(Mutex::new(None));
        let slot = out.clone();
        let run = move || {
            let v = body();
            *slot.lock().expect("result slot") = Some(v);
        };
        let mut config = shuttle::Config::new();
        // The engine's frames (debug build) and the checker's recursion need more than the
        // default 60 KiB of coroutine stack.
        config.stack_size = 16 << 20;
        config.max_steps = shuttle::MaxSteps::FailAfter(50_000_000);
        // The seed replays the run; shuttle's own schedule string would only repeat it.
        config.failure_persistence = shuttle::FailurePersistence::None;
        // Its note that it models every atomic as SeqCst: the engine's Relaxed counters
        // are statistics, and its one Relaxed flag (failpoint.rs) is read under a lock.
        config.silence_warnings = true;
        if seed.is_multiple_of(2) {
            shuttle::Runner::new(RandomScheduler::new_from_seed(seed, 1), config).run(run);
        } else {
            shuttle::Runner::new(PctScheduler::new_from_seed(seed, 3, 1), config).run(run);
        }
        let v = out.lock().expect("result slot").take();
        v.expect("the scheduled run finished")
    }
    #[cfg(not(strata_sim))]
    {
        let _ = seed;
        body()
    }
}

/// Whether runs replay their interleaving from the seed (built with `--cfg strata_sim`).
pub const REPLAYABLE: bool = cfg!(strata_sim);
