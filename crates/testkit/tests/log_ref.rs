//! Large synced writes logged by reference (intent_log_ref.rs, ZFS's WR_INDIRECT): the
//! records are written in place before the log block, the log holds block pointers, the
//! commit reuses the blocks (data written once), and replay reads and verifies them — also
//! when the commit after a replay is itself lost.

use std::sync::Arc;
use strata_engine::{BlockDevice, CheckOptions, CompressionPolicy, ObjectId, Pool, VolumeId, VolumeOptions};
use strata_testkit::workload::compressible;
use strata_testkit::{test_create_options, test_pool_options, CrashMode, SimDisk, SimRng};

const SECTOR: usize = 512;
const RS: u32 = 16384;

fn setup(compression: CompressionPolicy) -> (Arc<SimDisk>, Pool, VolumeId, ObjectId) {
    let disk = Arc::new(SimDisk::new(64 << 20, SECTOR));
    let pool = Pool::create(disk.clone(), test_create_options(11), test_pool_options()).unwrap();
    let vol = pool.create_volume("v", &VolumeOptions { record_size: RS, compression, ..Default::default() }).unwrap();
    let obj = pool.create_object(vol, b"f").unwrap();
    pool.commit().unwrap();
    (disk, pool, vol, obj)
}

/// Power goes now; the image reopens (replaying) and passes the checker.
fn crash_and_reopen(disk: &SimDisk, pool: Pool, mode: CrashMode) -> Pool {
    disk.set_crash_after(0);
    drop(pool);
    let image = disk.crash_image(mode, &mut SimRng::new(5));
    let pool = Pool::open(Arc::new(SimDisk::from_image(image, SECTOR)) as Arc<dyn BlockDevice>, test_pool_options())
        .expect("reopens after the crash");
    let report = pool.check(CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.errors);
    pool
}

#[test]
fn a_large_synced_write_is_logged_by_reference_and_replayed() {
    for compression in [CompressionPolicy::Off, CompressionPolicy::Lz4] {
        let (disk, pool, vol, obj) = setup(compression);
        let mut rng = SimRng::new(1);
        let mut data = compressible(&mut rng, 8 * RS as usize);
        // Records ending in zeros are stored trimmed: replay must give the zeros back.
        data[RS as usize / 2..RS as usize].fill(0);
        pool.write(vol, obj, 2 * RS as u64, &data).unwrap();
        let before = pool.status();
        pool.sync_object(vol, obj).unwrap();
        let after = pool.status();
        assert_eq!(after.log_bytes_by_reference - before.log_bytes_by_reference, data.len() as u64);
        assert!(after.log_bytes_written - before.log_bytes_written <= 8192, "the log block carried the data");
        let pool = crash_and_reopen(&disk, pool, CrashMode::DropUnflushed);
        assert!(pool.status().open_notes.iter().any(|n| n.contains("replayed")));
        assert_eq!(pool.read(vol, obj, 2 * RS as u64, data.len()).unwrap(), data);
        assert_eq!(pool.object_size(vol, obj).unwrap(), 10 * RS as u64);
    }
}

/// The commit points the records at the blocks the sync wrote: the data is written once.
#[test]
fn the_commit_reuses_the_referenced_blocks() {
    let (_disk, pool, vol, obj) = setup(CompressionPolicy::Off);
    let data = vec![0x3cu8; 32 * RS as usize];
    pool.write(vol, obj, 0, &data).unwrap();
    let w0 = pool.status().blocks_written;
    pool.sync_object(vol, obj).unwrap();
    let w1 = pool.status().blocks_written;
    assert_eq!(w1 - w0, 32, "one block per record, written by the sync");
    pool.commit().unwrap();
    let w2 = pool.status().blocks_written;
    assert!(w2 - w1 < 16, "the commit wrote {} blocks: the records were written again", w2 - w1);
    assert_eq!(pool.read(vol, obj, 0, data.len()).unwrap(), data);
    let report = pool.check(CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.errors);
}

/// On a compressing volume the sync writes the records raw (no compression on the sync
/// path) and the commit writes them again compressed: the stored records are compressed,
/// the log's blocks freed, and a crash before the commit still replays the synced bytes.
#[test]
fn a_compressing_volume_syncs_raw_and_commits_compressed() {
    let (disk, pool, vol, obj) = setup(CompressionPolicy::Lz4);
    let data: Vec<u8> = (0..32 * RS as usize).map(|i| b"compressible text, "[i % 19]).collect();
    pool.write(vol, obj, 0, &data).unwrap();
    pool.sync_object(vol, obj).unwrap();
    assert!(pool.status().log_bytes_by_reference >= data.len() as u64, "went by reference");
    let before = pool.status().space.compressed_blocks_written;
    pool.commit().unwrap();
    pool.commit().unwrap();
    let st = pool.status();
    assert!(st.space.compressed_blocks_written - before >= 32, "the commit compressed the records");
    assert!(pool.volume_info(vol).unwrap().used_bytes < data.len() as u64 / 4, "stored compressed");
    assert_eq!(pool.read(vol, obj, 0, data.len()).unwrap(), data);
    let report = pool.check(CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.errors);
    drop((disk, pool));

    let (disk2, pool2, vol2, obj2) = setup(CompressionPolicy::Zstd { level: 3 });
    pool2.write(vol2, obj2, 0, &data).unwrap();
    pool2.sync_object(vol2, obj2).unwrap();
    let pool2 = crash_and_reopen(&disk2, pool2, CrashMode::DropUnflushed);
    assert_eq!(pool2.read(vol2, obj2, 0, data.len()).unwrap(), data, "replayed from the raw blocks");
    let report = pool2.check(CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.errors);
}

/// Overwritten after the sync: the referenced blocks are the log's only, freed (no leak);
/// a crash before the commit shows the synced bytes, after it the new ones.
#[test]
fn a_record_rewritten_after_its_sync() {
    let (disk, pool, vol, obj) = setup(CompressionPolicy::Off);
    let synced = vec![1u8; 4 * RS as usize];
    pool.write(vol, obj, 0, &synced).unwrap();
    pool.sync_object(vol, obj).unwrap();
    pool.write(vol, obj, RS as u64, &vec![2u8; RS as usize]).unwrap();
    pool.commit().unwrap();
    pool.commit().unwrap();
    pool.commit().unwrap();
    let report = pool.check(CheckOptions::default()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.errors);
    let mut expect = synced.clone();
    expect[RS as usize..2 * RS as usize].fill(2);
    assert_eq!(pool.read(vol, obj, 0, expect.len()).unwrap(), expect);

    let (disk2, pool2, vol2, obj2) = setup(CompressionPolicy::Off);
    pool2.write(vol2, obj2, 0, &synced).unwrap();
    pool2.sync_object(vol2, obj2).unwrap();
    pool2.write(vol2, obj2, RS as u64, &vec![2u8; RS as usize]).unwrap();
    let pool2 = crash_and_reopen(&disk2, pool2, CrashMode::KeepAll);
    assert_eq!(pool2.read(vol2, obj2, 0, synced.len()).unwrap(), synced);
    drop((disk, pool));
}

/// The referenced blocks did not land (crash before the log block's flush, the log block
/// itself landed): replay stops before that block — it was never acknowledged — and the
/// pool opens at what was acknowledged before.
#[test]
fn a_log_block_whose_referenced_data_is_missing_ends_the_log() {
    let (disk, pool, vol, obj) = setup(CompressionPolicy::Off);
    pool.write(vol, obj, 0, b"small, acknowledged").unwrap();
    pool.sync_object(vol, obj).unwrap();
    let data = vec![9u8; 4 * RS as usize];
    pool.write(vol, obj, 4 * RS as u64, &data).unwrap();
    pool.sync_object(vol, obj).unwrap();
    // Find the referenced blocks: they are the only data blocks of the open txg; zero them
    // as if their writes were lost, leaving the log block that points at them.
    disk.set_crash_after(0);
    drop(pool);
    let mut image = disk.current_image();
    let needle = vec![9u8; RS as usize];
    let mut wiped = 0;
    let mut at = 0;
    while at + needle.len() <= image.len() {
        if image[at..at + needle.len()] == needle[..] {
            image[at..at + needle.len()].fill(0);
            wiped += 1;
            at += needle.len();
        } else {
            at += 4096;
        }
    }
    assert_eq!(wiped, 4, "the four records were written in place");
    let pool = Pool::open(Arc::new(SimDisk::from_image(image, SECTOR)) as Arc<dyn BlockDevice>, test_pool_options())
        .expect("opens");
    assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
    assert_eq!(pool.read(vol, obj, 0, 19).unwrap(), b"small, acknowledged");
    assert_eq!(pool.object_size(vol, obj).unwrap(), 19, "the unacknowledged large write is not half there");
}

/// The commit that follows a replay must not overwrite the blocks the log references: if
/// it is lost too, the next open replays the same log and must still find them.
#[test]
fn a_crash_during_the_commit_after_replay_replays_again() {
    for crash_after in 0..40 {
        let (disk, pool, vol, obj) = setup(CompressionPolicy::Off);
        let mut data = vec![0x77u8; 6 * RS as usize];
        pool.write(vol, obj, 0, &data).unwrap();
        pool.sync_object(vol, obj).unwrap();
        // A later small write to the first record: the replay's commit writes that record
        // with other bytes than the referenced block holds — on top of it, were the
        // referenced units not held.
        pool.write(vol, obj, 0, b"changed").unwrap();
        data[..7].copy_from_slice(b"changed");
        pool.sync_object(vol, obj).unwrap();
        disk.set_crash_after(0);
        drop(pool);
        let image = disk.crash_image(CrashMode::DropUnflushed, &mut SimRng::new(crash_after));
        let second = Arc::new(SimDisk::from_image(image, SECTOR));
        second.set_crash_after(crash_after);
        if let Ok(pool) = Pool::open(second.clone() as Arc<dyn BlockDevice>, test_pool_options()) {
            second.set_crash_after(0);
            drop(pool);
        }
        let image = second.crash_image(CrashMode::Random, &mut SimRng::new(crash_after + 100));
        let pool =
            Pool::open(Arc::new(SimDisk::from_image(image, SECTOR)) as Arc<dyn BlockDevice>, test_pool_options())
                .unwrap_or_else(|e| panic!("crash after {crash_after} I/Os of the replay: does not open: {e}"));
        assert!(pool.check(CheckOptions::default()).unwrap().is_clean());
        assert_eq!(pool.read(vol, obj, 0, data.len()).unwrap(), data, "crash after {crash_after} I/Os of the replay");
    }
}
