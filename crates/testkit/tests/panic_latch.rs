//! A panic while holding the pool's lock latches the pool read-only (STYLE.md "Concurrency
//! and failure", DESIGN.md §3.8): the panic may have left the in-memory state half updated,
//! so no later commit may write it, and the device keeps the last committed txg intact.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use strata_engine::format::{LABEL_SIZE, RING_SLOTS};
use strata_engine::txg::ring_slot_addr;
use strata_engine::{BlockDevice, CheckOptions, ErrorKind, ObjectId, Pool, VolumeId, VolumeOptions};
use strata_testkit::model::{capture, PoolModel};
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

/// Where [`PanicOn`] panics.
#[derive(Clone, Copy)]
enum Target {
    /// The first label's uberblock ring: step 4 of a commit, under the pool's lock, after
    /// the txg's blocks and space maps were written and the allocator's memory updated.
    Root,
    /// Any block past the labels: the first is a data block a commit's prewrite writes
    /// without the pool's lock, under its batch's lock.
    Data,
}

/// A [`SimDisk`] that, once armed, panics on the next write to its target (once).
struct PanicOn {
    disk: Arc<SimDisk>,
    target: Target,
    armed: AtomicBool,
}

impl BlockDevice for PanicOn {
    fn size_bytes(&self) -> u64 {
        self.disk.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.disk.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let hit = match self.target {
            Target::Root => (ring_slot_addr(0, 0)..ring_slot_addr(0, RING_SLOTS)).contains(&offset),
            Target::Data => offset >= 2 * LABEL_SIZE,
        };
        if hit && self.armed.swap(false, Ordering::SeqCst) {
            panic!("injected: a bug while writing to the device");
        }
        self.disk.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.disk.flush()
    }
    fn describe(&self) -> String {
        "panic-on-write".into()
    }
}

/// A pool with one volume, two objects, committed; the committed model.
fn committed_pool(dev: Arc<dyn BlockDevice>) -> (Pool, VolumeId, Vec<ObjectId>, PoolModel) {
    let pool = Pool::create(dev, test_create_options(5), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let objs: Vec<ObjectId> = (0..2u8).map(|i| pool.create_object(vol, &[i]).unwrap()).collect();
    for (i, &o) in objs.iter().enumerate() {
        let data: Vec<u8> = (0..3 * 16384u32).map(|j| (j % 251) as u8 ^ i as u8).collect();
        pool.write(vol, o, 0, &data).unwrap();
    }
    pool.kv_put(vol, b"k", b"committed").unwrap();
    pool.commit().unwrap();
    let model = capture(&pool).unwrap();
    (pool, vol, objs, model)
}

/// Latched with the panic as the reason (`why` is part of the message); writes, commits and administrative changes fail
/// with ReadOnly and say why; reads of committed data go on.
fn assert_latched_by_panic(pool: &Pool, vol: VolumeId, objs: &[ObjectId], expect: &str) {
    let why = pool.status().latched.expect("a panic under a lock latches the pool");
    assert!(why.contains(expect), "{why}");
    let e = pool.write(vol, objs[0], 0, b"after the panic").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ReadOnly, "{e}");
    assert!(e.to_string().contains("panicked"), "{e}");
    assert_eq!(pool.commit().unwrap_err().kind(), ErrorKind::ReadOnly);
    assert_eq!(pool.guard().commit().unwrap_err().kind(), ErrorKind::ReadOnly);
    assert_eq!(pool.kv_put(vol, b"k", b"after").unwrap_err().kind(), ErrorKind::ReadOnly);
    assert_eq!(pool.create_volume("w", &VolumeOptions::default()).unwrap_err().kind(), ErrorKind::ReadOnly);
    assert_eq!(pool.read(vol, objs[1], 0, 4).unwrap(), vec![1, 0, 3, 2]);
    // Still latched, for the same reason, the second time anyone looks.
    assert_eq!(pool.status().latched.as_deref(), Some(why.as_str()));
}

/// The device (and a copy of it taken before the pool is dropped) holds exactly the
/// committed model, and the checker finds it clean.
fn assert_committed_intact(image: Vec<u8>, committed: &PoolModel) {
    let disk = Arc::new(SimDisk::from_image(image, 4096));
    let pool = Pool::open(disk as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
    let seen = capture(&pool).unwrap();
    assert!(seen == *committed, "{:?}", committed.diff(&seen));
    let r = pool.check(CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
}

#[test]
fn a_panic_in_a_txn_latches_and_nothing_half_done_is_committed() {
    let disk = Arc::new(SimDisk::new(32 << 20, 4096));
    let (pool, vol, objs, committed) = committed_pool(disk.clone());
    let txg = pool.status().txg;
    // A complete change in the open txg, then an operation that panics halfway through,
    // under the lock (a `PoolGuard` holds it).
    pool.write(vol, objs[1], 100, b"dirty, never committed").unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut t = pool.guard();
        t.write(vol, objs[0], 0, b"half").unwrap();
        t.create_object(vol, b"half").unwrap();
        panic!("injected: a bug halfway through an operation");
    }));
    assert!(r.is_err());
    let why = format!("panicked while holding the pool lock (see the log for the panic); memory may be half updated, the device holds txg {txg}");
    assert_latched_by_panic(&pool, vol, &objs, &why);
    let image = disk.current_image();
    // Closing commits what is dirty, unless latched: nothing is written.
    let writes = disk.write_count();
    drop(pool);
    assert_eq!(disk.write_count(), writes, "a latched pool writes nothing on close");
    assert_committed_intact(image, &committed);
    assert_committed_intact(disk.current_image(), &committed);
}

/// A commit that panics on a write of `target`; the committed model stays on the device.
fn panic_during_commit(target: Target, why: &str) {
    let disk = Arc::new(SimDisk::new(32 << 20, 4096));
    let dev = Arc::new(PanicOn { disk: disk.clone(), target, armed: AtomicBool::new(false) });
    let (pool, vol, objs, committed) = committed_pool(dev.clone());
    let txg = pool.status().txg;
    let data: Vec<u8> = (0..2 * 16384u32).map(|j| (j % 13) as u8).collect();
    pool.write(vol, objs[0], 16384, &data).unwrap();
    pool.kv_put(vol, b"k", b"never committed").unwrap();
    dev.armed.store(true, Ordering::SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| pool.commit()));
    assert!(r.is_err(), "the commit panicked: {r:?}");
    assert!(!dev.armed.load(Ordering::SeqCst), "the device panicked");
    if let Target::Data = target {
        // The panic left the pool's lock alone; the next commit finds the batch it broke,
        // fails and latches.
        let e = pool.commit().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    assert_latched_by_panic(&pool, vol, &objs, &why.replace("{txg}", &txg.to_string()));
    assert_eq!(pool.status().txg, txg);
    let image = disk.current_image();
    drop(pool);
    assert_committed_intact(image, &committed);
    assert_committed_intact(disk.current_image(), &committed);
}

#[test]
fn a_panic_during_a_commit_latches_and_the_last_root_stays() {
    // Under the pool's lock, with the allocator and space maps half synced.
    panic_during_commit(Target::Root, "panicked while holding the pool lock (see the log for the panic); memory may be half updated, the device holds txg {txg}");
}

#[test]
fn a_panic_while_prewriting_latches_and_the_last_root_stays() {
    // Without the pool's lock, halfway through a prewrite batch: the commit that completes
    // the batch must not take its unwritten blocks for written.
    let why = "write prewritten blocks: a thread panicked while writing them";
    panic_during_commit(Target::Data, why);
}
