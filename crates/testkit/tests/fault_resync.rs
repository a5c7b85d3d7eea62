//! A member that fails while in sync (a flush or write error, a device that vanishes) and
//! works again gets only what it may lack: the writes that skipped it, and what it may have
//! held only in its cache when it failed (device/mirror/unflushed.rs) — both in the missed
//! map, which carries them across a restart. Alone (with as few others as the layout
//! needs) it then holds the pool as the others do. A member that fails while it is being
//! rebuilt is rebuilt whole.

use std::sync::Arc;
use strata_engine::format::member::Layout;
use strata_engine::{MemberState, ObjectId, Pool, VolumeId, VolumeOptions};
use strata_testkit::devset::{pattern, rebuild_all, resync_and_check, rewrite_labels, scrub_damage, SimMirror};
use strata_testkit::model::capture;
use strata_testkit::{test_create_options, test_pool_options, CrashMode, SimDisk, SimRng};

const SEED: u64 = 47;
const SIZE: u64 = 64 << 20;
const LAYOUTS: [(Layout, usize, usize); 3] = [(Layout::Mirror, 2, 1), (Layout::Mirror, 3, 0), (Layout::Parity2, 4, 2)];

fn note(pool: &Pool, i: usize) -> String {
    pool.status().devices.unwrap().members[i].note.clone().unwrap_or_default()
}

/// A pool with 8 MiB committed in one object.
fn filled(m: &SimMirror) -> (Pool, VolumeId, ObjectId) {
    let pool = Pool::create(m.device(), test_create_options(SEED), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let o = pool.create_object(vol, &[1]).unwrap();
    pool.write(vol, o, 0, &pattern(1, 0, 8 << 20)).unwrap();
    pool.commit().unwrap();
    (pool, vol, o)
}

/// The member's flush fails in a commit, and the device then loses what it had not
/// flushed (the commit's writes): the map holds those ranges, so the resync after a
/// restart brings them back too.
#[test]
fn a_member_that_failed_a_flush_and_lost_its_cache_is_resynced_from_the_map() {
    for (layout, ways, victim) in LAYOUTS {
        let m = SimMirror::create_set(layout, ways, SIZE, 4096, SEED);
        let (pool, vol, o) = filled(&m);
        pool.write(vol, o, 2 << 20, &pattern(2, 0, 300_000)).unwrap();
        let o2 = pool.create_object(vol, &[2]).unwrap();
        pool.write(vol, o2, 0, &pattern(3, 0, 200_000)).unwrap();
        m.disks[victim].fail_flushes(1);
        pool.commit().unwrap();
        assert_eq!(pool.status().devices.unwrap().members[victim].state, MemberState::Faulted, "{layout:?}");
        let n = note(&pool, victim);
        assert!(n.contains("online resyncs"), "{layout:?}: {n}");
        // The device comes back without its cache: only what it flushed.
        let lost =
            SimDisk::from_image(m.disks[victim].crash_image(CrashMode::DropUnflushed, &mut SimRng::new(1)), 4096);
        // Missed while faulted: a rewrite, committed, and a sync in the log only.
        pool.write(vol, o, 6 << 20, &pattern(4, 0, 100_000)).unwrap();
        pool.commit().unwrap();
        pool.write(vol, o, 5 << 20, b"synced while faulted, in the log only").unwrap();
        pool.sync_log().unwrap();
        drop(pool);
        let images: Vec<_> = (0..ways)
            .map(|j| match j == victim {
                true => Some(Arc::new(SimDisk::from_image(lost.current_image(), 4096))),
                false => Some(Arc::new(SimDisk::from_image(m.disks[j].current_image(), 4096))),
            })
            .collect();
        let (m2, notes) = SimMirror::open(images, true).unwrap();
        let pool = Pool::open(m2.device(), test_pool_options()).unwrap();
        assert_eq!(pool.status().devices.unwrap().members[victim].state, MemberState::Faulted, "{layout:?}");
        let n = note(&pool, victim);
        assert!(n.contains("(the missed map)"), "{layout:?}: {n}; {notes:?}");
        assert_eq!(&pool.read(vol, o, 5 << 20, 37).unwrap()[..], b"synced while faulted, in the log only");
        resync_and_check(layout, &m2, pool, victim, 4 << 20);
    }
}

/// Labels that no longer say a map is kept (version 1: rewritten by a build that keeps no
/// map for a FAULTED member, and wrote on without marking for it) make the map untrusted,
/// even though it still names the member: `online` copies every live extent.
#[test]
fn a_map_the_labels_no_longer_vouch_for_is_not_trusted() {
    let m = SimMirror::create(2, SIZE, 4096, SEED);
    let (pool, vol, o) = filled(&m);
    m.disks[1].fail_writes(1);
    pool.write(vol, o, 1 << 20, &pattern(9, 0, 4096)).unwrap();
    pool.commit().unwrap();
    assert_eq!(pool.status().devices.unwrap().members[1].state, MemberState::Faulted);
    drop(pool);
    let images: Vec<_> = m
        .disks
        .iter()
        .map(|d| {
            let mut img = d.current_image();
            rewrite_labels(&mut img, |l| l.missed_map = false);
            Some(Arc::new(SimDisk::from_image(img, 4096)))
        })
        .collect();
    let (m2, _) = SimMirror::open(images, true).unwrap();
    let pool = Pool::open(m2.device(), test_pool_options()).unwrap();
    let n = note(&pool, 1);
    assert!(!n.contains("missed map"), "{n}");
    m2.dev.online(1).unwrap();
    assert_eq!(note(&pool, 1), "being rebuilt");
    let copied = rebuild_all(&pool, 4 << 20);
    assert!(copied >= 8 << 20, "copied {copied} bytes: an untrusted map must not narrow the rebuild");
}

/// An intent-log write (durable: FUA, DSYNC) that fails on a member faults it with that
/// write's range in the map: the member, resynced and then alone, replays the log with it.
#[test]
fn a_durable_write_that_fails_on_a_member_is_resynced() {
    for (layout, ways, victim) in LAYOUTS {
        let m = SimMirror::create_set(layout, ways, SIZE, 4096, SEED);
        let (pool, vol, o) = filled(&m);
        // Synced before: durable on every member, in no cache.
        pool.write(vol, o, 3 << 20, b"synced before the failure").unwrap();
        pool.sync_log().unwrap();
        m.disks[victim].fail_writes(1);
        pool.write(vol, o, 5 << 20, b"synced as the member failed").unwrap();
        pool.sync_log().unwrap();
        assert_eq!(pool.status().devices.unwrap().members[victim].state, MemberState::Faulted, "{layout:?}");
        m.disks[victim].fail_writes(0);
        let want = capture(&pool).unwrap();
        m.dev.online(victim).unwrap();
        rebuild_all(&pool, 4 << 20);
        // Taken before the pool closes (which commits): not committed, the member alone
        // must replay both syncs from its own copy of the log.
        let images = m.alone(layout, victim, 4096);
        drop(pool);
        let (m1, _) = SimMirror::open(images, true).unwrap();
        let pool = Pool::open(m1.device(), test_pool_options()).unwrap();
        assert_eq!(capture(&pool).unwrap(), want, "{layout:?}: the resynced member lacks a log write");
        assert_eq!(&pool.read(vol, o, 5 << 20, 27).unwrap()[..], b"synced as the member failed");
    }
}

/// A member whose device vanishes (REMOVED) and comes back is resynced while the pool
/// runs; the writes that failed on it as it went are among what it gets.
#[test]
fn a_removed_member_that_comes_back_is_resynced_without_a_restart() {
    for (layout, ways, victim) in LAYOUTS {
        let m = SimMirror::create_set(layout, ways, SIZE, 4096, SEED);
        let (pool, vol, o) = filled(&m);
        m.disks[victim].set_gone(true);
        pool.write(vol, o, 1 << 20, &pattern(5, 0, 500_000)).unwrap();
        pool.commit().unwrap();
        assert_eq!(pool.status().devices.unwrap().members[victim].state, MemberState::Removed, "{layout:?}");
        pool.write(vol, o, 7 << 20, &pattern(6, 0, 50_000)).unwrap();
        pool.commit().unwrap();
        m.disks[victim].set_gone(false);
        resync_and_check(layout, &m, pool, victim, 4 << 20);
    }
}

/// A member that fails while it is being rebuilt holds nothing reliable past its cursor:
/// when it works again it is rebuilt whole.
#[test]
fn a_member_that_fails_while_being_rebuilt_is_rebuilt_whole() {
    let m = SimMirror::create(2, SIZE, 4096, SEED);
    let (pool, vol, o) = filled(&m);
    m.dev.offline(1).unwrap();
    pool.write(vol, o, 0, &pattern(7, 0, 4096)).unwrap();
    pool.commit().unwrap();
    m.dev.online(1).unwrap();
    m.disks[1].fail_writes(1);
    pool.write(vol, o, 3 << 20, &pattern(8, 0, 4096)).unwrap();
    pool.commit().unwrap();
    assert_eq!(pool.status().devices.unwrap().members[1].state, MemberState::Faulted);
    m.dev.online(1).unwrap();
    assert_eq!(note(&pool, 1), "being rebuilt");
    let copied = rebuild_all(&pool, 4 << 20);
    assert!(copied >= 8 << 20, "copied {copied} bytes: a member that failed mid-rebuild needs every live extent");
    assert_eq!(scrub_damage(&pool), 0);
}
