//! Property tests against obviously-right models: the keyed B+tree (through a volume's
//! key-value space) against a BTreeMap, and object data against a Vec<u8> per object
//! (under random compression policies that change mid-run).
//! Thousands of random operation sequences; each prints its seed on failure
//! (replay with STRATA_SEED=<seed>; scale with STRATA_ITERS=<n>).

use std::collections::BTreeMap;
use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, Pool, VolumeOptions};
use strata_testkit::model::{capture, PoolModel, VolumeModel};
use strata_testkit::workload::{object_op, random_policy};
use strata_testkit::{iters_from_env, seed_from_env, test_create_options, test_pool_options, SimDisk, SimRng};

fn run_seeds(name: &str, default_iters: u64, f: impl Fn(u64)) {
    let base = seed_from_env(0x5EED_0000);
    let iters = if std::env::var("STRATA_SEED").is_ok() { 1 } else { iters_from_env(default_iters) };
    for i in 0..iters {
        let seed = base.wrapping_add(i);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(seed)));
        if r.is_err() {
            panic!("{name} failed with seed {seed}: replay with STRATA_SEED={seed}");
        }
    }
}

fn random_key(rng: &mut SimRng) -> Vec<u8> {
    // A small alphabet and short keys make collisions (replace, remove hits) common.
    let max = if rng.chance(10) { 200 } else { 12 };
    let len = rng.range(1, max) as usize;
    (0..len).map(|_| b'a' + rng.below(4) as u8).collect()
}

fn random_value(rng: &mut SimRng) -> Vec<u8> {
    let len = match rng.below(10) {
        0 => 0,
        1..=2 => rng.range(1000, 3072),
        _ => rng.below(64),
    } as usize;
    rng.bytes(len)
}

#[test]
fn btree_matches_btreemap() {
    run_seeds("btree_matches_btreemap", 300, |seed| {
        let mut rng = SimRng::new(seed);
        let disk = Arc::new(SimDisk::new(48 << 20, 4096));
        let mut pool = Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).unwrap();
        let vol = pool.create_volume("kv", &VolumeOptions::default()).unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let ops = rng.range(50, 400);
        for _ in 0..ops {
            match rng.below(100) {
                0..=54 => {
                    let (k, v) = (random_key(&mut rng), random_value(&mut rng));
                    assert_eq!(pool.kv_put(vol, &k, &v).unwrap(), model.insert(k, v));
                }
                55..=79 => {
                    let k = if rng.chance(70) && !model.is_empty() {
                        model.keys().nth(rng.below(model.len() as u64) as usize).unwrap().clone()
                    } else {
                        random_key(&mut rng)
                    };
                    assert_eq!(pool.kv_delete(vol, &k).unwrap(), model.remove(&k));
                }
                80..=87 => {
                    let k = random_key(&mut rng);
                    assert_eq!(pool.kv_get(vol, &k).unwrap(), model.get(&k).cloned());
                }
                88..=93 => {
                    let (a, b) = (random_key(&mut rng), random_key(&mut rng));
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    let limit = rng.range(1, 50) as usize;
                    let want: Vec<_> =
                        model.range(lo.clone()..hi.clone()).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect();
                    assert_eq!(pool.kv_range(vol, &lo, Some(&hi), limit).unwrap(), want);
                }
                94..=97 => {
                    pool.commit().unwrap();
                }
                _ => {
                    pool.commit().unwrap();
                    drop(pool);
                    pool = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
                }
            }
        }
        let all = pool.kv_range(vol, &[], None, usize::MAX).unwrap();
        assert_eq!(all, model.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>());
        pool.commit().unwrap();
        let report = pool.check(CheckOptions::default()).unwrap();
        assert!(report.is_clean(), "seed {seed}: {:#?}", report.errors);
    });
}

#[test]
fn objects_match_byte_arrays() {
    run_seeds("objects_match_byte_arrays", 200, |seed| {
        let mut rng = SimRng::new(seed);
        let disk = Arc::new(SimDisk::new(64 << 20, 4096));
        let mut pool = Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).unwrap();
        let rs = *rng.pick(&[4096u32, 16384, 65536]);
        let compression = random_policy(&mut rng);
        let vol = pool
            .create_volume(
                "data",
                &VolumeOptions { record_size: rs, quota_bytes: 0, compression, ..Default::default() },
            )
            .unwrap();
        let mut model = PoolModel::default();
        model.volumes.insert("data".into(), VolumeModel { record_size: rs, ..Default::default() });
        let ops = rng.range(30, 200);
        for _ in 0..ops {
            match rng.below(100) {
                0..=4 => {
                    pool.commit().unwrap();
                }
                5..=6 => {
                    pool.commit().unwrap();
                    drop(pool);
                    pool = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
                }
                // The policy changes mid-life: records written before keep theirs.
                7 => pool.set_compression(vol, random_policy(&mut rng)).unwrap(),
                // Data written ahead of the commit; the ops that follow change some of it.
                8..=10 => {
                    pool.prewrite().unwrap();
                }
                _ => object_op(&mut rng, &pool, vol, model.volumes.get_mut("data").unwrap()).unwrap(),
            }
        }
        let seen = capture(&pool).unwrap();
        assert!(seen == model, "seed {seed}: {}", model.diff(&seen).unwrap());
        pool.commit().unwrap();
        let report = pool.check(CheckOptions::default()).unwrap();
        assert!(report.is_clean(), "seed {seed}: {:#?}", report.errors);
        drop(pool);
        let pool = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
        let seen = capture(&pool).unwrap();
        assert!(seen == model, "after reopen, seed {seed}: {}", model.diff(&seen).unwrap());
    });
}
