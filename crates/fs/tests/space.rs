//! Which errno a write that runs out of space answers: EDQUOT at the volume's size limit,
//! ENOSPC when the pool is full. FUSE passes the errno on as is, and NFS maps it to
//! NFS3ERR_DQUOT / NFS3ERR_NOSPC (crates/nfs/tests/protocol.rs).

use std::sync::Arc;
use strata_engine::{ManualClock, Pool, VolumeOptions};
use strata_fs::{Caller, FsError, VolumeFs, ROOT_INO};
use strata_testkit::{test_create_options, test_pool_options, SimDisk, SimRng};

const ROOT: Caller = Caller { uid: 0, gid: 0 };

fn fs(disk_bytes: u64, quota_bytes: u64) -> VolumeFs {
    let disk = Arc::new(SimDisk::new(disk_bytes, 512));
    let pool = Arc::new(Pool::create(disk, test_create_options(5), test_pool_options()).unwrap());
    let vol = pool.create_volume("fs", &VolumeOptions { quota_bytes, ..Default::default() }).unwrap();
    VolumeFs::mount(pool, vol, Arc::new(ManualClock::new(1)), ROOT).unwrap()
}

/// Write incompressible data to a new file until a write fails; that failure.
fn fill(fs: &VolumeFs, limit: u64) -> FsError {
    let f = fs.mknod(ROOT, ROOT_INO, b"big", libc::S_IFREG | 0o644, 0).unwrap();
    let mut rng = SimRng::new(3);
    let mut off = 0u64;
    loop {
        match fs.write(f.ino, off, &rng.bytes(256 << 10)) {
            Ok(n) => off += n as u64,
            Err(e) => return e,
        }
        assert!(off < limit, "wrote {off} bytes without running out of space");
    }
}

#[test]
fn a_volume_at_its_size_limit_answers_edquot() {
    let fs = fs(64 << 20, 2 << 20);
    let e = fill(&fs, 8 << 20);
    assert_eq!(e.errno, libc::EDQUOT, "{e}");
}

#[test]
fn a_full_pool_answers_enospc() {
    let fs = fs(32 << 20, 0);
    let e = fill(&fs, 64 << 20);
    assert_eq!(e.errno, libc::ENOSPC, "{e}");
}
