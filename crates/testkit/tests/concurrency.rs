//! Many threads writing and syncing at once (group commit, log writes outside the lock,
//! commits racing with log writes), then power loss: every write a thread saw `sync_log`
//! acknowledge is there after reopening, and the checker is clean.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, Pool, VolumeOptions};
use strata_testkit::{
    iters_from_env, seed_from_env, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng,
};

const THREADS: u64 = 4;
const WRITES: u64 = 150;

fn payload(t: u64, i: u64) -> Vec<u8> {
    (0..512u64).map(|k| (t * 31 + i * 7 + k) as u8).collect()
}

#[test]
fn concurrent_syncs_keep_every_acknowledged_write() {
    let base = seed_from_env(0xC0_0000);
    for seed in base..base + iters_from_env(6) {
        let disk = Arc::new(SimDisk::new(64 << 20, 512));
        let pool = Arc::new(Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).unwrap());
        let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
        let objs: Vec<_> = (0..THREADS).map(|_| pool.create_object(vol, b"").unwrap()).collect();
        pool.commit().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let committer = {
            let (pool, stop) = (pool.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    pool.commit().unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(3));
                }
            })
        };
        // Readers race with writers and commits: reads run outside the pool's lock and must
        // never fail (a block freed and reused under a read is retried, not reported).
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                let (pool, stop, objs) = (pool.clone(), stop.clone(), objs.clone());
                std::thread::spawn(move || {
                    let mut rng = SimRng::new(seed * 1000 + r);
                    let mut reads = 0u64;
                    // At least one read even if the workers finish before this thread runs
                    // (a loaded machine): the assertion below is about reads not failing.
                    loop {
                        let obj = objs[rng.below(THREADS) as usize];
                        let got = pool.read(vol, obj, rng.below(WRITES) * 512, 4096).unwrap();
                        assert!(got.len() <= 4096);
                        reads += 1;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    reads
                })
            })
            .collect();
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, obj) = (pool.clone(), objs[t as usize]);
                std::thread::spawn(move || {
                    let mut rng = SimRng::new(seed * 100 + t);
                    let mut acked = 0;
                    for i in 0..WRITES {
                        pool.write(vol, obj, i * 512, &payload(t, i)).unwrap();
                        if rng.chance(30) {
                            pool.sync_log().unwrap();
                            acked = i + 1;
                        }
                    }
                    acked
                })
            })
            .collect();
        let acked: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        committer.join().unwrap();
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        // Power loss now: only what was flushed survives.
        let mut rng = SimRng::new(seed);
        let image = disk.crash_image(CrashMode::DropUnflushed, &mut rng);
        drop(pool);
        let pool =
            Pool::open(Arc::new(SimDisk::from_image(image, 512)) as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
        assert!(pool.check(CheckOptions::default()).unwrap().is_clean(), "seed {seed}");
        for t in 0..THREADS {
            let obj = objs[t as usize];
            for i in 0..acked[t as usize] {
                let got = pool.read(vol, obj, i * 512, 512).unwrap();
                assert_eq!(got, payload(t, i), "seed {seed}: thread {t} write {i} was acknowledged but is gone");
            }
        }
    }
}
