//! Compaction: small compressed records share units (packs). Round trips, exact space
//! figures (the checker recounts every pack and every volume's sectors), packs freed with
//! their last record through overwrites, snapshots, clones, restores and deletes, and
//! crashes at any point of a commit that writes or frees packs.

use std::sync::Arc;
use strata_engine::format::features::INCOMPAT_PACKS;
use strata_engine::format::label::{LabelPhys, LABEL_PHYS_SIZE};
use strata_engine::{BlockDevice, CheckOptions, CompressionPolicy, ObjectId, Pool, VolumeId, VolumeOptions};
use strata_testkit::{
    iters_from_env, seed_from_env, test_create_options, test_pool_options, CrashMode, SimDisk, SimRng,
};

const RS: usize = 16384;

fn new_pool(size: u64) -> (Arc<SimDisk>, Pool) {
    let disk = Arc::new(SimDisk::new(size, 4096));
    let pool = Pool::create(disk.clone(), test_create_options(5), test_pool_options()).unwrap();
    (disk, pool)
}

fn reopen(disk: &Arc<SimDisk>) -> Pool {
    Pool::open(disk.clone() as Arc<dyn BlockDevice>, test_pool_options()).unwrap()
}

fn zstd_volume(pool: &Pool, name: &str) -> VolumeId {
    let opts = VolumeOptions {
        record_size: RS as u32,
        compression: CompressionPolicy::Zstd { level: 3 },
        ..Default::default()
    };
    pool.create_volume(name, &opts).unwrap()
}

/// A record like a database page: mostly blank padding, a few hundred varying bytes.
/// zstd stores it in roughly 300 bytes to 3 KiB, depending on `varying`.
fn page(rng: &mut SimRng, varying: usize) -> Vec<u8> {
    let mut v = vec![b' '; RS];
    for _ in 0..varying {
        let at = rng.below(RS as u64) as usize;
        v[at] = b'0' + rng.below(10) as u8;
    }
    v
}

fn assert_clean(pool: &Pool, when: &str) -> strata_engine::CheckReport {
    let r = pool.check(CheckOptions::default()).unwrap();
    assert!(r.is_clean(), "{when}: {:#?}", r.errors);
    r
}

/// Write `records` pages into object `obj` and return them.
fn fill(pool: &Pool, rng: &mut SimRng, vol: VolumeId, obj: ObjectId, records: usize) -> Vec<u8> {
    let mut all = Vec::with_capacity(records * RS);
    for _ in 0..records {
        let varying = *rng.pick(&[50usize, 200, 600, 1500]);
        all.extend(page(rng, varying));
    }
    pool.write(vol, obj, 0, &all).unwrap();
    all
}

#[test]
fn small_compressed_records_share_units() {
    let mut rng = SimRng::new(0x9AC5);
    let (disk, pool) = new_pool(64 << 20);
    let vol = zstd_volume(&pool, "db");
    let obj = pool.create_object(vol, b"").unwrap();
    let before = pool.status().allocated_bytes;
    let data = fill(&pool, &mut rng, vol, obj, 600);
    pool.commit().unwrap();
    let st = pool.status();
    assert!(st.space.packs > 0 && st.space.packed_records_written > 0, "{:?}", st.space);
    // Unpacked, each record would take at least one 4 KiB unit: 2.4 MiB.
    let grown = st.allocated_bytes - before;
    assert!(grown < 600 * 4096 / 2, "600 small records occupy {grown} bytes");
    let info = pool.volume_info(vol).unwrap();
    let r = assert_clean(&pool, "after the first commit");
    assert_eq!(info.space.saved_bytes, Some(r.saved_bytes));
    assert_eq!(info.used_bytes + info.space.saved_bytes.unwrap(), info.space.logical_bytes.unwrap());
    assert!(info.used_bytes < grown, "the volume is charged its sectors, the pack slack is the pool's");
    assert_eq!(pool.read(vol, obj, 0, data.len()).unwrap(), data);
    // Reads of single records straddling unit boundaries inside packs.
    for i in (0..600).step_by(7) {
        assert_eq!(pool.read(vol, obj, (i * RS + 100) as u64, 300).unwrap(), &data[i * RS + 100..i * RS + 400]);
    }
    drop(pool);
    let pool = reopen(&disk);
    assert_eq!(pool.read(vol, obj, 0, data.len()).unwrap(), data);
    assert_eq!(pool.status().space.packs, st.space.packs, "the pack table is persisted");
    assert_clean(&pool, "after reopening");
    assert_ne!(label_incompat(&disk) & INCOMPAT_PACKS, 0, "the labels carry the packs feature");
}

#[test]
fn packs_are_freed_with_their_last_record() {
    let mut rng = SimRng::new(0x9AC6);
    let (_disk, pool) = new_pool(64 << 20);
    let vol = zstd_volume(&pool, "db");
    let obj = pool.create_object(vol, b"").unwrap();
    pool.commit().unwrap();
    let empty = pool.status().allocated_bytes;
    let mut data = fill(&pool, &mut rng, vol, obj, 300);
    pool.commit().unwrap();
    let packs = pool.status().space.packs;
    // Overwrite every other record with data that does not compress: packs lose records
    // but stay, and the checker's counts follow.
    for i in (0..300).step_by(2) {
        let raw = rng.bytes(RS);
        pool.write(vol, obj, (i * RS) as u64, &raw).unwrap();
        data[i * RS..(i + 1) * RS].copy_from_slice(&raw);
    }
    pool.commit().unwrap();
    assert_clean(&pool, "half overwritten");
    assert!(pool.status().space.packs <= packs);
    assert_eq!(pool.read(vol, obj, 0, data.len()).unwrap(), data);
    // Truncating the object releases everything: every pack goes, and its units return
    // once the deferral has passed.
    pool.truncate(vol, obj, 0).unwrap();
    for _ in 0..3 {
        pool.commit().unwrap();
    }
    assert_eq!(pool.status().space.packs, 0);
    assert_eq!(pool.status().allocated_bytes, empty);
    assert_clean(&pool, "after truncation");
}

#[test]
fn packs_outlive_overwrites_while_snapshots_and_clones_hold_their_records() {
    let mut rng = SimRng::new(0x9AC7);
    let (disk, pool) = new_pool(96 << 20);
    let vol = zstd_volume(&pool, "db");
    let obj = pool.create_object(vol, b"").unwrap();
    pool.commit().unwrap();
    let empty = pool.status().allocated_bytes;
    let v1 = fill(&pool, &mut rng, vol, obj, 200);
    pool.create_snapshots(&["db"], "s1").unwrap();
    let v2 = fill(&pool, &mut rng, vol, obj, 200);
    pool.create_snapshots(&["db"], "s2").unwrap();
    let clone = pool.clone_volume("db", "s1", "dev").unwrap();
    let v3 = fill(&pool, &mut rng, vol, obj, 120);
    pool.commit().unwrap();
    assert_clean(&pool, "three generations");
    let s1 = pool.snapshot("db", "s1").unwrap();
    assert!(s1.referenced_bytes > 0 && s1.referenced_bytes < 200 * 4096, "{s1:?}");
    let mut want = v3.clone();
    want.extend_from_slice(&v2[want.len()..]);
    assert_eq!(pool.read(vol, obj, 0, want.len()).unwrap(), want);
    assert_eq!(pool.read(clone, obj, 0, v1.len()).unwrap(), v1);
    pool.restore_volume("db", "s2").unwrap();
    assert_eq!(pool.read(vol, obj, 0, v2.len()).unwrap(), v2);
    assert_clean(&pool, "after the restore");
    pool.delete_volume("dev").unwrap();
    pool.delete_snapshot("db", "s1").unwrap();
    pool.commit().unwrap();
    assert_clean(&pool, "clone and first snapshot deleted");
    drop(pool);
    let pool = reopen(&disk);
    assert_eq!(pool.read(vol, obj, 0, v2.len()).unwrap(), v2);
    pool.delete_snapshot("db", "s2").unwrap();
    pool.delete_volume("db").unwrap();
    for _ in 0..3 {
        pool.commit().unwrap();
    }
    assert_eq!(pool.status().space.packs, 0);
    assert!(pool.status().allocated_bytes <= empty, "everything returned");
    assert_clean(&pool, "everything deleted");
}

/// Power fails at a random device operation while packed records are written, overwritten
/// and snapshotted; the image reopens at a committed state with exact pack counts.
#[test]
fn crash_while_packing_reopens_at_a_committed_state() {
    let base = seed_from_env(0x9AC8_0000);
    for i in 0..iters_from_env(40) {
        let seed = base + i;
        let mut rng = SimRng::new(seed);
        let disk = Arc::new(SimDisk::new(48 << 20, 512));
        let pool = Pool::create(disk.clone(), test_create_options(seed), test_pool_options()).unwrap();
        let vol = zstd_volume(&pool, "db");
        let obj = pool.create_object(vol, b"").unwrap();
        let mut image = vec![0u8; 0];
        // The contents after every operation, and the newest one a commit acknowledged:
        // the crash image must hold one of them, no older than that.
        let mut history: Vec<Vec<u8>> = vec![image.clone()];
        let mut acked = 0;
        pool.commit().unwrap();
        let crash_at = rng.below(12);
        for round in 0..12 {
            if round == crash_at {
                disk.set_crash_after(rng.below(40));
            }
            let records = rng.range(1, 40) as usize;
            let at = rng.below(60) as usize;
            let mut bytes = Vec::new();
            for _ in 0..records {
                let varying = *rng.pick(&[30usize, 300, 1200]);
                bytes.extend(page(&mut rng, varying));
            }
            if pool.write(vol, obj, (at * RS) as u64, &bytes).is_err() {
                break;
            }
            if image.len() < (at + records) * RS {
                image.resize((at + records) * RS, 0);
            }
            image[at * RS..(at + records) * RS].copy_from_slice(&bytes);
            history.push(image.clone());
            if rng.chance(20) && pool.create_snapshots(&["db"], &format!("s{round}")).is_err() {
                break;
            }
            if rng.chance(15) {
                if let Some(s) = pool.snapshots(Some("db")).ok().and_then(|l| l.first().map(|s| s.name.clone())) {
                    if pool.delete_snapshot("db", &s).is_err() {
                        break;
                    }
                }
            }
            if pool.commit().is_err() {
                break;
            }
            acked = history.len() - 1;
            if disk.has_crashed() {
                break;
            }
        }
        let mode = *rng.pick(&[CrashMode::Random, CrashMode::DropUnflushed, CrashMode::KeepAll]);
        let crashed = disk.crash_image(mode, &mut rng);
        drop(pool);
        let disk2 = Arc::new(SimDisk::from_image(crashed, 512));
        let pool = Pool::open(disk2.clone() as Arc<dyn BlockDevice>, test_pool_options())
            .unwrap_or_else(|e| panic!("seed {seed}: reopen after crash: {e}"));
        let txg = pool.committed_root().txg;
        let r = pool.check(CheckOptions::default()).unwrap();
        assert!(r.is_clean(), "seed {seed}: txg {txg}: {:#?}", r.errors);
        let size = pool.object_size(vol, obj).unwrap() as usize;
        let got = pool.read(vol, obj, 0, size).unwrap();
        assert!(
            history[acked..].contains(&got),
            "seed {seed}: contents at txg {txg} ({size} bytes) are no state since the last acknowledged commit"
        );
    }
}

fn label_incompat(disk: &SimDisk) -> u64 {
    let img = disk.current_image();
    LabelPhys::decode(&img[..LABEL_PHYS_SIZE], 0).unwrap().features.incompat
}
