//! The quiescing txg (engine quiesce.rs, volume/freeze.rs): a commit freezes the open txg,
//! writes its data while writes go on, then syncs. What the txg holds is exactly the state
//! at the freeze; writes made meanwhile are read back at once, belong to the next txg, and
//! are durable through the intent log once synced; every other change waits for the sync.
//!
//! Waiting and not waiting are proved with the engine's failpoints, not with sleeps: a
//! commit is held at `commit.freeze_to_sync` (or between `begin_commit` and `finish`), a
//! data write must complete meanwhile, and a change that must wait is seen waiting
//! (`Pool::waiting_on_commit`) and not done until the gate opens. Crash cases check every
//! crash image: only the flushed writes, all of them, and torn and reordered ones
//! (CrashMode::Random with several seeds).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_engine::failpoint::{self, COMMIT_FREEZE_TO_SYNC, PREWRITE_HANDOFF};
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

/// Every pool a crash now could leave, reopened: only the flushed writes, all of them, and
/// torn and reordered unflushed writes (three draws).
fn after_crash(disk: &SimDisk, seed: u64) -> Vec<(String, Pool)> {
    let mut modes = vec![(CrashMode::DropUnflushed, seed), (CrashMode::KeepAll, seed)];
    modes.extend((0..3).map(|i| (CrashMode::Random, seed * 10 + i)));
    modes
        .into_iter()
        .map(|(mode, s)| {
            let image = disk.crash_image(mode, &mut SimRng::new(s));
            let pool =
                Pool::open(Arc::new(SimDisk::from_image(image, 512)) as Arc<dyn BlockDevice>, test_pool_options())
                    .unwrap_or_else(|e| panic!("the {mode:?} image (rng {s}) does not open: {e}"));
            (format!("{mode:?} image (rng {s})"), pool)
        })
        .collect()
}

fn assert_clean(pool: &Pool) {
    let r = pool.check(CheckOptions::default()).expect("check runs");
    assert!(r.is_clean(), "checker found: {:#?}", r.errors);
}

/// Wait (yielding, never sleeping a fixed time) until `cond` holds; fail after 20 s, naming
/// what did not happen.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::yield_now();
    }
}

/// Run `f` on another thread and wait for it: a data write must not wait for the commit
/// held meanwhile (if it did, the test would otherwise hang instead of failing).
fn completes_while_held<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()).expect("the test waits"));
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} waited for the commit held between freeze and sync"))
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
    for (image, crashed) in after_crash(&disk, 1) {
        assert_eq!(crashed.committed_root().txg, synced, "{image}");
        let got = model::capture(&crashed).unwrap();
        assert_eq!(got, frozen_state, "{image}: {:?}", got.diff(&frozen_state));
        assert_clean(&crashed);
    }

    // The next commit takes them; the live dnode kept its new size and attribute.
    assert_eq!(pool.read(vol, obj, 0, 11 * RS).unwrap(), want);
    assert_eq!(pool.get_attr(vol, obj).unwrap(), b"v2");
    pool.commit().unwrap();
    assert_clean(&pool);
    for (image, reopened) in after_crash(&disk, 2) {
        let got = model::capture(&reopened).unwrap();
        assert_eq!(got, live_state, "{image}: {:?}", got.diff(&live_state));
        assert_clean(&reopened);
    }
}

#[test]
fn a_sync_after_the_commit_logs_the_writes_made_during_it() {
    let (disk, pool, vol) = new_pool(12);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.sync_log().unwrap(); // commits the new volume: the log needs it in a root
    pool.write(vol, obj, 0, &pattern(1, 4 * RS)).unwrap();
    pool.sync_object(vol, obj).unwrap();
    pool.write(vol, obj, 4 * RS as u64, &pattern(9, RS)).unwrap();
    let pool = Arc::new(pool);
    // A commit, held once it has frozen its txg.
    let gate = pool.failpoints().pause(COMMIT_FREEZE_TO_SYNC);
    let committer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.commit().unwrap())
    };
    gate.wait_arrivals(1);
    // Data writes go on meanwhile.
    let p = pool.clone();
    completes_while_held("a data write", move || {
        p.write(vol, obj, RS as u64, &pattern(7, RS)).unwrap();
        p.write(vol, obj, 5 * RS as u64 + 7, b"appended while the commit ran").unwrap();
    });
    // An fsync asked for meanwhile waits for the commit, then logs what it needs.
    let fsynced = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (pool, fsynced) = (pool.clone(), fsynced.clone());
        std::thread::spawn(move || {
            pool.sync_object(vol, obj).unwrap();
            fsynced.store(true, Ordering::SeqCst);
        })
    };
    wait_until("the fsync waiting for the commit", || pool.waiting_on_commit() == 1 || fsynced.load(Ordering::SeqCst));
    assert!(!fsynced.load(Ordering::SeqCst), "a log write waits while the commit quiesces");
    assert_eq!(gate.arrivals(), 1, "the commit is still held");
    gate.open();
    let synced = committer.join().unwrap();
    syncer.join().unwrap();
    assert!(fsynced.load(Ordering::SeqCst));
    let want = model::capture(&pool).unwrap();
    // Crash with root N durable and the log holding only the groups made after its freeze.
    for (image, crashed) in after_crash(&disk, 3) {
        assert_eq!(crashed.committed_root().txg, synced + 1, "{image}: replay commits once");
        let got = model::capture(&crashed).unwrap();
        assert_eq!(got, want, "{image}: {:?}", got.diff(&want));
        assert_clean(&crashed);
    }
}

#[test]
fn other_changes_wait_for_the_sync_and_then_apply() {
    let (disk, pool, vol) = new_pool(13);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &pattern(1, 6 * RS)).unwrap();
    pool.kv_put(vol, b"name", b"obj").unwrap();
    let pool = Arc::new(pool);
    let gate = pool.failpoints().pause(COMMIT_FREEZE_TO_SYNC);
    let committer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.commit().unwrap())
    };
    gate.wait_arrivals(1);
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
    let p = pool.clone();
    let name = completes_while_held("a data write and a key read", move || {
        p.write(vol, obj, 3 * RS as u64, &pattern(4, RS)).unwrap();
        assert_eq!(p.object_size(vol, obj).unwrap(), 6 * RS as u64);
        p.kv_get(vol, b"name").unwrap()
    });
    assert_eq!(name.as_deref(), Some(&b"obj"[..]));
    wait_until("the truncate waiting for the commit", || pool.waiting_on_commit() == 1 || done.load(Ordering::SeqCst));
    assert!(!done.load(Ordering::SeqCst), "a truncate waits while the commit quiesces");
    gate.open();
    committer.join().unwrap();
    let made = changer.join().unwrap();
    let want = pattern(1, RS + 5);
    assert_eq!(pool.read(vol, obj, 0, 6 * RS).unwrap(), want, "the truncate came after the write");
    assert_eq!(pool.kv_get(vol, b"name").unwrap().as_deref(), Some(&b"renamed"[..]));
    assert_eq!(pool.read(vol, made, 0, 100).unwrap(), b"fresh");
    pool.commit().unwrap();
    assert_clean(&pool);
    let state = model::capture(&pool).unwrap();
    for (image, reopened) in after_crash(&disk, 4) {
        assert_eq!(model::capture(&reopened).unwrap(), state, "{image}");
        assert_clean(&reopened);
    }
}

/// A commit that comes while a prewrite is held after handing its batch over (blocks
/// allocated, not yet written) writes the batch itself before its root: every crash image
/// holds the data the root points at.
#[test]
fn a_commit_writes_a_prewrite_batch_handed_over_but_not_yet_written() {
    let (disk, pool, vol) = new_pool(16);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &pattern(3, 8 * RS)).unwrap();
    let pool = Arc::new(pool);
    let gate = pool.failpoints().pause(PREWRITE_HANDOFF);
    let prewriter = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.prewrite().unwrap())
    };
    gate.wait_arrivals(1);
    let p = pool.clone();
    completes_while_held("a commit", move || p.commit().unwrap());
    let want = model::capture(&pool).unwrap();
    for (image, crashed) in after_crash(&disk, 16) {
        let got = model::capture(&crashed).unwrap_or_else(|e| panic!("{image}: {e}"));
        assert_eq!(got, want, "{image}: {:?}", got.diff(&want));
        assert_clean(&crashed);
    }
    gate.open();
    assert!(prewriter.join().unwrap().records > 0, "the held prewrite had records to write");
    assert_clean(&pool);
}

/// An error between the freeze and the sync fails the commit and latches the pool: the
/// device keeps the last commit, which reopening returns to.
#[test]
fn an_error_between_freeze_and_sync_latches_and_keeps_the_last_commit() {
    let (disk, pool, vol) = new_pool(17);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &pattern(1, 2 * RS)).unwrap();
    pool.commit().unwrap();
    let committed = model::capture(&pool).unwrap();
    pool.write(vol, obj, 0, &pattern(2, 2 * RS)).unwrap();
    pool.failpoints().fail(COMMIT_FREEZE_TO_SYNC, 0, 1);
    let e = pool.commit().unwrap_err();
    assert!(failpoint::is_injected(&e), "{e}");
    assert!(pool.status().latched.is_some(), "the pool latches");
    assert!(pool.write(vol, obj, 0, b"x").is_err(), "and takes no more writes");
    for (image, crashed) in after_crash(&disk, 17) {
        assert_eq!(model::capture(&crashed).unwrap(), committed, "{image}");
        assert_clean(&crashed);
    }
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
    for (image, crashed) in after_crash(&disk, 5) {
        assert_eq!(model::capture(&crashed).unwrap(), frozen_state, "{image}");
    }
    assert_eq!(model::capture(&pool).unwrap(), live_state);
    pool.truncate(vol, obj, RS as u64).unwrap();
    pool.write(vol, obj, 3 * RS as u64, b"x").unwrap();
    pool.commit().unwrap();
    assert_clean(&pool);
    let mut want = pattern(2, RS);
    want.resize(3 * RS, 0);
    want.push(b'x');
    assert_eq!(pool.read(vol, obj, 0, 4 * RS).unwrap(), want);
    for (image, crashed) in after_crash(&disk, 6) {
        assert_eq!(crashed.read(vol, obj, 0, 4 * RS).unwrap(), want, "{image}");
        assert_clean(&crashed);
    }
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
            for (image, crashed) in after_crash(&disk, round as u64) {
                assert_eq!(crashed.read(vol, obj, 0, file.len()).unwrap(), file, "{image} after round {round}");
            }
        }
    }
    pool.sync_object(vol, obj).unwrap();
    stop.store(true, Ordering::SeqCst);
    let commits = committer.join().unwrap();
    assert!(commits > 0);
    assert_eq!(pool.read(vol, obj, 0, file.len()).unwrap(), file);
    for (image, crashed) in after_crash(&disk, 7) {
        assert_eq!(crashed.read(vol, obj, 0, file.len()).unwrap(), file, "{image} after {commits} commits");
        assert_clean(&crashed);
    }
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
    for (image, reopened) in after_crash(&sim, seed) {
        let vol = reopened.volume_id("db").unwrap();
        assert_eq!(reopened.read(vol, obj, 0, LEN).unwrap(), pattern(last, LEN), "{image}");
    }
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
    for (image, reopened) in after_crash(&sim, 43) {
        let vol = reopened.volume_id("db").unwrap();
        assert_eq!(reopened.read(vol, obj, 0, 2 * LEN).unwrap(), want, "{image}");
    }
}
