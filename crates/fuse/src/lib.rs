//! FUSE front end: translates kernel requests into [`VolumeFs`] calls.
//!
//! Choices that matter for databases (each broke a database in our trials, DESIGN.md §10):
//! files are created as the calling uid/gid; O_DIRECT opens are accepted whatever the
//! alignment the kernel hands over (the kernel sends direct I/O to us unchanged); fsync and
//! fdatasync reach the engine; permission checks are the kernel's (`default_permissions`),
//! and other users may use the mount (`allow_other`) — the database runs as its own user.
//!
//! Caching: with `writeback_cache` the kernel keeps written pages and sends large writes
//! (and flushes them before fsync returns); otherwise every write is sent as it comes.
//! Which one serves PostgreSQL and MariaDB better is measured, see docs/fuse-caching.md.
//!
//! Statistics: with `MountOptions::stats`, every request that gets a reply is counted
//! (strata-stats) — read, write, fsync/fsyncdir as sync, fallocate punching or zeroing a
//! range as trim, everything else as other — with its latency from the request's arrival
//! here to its reply (the reply's own write to /dev/fuse excluded). `forget` has no reply
//! and is not counted.

pub use fuser::BackgroundSession;
use fuser::{
    AccessFlags, Config, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use strata_fs::{Attr, Caller, DirEntry, FsError, SetAttr, VolumeFs};
use strata_stats::{OpClass, ProtocolStats};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_times_before_1970() {
        // What fuser hands over for the kernel's (-2 s, 500_000_000 ns) = -1.5 s.
        let fuser_value = UNIX_EPOCH - Duration::new(2, 500_000_000);
        assert_eq!(from_request_time(fuser_value), -1_500_000_000);
        assert_eq!(from_request_time(UNIX_EPOCH - Duration::new(7, 0)), -7_000_000_000);
        assert_eq!(from_request_time(UNIX_EPOCH + Duration::new(7, 5)), 7_000_000_005);
    }
}

/// Request-handling threads of a mount unless told otherwise (`strata serve --fuse-threads`).
pub const DEFAULT_THREADS: u16 = 4;

#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Let the kernel cache writes and send them in large batches.
    pub writeback_cache: bool,
    /// Request-handling threads (each with its own /dev/fuse fd).
    pub threads: usize,
    /// Name shown in /proc/mounts ("strata:pool/volume").
    pub fsname: String,
    /// Attribute and entry cache time. One volume is mounted once, so nothing else changes
    /// it behind the kernel's back; 1 s keeps stat-heavy work cheap.
    pub ttl: Duration,
    /// Where the mount's requests are counted (the volume's FUSE statistics), if anywhere.
    pub stats: Option<Arc<ProtocolStats>>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            writeback_cache: true,
            threads: DEFAULT_THREADS as usize,
            fsname: "strata".into(),
            ttl: Duration::from_secs(1),
            stats: None,
        }
    }
}

pub struct StrataFuse {
    fs: Arc<VolumeFs>,
    opts: MountOptions,
    dirs: Mutex<HashMap<u64, Arc<Vec<DirEntry>>>>,
    next_fh: AtomicU64,
    stats: Option<Arc<ProtocolStats>>,
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_nanos().min(i64::MAX as u128) as i64),
    }
}

/// A time from a setattr request. fuser 0.18 turns the kernel's (negative seconds,
/// nanoseconds) into EPOCH - (|secs| + nsec) instead of EPOCH - |secs| + nsec (its own
/// TODO in `system_time_from_time`), so times before 1970 with a fraction arrive one
/// second and twice the fraction early: undo that here.
fn from_request_time(t: SystemTime) -> i64 {
    let v = ns(t);
    if v >= 0 {
        return v;
    }
    let a = v.unsigned_abs();
    let (secs, nsec) = ((a / 1_000_000_000) as i64, (a % 1_000_000_000) as i64);
    -secs * 1_000_000_000 + nsec
}

fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn dkind(dtype: u8) -> FileType {
    kind((dtype as u32) << 12)
}

fn fattr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: time(a.atime_ns),
        mtime: time(a.mtime_ns),
        ctime: time(a.ctime_ns),
        crtime: time(a.crtime_ns),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

fn errno(e: &FsError, op: &str) -> Errno {
    if e.errno == libc::EIO {
        tracing::error!(op, detail = e.detail.as_deref().unwrap_or(""), "I/O error or corruption answered with EIO");
    }
    Errno::from_i32(e.errno)
}

fn caller(req: &Request) -> Caller {
    Caller { uid: req.uid(), gid: req.gid() }
}

impl StrataFuse {
    pub fn new(fs: Arc<VolumeFs>, opts: MountOptions) -> StrataFuse {
        let stats = opts.stats.clone();
        StrataFuse { fs, opts, dirs: Mutex::new(HashMap::new()), next_fh: AtomicU64::new(1), stats }
    }

    /// Count one request (module comment); `t`: when it arrived.
    #[inline]
    fn count(&self, class: OpClass, bytes: u64, t: Instant, ok: bool) {
        if let Some(s) = &self.stats {
            s.record(class, bytes, t.elapsed(), ok);
        }
    }

    fn entry(&self, t: Instant, r: Result<Attr, FsError>, reply: ReplyEntry, op: &str) {
        self.count(OpClass::Other, 0, t, r.is_ok());
        match r {
            Ok(a) => {
                self.fs.remember(a.ino);
                reply.entry(&self.opts.ttl, &fattr(&a), Generation(0));
            }
            Err(e) => reply.error(errno(&e, op)),
        }
    }

    /// With sync=always every write must reach the engine at once: bypass the kernel's
    /// page cache for the file (direct I/O), whatever the mount's caching mode.
    fn open_flags(&self) -> FopenFlags {
        match self.fs.sync_policy() {
            Ok(strata_fs::SyncPolicy::Always) => FopenFlags::FOPEN_DIRECT_IO,
            _ => FopenFlags::empty(),
        }
    }

    fn empty(&self, class: OpClass, t: Instant, r: Result<(), FsError>, reply: ReplyEmpty, op: &str) {
        self.count(class, 0, t, r.is_ok());
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e, op)),
        }
    }
}

impl fuser::Filesystem for StrataFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // FUSE_ASYNC_DIO: an asynchronous O_DIRECT request (InnoDB's io_uring/libaio page
        // writes and reads) goes to us as it is submitted; without it the kernel performs it
        // synchronously while holding the file's inode lock, so every page write to one
        // tablespace waited for the one before (libfuse turns it on by default).
        // FUSE_HANDLE_KILLPRIV_V2: we clear set-id bits and file capabilities on write,
        // truncate and chown (VolumeFs::kill_privs); the kernel then marks inodes "no
        // security" and stops asking getxattr("security.capability") before every write(2)
        // — 20,000 round trips a second under MariaDB's buffered redo-log writes.
        let mut want = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_MAX_PAGES
            | InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        if self.opts.writeback_cache {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        // Capabilities the kernel lacks are simply not used.
        let _ = config.add_capabilities(want & config.capabilities());
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t = Instant::now();
        self.entry(t, self.fs.lookup(parent.0, name.as_bytes()), reply, "lookup")
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup)
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let t = Instant::now();
        let r = self.fs.getattr(ino.0);
        self.count(OpClass::Other, 0, t, r.is_ok());
        match r {
            Ok(a) => reply.attr(&self.opts.ttl, &fattr(&a)),
            Err(e) => reply.error(errno(&e, "getattr")),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let start = Instant::now();
        let t = |x: Option<TimeOrNow>| {
            x.map(|t| match t {
                TimeOrNow::Now => None,
                TimeOrNow::SpecificTime(s) => Some(from_request_time(s)),
            })
        };
        // FUSE_HANDLE_KILLPRIV_V2: a truncate by a caller without CAP_FSETID clears the
        // set-id bits here (fuser does not pass FATTR_KILL_SUIDGID; not root stands in).
        let kill_suid = size.is_some() && req.uid() != 0;
        let set = SetAttr { mode, uid, gid, size, atime_ns: t(atime), mtime_ns: t(mtime), kill_suid };
        let r = self.fs.setattr(ino.0, set);
        self.count(OpClass::Other, 0, start, r.is_ok());
        match r {
            Ok(a) => reply.attr(&self.opts.ttl, &fattr(&a)),
            Err(e) => reply.error(errno(&e, "setattr")),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let t = Instant::now();
        let r = self.fs.readlink(ino.0);
        self.count(OpClass::Other, 0, t, r.is_ok());
        match r {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e, "readlink")),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let t = Instant::now();
        let r = self.fs.mknod(caller(req), parent.0, name.as_bytes(), mode & !umask, rdev);
        self.entry(t, r, reply, "mknod")
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let t = Instant::now();
        let r = self.fs.mkdir(caller(req), parent.0, name.as_bytes(), mode & !umask);
        self.entry(t, r, reply, "mkdir")
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let t = Instant::now();
        self.empty(OpClass::Other, t, self.fs.unlink(parent.0, name.as_bytes()), reply, "unlink")
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let t = Instant::now();
        self.empty(OpClass::Other, t, self.fs.rmdir(parent.0, name.as_bytes()), reply, "rmdir")
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let t = Instant::now();
        let r = self.fs.symlink(caller(req), parent.0, link_name.as_bytes(), target.as_os_str().as_bytes());
        self.entry(t, r, reply, "symlink")
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let t = Instant::now();
        let r = self.fs.rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), flags.bits());
        self.empty(OpClass::Other, t, r, reply, "rename")
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let t = Instant::now();
        self.entry(t, self.fs.link(ino.0, newparent.0, newname.as_bytes()), reply, "link")
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let t = Instant::now();
        let r = self.fs.getattr(ino.0);
        self.count(OpClass::Other, 0, t, r.as_ref().is_ok_and(|a| a.mode & libc::S_IFMT != libc::S_IFDIR));
        match r {
            Ok(a) if a.mode & libc::S_IFMT == libc::S_IFDIR => reply.error(Errno::from_i32(libc::EISDIR)),
            Ok(_) => reply.opened(FileHandle(0), self.open_flags()),
            Err(e) => reply.error(errno(&e, "open")),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let t = Instant::now();
        match self.fs.read(ino.0, offset, size) {
            Ok(d) => {
                self.count(OpClass::Read, d.len() as u64, t, true);
                reply.data(&d)
            }
            Err(e) => {
                self.count(OpClass::Read, 0, t, false);
                reply.error(errno(&e, "read"))
            }
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let t = Instant::now();
        match self.fs.write(ino.0, offset, data) {
            Ok(n) => {
                self.count(OpClass::Write, u64::from(n), t, true);
                reply.written(n)
            }
            Err(e) => {
                self.count(OpClass::Write, 0, t, false);
                reply.error(errno(&e, "write"))
            }
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        let t = Instant::now();
        self.count(OpClass::Other, 0, t, true);
        reply.ok()
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let t = Instant::now();
        self.empty(OpClass::Sync, t, self.fs.fsync(ino.0), reply, "fsync")
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let t = Instant::now();
        // The listing is taken once per open: offsets stay stable while the directory
        // changes underneath (as POSIX allows: entries added or removed after opendir may
        // or may not be seen).
        let r = self.fs.readdir(ino.0);
        self.count(OpClass::Other, 0, t, r.is_ok());
        match r {
            Ok(list) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.dirs.lock().expect("dir handles").insert(fh, Arc::new(list));
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(errno(&e, "opendir")),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let t = Instant::now();
        let list = self.dirs.lock().expect("dir handles").get(&fh.0).cloned();
        let list = match list {
            Some(l) => l,
            None => match self.fs.readdir(ino.0) {
                Ok(l) => Arc::new(l),
                Err(e) => {
                    self.count(OpClass::Other, 0, t, false);
                    return reply.error(errno(&e, "readdir"));
                }
            },
        };
        for (i, e) in list.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(e.ino), i as u64 + 1, dkind(e.dtype), OsStr::from_bytes(&e.name)) {
                break;
            }
        }
        self.count(OpClass::Other, 0, t, true);
        reply.ok()
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let t = Instant::now();
        self.dirs.lock().expect("dir handles").remove(&fh.0);
        self.count(OpClass::Other, 0, t, true);
        reply.ok()
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let t = Instant::now();
        self.empty(OpClass::Sync, t, self.fs.fsync(ino.0), reply, "fsyncdir")
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let t = Instant::now();
        let r = self.fs.statfs();
        self.count(OpClass::Other, 0, t, r.is_ok());
        match r {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_avail,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(errno(&e, "statfs")),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let t = Instant::now();
        self.empty(OpClass::Other, t, self.fs.setxattr(ino.0, name.as_bytes(), value, flags), reply, "setxattr")
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let t = Instant::now();
        let r = self.fs.getxattr(ino.0, name.as_bytes());
        self.count(OpClass::Other, 0, t, r.is_ok());
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e, "getxattr")),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let t = Instant::now();
        let r = self.fs.listxattr(ino.0);
        self.count(OpClass::Other, 0, t, r.is_ok());
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e, "listxattr")),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let t = Instant::now();
        self.empty(OpClass::Other, t, self.fs.removexattr(ino.0, name.as_bytes()), reply, "removexattr")
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let t = Instant::now();
        self.count(OpClass::Other, 0, t, true);
        reply.ok() // the kernel checks permissions (default_permissions)
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let t = Instant::now();
        let r = self.fs.mknod(caller(req), parent.0, name.as_bytes(), mode & !umask, 0);
        self.count(OpClass::Other, 0, t, r.is_ok());
        match r {
            Ok(a) => {
                self.fs.remember(a.ino);
                reply.created(&self.opts.ttl, &fattr(&a), Generation(0), FileHandle(0), self.open_flags())
            }
            Err(e) => reply.error(errno(&e, "create")),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let t = Instant::now();
        // Punching or zeroing a range releases space and carries no data: trim.
        let trim = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
        let class = if trim { OpClass::Trim } else { OpClass::Other };
        self.empty(class, t, self.fs.fallocate(ino.0, offset, length, mode), reply, "fallocate")
    }
}

/// Mount `fs` at `mountpoint`; the returned session unmounts when dropped.
pub fn mount(fs: Arc<VolumeFs>, mountpoint: &Path, opts: MountOptions) -> std::io::Result<BackgroundSession> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype("strata".into()),
        MountOption::DefaultPermissions,
        MountOption::RW,
        // Files of a volume may be written by others than the host's root (NFS clients with
        // no_root_squash, operators who export volumes): a set-user-id binary or a device
        // node on the mount must not become root on this host. Databases need neither.
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    config.acl = SessionACL::All;
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = opts.threads > 1;
    fuser::spawn_mount(StrataFuse::new(fs, opts), mountpoint, &config)
}

/// Tell the kernel that file `ino` changed behind its back (a single-file restore): drop
/// its cached pages and attributes, and the cached entry `name` in `parent`.
pub fn invalidate(session: &BackgroundSession, ino: u64, parent: u64, name: &OsStr) {
    let n = session.notifier();
    if let Err(e) = n.inval_inode(INodeNo(ino), 0, 0) {
        tracing::debug!(ino, "inval_inode: {e}");
    }
    if let Err(e) = n.inval_entry(INodeNo(parent), name) {
        tracing::debug!(parent, "inval_entry: {e}");
    }
}
