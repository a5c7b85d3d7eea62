//! One precise damage per guard of the failure policy (docs/failure-policy.md): a figure, a
//! key, a counter or a space map bit read from disk that the engine once met with a panic
//! (an `expect`, unchecked arithmetic, a slice, an assertion, unbounded recursion). Each
//! image is made checksum-valid (testkit `damage`), so only the guard under test stands
//! between the damage and a panic; each test names the typed error it expects.

use std::sync::Arc;
use strata_engine::format::node::BtreeNodePhys;
use strata_engine::format::records::{DnodePhys, SnapshotRecordPhys, VolumeRecordPhys, SPACE_SECTORS_MAX};
use strata_engine::{BlockDevice, CheckOptions, Error, ErrorKind, ObjectId, Pool, VolumeId, VolumeOptions};
use strata_testkit::damage::Image;
use strata_testkit::{test_create_options, test_pool_options, SimDisk, SimRng};

const RS: usize = 8192;

/// A committed pool with volume "v" (8 KiB records) after `setup`, as a device image.
fn image(setup: impl FnOnce(&Pool, VolumeId)) -> Vec<u8> {
    let disk = Arc::new(SimDisk::new(24 << 20, 4096));
    let pool = Pool::create(disk.clone(), test_create_options(5), test_pool_options()).unwrap();
    let v = pool.create_volume("v", &VolumeOptions { record_size: RS as u32, ..Default::default() }).unwrap();
    setup(&pool, v);
    pool.close().unwrap();
    disk.current_image()
}

/// Object 1 of "v" holding four records.
fn one_object(pool: &Pool, v: VolumeId) {
    let o = pool.create_object(v, b"attr").unwrap();
    assert_eq!(o, ObjectId(1));
    pool.write(v, o, 0, &SimRng::new(1).bytes(4 * RS)).unwrap();
}

fn damaged(bytes: Vec<u8>, f: impl FnOnce(&mut Image)) -> Vec<u8> {
    let mut img = Image::parse(bytes).expect("a healthy image parses");
    f(&mut img);
    img.bytes
}

fn open(bytes: &[u8]) -> Result<Pool, Error> {
    Pool::open(Arc::new(SimDisk::from_image(bytes.to_vec(), 4096)) as Arc<dyn BlockDevice>, test_pool_options())
}

#[track_caller]
fn assert_corruption<T: std::fmt::Debug>(r: Result<T, Error>, mentions: &str) {
    match r {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
            assert!(e.to_string().contains(mentions), "{e:?} does not mention {mentions:?}");
        }
        Ok(v) => panic!("expected a corruption error mentioning {mentions:?}, got Ok({v:?})"),
    }
}

/// Rewrite volume "v"'s record in the catalog.
fn edit_volume_record(img: &mut Image, f: impl Fn(&mut VolumeRecordPhys)) {
    let n = img
        .edit_nodes(true, |_, node| {
            let BtreeNodePhys::Leaf { entries } = node else { return false };
            let Some((_, v)) = entries.iter_mut().find(|(k, _)| k.as_slice() == b"\x01v") else { return false };
            let mut rec = VolumeRecordPhys::decode(v).unwrap();
            f(&mut rec);
            *v = rec.encode();
            true
        })
        .unwrap();
    assert_eq!(n, 1);
}

/// Rewrite the dnode of object `obj` wherever a volume tree holds it.
fn edit_dnode(img: &mut Image, obj: u64, f: impl Fn(&mut DnodePhys)) {
    let key = [&[0x01][..], &obj.to_be_bytes()].concat();
    let n = img
        .edit_nodes(false, |_, node| {
            let BtreeNodePhys::Leaf { entries } = node else { return false };
            let Some((_, v)) = entries.iter_mut().find(|(k, _)| *k == key) else { return false };
            let mut dn = DnodePhys::decode(v).unwrap();
            f(&mut dn);
            *v = dn.encode();
            true
        })
        .unwrap();
    assert!(n >= 1);
}

/// Truncate object 1 away and commit: the sync frees its four records.
fn free_the_records(bytes: &[u8]) -> Result<u64, Error> {
    let pool = open(bytes).expect("the damage is not visible at open");
    let v = pool.volume_id("v").unwrap();
    pool.truncate(v, ObjectId(1), 0).unwrap();
    let r = pool.commit();
    if r.is_err() {
        // The failed commit latched the pool: nothing half-synced reaches the device.
        assert_eq!(pool.write(v, ObjectId(1), 0, b"x").unwrap_err().kind(), ErrorKind::ReadOnly);
    }
    r
}

#[test]
fn a_dnode_that_cannot_give_up_its_freed_records_fails_the_commit() {
    let bytes = damaged(image(one_object), |img| edit_dnode(img, 1, |dn| dn.data_sectors = 0));
    assert_corruption(free_the_records(&bytes), "volume v object 1 data");
}

#[test]
fn a_volume_that_frees_more_than_it_uses_fails_the_commit() {
    let bytes = damaged(image(one_object), |img| {
        edit_volume_record(img, |r| {
            r.used_sectors = 0;
            r.written_sectors = 0;
        })
    });
    assert_corruption(free_the_records(&bytes), "volume v used");
}

#[test]
fn a_head_that_frees_more_than_it_wrote_fails_the_commit() {
    let bytes = damaged(image(one_object), |img| edit_volume_record(img, |r| r.written_sectors = 0));
    assert_corruption(free_the_records(&bytes), "volume v written");
}

#[test]
fn a_volume_that_frees_more_than_was_born_in_it_fails_the_commit() {
    let bytes = damaged(image(one_object), |img| edit_volume_record(img, |r| r.total_sectors = 0));
    assert_corruption(free_the_records(&bytes), "volume v total");
}

#[test]
fn the_healthy_image_frees_its_records_and_checks_clean() {
    // The control for the four above: the same steps on the undamaged image succeed.
    let bytes = image(one_object);
    free_the_records(&bytes).unwrap();
}

#[test]
fn a_block_referenced_twice_fails_the_commit_that_frees_it_twice() {
    let healthy = image(one_object);
    let pool = open(&healthy).unwrap();
    let v = pool.volume_id("v").unwrap();
    // The object has one indirect level above its four records.
    let (root, levels) = pool.object_block_root(v, ObjectId(1)).unwrap();
    assert_eq!(levels, 1);
    drop(pool);
    // Record 3 points at record 2's block: two pointers to one block, both verify.
    let bytes = damaged(healthy, |img| img.edit_indirect(&root, |ind| ind.bps[3] = ind.bps[2]).unwrap());
    let pool = open(&bytes).unwrap();
    let report = pool.check(CheckOptions::default()).unwrap();
    // The checker takes the second pointer for sharing: it sees the block record 3 lost.
    assert!(report.errors.iter().any(|e| e.contains("leak")), "{:?}", report.errors);
    drop(pool);
    // Freeing record 2's block the second time: the space map holds it free by then.
    assert_corruption(free_the_records(&bytes), "holds free");
}

#[test]
fn a_dnode_key_of_the_wrong_length_is_corruption_when_listed() {
    let bytes = damaged(image(one_object), |img| {
        let n = img
            .edit_nodes(false, |_, node| {
                let BtreeNodePhys::Leaf { entries } = node else { return false };
                let Some(last_dnode) = entries.iter().rposition(|(k, _)| k.first() == Some(&0x01)) else {
                    return false;
                };
                // Still in order: past every 9-byte dnode key, before the caller's keys.
                entries[last_dnode].0 = vec![0x01, 0xff, 0xff];
                true
            })
            .unwrap();
        assert_eq!(n, 1);
    });
    let pool = open(&bytes).unwrap();
    let v = pool.volume_id("v").unwrap();
    assert_corruption(pool.list_objects(v, None, 100), "dnode key");
}

#[test]
fn an_exhausted_id_counter_refuses_new_volumes_and_snapshots() {
    let bytes = damaged(image(one_object), |img| img.edit_root(|ub| ub.next_volume_id = u64::MAX));
    let pool = open(&bytes).unwrap();
    assert_corruption(pool.create_volume("w", &VolumeOptions::default()), "next volume id");
    assert_corruption(pool.create_snapshots(&["v"], "s"), "next volume id");
    assert!(pool.snapshots(None).unwrap().is_empty(), "a refused snapshot leaves nothing pending");
}

#[test]
fn an_id_counter_behind_the_ids_in_use_is_refused_at_open() {
    let mut txg = 0;
    let bytes = damaged(image(one_object), |img| {
        img.edit_root(|ub| {
            txg = ub.txg;
            ub.next_volume_id = 1;
        })
    });
    // The damaged root is refused; opening falls back to the root before it.
    let pool = open(&bytes).unwrap();
    assert!(pool.committed_root().txg < txg);
    let notes = pool.status().open_notes;
    assert!(notes.iter().any(|n| n.contains("next volume id 1 is not past id 1")), "{notes:?}");
}

#[test]
fn an_exhausted_or_taken_object_id_refuses_new_objects() {
    let bytes = damaged(image(one_object), |img| edit_volume_record(img, |r| r.next_object_id = u64::MAX));
    let pool = open(&bytes).unwrap();
    let v = pool.volume_id("v").unwrap();
    assert_corruption(pool.create_object(v, b"new"), "next object id");
    drop(pool);
    // A counter naming object 1, whose dnode this txg holds: handing it out again would
    // put a new object in its place.
    let bytes = damaged(image(one_object), |img| edit_volume_record(img, |r| r.next_object_id = 1));
    let pool = open(&bytes).unwrap();
    pool.write(v, ObjectId(1), 0, b"dirty").unwrap();
    assert_corruption(pool.create_object(v, b"new"), "next object id");
    assert_eq!(pool.read(v, ObjectId(1), 0, 5).unwrap(), b"dirty");
}

/// A volume whose tree has an internal root over several leaves.
fn many_entries(pool: &Pool, v: VolumeId) {
    let mut rng = SimRng::new(3);
    for i in 0..400u32 {
        pool.kv_put(v, format!("k{i:04}").as_bytes(), &rng.bytes(100)).unwrap();
    }
}

#[test]
fn a_child_pointer_that_aliases_its_parent_is_reported_not_followed_forever() {
    // The child pointer takes its parent's address and birth: the metadata cache (keyed by
    // both) hands the parent back for it, so a walk that does not check levels recurses
    // until the stack overflows.
    let bytes = damaged(image(many_entries), |img| {
        let n = img
            .edit_nodes(false, |me, node| {
                let BtreeNodePhys::Internal { entries, .. } = node else { return false };
                let child = &mut entries[1].1;
                child.addr = me.addr;
                child.birth_txg = me.birth_txg;
                true
            })
            .unwrap();
        assert_eq!(n, 1);
    });
    let pool = open(&bytes).unwrap();
    let report = pool.check(CheckOptions::default()).unwrap();
    assert!(!report.is_clean());
    let v = pool.volume_id("v").unwrap();
    assert_corruption(pool.kv_range(v, b"", None, 1000), "level 1 under a node of level 1");
}

#[test]
fn keys_a_damaged_separator_misrouted_are_not_written_out_of_order() {
    // Separator 1 of the root moved up to just below separator 2: keys in between now go to
    // child 0, though child 1 holds smaller ones. Merging the two (child 0 emptied of its
    // own keys) would put keys out of order in one node.
    let mut seps: Vec<Vec<u8>> = Vec::new();
    let bytes = damaged(image(many_entries), |img| {
        let n = img
            .edit_nodes(false, |_, node| {
                let BtreeNodePhys::Internal { entries, .. } = node else { return false };
                assert!(entries.len() >= 3, "the root has at least three children");
                seps = entries.iter().map(|(k, _)| k.clone()).collect();
                let mut moved = entries[2].0.clone();
                *moved.last_mut().unwrap() -= 1;
                entries[1].0 = moved;
                true
            })
            .unwrap();
        assert_eq!(n, 1);
    });
    let pool = open(&bytes).unwrap();
    let v = pool.volume_id("v").unwrap();
    // Keys between the old and the new separator 1: they land in child 0.
    let (from, to) = (seps[1][1..].to_vec(), seps[2][1..].to_vec());
    let all = pool.kv_range(v, b"", None, 1000).unwrap();
    for (k, _) in all.iter().filter(|(k, _)| *k >= from && *k < to).take(3) {
        pool.kv_put(v, &[k.as_slice(), b"+"].concat(), b"misrouted").unwrap();
    }
    // Child 0's own keys go: it shrinks below a quarter and merges with child 1.
    for (k, _) in all.iter().filter(|(k, _)| *k < from) {
        pool.kv_delete(v, k).unwrap();
    }
    assert_corruption(pool.commit(), "keys out of order");
}

#[test]
fn a_restore_that_would_free_more_than_was_born_in_the_volume_is_refused() {
    let healthy = image(|pool, v| {
        one_object(pool, v);
        pool.commit().unwrap();
        pool.create_snapshots(&["v"], "s").unwrap();
        pool.write(v, ObjectId(1), 0, &SimRng::new(2).bytes(2 * RS)).unwrap();
    });
    let bytes = damaged(healthy.clone(), |img| edit_volume_record(img, |r| r.total_sectors = 0));
    let pool = open(&bytes).unwrap();
    assert_corruption(pool.restore_volume("v", "s"), "blocks born since its parent snapshot");
    // The control: the undamaged volume restores.
    open(&healthy).unwrap().restore_volume("v", "s").unwrap();
}

#[test]
fn savings_near_the_bound_in_many_volumes_do_not_overflow_the_pool_figures() {
    // Each volume's savings may be as large as SPACE_SECTORS_MAX sectors hold; nine of them
    // pass u64 in bytes.
    let healthy = image(|pool, _| {
        for i in 0..8 {
            pool.create_volume(&format!("w{i}"), &VolumeOptions::default()).unwrap();
        }
    });
    let bytes = damaged(healthy, |img| {
        let n = img
            .edit_nodes(true, |_, node| {
                let BtreeNodePhys::Leaf { entries } = node else { return false };
                for (_, v) in entries.iter_mut().filter(|(k, _)| k.first() == Some(&0x01)) {
                    let mut rec = VolumeRecordPhys::decode(v).unwrap();
                    rec.saved_bytes = Some(SPACE_SECTORS_MAX * 512);
                    *v = rec.encode();
                }
                true
            })
            .unwrap();
        assert!(n >= 1);
    });
    let pool = open(&bytes).unwrap();
    assert_eq!(pool.volumes().len(), 9);
    let space = pool.status().space;
    assert_eq!((space.saved_bytes, space.logical_bytes), (u64::MAX, u64::MAX));
}

#[test]
fn a_snapshot_delete_that_meets_damage_part_way_latches_and_commits_nothing() {
    // s2's deadlist holds s1's blocks overwritten before s2; deleting s1 moves deadlist
    // entries, then finds s1 wrote fewer sectors than its successor's deadlist frees.
    let healthy = image(|pool, v| {
        one_object(pool, v);
        pool.commit().unwrap();
        pool.create_snapshots(&["v"], "s1").unwrap();
        pool.write(v, ObjectId(1), 0, &SimRng::new(2).bytes(2 * RS)).unwrap();
        pool.commit().unwrap();
        pool.create_snapshots(&["v"], "s2").unwrap();
    });
    let bytes = damaged(healthy, |img| {
        let n = img
            .edit_nodes(true, |_, node| {
                let BtreeNodePhys::Leaf { entries } = node else { return false };
                let s1 = entries.iter_mut().find(|(k, _)| k.first() == Some(&0x02) && k.ends_with(b"s1"));
                let Some((_, v)) = s1 else { return false };
                let mut rec = SnapshotRecordPhys::decode(v).unwrap();
                rec.written_sectors = 0;
                *v = rec.encode();
                true
            })
            .unwrap();
        assert_eq!(n, 1);
    });
    let disk = Arc::new(SimDisk::from_image(bytes, 4096));
    let pool = Pool::open(disk.clone(), test_pool_options()).unwrap();
    assert_corruption(pool.delete_snapshot("v", "s1"), "frees more than it wrote");
    // The catalog was half edited in memory: the pool latched, nothing of it is committed.
    assert_eq!(pool.commit().unwrap_err().kind(), ErrorKind::ReadOnly);
    drop(pool);
    let pool = Pool::open(disk.clone(), test_pool_options()).unwrap();
    assert_eq!(pool.snapshots(Some("v")).unwrap().len(), 2);
}

/// Volume "v" with snapshots s1 and s2 and records overwritten after each: the head's
/// deadlist and s2's both hold entries.
fn two_snapshots(pool: &Pool, v: VolumeId) {
    one_object(pool, v);
    pool.commit().unwrap();
    pool.create_snapshots(&["v"], "s1").unwrap();
    pool.write(v, ObjectId(1), 0, &SimRng::new(2).bytes(RS)).unwrap();
    pool.commit().unwrap();
    pool.create_snapshots(&["v"], "s2").unwrap();
    pool.write(v, ObjectId(1), RS as u64, &SimRng::new(3).bytes(RS)).unwrap();
}

/// The deadlist ids present in the catalog, smallest first.
fn deadlist_ids(img: &mut Image) -> Vec<u64> {
    let mut ids = std::collections::BTreeSet::new();
    img.edit_nodes(true, |_, node| {
        if let BtreeNodePhys::Leaf { entries } = node {
            for (k, _) in entries.iter().filter(|(k, _)| k.first() == Some(&0x03)) {
                ids.insert(u64::from_be_bytes(k[1..9].try_into().unwrap()));
            }
        }
        false
    })
    .unwrap();
    ids.into_iter().collect()
}

#[test]
fn a_deadlist_key_of_the_wrong_length_is_corruption() {
    let bytes = damaged(image(two_snapshots), |img| {
        let ids = deadlist_ids(img);
        assert_eq!(ids.len(), 2, "s2's deadlist and the head's");
        // s2's last entry gets the key 03 ++ dl ++ ff: still after its other entries and
        // before the next deadlist's, so inside the range its deadlist is read with.
        let dl = ids[0];
        let n = img
            .edit_nodes(true, |_, node| {
                let BtreeNodePhys::Leaf { entries } = node else { return false };
                let prefix = [&[0x03][..], &dl.to_be_bytes()].concat();
                let Some(last) = entries.iter().rposition(|(k, _)| k.starts_with(&prefix)) else { return false };
                entries[last].0 = [&prefix[..], &[0xff]].concat();
                true
            })
            .unwrap();
        assert_eq!(n, 1);
    });
    let pool = open(&bytes).unwrap();
    assert_corruption(pool.snapshots(Some("v")), "does not match its block pointer");
}

#[test]
fn a_volume_delete_that_meets_damage_stops_its_destroy_not_the_pool() {
    // The delete queues the volume (async destroy); freeing it meets s2's deadlist, damaged.
    let bytes = damaged(image(two_snapshots), |img| {
        let ids = deadlist_ids(img);
        let s2 = ids[0];
        break_deadlist(img, s2);
    });
    let disk = Arc::new(SimDisk::from_image(bytes, 4096));
    let pool = Pool::open(disk.clone(), test_pool_options()).unwrap();
    pool.delete_volume("v").unwrap();
    for _ in 0..4 {
        pool.commit().unwrap();
    }
    let st = pool.status();
    assert!(st.latched.is_none(), "the pool goes on: {:?}", st.latched);
    assert!(
        st.space.warnings.iter().any(|w| w.contains("stuck") && w.contains("does not match its block pointer")),
        "the stuck destroy is reported: {:?}",
        st.space.warnings
    );
    assert!(st.space.destroying_bytes > 0, "what could not be freed stays counted");
    drop(pool);
    let pool = Pool::open(disk.clone(), test_pool_options()).unwrap();
    assert!(pool.volume_id("v").is_err(), "the acknowledged delete holds");
    pool.commit().unwrap();
    assert!(pool.status().space.warnings.iter().any(|w| w.contains("stuck")));
}

#[test]
fn a_head_with_a_parent_but_no_deadlist_is_refused_at_open() {
    // Its first free of a block the snapshot shares would have nowhere to go.
    let mut txg = 0;
    let healthy = image(|pool, v| {
        one_object(pool, v);
        pool.commit().unwrap();
        pool.create_snapshots(&["v"], "s").unwrap();
    });
    let bytes = damaged(healthy, |img| {
        edit_volume_record(img, |r| {
            assert_ne!((r.parent, r.deadlist), (0, 0));
            r.deadlist = 0;
        });
        img.edit_root(|ub| txg = ub.txg);
    });
    let pool = open(&bytes).unwrap();
    assert!(pool.committed_root().txg < txg, "the damaged root is refused");
    let notes = pool.status().open_notes;
    assert!(notes.iter().any(|n| n.contains("deadlist 0")), "{notes:?}");
    // The root before it has the volume whole: overwriting a shared record works.
    let v = pool.volume_id("v").unwrap();
    pool.write(v, ObjectId(1), 0, &[7; RS]).unwrap();
    pool.commit().unwrap();
}

#[test]
fn a_pointer_at_the_end_of_the_address_space_is_corruption() {
    // A one-record object: its dnode's root is the data block itself.
    let healthy = image(|pool, v| {
        let o = pool.create_object(v, b"small").unwrap();
        pool.write(v, o, 0, &SimRng::new(4).bytes(3000)).unwrap();
    });
    for packed in [false, true] {
        let bytes = damaged(healthy.clone(), |img| {
            edit_dnode(img, 1, |dn| {
                // Unit aligned, or (a packed record) sector aligned: the last sector.
                dn.root.addr = if packed { !511 } else { !4095 };
                dn.root.packed = packed;
            })
        });
        let pool = open(&bytes).unwrap();
        let v = pool.volume_id("v").unwrap();
        assert_corruption(pool.read(v, ObjectId(1), 0, 100), "outside the data area");
        let report = pool.check(CheckOptions::default()).unwrap();
        let expect = if packed { "in no pack" } else { "outside the data area" };
        assert!(report.errors.iter().any(|e| e.contains(expect)), "{:?}", report.errors);
    }
}

#[test]
fn a_group_restore_that_meets_damage_part_way_latches_and_restores_nothing() {
    // "v" is restored in memory first; then "w"'s deadlist turns out damaged. Committing
    // "v" alone would break the group restore's all-or-none.
    let healthy = image(|pool, v| {
        let w = pool.create_volume("w", &VolumeOptions { record_size: RS as u32, ..Default::default() }).unwrap();
        one_object(pool, v);
        let ow = pool.create_object(w, b"attr").unwrap();
        pool.write(w, ow, 0, &SimRng::new(4).bytes(2 * RS)).unwrap();
        pool.commit().unwrap();
        pool.create_snapshots(&["v", "w"], "s1").unwrap();
        pool.write(v, ObjectId(1), 0, &SimRng::new(5).bytes(RS)).unwrap();
        pool.write(w, ow, 0, &SimRng::new(6).bytes(RS)).unwrap();
        pool.commit().unwrap();
    });
    let bytes = damaged(healthy, |img| {
        let mut w_deadlist = 0;
        img.edit_nodes(true, |_, node| {
            if let BtreeNodePhys::Leaf { entries } = node {
                if let Some((_, v)) = entries.iter().find(|(k, _)| k.as_slice() == b"\x01w") {
                    w_deadlist = VolumeRecordPhys::decode(v).unwrap().deadlist;
                }
            }
            false
        })
        .unwrap();
        assert_ne!(w_deadlist, 0);
        break_deadlist(img, w_deadlist);
    });
    let disk = Arc::new(SimDisk::from_image(bytes, 4096));
    let pool = Pool::open(disk.clone(), test_pool_options()).unwrap();
    let v = pool.volume_id("v").unwrap();
    let before = pool.read(v, ObjectId(1), 0, RS).unwrap();
    assert_corruption(pool.restore_volumes(&[("v", "s1"), ("w", "s1")]), "does not match its block pointer");
    assert_eq!(pool.commit().unwrap_err().kind(), ErrorKind::ReadOnly, "the pool latched");
    drop(pool);
    let pool = Pool::open(disk.clone(), test_pool_options()).unwrap();
    assert_eq!(pool.read(v, ObjectId(1), 0, RS).unwrap(), before, "v was not restored alone");
}

/// Damage every entry of deadlist `dl`: each pointer's birth txg no longer matches its key.
fn break_deadlist(img: &mut Image, dl: u64) {
    let prefix = [&[0x03][..], &dl.to_be_bytes()].concat();
    let n = img
        .edit_nodes(true, |_, node| {
            let BtreeNodePhys::Leaf { entries } = node else { return false };
            let mut changed = false;
            for (_, v) in entries.iter_mut().filter(|(k, _)| k.starts_with(&prefix)) {
                v[8] ^= 1;
                changed = true;
            }
            changed
        })
        .unwrap();
    assert!(n >= 1, "deadlist {dl} has entries to damage");
}
