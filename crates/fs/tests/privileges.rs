//! What a write, a truncate and a chown take away (the kernel leaves it to us under
//! FUSE_HANDLE_KILLPRIV_V2): set-user-id, set-group-id when group-executable, and the
//! file's capabilities (`security.capability`).

use std::sync::Arc;
use strata_engine::{ManualClock, Pool, VolumeOptions};
use strata_fs::{Caller, SetAttr, VolumeFs, ROOT_INO};
use strata_testkit::{test_create_options, test_pool_options, SimDisk};

const ROOT: Caller = Caller { uid: 0, gid: 0 };

fn fs() -> VolumeFs {
    let disk = Arc::new(SimDisk::new(32 << 20, 512));
    let pool = Arc::new(Pool::create(disk, test_create_options(3), test_pool_options()).unwrap());
    let vol = pool.create_volume("fs", &VolumeOptions::default()).unwrap();
    VolumeFs::mount(pool, vol, Arc::new(ManualClock::new(1)), ROOT).unwrap()
}

/// A set-id executable with file capabilities.
fn privileged(fs: &VolumeFs, name: &str) -> u64 {
    let a = fs.mknod(ROOT, ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o6755, 0).unwrap();
    fs.setxattr(a.ino, b"security.capability", b"\x01\x00\x00\x02", 0).unwrap();
    fs.setxattr(a.ino, b"user.keep", b"yes", 0).unwrap();
    a.ino
}

fn privileges_left(fs: &VolumeFs, ino: u64) -> (u32, bool) {
    let mode = fs.getattr(ino).unwrap().mode & 0o7777;
    (mode, fs.getxattr(ino, b"security.capability").is_ok())
}

#[test]
fn a_write_clears_set_id_bits_and_capabilities() {
    let fs = fs();
    let ino = privileged(&fs, "tool");
    fs.write(ino, 0, b"patched").unwrap();
    assert_eq!(privileges_left(&fs, ino), (0o755, false));
    assert_eq!(fs.getxattr(ino, b"user.keep").unwrap(), b"yes", "other attributes stay");
}

#[test]
fn set_group_id_without_group_execute_is_mandatory_locking_and_stays() {
    let fs = fs();
    let a = fs.mknod(ROOT, ROOT_INO, b"f", libc::S_IFREG | 0o2644, 0).unwrap();
    fs.write(a.ino, 0, b"x").unwrap();
    assert_eq!(privileges_left(&fs, a.ino), (0o2644, false));
}

#[test]
fn a_truncate_clears_them_when_the_caller_asks() {
    let fs = fs();
    let ino = privileged(&fs, "tool");
    // Root (CAP_FSETID) truncating keeps them, as on Linux.
    fs.setattr(ino, SetAttr { size: Some(10), ..Default::default() }).unwrap();
    assert_eq!(privileges_left(&fs, ino), (0o6755, true));
    fs.setattr(ino, SetAttr { size: Some(0), kill_suid: true, ..Default::default() }).unwrap();
    assert_eq!(privileges_left(&fs, ino), (0o755, false));
}

#[test]
fn a_chown_clears_them() {
    let fs = fs();
    let ino = privileged(&fs, "tool");
    fs.setattr(ino, SetAttr { uid: Some(1000), ..Default::default() }).unwrap();
    assert_eq!(privileges_left(&fs, ino), (0o755, false));
}
