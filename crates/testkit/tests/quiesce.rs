//! The quiescing txg (engine quiesce.rs, volume/freeze.rs): a commit freezes the open txg,
//! writes its data while writes go on, then syncs. What the txg holds is exactly the state
//! at the freeze; writes made meanwhile are read back at once, belong to the next txg, and
//! are durable through the intent log once synced; every other change waits for the sync.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use strata_engine::{BlockDevice, CheckOptions, Pool, VolumeId};
use strata_testkit::{model, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng};

const RS: usize = 16 << 10;

fn new_pool(seed: u64) -> (Arc<SimDisk>, Pool, VolumeId) {
    let disk = Arc::new(SimDisk::new(64 << 20, 512));
    let pool = Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).expect("create pool");
    let vol = pool.create_volume("db", &Default::default()).unwrap();
    (disk, pool, vol)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) | 1).collect()
}

/// The pool as a crash now would leave it (only flushed writes survive), reopened.
fn after_crash(disk: &SimDisk, seed: u64) -> Pool {
    let image = disk.crash_image(CrashMode::DropUnflushed, &mut SimRng::new(seed));
    Pool::open(Arc::new(SimDisk::from_image(image, 512)) as Arc<dyn BlockDevice>, test_pool_options()).unwrap()
}

fn assert_clean(pool: &Pool) {
    let r = pool.check(CheckOptions::default()).expect("check runs");
    assert!(r.is_clean(), "checker found: {:#?}", r.errors);
}

#[test]
fn writes_during_a_commit_are_read_back_and_belong_to_the_next_txg() {
    let (disk, pool, vol) = new_pool(11);
    let obj = pool.create_object(vol, b"v1").unwrap();
    let quiet = pool.create_object(vol, b"other").unwrap();
    pool.write(vol, obj, 0, &pattern(1, 8 * RS)).unwrap();
    pool.write(vol, quiet, 0, &pattern(5, 3 * RS)).unwrap();
    let frozen_state = model::capture(&pool).unwrap();

    let txg = pool.begin_commit().unwrap();
    // Whole records, a partial edit of a frozen record, an extension and an attribute,
    // and a write to an object that was clean at the freeze.
    pool.write(vol, obj, 2 * RS as u64, &pattern(2, 2 * RS)).unwrap();
    pool.write(vol, obj, 5 * RS as u64 + 100, b"partly rewritten").unwrap();
    pool.write(vol, obj, 10 * RS as u64, &pattern(3, RS)).unwrap();
    pool.set_attr(vol, obj, b"v2").unwrap();
    let mut want = pattern(1, 8 * RS);
    want[2 * RS..4 * RS].copy_from_slice(&pattern(2, 2 * RS));
    want[5 * RS + 100..5 * RS + 116].copy_from_slice(b"partly rewritten");
    want.resize(10 * RS, 0);
    want.extend_from_slice(&pattern(3, RS));
    assert_eq!(pool.read(vol, obj, 0, 11 * RS).unwrap(), want, "reads see writes made since the freeze");
    assert_eq!(pool.read(vol, quiet, 0, 3 * RS).unwrap(), pattern(5, 3 * RS), "and the frozen data");
    assert_eq!(pool.object_size(vol, obj).unwrap(), 11 * RS as u64);
    let synced = txg.finish().unwrap();
    let live_state = model::capture(&pool).unwrap();

    // A crash now finds the txg as it was at the freeze: the later writes were never synced.
    let crashed = after_crash(&disk, 1);
    assert_eq!(crashed.committed_root().txg, synced);
    let got = model::capture(&crashed).unwrap();
    assert_eq!(got, frozen_state, "{:?}", got.diff(&frozen_state));
    assert_clean(&crashed);
    drop(crashed);

    // The next commit takes them; the live dnode kept its new size and attribute.
    assert_eq!(pool.read(vol, obj, 0, 11 * RS).unwrap(), want);
    assert_eq!(pool.get_attr(vol, obj).unwrap(), b"v2");
    pool.commit().unwrap();
    assert_clean(&pool);
    let reopened = after_crash(&disk, 2);
    let got = model::capture(&reopened).unwrap();
    assert_eq!(got, live_state, "{:?}", got.diff(&live_state));
    assert_clean(&reopened);
}

#[test]
fn a_sync_after_the_commit_logs_the_writes_made_during_it() {
    let (disk, pool, vol) = new_pool(12);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.sync_log().unwrap(); // commits the new volume: the log needs it in a root
    pool.write(vol, obj, 0, &pattern(1, 4 * RS)).unwrap();
    pool.sync_object(vol, obj).unwrap();
    let pool = Arc::new(pool);
    let txg = pool.begin_commit().unwrap();
    pool.write(vol, obj, RS as u64, &pattern(7, RS)).unwrap();
    pool.write(vol, obj, 4 * RS as u64 + 7, b"appended while the commit ran").unwrap();
    // An fsync asked for meanwhile waits for the commit, then logs what it needs.
    let fsynced = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (pool, fsynced) = (pool.clone(), fsynced.clone());
        std::thread::spawn(move || {
            pool.sync_object(vol, obj).unwrap();
            fsynced.store(true, Ordering::SeqCst);
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(!fsynced.load(Ordering::SeqCst), "a log write waits while the commit quiesces");
    txg.finish().unwrap();
    syncer.join().unwrap();
    let want = model::capture(&pool).unwrap();
    // Crash with root N durable and the log holding only the groups made after its freeze.
    let crashed = after_crash(&disk, 3);
    let got = model::capture(&crashed).unwrap();
    assert_eq!(got, want, "{:?}", got.diff(&want));
    assert_clean(&crashed);
}

#[test]
fn other_changes_wait_for_the_sync_and_then_apply() {
    let (disk, pool, vol) = new_pool(13);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &pattern(1, 6 * RS)).unwrap();
    pool.kv_put(vol, b"name", b"obj").unwrap();
    let pool = Arc::new(pool);
    let txg = pool.begin_commit().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let changer = {
        let (pool, done) = (pool.clone(), done.clone());
        std::thread::spawn(move || {
            pool.truncate(vol, obj, RS as u64 + 5).unwrap();
            pool.kv_put(vol, b"name", b"renamed").unwrap();
            let made = pool.create_object(vol, b"new").unwrap();
            pool.write(vol, made, 0, b"fresh").unwrap();
            done.store(true, Ordering::SeqCst);
            made
        })
    };
    // Meanwhile a data write goes through, and reads of keys and sizes answer.
    pool.write(vol, obj, 3 * RS as u64, &pattern(4, RS)).unwrap();
    assert_eq!(pool.kv_get(vol, b"name").unwrap().as_deref(), Some(&b"obj"[..]));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!done.load(Ordering::SeqCst), "a truncate waits while the commit quiesces");
    txg.finish().unwrap();
    let made = changer.join().unwrap();
    let want = pattern(1, RS + 5);
    assert_eq!(pool.read(vol, obj, 0, 6 * RS).unwrap(), want, "the truncate came after the write");
    assert_eq!(pool.kv_get(vol, b"name").unwrap().as_deref(), Some(&b"renamed"[..]));
    assert_eq!(pool.read(vol, made, 0, 100).unwrap(), b"fresh");
    pool.commit().unwrap();
    assert_clean(&pool);
    let state = model::capture(&pool).unwrap();
    let reopened = after_crash(&disk, 4);
    assert_eq!(model::capture(&reopened).unwrap(), state);
    assert_clean(&reopened);
}

#[test]
fn a_commit_dropped_before_it_finished_syncs_its_txg() {
    let (disk, pool, vol) = new_pool(14);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &pattern(1, 4 * RS)).unwrap();
    let frozen_state = model::capture(&pool).unwrap();
    let txg = pool.begin_commit().unwrap();
    pool.write(vol, obj, 0, &pattern(2, RS)).unwrap();
    let live_state = model::capture(&pool).unwrap();
    drop(txg);
    // Durable now, without the write made during it, which the pool still serves;
    // truncates and the like may run again.
    assert_eq!(model::capture(&after_crash(&disk, 5)).unwrap(), frozen_state);
    assert_eq!(model::capture(&pool).unwrap(), live_state);
    pool.truncate(vol, obj, RS as u64).unwrap();
    pool.write(vol, obj, 3 * RS as u64, b"x").unwrap();
    pool.commit().unwrap();
    assert_clean(&pool);
    let mut want = pattern(2, RS);
    want.resize(3 * RS, 0);
    want.push(b'x');
    assert_eq!(pool.read(vol, obj, 0, 4 * RS).unwrap(), want);
    let crashed = after_crash(&disk, 6);
    assert_eq!(crashed.read(vol, obj, 0, 4 * RS).unwrap(), want);
    assert_clean(&crashed);
}

/// A writer rewriting a file while commits run back to back, with fsyncs between: a crash
/// after any fsync finds every write up to it, and the pool checks clean.
#[test]
fn concurrent_rewrites_and_commits_lose_no_synced_write() {
    let (disk, pool, vol) = new_pool(15);
    let obj = pool.create_object(vol, b"").unwrap();
    let pool = Arc::new(pool);
    let stop = Arc::new(AtomicBool::new(false));
    let committer = {
        let (pool, stop) = (pool.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                pool.commit().unwrap();
                n += 1;
            }
            n
        })
    };
    let mut rng = SimRng::new(15);
    let mut file = vec![0u8; 0];
    for round in 0..300u32 {
        let rec = rng.below(32) as usize;
        let len = if rng.chance(50) { RS } else { rng.range(1, 3000) as usize };
        let at = rec * RS + if len == RS { 0 } else { rng.below((RS - len) as u64) as usize };
        let bytes = pattern(round as u8, len);
        pool.write(vol, obj, at as u64, &bytes).unwrap();
        if file.len() < at + len {
            file.resize(at + len, 0);
        }
        file[at..at + len].copy_from_slice(&bytes);
        if round % 10 == 9 {
            pool.sync_object(vol, obj).unwrap();
        }
        if round % 50 == 49 {
            // A crash right now, with commits running: every synced write is durable.
            let crashed = after_crash(&disk, round as u64);
            assert_eq!(crashed.read(vol, obj, 0, file.len()).unwrap(), file, "crash after round {round}");
        }
    }
    pool.sync_object(vol, obj).unwrap();
    stop.store(true, Ordering::SeqCst);
    let commits = committer.join().unwrap();
    assert!(commits > 0);
    assert_eq!(pool.read(vol, obj, 0, file.len()).unwrap(), file);
    let crashed = after_crash(&disk, 7);
    assert_eq!(crashed.read(vol, obj, 0, file.len()).unwrap(), file, "after {commits} commits");
    assert_clean(&crashed);
    assert_clean(&pool);
}

/// A SimDisk whose writes take `delay` once `slow` is set: long prewrite passes.
struct SlowDisk {
    inner: Arc<SimDisk>,
    slow: AtomicBool,
    delay: Duration,
}

impl BlockDevice for SlowDisk {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.slow.load(Ordering::Relaxed) {
            std::thread::sleep(self.delay);
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn describe(&self) -> String {
        "slow simulated disk".into()
    }
}

/// Commits while a writer rewrites a 1 MiB file over and over (fsyncing each round if
/// `fsync`), every device write taking 30 ms: the early prewrite passes are overtaken by
/// the writer. Returns the early passes skipped, after checking that the last round is what
/// the pool and a crash image of it hold.
fn commits_under_a_rewriting_writer(seed: u64, fsync: bool) -> u64 {
    const LEN: usize = 1 << 20;
    let sim = Arc::new(SimDisk::new(64 << 20, 512));
    let disk =
        Arc::new(SlowDisk { inner: sim.clone(), slow: AtomicBool::new(false), delay: Duration::from_millis(30) });
    let pool = Arc::new(Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).unwrap());
    let vol = pool.create_volume("db", &Default::default()).unwrap();
    let obj = pool.create_object(vol, b"f").unwrap();
    pool.write(vol, obj, 0, &pattern(0, LEN)).unwrap();
    pool.commit().unwrap();
    disk.slow.store(true, Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (pool, stop, rounds) = (pool.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            let mut round = 0u8;
            while !stop.load(Ordering::Relaxed) {
                round = round.wrapping_add(1);
                pool.write(vol, obj, 0, &pattern(round, LEN)).unwrap();
                if fsync {
                    pool.sync_object(vol, obj).unwrap();
                }
                rounds.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
            round
        })
    };
    for _ in 0..5 {
        // Each commit finds the writer's data (it does not race ahead of the writer).
        let seen = rounds.load(Ordering::Relaxed);
        while rounds.load(Ordering::Relaxed) == seen {
            std::thread::sleep(Duration::from_millis(1));
        }
        pool.commit().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let last = writer.join().unwrap();
    disk.slow.store(false, Ordering::Relaxed);
    pool.commit().unwrap();
    assert_eq!(pool.read(vol, obj, 0, LEN).unwrap(), pattern(last, LEN));
    assert_clean(&pool);
    let reopened = after_crash(&sim, seed);
    let vol = reopened.volume_id("db").unwrap();
    assert_eq!(reopened.read(vol, obj, 0, LEN).unwrap(), pattern(last, LEN));
    pool.status_commits().early_passes_skipped
}

#[test]
fn commits_skip_early_passes_a_rewriting_writer_overtakes() {
    assert!(commits_under_a_rewriting_writer(41, false) >= 1, "early passes written in vain are skipped next time");
}

#[test]
fn commits_keep_early_passes_while_anyone_syncs() {
    assert_eq!(commits_under_a_rewriting_writer(42, true), 0, "log writes would wait for a longer freeze");
}

/// A txg that already shows a writer rewriting its data (more bytes written again than are
/// dirty) skips the early passes at its first commit, without a commit in vain to learn
/// from; a txg whose records were written once, or whose writer syncs, keeps them.
#[test]
fn a_txg_of_rewrites_skips_early_passes_at_its_first_commit() {
    const LEN: usize = 1 << 20;
    let sim = Arc::new(SimDisk::new(64 << 20, 512));
    let pool = Pool::create(sim.clone(), test_create_options(43), test_pool_options()).unwrap();
    let vol = pool.create_volume("db", &Default::default()).unwrap();
    let obj = pool.create_object(vol, b"f").unwrap();
    let skipped = |pool: &Pool| pool.status_commits().early_passes_skipped;
    pool.write(vol, obj, 0, &pattern(0, LEN)).unwrap();
    pool.commit().unwrap();
    assert_eq!(skipped(&pool), 0, "every record written once");
    for round in 1..=3 {
        pool.write(vol, obj, 0, &pattern(round, LEN)).unwrap();
    }
    pool.commit().unwrap();
    assert_eq!(skipped(&pool), 1, "the file was rewritten three times in one txg");
    // Rewritten once: as many bytes written again as are dirty.
    pool.write(vol, obj, 0, &pattern(4, LEN / 2)).unwrap();
    pool.write(vol, obj, 0, &pattern(5, LEN / 2)).unwrap();
    pool.commit().unwrap();
    assert_eq!(skipped(&pool), 2, "half the file, written twice");
    pool.write(vol, obj, LEN as u64, &pattern(6, LEN)).unwrap();
    pool.write(vol, obj, 0, &pattern(7, LEN / 4)).unwrap();
    pool.commit().unwrap();
    assert_eq!(skipped(&pool), 2, "a quarter written again is less than what is dirty");
    for round in 8..=10 {
        pool.write(vol, obj, 0, &pattern(round, LEN)).unwrap();
        pool.sync_object(vol, obj).unwrap();
    }
    pool.commit().unwrap();
    assert_eq!(skipped(&pool), 2, "log writes would wait for a longer freeze");
    let mut want = pattern(10, LEN);
    want.extend_from_slice(&pattern(6, LEN));
    assert_eq!(pool.read(vol, obj, 0, 2 * LEN).unwrap(), want);
    assert_clean(&pool);
    let reopened = after_crash(&sim, 43);
    let vol = reopened.volume_id("db").unwrap();
    assert_eq!(reopened.read(vol, obj, 0, 2 * LEN).unwrap(), want);
}
