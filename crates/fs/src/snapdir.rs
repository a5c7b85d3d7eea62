//! The hidden `.snapshot` directory: every snapshot of the volume, read-only, under
//! `.snapshot/NAME/` in the root (like ONTAP's `.snapshot` and ZFS's `.zfs/snapshot`).
//!
//! It is not listed by readdir of the root (an empty volume stays empty for `initdb` and
//! `mysql_install_db`), but lookup finds it. Each snapshot is served by a read-only
//! [`VolumeFs`] over an engine snapshot view, opened on first use. Inode numbers of files in
//! snapshots carry the top bit, a slot number per snapshot (bits 40..62) and the inode
//! number inside the snapshot (bits 0..39), so they never collide with the live volume's.

use crate::inode::S_IFDIR;
use crate::{err, Attr, DirEntry, FsError, FsResult, VolumeFs, ROOT_INO};
use std::sync::{Arc, Mutex};
use strata_engine::{ErrorKind, VolumeId};

pub const SNAPSHOT_DIR_NAME: &[u8] = b".snapshot";
const SNAP_BIT: u64 = 1 << 63;
const SLOT_SHIFT: u32 = 40;
const LOCAL_MASK: u64 = (1 << SLOT_SHIFT) - 1;
const SLOT_MAX: u64 = (1 << (63 - SLOT_SHIFT)) - 1;
/// The `.snapshot` directory itself (slot 0).
pub const SNAPDIR_INO: u64 = SNAP_BIT;

pub fn is_snapshot_ino(ino: u64) -> bool {
    ino & SNAP_BIT != 0
}

struct Slot {
    name: String,
    view: VolumeId,
    fs: Option<Arc<VolumeFs>>,
}

#[derive(Default)]
pub(crate) struct SnapDir {
    slots: Mutex<Vec<Slot>>,
}

fn encode(slot: usize, local: u64) -> u64 {
    SNAP_BIT | (slot as u64) << SLOT_SHIFT | local
}

fn map_attr(mut a: Attr, slot: usize) -> Attr {
    a.ino = encode(slot, a.ino);
    a
}

impl Drop for SnapDir {
    fn drop(&mut self) {
        for s in self.slots.lock().expect("snapshot slots").iter() {
            if let Some(fs) = &s.fs {
                fs.pool().close_snapshot_view(s.view);
            }
        }
    }
}

impl VolumeFs {
    fn snapdir(&self) -> FsResult<&SnapDir> {
        self.snapdir.as_ref().ok_or(FsError::new(libc::ENOENT))
    }

    fn volume_name(&self) -> FsResult<String> {
        Ok(self.pool.volume_info(self.vol)?.name)
    }

    fn snapdir_attr(&self) -> FsResult<Attr> {
        let root = self.getattr(ROOT_INO)?;
        Ok(Attr { ino: SNAPDIR_INO, size: 4096, blocks: 0, mode: S_IFDIR | 0o555, nlink: 2, ..root })
    }

    /// The slot of snapshot `name`, opening its view (and file system) if needed.
    fn slot_for(&self, name: &[u8]) -> FsResult<(usize, Arc<VolumeFs>)> {
        let name = std::str::from_utf8(name).map_err(|_| FsError::new(libc::ENOENT))?;
        let vol = self.volume_name()?;
        let info = self.pool.snapshot(&vol, name).map_err(|e| match e.kind() {
            ErrorKind::NotFound | ErrorKind::InvalidArgument => FsError::new(libc::ENOENT),
            _ => e.into(),
        })?;
        let view_id = VolumeId(info.id);
        let mut slots = self.snapdir()?.slots.lock().expect("snapshot slots");
        let idx = match slots.iter().position(|s| s.view == view_id) {
            Some(i) => i,
            None => {
                if slots.len() as u64 >= SLOT_MAX {
                    return err(libc::ENFILE);
                }
                slots.push(Slot { name: name.to_string(), view: view_id, fs: None });
                slots.len() - 1
            }
        };
        if slots[idx].fs.is_none() {
            let view = self.pool.open_snapshot_view(&vol, name)?;
            let fs = VolumeFs::mount_read_only(self.pool.clone(), view, self.clock.clone())?;
            slots[idx].fs = Some(Arc::new(fs));
        }
        Ok((idx + 1, slots[idx].fs.clone().expect("opened above")))
    }

    /// The snapshot file system and inode inside it for a snapshot inode number.
    fn resolve(&self, ino: u64) -> FsResult<(usize, Arc<VolumeFs>, u64)> {
        let slot = ((ino & !SNAP_BIT) >> SLOT_SHIFT) as usize;
        let local = ino & LOCAL_MASK;
        let name = {
            let slots = self.snapdir()?.slots.lock().expect("snapshot slots");
            let s = slot.checked_sub(1).and_then(|i| slots.get(i)).ok_or(FsError::new(libc::ESTALE))?;
            if let Some(fs) = &s.fs {
                return Ok((slot, fs.clone(), local));
            }
            s.name.clone()
        };
        let (slot, fs) = self.slot_for(name.as_bytes())?;
        Ok((slot, fs, local))
    }

    /// lookup() for names in the root (`.snapshot`), in `.snapshot` and inside snapshots.
    pub(crate) fn snap_lookup(&self, parent: u64, name: &[u8]) -> Option<FsResult<Attr>> {
        if parent == ROOT_INO && name == SNAPSHOT_DIR_NAME && self.snapdir.is_some() {
            return Some(self.snapdir_attr());
        }
        if parent == SNAPDIR_INO {
            return Some(match name {
                b"." => self.snapdir_attr(),
                b".." => self.getattr(ROOT_INO),
                _ => self.slot_for(name).and_then(|(slot, fs)| Ok(map_attr(fs.getattr(ROOT_INO)?, slot))),
            });
        }
        if !is_snapshot_ino(parent) {
            return None;
        }
        Some(self.resolve(parent).and_then(|(slot, fs, local)| {
            if local == ROOT_INO && name == b".." {
                return self.snapdir_attr();
            }
            Ok(map_attr(fs.lookup(local, name)?, slot))
        }))
    }

    pub(crate) fn snap_getattr(&self, ino: u64) -> FsResult<Attr> {
        if ino == SNAPDIR_INO {
            return self.snapdir_attr();
        }
        let (slot, fs, local) = self.resolve(ino)?;
        Ok(map_attr(fs.getattr(local)?, slot))
    }

    pub(crate) fn snap_readdir(&self, ino: u64) -> FsResult<Vec<DirEntry>> {
        if ino == SNAPDIR_INO {
            let mut out = vec![
                DirEntry { name: b".".to_vec(), ino: SNAPDIR_INO, dtype: libc::DT_DIR },
                DirEntry { name: b"..".to_vec(), ino: ROOT_INO, dtype: libc::DT_DIR },
            ];
            for s in self.pool.snapshots(Some(&self.volume_name()?))? {
                let (slot, _) = self.slot_for(s.name.as_bytes())?;
                out.push(DirEntry { name: s.name.into_bytes(), ino: encode(slot, ROOT_INO), dtype: libc::DT_DIR });
            }
            return Ok(out);
        }
        let (slot, fs, local) = self.resolve(ino)?;
        let mut list = fs.readdir(local)?;
        for e in &mut list {
            e.ino = if local == ROOT_INO && e.name == b".." { SNAPDIR_INO } else { encode(slot, e.ino) };
        }
        Ok(list)
    }

    /// The file system and local inode serving a snapshot inode (for reads).
    pub(crate) fn snap_file(&self, ino: u64) -> FsResult<(Arc<VolumeFs>, u64)> {
        if ino == SNAPDIR_INO {
            return err(libc::EISDIR);
        }
        let (_, fs, local) = self.resolve(ino)?;
        Ok((fs, local))
    }

    /// Refuse changes that touch a snapshot.
    pub(crate) fn refuse_in_snapshot(&self, inos: &[u64]) -> FsResult<()> {
        if inos.iter().any(|&i| is_snapshot_ino(i)) {
            return err(libc::EROFS);
        }
        Ok(())
    }
}

/// What a single-file restore did: the file's inode (in the live volume), whether it was
/// created anew, and how the data got there.
#[derive(Debug, Clone, Copy)]
pub struct FileRestore {
    pub ino: u64,
    pub parent: u64,
    pub created: bool,
    pub stats: strata_engine::FileRestoreStats,
}

impl VolumeFs {
    /// Put file `path` (relative to the volume's root) back as it is in snapshot `name`: its
    /// data (sharing the snapshot's blocks where the volume no longer holds them), size,
    /// mode, owner and times. A file missing from the volume is created; a path that is not
    /// a regular file in either is refused.
    pub fn restore_file(&self, name: &str, path: &[u8]) -> FsResult<FileRestore> {
        let parts: Vec<&[u8]> = path.split(|&b| b == b'/').filter(|p| !p.is_empty() && *p != b".").collect();
        let Some((&leaf, dirs)) = parts.split_last() else {
            return Err(FsError { errno: libc::EISDIR, detail: Some("the volume's root is not a file".into()) });
        };
        if parts.iter().any(|p| *p == b".." || *p == SNAPSHOT_DIR_NAME) {
            return Err(FsError { errno: libc::EINVAL, detail: Some("give a plain path inside the volume".into()) });
        }
        let (_, snap) = self.slot_for(name.as_bytes())?;
        let mut src = ROOT_INO;
        for d in dirs {
            src = snap.lookup(src, d)?.ino;
        }
        let src_attr = snap.lookup(src, leaf)?;
        if src_attr.mode & libc::S_IFMT != libc::S_IFREG {
            return Err(FsError {
                errno: libc::EISDIR,
                detail: Some(
                    "only regular files are restored one by one; restore the volume, or copy from .snapshot".into(),
                ),
            });
        }
        let mut parent = ROOT_INO;
        for d in dirs {
            let a = self.lookup(parent, d).map_err(|e| FsError {
                errno: e.errno,
                detail: Some(format!(
                    "directory {:?} of the path is missing in the volume: create it first",
                    String::from_utf8_lossy(d)
                )),
            })?;
            parent = a.ino;
        }
        let (ino, created) = match self.lookup(parent, leaf) {
            Ok(a) if a.mode & libc::S_IFMT == libc::S_IFREG => (a.ino, false),
            Ok(_) => {
                return Err(FsError {
                    errno: libc::EEXIST,
                    detail: Some("the path exists in the volume and is not a regular file".into()),
                })
            }
            Err(e) if e.errno == libc::ENOENT => {
                let who = crate::Caller { uid: src_attr.uid, gid: src_attr.gid };
                (self.mknod(who, parent, leaf, src_attr.mode, 0)?.ino, true)
            }
            Err(e) => return Err(e),
        };
        let view = VolumeId(self.pool.snapshot(&self.volume_name()?, name)?.id);
        let stats = self.pool.restore_object(
            self.vol,
            strata_engine::ObjectId(ino),
            view,
            strata_engine::ObjectId(src_attr.ino),
        )?;
        let local_src = snap.getattr(src_attr.ino)?;
        self.setattr(
            ino,
            crate::SetAttr {
                mode: Some(local_src.mode & 0o7777),
                uid: Some(local_src.uid),
                gid: Some(local_src.gid),
                size: None,
                atime_ns: Some(Some(local_src.atime_ns)),
                mtime_ns: Some(Some(local_src.mtime_ns)),
                kill_suid: false,
            },
        )?;
        Ok(FileRestore { ino, parent, created, stats })
    }
}
