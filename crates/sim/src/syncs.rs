//! The scenario of crates/testkit/tests/concurrency.rs under the scheduler: writers
//! appending 512-byte records to their own objects and syncing the pool (group commit,
//! log writes outside the lock), a committer racing with the log writes, readers racing
//! with both; then power loss: every write a thread saw `sync_log` acknowledge is there
//! after reopening, and the checker is clean. Here the interleaving replays from the seed.

use crate::check::SECTOR;
use crate::Outcome;
use std::sync::Arc;
use strata_engine::sync::atomic::{AtomicBool, Ordering};
use strata_engine::sync::thread;
use strata_engine::{BlockDevice, CheckOptions, Pool, VolumeOptions};
use strata_testkit::{test_create_options, test_pool_options, CrashMode, SimDisk, SimRng};

const THREADS: u64 = 3;
const WRITES: u64 = 40;
/// Commits and reads per thread at most: under PCT's priorities a thread spinning until the
/// writers are done could starve them forever.
const SPINS_MAX: u64 = 150;

fn payload(t: u64, i: u64) -> Vec<u8> {
    (0..512u64).map(|k| (t * 31 + i * 7 + k) as u8).collect()
}

pub fn run(seed: u64) -> Outcome {
    let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
    let dev = Arc::new(crate::disk::SimDevice::new(disk.clone(), crate::disk::Fault::None));
    let pool = Arc::new(Pool::create(dev.clone(), test_create_options(seed), test_pool_options()).expect("create"));
    let vol = pool.create_volume("v", &VolumeOptions::default()).expect("create a volume");
    let objs: Vec<_> = (0..THREADS).map(|_| pool.create_object(vol, b"").expect("create an object")).collect();
    pool.commit().expect("commit the setup");
    let stop = Arc::new(AtomicBool::new(false));
    let committer = {
        let (pool, stop) = (pool.clone(), stop.clone());
        thread::spawn(move || {
            for _ in 0..SPINS_MAX {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                pool.commit().expect("a commit");
                thread::yield_now();
            }
        })
    };
    // Reads run outside the pool's lock and must never fail (a block freed and reused
    // under a read is read again, not reported).
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (pool, stop, objs) = (pool.clone(), stop.clone(), objs.clone());
            thread::spawn(move || {
                let mut rng = SimRng::new(seed * 1000 + r);
                let mut reads = 0u64;
                loop {
                    let obj = objs[rng.below(THREADS) as usize];
                    let got = pool.read(vol, obj, rng.below(WRITES) * 512, 4096).expect("a read");
                    assert!(got.len() <= 4096);
                    reads += 1;
                    if stop.load(Ordering::SeqCst) || reads == SPINS_MAX {
                        break reads;
                    }
                }
            })
        })
        .collect();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (pool, obj) = (pool.clone(), objs[t as usize]);
            thread::spawn(move || {
                let mut rng = SimRng::new(seed * 100 + t);
                let mut acked = 0;
                for i in 0..WRITES {
                    pool.write(vol, obj, i * 512, &payload(t, i)).expect("a write");
                    if rng.chance(30) {
                        pool.sync_log().expect("a sync");
                        acked = i + 1;
                    }
                }
                acked
            })
        })
        .collect();
    let acked: Vec<u64> = workers.into_iter().map(|w| w.join().expect("a writer")).collect();
    stop.store(true, Ordering::SeqCst);
    committer.join().expect("the committer");
    for r in readers {
        assert!(r.join().expect("a reader") > 0);
    }
    // Power loss now: only what was flushed survives, or torn and reordered writes.
    let mut rng = SimRng::new(seed);
    let modes = [CrashMode::DropUnflushed, CrashMode::Random];
    for mode in modes {
        let image = disk.crash_image(mode, &mut rng);
        let pool =
            Pool::open(Arc::new(SimDisk::from_image(image, SECTOR)) as Arc<dyn BlockDevice>, test_pool_options())
                .unwrap_or_else(|e| panic!("seed {seed}: the {mode:?} image does not open: {e}"));
        let report = pool.check(CheckOptions::default()).expect("the checker runs");
        assert!(report.is_clean(), "seed {seed}: {mode:?}: {:#?}", report.errors);
        for t in 0..THREADS {
            let obj = objs[t as usize];
            for i in 0..acked[t as usize] {
                let got = pool.read(vol, obj, i * 512, 512).expect("a read after the crash");
                assert_eq!(
                    got,
                    payload(t, i),
                    "seed {seed}: {mode:?}: thread {t} write {i} was acknowledged but is gone"
                );
            }
        }
    }
    Outcome {
        seed,
        scenario: "syncs",
        trouble: "power loss after the workload".into(),
        injected: false,
        device_ops: disk.op_count(),
        crashed_in_workload: false,
        fingerprint: dev.fingerprint(),
        images: modes.len(),
    }
}
