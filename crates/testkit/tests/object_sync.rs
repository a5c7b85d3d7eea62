//! Per-object syncs (`Pool::sync_object`, what fsync of one file calls): the sync writes
//! that object's operations and every shared one (creates, deletes, key-value changes),
//! and leaves other objects' writes in memory. After a crash every object must show its
//! state at or after its own last acknowledged sync — never a state it never had — and the
//! key-value spaces their state at or after the last acknowledged sync of any kind.
//! Seeds print on failure; replay with STRATA_SEED=<seed>.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, ObjectId, Pool, VolumeId, VolumeOptions};
use strata_testkit::model::{capture, ObjectModel, PoolModel};
use strata_testkit::workload::{object_op, two_volumes};
use strata_testkit::{
    iters_from_env, seed_from_env, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng,
};

const SECTOR: usize = 512;

fn pool_with_two_objects() -> (Arc<SimDisk>, Pool, VolumeId, ObjectId, ObjectId) {
    let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
    let pool = Pool::create(disk.clone(), test_create_options(7), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions { record_size: 16384, ..Default::default() }).unwrap();
    let a = pool.create_object(vol, b"a").unwrap();
    let b = pool.create_object(vol, b"b").unwrap();
    pool.commit().unwrap();
    (disk, pool, vol, a, b)
}

/// Power goes now (dropping `pool` then writes nothing: dropping would commit).
fn reopen_after_power_loss(disk: &SimDisk, pool: Pool) -> Pool {
    disk.set_crash_after(0);
    drop(pool);
    let mut rng = SimRng::new(1);
    let image = disk.crash_image(CrashMode::DropUnflushed, &mut rng);
    let pool = Pool::open(Arc::new(SimDisk::from_image(image, SECTOR)) as Arc<dyn BlockDevice>, test_pool_options())
        .expect("reopens after the crash");
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
    pool
}

/// The redo-log case: a sync of one file does not carry another file's page writes.
#[test]
fn a_sync_of_one_object_does_not_write_another_objects_data() {
    let (disk, pool, vol, a, b) = pool_with_two_objects();
    let pages = vec![0x5au8; 1 << 20];
    pool.write(vol, a, 0, &pages).unwrap();
    pool.write(vol, b, 0, b"commit record").unwrap();
    let before = pool.status().log_bytes_written;
    pool.sync_object(vol, b).unwrap();
    let logged = pool.status().log_bytes_written - before;
    assert!(logged < 16 << 10, "the sync of b wrote {logged} bytes of log: a's megabyte went with it");
    let pool = reopen_after_power_loss(&disk, pool);
    assert_eq!(pool.read(vol, b, 0, 100).unwrap(), b"commit record");
    assert_eq!(pool.object_size(vol, a).unwrap(), 0, "a was never synced nor committed");
}

/// A shared operation written by another object's sync takes the private operations
/// before it of the objects it touches: here a write, then the delete of its object. Were
/// the write left behind and written later by a sync of everything, replay would meet a
/// write to a deleted object.
#[test]
fn a_shared_operation_takes_the_earlier_writes_of_its_objects_along() {
    let (disk, pool, vol, a, b) = pool_with_two_objects();
    pool.write(vol, a, 0, &[1u8; 40000]).unwrap();
    pool.delete_object(vol, a).unwrap();
    pool.write(vol, b, 0, b"x").unwrap();
    pool.sync_object(vol, b).unwrap();
    let c = pool.create_object(vol, b"c").unwrap();
    pool.write(vol, c, 0, b"y").unwrap();
    pool.sync_log().unwrap();
    let pool = reopen_after_power_loss(&disk, pool);
    assert!(pool.status().open_notes.iter().any(|n| n.contains("replayed")));
    assert!(pool.object_size(vol, a).is_err(), "a was deleted");
    assert_eq!(pool.read(vol, b, 0, 10).unwrap(), b"x");
    assert_eq!(pool.read(vol, c, 0, 10).unwrap(), b"y");
}

/// Writes are logged without their bytes, which a sync reads from the volume when it writes
/// them (intent_log.rs). A write taken along by another object's sync (here: before a group
/// that writes two objects) is read as it is *now* — overwritten since by a larger write
/// nobody synced. That later write must then go in the same block, or replay would show a
/// state the object never had: the first write's range with the second's bytes, the size of
/// the first.
#[test]
fn a_write_taken_along_carries_the_later_writes_of_its_object() {
    let (disk, pool, vol, a, b) = pool_with_two_objects();
    let c = pool.create_object(vol, b"c").unwrap();
    pool.commit().unwrap();
    pool.write(vol, a, 0, &[1u8; 8192]).unwrap();
    {
        let mut t = pool.guard();
        t.write(vol, a, 8192, &[2u8; 100]).unwrap();
        t.write(vol, b, 0, &[3u8; 100]).unwrap();
    }
    pool.write(vol, a, 0, &[4u8; 20000]).unwrap();
    pool.write(vol, c, 0, b"synced").unwrap();
    pool.sync_object(vol, c).unwrap();
    let pool = reopen_after_power_loss(&disk, pool);
    assert_eq!(pool.read(vol, c, 0, 10).unwrap(), b"synced");
    assert_eq!(pool.read(vol, b, 0, 1000).unwrap(), vec![3u8; 100]);
    let got = pool.read(vol, a, 0, 1 << 20).unwrap();
    assert_eq!(got, vec![4u8; 20000], "a must be as it was when the block was formed");
}

/// Deferred writes of an object deleted (or truncated) before the sync read as zeros where
/// the data is gone; the delete or truncate in the same block then has the last word.
#[test]
fn deferred_writes_of_deleted_and_truncated_objects_replay_to_the_final_state() {
    let (disk, pool, vol, a, b) = pool_with_two_objects();
    pool.write(vol, a, 0, &[1u8; 50000]).unwrap();
    pool.write(vol, b, 0, &[2u8; 70000]).unwrap();
    pool.truncate(vol, b, 1000).unwrap();
    pool.write(vol, b, 5000, &[3u8; 10]).unwrap();
    pool.delete_object(vol, a).unwrap();
    pool.sync_object(vol, b).unwrap();
    let pool = reopen_after_power_loss(&disk, pool);
    assert!(pool.object_size(vol, a).is_err(), "a was deleted");
    let mut want = vec![2u8; 1000];
    want.resize(5000, 0);
    want.extend_from_slice(&[3u8; 10]);
    assert_eq!(pool.read(vol, b, 0, 1 << 20).unwrap(), want);
}

/// An unsynced write costs the log no copy of its bytes: it is read from the volume only if
/// a sync needs it (and a commit usually retires it first).
#[test]
fn unsynced_writes_are_not_copied_into_the_log() {
    let (disk, pool, vol, a, b) = pool_with_two_objects();
    for i in 0..16u64 {
        pool.write(vol, a, i << 20, &vec![i as u8 + 1; 1 << 20]).unwrap();
    }
    pool.write(vol, b, 0, b"x").unwrap();
    pool.sync_object(vol, b).unwrap();
    let held = pool.status().log_memory_bytes;
    assert!(held < 64 << 10, "the log holds {held} bytes for 16 MiB of unsynced writes");
    // Synced later, the writes are read then, and replay finds them.
    pool.sync_object(vol, a).unwrap();
    assert_eq!(pool.status().log_memory_bytes, 0);
    let pool = reopen_after_power_loss(&disk, pool);
    for i in 0..16u64 {
        assert_eq!(pool.read(vol, a, i << 20, 1 << 20).unwrap(), vec![i as u8 + 1; 1 << 20]);
    }
}

/// A write longer than a log record may carry (2 MiB at decoding) is logged as several
/// records: synced and replayed whole. (Logged as one record, replay refused the log as
/// damaged.)
#[test]
fn a_write_longer_than_a_log_record_replays_whole() {
    let (disk, pool, vol, a, _) = pool_with_two_objects();
    let data: Vec<u8> = (0..(3u32 << 20) - 8192).map(|i| (i % 251) as u8).collect();
    pool.write(vol, a, 12345, &data).unwrap();
    pool.sync_object(vol, a).unwrap();
    let pool = reopen_after_power_loss(&disk, pool);
    assert!(pool.status().open_notes.iter().any(|n| n.contains("replayed")));
    assert_eq!(pool.read(vol, a, 12345, data.len()).unwrap(), data);
}

/// Syncers of different objects at once: each returns only when its own object is
/// durable; nothing is lost, nothing deadlocks.
#[test]
fn concurrent_syncs_of_different_objects() {
    let (disk, pool, vol, _, _) = pool_with_two_objects();
    let pool = Arc::new(pool);
    let objs: Vec<ObjectId> = (0..4).map(|i| pool.create_object(vol, &[i]).unwrap()).collect();
    std::thread::scope(|s| {
        for (t, &o) in objs.iter().enumerate() {
            let pool = pool.clone();
            s.spawn(move || {
                for i in 0..50u64 {
                    pool.write(vol, o, i * 100, &[t as u8 + 1; 100]).unwrap();
                    pool.sync_object(vol, o).unwrap();
                }
            });
        }
    });
    let pool = Arc::try_unwrap(pool).ok().unwrap();
    let pool = reopen_after_power_loss(&disk, pool);
    for (t, &o) in objs.iter().enumerate() {
        assert_eq!(pool.read(vol, o, 0, 5000).unwrap(), vec![t as u8 + 1; 5000], "object {t}");
    }
}

type ObjKey = (String, u64);

/// The state of one object (or None: absent) after each operation of the run.
fn object_states(history: &[PoolModel], key: &ObjKey) -> Vec<Option<ObjectModel>> {
    history.iter().map(|m| m.volumes.get(&key.0).and_then(|v| v.objects.get(&key.1)).cloned()).collect()
}

/// Power loss during a workload of writes, creates, deletes, key-value changes, syncs of
/// single objects, syncs of everything and commits.
#[test]
fn every_object_keeps_its_last_acknowledged_sync() {
    let iters = if std::env::var("STRATA_SEED").is_ok() { 1 } else { iters_from_env(120) };
    static REPLAYS: AtomicU64 = AtomicU64::new(0);
    static BY_REFERENCE: AtomicU64 = AtomicU64::new(0);
    for i in 0..iters {
        let seed = seed_from_env(0x0B1E_C700).wrapping_add(i);
        if std::panic::catch_unwind(|| run(seed, &REPLAYS, &BY_REFERENCE)).is_err() {
            panic!(
                "every_object_keeps_its_last_acknowledged_sync failed with seed {seed}: replay with STRATA_SEED={seed}"
            );
        }
    }
    assert!(REPLAYS.load(Ordering::Relaxed) > 0, "no crash image needed the intent log");
    assert!(BY_REFERENCE.load(Ordering::Relaxed) > 0, "no large write was logged by reference");
}

fn run(seed: u64, replays: &AtomicU64, by_reference: &AtomicU64) {
    let mut rng = SimRng::new(seed);
    let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
    let pool = Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).unwrap();
    let (mut model, vols) = two_volumes(&mut rng, &pool, &[4096u32, 16384]);
    // history[i]: the model after i operations; bounds: the operation count each object
    // (and, for None, everything shared) is known durable at.
    let mut history = vec![model.clone()];
    let mut all_bound = 0usize;
    let mut object_bound: BTreeMap<ObjKey, usize> = BTreeMap::new();
    let ops = rng.range(30, 160);
    let crash_op = rng.below(ops);
    for i in 0..ops {
        if i == crash_op {
            disk.set_crash_after(rng.below(30));
        }
        let now = history.len() - 1;
        if rng.chance(20) {
            let (name, vol) = vols[rng.below(2) as usize].clone();
            let objs: Vec<u64> = model.volumes[&name].objects.keys().copied().collect();
            let r = match rng.below(10) {
                0 => pool.commit().map(|_| None),
                1 | 2 => pool.sync_log().map(|_| None),
                _ if !objs.is_empty() => {
                    let id = *rng.pick(&objs);
                    pool.sync_object(vol, ObjectId(id)).map(|_| Some((name, id)))
                }
                _ => continue,
            };
            match r {
                Ok(None) => all_bound = now,
                Ok(Some(key)) => {
                    object_bound.insert(key, now);
                }
                Err(_) => break,
            }
            continue;
        }
        let (name, vol) = vols[rng.below(2) as usize].clone();
        if object_op(&mut rng, &pool, vol, model.volumes.get_mut(&name).unwrap()).is_err() {
            break;
        }
        history.push(model.clone());
    }
    by_reference.fetch_add(pool.status().log_bytes_by_reference, Ordering::Relaxed);
    if !disk.has_crashed() {
        disk.set_crash_after(0);
    }
    let mode = *rng.pick(&[CrashMode::Random, CrashMode::DropUnflushed, CrashMode::KeepAll]);
    let image = disk.crash_image(mode, &mut rng);
    drop(pool);
    let pool = Pool::open(Arc::new(SimDisk::from_image(image, SECTOR)) as Arc<dyn BlockDevice>, test_pool_options())
        .unwrap_or_else(|e| panic!("seed {seed}: does not open after the crash: {e}"));
    if pool.status().open_notes.iter().any(|n| n.contains("replayed")) {
        replays.fetch_add(1, Ordering::Relaxed);
    }
    let report = pool.check(CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "seed {seed}: {:#?}", report.errors);
    let seen = capture(&pool).unwrap();
    // Every sync wrote every shared operation (key-value changes, creates, deletes).
    let shared_bound = all_bound.max(object_bound.values().copied().max().unwrap_or(0));
    for (name, _) in &vols {
        let kv = &seen.volumes[name].kv;
        assert!(
            history[shared_bound..].iter().any(|m| m.volumes[name].kv == *kv),
            "seed {seed}: volume {name}: key-value space is none it had since the last acknowledged sync (after operation {shared_bound})"
        );
        let ids: BTreeSet<u64> = history
            .iter()
            .flat_map(|m| m.volumes[name].objects.keys().copied())
            .chain(seen.volumes[name].objects.keys().copied())
            .collect();
        for id in ids {
            let key = (name.clone(), id);
            let states = object_states(&history, &key);
            // Its contents: at or after its own last sync or a sync of everything.
            let bound = all_bound.max(object_bound.get(&key).copied().unwrap_or(0));
            let got = seen.volumes[name].objects.get(&id).cloned();
            assert!(
                states[bound..].contains(&got),
                "seed {seed}: volume {name} object {id}: state after the crash ({}) is none it had since its last acknowledged sync (after operation {bound})",
                got.as_ref().map_or("absent".into(), |o| format!("{} bytes", o.data.len()))
            );
            // Its existence: at or after the last sync of any kind.
            assert!(
                states[shared_bound..].iter().any(|s| s.is_some() == got.is_some()),
                "seed {seed}: volume {name} object {id}: present {} after the crash, which it was not since operation {shared_bound}",
                got.is_some()
            );
        }
    }
}
