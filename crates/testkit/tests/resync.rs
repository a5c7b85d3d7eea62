//! A member taken offline and brought back online gets only what it missed (the ranges
//! written while it was offline, device/mirror/missed.rs), and that is enough: alone (with
//! as few others as the layout needs) it holds the pool as the others do. A resync cut short
//! by a reopen finishes as a full rebuild from its cursor, and is as complete.

use std::sync::Arc;
use strata_engine::format::member::Layout;
use strata_engine::{MemberState, Pool, VolumeOptions};
use strata_testkit::devset::{pattern, rebuild_all, resync_and_check, rewrite_labels, scrub_damage, SimMirror};
use strata_testkit::model::capture;
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

const SEED: u64 = 31;
const SIZE: u64 = 64 << 20;

#[test]
fn a_member_back_from_offline_gets_only_what_it_missed() {
    for (layout, ways, victim) in [(Layout::Mirror, 2, 1), (Layout::Mirror, 3, 0), (Layout::Parity2, 4, 2)] {
        let m = SimMirror::create_set(layout, ways, SIZE, 4096, SEED);
        let pool = Pool::create(m.device(), test_create_options(SEED), test_pool_options()).unwrap();
        let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
        let o = pool.create_object(vol, &[1]).unwrap();
        pool.write(vol, o, 0, &pattern(1, 0, 8 << 20)).unwrap();
        pool.commit().unwrap();
        m.dev.offline(victim).unwrap();
        // Missed: rewrites of a few records, a new object, and a sync in the log only.
        for k in 0..5u64 {
            pool.write(vol, o, k * (1 << 20) + 777, &pattern(2, 0, 5000)).unwrap();
        }
        let o2 = pool.create_object(vol, &[2]).unwrap();
        pool.write(vol, o2, 0, &pattern(3, 0, 256 << 10)).unwrap();
        pool.commit().unwrap();
        pool.write(vol, o, 3 << 20, b"synced while offline, in the log only").unwrap();
        pool.sync_log().unwrap();
        // The pool holds over 8 MiB; what changed is well under 2 MiB (parity2 rebuilds
        // whole rows). The resynced member stands in for the others.
        let pool = resync_and_check(layout, &m, pool, victim, 2 << 20);
        assert_eq!(&pool.read(vol, o, 3 << 20, 37).unwrap()[..], b"synced while offline, in the log only");
    }
}

#[test]
fn a_resync_cut_short_by_a_reopen_finishes_as_a_full_rebuild() {
    let m = SimMirror::create(2, SIZE, 4096, SEED);
    let pool = Pool::create(m.device(), test_create_options(SEED), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let o = pool.create_object(vol, &[1]).unwrap();
    pool.write(vol, o, 0, &pattern(1, 0, 24 << 20)).unwrap();
    pool.commit().unwrap();
    m.dev.offline(1).unwrap();
    pool.write(vol, o, 20 << 20, &pattern(4, 0, 1 << 20)).unwrap();
    pool.commit().unwrap();
    m.dev.online(1).unwrap();
    // One small window, then the pool goes away: the record of what was missed with it.
    let p = pool.rebuild_step(256 << 10).unwrap().unwrap();
    assert!(!p.done);
    let want = capture(&pool).unwrap();
    drop(pool);
    let (m2, _) = SimMirror::open(m.disks.iter().cloned().map(Some).collect(), true).unwrap();
    let pool = Pool::open(m2.device(), test_pool_options()).unwrap();
    assert_eq!(pool.status().devices.unwrap().members[1].state, MemberState::Rebuilding);
    let copied = rebuild_all(&pool, 4 << 20);
    assert!(copied >= 24 << 20, "a resumed resync copied {copied} bytes: it must copy every live extent");
    assert_eq!(scrub_damage(&pool), 0);
    assert_eq!(capture(&pool).unwrap(), want);
    drop((pool, m2));
    let (m1, _) = SimMirror::open(m.alone(Layout::Mirror, 1, 4096), true).unwrap();
    let pool = Pool::open(m1.device(), test_pool_options()).unwrap();
    assert_eq!(capture(&pool).unwrap(), want);
}

/// A write that chose a member before it went offline and then failed on it: the member
/// lacks that write, which its in-memory record cannot say; the missed map holds it (every
/// completed write marks the map while it covers a member), so `online` resyncs the map's
/// regions.
#[test]
fn a_write_that_fails_on_a_member_as_it_goes_offline_is_resynced_from_the_map() {
    let m = SimMirror::create(2, SIZE, 4096, SEED);
    let pool = Arc::new(Pool::create(m.device(), test_create_options(SEED), test_pool_options()).unwrap());
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let o = pool.create_object(vol, &[1]).unwrap();
    pool.write(vol, o, 0, &pattern(1, 0, 4 << 20)).unwrap();
    pool.commit().unwrap();
    pool.write(vol, o, 1 << 20, &pattern(6, 0, 256 << 10)).unwrap();
    // The commit's first mirrored write stops with both members chosen.
    let gate = m.dev.failpoints().pause(strata_engine::failpoint::MIRROR_WRITE_TARGETS);
    let committer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.commit())
    };
    gate.wait_arrivals(1);
    m.dev.offline(1).unwrap();
    m.disks[1].fail_writes(u32::MAX);
    drop(gate);
    committer.join().unwrap().unwrap();
    m.disks[1].fail_writes(0);
    m.dev.online(1).unwrap();
    let note = pool.status().devices.unwrap().members[1].note.clone().unwrap_or_default();
    assert!(note.contains("being resynced"), "{note}");
    let copied = rebuild_all(&pool, 4 << 20);
    assert!(copied > 0 && copied < 2 << 20, "copied {copied} bytes of a 4 MiB pool");
    assert_eq!(scrub_damage(&pool), 0);
    let want = capture(&pool).unwrap();
    drop(pool);
    let (m1, _) = SimMirror::open(m.alone(Layout::Mirror, 1, 4096), true).unwrap();
    let pool = Pool::open(m1.device(), test_pool_options()).unwrap();
    assert_eq!(capture(&pool).unwrap(), want);
}

/// The member area's missed map (format/missed_map.rs) carries the record across a restart:
/// a member still offline after a reopen is resynced from its regions, writes after the
/// reopen are added, and the member then holds the pool alone. The labels are version 2 while
/// the map is in use and version 1 again once no member is offline.
#[test]
fn a_member_offline_across_a_restart_is_resynced_from_the_missed_map() {
    for (layout, ways, victim) in [(Layout::Mirror, 2, 1), (Layout::Mirror, 3, 0), (Layout::Parity2, 4, 2)] {
        let m = SimMirror::create_set(layout, ways, SIZE, 4096, SEED);
        let pool = Pool::create(m.device(), test_create_options(SEED), test_pool_options()).unwrap();
        let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
        let o = pool.create_object(vol, &[1]).unwrap();
        pool.write(vol, o, 0, &pattern(1, 0, 16 << 20)).unwrap();
        pool.commit().unwrap();
        m.dev.offline(victim).unwrap();
        for k in 0..5u64 {
            pool.write(vol, o, k * (3 << 20) + 777, &pattern(2, 0, 5000)).unwrap();
        }
        pool.commit().unwrap();
        pool.write(vol, o, 4 << 20, b"in the log only when the pool went").unwrap();
        pool.sync_log().unwrap();
        let other = (victim + 1) % ways;
        assert_eq!(label_version(&m.disks[other]), 2, "{layout:?}: labels while a map is kept");
        drop(pool);
        let images: Vec<_> =
            m.disks.iter().map(|d| Some(Arc::new(SimDisk::from_image(d.current_image(), 4096)))).collect();
        let (m2, notes) = SimMirror::open(images, true).unwrap();
        let pool = Pool::open(m2.device(), test_pool_options()).unwrap();
        let st = pool.status().devices.unwrap();
        assert_eq!(st.members[victim].state, MemberState::Offline, "{layout:?}");
        let note = st.members[victim].note.clone().unwrap_or_default();
        assert!(note.contains("(the missed map)"), "{layout:?}: {note}; {notes:?}");
        // Written after the restart, still offline: marked in the map it was opened with.
        pool.write(vol, o, 9 << 20, &pattern(5, 0, 100_000)).unwrap();
        pool.commit().unwrap();
        m2.dev.online(victim).unwrap();
        let note = pool.status().devices.unwrap().members[victim].note.clone().unwrap_or_default();
        assert!(note.contains("being resynced"), "{layout:?}: {note}");
        let copied = rebuild_all(&pool, 4 << 20);
        assert!(copied > 0 && copied < 4 << 20, "{layout:?}: a resync from the map copied {copied} bytes of 16 MiB");
        assert_eq!(pool.status().devices.unwrap().members[victim].state, MemberState::Online);
        assert_eq!(label_version(&m2.disks[other]), 1, "{layout:?}: labels once no member is offline");
        assert_eq!(scrub_damage(&pool), 0, "{layout:?}: the resynced member holds a stale copy");
        let want = capture(&pool).unwrap();
        drop(pool);
        let (m1, _) = SimMirror::open(m2.alone(layout, victim, 4096), true).unwrap();
        let pool = Pool::open(m1.device(), test_pool_options()).unwrap();
        assert_eq!(capture(&pool).unwrap(), want, "{layout:?}: the resynced member lacks what it missed");
        assert_eq!(&pool.read(vol, o, 4 << 20, 34).unwrap()[..], b"in the log only when the pool went");
    }
}

/// A set as the build before the missed map left it, a member offline (labels version 1,
/// nothing in the member area beside them), opens; the member's note says what `online`
/// will do, and it copies every live extent.
#[test]
fn a_set_from_the_build_before_the_map_opens_and_online_copies_everything() {
    let m = SimMirror::create(2, SIZE, 4096, SEED);
    let pool = Pool::create(m.device(), test_create_options(SEED), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let o = pool.create_object(vol, &[1]).unwrap();
    pool.write(vol, o, 0, &pattern(1, 0, 8 << 20)).unwrap();
    pool.commit().unwrap();
    m.dev.offline(1).unwrap();
    pool.write(vol, o, 1 << 20, &pattern(2, 0, 4096)).unwrap();
    pool.commit().unwrap();
    drop(pool);
    let images: Vec<_> =
        m.disks.iter().map(|d| Some(Arc::new(SimDisk::from_image(as_before_the_map(d), 4096)))).collect();
    assert_eq!(u32::from_le_bytes(images[0].as_ref().unwrap().current_image()[8..12].try_into().unwrap()), 1);
    let (m2, _) = SimMirror::open(images, true).unwrap();
    let pool = Pool::open(m2.device(), test_pool_options()).unwrap();
    let note = pool.status().devices.unwrap().members[1].note.clone().unwrap_or_default();
    assert!(note.contains("online copies everything"), "{note}");
    m2.dev.online(1).unwrap();
    let copied = rebuild_all(&pool, 4 << 20);
    assert!(copied >= 8 << 20, "copied {copied} bytes: without a record every live extent");
    let want = capture(&pool).unwrap();
    drop(pool);
    let (m1, _) = SimMirror::open(m2.alone(Layout::Mirror, 1, 4096), true).unwrap();
    let pool = Pool::open(m1.device(), test_pool_options()).unwrap();
    assert_eq!(capture(&pool).unwrap(), want);
}

/// The version field of a member's first label copy.
fn label_version(d: &SimDisk) -> u32 {
    u32::from_le_bytes(d.current_image()[8..12].try_into().unwrap())
}

/// `d`'s image with its labels rewritten as version 1 and the missed map's copies zeroed.
fn as_before_the_map(d: &SimDisk) -> Vec<u8> {
    use strata_engine::format::missed_map::{MISSED_MAP_COPIES, MISSED_MAP_SIZE};
    let mut img = d.current_image();
    for at in MISSED_MAP_COPIES {
        img[at as usize..at as usize + MISSED_MAP_SIZE].fill(0);
    }
    rewrite_labels(&mut img, |l| l.missed_map = false);
    img
}

/// An in-memory record that gives up (too many separate ranges) leaves the resync to the
/// missed map's regions, not to a full rebuild.
#[test]
fn a_record_that_gives_up_falls_back_to_the_missed_map() {
    for (layout, ways, victim) in [(Layout::Mirror, 2, 1), (Layout::Parity2, 4, 0)] {
        let m = SimMirror::create_set(layout, ways, SIZE, 4096, SEED);
        // The least: a second separate range (the commit's blocks, its uberblock) ends it.
        m.dev.set_missed_ranges_max(2);
        let pool = Pool::create(m.device(), test_create_options(SEED), test_pool_options()).unwrap();
        let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
        let o = pool.create_object(vol, &[1]).unwrap();
        pool.write(vol, o, 0, &pattern(1, 0, 24 << 20)).unwrap();
        pool.commit().unwrap();
        m.dev.offline(victim).unwrap();
        for k in 0..12u64 {
            pool.write(vol, o, k * (2 << 20), &pattern(7, 0, 4096)).unwrap();
            pool.commit().unwrap();
        }
        let note = pool.status().devices.unwrap().members[victim].note.clone().unwrap_or_default();
        assert!(note.contains("regions of the missed map"), "{layout:?}: {note}");
        m.dev.online(victim).unwrap();
        let note = pool.status().devices.unwrap().members[victim].note.clone().unwrap_or_default();
        assert!(note.contains("being resynced"), "{layout:?}: {note}");
        let copied = rebuild_all(&pool, 4 << 20);
        assert!(copied < 12 << 20, "{layout:?}: copied {copied} bytes of a 24 MiB pool");
        assert_eq!(scrub_damage(&pool), 0, "{layout:?}");
        let want = capture(&pool).unwrap();
        drop(pool);
        let (m1, _) = SimMirror::open(m.alone(layout, victim, 4096), true).unwrap();
        let pool = Pool::open(m1.device(), test_pool_options()).unwrap();
        assert_eq!(capture(&pool).unwrap(), want, "{layout:?}: the resynced member lacks what it missed");
    }
}
