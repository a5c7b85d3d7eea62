//! parity2: a pool over four to six simulated disks with two members' worth of parity keeps
//! every byte with any two members lost, reconstructs and rewrites blocks rotted on two
//! members, repairs rotted parity in a scrub, refuses to guess with three members lost, and
//! rebuilds a replaced member so that it can stand in for two others.

use std::sync::Arc;
use strata_engine::format::member::Layout;
use strata_engine::format::BlockPtr;
use strata_engine::{
    BlockDevice, CheckOptions, ErrorKind, MemberState, ObjectId, Pool, PoolOptions, SetHealth, VolumeId, VolumeOptions,
};
use strata_testkit::devset::{data_block, scrub_damage, SimMirror};
use strata_testkit::model::capture;
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

const SEED: u64 = 23;
const SIZE: u64 = 24 << 20;

fn pool_with_data(members: usize) -> (SimMirror, Pool, VolumeId, Vec<ObjectId>) {
    let m = SimMirror::create_set(Layout::Parity2, members, SIZE, 4096, SEED);
    let pool = Pool::create(m.device(), test_create_options(SEED), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let mut objs = vec![];
    for i in 0..3u8 {
        let o = pool.create_object(vol, &[i]).unwrap();
        pool.write(vol, o, 0, &expected(i, 0, 40 * 16384)).unwrap();
        objs.push(o);
    }
    pool.commit().unwrap();
    // Small rewrites over several txgs: partly filled rows, rows shared within a txg.
    for t in 0..6u64 {
        for (i, o) in objs.iter().enumerate() {
            let off = (t * 5 + i as u64) % 40 * 16384;
            pool.write(vol, *o, off, &expected(i as u8, off, 16384)).unwrap();
        }
        pool.commit().unwrap();
    }
    (m, pool, vol, objs)
}

fn expected(i: u8, off: u64, len: usize) -> Vec<u8> {
    (off..off + len as u64).map(|j| (j % 241) as u8 ^ i.wrapping_mul(37)).collect()
}

fn open(disks: &[Arc<SimDisk>], out: &[usize], writable: bool) -> strata_engine::Result<(SimMirror, Pool)> {
    let found = disks.iter().enumerate().map(|(i, d)| (!out.contains(&i)).then(|| d.clone())).collect();
    let (m, _notes) = SimMirror::open(found, writable)?;
    let opts = PoolOptions { read_only: !writable, ..test_pool_options() };
    let pool = Pool::open(m.device(), opts)?;
    Ok((m, pool))
}

fn member(pool: &Pool, i: usize) -> strata_engine::MemberStatus {
    pool.status().devices.expect("a device set").members[i].clone()
}

#[test]
fn any_two_members_may_be_lost_and_a_third_suspends() {
    for members in [4usize, 6] {
        let (m, pool, vol, objs) = pool_with_data(members);
        let st = pool.status();
        assert_eq!(st.devices.as_ref().unwrap().layout, Layout::Parity2);
        assert_eq!(st.devices.as_ref().unwrap().health, SetHealth::Online);
        let want = capture(&pool).unwrap();
        assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
        // Rewrites left free units in rows that still hold blocks: trapped, not offered.
        assert!(st.trapped_bytes > 0, "{members} members: nothing trapped");
        assert_eq!(st.free_bytes + st.allocated_bytes + st.held_bytes + st.trapped_bytes, st.size_bytes);
        drop(pool);
        // Not a mirror: no member holds the whole data area.
        let logical = m.dev.size_bytes();
        assert!(logical > (members as u64 - 2) * (SIZE - (8 << 20)), "{logical} bytes of {members} members");
        for a in 0..members {
            for b in a + 1..members {
                let (_m, pool) = open(&m.disks, &[a, b], false).unwrap();
                assert_eq!(capture(&pool).unwrap(), want, "{members} members, {a} and {b} missing");
                let r = pool.check(CheckOptions::default()).unwrap();
                assert!(r.is_clean(), "{a},{b}: {:#?}", r.errors);
                assert_eq!(pool.status().devices.unwrap().health, SetHealth::Degraded);
            }
        }
        let e = open(&m.disks, &[0, 1, 2], false).err().expect("three members missing");
        assert!(e.to_string().contains("too few members"), "{e}");
        // Degraded writes: two members gone, work goes on and is there after a reopen.
        let (_m2, pool) = open(&m.disks, &[1, members - 1], true).unwrap();
        pool.write(vol, objs[0], 3 * 16384 + 100, b"written with two members gone").unwrap();
        pool.write(vol, objs[2], 0, &expected(9, 0, 20 * 16384)).unwrap();
        pool.commit().unwrap();
        let want = capture(&pool).unwrap();
        drop(pool);
        let (_m3, pool) = open(&m.disks, &[1, members - 1], false).unwrap();
        assert_eq!(capture(&pool).unwrap(), want);
        // The members left out are stale now: the set opens without them, never reading them.
        drop(pool);
        let (m4, pool) = open(&m.disks, &[], false).unwrap();
        assert_eq!(capture(&pool).unwrap(), want);
        assert_eq!(m4.dev.set_status().unwrap().members[1].state, MemberState::Stale);
        let _ = vol;
    }
}

#[test]
fn rot_on_two_members_of_a_block_is_reconstructed_and_rewritten() {
    let (m, pool, vol, objs) = pool_with_data(6);
    let bp = data_block(&m, &pool, vol, objs[1], 5);
    assert_eq!(bp.psize, 16384, "an incompressible 16 KiB record");
    // Its four units are on four members (a row has four data units; the block may span two).
    let units: Vec<(usize, u64)> = (0..4).map(|k| m.dev.placement(bp.addr + k * 4096)[0]).collect();
    let (a, b) = (units[0], units[3]);
    assert_ne!(a.0, b.0);
    let bp2 = data_block(&m, &pool, vol, objs[2], 9);
    drop(pool);
    m.disks[a.0].rot(a.1 + 17, 2);
    m.disks[b.0].rot(b.1 + 4000, 5);
    let (m, pool) = open(&m.disks, &[], true).unwrap();
    let before = (member(&pool, a.0).checksum_errors, member(&pool, b.0).checksum_errors);
    assert_eq!(pool.read(vol, objs[1], 5 * 16384, 16384).unwrap(), expected(1, 5 * 16384, 16384));
    assert_eq!(member(&pool, a.0).checksum_errors, before.0 + 1);
    assert_eq!(member(&pool, b.0).checksum_errors, before.1 + 1);
    // Rewritten in place: a scrub finds nothing left, and the pool counts no corruption.
    assert_eq!(scrub_damage(&pool), 0);
    assert_eq!(pool.status().corruptions_detected, 0);
    // Three members rotted: no two-member hypothesis verifies; an error, never wrong data.
    drop(pool);
    for k in [0u64, 1, 2] {
        let (d, at) = m.dev.placement(bp2.addr + k * 4096)[0];
        m.disks[d].rot(at + 9, 1);
    }
    let (_m, pool) = open(&m.disks, &[], true).unwrap();
    let e = pool.read(vol, objs[2], 9 * 16384, 10).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
}

#[test]
fn a_scrub_repairs_rotted_parity_so_that_two_members_can_still_be_lost() {
    let (m, pool, vol, objs) = pool_with_data(5);
    // Rot one parity unit of each of three blocks' first rows (a read never looks at them),
    // and a data unit of a fourth block (found by the row check even before the block).
    let recs = [3usize, 17, 30];
    let bps: Vec<BlockPtr> = recs.iter().map(|&r| data_block(&m, &pool, vol, objs[0], r)).collect();
    let rotten = data_block(&m, &pool, vol, objs[1], 12);
    drop(pool);
    for (n, bp) in bps.iter().enumerate() {
        let (d, at) = m.dev.parity_placement(bp.addr)[n % 2];
        m.disks[d].rot(at + 123, 3);
    }
    let (d, at) = m.dev.placement(rotten.addr + 4096)[0];
    m.disks[d].rot(at + 7, 1);
    let (m, pool) = open(&m.disks, &[], true).unwrap();
    assert_eq!(pool.read(vol, objs[0], 3 * 16384, 16384).unwrap(), expected(0, 3 * 16384, 16384));
    let found = scrub_damage(&pool);
    assert_eq!(found, 4, "damaged units found");
    assert_eq!(scrub_damage(&pool), 0, "a second scrub found more");
    assert_eq!(pool.status().corruptions_detected, 0);
    drop(pool);
    // Each block with two of its data members lost is rebuilt from both parities.
    for (bp, rec) in bps.iter().zip(recs) {
        let a = m.dev.placement(bp.addr)[0].0;
        let b = m.dev.placement(bp.addr + 4096)[0].0;
        let (_m, pool) = open(&m.disks, &[a, b], false).unwrap();
        let off = rec as u64 * 16384;
        assert_eq!(pool.read(vol, objs[0], off, 16384).unwrap(), expected(0, off, 16384), "record {rec}");
    }
}

#[test]
fn a_replaced_member_is_rebuilt_under_writes_and_stands_in_for_two_others() {
    let (m, pool, vol, objs) = pool_with_data(5);
    m.disks[2].set_gone(true);
    pool.write(vol, objs[0], 0, b"while member 2 is gone").unwrap();
    pool.commit().unwrap();
    assert_eq!(member(&pool, 2).state, MemberState::Removed);
    let fresh = Arc::new(SimDisk::new(SIZE, 4096));
    m.dev.replace(2, fresh.clone(), 0x999).unwrap();
    let mut steps = 0;
    while let Some(p) = pool.rebuild_step(1 << 20).unwrap() {
        steps += 1;
        let o = objs[steps % objs.len()];
        pool.write(vol, o, (steps as u64 * 7919) % (30 * 16384), &[steps as u8; 5000]).unwrap();
        if steps.is_multiple_of(3) {
            pool.commit().unwrap();
        }
        if p.done {
            break;
        }
        assert!(steps < 10_000);
    }
    pool.commit().unwrap();
    assert_eq!(member(&pool, 2).state, MemberState::Online);
    assert_eq!(scrub_damage(&pool), 0, "the rebuilt member holds a bad unit");
    let want = capture(&pool).unwrap();
    drop(pool);
    let mut disks = m.disks.clone();
    disks[2] = fresh;
    // The new member and two others hold everything.
    let (_m, pool) = open(&disks, &[0, 4], false).unwrap();
    assert_eq!(capture(&pool).unwrap(), want);
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
}

#[test]
fn parity2_is_refused_with_too_few_members() {
    let disks: Vec<(Arc<dyn BlockDevice>, u64)> =
        (0..3).map(|i| (Arc::new(SimDisk::new(SIZE, 4096)) as Arc<dyn BlockDevice>, 0x10 + i)).collect();
    let e = strata_engine::MirrorDevice::create(Layout::Parity2, disks, 1, 2, 3).err().expect("refused");
    assert!(e.to_string().contains("4 to 16 devices"), "{e}");
}

/// A row written in two parts (the open row of a txg gets its blocks one write at a time):
/// a unit that went bad on its member between the two writes must not be taken into the
/// row's new parity, or one bad member would lose the block (found by the simulator, seed
/// 85590243). Fails when the second write computes the parity from the unit as read back.
#[test]
fn a_unit_rotted_before_its_row_is_written_again_stays_reconstructable() {
    let m = SimMirror::create_set(Layout::Parity2, 4, SIZE, 4096, SEED);
    let (start, data) = m.dev.rows().expect("parity2 has rows");
    assert_eq!(data, 2, "four members: two data units a row");
    let (a, b) = (vec![0xA5u8; 4096], vec![0x3Cu8; 4096]);
    m.dev.write_at(&a, start).unwrap();
    let (member, at) = m.dev.placement(start)[0];
    m.disks[member].rot(at + 100, 3);
    m.dev.write_at(&b, start + 4096).unwrap();
    let mut buf = vec![0u8; 4096];
    let verified = m.dev.read_verified(&mut buf, start, 0..4096, &|x| x == a.as_slice()).unwrap();
    assert!(verified, "the first unit could not be reconstructed: the row's parity covers its rotted bytes");
    assert_eq!(buf, a);
    // And repaired on its member: read plainly, it is right.
    m.dev.read_at(&mut buf, start).unwrap();
    assert_eq!(buf, a);
}

/// With a member gone, a block is rebuilt from the row's other units, its parity included:
/// a rotted parity unit there is one bad unit more, which a hypothesis must be able to
/// name (two unknowns in all: the gone member and the parity). Found by the simulator
/// (seed 85590291). Fails when only the members holding the block's units are suspects.
#[test]
fn with_a_member_gone_a_rotted_parity_unit_is_found_and_the_block_read() {
    for p in 0..2usize {
        let m = SimMirror::create_set(Layout::Parity2, 4, SIZE, 4096, SEED);
        let (start, data) = m.dev.rows().expect("parity2 has rows");
        assert_eq!(data, 2);
        // Row 0 whole: data units on members 0 and 1, parity on 2 and 3 (rotated per row).
        let block: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
        m.dev.write_at(&block, start).unwrap();
        let (d1, _) = m.dev.placement(start + 4096)[0];
        let parity_member = (0..4).find(|x| *x != m.dev.placement(start)[0].0 && *x != d1).unwrap() + p;
        m.disks[parity_member].rot(strata_testkit::devset::member_offset(0) + start + 33, 6);
        m.disks[d1].set_gone(true);
        let mut buf = vec![0u8; 8192];
        let verified = m.dev.read_verified(&mut buf, start, 0..8192, &|x| x == block.as_slice()).unwrap();
        assert!(verified, "parity unit {p} rotted and a data member gone: the block was not reconstructed");
        assert_eq!(buf, block);
    }
}
