//! Both LUN implementations against the same expectations: reads see writes, trims and
//! zeroing make holes the allocation map reports, ranges past the end and writes to a
//! read-only LUN are refused with their kind, a grown LUN serves its new size, and a
//! flushed write survives a crash of the pool (the acknowledged-state rule).

use std::sync::Arc;
use strata_engine::{Clock, ManualClock, Pool, VolumeOptions};
use strata_fs::{Caller, VolumeFs};
use strata_lun::{Extent, FileLun, Lun, LunErrorKind, VolumeLun};
use strata_testkit::{test_create_options, test_pool_options, CrashMode, SimDisk, SimRng};

const ROOT: Caller = Caller { uid: 0, gid: 0 };
const MIB: u64 = 1 << 20;

fn volume_lun(disk: Arc<SimDisk>, size: u64) -> (Arc<Pool>, VolumeLun) {
    let pool = Arc::new(Pool::create(disk, test_create_options(7), test_pool_options()).unwrap());
    let opts = VolumeOptions { record_size: 4096, ..Default::default() };
    let vol = pool.create_volume("lun0", &opts).unwrap();
    let fs = VolumeFs::mount(pool.clone(), vol, Arc::new(ManualClock::new(1)), ROOT).unwrap();
    VolumeLun::create(&fs, size, 512).unwrap();
    assert_eq!(VolumeLun::probe(&fs), Some((size, 512)));
    let lun = VolumeLun::open(Arc::new(fs), [7; 16], false).unwrap();
    (pool, lun)
}

fn file_lun(size: u64) -> (tempfile_dir::Dir, FileLun) {
    let dir = tempfile_dir::Dir::new();
    let path = dir.0.join("lun.img");
    std::fs::File::create(&path).unwrap().set_len(size).unwrap();
    (dir, FileLun::open(&path, false).unwrap())
}

mod tempfile_dir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            let p = std::env::temp_dir().join(format!(
                "strata-lun-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn holes(lun: &dyn Lun, offset: u64, len: u64) -> Vec<(u64, u64, bool)> {
    let mut merged: Vec<(u64, u64, bool)> = Vec::new();
    let mut at = offset;
    while at < offset + len {
        let ext = lun.extents(at, offset + len - at).unwrap();
        assert!(!ext.is_empty(), "an allocation map answers at least one run");
        for Extent { len: l, hole } in ext {
            let l = l.min(offset + len - at);
            match merged.last_mut() {
                Some((_, ml, h)) if *h == hole => *ml += l,
                _ => merged.push((at, l, hole)),
            }
            at += l;
            if at >= offset + len {
                break;
            }
        }
    }
    merged
}

fn exercise(lun: &dyn Lun) {
    let size = lun.size();
    assert_eq!(size, 8 * MIB);
    let mut buf = vec![1u8; 8192];
    lun.read(MIB, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "a new LUN reads as zeros");
    assert!(holes(lun, 0, size).iter().all(|r| r.2), "a new LUN is all hole: {:?}", holes(lun, 0, size));

    let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    lun.write(MIB, &data, false).unwrap();
    lun.write(3 * MIB + 100, &data[..1000], true).unwrap(); // sub-block, FUA
    let mut back = vec![0u8; data.len()];
    lun.read(MIB, &mut back).unwrap();
    assert_eq!(back, data);
    let mut small = vec![0u8; 1000];
    lun.read(3 * MIB + 100, &mut small).unwrap();
    assert_eq!(small, data[..1000]);
    let map = holes(lun, 0, size);
    assert!(map.contains(&(0, MIB, true)), "{map:?}");
    assert!(map.iter().any(|&(at, len, hole)| !hole && at <= MIB && at + len >= MIB + 65536), "{map:?}");

    // Trim the middle 32 KiB: zeros, and a hole in the map.
    lun.trim(MIB + 16384, 32768, false).unwrap();
    lun.read(MIB, &mut back).unwrap();
    assert_eq!(back[..16384], data[..16384]);
    assert!(back[16384..49152].iter().all(|&b| b == 0));
    assert_eq!(back[49152..], data[49152..]);
    let map = holes(lun, MIB, 65536);
    assert_eq!(map, vec![(MIB, 16384, false), (MIB + 16384, 32768, true), (MIB + 49152, 16384, false)]);

    // Zeroing without a hole keeps the space; with may_trim it is a hole.
    lun.write_zeroes(MIB, 16384, false, false).unwrap();
    assert!(!holes(lun, MIB, 16384)[0].2, "NO_HOLE zeroing allocated: {:?}", holes(lun, MIB, 16384));
    lun.write_zeroes(MIB + 49152, 16384, true, true).unwrap();
    assert!(holes(lun, MIB + 49152, 16384)[0].2);
    lun.read(MIB, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    lun.flush().unwrap();

    // Out of range, with the kind the protocols map.
    let e = lun.write(size - 512, &[0; 1024], false).unwrap_err();
    assert_eq!(e.kind, LunErrorKind::OutOfRange, "{e}");
    let e = lun.read(size, &mut [0; 512]).unwrap_err();
    assert_eq!(e.kind, LunErrorKind::OutOfRange, "{e}");
    let e = lun.trim(u64::MAX - 10, 100, false).unwrap_err();
    assert_eq!(e.kind, LunErrorKind::OutOfRange, "{e}");
    let e = lun.extents(size, 1).unwrap_err();
    assert_eq!(e.kind, LunErrorKind::OutOfRange, "{e}");
}

#[test]
fn a_file_lun_behaves() {
    let (_dir, lun) = file_lun(8 * MIB);
    exercise(&lun);
}

#[test]
fn a_volume_lun_behaves() {
    let (_pool, lun) = volume_lun(Arc::new(SimDisk::new(64 << 20, 512)), 8 * MIB);
    exercise(&lun);
}

#[test]
fn a_volume_lun_grows_and_its_snapshot_is_read_only() {
    let (pool, lun) = volume_lun(Arc::new(SimDisk::new(64 << 20, 512)), 8 * MIB);
    lun.write(0, &[9u8; 4096], false).unwrap();
    pool.create_snapshots(&["lun0"], "s1").unwrap();
    lun.write(0, &[5u8; 4096], true).unwrap();
    let e = lun.grow(4 * MIB).unwrap_err();
    assert_eq!(e.kind, LunErrorKind::Invalid, "shrink refused: {e}");
    lun.grow(16 * MIB).unwrap();
    assert_eq!(lun.size(), 16 * MIB);
    lun.write(15 * MIB, &[3u8; 4096], false).unwrap();

    let view = pool.open_snapshot_view("lun0", "s1").unwrap();
    let snapfs = VolumeFs::mount_read_only(pool.clone(), view, Arc::new(ManualClock::new(1))).unwrap();
    let snap = VolumeLun::open(Arc::new(snapfs), [8; 16], true).unwrap();
    assert_eq!(snap.size(), 8 * MIB);
    let mut b = vec![0u8; 4096];
    snap.read(0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 9), "the snapshot holds the LUN as it was");
    assert_eq!(snap.write(0, &b, false).unwrap_err().kind, LunErrorKind::ReadOnly);
}

#[test]
fn a_volume_with_files_is_not_made_a_lun_and_a_plain_volume_does_not_open_as_one() {
    let disk = Arc::new(SimDisk::new(64 << 20, 512));
    let pool = Arc::new(Pool::create(disk, test_create_options(8), test_pool_options()).unwrap());
    let vol = pool.create_volume("files", &VolumeOptions::default()).unwrap();
    let fs = VolumeFs::mount(pool.clone(), vol, Arc::new(ManualClock::new(1)), ROOT).unwrap();
    assert_eq!(VolumeLun::probe(&fs), None);
    fs.mknod(ROOT, strata_fs::ROOT_INO, b"data", libc::S_IFREG | 0o644, 0).unwrap();
    let e = VolumeLun::create(&fs, 8 * MIB, 512).unwrap_err();
    assert!(e.message.contains("already holds files"), "{e}");
    let e = VolumeLun::open(Arc::new(fs), [0; 16], false).err().unwrap();
    assert!(e.message.contains("not a LUN"), "{e}");
}

/// A write acknowledged with FUA (or followed by a flush) is there after a power failure;
/// the pool reopens from the crash image and the LUN reads it back.
#[test]
fn a_flushed_write_survives_a_crash() {
    let disk = Arc::new(SimDisk::new(64 << 20, 512));
    let (pool, lun) = volume_lun(disk.clone(), 8 * MIB);
    lun.write(2 * MIB, &[0xabu8; 8192], true).unwrap();
    lun.write(4 * MIB, &[0xcdu8; 4096], false).unwrap();
    lun.flush().unwrap();
    let image = disk.crash_image(CrashMode::DropUnflushed, &mut SimRng::new(1));
    drop(lun);
    drop(pool);
    let disk = Arc::new(SimDisk::from_image(image, 512));
    let pool = Arc::new(Pool::open(disk, test_pool_options()).unwrap());
    let vol = pool.volume_id("lun0").unwrap();
    let fs = VolumeFs::mount(pool.clone(), vol, Arc::new(ManualClock::new(1)), ROOT).unwrap();
    let lun = VolumeLun::open(Arc::new(fs), [7; 16], false).unwrap();
    let mut b = vec![0u8; 8192];
    lun.read(2 * MIB, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0xab));
    lun.read(4 * MIB, &mut b[..4096]).unwrap();
    assert!(b[..4096].iter().all(|&x| x == 0xcd));
}

/// A LUN file's inode is updated by at most one write a second (the others write the data
/// only): its mtime follows the writes a second late at most, and every write's data is
/// there either way.
#[test]
fn a_volume_luns_file_times_follow_its_writes_once_a_second() {
    let pool = Arc::new(
        Pool::create(Arc::new(SimDisk::new(64 << 20, 512)), test_create_options(9), test_pool_options()).unwrap(),
    );
    let vol = pool.create_volume("lun0", &VolumeOptions { record_size: 4096, ..Default::default() }).unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let fs = VolumeFs::mount(pool.clone(), vol, clock.clone(), ROOT).unwrap();
    VolumeLun::create(&fs, 8 * MIB, 512).unwrap();
    let fs = Arc::new(fs);
    let lun = VolumeLun::open(fs.clone(), [7; 16], false).unwrap();
    let ino = fs.lookup(strata_fs::ROOT_INO, b"lun").unwrap().ino;
    let mtime = || fs.getattr(ino).unwrap().mtime_ns;

    clock.advance(1_000_000);
    lun.write(0, &[1u8; 4096], false).unwrap();
    let first = mtime();
    assert_eq!(first, clock.now_ns() as i64, "the first write updates the inode");
    clock.advance(1_000_000);
    lun.write(4096, &[2u8; 4096], false).unwrap();
    lun.write_zeroes(8192, 4096, false, false).unwrap();
    assert_eq!(mtime(), first, "writes within the second write the data only");
    std::thread::sleep(std::time::Duration::from_millis(1_050));
    clock.advance(1_000_000);
    lun.write(12288, &[3u8; 4096], true).unwrap();
    assert_eq!(mtime(), clock.now_ns() as i64, "a second later a write updates it again");

    let mut b = vec![0u8; 16384];
    lun.read(0, &mut b).unwrap();
    for (i, want) in [1u8, 2, 0, 3].into_iter().enumerate() {
        assert!(b[i * 4096..(i + 1) * 4096].iter().all(|&x| x == want), "block {i}");
    }
}
