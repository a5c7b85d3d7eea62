//! Directory entries and keys read from disk that do not decode: the file system answers
//! EIO with the damage in the detail, and fsck reports it as a problem, never a panic
//! (docs/failure-policy.md). The damage is put in place through the engine's key-value API,
//! as a damaged but checksum-valid volume tree would hold it.

use std::sync::Arc;
use strata_engine::{ManualClock, Pool, VolumeId, VolumeOptions};
use strata_fs::{Caller, FsError, VolumeFs, ROOT_INO};
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

const ROOT: Caller = Caller { uid: 0, gid: 0 };

fn mounted() -> (Arc<Pool>, VolumeId, VolumeFs) {
    let disk = Arc::new(SimDisk::new(32 << 20, 512));
    let pool = Arc::new(Pool::create(disk, test_create_options(6), test_pool_options()).unwrap());
    let vol = pool.create_volume("fs", &VolumeOptions::default()).unwrap();
    let fs = VolumeFs::mount(pool.clone(), vol, Arc::new(ManualClock::new(1)), ROOT).unwrap();
    (pool, vol, fs)
}

fn dir_key(parent: u64, name: &[u8]) -> Vec<u8> {
    [&b"D"[..], &parent.to_be_bytes(), name].concat()
}

#[track_caller]
fn assert_eio<T: std::fmt::Debug>(r: Result<T, FsError>, mentions: &str) {
    let e = r.unwrap_err();
    assert_eq!(e.errno, libc::EIO, "{e}");
    assert!(e.detail.as_deref().is_some_and(|d| d.contains(mentions)), "{e} does not mention {mentions:?}");
}

#[test]
fn fsck_reports_entries_and_keys_that_do_not_decode() {
    let (pool, vol, fs) = mounted();
    fs.mkdir(ROOT, ROOT_INO, b"d", 0o755).unwrap();
    assert!(fs.fsck().unwrap().is_empty());
    // An entry whose value is cut short, a directory key too short to name its parent, an
    // orphan key too short to name its inode.
    pool.kv_put(vol, &dir_key(ROOT_INO, b"cut"), &[0, 0, 0, 0, 2]).unwrap();
    pool.kv_put(vol, b"D\x00\x01", &[0, 0, 0, 0, 0, 0, 0, 2, 4]).unwrap();
    pool.kv_put(vol, b"O\x07", b"").unwrap();
    let problems = fs.fsck().unwrap();
    for expect in ["5 bytes are not a directory entry", "holds no parent inode", "orphan key [4f, 07] holds no inode"] {
        assert!(problems.iter().any(|p| p.contains(expect)), "{expect:?} not in {problems:#?}");
    }
    assert_eio(fs.lookup(ROOT_INO, b"cut"), "corrupt directory entry");
    assert_eio(fs.readdir(ROOT_INO), "corrupt directory entry");
}

#[test]
fn an_orphan_key_that_names_no_inode_fails_the_mount_with_eio() {
    let (pool, vol, fs) = mounted();
    drop(fs);
    pool.kv_put(vol, b"O\x07", b"").unwrap();
    assert_eio(VolumeFs::mount(pool, vol, Arc::new(ManualClock::new(1)), ROOT).map(|_| ()), "holds no inode number");
}

#[test]
fn a_short_key_inside_a_directory_range_is_eio_for_readdir_and_listxattr() {
    // Directory 255's range runs from D ++ 0..0FF to D ++ 0..0100: a key of seven bytes
    // after its prefix, 0..01, sorts inside it.
    let (pool, vol, fs) = mounted();
    let mut dir = None;
    for i in 0..300u32 {
        let a = fs.mkdir(ROOT, ROOT_INO, format!("d{i}").as_bytes(), 0o755).unwrap();
        if a.ino == 255 {
            dir = Some(a.ino);
        }
    }
    let dir = dir.expect("a directory got inode 255");
    fs.setxattr(dir, b"user.a", b"1", 0).unwrap();
    assert_eq!(fs.readdir(dir).unwrap().len(), 2);
    pool.kv_put(vol, b"D\x00\x00\x00\x00\x00\x00\x01", &[0, 0, 0, 0, 0, 0, 0, 2, 4]).unwrap();
    pool.kv_put(vol, b"X\x00\x00\x00\x00\x00\x00\x01", b"v").unwrap();
    assert_eio(fs.readdir(dir), "holds no inode number");
    assert_eio(fs.listxattr(dir), "holds no inode number");
}
