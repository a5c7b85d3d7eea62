//! Fault injection: bit rot in data and metadata is detected (typed error, no panic, no
//! wrong bytes), read errors surface as I/O errors, write and flush errors latch the pool
//! read-only, a damaged newest root or label falls back, and randomly damaged images never
//! make the engine panic.

use std::sync::Arc;
use strata_engine::format::{LABEL_SIZE, RING_SLOTS, UNIT_SIZE};
use strata_engine::txg::ring_slot_addr;
use strata_engine::{BlockDevice, CheckOptions, ErrorKind, ObjectId, Pool, VolumeId, VolumeOptions};
use strata_testkit::model::capture;
use strata_testkit::{iters_from_env, seed_from_env, test_create_options, test_pool_options, SimDisk, SimRng};

fn pool_with_data() -> (Arc<SimDisk>, Pool, VolumeId, Vec<ObjectId>) {
    let disk = Arc::new(SimDisk::new(32 << 20, 4096));
    let pool = Pool::create(disk.clone(), test_create_options(3), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let mut objs = vec![];
    for i in 0..4u8 {
        let o = pool.create_object(vol, &[i]).unwrap();
        // Large enough for an indirect level: 40 records of 16 KiB.
        let data: Vec<u8> = (0..40 * 16384u32).map(|j| (j % 239) as u8 ^ i).collect();
        pool.write(vol, o, 0, &data).unwrap();
        objs.push(o);
    }
    pool.commit().unwrap();
    (disk, pool, vol, objs)
}

fn reopen(disk: &Arc<SimDisk>) -> Pool {
    Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap()
}

#[test]
fn bit_rot_in_a_data_block_is_detected() {
    let (disk, pool, vol, objs) = pool_with_data();
    let (root, levels) = pool.object_block_root(vol, objs[1]).unwrap();
    assert_eq!(levels, 1);
    drop(pool);
    // Record 5 of object 1: find its block through the indirect block on disk.
    let img = disk.current_image();
    let ind = strata_engine::format::node::IndirectPhys::decode(
        &{
            let mut b = img[root.addr as usize..root.addr as usize + root.psize as usize].to_vec();
            b.resize(16384, 0);
            b
        },
        None,
    )
    .unwrap();
    let data_bp = ind.bps[5];
    disk.rot(data_bp.addr + 100, 3);
    let pool = reopen(&disk);
    let e = pool.read(vol, objs[1], 5 * 16384, 16384).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
    // Everything else still reads right.
    assert_eq!(pool.read(vol, objs[1], 4 * 16384, 16384).unwrap().len(), 16384);
    assert!(pool.read(vol, objs[2], 0, 40 * 16384).is_ok());
    assert!(pool.status().corruptions_detected >= 1);
    let r = pool.check(CheckOptions::default()).unwrap();
    assert_eq!(r.errors.len(), 1, "{:#?}", r.errors);
    assert!(r.errors[0].contains("record 5"), "{:#?}", r.errors);
    // Metadata-only check does not read data, so does not see it.
    assert!(pool.check(CheckOptions { verify_data: false, ..Default::default() }).unwrap().is_clean());
}

#[test]
fn bit_rot_in_a_metadata_block_is_detected() {
    let (disk, pool, vol, objs) = pool_with_data();
    let (root, _) = pool.object_block_root(vol, objs[2]).unwrap();
    drop(pool);
    disk.rot(root.addr + 70, 0); // inside the second block pointer of the indirect block
    let pool = reopen(&disk);
    for off in [0u64, 16384, 39 * 16384] {
        let e = pool.read(vol, objs[2], off, 10).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
        assert!(e.to_string().contains("indirect block"), "{e}");
    }
    assert!(pool.read(vol, objs[3], 0, 10).is_ok());
    let r = pool.check(CheckOptions::default()).unwrap();
    assert!(!r.is_clean());
    assert!(r.errors.iter().any(|e| e.contains("object 3") && e.contains("indirect block")), "{:#?}", r.errors);
    // A write to the damaged object fails cleanly too, and the pool stays usable.
    assert_eq!(pool.write(vol, objs[2], 5, b"x").unwrap_err().kind(), ErrorKind::Corruption);
    pool.write(vol, objs[3], 5, b"x").unwrap();
    pool.commit().unwrap();
}

#[test]
fn read_errors_are_io_errors() {
    let (disk, pool, vol, objs) = pool_with_data();
    drop(pool);
    let pool = reopen(&disk);
    disk.fail_reads_in(Some((1 << 20, 64 << 20)));
    let e = pool.read(vol, objs[0], 0, 100).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    disk.fail_reads_in(None);
    assert_eq!(pool.read(vol, objs[0], 0, 3).unwrap(), vec![0, 1, 2]);
}

/// `root_may_land`: the failure came after the root was written, so the device may hold
/// either root; the commit must still have failed.
fn latch_test(root_may_land: bool, fail: impl Fn(&SimDisk)) {
    let (disk, pool, vol, objs) = pool_with_data();
    let before = capture(&pool).unwrap();
    pool.write(vol, objs[0], 0, b"not durable").unwrap();
    let after = capture(&pool).unwrap();
    fail(&disk);
    let e = pool.commit().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    // Latched: no more writes, no commits, and it says why.
    assert_eq!(pool.write(vol, objs[0], 0, b"x").unwrap_err().kind(), ErrorKind::ReadOnly);
    assert_eq!(pool.commit().unwrap_err().kind(), ErrorKind::ReadOnly);
    assert!(pool.status().latched.is_some());
    assert_eq!(pool.create_volume("w", &VolumeOptions::default()).unwrap_err().kind(), ErrorKind::ReadOnly);
    drop(pool);
    // Reopened: the last committed state, intact (or, if the root landed, the new one).
    let pool = reopen(&disk);
    let seen = capture(&pool).unwrap();
    assert!(seen == before || (root_may_land && seen == after), "{:?}", before.diff(&seen));
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
}

#[test]
fn write_error_latches_read_only() {
    latch_test(false, |d| d.fail_writes(1));
}

#[test]
fn flush_error_latches_read_only() {
    latch_test(false, |d| d.fail_flushes(1));
}

#[test]
fn failed_root_flush_is_never_reported_as_success() {
    // The flush of the txg's blocks succeeds; the flush after the root fails. The commit
    // must fail and latch, whatever the device did with the root.
    latch_test(true, |d| d.fail_flushes_after(1, 1));
}

#[test]
fn damaged_newest_root_falls_back_to_the_previous() {
    let (disk, pool, vol, objs) = pool_with_data();
    let older = capture(&pool).unwrap();
    pool.write(vol, objs[0], 0, b"newest").unwrap();
    let txg = pool.commit().unwrap();
    drop(pool);
    let slot = txg % RING_SLOTS;
    for label in 0..2 {
        disk.rot(ring_slot_addr(label, slot) + 20, 1);
    }
    let pool = reopen(&disk);
    assert_eq!(pool.committed_root().txg, txg - 1);
    let seen = capture(&pool).unwrap();
    assert!(seen == older, "{:?}", older.diff(&seen));
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
    // It commits on past the damaged slot.
    pool.write(vol, objs[0], 0, b"again").unwrap();
    let t2 = pool.commit().unwrap();
    assert!(t2 > txg - 1);
    drop(pool);
    let pool = reopen(&disk);
    assert_eq!(pool.read(vol, objs[0], 0, 5).unwrap(), b"again");
}

#[test]
fn damaged_catalog_root_falls_back_to_the_previous_root() {
    let (disk, pool, vol, objs) = pool_with_data();
    let older = capture(&pool).unwrap();
    pool.write(vol, objs[0], 0, b"newest").unwrap();
    let txg = pool.commit().unwrap();
    let catalog = pool.committed_root().catalog_root;
    drop(pool);
    disk.rot(catalog.addr + 10, 5);
    let pool = reopen(&disk);
    assert_eq!(pool.committed_root().txg, txg - 1, "fell back one root");
    assert!(pool.status().open_notes.iter().any(|n| n.contains("fell back")), "{:?}", pool.status().open_notes);
    let seen = capture(&pool).unwrap();
    assert!(seen == older, "{:?}", older.diff(&seen));
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
    // The fallback pool keeps working and its next root supersedes the damaged one.
    pool.write(vol, objs[1], 0, b"after").unwrap();
    pool.commit().unwrap();
    drop(pool);
    let pool = reopen(&disk);
    assert!(pool.committed_root().txg > txg);
    assert_eq!(pool.read(vol, objs[1], 0, 5).unwrap(), b"after");
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
}

#[test]
fn destroyed_first_label_uses_the_second() {
    let (disk, pool, _vol, _objs) = pool_with_data();
    let state = capture(&pool).unwrap();
    drop(pool);
    for i in 0..8 {
        disk.rot(i * 7, 2);
    }
    let pool = reopen(&disk);
    let seen = capture(&pool).unwrap();
    assert!(seen == state, "{:?}", state.diff(&seen));
    assert!(pool.status().open_notes.iter().any(|n| n.contains("label 1")));
    drop(pool);
    for i in 0..8 {
        disk.rot(LABEL_SIZE + i * 7, 2);
    }
    let e = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Corruption);
    assert!(e.to_string().contains("both labels"), "{e}");
}

#[test]
fn randomly_damaged_images_never_panic() {
    // Damage a real pool image at random places — mostly its metadata, where the most
    // decoding happens — then open, read everything and check. Errors are expected;
    // panics and wrong answers without an error are not.
    let base = seed_from_env(0xDA4A_0000);
    let iters = if std::env::var("STRATA_SEED").is_ok() { 1 } else { iters_from_env(300) };
    let (disk, pool, _vol, _objs) = pool_with_data();
    let mut states = std::collections::BTreeMap::new();
    states.insert(pool.committed_root().txg, capture(&pool).unwrap());
    pool.kv_put(VolumeId(1), b"some key", b"some value").unwrap();
    pool.commit().unwrap();
    states.insert(pool.committed_root().txg, capture(&pool).unwrap());
    drop(pool);
    let pristine = disk.current_image();
    let meta_end = (2 * LABEL_SIZE + 64 * UNIT_SIZE) as usize;
    for i in 0..iters {
        let seed = base + i;
        let mut rng = SimRng::new(seed);
        let mut img = pristine.clone();
        for _ in 0..rng.range(1, 20) {
            let at = if rng.chance(60) { rng.below(meta_end as u64) } else { rng.below(img.len() as u64) } as usize;
            if rng.chance(50) {
                img[at] ^= 1 << rng.below(8);
            } else {
                let n = rng.range(1, 64) as usize;
                let end = (at + n).min(img.len());
                let junk = rng.bytes(end - at);
                img[at..end].copy_from_slice(&junk);
            }
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let d = Arc::new(SimDisk::from_image(img, 4096));
            if let Ok(pool) = Pool::open(d as Arc<dyn BlockDevice>, test_pool_options()) {
                // Whatever reads succeed must be right: the state of the root it opened.
                if let Ok(seen) = capture(&pool) {
                    let txg = pool.committed_root().txg;
                    assert!(states.get(&txg) == Some(&seen), "seed {seed}: wrong data without an error at txg {txg}");
                }
                let _ = pool.check(CheckOptions::default());
                let _ = pool.commit();
            }
        }));
        assert!(outcome.is_ok(), "damaged image panicked the engine; replay with STRATA_SEED={seed}");
    }
}
