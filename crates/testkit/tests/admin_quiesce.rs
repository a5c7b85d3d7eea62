//! Snapshots, clones, restores and snapshot deletes go through the quiescing commit
//! (`Pool::commit_then`): while their commit is held between its freeze and its sync
//! (failpoint `commit.freeze_to_sync`; reached when there is dirty data to write), data
//! writes go on; the change then applies, and
//! includes what was written meanwhile. (Mutation check: with `create_snapshots` taking the
//! pool lock and committing under it, as before, the commit never reaches the failpoint
//! and the first test fails after its 20 s deadline.)

use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_engine::failpoint::COMMIT_FREEZE_TO_SYNC;
use strata_engine::{CheckOptions, Pool, VolumeId};
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

const RS: usize = 16 << 10;

fn new_pool(seed: u64) -> (Arc<Pool>, VolumeId) {
    let disk = Arc::new(SimDisk::new(64 << 20, 512));
    let pool = Pool::create(disk, test_create_options(seed), test_pool_options()).unwrap();
    let vol = pool.create_volume("db", &Default::default()).unwrap();
    (Arc::new(pool), vol)
}

/// Wait (yielding, never sleeping a fixed time) until `cond` holds; fail after 20 s.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::yield_now();
    }
}

/// `op` on another thread, held at the freeze of its commit while a data write of
/// `during` at `offset` completes; then released. Returns what `op` returned.
fn run_held<T: Send + 'static>(
    pool: &Arc<Pool>,
    vol: VolumeId,
    obj: strata_engine::ObjectId,
    during: Vec<u8>,
    op: impl FnOnce(&Pool) -> T + Send + 'static,
) -> T {
    let gate = pool.failpoints().pause(COMMIT_FREEZE_TO_SYNC);
    let worker = {
        let pool = pool.clone();
        std::thread::spawn(move || op(&pool))
    };
    wait_until("the operation's commit reaching the freeze", || gate.arrivals() >= 1);
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let pool = pool.clone();
        std::thread::spawn(move || tx.send(pool.write(vol, obj, 0, &during)).expect("the test waits"));
    }
    rx.recv_timeout(Duration::from_secs(20))
        .expect("a data write waited for the operation's commit")
        .expect("the data write succeeds");
    assert_eq!(gate.arrivals(), 1, "the operation's commit is still held");
    gate.open();
    worker.join().expect("the operation does not panic")
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..4 * RS).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
}

#[test]
fn a_snapshot_lets_writers_go_on_while_its_commit_writes_the_data() {
    let (pool, vol) = new_pool(21);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &pattern(1)).unwrap(); // dirty when the snapshot is asked for
    let snaps = run_held(&pool, vol, obj, pattern(2), |p| p.create_snapshots(&["db"], "s1"));
    assert_eq!(snaps.unwrap().len(), 1);
    let view = pool.open_snapshot_view("db", "s1").unwrap();
    assert_eq!(pool.read(view, obj, 0, 4 * RS).unwrap(), pattern(2), "the snapshot holds the write made meanwhile");
    pool.close_snapshot_view(view);
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
}

#[test]
fn clones_restores_and_snapshot_deletes_go_through_the_quiescing_commit_too() {
    let (pool, vol) = new_pool(22);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &pattern(1)).unwrap();
    pool.create_snapshots(&["db"], "base").unwrap();
    pool.write(vol, obj, 0, &pattern(3)).unwrap();
    let clone = run_held(&pool, vol, obj, pattern(4), |p| p.clone_volume("db", "base", "copy")).unwrap();
    assert_eq!(pool.read(clone, obj, 0, 4 * RS).unwrap(), pattern(1), "the clone is the snapshot");
    assert_eq!(pool.read(vol, obj, 0, 4 * RS).unwrap(), pattern(4));
    pool.delete_volume("copy").unwrap();

    pool.create_snapshots(&["db"], "later").unwrap();
    pool.write(vol, obj, RS as u64, b"dirty: the commit has data to write").unwrap();
    run_held(&pool, vol, obj, pattern(5), |p| p.delete_snapshot("db", "later")).unwrap();
    assert!(pool.snapshot("db", "later").is_err());

    pool.write(vol, obj, RS as u64, b"dirty again").unwrap();
    run_held(&pool, vol, obj, pattern(6), |p| p.restore_volume("db", "base")).unwrap();
    assert_eq!(pool.read(vol, obj, 0, 4 * RS).unwrap(), pattern(1), "the restore replaced the write made meanwhile");
    pool.commit().unwrap();
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
}
