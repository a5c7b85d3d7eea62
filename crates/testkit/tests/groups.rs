//! Device groups (`Pool::add_group`, `strata pool add`): a pool of one mirror grows by a
//! second mirror while it holds data; new blocks spread over both; the pool reopens only
//! with every group it names; and a power failure at any point of the addition, with a
//! workload around it, loses nothing acknowledged. Seeds print on failure; replay with
//! STRATA_SEED=<seed>.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use strata_engine::format::member::{Layout, MEMBER_AREA_BYTES};
use strata_engine::{BlockDevice, CheckOptions, ErrorKind, Pool, VolumeOptions};
use strata_testkit::devset::{check_reopened_set, sync_or_work, SimGroups, SimMirror};
use strata_testkit::model::capture;
use strata_testkit::workload::two_volumes;
use strata_testkit::{is_power_failure, run_seeds, test_create_options, test_pool_options, SimDisk, SimRng};

const SEED: u64 = 23;

fn data(i: u8, len: usize) -> Vec<u8> {
    (0..len as u32).map(|j| (j % 251) as u8 ^ i.wrapping_mul(31)).collect()
}

/// Every member's current image (no crash), by group.
fn images(g: &SimGroups) -> Vec<Vec<Option<Arc<SimDisk>>>> {
    g.sets
        .iter()
        .map(|s| s.disks.iter().map(|d| Some(Arc::new(SimDisk::from_image(d.current_image(), 4096)))).collect())
        .collect()
}

/// Bytes of a member image past its member area that are not zero (what the pool wrote).
fn written(disk: &SimDisk) -> usize {
    disk.current_image()[MEMBER_AREA_BYTES as usize..].chunks(4096).filter(|c| c.iter().any(|&b| b != 0)).count()
}

#[test]
fn a_pool_grows_by_a_mirror_group_and_spreads_new_blocks_over_both() {
    let g = SimGroups::create(2, 48 << 20, 4096, SEED, 2);
    let pool = Pool::create(g.device(), test_create_options(SEED), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let first = pool.create_object(vol, b"first").unwrap();
    pool.write(vol, first, 0, &data(1, 4 << 20)).unwrap();
    pool.commit().unwrap();
    let size_before = pool.status().size_bytes;
    let second_before = written(&g.sets[1].disks[0]);

    let gained = pool.add_group(g.sets[1].device()).unwrap();
    assert!(gained > 40 << 20, "gained {gained}");
    assert_eq!(pool.status().size_bytes, size_before + gained);
    assert!(pool.status().features.incompat & strata_engine::format::features::INCOMPAT_DEVICE_GROUPS != 0);
    // Adding the same set again, or a set of another layout, is refused.
    let e = pool.add_group(g.sets[1].device()).unwrap_err();
    assert!(e.to_string().contains("already"), "{e}");
    let plain = Arc::new(SimDisk::new(64 << 20, 4096)) as Arc<dyn BlockDevice>;
    assert_eq!(pool.add_group(plain).unwrap_err().kind(), ErrorKind::InvalidArgument);

    // 16 MiB more: both groups take a share (1 MiB stripes).
    let objs: Vec<_> = (0..4u8)
        .map(|i| {
            let o = pool.create_object(vol, &[i]).unwrap();
            pool.write(vol, o, 0, &data(i + 2, 4 << 20)).unwrap();
            o
        })
        .collect();
    pool.commit().unwrap();
    let first_group = written(&g.sets[0].disks[0]);
    let second_group = written(&g.sets[1].disks[0]) - second_before;
    assert!(second_group > 1000, "the new group took {second_group} units of 4096 new ones");
    assert!(first_group > 2000, "the first group holds the old data and a share of the new");
    let r = pool.check(CheckOptions { all_copies: true, ..Default::default() }).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
    let model = capture(&pool).unwrap();
    drop(pool);

    // Reopen: with every group; the first set alone is refused, naming the missing group.
    let imgs = images(&g);
    let (alone, _) = SimMirror::open(imgs[0].clone(), true).unwrap();
    let e = strata_engine::pool::groups::assemble(alone.device(), vec![]).err().expect("a group is missing");
    assert!(e.to_string().contains("device group 1") && e.to_string().contains("missing"), "{e}");
    let e = Pool::open(alone.device(), test_pool_options()).err().expect("opened without its group");
    assert!(e.to_string().contains("2 device groups"), "{e}");
    drop(alone);
    let (g2, notes) = SimGroups::open(imgs, true).unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    let pool = Pool::open(g2.device(), test_pool_options()).unwrap();
    assert_eq!(capture(&pool).unwrap(), model);
    for (i, o) in objs.iter().enumerate() {
        assert_eq!(pool.read(vol, *o, 0, 4 << 20).unwrap(), data(i as u8 + 2, 4 << 20));
    }
    let r = pool.check(CheckOptions { all_copies: true, ..Default::default() }).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
    // The members of both groups show in the status, each with its group.
    let set = pool.status().devices.unwrap();
    assert_eq!(set.members.iter().map(|m| m.group).collect::<Vec<_>>(), vec![0, 0, 1, 1]);
}

/// A rotted copy in the added group is repaired like one in the first.
#[test]
fn a_scrub_repairs_the_added_group() {
    let g = SimGroups::create(2, 48 << 20, 4096, SEED, 2);
    let pool = Pool::create(g.device(), test_create_options(SEED), test_pool_options()).unwrap();
    pool.add_group(g.sets[1].device()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    let o = pool.create_object(vol, b"o").unwrap();
    pool.write(vol, o, 0, &data(9, 8 << 20)).unwrap();
    pool.commit().unwrap();
    // Rot every written unit's first byte on member 1 of the added group.
    let disk = &g.sets[1].disks[1];
    let img = disk.current_image();
    let mut rotted = 0;
    for (i, c) in img.chunks(4096).enumerate().skip(((MEMBER_AREA_BYTES + (2 << 20)) / 4096) as usize) {
        if c.iter().any(|&b| b != 0) {
            disk.rot(i as u64 * 4096 + 1, 2);
            rotted += 1;
        }
    }
    assert!(rotted > 100, "{rotted}");
    let r = pool.check(CheckOptions { all_copies: true, ..Default::default() }).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
    let set = pool.status().devices.unwrap();
    let m = set.members.iter().find(|m| m.group == 1 && m.index == 1).unwrap();
    assert!(m.checksum_errors > 100 && m.repaired_bytes > 0, "{m:?}");
    assert_eq!(pool.read(vol, o, 0, 8 << 20).unwrap(), data(9, 8 << 20));
}

/// [the crash came before the labels named the group, after]
static SEEN: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

#[test]
fn a_power_failure_while_a_group_is_added_loses_nothing_acknowledged() {
    run_seeds("a_power_failure_while_a_group_is_added_loses_nothing_acknowledged", 0x6a0_0000, 40, |seed| {
        let mut rng = SimRng::new(seed);
        // Mirrors of 2, or parity2 sets of 4 (their rows per group: alloc/rows.rs).
        let (layout, ways) = *rng.pick(&[(Layout::Mirror, 2usize), (Layout::Parity2, 4)]);
        let g = SimGroups::create_layout(layout, ways, 32 << 20, 512, seed, 2);
        let pool = Pool::create(g.device(), test_create_options(seed), test_pool_options()).unwrap();
        let (mut model, vols) = two_volumes(&mut rng, &pool, &[4096u32, 16384]);
        let mut synced = vec![model.clone()];
        let mut acked = 0usize;
        let ops = rng.range(20, 100);
        let add_op = rng.below(ops);
        // The crash comes in the addition itself (a few device operations into it) or
        // anywhere after it.
        let crash_in_add = rng.chance(50);
        let crash_op = if crash_in_add { add_op } else { rng.range(add_op, ops) };
        let mut added = false;
        for i in 0..ops {
            if i == crash_op {
                g.power.set_crash_after(rng.below(if crash_in_add { 12 } else { 60 }));
            }
            let r = if i == add_op {
                // The addition commits first: it is a sync of everything before it.
                synced.push(model.clone());
                let r = pool.add_group(g.sets[1].device());
                if r.is_ok() {
                    acked = synced.len() - 1;
                    added = true;
                }
                r.map(|_| ())
            } else {
                sync_or_work(&mut rng, &pool, &vols, &mut model, &mut synced, &mut acked)
            };
            if let Err(e) = r {
                assert!(is_power_failure(&e), "seed {seed}: step {i} failed, not by the power: {e}");
                break;
            }
        }
        let images = g.crash_images(&mut rng, 512);
        drop(pool);
        let (g2, notes) = SimGroups::open(images, true)
            .unwrap_or_else(|e| panic!("seed {seed}: the groups do not assemble after the crash: {e}"));
        let pool = Pool::open(g2.device(), test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: the pool does not open after the crash: {e}"));
        let named = g2.dev.group_count() == 2;
        assert!(named || !added, "seed {seed}: the addition returned Ok but the group is not in the pool");
        assert!(named || notes.iter().any(|n| n.contains("not a device group")), "seed {seed}: {notes:?}");
        SEEN[usize::from(named)].fetch_add(1, Ordering::Relaxed);
        check_reopened_set(&pool, &synced, acked, &mut rng, seed);
        if !named {
            // The set the crash left out can be added again.
            pool.add_group(g2.sets[1].device()).unwrap_or_else(|e| panic!("seed {seed}: add again: {e}"));
            assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
        }
    });
    if !strata_testkit::replaying_seed() {
        let seen: Vec<u64> = SEEN.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert!(seen.iter().all(|&n| n > 0), "cases not met [before the labels, after]: {seen:?}");
    }
}

/// A pool that never adds a group writes its labels exactly as builds before groups did
/// (bytes 216.. of each label zero, no new feature bit), so those builds still open it; a
/// label rewrite (compression turned on) only sets the generation, in bytes older builds
/// never read. And a label as they wrote it (generation and table zero) opens here.
#[test]
fn pools_without_groups_keep_the_old_label_bytes() {
    let disk = Arc::new(SimDisk::new(32 << 20, 4096));
    let pool = Pool::create(disk.clone() as Arc<dyn BlockDevice>, test_create_options(5), test_pool_options()).unwrap();
    let img = disk.current_image();
    for base in [0usize, 256 << 10] {
        assert!(img[base + 216..base + 224].iter().all(|&b| b == 0), "generation at {base}");
        assert!(img[base + 256..base + 4096].iter().all(|&b| b == 0), "group table at {base}");
    }
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    pool.set_compression(vol, strata_engine::CompressionPolicy::Lz4).unwrap();
    pool.commit().unwrap();
    drop(pool);
    let img = disk.current_image();
    for base in [0usize, 256 << 10] {
        assert_eq!(u64::from_le_bytes(img[base + 216..base + 224].try_into().unwrap()), 1, "generation at {base}");
        assert!(img[base + 256..base + 4096].iter().all(|&b| b == 0));
        let incompat = u64::from_le_bytes(img[base + 104..base + 112].try_into().unwrap());
        assert_eq!(incompat & strata_engine::format::features::INCOMPAT_DEVICE_GROUPS, 0);
    }
    // Zero the generation again, as an older build's rewrite would, and reseal: it opens.
    let mut old = img.clone();
    for base in [0usize, 256 << 10] {
        let mut l = strata_engine::format::label::LabelPhys::decode(&old[base..base + 4096], base as u64).unwrap();
        l.generation = 0;
        old[base..base + 4096].copy_from_slice(&l.encode());
        assert!(old[base + 216..base + 224].iter().all(|&b| b == 0));
    }
    let pool =
        Pool::open(Arc::new(SimDisk::from_image(old, 4096)) as Arc<dyn BlockDevice>, test_pool_options()).unwrap();
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
}

/// A parity2 pool adds a parity2 set: blocks go into the new set's rows (full rows, no
/// write hole there either), a member of each set may fail and every byte is still read,
/// and the reopened pool checks clean with the rows of both groups.
#[test]
fn a_parity2_pool_grows_by_a_parity2_group() {
    let g = SimGroups::create_layout(Layout::Parity2, 4, 48 << 20, 4096, SEED, 2);
    let pool = Pool::create(g.device(), test_create_options(SEED), test_pool_options()).unwrap();
    // A mirror is not a group of a parity2 pool.
    let m = SimMirror::create(2, 64 << 20, 4096, SEED);
    let e = pool.add_group(m.device()).unwrap_err();
    assert!(e.to_string().contains("parity2 too"), "{e}");
    assert_eq!(pool.parity_row_sets(), 1);
    pool.add_group(g.sets[1].device()).unwrap();
    assert_eq!(pool.parity_row_sets(), 2, "the new group's rows are kept to");
    let vol = pool.create_volume("v", &VolumeOptions { record_size: 16384, ..Default::default() }).unwrap();
    let objs: Vec<_> = (0..6u8)
        .map(|i| {
            let o = pool.create_object(vol, &[i]).unwrap();
            pool.write(vol, o, 0, &data(i, 4 << 20)).unwrap();
            pool.commit().unwrap();
            o
        })
        .collect();
    assert!(written(&g.sets[1].disks[0]) > 1000, "the parity2 group took blocks");
    let r = pool.check(CheckOptions { all_copies: true, ..Default::default() }).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
    // One member of each set gone: every byte still reads right.
    g.sets[0].disks[1].set_gone(true);
    g.sets[1].disks[2].set_gone(true);
    for (i, o) in objs.iter().enumerate() {
        assert_eq!(pool.read(vol, *o, 0, 4 << 20).unwrap(), data(i as u8, 4 << 20), "object {i}");
    }
    g.sets[0].disks[1].set_gone(false);
    g.sets[1].disks[2].set_gone(false);
    drop(pool);
    let imgs = images(&g);
    let (g2, _) = SimGroups::open(imgs, true).unwrap();
    let pool = Pool::open(g2.device(), test_pool_options()).unwrap();
    assert_eq!(pool.parity_row_sets(), 2, "both groups' rows after reopening");
    let r = pool.check(CheckOptions { all_copies: true, ..Default::default() }).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
    for (i, o) in objs.iter().enumerate() {
        assert_eq!(pool.read(vol, *o, 0, 4 << 20).unwrap(), data(i as u8, 4 << 20));
    }
}

/// A group is added while writers write, sync and commit on other threads: none of them
/// sees an error, and every byte each wrote (and synced) is there — before the pool is
/// dropped and after it reopens.
#[test]
fn a_group_is_added_while_writers_write_and_sync() {
    let g = SimGroups::create(2, 48 << 20, 4096, SEED, 2);
    let pool = Arc::new(Pool::create(g.device(), test_create_options(SEED), test_pool_options()).unwrap());
    let vol = pool.create_volume("v", &VolumeOptions { record_size: 16384, ..Default::default() }).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3u8)
        .map(|t| {
            let (pool, stop) = (pool.clone(), stop.clone());
            std::thread::spawn(move || {
                let o = pool.create_object(vol, &[t]).unwrap();
                let mut round = 0u32;
                while !stop.load(Ordering::Relaxed) || round < 20 {
                    let off = (round as u64 % 64) * 65536;
                    pool.write(vol, o, off, &data(t.wrapping_add(round as u8), 65536)).unwrap();
                    match round % 5 {
                        0 => pool.sync_object(vol, o).unwrap(),
                        3 => drop(pool.commit().unwrap()),
                        _ => {}
                    }
                    round += 1;
                }
                (o, round)
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(30));
    pool.add_group(g.sets[1].device()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    stop.store(true, Ordering::Relaxed);
    let done: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    pool.sync_log().unwrap();
    // What each object must hold: the last write of each of its 64 KiB slots.
    let expect = |t: u8, rounds: u32| {
        let mut v = vec![0u8; 64 * 65536];
        for round in 0..rounds {
            let off = (round as usize % 64) * 65536;
            v[off..off + 65536].copy_from_slice(&data(t.wrapping_add(round as u8), 65536));
        }
        v.truncate(((rounds.min(64) as usize - 1) + 1) * 65536);
        v
    };
    for (t, (o, rounds)) in done.iter().enumerate() {
        assert_eq!(pool.read(vol, *o, 0, 64 * 65536).unwrap(), expect(t as u8, *rounds), "writer {t}");
    }
    let r = pool.check(CheckOptions { all_copies: true, ..Default::default() }).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
    drop(pool);
    let imgs = images(&g);
    let (g2, _) = SimGroups::open(imgs, true).unwrap();
    let pool = Pool::open(g2.device(), test_pool_options()).unwrap();
    for (t, (o, rounds)) in done.iter().enumerate() {
        assert_eq!(pool.read(vol, *o, 0, 64 * 65536).unwrap(), expect(t as u8, *rounds), "writer {t} after reopening");
    }
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
}
