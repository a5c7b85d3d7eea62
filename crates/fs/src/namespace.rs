//! Names and attributes: lookup, create, mkdir, symlink, link, unlink, rmdir, rename,
//! readdir, setattr and xattrs. Each is one engine txn (see lib.rs): checks first, then
//! changes, so that an error leaves nothing half-done.
//!
//! Directory entries and keys come from disk and are decoded in `keys.rs`; indexing,
//! slicing, `unwrap` and `expect` are denied here too (docs/failure-policy.md).
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

use crate::inode::{InodePhys, S_IFDIR, S_IFLNK, S_IFMT};
use crate::keys::{decode_entry, encode_entry, key_parts};
use crate::snapdir::{is_snapshot_ino, SNAPDIR_INO};
use crate::{dir_key, err, ino_key, Attr, Caller, FsError, FsResult, VolumeFs, NAME_MAX, SYMLINK_MAX, XATTR_VALUE_MAX};
use strata_engine::{ObjectId, PoolGuard};

/// One directory entry as readdir returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    /// DT_* type.
    pub dtype: u8,
}

/// What setattr may change; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    /// `Some(None)` = now.
    pub atime_ns: Option<Option<i64>>,
    pub mtime_ns: Option<Option<i64>>,
    /// A size change clears set-user-id and set-group-id (the caller lacks CAP_FSETID:
    /// not root). chown always clears them on non-directories.
    pub kill_suid: bool,
}

/// Flags of rename(2) (renameat2).
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return err(libc::EINVAL);
    }
    if name.len() > NAME_MAX {
        return err(libc::ENAMETOOLONG);
    }
    Ok(())
}

impl VolumeFs {
    fn entry(&self, t: &mut PoolGuard<'_>, parent: u64, name: &[u8]) -> FsResult<Option<(u64, u8)>> {
        match t.kv_get(self.vol, &dir_key(parent, name))? {
            Some(v) => Ok(Some(decode_entry(&v)?)),
            None => Ok(None),
        }
    }

    fn dir(&self, t: &mut PoolGuard<'_>, ino: u64) -> FsResult<InodePhys> {
        let d = self.load(t, ino)?;
        if !d.is_dir() {
            return err(libc::ENOTDIR);
        }
        Ok(d)
    }

    fn dir_is_empty(&self, t: &mut PoolGuard<'_>, ino: u64) -> FsResult<bool> {
        Ok(t.kv_range(self.vol, &dir_key(ino, b""), Some(&dir_key(ino + 1, b"")), 1)?.is_empty())
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> FsResult<Attr> {
        if let Some(r) = self.snap_lookup(parent, name) {
            return r;
        }
        if name.len() > NAME_MAX {
            return err(libc::ENAMETOOLONG);
        }
        let mut t = self.pool.guard_for_data();
        let p = self.dir(&mut t, parent)?;
        let ino = match name {
            b"." => parent,
            b".." => p.parent,
            _ => self.entry(&mut t, parent, name)?.ok_or(FsError::new(libc::ENOENT))?.0,
        };
        let i = self.load(&mut t, ino)?;
        self.attr_of(&mut t, ino, &i)
    }

    /// Create a non-directory inode (regular file, fifo, socket, device) or, with
    /// `S_IFDIR` in `mode`, a directory; `target` makes a symlink.
    fn make(
        &self,
        who: Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        target: Option<&[u8]>,
    ) -> FsResult<Attr> {
        check_name(name)?;
        if target.is_some_and(|t| t.len() > SYMLINK_MAX) {
            return err(libc::ENAMETOOLONG);
        }
        let now = self.now();
        self.mutate(|t| {
            let mut p = self.dir(t, parent)?;
            if p.nlink == 0 {
                return err(libc::ENOENT); // the directory was removed while open
            }
            if self.entry(t, parent, name)?.is_some() {
                return err(libc::EEXIST);
            }
            let is_dir = mode & S_IFMT == S_IFDIR;
            // A set-group-id directory passes its group on (and its bit, to directories).
            let sgid_parent = p.mode & libc::S_ISGID != 0;
            let gid = if sgid_parent { p.gid } else { who.gid };
            let mut mode = mode;
            if sgid_parent && is_dir {
                mode |= libc::S_ISGID;
            }
            let i = InodePhys {
                mode,
                uid: who.uid,
                gid,
                nlink: if is_dir { 2 } else { 1 },
                rdev,
                atime_ns: now,
                mtime_ns: now,
                ctime_ns: now,
                crtime_ns: now,
                parent: if is_dir { parent } else { 0 },
            };
            let ino = t.create_object(self.vol, &i.encode())?.0;
            if let Some(target) = target {
                self.store_symlink_target(t, ino, target)?;
            }
            t.kv_put(self.vol, &dir_key(parent, name), &encode_entry(ino, i.dtype()))?;
            if is_dir {
                p.nlink += 1;
            }
            p.mtime_ns = now;
            p.ctime_ns = now;
            self.store(t, parent, &p)?;
            self.attr_of(t, ino, &i)
        })
    }

    pub fn mknod(&self, who: Caller, parent: u64, name: &[u8], mode: u32, rdev: u32) -> FsResult<Attr> {
        self.refuse_in_snapshot(&[parent])?;
        let kind = mode & S_IFMT;
        let kind = if kind == 0 { libc::S_IFREG } else { kind };
        if ![libc::S_IFREG, libc::S_IFIFO, libc::S_IFSOCK, libc::S_IFCHR, libc::S_IFBLK].contains(&kind) {
            return err(libc::EINVAL);
        }
        self.make(who, parent, name, kind | (mode & 0o7777), rdev, None)
    }

    pub fn mkdir(&self, who: Caller, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
        self.refuse_in_snapshot(&[parent])?;
        self.make(who, parent, name, S_IFDIR | (mode & 0o7777), 0, None)
    }

    pub fn symlink(&self, who: Caller, parent: u64, name: &[u8], target: &[u8]) -> FsResult<Attr> {
        self.refuse_in_snapshot(&[parent])?;
        if target.is_empty() {
            return err(libc::ENOENT);
        }
        self.make(who, parent, name, S_IFLNK | 0o777, 0, Some(target))
    }

    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        if is_snapshot_ino(ino) {
            let (fs, local) = self.snap_file(ino)?;
            return fs.readlink(local);
        }
        let mut t = self.pool.guard_for_data();
        let i = self.load(&mut t, ino)?;
        if !i.is_symlink() {
            return err(libc::EINVAL);
        }
        self.symlink_target(&mut t, ino)
    }

    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> FsResult<Attr> {
        self.refuse_in_snapshot(&[ino, newparent])?;
        check_name(newname)?;
        let now = self.now();
        self.mutate(|t| {
            let mut i = self.load(t, ino)?;
            if i.is_dir() {
                return err(libc::EPERM);
            }
            if i.nlink == 0 {
                return err(libc::ENOENT);
            }
            let mut p = self.dir(t, newparent)?;
            if self.entry(t, newparent, newname)?.is_some() {
                return err(libc::EEXIST);
            }
            if i.nlink >= 65000 {
                return err(libc::EMLINK);
            }
            t.kv_put(self.vol, &dir_key(newparent, newname), &encode_entry(ino, i.dtype()))?;
            i.nlink += 1;
            i.ctime_ns = now;
            self.store(t, ino, &i)?;
            p.mtime_ns = now;
            p.ctime_ns = now;
            self.store(t, newparent, &p)?;
            self.attr_of(t, ino, &i)
        })
    }

    /// Drop one name of `ino` (already removed from its directory): the inode goes when
    /// no name and no kernel reference is left.
    fn drop_link(&self, t: &mut PoolGuard<'_>, ino: u64, mut i: InodePhys, now: i64) -> FsResult<()> {
        if i.is_dir() {
            i.nlink = 0;
        } else {
            i.nlink = i.nlink.saturating_sub(1);
        }
        i.ctime_ns = now;
        if i.nlink > 0 {
            return self.store(t, ino, &i);
        }
        if self.referenced(ino) {
            self.store(t, ino, &i)?;
            t.kv_put(self.vol, &ino_key(b'O', ino), b"")?;
            Ok(())
        } else {
            self.destroy_inode(t, ino)
        }
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> FsResult<()> {
        self.refuse_in_snapshot(&[parent])?;
        self.remove(parent, name, false)
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> FsResult<()> {
        self.refuse_in_snapshot(&[parent])?;
        if name == b"." {
            return err(libc::EINVAL);
        }
        if name == b".." {
            return err(libc::ENOTEMPTY);
        }
        self.remove(parent, name, true)
    }

    fn remove(&self, parent: u64, name: &[u8], want_dir: bool) -> FsResult<()> {
        if name.len() > NAME_MAX {
            return err(libc::ENAMETOOLONG);
        }
        let now = self.now();
        self.mutate(|t| {
            let mut p = self.dir(t, parent)?;
            let (ino, _) = self.entry(t, parent, name)?.ok_or(FsError::new(libc::ENOENT))?;
            let i = self.load(t, ino)?;
            match (want_dir, i.is_dir()) {
                (true, false) => return err(libc::ENOTDIR),
                (false, true) => return err(libc::EISDIR),
                (true, true) if !self.dir_is_empty(t, ino)? => return err(libc::ENOTEMPTY),
                _ => {}
            }
            t.kv_delete(self.vol, &dir_key(parent, name))?;
            if i.is_dir() {
                p.nlink -= 1;
            }
            p.mtime_ns = now;
            p.ctime_ns = now;
            self.store(t, parent, &p)?;
            self.drop_link(t, ino, i, now)
        })
    }

    /// Is `ino` the directory `dir` or inside it? (Walks `..` from `ino` to the root.)
    fn is_within(&self, t: &mut PoolGuard<'_>, mut ino: u64, dir: u64) -> FsResult<bool> {
        for _ in 0..4096 {
            if ino == dir {
                return Ok(true);
            }
            if ino == crate::ROOT_INO {
                return Ok(false);
            }
            ino = self.load(t, ino)?.parent;
        }
        Err(FsError { errno: libc::EIO, detail: Some("directory parent chain does not reach the root".into()) })
    }

    pub fn rename(&self, parent: u64, name: &[u8], newparent: u64, newname: &[u8], flags: u32) -> FsResult<()> {
        self.refuse_in_snapshot(&[parent, newparent])?;
        check_name(newname)?;
        if name.len() > NAME_MAX {
            return err(libc::ENAMETOOLONG);
        }
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags & (RENAME_NOREPLACE | RENAME_EXCHANGE) == (RENAME_NOREPLACE | RENAME_EXCHANGE)
        {
            return err(libc::EINVAL);
        }
        let now = self.now();
        self.mutate(|t| {
            self.dir(t, parent)?;
            self.dir(t, newparent)?;
            let (src, _) = self.entry(t, parent, name)?.ok_or(FsError::new(libc::ENOENT))?;
            let mut si = self.load(t, src)?;
            let dst = self.entry(t, newparent, newname)?;
            if parent == newparent && name == newname {
                return Ok(());
            }
            if flags & RENAME_EXCHANGE != 0 {
                let (dst, _) = dst.ok_or(FsError::new(libc::ENOENT))?;
                return self.exchange(t, (parent, name, src, si), (newparent, newname, dst), now);
            }
            if si.is_dir() && self.is_within(t, newparent, src)? {
                return err(libc::EINVAL);
            }
            if let Some((dst, _)) = dst {
                if flags & RENAME_NOREPLACE != 0 {
                    return err(libc::EEXIST);
                }
                if dst == src {
                    return Ok(()); // two names of one inode: POSIX says do nothing
                }
                let di = self.load(t, dst)?;
                match (si.is_dir(), di.is_dir()) {
                    (true, false) => return err(libc::ENOTDIR),
                    (false, true) => return err(libc::EISDIR),
                    (true, true) if !self.dir_is_empty(t, dst)? => return err(libc::ENOTEMPTY),
                    _ => {}
                }
                if di.is_dir() {
                    let mut np = self.load(t, newparent)?;
                    np.nlink -= 1;
                    self.store(t, newparent, &np)?;
                }
                self.drop_link(t, dst, di, now)?;
            }
            t.kv_delete(self.vol, &dir_key(parent, name))?;
            t.kv_put(self.vol, &dir_key(newparent, newname), &encode_entry(src, si.dtype()))?;
            si.ctime_ns = now;
            if si.is_dir() && parent != newparent {
                si.parent = newparent;
                let mut op = self.load(t, parent)?;
                op.nlink -= 1;
                self.store(t, parent, &op)?;
                let mut np = self.load(t, newparent)?;
                np.nlink += 1;
                self.store(t, newparent, &np)?;
            }
            self.store(t, src, &si)?;
            for d in [parent, newparent] {
                let mut di = self.load(t, d)?;
                di.mtime_ns = now;
                di.ctime_ns = now;
                self.store(t, d, &di)?;
            }
            Ok(())
        })
    }

    fn exchange(
        &self,
        t: &mut PoolGuard<'_>,
        a: (u64, &[u8], u64, InodePhys),
        b: (u64, &[u8], u64),
        now: i64,
    ) -> FsResult<()> {
        let (pa, na, ia, mut ai) = a;
        let (pb, nb, ib) = b;
        let mut bi = self.load(t, ib)?;
        if pa != pb && (ai.is_dir() && self.is_within(t, pb, ia)? || bi.is_dir() && self.is_within(t, pa, ib)?) {
            return err(libc::EINVAL);
        }
        t.kv_put(self.vol, &dir_key(pa, na), &encode_entry(ib, bi.dtype()))?;
        t.kv_put(self.vol, &dir_key(pb, nb), &encode_entry(ia, ai.dtype()))?;
        if pa != pb && ai.is_dir() != bi.is_dir() {
            // A directory moves from one parent to the other: their link counts follow.
            let (gains, loses) = if ai.is_dir() { (pb, pa) } else { (pa, pb) };
            let mut g = self.load(t, gains)?;
            g.nlink += 1;
            self.store(t, gains, &g)?;
            let mut l = self.load(t, loses)?;
            l.nlink -= 1;
            self.store(t, loses, &l)?;
        }
        if ai.is_dir() {
            ai.parent = pb;
        }
        if bi.is_dir() {
            bi.parent = pa;
        }
        ai.ctime_ns = now;
        bi.ctime_ns = now;
        self.store(t, ia, &ai)?;
        self.store(t, ib, &bi)?;
        for d in [pa, pb] {
            let mut di = self.load(t, d)?;
            di.mtime_ns = now;
            di.ctime_ns = now;
            self.store(t, d, &di)?;
        }
        Ok(())
    }

    /// Every entry of directory `ino`, "." and ".." first.
    pub fn readdir(&self, ino: u64) -> FsResult<Vec<DirEntry>> {
        if is_snapshot_ino(ino) {
            return self.snap_readdir(ino);
        }
        let mut t = self.pool.guard_for_data();
        let d = self.dir(&mut t, ino)?;
        let mut out = vec![
            DirEntry { name: b".".to_vec(), ino, dtype: libc::DT_DIR },
            DirEntry { name: b"..".to_vec(), ino: d.parent, dtype: libc::DT_DIR },
        ];
        let mut start = dir_key(ino, b"");
        let end = dir_key(ino + 1, b"");
        loop {
            let batch = t.kv_range(self.vol, &start, Some(&end), 4096)?;
            let Some((last, _)) = batch.last() else { break };
            start = last.clone();
            start.push(0);
            for (k, v) in batch {
                let (child, dtype) = decode_entry(&v)?;
                let (_, name) = key_parts(&k)?;
                out.push(DirEntry { name: name.to_vec(), ino: child, dtype });
            }
        }
        Ok(out)
    }

    pub fn setattr(&self, ino: u64, set: SetAttr) -> FsResult<Attr> {
        self.refuse_in_snapshot(&[ino])?;
        let now = self.now();
        self.mutate(|t| {
            let mut i = self.load(t, ino)?;
            if let Some(mode) = set.mode {
                i.mode = (i.mode & S_IFMT) | (mode & 0o7777);
            }
            if set.uid.is_some() || set.gid.is_some() {
                // chown clears set-user-id and set-group-id of non-directories, and file
                // capabilities (Linux).
                if !i.is_dir() {
                    self.kill_privs(t, ino, &mut i)?;
                }
                i.uid = set.uid.unwrap_or(i.uid);
                i.gid = set.gid.unwrap_or(i.gid);
            }
            if let Some(size) = set.size {
                if i.is_dir() {
                    return err(libc::EISDIR);
                }
                if !i.is_reg() {
                    return err(libc::EINVAL);
                }
                if size > i64::MAX as u64 {
                    return err(libc::EFBIG);
                }
                t.truncate(self.vol, ObjectId(ino), size)?;
                i.mtime_ns = now;
                if set.kill_suid {
                    self.kill_privs(t, ino, &mut i)?;
                }
            }
            if let Some(a) = set.atime_ns {
                i.atime_ns = a.unwrap_or(now);
            }
            if let Some(m) = set.mtime_ns {
                i.mtime_ns = m.unwrap_or(now);
            }
            i.ctime_ns = now;
            self.store(t, ino, &i)?;
            self.attr_of(t, ino, &i)
        })
    }

    fn xattr_key(ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        if name.is_empty() || name.len() > NAME_MAX {
            return err(libc::ERANGE);
        }
        let mut k = ino_key(b'X', ino);
        k.extend_from_slice(name);
        Ok(k)
    }

    /// `flags`: XATTR_CREATE (fail if present), XATTR_REPLACE (fail if absent).
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> FsResult<()> {
        self.refuse_in_snapshot(&[ino])?;
        if name.starts_with(b"system.") {
            return err(libc::EOPNOTSUPP); // no POSIX ACLs
        }
        if value.len() > XATTR_VALUE_MAX {
            return err(libc::E2BIG);
        }
        let key = Self::xattr_key(ino, name)?;
        let now = self.now();
        self.mutate(|t| {
            let mut i = self.load(t, ino)?;
            let exists = t.kv_get(self.vol, &key)?.is_some();
            if flags & libc::XATTR_CREATE != 0 && exists {
                return err(libc::EEXIST);
            }
            if flags & libc::XATTR_REPLACE != 0 && !exists {
                return err(libc::ENODATA);
            }
            t.kv_put(self.vol, &key, value)?;
            i.ctime_ns = now;
            self.store(t, ino, &i)
        })
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        if ino == SNAPDIR_INO {
            return err(libc::ENODATA);
        }
        if is_snapshot_ino(ino) {
            let (fs, local) = self.snap_file(ino)?;
            return fs.getxattr(local, name);
        }
        let key = Self::xattr_key(ino, name)?;
        let mut t = self.pool.guard_for_data();
        self.load(&mut t, ino)?;
        t.kv_get(self.vol, &key)?.ok_or(FsError::new(libc::ENODATA))
    }

    /// Names, each followed by a NUL, as listxattr(2) returns them.
    pub fn listxattr(&self, ino: u64) -> FsResult<Vec<u8>> {
        if ino == SNAPDIR_INO {
            return Ok(Vec::new());
        }
        if is_snapshot_ino(ino) {
            let (fs, local) = self.snap_file(ino)?;
            return fs.listxattr(local);
        }
        let mut t = self.pool.guard_for_data();
        self.load(&mut t, ino)?;
        let mut out = Vec::new();
        for (k, _) in t.kv_range(self.vol, &ino_key(b'X', ino), Some(&ino_key(b'X', ino + 1)), usize::MAX)? {
            out.extend_from_slice(key_parts(&k)?.1);
            out.push(0);
        }
        Ok(out)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> FsResult<()> {
        self.refuse_in_snapshot(&[ino])?;
        let key = Self::xattr_key(ino, name)?;
        let now = self.now();
        self.mutate(|t| {
            let mut i = self.load(t, ino)?;
            if t.kv_delete(self.vol, &key)?.is_none() {
                return err(libc::ENODATA);
            }
            i.ctime_ns = now;
            self.store(t, ino, &i)
        })
    }
}
