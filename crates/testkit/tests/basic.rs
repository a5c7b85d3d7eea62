//! Round trips through create → write → commit → reopen → read, and the checker's verdict.

use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, ErrorKind, ObjectId, Pool, SpaceReason, VolumeOptions};
use strata_testkit::{model, test_create_options, test_pool_options, SimDisk};

fn new_pool(size: u64) -> (Arc<SimDisk>, Pool) {
    let disk = Arc::new(SimDisk::new(size, 4096));
    let pool = Pool::create(disk.clone(), test_create_options(1), test_pool_options()).expect("create pool");
    (disk, pool)
}

fn reopen(disk: &Arc<SimDisk>) -> Pool {
    Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).expect("reopen pool")
}

fn assert_clean(pool: &Pool) {
    let r = pool.check(CheckOptions::default()).expect("check runs");
    assert!(r.is_clean(), "checker found: {:#?}", r.errors);
}

#[test]
fn write_commit_reopen_read() {
    let (disk, pool) = new_pool(64 << 20);
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"attr-1").unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    pool.write(vol, obj, 5000, &data).unwrap();
    assert_eq!(pool.read(vol, obj, 5000, data.len()).unwrap(), data);
    let txg = pool.commit().unwrap();
    assert!(txg >= 2);
    assert_clean(&pool);
    let before = model::capture(&pool).unwrap();
    drop(pool);
    let pool = reopen(&disk);
    assert_eq!(model::capture(&pool).unwrap(), before);
    assert_eq!(pool.object_size(vol, obj).unwrap(), 105_000);
    assert_eq!(pool.read(vol, obj, 0, 5000).unwrap(), vec![0; 5000]);
    assert_eq!(pool.get_attr(vol, obj).unwrap(), b"attr-1");
    assert_clean(&pool);
}

#[test]
fn huge_sparse_offsets() {
    let (disk, pool) = new_pool(64 << 20);
    let vol = pool
        .create_volume("sparse", &VolumeOptions { record_size: 4096, quota_bytes: 0, ..Default::default() })
        .unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    let far = (1u64 << 62) - 4096;
    pool.write(vol, obj, far, b"the end").unwrap();
    pool.write(vol, obj, 1 << 40, b"middle").unwrap();
    pool.write(vol, obj, 3, b"start").unwrap();
    pool.commit().unwrap();
    drop(pool);
    let pool = reopen(&disk);
    assert_eq!(pool.object_size(vol, obj).unwrap(), far + 7);
    assert_eq!(pool.read(vol, obj, far, 100).unwrap(), b"the end");
    assert_eq!(pool.read(vol, obj, (1 << 40) - 2, 8).unwrap(), b"\0\0middle");
    assert_eq!(pool.read(vol, obj, 0, 8).unwrap(), b"\0\0\0start");
    assert_eq!(pool.read(vol, obj, 1 << 50, 16).unwrap(), vec![0; 16]);
    assert_clean(&pool);
    // Shrinking frees the far records and the levels of tree above them.
    let used = pool.volume_info(vol).unwrap().used_bytes;
    pool.truncate(vol, obj, 10).unwrap();
    pool.commit().unwrap();
    assert!(pool.volume_info(vol).unwrap().used_bytes < used);
    assert_eq!(pool.read(vol, obj, 0, 100).unwrap(), b"\0\0\0start\0\0");
    assert_clean(&pool);
    assert!(pool.write(vol, obj, i64::MAX as u64, b"x").is_err());
}

#[test]
fn delete_object_and_volume_return_all_space() {
    let (_disk, pool) = new_pool(64 << 20);
    let empty = pool.status().allocated_bytes;
    let vol = pool.create_volume("scratch", &VolumeOptions::default()).unwrap();
    let mut objs = vec![];
    for i in 0..20u64 {
        let o = pool.create_object(vol, &i.to_le_bytes()).unwrap();
        pool.write(vol, o, i * 1000, &vec![i as u8 + 1; 70_000]).unwrap();
        pool.kv_put(vol, format!("key{i}").as_bytes(), b"value").unwrap();
        objs.push(o);
    }
    pool.commit().unwrap();
    assert_clean(&pool);
    for o in &objs[..10] {
        pool.delete_object(vol, *o).unwrap();
    }
    pool.commit().unwrap();
    assert_clean(&pool);
    assert_eq!(pool.list_objects(vol, None, 100).unwrap(), objs[10..].to_vec());
    assert!(!pool.object_exists(vol, objs[0]).unwrap());
    assert_eq!(pool.read(vol, objs[0], 0, 1).unwrap_err().kind(), ErrorKind::NotFound);
    pool.delete_volume("scratch").unwrap();
    pool.commit().unwrap();
    assert_clean(&pool);
    // The catalog may keep one (empty-tree) node; everything else is back.
    assert!(pool.status().allocated_bytes <= empty + 4096, "{} vs {}", pool.status().allocated_bytes, empty);
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let (_disk, pool) = new_pool(32 << 20);
    assert_eq!(pool.create_volume("", &VolumeOptions::default()).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(pool.create_volume("a/b", &VolumeOptions::default()).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let bad_rs = VolumeOptions { record_size: 3000, quota_bytes: 0, ..Default::default() };
    assert_eq!(pool.create_volume("v", &bad_rs).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let vol = pool.create_volume("v", &VolumeOptions::default()).unwrap();
    assert_eq!(pool.create_volume("v", &VolumeOptions::default()).unwrap_err().kind(), ErrorKind::AlreadyExists);
    assert_eq!(pool.read(vol, ObjectId(99), 0, 1).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(pool.create_object(vol, &[0; 600]).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(pool.kv_put(vol, &[1; 600], b"").unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(pool.delete_volume("nope").unwrap_err().kind(), ErrorKind::NotFound);
    // A device too small for a pool.
    let tiny = Arc::new(SimDisk::new(1 << 20, 4096));
    let e = Pool::create(tiny, test_create_options(2), test_pool_options()).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // A device that is not a pool.
    let blank = Arc::new(SimDisk::new(32 << 20, 4096));
    let e = Pool::open(blank, test_pool_options()).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Corruption);
    assert!(e.to_string().contains("not a Strata pool"), "{e}");
}

#[test]
fn full_pool_reports_no_space_and_recovers() {
    let (_disk, pool) = new_pool(24 << 20);
    let vol = pool.create_volume("fill", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    let chunk = vec![0xABu8; 1 << 20];
    let mut written = 0u64;
    let err = loop {
        match pool.write(vol, obj, written, &chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(written < 64 << 20, "a 24 MiB pool cannot take 64 MiB");
    };
    assert_eq!(err.kind(), ErrorKind::NoSpace, "{err}");
    assert_eq!(err.space_reason(), Some(SpaceReason::Pool), "{err}");
    pool.commit().expect("the pool commits what it accepted");
    assert_clean(&pool);
    // Free space, and writing works again.
    pool.truncate(vol, obj, 0).unwrap();
    pool.commit().unwrap();
    pool.write(vol, obj, 0, &chunk).expect("space is back after truncate");
    pool.commit().unwrap();
    assert_clean(&pool);
}

#[test]
fn volume_quota_is_enforced() {
    let (_disk, pool) = new_pool(64 << 20);
    let vol = pool
        .create_volume("small", &VolumeOptions { record_size: 16384, quota_bytes: 1 << 20, ..Default::default() })
        .unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    let e = pool.write(vol, obj, 0, &vec![1u8; 2 << 20]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace);
    assert_eq!(e.space_reason(), Some(SpaceReason::Quota), "{e}");
    assert!(e.to_string().contains("size limit"), "{e}");
}

/// `read_shared` returns the object's bytes — holes, dirty records, committed records read
/// from the device and from the cache, up to the object's end — as pieces of at most a
/// record, checked against a model of what was written.
#[test]
fn shared_reads_return_the_written_bytes() {
    let (disk, pool) = new_pool(64 << 20);
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let mut model = vec![0u8; 70_000];
    model.extend_from_slice(&data);
    pool.write(vol, obj, 70_000, &data).unwrap();
    let ranges = [(0, 300_000), (65_000, 10_000), (100_001, 77_777), (269_000, 5_000), (280_000, 10), (0, 0)];
    let check = |pool: &Pool, model: &[u8]| {
        for (off, len) in ranges {
            let pieces = pool.read_shared(vol, obj, off, len).unwrap();
            assert!(pieces.iter().all(|p| p.len() <= 1 << 20));
            let got: Vec<u8> = pieces.iter().flat_map(|p| p.as_slice().to_vec()).collect();
            let start = (off as usize).min(model.len());
            assert_eq!(got, &model[start..(start + len).min(model.len())], "range {off}+{len}");
        }
    };
    check(&pool, &model);
    pool.commit().unwrap();
    pool.write(vol, obj, 150_000, b"dirty again").unwrap();
    model[150_000..150_011].copy_from_slice(b"dirty again");
    check(&pool, &model);
    pool.commit().unwrap();
    drop(pool);
    // Reopened: the first pass reads from the device, the second from the cache.
    let pool = reopen(&disk);
    check(&pool, &model);
    check(&pool, &model);
}

/// `Pool::counters` sees every commit that synced a txg, in both histograms, and none that
/// had nothing to write.
#[test]
fn commit_counters_count_synced_commits() {
    let (_disk, pool) = new_pool(64 << 20);
    let before = pool.counters();
    let vol = pool.create_volume("db", &VolumeOptions::default()).unwrap();
    let obj = pool.create_object(vol, b"a").unwrap();
    for i in 0..3u64 {
        pool.write(vol, obj, i * 65536, &[i as u8 + 1; 65536]).unwrap();
        pool.commit().unwrap();
    }
    pool.commit().unwrap(); // nothing dirty: no txg, not counted
    let after = pool.counters();
    let synced = pool.status_commits().count;
    assert_eq!(after.commit.count() - before.commit.count(), 3, "{after:?}");
    assert_eq!(after.commit.count(), synced, "the histogram and CommitStats agree");
    assert_eq!(after.commit_locked.count(), after.commit.count());
    assert!(after.commit.sum_us >= after.commit_locked.sum_us, "the locked part is part of the commit");
}

/// A read planned across many records of a sparse three-level object (4 KiB records:
/// one level-1 indirect block covers 256 of them) returns the model's bytes and marks
/// exactly the holes as holes — the plan walks the tree once per indirect block
/// (`blocktree::Cursor`), and a cursor that kept a block past the records it covers would
/// return another block's records here.
#[test]
fn long_reads_across_indirect_blocks_match_the_model() {
    let (disk, pool) = new_pool(64 << 20);
    let vol = pool.create_volume("lun", &VolumeOptions { record_size: 4096, ..Default::default() }).unwrap();
    let obj = pool.create_object(vol, b"").unwrap();
    // Records on both sides of leaf boundaries (255/256, 511/512), far apart (a third
    // level past 65,536 records), and alone inside a leaf's range.
    let records: Vec<u64> = vec![0, 1, 7, 254, 255, 256, 257, 300, 511, 512, 513, 1000, 65_535, 65_536, 65_537, 66_000];
    let size = 66_100 * 4096u64;
    let mut model = vec![0u8; size as usize];
    for &r in &records {
        let rec: Vec<u8> = (0..4096u32).map(|i| (r as u32).wrapping_mul(31).wrapping_add(i) as u8 | 1).collect();
        pool.write(vol, obj, r * 4096, &rec).unwrap();
        model[(r * 4096) as usize..][..4096].copy_from_slice(&rec);
    }
    pool.truncate(vol, obj, size).unwrap();
    let check = |pool: &Pool| {
        for (from, to) in [(0u64, 1100u64), (250, 520), (65_400, 66_100), (0, 66_100), (256, 257)] {
            let (off, len) = (from * 4096 + 100, ((to - from) * 4096 - 200) as usize);
            let pieces = pool.read_shared(vol, obj, off, len).unwrap();
            let mut at = off;
            for p in &pieces {
                let recno = at / 4096;
                assert_eq!(p.is_hole(), !records.contains(&recno), "record {recno}: hole {}", p.is_hole());
                assert_eq!(p.is_record(), records.contains(&recno), "record {recno}");
                assert_eq!(p.as_slice(), &model[at as usize..][..p.len()], "record {recno}");
                at += p.len() as u64;
            }
            assert_eq!(at, off + len as u64, "read {off}+{len}");
        }
    };
    check(&pool);
    pool.commit().unwrap();
    check(&pool);
    drop(pool);
    let pool = reopen(&disk);
    check(&pool);
}
