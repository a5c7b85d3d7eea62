//! Crash consistency: random workloads on the simulated disk lose power at random
//! instants — between operations, inside commits (before, during and after the block
//! writes, flushes and uberblock writes) — and the crash image drops, reorders or tears
//! (at 512-byte sectors) whatever was not flushed. Every image must reopen, pass the
//! checker, and show exactly the state of one committed txg: the newest one whose commit
//! returned, or the one that was being committed when the power went. The power failure is
//! the only error a workload may meet: any other error fails the test (a regression that
//! makes an operation fail must not pass as an early crash), and every run must have lost
//! power.
//! Seeds print on failure; replay with STRATA_SEED=<seed>.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, ErrorKind, Pool, VolumeId, VolumeOptions};
use strata_testkit::model::{assert_last_acknowledged_sync, capture, PoolModel, VolumeModel};
use strata_testkit::workload::{object_op, random_policy};
use strata_testkit::{
    assert_power_failure, replaying_seed, run_seeds, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng,
};

/// How crashes fell: [reopened at the acknowledged txg with a commit in flight,
/// reopened at the in-flight txg (its root landed), crashed with no commit in flight].
static OUTCOMES: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

const SECTOR: usize = 512;

struct Run {
    pool: Pool,
    vols: Vec<(String, VolumeId)>,
    model: PoolModel,
}

fn setup(rng: &mut SimRng, disk: &Arc<SimDisk>, seed: u64) -> Run {
    let pool = Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).unwrap();
    let mut model = PoolModel::default();
    let mut vols = Vec::new();
    for name in ["a", "b"] {
        let rs = *rng.pick(&[4096u32, 16384, 32768]);
        // Random compression per volume: crash images then hold compressed records too.
        let compression = random_policy(rng);
        let id = pool
            .create_volume(name, &VolumeOptions { record_size: rs, quota_bytes: 0, compression, ..Default::default() })
            .unwrap();
        model.volumes.insert(name.into(), VolumeModel { record_size: rs, ..Default::default() });
        vols.push((name.to_string(), id));
    }
    pool.commit().unwrap();
    Run { pool, vols, model }
}

/// A commit step of the workload; Err when the device has failed under it.
fn commit_step(
    run: &mut Run,
    committed: &mut BTreeMap<u64, PoolModel>,
    acked: &mut u64,
) -> Result<(), strata_engine::Error> {
    let expected = run.pool.committed_root().txg + 1;
    // Until commit returns, the state being committed may or may not be the one found.
    committed.insert(expected, run.model.clone());
    let txg = run.pool.commit()?;
    assert!(txg == expected || txg == expected - 1, "commit returned txg {txg}, expected {expected}");
    if txg == expected - 1 {
        committed.remove(&expected); // nothing was dirty
    }
    *acked = txg;
    Ok(())
}

/// One step of the workload; Err when the device has failed under it.
fn step(
    rng: &mut SimRng,
    run: &mut Run,
    committed: &mut BTreeMap<u64, PoolModel>,
    acked: &mut u64,
) -> Result<(), strata_engine::Error> {
    if rng.chance(12) {
        return commit_step(run, committed, acked);
    }
    if rng.chance(8) {
        // Data written ahead of its commit (and then often changed): a crash must find
        // the last committed state, the prewritten blocks free and unreferenced.
        return run.pool.prewrite().map(|_| ());
    }
    let (name, vol) = run.vols[rng.below(run.vols.len() as u64) as usize].clone();
    object_op(rng, &run.pool, vol, run.model.volumes.get_mut(&name).unwrap())
}

fn verify_image(
    image: Vec<u8>,
    committed: &BTreeMap<u64, PoolModel>,
    acked: u64,
    seed: u64,
) -> (Arc<SimDisk>, Pool, PoolModel) {
    let disk = Arc::new(SimDisk::from_image(image, SECTOR));
    let pool = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options())
        .unwrap_or_else(|e| panic!("seed {seed}: crash image does not open: {e}"));
    let txg = pool.committed_root().txg;
    assert!(txg >= acked, "seed {seed}: reopened at txg {txg}, but txg {acked} was acknowledged");
    let report = pool.check(CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "seed {seed}: checker after crash: {:#?}", report.errors);
    let in_flight = committed.keys().next_back().is_some_and(|&t| t > acked);
    let outcome = if !in_flight {
        2
    } else if txg > acked {
        1
    } else {
        0
    };
    OUTCOMES[outcome].fetch_add(1, Ordering::Relaxed);
    let want = committed.get(&txg).unwrap_or_else(|| panic!("seed {seed}: reopened at txg {txg}, never committed"));
    let seen = capture(&pool).unwrap();
    assert!(&seen == want, "seed {seed}: state at txg {txg} differs: {}", want.diff(&seen).unwrap());
    let model = want.clone();
    (disk, pool, model)
}

#[test]
fn crash_anywhere_reopens_at_a_committed_state() {
    crash_anywhere_reopens_at_a_committed_state_inner(0xC4A5_0000, 150);
}

fn crash_anywhere_reopens_at_a_committed_state_inner(base: u64, default_iters: u64) {
    run_seeds("crash_anywhere_reopens_at_a_committed_state", base, default_iters, |seed| {
        let mut rng = SimRng::new(seed);
        let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
        let mut run = setup(&mut rng, &disk, seed);
        let mut committed = BTreeMap::new();
        committed.insert(run.pool.committed_root().txg, run.model.clone());
        let mut acked = run.pool.committed_root().txg;
        let ops = rng.range(20, 150);
        let crash_op = rng.below(ops);
        for i in 0..ops {
            if i == crash_op {
                // Power fails after a few more device operations: often inside a commit.
                disk.set_crash_after(rng.below(60));
            }
            if let Err(e) = step(&mut rng, &mut run, &mut committed, &mut acked) {
                assert_power_failure(&e, &disk, seed, &format!("workload step {i}"));
                break;
            }
        }
        if !disk.has_crashed() {
            // The workload ended first: keep writing and committing until the power goes.
            loop {
                if let Err(e) = commit_step(&mut run, &mut committed, &mut acked) {
                    assert_power_failure(&e, &disk, seed, "a commit after the workload");
                    break;
                }
                if disk.has_crashed() {
                    break;
                }
                let (name, vol) = run.vols[0].clone();
                if let Err(e) = object_op(&mut rng, &run.pool, vol, run.model.volumes.get_mut(&name).unwrap()) {
                    assert_power_failure(&e, &disk, seed, "an operation after the workload");
                    break;
                }
            }
        }
        assert!(disk.has_crashed(), "seed {seed}: the run ended without losing power");
        let mode = *rng.pick(&[CrashMode::Random, CrashMode::Random, CrashMode::DropUnflushed, CrashMode::KeepAll]);
        let image = disk.crash_image(mode, &mut rng);
        drop(run.pool);
        let (_disk2, pool, model) = verify_image(image, &committed, acked, seed);
        // Life goes on after recovery: new writes, commit, check, reopen.
        let mut run = Run {
            pool,
            vols: vec![("a".into(), strata_engine::VolumeId(1)), ("b".into(), strata_engine::VolumeId(2))],
            model,
        };
        for (name, id) in run.vols.clone() {
            assert_eq!(run.pool.volume_id(&name).unwrap(), id);
        }
        for _ in 0..30 {
            let (name, vol) = run.vols[rng.below(2) as usize].clone();
            object_op(&mut rng, &run.pool, vol, run.model.volumes.get_mut(&name).unwrap()).unwrap();
        }
        run.pool.commit().unwrap();
        let report = run.pool.check(CheckOptions::default()).unwrap();
        assert!(report.is_clean(), "seed {seed}: checker after recovery and more work: {:#?}", report.errors);
        let seen = capture(&run.pool).unwrap();
        assert!(seen == run.model, "seed {seed}: after recovery: {}", run.model.diff(&seen).unwrap());
    });
}

#[test]
fn crash_outcomes_cover_every_case() {
    // The main crash test must have lost power inside commits, on both sides of the root
    // write; otherwise it proves less than it claims. (Runs after it: same binary, and
    // this test waits for the counters.)
    crash_anywhere_reopens_at_a_committed_state_inner(0xC4A5_1000, 60);
    let o: Vec<u64> = OUTCOMES.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    // One replayed seed cannot cover every case.
    if !replaying_seed() {
        assert!(o[0] > 0 && o[1] > 0, "crash outcomes {o:?}: commits in flight must both land and not land");
    }
}

#[test]
fn crash_during_pool_creation_is_refused_clearly_or_empty() {
    run_seeds("crash_during_pool_creation", 0xC4A5_2000, 40, |seed| {
        let mut rng = SimRng::new(seed);
        let disk = Arc::new(SimDisk::new(16 << 20, SECTOR));
        disk.set_crash_after(rng.below(12));
        let created = match Pool::create(disk.clone(), test_create_options(seed), test_pool_options()) {
            Ok(_) => true,
            Err(e) => {
                assert_power_failure(&e, &disk, seed, "pool creation");
                false
            }
        };
        assert!(created || disk.has_crashed(), "seed {seed}: creation failed with the power on");
        let image = disk.crash_image(CrashMode::Random, &mut rng);
        let disk2 = Arc::new(SimDisk::from_image(image, SECTOR));
        match Pool::open(disk2 as Arc<dyn BlockDevice>, test_pool_options()) {
            Ok(pool) => {
                assert!(pool.volumes().is_empty());
                assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
            }
            Err(e) => {
                assert!(!created, "seed {seed}: create returned Ok but the pool does not open: {e}");
                assert_eq!(e.kind(), ErrorKind::Corruption, "seed {seed}: {e}");
            }
        }
    });
}

/// The intent log under power loss: operations acknowledged by `sync_log` (what fsync
/// calls) survive exactly once and in order; the recovered state is the one at the last
/// acknowledged sync, or at the sync in flight — never a mix, never a later unsynced state.
#[test]
fn intent_log_keeps_every_acknowledged_sync() {
    run_seeds("intent_log_keeps_every_acknowledged_sync", 0x1A7E_0000, 150, |seed| {
        let mut rng = SimRng::new(seed);
        let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
        let mut run = setup(&mut rng, &disk, seed);
        let mut synced = vec![run.model.clone()];
        let mut acked = 0usize;
        let ops = rng.range(20, 150);
        let crash_op = rng.below(ops);
        for i in 0..ops {
            if i == crash_op {
                disk.set_crash_after(rng.below(30));
            }
            if rng.chance(15) {
                synced.push(run.model.clone());
                let r = if rng.chance(20) { run.pool.commit().map(|_| ()) } else { run.pool.sync_log() };
                match r {
                    Ok(()) => acked = synced.len() - 1,
                    Err(e) => {
                        assert_power_failure(&e, &disk, seed, &format!("sync or commit at step {i}"));
                        break;
                    }
                }
            } else {
                let (name, vol) = run.vols[rng.below(2) as usize].clone();
                if let Err(e) = object_op(&mut rng, &run.pool, vol, run.model.volumes.get_mut(&name).unwrap()) {
                    assert_power_failure(&e, &disk, seed, &format!("workload step {i}"));
                    break;
                }
            }
        }
        if !disk.has_crashed() {
            // The workload ended with the power on: it goes now.
            disk.set_crash_after(0);
        }
        let mode = *rng.pick(&[CrashMode::Random, CrashMode::DropUnflushed, CrashMode::KeepAll]);
        let image = disk.crash_image(mode, &mut rng);
        drop(run.pool);
        let disk2 = Arc::new(SimDisk::from_image(image, SECTOR));
        let pool = Pool::open(disk2 as Arc<dyn BlockDevice>, test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: does not open after the crash: {e}"));
        if assert_last_acknowledged_sync(&pool, &synced, acked, seed) {
            LOG_REPLAYS.fetch_add(1, Ordering::Relaxed);
        }
    });
    // The log must actually have been replayed in many of those crashes.
    if !replaying_seed() {
        assert!(LOG_REPLAYS.load(Ordering::Relaxed) > 0, "no crash image needed the intent log");
    }
}

static LOG_REPLAYS: AtomicU64 = AtomicU64::new(0);
