//! A separate intent-log device (log_device.rs, format/logdev.rs), on two simulated disks:
//! acknowledged syncs survive power loss of both devices and are replayed from the log
//! device; `sync_log` writes and flushes only the log device; a missing, wrong or damaged
//! log device is refused with a precise error unless the caller discards it, which opens
//! at the last commit; a failed log device is left for the pool's own region (a commit
//! makes the failed block's syncs durable); the checker verifies the log device's label. Seeds print on failure; replay with STRATA_SEED=<seed>.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use strata_engine::format::logdev::MIN_LOG_DEVICE_SIZE;
use strata_engine::{
    BlockDevice, CheckOptions, ErrorKind, LogDeviceSpec, ObjectId, Pool, PoolOptions, VolumeId, VolumeOptions,
};
use strata_testkit::model::{assert_last_acknowledged_sync, PoolModel, VolumeModel};
use strata_testkit::workload::object_op;
use strata_testkit::{
    iters_from_env, seed_from_env, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng,
};

const SECTOR: usize = 512;
const LOG_GUID: u64 = 0x51_06;

fn dyn_dev(d: &Arc<SimDisk>) -> Arc<dyn BlockDevice> {
    d.clone() as Arc<dyn BlockDevice>
}

/// A pool on `disk` whose log is on `log`, with one volume.
fn create(disk: &Arc<SimDisk>, log: &Arc<SimDisk>, seed: u64) -> (Pool, VolumeId) {
    let spec = LogDeviceSpec { dev: dyn_dev(log), log_device_guid: LOG_GUID };
    let pool = Pool::create_with_log(dyn_dev(disk), test_create_options(seed), Some(spec), test_pool_options())
        .expect("create a pool with a log device");
    let vol = pool.create_volume("v", &VolumeOptions { record_size: 4096, ..Default::default() }).unwrap();
    pool.commit().unwrap();
    (pool, vol)
}

fn open(disk: Vec<u8>, log: Option<Vec<u8>>, opts: PoolOptions) -> strata_engine::Result<Pool> {
    let log = log.map(|img| Arc::new(SimDisk::from_image(img, SECTOR)) as Arc<dyn BlockDevice>);
    Pool::open_with_log(Arc::new(SimDisk::from_image(disk, SECTOR)), log, opts)
}

fn discard_opts() -> PoolOptions {
    PoolOptions { discard_missing_log: true, ..test_pool_options() }
}

static REPLAYS: AtomicU64 = AtomicU64::new(0);
static FAILOVERS: AtomicU64 = AtomicU64::new(0);

#[test]
fn acknowledged_syncs_survive_a_crash_of_both_devices() {
    let base = seed_from_env(0x51_0600);
    let iters = if std::env::var("STRATA_SEED").is_ok() { 1 } else { iters_from_env(60) };
    for seed in base..base + iters {
        let r = std::panic::catch_unwind(|| crash_once(seed));
        assert!(r.is_ok(), "failed with seed {seed}: replay with STRATA_SEED={seed}");
    }
    assert!(REPLAYS.load(Ordering::Relaxed) > 0, "no crash image needed the log device");
    assert!(FAILOVERS.load(Ordering::Relaxed) > 0, "the log device never failed over before a crash");
}

fn crash_once(seed: u64) {
    let mut rng = SimRng::new(seed);
    let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
    let log = Arc::new(SimDisk::new(MIN_LOG_DEVICE_SIZE, SECTOR));
    let (pool, vol) = create(&disk, &log, seed);
    let mut model = PoolModel::default();
    model.volumes.insert("v".into(), VolumeModel { record_size: 4096, ..Default::default() });
    let mut synced = vec![model.clone()];
    let mut acked = 0usize;
    let ops = rng.range(20, 120);
    let crash_op = rng.below(ops);
    for i in 0..ops {
        if i == crash_op {
            // Power goes on one device at an I/O; the other is frozen at that instant below.
            let victim = if rng.chance(70) { &log } else { &disk };
            victim.set_crash_after(rng.below(6));
        }
        let r = if rng.chance(20) {
            synced.push(model.clone());
            let r = if rng.chance(15) { pool.commit().map(|_| ()) } else { pool.sync_log() };
            if r.is_ok() {
                acked = synced.len() - 1;
            }
            r
        } else {
            object_op(&mut rng, &pool, vol, model.volumes.get_mut("v").expect("volume v"))
        };
        if r.is_err() || disk.has_crashed() || log.has_crashed() {
            break;
        }
    }
    for d in [&disk, &log] {
        if !d.has_crashed() {
            d.set_crash_after(0);
        }
    }
    let modes = [CrashMode::Random, CrashMode::DropUnflushed, CrashMode::KeepAll];
    let disk_img = disk.crash_image(*rng.pick(&modes), &mut rng);
    let log_img = log.crash_image(*rng.pick(&modes), &mut rng);
    // Power lost on the log device alone is, to the pool, a failed log device: it goes on
    // with the log in its own region (a_failed_log_device_moves_the_log_into_the_pool).
    let failed_over = pool.status().log_failover.is_some();
    drop(pool);
    let pool = open(disk_img, Some(log_img), test_pool_options())
        .unwrap_or_else(|e| panic!("seed {seed}: does not open after the crash: {e}"));
    let status = pool.status();
    if failed_over {
        FAILOVERS.fetch_add(1, Ordering::Relaxed);
    } else {
        assert_eq!(status.log_device.as_deref(), Some("simulated disk"), "seed {seed}");
    }
    if assert_last_acknowledged_sync(&pool, &synced, acked, seed) {
        REPLAYS.fetch_add(1, Ordering::Relaxed);
    }
}

/// A pool with a committed object and, on top, a write made durable only by `sync_log`.
fn synced_pool() -> (Arc<SimDisk>, Arc<SimDisk>, Pool, VolumeId, ObjectId) {
    let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
    let log = Arc::new(SimDisk::new(MIN_LOG_DEVICE_SIZE, SECTOR));
    let (pool, vol) = create(&disk, &log, 11);
    let obj = pool.create_object(vol, b"a").unwrap();
    pool.write(vol, obj, 0, b"committed").unwrap();
    pool.commit().unwrap();
    pool.write(vol, obj, 4096, b"synced").unwrap();
    pool.sync_log().unwrap();
    (disk, log, pool, vol, obj)
}

#[test]
fn sync_log_writes_and_flushes_only_the_log_device() {
    let (disk, log, pool, vol, obj) = synced_pool();
    let (disk_writes, disk_flushes, log_flushes) = (disk.write_count(), disk.flush_count(), log.flush_count());
    pool.write(vol, obj, 8192, b"again").unwrap();
    pool.sync_log().unwrap();
    assert_eq!((disk.write_count(), disk.flush_count()), (disk_writes, disk_flushes), "the pool's device was touched");
    assert_eq!(log.flush_count(), log_flushes + 1);
    // Only what was flushed survives, on both devices: the syncs come back from the log.
    let mut rng = SimRng::new(1);
    let (d, l) =
        (disk.crash_image(CrashMode::DropUnflushed, &mut rng), log.crash_image(CrashMode::DropUnflushed, &mut rng));
    drop(pool);
    let pool = open(d, Some(l), test_pool_options()).unwrap();
    assert!(pool.status().open_notes.iter().any(|n| n.contains("replayed")), "{:?}", pool.status().open_notes);
    assert_eq!(pool.read(vol, obj, 4096, 6).unwrap(), b"synced");
    assert_eq!(pool.read(vol, obj, 8192, 5).unwrap(), b"again");
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
}

#[test]
fn a_missing_wrong_or_damaged_log_device_is_refused() {
    let (disk, log, pool, _, _) = synced_pool();
    drop(pool);
    let (d, l) = (disk.current_image(), log.current_image());

    let e = open(d.clone(), None, test_pool_options()).err().expect("opened without its log device");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("no log device was supplied") && e.to_string().contains("discard"), "{e}");
    // Read-only too: the checker must not show a state that lacks acknowledged syncs silently.
    let ro = PoolOptions { read_only: true, ..test_pool_options() };
    assert!(open(d.clone(), None, ro).is_err());

    // Another pool's log device.
    let (other_disk, other_log) =
        (Arc::new(SimDisk::new(32 << 20, SECTOR)), Arc::new(SimDisk::new(MIN_LOG_DEVICE_SIZE, SECTOR)));
    drop(create(&other_disk, &other_log, 99));
    let e = open(d.clone(), Some(other_log.current_image()), test_pool_options()).err().expect("wrong log accepted");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("not of pool test"), "{e}");

    // A blank device, and a damaged label: corruption naming the log device, no panic.
    let e = open(d.clone(), Some(vec![0; MIN_LOG_DEVICE_SIZE as usize]), test_pool_options()).err().expect("blank");
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    assert!(e.to_string().contains("log device label"), "{e}");
    for at in [0usize, 17, 40, 100, 200] {
        let mut bad = l.clone();
        bad[at] ^= 4;
        let e = open(d.clone(), Some(bad), test_pool_options()).err().expect("damaged label accepted");
        assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    }
    // A log device that shrank.
    let e = open(d.clone(), Some(l[..l.len() - 4096].to_vec()), test_pool_options()).err().expect("short log");
    assert!(e.to_string().contains("log was made for"), "{e}");

    // A pool without a log device refuses one.
    let plain = Arc::new(SimDisk::new(32 << 20, SECTOR));
    drop(Pool::create(dyn_dev(&plain), test_create_options(5), test_pool_options()).unwrap());
    let e = open(plain.current_image(), Some(l.clone()), test_pool_options()).err().expect("log for a plain pool");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");

    // With the right device all is well.
    assert!(open(d, Some(l), test_pool_options()).is_ok());
}

#[test]
fn discarding_a_missing_log_opens_at_the_last_commit() {
    let (disk, _log, pool, vol, obj) = synced_pool();
    let committed_txg = pool.committed_root().txg;
    let mut rng = SimRng::new(2);
    let d = disk.crash_image(CrashMode::DropUnflushed, &mut rng);
    std::mem::forget(pool); // a crash: no closing commit

    // Read-only: the labels stay as they are.
    let ro = PoolOptions { read_only: true, ..discard_opts() };
    let p = open(d.clone(), None, ro).expect("read-only discard");
    assert_eq!(p.object_size(vol, obj).unwrap(), 9, "the sync after the commit cannot be there");
    drop(p);
    assert!(open(d.clone(), None, test_pool_options()).is_err(), "a read-only open changed the labels");

    let disk2 = Arc::new(SimDisk::from_image(d, SECTOR));
    let p = Pool::open_with_log(dyn_dev(&disk2), None, discard_opts()).expect("discard the missing log");
    let notes = p.status().open_notes;
    let lost = format!("sync writes acknowledged after txg {committed_txg} may be lost");
    assert!(notes.iter().any(|n| n.contains(&lost)), "{notes:?}");
    assert_eq!(p.committed_root().txg, committed_txg);
    assert_eq!(p.read(vol, obj, 0, 9).unwrap(), b"committed");
    assert_eq!(p.object_size(vol, obj).unwrap(), 9, "the unreplayable sync is gone");
    assert_eq!(p.status().log_device, None);
    assert!(p.check(CheckOptions::default()).unwrap().is_clean());
    // From now on the log is in the pool: a sync survives a crash and plain `open` works.
    p.write(vol, obj, 4096, b"in-pool").unwrap();
    p.sync_log().unwrap();
    let img = disk2.crash_image(CrashMode::DropUnflushed, &mut rng);
    std::mem::forget(p); // a crash: no closing commit
    let p = open(img, None, test_pool_options()).expect("a pool whose log was discarded opens alone");
    assert_eq!(p.read(vol, obj, 4096, 7).unwrap(), b"in-pool");
    assert!(p.status().open_notes.iter().any(|n| n.contains("replayed")));
}

/// How a log device fails in `a_failed_log_device_moves_the_log_into_the_pool`.
#[derive(Debug, Clone, Copy)]
enum LogFault {
    OneWrite,
    OneFlush,
    Gone,
}

#[test]
fn a_failed_log_device_moves_the_log_into_the_pool() {
    for fault in [LogFault::OneWrite, LogFault::OneFlush, LogFault::Gone] {
        let (disk, log, pool, vol, obj) = synced_pool();
        pool.write(vol, obj, 8192, b"in the failed block").unwrap();
        match fault {
            LogFault::OneWrite => log.fail_writes(1),
            LogFault::OneFlush => log.fail_flushes(1),
            LogFault::Gone => log.set_gone(true),
        }
        // The sync is acknowledged: a commit made it durable instead of the log device.
        pool.sync_log().unwrap_or_else(|e| panic!("{fault:?}: a failed log device failed the sync: {e}"));
        let st = pool.status();
        assert_eq!(st.latched, None, "{fault:?}");
        assert_eq!(st.log_device, None, "{fault:?}: the log device is still used");
        let why = st.log_failover.unwrap_or_else(|| panic!("{fault:?}: no failover reported"));
        assert!(why.contains("simulated disk") && why.contains("in the pool since txg"), "{why}");
        // The pool goes on, its syncs logged in its own region: the log device sees nothing.
        let log_writes = log.write_count();
        let blocks = st.log_blocks_written;
        pool.write(vol, obj, 12288, b"logged in the pool").unwrap();
        pool.sync_log().unwrap();
        assert_eq!(log.write_count(), log_writes, "{fault:?}");
        assert!(pool.status().log_blocks_written > blocks, "{fault:?}: the sync was not logged");
        // Power lost, no closing commit: the pool opens without its log device (or ignores
        // it when passed), with every acknowledged sync — the last one replayed from the pool.
        let mut rng = SimRng::new(3);
        let d = disk.crash_image(CrashMode::DropUnflushed, &mut rng);
        let l = log.current_image();
        std::mem::forget(pool);
        for passed in [None, Some(l)] {
            let with = passed.is_some();
            let p = open(d.clone(), passed, test_pool_options())
                .unwrap_or_else(|e| panic!("{fault:?}: does not open after the failover (log passed: {with}): {e}"));
            assert_eq!(p.read(vol, obj, 4096, 6).unwrap(), b"synced", "{fault:?}");
            assert_eq!(p.read(vol, obj, 8192, 19).unwrap(), b"in the failed block", "{fault:?}");
            assert_eq!(p.read(vol, obj, 12288, 18).unwrap(), b"logged in the pool", "{fault:?}");
            let notes = p.status().open_notes;
            assert!(notes.iter().any(|n| n.contains("replayed")), "{fault:?}: {notes:?}");
            assert_eq!(with, notes.iter().any(|n| n.contains("no longer this pool's log")), "{notes:?}");
            assert!(p.check(CheckOptions::default()).unwrap().is_clean(), "{fault:?}");
        }
    }
}

#[test]
fn a_failed_write_of_referenced_log_data_latches_the_pool() {
    // The pool's own device failing under a sync is no log device failure: the pool latches.
    // (A large write is logged by reference: written to the pool's device, then logged.)
    let (disk, log, pool, vol, obj) = synced_pool();
    pool.write(vol, obj, 64 << 10, &[7u8; 64 << 10]).unwrap();
    let log_writes = log.write_count();
    disk.fail_writes(1);
    let e = pool.sync_log().expect_err("a failed pool device write was acknowledged");
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(pool.status().latched.is_some());
    assert_eq!(pool.write(vol, obj, 0, b"x").err().map(|e| e.kind()), Some(ErrorKind::ReadOnly));
    assert_eq!(log.write_count(), log_writes, "logged although its referenced data failed");
    assert_eq!(pool.status().log_failover, None);
}

#[test]
fn the_checker_verifies_the_log_device_label() {
    let (_disk, log, pool, _, _) = synced_pool();
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
    log.rot(30, 1); // inside the label: the log device guid
    let report = pool.check(CheckOptions::default()).unwrap();
    assert!(report.errors.iter().any(|e| e.contains("log device")), "{:?}", report.errors);
}

#[test]
fn create_refuses_a_small_or_shared_log_device() {
    let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
    let small = Arc::new(SimDisk::new(MIN_LOG_DEVICE_SIZE - 4096, SECTOR));
    let spec = LogDeviceSpec { dev: dyn_dev(&small), log_device_guid: LOG_GUID };
    let e = Pool::create_with_log(dyn_dev(&disk), test_create_options(1), Some(spec), test_pool_options())
        .err()
        .expect("a too small log device was accepted");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("at least"), "{e}");
    let spec = LogDeviceSpec { dev: dyn_dev(&disk), log_device_guid: LOG_GUID };
    let e = Pool::create_with_log(dyn_dev(&disk), test_create_options(1), Some(spec), test_pool_options())
        .err()
        .expect("the pool's own device was accepted as its log");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn pools_without_a_log_device_keep_the_old_label_bytes() {
    // Before log devices, bytes 208..224 of the label were reserved zeros and no incompat
    // feature was set: a pool made without a log device must still write exactly that, so
    // older builds open it and images they wrote open here.
    let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
    drop(Pool::create(dyn_dev(&disk), test_create_options(4), test_pool_options()).unwrap());
    let img = disk.current_image();
    for base in [0usize, 256 << 10] {
        assert_eq!(img[base + 208..base + 224], [0u8; 16], "label at {base}");
        assert_eq!(img[base + 104..base + 112], [0u8; 8], "incompat features at {base}");
    }
    let pool = open(img, None, test_pool_options()).unwrap();
    assert_eq!(pool.status().log_device, None);
    // And a pool with one sets the feature bit (bit 16) and names the device.
    let (disk, log) = (Arc::new(SimDisk::new(32 << 20, SECTOR)), Arc::new(SimDisk::new(MIN_LOG_DEVICE_SIZE, SECTOR)));
    drop(create(&disk, &log, 4));
    let img = disk.current_image();
    assert_eq!(u64::from_le_bytes(img[104..112].try_into().unwrap()), 1 << 16);
    assert_eq!(u64::from_le_bytes(img[208..216].try_into().unwrap()), LOG_GUID);
}

/// Adding a log device to a running pool, and removing it again: each time the pool
/// commits first, syncs then go to the new place, and after power loss the reopened pool
/// replays them from there (and insists on the device while its labels name it).
#[test]
fn a_log_device_is_added_and_removed_while_the_pool_runs() {
    let disk = Arc::new(SimDisk::new(32 << 20, SECTOR));
    let log = Arc::new(SimDisk::new(MIN_LOG_DEVICE_SIZE, SECTOR));
    let pool = Pool::create(dyn_dev(&disk), test_create_options(21), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions { record_size: 4096, ..Default::default() }).unwrap();
    let obj = pool.create_object(vol, b"f").unwrap();
    pool.write(vol, obj, 0, b"before").unwrap();
    pool.sync_log().unwrap();
    let e = pool.remove_log_device().expect_err("no log device yet");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");

    pool.add_log_device(LogDeviceSpec { dev: dyn_dev(&log), log_device_guid: LOG_GUID }).unwrap();
    assert!(pool.status().log_device.is_some());
    let e = pool.add_log_device(LogDeviceSpec { dev: dyn_dev(&log), log_device_guid: LOG_GUID + 1 }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    let (pool_writes, log_writes) = (disk.write_count(), log.write_count());
    pool.write(vol, obj, 0, b"on the log device").unwrap();
    pool.sync_log().unwrap();
    assert_eq!(disk.write_count(), pool_writes, "the sync wrote the pool's device");
    assert!(log.write_count() > log_writes);
    disk.set_crash_after(0);
    log.set_crash_after(0);
    drop(pool);
    let mut rng = SimRng::new(21);
    let (img, log_img) =
        (disk.crash_image(CrashMode::DropUnflushed, &mut rng), log.crash_image(CrashMode::DropUnflushed, &mut rng));
    let e = open(img.clone(), None, test_pool_options()).err().expect("the labels name the log device");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let (disk, log) = (Arc::new(SimDisk::from_image(img, SECTOR)), Arc::new(SimDisk::from_image(log_img, SECTOR)));
    let pool = Pool::open_with_log(dyn_dev(&disk), Some(dyn_dev(&log)), test_pool_options()).expect("opens with it");
    assert_eq!(pool.read(vol, obj, 0, 17).unwrap(), b"on the log device");
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());

    pool.remove_log_device().unwrap();
    assert!(pool.status().log_device.is_none());
    let log_writes = log.write_count();
    pool.write(vol, obj, 0, b"back in the pool's region").unwrap();
    pool.sync_log().unwrap();
    assert_eq!(log.write_count(), log_writes, "the sync wrote the removed log device");
    disk.set_crash_after(0);
    drop(pool);
    let img = disk.crash_image(CrashMode::DropUnflushed, &mut rng);
    let pool = open(img, None, test_pool_options()).expect("opens without a log device");
    assert!(pool.status().open_notes.iter().any(|n| n.contains("replayed")));
    assert_eq!(pool.read(vol, obj, 0, 25).unwrap(), b"back in the pool's region");
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
}

/// Every byte of `dev` in [offset, offset + len) is zero.
fn zeroed(dev: &SimDisk, offset: u64, len: u64) -> bool {
    let mut buf = vec![0u8; len as usize];
    dev.read_at(&mut buf, offset).unwrap();
    buf.iter().all(|&b| b == 0)
}

#[test]
fn log_regions_are_zeroed_when_made() {
    // Devices full of old bytes: the log regions (in the pool, on the log device, and on a
    // log device added later) are written with zeros, so an image file is allocated before
    // the log's first lap (LogPlace::prefill).
    let junk = |size: u64| Arc::new(SimDisk::from_image(vec![0xA5; size as usize], SECTOR));
    let disk = junk(32 << 20);
    let pool = Pool::create(dyn_dev(&disk), test_create_options(7), test_pool_options()).unwrap();
    let geo = strata_engine::alloc::Geometry::for_device(32 << 20).unwrap();
    assert!(zeroed(&disk, geo.log_offset, geo.log_bytes), "in-pool log region not zeroed");
    let mut after = vec![0u8; 4096];
    disk.read_at(&mut after, geo.data_offset).unwrap();
    assert!(after.iter().all(|&b| b == 0xA5), "zeroing went past the log region");

    let log = junk(MIN_LOG_DEVICE_SIZE);
    pool.add_log_device(LogDeviceSpec { dev: dyn_dev(&log), log_device_guid: LOG_GUID }).unwrap();
    let ld = strata_engine::pool::log_device::read_log_device_label(log.as_ref()).unwrap();
    assert!(zeroed(&log, ld.region_offset, ld.region_bytes), "added log device region not zeroed");
    drop(pool);

    let (disk, log) = (junk(32 << 20), junk(MIN_LOG_DEVICE_SIZE));
    let spec = LogDeviceSpec { dev: dyn_dev(&log), log_device_guid: LOG_GUID };
    Pool::create_with_log(dyn_dev(&disk), test_create_options(8), Some(spec), test_pool_options()).unwrap();
    let ld = strata_engine::pool::log_device::read_log_device_label(log.as_ref()).unwrap();
    assert!(zeroed(&log, ld.region_offset, ld.region_bytes), "log device region not zeroed at create");
}
