//! Prewrite (data written ahead of its commit, outside the pool's lock): whatever happens
//! to a record between its prewrite and the commit — rewritten, truncated away, its object
//! or volume deleted, a snapshot committing in between — the commit stores the record's
//! latest content, no prewritten block leaks, and the checker's space accounting is exact.

use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, Pool, VolumeOptions};
use strata_testkit::{model, test_create_options, test_pool_options, SimDisk};

fn new_pool() -> (Arc<SimDisk>, Pool) {
    let disk = Arc::new(SimDisk::new(64 << 20, 4096));
    let pool = Pool::create(disk.clone(), test_create_options(3), test_pool_options()).expect("create pool");
    (disk, pool)
}

fn assert_clean(pool: &Pool) {
    let r = pool.check(CheckOptions::default()).expect("check runs");
    assert!(r.is_clean(), "checker found: {:#?}", r.errors);
}

/// A pool (seeded `seed`) on a 64 MiB simulated disk with a 32 MiB data cache.
fn pool_with_data_cache(seed: u64) -> Pool {
    let mut opts = test_pool_options();
    opts.data_cache_bytes = 32 << 20;
    Pool::create(Arc::new(SimDisk::new(64 << 20, 4096)), test_create_options(seed), opts).expect("create pool")
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
}

#[test]
fn records_changed_after_prewrite_commit_their_latest_content() {
    let (disk, pool) = new_pool();
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let keep = pool.create_object(vol, b"").unwrap();
    let edit = pool.create_object(vol, b"").unwrap();
    let gone = pool.create_object(vol, b"").unwrap();
    let cut = pool.create_object(vol, b"").unwrap();
    for (i, o) in [keep, edit, gone, cut].into_iter().enumerate() {
        pool.write(vol, o, 0, &pattern(i as u8, 256 << 10)).unwrap();
    }
    let allocated_before = pool.status().allocated_bytes;
    let stats = pool.prewrite().unwrap();
    assert_eq!(stats.records, 4 * 16, "every dirty 16 KiB record is prewritten");
    // Reads see the same bytes after the prewrite as before it.
    assert_eq!(pool.read(vol, keep, 0, 256 << 10).unwrap(), pattern(0, 256 << 10));
    // Change things after the prewrite: partial rewrites (the record is copied on its first
    // edit), a truncate, an object deleted outright.
    pool.write(vol, edit, 5000, b"changed after the prewrite").unwrap();
    pool.write(vol, edit, 100_000, &pattern(9, 40_000)).unwrap();
    pool.truncate(vol, cut, 20_000).unwrap();
    pool.delete_object(vol, gone).unwrap();
    assert!(pool.status().allocated_bytes > allocated_before, "prewritten blocks are allocated in memory");
    pool.commit().unwrap();
    assert_clean(&pool);
    let mut want = pattern(1, 256 << 10);
    want[5000..5000 + 26].copy_from_slice(b"changed after the prewrite");
    want[100_000..140_000].copy_from_slice(&pattern(9, 40_000));
    assert_eq!(pool.read(vol, edit, 0, 256 << 10).unwrap(), want);
    assert_eq!(pool.read(vol, cut, 0, 1 << 20).unwrap(), pattern(3, 256 << 10)[..20_000].to_vec());
    assert_eq!(pool.read(vol, keep, 0, 256 << 10).unwrap(), pattern(0, 256 << 10));
    let state = model::capture(&pool).unwrap();
    drop(pool);
    let pool = Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
    assert_eq!(model::capture(&pool).unwrap(), state);
    assert_clean(&pool);
}

#[test]
fn a_volume_deleted_after_prewrite_leaks_nothing() {
    let (_disk, pool) = new_pool();
    let empty = pool.status().allocated_bytes;
    let vol = pool.create_volume("scratch", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &pattern(7, 1 << 20)).unwrap();
    assert!(pool.prewrite().unwrap().records > 0);
    pool.delete_volume("scratch").unwrap();
    pool.commit().unwrap();
    pool.commit().unwrap();
    pool.commit().unwrap();
    assert_clean(&pool);
    assert!(pool.status().allocated_bytes <= empty + (64 << 10), "space came back after the delete");
}

#[test]
fn a_commit_between_prewrite_and_its_own_commit_uses_or_frees_the_blocks() {
    let (_disk, pool) = new_pool();
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &pattern(4, 512 << 10)).unwrap();
    pool.prewrite().unwrap();
    // A snapshot commits the open txg itself (under the lock): it must take the prewritten
    // blocks (their writes were issued) or free them, never leave them allocated.
    pool.create_snapshots(&["db"], "s1").unwrap();
    pool.write(vol, obj, 4096, b"after the snapshot").unwrap();
    // A second prewrite, then another snapshot commits it, then the pool's own commit
    // finds nothing prewritten left.
    pool.prewrite().unwrap();
    pool.create_snapshots(&["db"], "s2").unwrap();
    pool.commit().unwrap();
    assert_clean(&pool);
    let mut want = pattern(4, 512 << 10);
    want[4096..4096 + 18].copy_from_slice(b"after the snapshot");
    assert_eq!(pool.read(vol, obj, 0, 512 << 10).unwrap(), want);
}

/// Overwritten records' old blocks leave the data cache when their txg frees them: a file
/// rewritten again and again keeps about its own size cached, not one copy per version
/// (which also pinned the old buffers, so every write took fresh memory). Blocks a snapshot
/// still holds are not freed and stay readable from the cache.
#[test]
fn freed_blocks_leave_the_data_cache() {
    let pool = pool_with_data_cache(5);
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    const FILE: usize = 1 << 20;
    for round in 0..8u8 {
        pool.write(vol, obj, 0, &pattern(round, FILE)).unwrap();
        pool.commit().unwrap();
    }
    let cached = pool.status().data_cache_bytes;
    assert!(cached <= FILE as u64, "{cached} bytes cached for a 1 MiB file rewritten 8 times");
    assert_eq!(pool.read(vol, obj, 0, FILE).unwrap(), pattern(7, FILE));

    // Rewrites after a snapshot move the old blocks to the deadlist: still cached, still read.
    pool.create_snapshots(&["db"], "before").unwrap();
    pool.commit().unwrap();
    pool.write(vol, obj, 0, &pattern(8, FILE)).unwrap();
    pool.commit().unwrap();
    let cached = pool.status().data_cache_bytes;
    assert!(cached > FILE as u64 && cached <= 2 * FILE as u64, "{cached} bytes: both versions kept");
    let view = pool.open_snapshot_view("db", "before").unwrap();
    assert_eq!(pool.read(view, obj, 0, FILE).unwrap(), pattern(7, FILE));
    assert_eq!(pool.read(vol, obj, 0, FILE).unwrap(), pattern(8, FILE));
    assert_clean(&pool);
}

/// Records the commit writes itself (they missed the prewrite, or there was none) are kept
/// in the data cache as prewritten ones are: reading them back after the commit does not
/// go to the device. (Before, only prewritten records were cached: a record rewritten
/// after its prewrite, or any record of a commit that ran without one, was read back from
/// the device.)
#[test]
fn records_the_commit_writes_are_cached_too() {
    let pool = pool_with_data_cache(6);
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    const FILE: usize = 1 << 20;
    pool.write(vol, obj, 0, &pattern(1, FILE)).unwrap();
    // A commit with no prewrite: every record is written under the lock.
    assert!(pool.commit_for_space().unwrap(), "dirty data to commit");
    let before = pool.status();
    assert!(before.data_cache_bytes >= FILE as u64, "{} bytes cached after the commit", before.data_cache_bytes);
    assert_eq!(pool.read(vol, obj, 0, FILE).unwrap(), pattern(1, FILE));
    let after = pool.status();
    // Every record from the cache; the device gives at most a few metadata blocks.
    assert_eq!(after.data_cache_hits - before.data_cache_hits, (FILE / (16 << 10)) as u64);
    assert!(after.blocks_read - before.blocks_read < 8, "{} blocks read", after.blocks_read - before.blocks_read);
    assert_clean(&pool);
}

/// Memory (volume.rs `overwrite_record`): a record overwritten whole leaves its committed
/// version in the data cache no longer than needed — at once when it is dirtied, at the
/// commit when it was written again while that commit was in flight — unless a snapshot
/// shares the block. Reads see the newest bytes throughout and the pool checks clean.
#[test]
fn overwritten_records_leave_the_data_cache() {
    const LEN: usize = 1 << 20;
    let pool = pool_with_data_cache(21);
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    let cached = |p: &Pool| p.status().data_cache_bytes;
    pool.write(vol, obj, 0, &pattern(1, LEN)).unwrap();
    pool.commit().unwrap();
    assert_eq!(cached(&pool), LEN as u64, "a commit caches what it wrote");

    // Overwritten whole (twice: the second in place), the committed versions go at once.
    pool.write(vol, obj, 0, &pattern(2, LEN)).unwrap();
    assert_eq!(cached(&pool), 0, "nothing reads the committed versions any more");
    pool.write(vol, obj, 0, &pattern(3, LEN)).unwrap();
    assert_eq!(pool.read(vol, obj, 0, LEN).unwrap(), pattern(3, LEN));
    pool.commit().unwrap();
    assert_eq!(cached(&pool), LEN as u64);
    assert_eq!(pool.read(vol, obj, 0, LEN).unwrap(), pattern(3, LEN));

    // A partial write takes the committed version out of the cache too (it becomes the
    // dirty record itself when nobody else holds it).
    pool.write(vol, obj, 20_000, b"a partial edit").unwrap();
    assert_eq!(cached(&pool), (LEN - (16 << 10)) as u64, "the edited record's old version left");
    let mut edited = pattern(3, LEN);
    edited[20_000..20_014].copy_from_slice(b"a partial edit");
    assert_eq!(pool.read(vol, obj, 0, LEN).unwrap(), edited);
    pool.commit().unwrap();
    assert_eq!(pool.read(vol, obj, 0, LEN).unwrap(), edited);

    // Written again while a commit is in flight: the version that commit stores is not
    // cached (the next one supersedes it); the half not written again is.
    pool.write(vol, obj, 0, &pattern(4, LEN)).unwrap();
    let txg = pool.begin_commit().unwrap();
    pool.write(vol, obj, 0, &pattern(5, LEN / 2)).unwrap();
    txg.finish().unwrap();
    assert_eq!(cached(&pool), (LEN / 2) as u64, "only the records not written since the freeze");
    let mut want = pattern(4, LEN);
    want[..LEN / 2].copy_from_slice(&pattern(5, LEN / 2));
    assert_eq!(pool.read(vol, obj, 0, LEN).unwrap(), want);
    pool.commit().unwrap();
    assert_clean(&pool);

    // A snapshot shares the blocks: overwriting the head keeps them cached.
    pool.create_snapshots(&["db"], "s1").unwrap();
    let before = cached(&pool);
    pool.write(vol, obj, 0, &pattern(6, LEN)).unwrap();
    assert_eq!(cached(&pool), before, "the snapshot's blocks stay cached");
    pool.commit().unwrap();
    assert_eq!(pool.read(vol, obj, 0, LEN).unwrap(), pattern(6, LEN));
    assert_clean(&pool);
}

/// The caches' misses are counted beside their hits (the hit ratio of `pool status` and
/// `/metrics`): a cold read of every record misses once per record, the same read again
/// hits once per record and misses none.
#[test]
fn cache_misses_are_counted_beside_hits() {
    let disk = Arc::new(SimDisk::new(64 << 20, 4096));
    let pool = Pool::create(disk.clone(), test_create_options(1), test_pool_options()).unwrap();
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    const FILE: usize = 1 << 20;
    pool.write(vol, obj, 0, &pattern(3, FILE)).unwrap();
    pool.commit().unwrap();
    drop(pool);
    // Opened again: both caches are cold.
    let mut opts = test_pool_options();
    opts.data_cache_bytes = 32 << 20;
    let pool = Pool::open(disk as Arc<dyn BlockDevice>, opts).unwrap();
    let vol = pool.volume_id("db").unwrap();
    let records = (FILE / (16 << 10)) as u64;
    let a = pool.status();
    assert_eq!(pool.read(vol, obj, 0, FILE).unwrap(), pattern(3, FILE));
    let b = pool.status();
    assert_eq!(b.data_cache_misses - a.data_cache_misses, records, "a cold read misses each record");
    assert_eq!(b.data_cache_hits - a.data_cache_hits, 0);
    assert!(b.metadata_cache_misses > a.metadata_cache_misses, "the tree's blocks were read");
    assert_eq!(pool.read(vol, obj, 0, FILE).unwrap(), pattern(3, FILE));
    let c = pool.status();
    assert_eq!(c.data_cache_hits - b.data_cache_hits, records, "warm: each record hits");
    assert_eq!(c.data_cache_misses, b.data_cache_misses, "warm: no miss");
    assert_eq!(c.metadata_cache_misses, b.metadata_cache_misses, "warm: no metadata miss");
}

/// A prewrite takes at most half the space available: where the dirty records hold more it
/// writes those that fit and leaves the rest to the commit (it used to write none — and only
/// after hashing every record, which the commit's frozen pass then did again in vain). What
/// it checksums it writes.
#[test]
fn a_prewrite_writes_what_fits_in_half_the_free_space_and_hashes_nothing_in_vain() {
    let (_disk, pool) = new_pool();
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    // Room: 1 MiB dirty in a 64 MiB pool is prewritten whole, every record checksummed once.
    pool.write(vol, obj, 0, &pattern(1, 1 << 20)).unwrap();
    let s = pool.prewrite().unwrap();
    assert_eq!(s.records, (1 << 20) / 16384, "{s:?}");
    assert_eq!(s.checksummed, s.records, "{s:?}");
    pool.commit().unwrap();
    // 24 MiB dirty: its reservation leaves less than twice that free, so part of it fits.
    let big = pattern(2, 24 << 20);
    pool.write(vol, obj, 1 << 20, &big).unwrap();
    let free = pool.status().space.available_bytes;
    let s = pool.prewrite().unwrap();
    assert!(s.found_bytes >= 24 << 20, "{s:?}");
    assert!(s.records > 0 && s.bytes < 24 << 20, "not a part of the dirty data: {s:?}");
    assert!(s.bytes <= free / 2, "took more than half of {free} free bytes: {s:?}");
    assert_eq!(s.checksummed, s.records, "checksummed records it did not write: {s:?}");
    pool.commit().unwrap();
    assert_eq!(pool.read(vol, obj, 1 << 20, 24 << 20).unwrap(), big);
    assert_clean(&pool);
}

/// The frozen pass writes the whole frozen txg even when writers of the next txg took the
/// free space meanwhile: a frozen record cannot change, so its block is the one the commit
/// would allocate with the record's reservation, which the allocator hands back. Before, it
/// checked for twice its size in free space — taken by the next txg's reservations on a
/// LUN rewritten at full speed — and left the whole txg to the commit under the lock
/// (1.2–1.8 s of stalled writers per commit of 1 GiB).
#[test]
fn the_frozen_pass_writes_the_frozen_txg_whatever_the_next_txg_reserved() {
    let (_disk, pool) = new_pool();
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let frozen = pool.create_object(vol, b"").unwrap();
    let next = pool.create_object(vol, b"").unwrap();
    let (a, b, c) = (pattern(3, 20 << 20), pattern(4, 20 << 20), pattern(5, 20 << 20));
    // Written twice: a writer rewriting faster than commits come skips the early passes,
    // so the freeze comes first and the frozen pass has it all to write.
    pool.write(vol, frozen, 0, &a).unwrap();
    pool.write(vol, frozen, 0, &b).unwrap();
    let q = pool.begin_commit().unwrap();
    // The next txg reserves as much again while the commit quiesces.
    pool.write(vol, next, 0, &c).unwrap();
    let free = pool.status().space.available_bytes;
    assert!(free < 2 * (20 << 20), "the test needs less free space than twice the frozen data: {free}");
    let s = pool.prewrite().unwrap();
    assert_eq!(s.records, (20 << 20) / 16384, "the frozen pass left records to the commit: {s:?}");
    assert_eq!(s.checksummed, s.records, "{s:?}");
    q.finish().unwrap();
    assert_eq!(pool.read(vol, frozen, 0, 20 << 20).unwrap(), b);
    pool.commit().unwrap();
    assert_eq!(pool.read(vol, next, 0, 20 << 20).unwrap(), c);
    assert_clean(&pool);
}
