//! Storage efficiency: compression round trips under every policy and data of every
//! compressibility, policy changes mid-life, zero records as holes, exact savings (the
//! checker verifies them), reservations, capacity alerts, the compression feature flag,
//! and damaged compressed payloads (typed corruption, never a panic).

use std::sync::Arc;
use strata_engine::alloc::Geometry;
use strata_engine::format::features::INCOMPAT_COMPRESSION;
use strata_engine::format::label::{LabelPhys, LABEL_PHYS_SIZE};
use strata_engine::format::node::IndirectPhys;
use strata_engine::format::{BlockKind, BlockPtr, ChecksumAlgo, Compression, LABEL_SIZE, UNIT_SIZE};
use strata_engine::pipeline::BlockIo;
use strata_engine::{
    BlockDevice, CheckOptions, CompressionPolicy, ErrorKind, Pool, SpaceReason, VolumeId, VolumeOptions,
};
use strata_testkit::workload::compressible;
use strata_testkit::{test_create_options, test_pool_options, SimDisk, SimRng};

const POLICIES: [CompressionPolicy; 6] = [
    CompressionPolicy::Off,
    CompressionPolicy::Lz4,
    CompressionPolicy::Zstd { level: 1 },
    CompressionPolicy::Zstd { level: 3 },
    CompressionPolicy::Zstd { level: 9 },
    CompressionPolicy::Zstd { level: 19 },
];

fn new_pool(size: u64) -> (Arc<SimDisk>, Pool) {
    let disk = Arc::new(SimDisk::new(size, 4096));
    let pool = Pool::create(disk.clone(), test_create_options(11), test_pool_options()).unwrap();
    (disk, pool)
}

fn reopen(disk: &Arc<SimDisk>) -> Pool {
    Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap()
}

fn volume(pool: &Pool, name: &str, rs: u32, compression: CompressionPolicy) -> VolumeId {
    pool.create_volume(name, &VolumeOptions { record_size: rs, compression, ..Default::default() }).unwrap()
}

/// Data of a given kind: 0 random, 1 text-like, 2 half zeros (trailing), 3 sparse bytes.
fn data(rng: &mut SimRng, kind: u64, len: usize) -> Vec<u8> {
    match kind {
        0 => rng.bytes(len),
        1 => compressible(rng, len),
        2 => {
            let mut v = rng.bytes(len);
            v[len / 2..].fill(0);
            v
        }
        _ => {
            let mut v = vec![0u8; len];
            for _ in 0..len / 500 + 1 {
                let at = rng.below(len as u64) as usize;
                v[at] = rng.next_u64() as u8 | 1;
            }
            v
        }
    }
}

fn assert_clean(pool: &Pool) -> strata_engine::CheckReport {
    let r = pool.check(CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{:#?}", r.errors);
    r
}

#[test]
fn round_trips_under_every_policy() {
    let mut rng = SimRng::new(0xC0DE);
    let mut used_by_policy = Vec::new();
    for policy in POLICIES {
        let (disk, pool) = new_pool(96 << 20);
        let mut written = Vec::new();
        for (i, rs) in [4096u32, 16384, 131072].into_iter().enumerate() {
            let vol = volume(&pool, &format!("v{i}"), rs, policy);
            for kind in 0..4 {
                let obj = pool.create_object(vol, b"").unwrap();
                let bytes = data(&mut rng, kind, 9 * rs as usize + 777);
                pool.write(vol, obj, 0, &bytes).unwrap();
                written.push((vol, obj, bytes));
            }
        }
        pool.commit().unwrap();
        for (vol, obj, bytes) in &written {
            // Pool::read resolves under the lock and fetches outside it (ReadPlan).
            let got = pool.read(*vol, *obj, 0, bytes.len()).unwrap();
            let diff = got.iter().zip(bytes).position(|(a, b)| a != b);
            assert!(&got == bytes, "{policy:?}: lengths {} {}, first difference at {diff:?}", got.len(), bytes.len());
        }
        let r = assert_clean(&pool);
        if policy == CompressionPolicy::Off {
            assert_eq!(r.compressed_blocks, 0);
        } else {
            assert!(r.compressed_blocks > 0, "{policy:?} compressed nothing");
        }
        let used: u64 = pool.volumes().iter().map(|v| v.used_bytes).sum();
        let saved: u64 = pool.volumes().iter().map(|v| v.space.saved_bytes.unwrap()).sum();
        assert_eq!(saved, r.saved_bytes, "volume records agree with the checker");
        assert_eq!(pool.status().space.saved_bytes, saved);
        used_by_policy.push((policy, used));
        drop(pool);
        let pool = reopen(&disk);
        for (vol, obj, bytes) in &written {
            assert_eq!(&pool.read(*vol, *obj, 3, bytes.len()).unwrap(), &bytes[3..], "{policy:?} after reopen");
        }
        assert_eq!(pool.volume_info(written[0].0).unwrap().space.compression, policy);
    }
    let off = used_by_policy[0].1;
    for (policy, used) in &used_by_policy[1..] {
        assert!(*used < off * 3 / 4, "{policy:?} used {used}, off used {off}");
    }
}

#[test]
fn policy_changes_apply_to_new_writes_and_old_records_stay_readable() {
    let mut rng = SimRng::new(5);
    let (disk, pool) = new_pool(64 << 20);
    let vol = volume(&pool, "db", 16384, CompressionPolicy::Lz4);
    let obj = pool.create_object(vol, b"").unwrap();
    let mut model = Vec::new();
    let phases = [
        CompressionPolicy::Lz4,
        CompressionPolicy::Zstd { level: 7 },
        CompressionPolicy::Off,
        CompressionPolicy::Zstd { level: 3 },
    ];
    for (i, policy) in phases.into_iter().enumerate() {
        pool.set_compression(vol, policy).unwrap();
        // Each phase writes its own 16 records and rewrites a few of the previous phase's.
        let mut writes = vec![(i * 16, 16)];
        if i > 0 {
            writes.push(((i - 1) * 16 + 4, 3));
        }
        for (first, n) in writes {
            let bytes = compressible(&mut rng, n * 16384);
            pool.write(vol, obj, (first * 16384) as u64, &bytes).unwrap();
            model.resize(model.len().max((first + n) * 16384), 0);
            model[first * 16384..(first + n) * 16384].copy_from_slice(&bytes);
        }
        pool.commit().unwrap();
        let got = pool.read(vol, obj, 0, model.len()).unwrap();
        let diff = got.iter().zip(&model).position(|(a, b)| a != b);
        assert!(got == model, "phase {i}: lengths {} {}, first difference at {diff:?}", got.len(), model.len());
        assert_clean(&pool);
    }
    drop(pool);
    let pool = reopen(&disk);
    assert_eq!(pool.read(vol, obj, 0, model.len()).unwrap(), model);
    assert_eq!(pool.volume_info(vol).unwrap().space.compression, CompressionPolicy::Zstd { level: 3 });
    let r = assert_clean(&pool);
    // Phase 3 (off) wrote 16 raw records; the other phases compressed theirs.
    assert!(r.compressed_blocks >= 40 && r.compressed_blocks < 64, "{}", r.compressed_blocks);
}

#[test]
fn zero_records_become_holes() {
    let (_disk, pool) = new_pool(32 << 20);
    let vol = volume(&pool, "z", 16384, CompressionPolicy::Off);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.commit().unwrap();
    let empty_used = pool.volume_info(vol).unwrap().used_bytes;
    // 1 MiB of zeros written by the application: no data block at all.
    pool.write(vol, obj, 0, &vec![0u8; 1 << 20]).unwrap();
    pool.commit().unwrap();
    let info = pool.volume_info(vol).unwrap();
    assert_eq!(pool.object_size(vol, obj).unwrap(), 1 << 20);
    assert_eq!(pool.object_block_root(vol, obj).unwrap().0, BlockPtr::HOLE, "no record was stored");
    assert!(info.used_bytes <= empty_used + UNIT_SIZE, "{} vs {empty_used}", info.used_bytes);
    assert!(pool.status().space.zero_records_elided >= 64);
    // Data, then zeros over it: the record's block is freed.
    pool.write(vol, obj, 0, &vec![7u8; 16384 * 4]).unwrap();
    pool.commit().unwrap();
    let with_data = pool.volume_info(vol).unwrap().used_bytes;
    assert!(with_data >= empty_used + 4 * 16384);
    pool.write(vol, obj, 16384, &vec![0u8; 16384 * 2]).unwrap();
    pool.commit().unwrap();
    assert_eq!(pool.volume_info(vol).unwrap().used_bytes, with_data - 2 * 16384);
    // A record zeroed only in part stays a block (its zero tail trimmed).
    pool.write(vol, obj, 3 * 16384 + 100, &vec![0u8; 16284]).unwrap();
    pool.commit().unwrap();
    assert_eq!(pool.volume_info(vol).unwrap().used_bytes, with_data - 3 * 16384 + UNIT_SIZE);
    let mut want = vec![0u8; 1 << 20];
    want[..16384].fill(7);
    want[3 * 16384..3 * 16384 + 100].fill(7);
    assert_eq!(pool.read(vol, obj, 0, 1 << 20).unwrap(), want);
    assert_clean(&pool);
}

/// The data block of record `recno` of an object with one indirect level, from the image.
fn data_block(disk: &SimDisk, root: &BlockPtr, recno: usize) -> BlockPtr {
    let img = disk.current_image();
    let mut raw = img[root.addr as usize..root.addr as usize + root.psize as usize].to_vec();
    raw.resize(16384, 0);
    IndirectPhys::decode(&raw, None).unwrap().bps[recno]
}

#[test]
fn damaged_compressed_payload_is_a_checksum_error() {
    for policy in [CompressionPolicy::Lz4, CompressionPolicy::Zstd { level: 3 }] {
        let mut rng = SimRng::new(9);
        let (disk, pool) = new_pool(32 << 20);
        let vol = volume(&pool, "c", 16384, policy);
        let obj = pool.create_object(vol, b"").unwrap();
        let bytes = compressible(&mut rng, 40 * 16384);
        pool.write(vol, obj, 0, &bytes).unwrap();
        pool.commit().unwrap();
        let (root, levels) = pool.object_block_root(vol, obj).unwrap();
        assert_eq!(levels, 1);
        drop(pool);
        let bp = data_block(&disk, &root, 5);
        assert_ne!(bp.compression, Compression::None, "{policy:?}");
        assert!(bp.psize < 16384);
        disk.rot(bp.addr + bp.psize as u64 / 2, 4);
        let pool = reopen(&disk);
        let e = pool.read(vol, obj, 5 * 16384, 100).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
        assert_eq!(pool.read(vol, obj, 6 * 16384, 16384).unwrap(), bytes[6 * 16384..7 * 16384]);
        let r = pool.check(CheckOptions::default()).unwrap();
        assert_eq!(r.errors.len(), 1, "{:#?}", r.errors);
        assert!(r.errors[0].contains("record 5"), "{:#?}", r.errors);
    }
}

#[test]
fn undecodable_payload_with_a_valid_checksum_is_corruption() {
    // A payload that passes its checksum but does not decode (a bug, or a forged block):
    // the pipeline must still return a typed corruption, for every algorithm.
    let disk = Arc::new(SimDisk::new(32 << 20, 4096));
    let geo = Geometry::for_device(32 << 20).unwrap();
    let io = BlockIo::new(disk.clone(), geo.clone(), ChecksumAlgo::Blake3, 16, 0);
    let mut rng = SimRng::new(77);
    for (i, algo) in [Compression::Lz4, Compression::Zstd, Compression::Lz4, Compression::Zstd].into_iter().enumerate()
    {
        let garbage = if i < 2 { rng.bytes(5000) } else { vec![0xff; 4096] };
        let addr = geo.data_offset + (i as u64 * 2) * UNIT_SIZE;
        let mut buf = garbage.clone();
        buf.resize(2 * UNIT_SIZE as usize, 0);
        disk.write_at(&buf, addr).unwrap();
        let bp = BlockPtr {
            addr,
            birth_txg: 1,
            psize: garbage.len() as u32,
            lsize: 16384,
            device: 0,
            kind: BlockKind::Data,
            compression: algo,
            checksum_algo: ChecksumAlgo::Blake3,
            packed: false,
            dedup: false,
            checksum: ChecksumAlgo::Blake3.compute(&garbage),
        };
        let e = io.read_block(&bp).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
        assert!(e.to_string().contains("does not decode") || e.to_string().contains("decodes to"), "{e}");
    }
    assert_eq!(io.stats.corruptions_detected.load(std::sync::atomic::Ordering::Relaxed), 4);
}

#[test]
fn reservations_are_honoured_and_refused_when_they_cannot_fit() {
    let (disk, pool) = new_pool(64 << 20);
    let size = pool.status().size_bytes;
    let e = pool.create_volume("huge", &VolumeOptions { reservation_bytes: size, ..Default::default() }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace, "{e}");
    assert_eq!(e.space_reason(), Some(SpaceReason::Reservation), "{e}");
    assert!(e.to_string().contains("cannot reserve"), "{e}");
    assert!(pool.volume_id("huge").is_err(), "a refused volume is not created");
    let e = pool
        .create_volume("q", &VolumeOptions { quota_bytes: 1 << 20, reservation_bytes: 2 << 20, ..Default::default() })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let thick =
        pool.create_volume("thick", &VolumeOptions { reservation_bytes: 16 << 20, ..Default::default() }).unwrap();
    let thin = volume(&pool, "thin", 16384, CompressionPolicy::Off);
    assert_eq!(pool.status().space.reserved_bytes, 16 << 20);
    // statfs of the thin volume does not count the thick one's reservation as free.
    let thin_free = pool.guard().space(thin).unwrap().pool_free_bytes;
    let thick_free = pool.guard().space(thick).unwrap().pool_free_bytes;
    assert_eq!(thick_free - thin_free, 16 << 20);
    // The thin volume fills the pool, but cannot take the thick one's reservation.
    let o = pool.create_object(thin, b"").unwrap();
    let mut rng = SimRng::new(1);
    let mut off = 0u64;
    loop {
        match pool.write(thin, o, off, &rng.bytes(1 << 20)) {
            Ok(()) => off += 1 << 20,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::NoSpace, "{e}");
                assert_eq!(e.space_reason(), Some(SpaceReason::Pool), "{e}");
                assert!(e.to_string().contains("other volumes' reservations"), "{e}");
                break;
            }
        }
    }
    pool.commit().unwrap();
    let st = pool.status();
    assert!(!st.space.warnings.is_empty(), "a full pool warns: {:?}", st.space);
    assert!(st.space.warnings[0].contains("capacity alert of 10%"), "{:?}", st.space.warnings);
    // The thick volume still writes 12 MiB (its 16 MiB less per-record tree overhead).
    let t = pool.create_object(thick, b"").unwrap();
    pool.write(thick, t, 0, &rng.bytes(12 << 20)).unwrap();
    pool.commit().unwrap();
    assert!(pool.set_reservation(thin, 8 << 20).is_ok(), "thin already uses more than 8 MiB");
    let e = pool.set_reservation(thick, 60 << 20).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoSpace);
    assert_eq!(e.space_reason(), Some(SpaceReason::Reservation), "{e}");
    // Persisted in the catalog; the checker knows the entries.
    drop(pool);
    let pool = reopen(&disk);
    assert_eq!(pool.volume_info(thick).unwrap().space.reservation_bytes, 16 << 20);
    assert_eq!(pool.volume_info(thin).unwrap().space.reservation_bytes, 8 << 20);
    assert_clean(&pool);
    pool.set_reservation(thin, 0).unwrap();
    pool.delete_volume("thick").unwrap();
    pool.commit().unwrap();
    assert_eq!(pool.status().space.reserved_bytes, 0);
    assert_clean(&pool);
}

#[test]
fn capacity_alert_threshold_is_configurable_and_persists() {
    let (disk, pool) = new_pool(32 << 20);
    assert_eq!(pool.status().space.capacity_alert_percent, 10);
    assert!(pool.status().space.warnings.is_empty());
    assert_eq!(pool.set_capacity_alert(0).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(pool.set_capacity_alert(100).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let vol = volume(&pool, "v", 16384, CompressionPolicy::Off);
    let obj = pool.create_object(vol, b"").unwrap();
    pool.write(vol, obj, 0, &SimRng::new(2).bytes(4 << 20)).unwrap();
    pool.commit().unwrap();
    assert!(pool.status().space.warnings.is_empty(), "about 85% is still available");
    pool.set_capacity_alert(90).unwrap();
    pool.commit().unwrap();
    drop(pool);
    let pool = reopen(&disk);
    let st = pool.status();
    assert_eq!(st.space.capacity_alert_percent, 90);
    assert_eq!(st.space.warnings.len(), 1, "{:?}", st.space);
    assert!(st.space.warnings[0].contains("below its capacity alert of 90%"), "{:?}", st.space.warnings);
    assert_clean(&pool);
}

fn label_incompat(disk: &SimDisk, idx: u64) -> u64 {
    let img = disk.current_image();
    let at = (idx * LABEL_SIZE) as usize;
    LabelPhys::decode(&img[at..at + LABEL_PHYS_SIZE], idx * LABEL_SIZE).unwrap().features.incompat
}

#[test]
fn compression_feature_is_set_on_first_use_only() {
    let (disk, pool) = new_pool(32 << 20);
    let vol = volume(&pool, "plain", 16384, CompressionPolicy::Off);
    pool.commit().unwrap();
    // A pool that never compresses stays readable by builds without compression.
    assert_eq!(label_incompat(&disk, 0) & INCOMPAT_COMPRESSION, 0);
    assert_eq!(label_incompat(&disk, 1) & INCOMPAT_COMPRESSION, 0);
    pool.set_compression(vol, CompressionPolicy::Lz4).unwrap();
    assert_ne!(label_incompat(&disk, 0) & INCOMPAT_COMPRESSION, 0);
    assert_ne!(label_incompat(&disk, 1) & INCOMPAT_COMPRESSION, 0);
    let o = pool.create_object(vol, b"").unwrap();
    let text = compressible(&mut SimRng::new(3), 1 << 20);
    pool.write(vol, o, 0, &text).unwrap();
    pool.commit().unwrap();
    drop(pool);
    let pool = reopen(&disk);
    assert_eq!(pool.read(vol, o, 0, 1 << 20).unwrap(), text);
    let r = assert_clean(&pool);
    assert!(r.compressed_blocks > 0);
    let info = pool.volume_info(vol).unwrap();
    let logical = info.space.logical_bytes.unwrap();
    assert!(logical > 2 * info.used_bytes, "logical {logical} used {}", info.used_bytes);
}

#[test]
fn failed_label_update_latches_and_changes_nothing() {
    let (disk, pool) = new_pool(32 << 20);
    let vol = volume(&pool, "plain", 16384, CompressionPolicy::Off);
    pool.commit().unwrap();
    disk.fail_writes(1);
    let e = pool.set_compression(vol, CompressionPolicy::Zstd { level: 3 }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(pool.status().latched.is_some());
    assert_eq!(pool.volume_info(vol).unwrap().space.compression, CompressionPolicy::Off);
    drop(pool);
    let pool = reopen(&disk);
    assert_eq!(pool.volume_info(vol).unwrap().space.compression, CompressionPolicy::Off);
    assert_clean(&pool);
}
