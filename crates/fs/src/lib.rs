//! The volume file system: POSIX semantics on a Strata volume, with no front-end
//! dependency. FUSE (and later NFS) translate requests into calls of [`VolumeFs`].
//!
//! Mapping onto the engine:
//! - an inode is an engine object; its inode number is the object id; its attribute record
//!   (`InodePhys`) is the object's engine attribute; a regular file's bytes are the
//!   object's bytes;
//! - a directory entry is a key `D ++ parent ++ name` → `child ++ type` in the volume's
//!   key-value space, so lookups and listings of directories with millions of entries are
//!   B+tree operations;
//! - symlink targets are keys `L ++ ino`, xattrs `X ++ ino ++ name`, and inodes that were
//!   unlinked while still open are remembered under `O ++ ino` until the last reference
//!   goes (and are reclaimed at the next mount after a crash).
//!
//! Every operation runs in one engine [`PoolGuard`]: nothing else can commit between its steps,
//! so a crash finds a rename, an unlink or a create whole or not at all. Durability: fsync
//! commits the open txg (until the intent log exists): slow, never unsafe.
//!
//! Permission checks are the kernel's (FUSE `default_permissions`); this layer records
//! owners and modes exactly as asked.

mod fsck;
pub mod inode;
mod keys;
mod namespace;
mod snapdir;

pub use inode::{Attr, InodePhys};
pub use namespace::{DirEntry, SetAttr, RENAME_EXCHANGE, RENAME_NOREPLACE};
pub use snapdir::{is_snapshot_ino, FileRestore, SNAPDIR_INO, SNAPSHOT_DIR_NAME};
pub use strata_engine::catalog::volume::SharedBytes;
pub use strata_engine::SyncPolicy;

pub(crate) use keys::{dir_key, ino_key};
use keys::{encode_super, key_parts, super_version, FS_VERSION, KEY_SUPER};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use strata_engine::{Clock, Error, ErrorKind, ObjectId, Pool, PoolGuard, SpaceReason, VolumeId};

/// An errno for the front end, with the engine's reason when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsError {
    pub errno: i32,
    pub detail: Option<String>,
}

impl FsError {
    pub fn new(errno: i32) -> FsError {
        FsError { errno, detail: None }
    }
}

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "errno {}{}", self.errno, self.detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())
    }
}

impl From<Error> for FsError {
    fn from(e: Error) -> FsError {
        let errno = match e.kind() {
            // Only a data write's PoolGuard meets it, and `mutate_data` runs that again.
            _ if matches!(e, Error::CommitInFlight) => libc::EAGAIN,
            ErrorKind::InvalidArgument => libc::EINVAL,
            ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::AlreadyExists => libc::EEXIST,
            // A volume's size limit is a quota; a full pool, a reservation the pool cannot
            // honour or a volume's last snapshot are all "no space".
            ErrorKind::NoSpace if e.space_reason() == Some(SpaceReason::Quota) => libc::EDQUOT,
            ErrorKind::NoSpace => libc::ENOSPC,
            ErrorKind::Io | ErrorKind::Corruption => libc::EIO,
            ErrorKind::ReadOnly => libc::EROFS,
            ErrorKind::Unsupported => libc::EOPNOTSUPP,
            ErrorKind::Busy => libc::EBUSY,
        };
        FsError { errno, detail: Some(e.to_string()) }
    }
}

pub type FsResult<T> = Result<T, FsError>;

pub fn err<T>(errno: i32) -> FsResult<T> {
    Err(FsError::new(errno))
}

/// Who is asking: new inodes are owned by the caller.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

/// The inode number of the root directory.
pub const ROOT_INO: u64 = 1;
/// Longest name in a directory (as Linux's NAME_MAX).
pub const NAME_MAX: usize = 255;
/// Longest symlink target (Linux's PATH_MAX - 1). Stored in key-value values of at most
/// SYMLINK_PART bytes: `L ++ ino` and, for longer targets, `L ++ ino ++ 1`.
pub const SYMLINK_MAX: usize = 4095;
pub(crate) const SYMLINK_PART: usize = 3072;
/// Attempts to find space before a write answers ENOSPC: ~0.2 s of commits and waits in
/// all, enough for deferred frees (two txgs) and pending FORGETs of unlinked files.
const SPACE_RETRIES: u64 = 6;
/// Largest xattr value; larger gets E2BIG (ext4's limit is one block, similar).
pub const XATTR_VALUE_MAX: usize = 3072;

pub struct VolumeFs {
    pool: Arc<Pool>,
    vol: VolumeId,
    clock: Arc<dyn Clock>,
    /// Kernel references per inode (FUSE lookup counts): an unlinked inode lives on until
    /// they reach zero.
    lookups: Mutex<HashMap<u64, u64>>,
    /// The `.snapshot` directory (None in a snapshot's own read-only file system).
    snapdir: Option<snapdir::SnapDir>,
}

impl VolumeFs {
    /// Mount the file system of volume `vol`, creating it (an empty root directory owned by
    /// `root_owner`, mode 0755) if the volume has none yet, and reclaiming inodes that
    /// were unlinked while open when the previous mount ended.
    pub fn mount(pool: Arc<Pool>, vol: VolumeId, clock: Arc<dyn Clock>, root_owner: Caller) -> FsResult<VolumeFs> {
        let fs = VolumeFs { pool, vol, clock, lookups: Mutex::new(HashMap::new()), snapdir: Some(Default::default()) };
        let mut t = fs.pool.guard();
        match t.kv_get(vol, KEY_SUPER)?.map(|v| super_version(&v)) {
            Some(Some(version)) => {
                if version != FS_VERSION {
                    return Err(FsError {
                        errno: libc::EOPNOTSUPP,
                        detail: Some(format!("file system version {version} (this build knows {FS_VERSION})")),
                    });
                }
            }
            Some(_) => return Err(FsError { errno: libc::EIO, detail: Some("corrupt file system superblock".into()) }),
            None => {
                let now = fs.clock.now_ns() as i64;
                let root = InodePhys {
                    mode: inode::S_IFDIR | 0o755,
                    uid: root_owner.uid,
                    gid: root_owner.gid,
                    nlink: 2,
                    rdev: 0,
                    atime_ns: now,
                    mtime_ns: now,
                    ctime_ns: now,
                    crtime_ns: now,
                    parent: ROOT_INO,
                };
                let id = t.create_object(vol, &root.encode())?;
                if id.0 != ROOT_INO {
                    return Err(FsError {
                        errno: libc::EINVAL,
                        detail: Some(format!(
                            "volume already holds objects (first new one is {}): not a file system",
                            id.0
                        )),
                    });
                }
                t.kv_put(vol, KEY_SUPER, &encode_super(ROOT_INO))?;
                t.commit()?;
            }
        }
        // Orphans: unlinked while open when the last mount ended; nobody holds them now.
        let orphans = t.kv_range(vol, b"O", Some(b"P"), usize::MAX)?;
        for (k, _) in orphans {
            let (ino, _) = key_parts(&k)?;
            if t.object_exists(vol, ObjectId(ino))? {
                fs.destroy_inode(&mut t, ino)?;
            }
            t.kv_delete(vol, &k)?;
        }
        drop(t);
        Ok(fs)
    }

    /// The file system of a read-only snapshot view (see `Pool::open_snapshot_view`):
    /// nothing is written, not even the orphans a live mount would reclaim.
    pub fn mount_read_only(pool: Arc<Pool>, view: VolumeId, clock: Arc<dyn Clock>) -> FsResult<VolumeFs> {
        let fs = VolumeFs { pool, vol: view, clock, lookups: Mutex::new(HashMap::new()), snapdir: None };
        let sb = fs.pool.guard().kv_get(view, KEY_SUPER)?;
        match sb.as_deref().and_then(super_version) {
            Some(_) => Ok(fs),
            _ => Err(FsError {
                errno: libc::EIO,
                detail: Some("the snapshot holds no Strata file system (taken before the first mount?)".into()),
            }),
        }
    }

    /// The volume's sync policy (front ends bypass their write caches for `Always`).
    pub fn sync_policy(&self) -> FsResult<SyncPolicy> {
        Ok(self.pool.guard_for_data().sync_policy(self.vol)?)
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub fn volume(&self) -> VolumeId {
        self.vol
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ns() as i64
    }

    pub(crate) fn load(&self, t: &mut PoolGuard<'_>, ino: u64) -> FsResult<InodePhys> {
        let raw = t.get_attr(self.vol, ObjectId(ino)).map_err(|e| match e.kind() {
            ErrorKind::NotFound => FsError::new(libc::ENOENT),
            _ => e.into(),
        })?;
        InodePhys::decode(&raw)
            .ok_or_else(|| FsError { errno: libc::EIO, detail: Some(format!("inode {ino}: bad record")) })
    }

    /// What a write, a truncate or a chown takes away (Linux's file_remove_privs): the
    /// set-user-id bit, set-group-id when group-executable, and file capabilities. The
    /// kernel leaves this to us (FUSE_HANDLE_KILLPRIV_V2), which spares it a getxattr
    /// round trip before every write(2).
    pub(crate) fn kill_privs(&self, t: &mut PoolGuard<'_>, ino: u64, i: &mut InodePhys) -> FsResult<()> {
        if i.mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            i.mode &= !libc::S_ISUID;
            if i.mode & libc::S_IXGRP != 0 {
                i.mode &= !libc::S_ISGID;
            }
        }
        let mut key = ino_key(b'X', ino);
        key.extend_from_slice(b"security.capability");
        if t.kv_get(self.vol, &key)?.is_some() {
            t.kv_delete(self.vol, &key)?;
        }
        Ok(())
    }

    pub(crate) fn store(&self, t: &mut PoolGuard<'_>, ino: u64, i: &InodePhys) -> FsResult<()> {
        Ok(t.set_attr(self.vol, ObjectId(ino), &i.encode())?)
    }

    pub(crate) fn attr_of(&self, t: &mut PoolGuard<'_>, ino: u64, i: &InodePhys) -> FsResult<Attr> {
        let (size, blocks) = if i.is_dir() {
            (4096, 8)
        } else if i.is_symlink() {
            (self.symlink_target(t, ino)?.len() as u64, 0)
        } else {
            let obj = ObjectId(ino);
            (t.object_size(self.vol, obj)?, t.object_allocated_bytes(self.vol, obj)? / 512)
        };
        Ok(Attr {
            ino,
            size,
            blocks,
            atime_ns: i.atime_ns,
            mtime_ns: i.mtime_ns,
            ctime_ns: i.ctime_ns,
            crtime_ns: i.crtime_ns,
            mode: i.mode,
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            rdev: i.rdev,
            blksize: 16384,
        })
    }

    pub(crate) fn symlink_target(&self, t: &mut PoolGuard<'_>, ino: u64) -> FsResult<Vec<u8>> {
        let key = ino_key(b'L', ino);
        let mut target = t
            .kv_get(self.vol, &key)?
            .ok_or(FsError { errno: libc::EIO, detail: Some(format!("symlink {ino} without a target")) })?;
        if target.len() == SYMLINK_PART {
            let mut second = key;
            second.push(1);
            target.extend(t.kv_get(self.vol, &second)?.unwrap_or_default());
        }
        Ok(target)
    }

    pub(crate) fn store_symlink_target(&self, t: &mut PoolGuard<'_>, ino: u64, target: &[u8]) -> FsResult<()> {
        let key = ino_key(b'L', ino);
        let (first, rest) = target.split_at(target.len().min(SYMLINK_PART));
        t.kv_put(self.vol, &key, first)?;
        if !rest.is_empty() {
            let mut second = key;
            second.push(1);
            t.kv_put(self.vol, &second, rest)?;
        }
        Ok(())
    }

    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        if is_snapshot_ino(ino) {
            return self.snap_getattr(ino);
        }
        let mut t = self.pool.guard_for_data();
        let i = self.load(&mut t, ino)?;
        self.attr_of(&mut t, ino, &i)
    }

    /// The kernel now holds one more reference to `ino` (an entry was handed out).
    pub fn remember(&self, ino: u64) {
        if is_snapshot_ino(ino) {
            return;
        }
        *self.lookups.lock().expect("lookup table").entry(ino).or_insert(0) += 1;
    }

    /// The kernel dropped `n` references to `ino`; an unlinked inode goes with the last.
    pub fn forget(&self, ino: u64, n: u64) {
        if is_snapshot_ino(ino) {
            return;
        }
        let gone = {
            let mut l = self.lookups.lock().expect("lookup table");
            match l.get_mut(&ino) {
                Some(c) if *c > n => {
                    *c -= n;
                    false
                }
                Some(_) => {
                    l.remove(&ino);
                    true
                }
                None => false,
            }
        };
        if gone && ino != ROOT_INO {
            let mut t = self.pool.guard();
            if let Ok(i) = self.load(&mut t, ino) {
                if i.nlink == 0 && !self.referenced(ino) {
                    // Best effort: if this fails the orphan record reclaims it at next mount.
                    let _ =
                        self.destroy_inode(&mut t, ino).and_then(|_| Ok(t.kv_delete(self.vol, &ino_key(b'O', ino))?));
                }
            }
        }
    }

    pub(crate) fn referenced(&self, ino: u64) -> bool {
        self.lookups.lock().expect("lookup table").get(&ino).is_some_and(|&c| c > 0)
    }

    /// Delete an inode's object and everything keyed by it.
    pub(crate) fn destroy_inode(&self, t: &mut PoolGuard<'_>, ino: u64) -> FsResult<()> {
        let xattrs = t.kv_range(self.vol, &ino_key(b'X', ino), Some(&ino_key(b'X', ino + 1)), usize::MAX)?;
        for (k, _) in xattrs {
            t.kv_delete(self.vol, &k)?;
        }
        t.kv_delete(self.vol, &ino_key(b'L', ino))?;
        let mut second = ino_key(b'L', ino);
        second.push(1);
        t.kv_delete(self.vol, &second)?;
        t.delete_object(self.vol, ObjectId(ino))?;
        Ok(())
    }

    pub fn read(&self, ino: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        Ok(SharedBytes::concat(&self.read_shared(ino, offset, size)?))
    }

    /// Up to `size` bytes of `ino` from `offset` (fewer at the end of the file) as pieces of
    /// the engine's buffers (`Pool::read_shared`), for a server that sends them from there.
    /// The engine reads the device outside its lock: parallel readers do not queue.
    pub fn read_shared(&self, ino: u64, offset: u64, size: u32) -> FsResult<Vec<SharedBytes>> {
        if is_snapshot_ino(ino) {
            let (fs, local) = self.snap_file(ino)?;
            return fs.read_shared(local, offset, size);
        }
        {
            let mut t = self.pool.guard_for_data();
            if self.load(&mut t, ino)?.is_dir() {
                return err(libc::EISDIR);
            }
        }
        self.read_shared_file(ino, offset, size)
    }

    /// [`VolumeFs::read_shared`] of an inode the caller knows is not a directory (a LUN's
    /// file, checked when the LUN was opened): the pool's lock is taken once, to plan the
    /// read, not a second time to load the inode.
    pub fn read_shared_file(&self, ino: u64, offset: u64, size: u32) -> FsResult<Vec<SharedBytes>> {
        if is_snapshot_ino(ino) {
            let (fs, local) = self.snap_file(ino)?;
            return fs.read_shared_file(local, offset, size);
        }
        self.pool.read_shared(self.vol, ObjectId(ino), offset, size as usize).map_err(|e| match e.kind() {
            ErrorKind::NotFound => FsError::new(libc::ENOENT),
            _ => e.into(),
        })
    }

    /// The allocation map of `ino` from `offset` over at most `len` bytes (clipped at the end
    /// of the file): runs of `(length, hole)` (`ReadPlan::extents`). Planned under the lock,
    /// no data read.
    pub fn extents(&self, ino: u64, offset: u64, len: u32) -> FsResult<Vec<(u64, bool)>> {
        let mut t = self.pool.guard_for_data();
        if self.load(&mut t, ino)?.is_dir() {
            return err(libc::EISDIR);
        }
        let plan = t.plan_read(self.vol, ObjectId(ino), offset, len as usize).map_err(|e| match e.kind() {
            ErrorKind::NotFound => FsError::new(libc::ENOENT),
            _ => FsError::from(e),
        })?;
        Ok(plan.extents())
    }

    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        self.refuse_in_snapshot(&[ino])?;
        let now = self.now();
        // The volume's sync policy is read in the same hold of the pool's lock as the write.
        let policy = self.mutate_data(|t| {
            let mut i = self.load(t, ino)?;
            if i.is_dir() {
                return err(libc::EISDIR);
            }
            // Before the write: dropping a capability is not a data change, and waits for
            // a commit in flight (the engine refuses it first, with nothing changed yet).
            self.kill_privs(t, ino, &mut i)?;
            t.write(self.vol, ObjectId(ino), offset, data)?;
            i.mtime_ns = now;
            i.ctime_ns = now;
            self.store(t, ino, &i)?;
            Ok(t.sync_policy(self.vol)?)
        })?;
        if policy == SyncPolicy::Always {
            self.pool.sync_object(self.vol, ObjectId(ino))?;
        }
        Ok(data.len() as u32)
    }

    /// `write` of the data only, for a block LUN's file (`ino` a regular file the caller
    /// vouches for; never past its end): the inode — its times, the capability check — is
    /// left as it is, one key-value look-up and store fewer under the pool's lock. A LUN
    /// calls `write` instead at least once a second, so its file's mtime lags by at most
    /// that (as `lazytime` lets a file system do); a block device's clients never read it.
    pub fn write_data_only(&self, ino: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        self.refuse_in_snapshot(&[ino])?;
        let policy = self.mutate_data(|t| {
            t.write(self.vol, ObjectId(ino), offset, data)?;
            Ok(t.sync_policy(self.vol)?)
        })?;
        if policy == SyncPolicy::Always {
            self.pool.sync_object(self.vol, ObjectId(ino))?;
        }
        Ok(data.len() as u32)
    }

    /// The record size of file `ino`: writes of whole, aligned records of it are
    /// written without reading anything first.
    pub fn record_size(&self, ino: u64) -> FsResult<u32> {
        let mut t = self.pool.guard_for_data();
        Ok(t.object_record_size(self.vol, ObjectId(ino))?)
    }

    /// Run `f` in one txn. On ENOSPC while the pool can still free space (held frees, dirty
    /// data), commit and run it again (at most three times): `f` must fail before changing
    /// anything when it fails for space, which the engine guarantees for writes, truncates
    /// and punches. Commits when dirty data passes the pool's limit.
    pub(crate) fn mutate<T>(&self, f: impl FnMut(&mut PoolGuard<'_>) -> FsResult<T>) -> FsResult<T> {
        self.mutate_in(false, f)
    }

    /// `mutate` for a data write (and the attribute change that goes with it): it runs
    /// even while a commit writes its data (`Pool::txn_data`); if it needs more than that,
    /// the engine refuses before anything changed and it runs again after the commit.
    pub(crate) fn mutate_data<T>(&self, f: impl FnMut(&mut PoolGuard<'_>) -> FsResult<T>) -> FsResult<T> {
        self.mutate_in(true, f)
    }

    fn mutate_in<T>(&self, mut data: bool, mut f: impl FnMut(&mut PoolGuard<'_>) -> FsResult<T>) -> FsResult<T> {
        let mut tries = 0u64;
        loop {
            let r = {
                let mut t = if data { self.pool.guard_for_data() } else { self.pool.guard() };
                f(&mut t)
            };
            match r {
                Err(e) if data && e.errno == libc::EAGAIN => data = false,
                Err(e) if e.errno == libc::ENOSPC && tries < SPACE_RETRIES => {
                    tries += 1;
                    // Space comes back with commits (frees are deferred two txgs) and when
                    // the kernel forgets unlinked inodes (FORGET arrives asynchronously,
                    // after the unlink returned): commit, and give the other request threads
                    // a moment, a few times, before answering ENOSPC.
                    self.pool.commit_for_space()?;
                    std::thread::sleep(std::time::Duration::from_millis(10 * tries));
                }
                Err(e) => return Err(e),
                Ok(v) => {
                    self.pool.commit_if_over_dirty_limit()?;
                    return Ok(v);
                }
            }
        }
    }

    /// fsync / fdatasync / fsyncdir of `ino`: make its data and attributes durable, and
    /// every namespace change so far (names, creates, unlinks, renames — of any directory),
    /// through the intent log (one log write and a flush; the txg commits in the
    /// background). Other files' unsynced writes are not written (`Pool::sync_object`).
    pub fn fsync(&self, ino: u64) -> FsResult<()> {
        if self.pool.guard_for_data().sync_policy(self.vol)? == SyncPolicy::Disabled {
            return Ok(()); // documented as unsafe: the next commit makes it durable
        }
        self.pool.sync_object(self.vol, ObjectId(ino))?;
        Ok(())
    }

    /// syncfs: make everything so far durable (all files of the pool).
    pub fn sync_all(&self) -> FsResult<()> {
        if self.pool.guard_for_data().sync_policy(self.vol)? == SyncPolicy::Disabled {
            return Ok(());
        }
        self.pool.sync_log()?;
        Ok(())
    }

    /// fallocate: mode 0 (extend the size), KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE.
    /// Space is thin: mode 0 does not reserve (as on other copy-on-write file systems).
    pub fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> FsResult<()> {
        self.refuse_in_snapshot(&[ino])?;
        let end = offset.checked_add(length).filter(|&e| e <= i64::MAX as u64).ok_or(FsError::new(libc::EFBIG))?;
        let known = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 {
            return err(libc::EOPNOTSUPP);
        }
        if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 && mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            return err(libc::EINVAL);
        }
        let now = self.now();
        self.mutate(|t| {
            let mut i = self.load(t, ino)?;
            if i.is_dir() {
                return err(libc::EISDIR);
            }
            if !i.is_reg() {
                return err(libc::ENODEV);
            }
            let obj = ObjectId(ino);
            let size = t.object_size(self.vol, obj)?;
            if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
                t.punch_hole(self.vol, obj, offset, length)?;
            }
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > size {
                t.truncate(self.vol, obj, end)?;
            }
            i.ctime_ns = now;
            if mode != 0 {
                i.mtime_ns = now;
            }
            self.store(t, ino, &i)
        })
    }
}

/// Space as statfs reports it.
#[derive(Debug, Clone, Copy)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u32,
}

impl VolumeFs {
    /// Blocks of 4 KiB. A volume with a size limit looks like a disk of that size; one
    /// without looks like the pool. Free is what the pool can still give this volume.
    pub fn statfs(&self) -> FsResult<StatFs> {
        let s = self.pool.guard_for_data().space(self.vol)?;
        let (total, free) = if s.volume_quota_bytes > 0 {
            let left = s.volume_quota_bytes.saturating_sub(s.volume_used_bytes);
            (s.volume_quota_bytes, left.min(s.pool_free_bytes))
        } else {
            (s.volume_used_bytes + s.pool_free_bytes, s.pool_free_bytes)
        };
        let bs = 4096u64;
        Ok(StatFs {
            block_size: bs as u32,
            blocks: total / bs,
            blocks_free: free / bs,
            blocks_avail: free / bs,
            files: u32::MAX as u64,
            files_free: u32::MAX as u64 / 2,
            name_max: NAME_MAX as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_engine::NoSpace;

    /// The errno follows the reason, never the message: a message that mentions a size limit
    /// is ENOSPC unless the reason is the volume's quota.
    #[test]
    fn no_space_maps_by_reason() {
        let errno =
            |reason, message: &str| FsError::from(Error::NoSpace(NoSpace { reason, message: message.into() })).errno;
        assert_eq!(errno(SpaceReason::Quota, "volume v is full"), libc::EDQUOT);
        for reason in [SpaceReason::Pool, SpaceReason::Reservation, SpaceReason::Snapshots] {
            assert_eq!(errno(reason, "reservation exceeds its size limit"), libc::ENOSPC, "{reason:?}");
        }
    }
}
