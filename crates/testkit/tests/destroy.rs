//! Async destroy (pool/destroy.rs): a deleted volume leaves at once and its blocks come
//! back over the following commits; a crash anywhere in between resumes where the last
//! commit left off. The checker accounts for the queue after every commit.
//! (Mutation checks, run once: resuming without skipping `freed_data` fails the crash test
//! with a double free; freeing metadata with the data fails it on the walk after the
//! reopen; a checker that ignores the queue reports its blocks as leaked.)

use std::sync::Arc;
use strata_engine::format::features::{Access, Features, RO_COMPAT_ASYNC_DESTROY};
use strata_engine::{BlockDevice, CheckOptions, Pool, PoolOptions, VolumeOptions};
use strata_testkit::{
    assert_power_failure, run_seeds, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng,
};

fn options(frees_per_txg: usize) -> PoolOptions {
    PoolOptions { destroy_frees_per_txg: frees_per_txg, ..test_pool_options() }
}

fn assert_clean(pool: &Pool, ctx: &str) {
    let r = pool.check(CheckOptions::default()).expect("check runs");
    assert!(r.is_clean(), "{ctx}: checker found {:#?}", r.errors);
}

/// A volume with data, two snapshots between overwrites (so deadlists hold entries), a
/// dedup'd copy and a second object; `keep` is written too and must survive.
fn fill(pool: &Pool, rng: &mut SimRng, name: &str) {
    let vol = pool.create_volume(name, &VolumeOptions::default()).unwrap();
    pool.set_dedup(vol, true).unwrap();
    let a = pool.create_object(vol, b"a").unwrap();
    let b = pool.create_object(vol, b"b").unwrap();
    let data = rng.bytes(48 * 16384);
    pool.write(vol, a, 0, &data).unwrap();
    pool.write(vol, b, 0, &data[..16 * 16384]).unwrap(); // dedup references
    pool.commit().unwrap();
    pool.create_snapshots(&[name], "one").unwrap();
    for i in 0..12u64 {
        pool.write(vol, a, i * 3 * 16384, &[i as u8 + 1; 16384]).unwrap();
    }
    pool.commit().unwrap();
    pool.create_snapshots(&[name], "two").unwrap();
    pool.truncate(vol, a, 20 * 16384).unwrap();
    pool.commit().unwrap();
}

#[test]
fn a_deleted_volume_is_freed_over_several_commits() {
    let disk = Arc::new(SimDisk::new(64 << 20, 4096));
    let pool = Pool::create(disk, test_create_options(5), options(16)).unwrap();
    let keep = pool.create_volume("keep", &VolumeOptions::default()).unwrap();
    let k = pool.create_object(keep, b"").unwrap();
    pool.write(keep, k, 0, b"still here").unwrap();
    pool.commit().unwrap();
    let baseline = pool.status().allocated_bytes;
    fill(&pool, &mut SimRng::new(1), "db");
    let full = pool.status().allocated_bytes;
    assert_eq!(pool.status().space.destroying_bytes, 0);

    pool.delete_volume("db").unwrap();
    assert!(pool.volume_id("db").is_err(), "gone from the namespace at once");
    let mut left = pool.status().space.destroying_bytes;
    assert!(left > 0 && left <= full - baseline, "queued: {left} of {} bytes", full - baseline);
    let mut commits = 0;
    while pool.status().space.destroying_bytes > 0 {
        pool.commit().unwrap();
        commits += 1;
        assert_clean(&pool, &format!("after destroy commit {commits}"));
        let now = pool.status().space.destroying_bytes;
        assert!(now <= left, "what is left only shrinks: {left} → {now}");
        left = now;
        assert!(commits < 200, "the destroy finishes");
    }
    assert!(commits >= 5, "16 frees per commit spread the destroy over several commits ({commits})");
    for _ in 0..3 {
        pool.commit().unwrap();
    }
    let st = pool.status();
    assert!(st.allocated_bytes <= baseline + 8192, "space returns: {} of baseline {baseline}", st.allocated_bytes);
    assert_eq!(st.space.dedup_blocks, 0);
    assert_eq!(pool.read(keep, k, 0, 10).unwrap(), b"still here");
    assert_clean(&pool, "after the destroy");
    // A name freed by a delete can be used again at once.
    pool.create_volume("db", &VolumeOptions::default()).unwrap();
}

#[test]
fn the_feature_is_set_by_the_first_delete_and_older_pools_open_unchanged() {
    let disk = Arc::new(SimDisk::new(32 << 20, 4096));
    let pool = Pool::create(disk.clone(), test_create_options(6), test_pool_options()).unwrap();
    fill(&pool, &mut SimRng::new(2), "db");
    pool.close().unwrap();
    // An image as the previous version wrote it: no queue, no feature.
    let pool = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
    assert_eq!(pool.status().features.ro_compat & RO_COMPAT_ASYNC_DESTROY, 0);
    assert_clean(&pool, "old image");
    pool.delete_volume("db").unwrap();
    pool.commit().unwrap();
    assert_ne!(pool.status().features.ro_compat & RO_COMPAT_ASYNC_DESTROY, 0);
    assert_clean(&pool, "after the delete");
    // This build reads and writes such pools; one that does not know the bit only reads.
    let f = Features { ro_compat: RO_COMPAT_ASYNC_DESTROY, ..Default::default() };
    assert_eq!(f.access(), Access::ReadWrite);
}

#[test]
fn a_crash_during_a_destroy_resumes_where_the_last_commit_left_off() {
    run_seeds("destroy_crash", 0xde57_0000, 12, |seed| {
        let mut rng = SimRng::new(seed);
        let disk = Arc::new(SimDisk::new(48 << 20, 4096));
        let pool = Pool::create(disk.clone(), test_create_options(seed), options(rng.range(8, 40) as usize)).unwrap();
        pool.commit().unwrap();
        let baseline = pool.status().allocated_bytes;
        fill(&pool, &mut rng, "db");
        pool.delete_volume("db").unwrap();
        pool.commit().unwrap(); // the delete is acknowledged
        for _ in 0..rng.range(0, 6) {
            pool.commit().unwrap();
        }
        disk.set_crash_after(rng.range(1, 60));
        let mut crashed = false;
        for _ in 0..200 {
            match pool.commit() {
                Ok(_) if pool.status().space.destroying_bytes == 0 => break,
                Ok(_) => {}
                Err(e) => {
                    assert_power_failure(&e, &disk, seed, "a destroy commit");
                    crashed = true;
                    break;
                }
            }
        }
        let mode = [CrashMode::DropUnflushed, CrashMode::KeepAll, CrashMode::Random][rng.range(0, 3) as usize];
        let image = disk.crash_image(mode, &mut rng);
        drop(pool);
        let disk = Arc::new(SimDisk::from_image(image, 4096));
        let pool = Pool::open(disk as Arc<dyn BlockDevice>, options(rng.range(8, 40) as usize))
            .unwrap_or_else(|e| panic!("seed {seed}: reopen after the crash ({crashed}): {e}"));
        assert!(pool.volume_id("db").is_err(), "seed {seed}: the acknowledged delete holds");
        assert_clean(&pool, &format!("seed {seed}: reopened"));
        let mut commits = 0;
        while pool.status().space.destroying_bytes > 0 {
            pool.commit().unwrap_or_else(|e| panic!("seed {seed}: resumed destroy: {e}"));
            commits += 1;
            assert!(commits < 200, "seed {seed}: the destroy finishes");
        }
        for _ in 0..3 {
            pool.commit().unwrap();
        }
        assert_clean(&pool, &format!("seed {seed}: destroy finished"));
        let st = pool.status();
        assert!(st.allocated_bytes <= baseline + 8192, "seed {seed}: {} of baseline {baseline}", st.allocated_bytes);
        assert_eq!(st.space.dedup_blocks, 0, "seed {seed}");
    });
}
