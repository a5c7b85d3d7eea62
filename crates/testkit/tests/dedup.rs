//! Deduplication: identical records stored once, with reference counts that stay exact
//! (the checker recounts every entry against every tree, snapshot and deadlist) through
//! copies, overwrites, snapshots, clones, restores, deletes and crashes; the table's memory
//! bound; pools that cannot dedup refuse it clearly.
//!
//! The randomized tests print a failing seed; replay with STRATA_SEED=<seed>.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use strata_engine::format::features::INCOMPAT_DEDUP;
use strata_engine::format::label::{LabelPhys, LABEL_PHYS_SIZE};
use strata_engine::format::ChecksumAlgo;
use strata_engine::{
    BlockDevice, CheckOptions, CompressionPolicy, CreateOptions, ErrorKind, ObjectId, Pool, PoolOptions, VolumeId,
    VolumeOptions,
};
use strata_testkit::{
    assert_power_failure, replaying_seed, run_seeds, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng,
};

const RS: usize = 16384;

fn new_pool(size: u64, opts: PoolOptions) -> (Arc<SimDisk>, Pool) {
    let disk = Arc::new(SimDisk::new(size, 4096));
    let pool = Pool::create(disk.clone(), test_create_options(9), opts).unwrap();
    (disk, pool)
}

fn dedup_volume(pool: &Pool, name: &str, compression: CompressionPolicy) -> VolumeId {
    let opts = VolumeOptions { record_size: RS as u32, compression, dedup: true, ..Default::default() };
    pool.create_volume(name, &opts).unwrap()
}

fn assert_clean(pool: &Pool, when: &str) {
    let r = pool.check(CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{when}: {:#?}", r.errors);
}

/// `n` records from a small alphabet of `kinds` distinct pages (some compressible).
fn pages(rng: &mut SimRng, n: usize, kinds: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * RS);
    for _ in 0..n {
        let k = rng.below(kinds);
        let mut page = SimRng::new(1000 + k).bytes(RS);
        if k.is_multiple_of(2) {
            page[RS / 4..].fill(b' '); // compressible: lz4 and zstd store it smaller
        }
        out.extend(page);
    }
    out
}

#[test]
fn a_copy_of_a_file_takes_no_new_data_space() {
    for compression in [CompressionPolicy::Off, CompressionPolicy::Lz4, CompressionPolicy::Zstd { level: 3 }] {
        let mut rng = SimRng::new(0xDED0);
        let (disk, pool) = new_pool(96 << 20, test_pool_options());
        let vol = dedup_volume(&pool, "db", compression);
        let a = pool.create_object(vol, b"").unwrap();
        let data: Vec<u8> = (0..200).flat_map(|_| rng.bytes(RS)).collect();
        pool.write(vol, a, 0, &data).unwrap();
        pool.commit().unwrap();
        let before = pool.status();
        assert_eq!(before.space.dedup_blocks, 200, "{compression:?}");
        // The copy, in later txgs: every record becomes a reference.
        let b = pool.create_object(vol, b"").unwrap();
        pool.write(vol, b, 0, &data).unwrap();
        pool.commit().unwrap();
        let after = pool.status();
        let grown = after.allocated_bytes - before.allocated_bytes;
        assert!(grown < 64 * 4096, "{compression:?}: a copy of 3.2 MiB took {grown} bytes (metadata only expected)");
        assert_eq!(after.space.dedup_saved_bytes, 200 * RS as u64, "{compression:?}");
        let info = pool.volume_info(vol).unwrap();
        assert!(info.used_bytes >= 2 * 200 * RS as u64, "each reference is charged to the volume");
        assert_eq!(pool.read(vol, b, 0, data.len()).unwrap(), data);
        assert_clean(&pool, "after the copy");
        drop(pool);
        let pool = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
        assert_eq!(pool.read(vol, b, 0, data.len()).unwrap(), data);
        assert_eq!(pool.status().space.dedup_blocks, 200);
        // Deleting the original leaves the copy whole; deleting the copy frees the blocks.
        pool.truncate(vol, a, 0).unwrap();
        pool.commit().unwrap();
        assert_eq!(pool.read(vol, b, 0, data.len()).unwrap(), data);
        assert_eq!(pool.status().space.dedup_saved_bytes, 0);
        assert_clean(&pool, "original deleted");
        pool.truncate(vol, b, 0).unwrap();
        for _ in 0..3 {
            pool.commit().unwrap();
        }
        assert_eq!(pool.status().space.dedup_blocks, 0);
        assert!(pool.status().allocated_bytes <= before.allocated_bytes - 200 * 4096);
        assert_clean(&pool, "copy deleted");
        let img = disk.current_image();
        let label = LabelPhys::decode(&img[..LABEL_PHYS_SIZE], 0).unwrap();
        assert_ne!(label.features.incompat & INCOMPAT_DEDUP, 0, "the labels carry the dedup feature");
    }
}

#[test]
fn duplicates_within_one_txg_and_a_full_table_stay_correct() {
    let mut rng = SimRng::new(0xDED1);
    let opts = PoolOptions { dedup_table_max: 5, ..test_pool_options() };
    let (disk, pool) = new_pool(64 << 20, opts);
    let vol = dedup_volume(&pool, "db", CompressionPolicy::Zstd { level: 1 });
    let obj = pool.create_object(vol, b"").unwrap();
    // 60 records of 12 kinds in one txg: at most one reference per block per txg, at most
    // five blocks in the table; the rest are ordinary blocks.
    let data = pages(&mut rng, 60, 12);
    pool.write(vol, obj, 0, &data).unwrap();
    pool.commit().unwrap();
    assert!(pool.status().space.dedup_blocks <= 5);
    assert_clean(&pool, "one txg");
    let again = pages(&mut rng, 60, 12);
    pool.write(vol, obj, (60 * RS) as u64, &again).unwrap();
    pool.commit().unwrap();
    assert!(pool.status().space.dedup_saved_bytes > 0, "later txgs reference the table's blocks");
    let mut all = data.clone();
    all.extend_from_slice(&again);
    assert_eq!(pool.read(vol, obj, 0, all.len()).unwrap(), all);
    assert_clean(&pool, "two txgs");
    drop(pool);
    let pool = Pool::open(disk as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
    assert_eq!(pool.read(vol, obj, 0, all.len()).unwrap(), all);
}

#[test]
fn a_crc32c_pool_refuses_dedup_and_says_why() {
    let disk = Arc::new(SimDisk::new(32 << 20, 4096));
    let create = CreateOptions { checksum: ChecksumAlgo::Crc32c, ..test_create_options(3) };
    let pool = Pool::create(disk, create, test_pool_options()).unwrap();
    let opts = VolumeOptions { dedup: true, ..Default::default() };
    let e = pool.create_volume("v", &opts).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("BLAKE3"), "{e}");
    let v = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    assert!(pool.set_dedup(v, true).is_err());
    assert!(pool.volumes().iter().all(|i| !i.space.dedup));
}

/// Random writes of a small alphabet of pages over dedup volumes, with snapshots, clones,
/// restores and deletes; the checker recounts every reference after each commit, and every
/// live volume reads back as its model.
#[test]
fn reference_counts_stay_exact_under_random_interleavings() {
    let splits = AtomicU64::new(0);
    run_seeds("reference_counts_stay_exact_under_random_interleavings", 0xDED2_0000, 12, |seed| {
        let mut rng = SimRng::new(seed);
        let (_disk, pool) = new_pool(128 << 20, test_pool_options());
        let empty = pool.status().allocated_bytes;
        let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut snaps: Vec<(String, String, Vec<u8>)> = Vec::new();
        let mut next = 0;
        for name in ["a", "b"] {
            let c = if name == "a" { CompressionPolicy::Off } else { CompressionPolicy::Lz4 };
            let v = dedup_volume(&pool, name, c);
            assert_eq!(pool.create_object(v, b"").unwrap(), ObjectId(1));
            model.insert(name.into(), Vec::new());
        }
        for step in 0..80 {
            let names: Vec<String> = model.keys().cloned().collect();
            let vol = names[rng.below(names.len() as u64) as usize].clone();
            let vid = pool.volume_id(&vol).unwrap();
            match rng.below(100) {
                0..=59 => {
                    let n = rng.range(1, 12) as usize;
                    let at = rng.below(24) as usize * RS;
                    let bytes = pages(&mut rng, n, 6);
                    pool.write(vid, ObjectId(1), at as u64, &bytes).unwrap();
                    let m = model.get_mut(&vol).unwrap();
                    if m.len() < at + bytes.len() {
                        m.resize(at + bytes.len(), 0);
                    }
                    m[at..at + bytes.len()].copy_from_slice(&bytes);
                }
                60..=69 => {
                    next += 1;
                    let s = format!("s{next}");
                    pool.create_snapshots(&[&vol], &s).unwrap();
                    snaps.push((vol.clone(), s, model[&vol].clone()));
                }
                70..=76 if !snaps.is_empty() => {
                    let (v, s, content) = snaps[rng.below(snaps.len() as u64) as usize].clone();
                    next += 1;
                    let clone = format!("c{next}");
                    pool.clone_volume(&v, &s, &clone).unwrap();
                    model.insert(clone, content);
                }
                77..=82 if !snaps.is_empty() => {
                    // Restore the newest snapshot of `vol`, if it has one.
                    if let Some(pos) = snaps.iter().rposition(|(v, _, _)| *v == vol) {
                        let (_, s, content) = snaps[pos].clone();
                        pool.restore_volume(&vol, &s).unwrap();
                        model.insert(vol.clone(), content);
                    }
                }
                83..=90 if !snaps.is_empty() => {
                    let k = rng.below(snaps.len() as u64) as usize;
                    let (v, s, _) = snaps[k].clone();
                    // Refused (Busy) only while clones depend on it.
                    match pool.delete_snapshot(&v, &s) {
                        Ok(()) => {
                            snaps.remove(k);
                        }
                        Err(e) if e.kind() == ErrorKind::Busy => {}
                        Err(e) => panic!("seed {seed}: delete {v}@{s}: {e}"),
                    }
                }
                91..=92 if vol.starts_with('c') => {
                    // Detach a clone: its shared records are rewritten, and become references
                    // to the same blocks (the contents are the same).
                    match pool.split_clone(&vol) {
                        Ok(_) => {
                            splits.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == ErrorKind::Busy => {} // it has snapshots
                        Err(e) if e.to_string().contains("not a clone") => {} // split already
                        Err(e) => panic!("seed {seed}: split {vol}: {e}"),
                    }
                }
                93..=94 if model.len() > 1 => match pool.delete_volume(&vol) {
                    Ok(()) => {
                        model.remove(&vol);
                        snaps.retain(|(v, _, _)| *v != vol);
                    }
                    Err(e) if e.kind() == ErrorKind::Busy => {} // clones of its snapshots
                    Err(e) => panic!("seed {seed}: delete volume {vol}: {e}"),
                },
                _ => {
                    pool.commit().unwrap();
                    assert_clean(&pool, &format!("seed {seed} step {step}"));
                }
            }
        }
        pool.commit().unwrap();
        assert_clean(&pool, &format!("seed {seed} at the end"));
        for (name, content) in &model {
            let vid = pool.volume_id(name).unwrap();
            assert!(pool.read(vid, ObjectId(1), 0, content.len()).unwrap() == *content, "seed {seed}: volume {name}");
        }
        // Delete everything (clones before their origins' snapshots): all space returns.
        // Refusals (Busy: something still depends on it) are retried in the next pass; any
        // other error fails.
        let delete_snapshots = |snaps: &mut Vec<(String, String, Vec<u8>)>| {
            for k in (0..snaps.len()).rev() {
                let (v, s, _) = &snaps[k];
                match pool.delete_snapshot(v, s) {
                    Ok(()) => {
                        snaps.remove(k);
                    }
                    Err(e) if e.kind() == ErrorKind::Busy => {}
                    Err(e) => panic!("seed {seed}: delete {v}@{s}: {e}"),
                }
            }
        };
        delete_snapshots(&mut snaps);
        for _ in 0..3 {
            let names: Vec<String> = model.keys().cloned().collect();
            for name in names {
                match pool.delete_volume(&name) {
                    Ok(()) => {
                        model.remove(&name);
                        snaps.retain(|(v, _, _)| *v != name);
                    }
                    Err(e) if e.kind() == ErrorKind::Busy => {}
                    Err(e) => panic!("seed {seed}: delete volume {name}: {e}"),
                }
            }
            delete_snapshots(&mut snaps);
        }
        assert!(model.is_empty(), "seed {seed}: volumes left {:?}", model.keys());
        let left: Vec<String> = snaps.iter().map(|(v, s, _)| format!("{v}@{s}")).collect();
        assert!(left.is_empty(), "seed {seed}: snapshots left {left:?}");
        for _ in 0..3 {
            pool.commit().unwrap();
        }
        assert_clean(&pool, &format!("seed {seed} after deleting everything"));
        assert_eq!(pool.status().space.dedup_blocks, 0, "seed {seed}");
        assert!(
            pool.status().allocated_bytes <= empty + 4096,
            "seed {seed}: {} bytes left",
            pool.status().allocated_bytes
        );
    });
    if !replaying_seed() {
        let splits = splits.load(Ordering::Relaxed);
        assert!(splits > 0, "no clone was split in any seed: the interleavings miss clone splits");
    }
}

/// Power fails at a random device operation while dedup references are made and dropped:
/// the image reopens at an acknowledged state with exact counts. The power failure is the
/// only error the workload may meet, and every run meets it.
#[test]
fn crash_while_deduplicating_reopens_at_a_committed_state() {
    run_seeds("crash_while_deduplicating_reopens_at_a_committed_state", 0xDED3_0000, 40, |seed| {
        let mut rng = SimRng::new(seed);
        let disk = Arc::new(SimDisk::new(48 << 20, 512));
        let pool = Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).unwrap();
        let vol = dedup_volume(&pool, "db", CompressionPolicy::Zstd { level: 1 });
        let obj = pool.create_object(vol, b"").unwrap();
        pool.commit().unwrap();
        let mut image: Vec<u8> = Vec::new();
        let mut history = vec![image.clone()];
        let mut acked = 0;
        let crash_at = rng.below(12);
        // Twelve rounds, then more until the power has gone (it goes within 40 device
        // operations of `crash_at`: a commit alone has more).
        for round in 0..100 {
            if round == crash_at {
                disk.set_crash_after(rng.below(40));
            }
            let n = rng.range(1, 16) as usize;
            let at = rng.below(30) as usize * RS;
            let bytes = pages(&mut rng, n, 5);
            if let Err(e) = pool.write(vol, obj, at as u64, &bytes) {
                assert_power_failure(&e, &disk, seed, &format!("write in round {round}"));
                break;
            }
            if image.len() < at + bytes.len() {
                image.resize(at + bytes.len(), 0);
            }
            image[at..at + bytes.len()].copy_from_slice(&bytes);
            history.push(image.clone());
            if rng.chance(25) {
                // A snapshot commits the txg: the write above is acknowledged with it.
                match pool.create_snapshots(&["db"], &format!("s{round}")) {
                    Ok(_) => acked = history.len() - 1,
                    Err(e) => {
                        assert_power_failure(&e, &disk, seed, &format!("snapshot in round {round}"));
                        break;
                    }
                }
            }
            if let Err(e) = pool.commit() {
                assert_power_failure(&e, &disk, seed, &format!("commit in round {round}"));
                break;
            }
            acked = history.len() - 1;
            if disk.has_crashed() {
                break;
            }
        }
        assert!(disk.has_crashed(), "seed {seed}: the run ended without losing power");
        let mode = *rng.pick(&[CrashMode::Random, CrashMode::DropUnflushed, CrashMode::KeepAll]);
        let crashed = disk.crash_image(mode, &mut rng);
        drop(pool);
        let pool = Pool::open(Arc::new(SimDisk::from_image(crashed, 512)) as Arc<dyn BlockDevice>, test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: reopen after crash: {e}"));
        let r = pool.check(CheckOptions::default()).unwrap();
        assert!(r.is_clean(), "seed {seed}: {:#?}", r.errors);
        let size = pool.object_size(vol, obj).unwrap() as usize;
        let got = pool.read(vol, obj, 0, size).unwrap();
        assert!(history[acked..].contains(&got), "seed {seed}: contents are no state since the last ack");
        // Life goes on: more references and frees, still exact.
        let bytes = pages(&mut rng, 20, 5);
        pool.write(vol, obj, 0, &bytes).unwrap();
        pool.commit().unwrap();
        pool.commit().unwrap();
        let r = pool.check(CheckOptions::default()).unwrap();
        assert!(r.is_clean(), "seed {seed}: after more work: {:#?}", r.errors);
    });
}
