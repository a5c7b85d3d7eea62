//! A LUN over a volume: the file `lun` in the volume's root directory, marked by the
//! xattr `trusted.strata.lun` (`v1 block=4096`). A snapshot of the volume holds the LUN as
//! it was; a clone is a LUN of its own.

use crate::{check_range, Extent, Lun, LunError, LunErrorKind, LunResult};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use strata_fs::{Caller, FsError, SetAttr, SharedBytes, VolumeFs, ROOT_INO};

/// The LUN's file in the volume's root directory.
pub const LUN_FILE: &str = "lun";
/// The xattr that marks a volume's `lun` file as its LUN, with its logical block size.
pub const LUN_XATTR: &str = "trusted.strata.lun";
/// Most an allocation-map query walks at once (the caller asks again from where it ends).
const EXTENTS_MAX: u64 = 64 << 20;
/// Largest piece of zeros written at a time by `write_zeroes` without trimming.
const ZERO_CHUNK: u64 = 1 << 20;
/// How often a write also updates the LUN file's inode (mtime, ctime; dropping setuid and
/// capabilities): the others write the data only (`VolumeFs::write_data_only`).
const TIMES_EVERY_MS: u64 = 1000;

pub struct VolumeLun {
    fs: Arc<VolumeFs>,
    ino: u64,
    size: AtomicU64,
    block_size: u32,
    preferred: u32,
    read_only: bool,
    identity: [u8; 16],
    /// Since when `times_at` counts.
    epoch: std::time::Instant,
    /// 1 + the millisecond (since `epoch`) of the last write that updated the inode; 0: none.
    times_at: AtomicU64,
}

fn fs_err(what: &str, e: FsError) -> LunError {
    let kind = match e.errno {
        libc::ENOSPC | libc::EDQUOT => LunErrorKind::NoSpace,
        libc::EROFS | libc::EPERM | libc::EACCES => LunErrorKind::ReadOnly,
        libc::EINVAL => LunErrorKind::Invalid,
        _ => LunErrorKind::Io,
    };
    LunError::new(kind, format!("{what}: {e}"))
}

fn marker(block_size: u32) -> Vec<u8> {
    format!("v1 block={block_size}").into_bytes()
}

fn parse_marker(v: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(v).ok()?;
    let rest = s.strip_prefix("v1 block=")?;
    let b: u32 = rest.trim().parse().ok()?;
    matches!(b, 512 | 4096).then_some(b)
}

impl VolumeLun {
    /// Make the volume mounted as `fs` a LUN of `size` bytes (a multiple of `block_size`,
    /// 512 or 4096). Refused when the volume already holds files.
    pub fn create(fs: &VolumeFs, size: u64, block_size: u32) -> LunResult<()> {
        if !matches!(block_size, 512 | 4096) {
            return Err(LunError::new(LunErrorKind::Invalid, format!("block size {block_size}: use 512 or 4096")));
        }
        if size == 0 || !size.is_multiple_of(block_size as u64) {
            return Err(LunError::new(
                LunErrorKind::Invalid,
                format!("LUN size {size} must be a positive multiple of the block size {block_size}"),
            ));
        }
        let entries = fs.readdir(ROOT_INO).map_err(|e| fs_err("readdir", e))?;
        if entries.iter().any(|d| d.name != b"." && d.name != b".." && d.name != b".snapshot") {
            return Err(LunError::new(
                LunErrorKind::Invalid,
                "the volume already holds files: a LUN needs an empty volume",
            ));
        }
        let root = Caller { uid: 0, gid: 0 };
        let attr = fs
            .mknod(root, ROOT_INO, LUN_FILE.as_bytes(), libc::S_IFREG | 0o600, 0)
            .map_err(|e| fs_err("create the LUN file", e))?;
        fs.setattr(attr.ino, SetAttr { size: Some(size), ..Default::default() })
            .map_err(|e| fs_err("size the LUN file", e))?;
        fs.setxattr(attr.ino, LUN_XATTR.as_bytes(), &marker(block_size), 0)
            .map_err(|e| fs_err("mark the LUN file", e))?;
        fs.fsync(attr.ino).map_err(|e| fs_err("sync the new LUN", e))
    }

    /// Whether the volume mounted as `fs` is a LUN: its size and logical block size if so.
    pub fn probe(fs: &VolumeFs) -> Option<(u64, u32)> {
        let attr = fs.lookup(ROOT_INO, LUN_FILE.as_bytes()).ok()?;
        let v = fs.getxattr(attr.ino, LUN_XATTR.as_bytes()).ok()?;
        parse_marker(&v).map(|b| (attr.size, b))
    }

    /// Serve the LUN of the volume mounted as `fs` (a snapshot's read-only file system
    /// serves the snapshot). `identity` names it to initiators; keep it stable.
    pub fn open(fs: Arc<VolumeFs>, identity: [u8; 16], read_only: bool) -> LunResult<VolumeLun> {
        let attr = fs.lookup(ROOT_INO, LUN_FILE.as_bytes()).map_err(|e| {
            LunError::new(LunErrorKind::Invalid, format!("the volume is not a LUN (no `{LUN_FILE}` file: {e})"))
        })?;
        let v = fs.getxattr(attr.ino, LUN_XATTR.as_bytes()).map_err(|e| {
            LunError::new(LunErrorKind::Invalid, format!("the volume is not a LUN (`{LUN_FILE}` is unmarked: {e})"))
        })?;
        if attr.mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(LunError::new(
                LunErrorKind::Io,
                format!("the LUN's `{LUN_FILE}` is a directory: run `strata check`"),
            ));
        }
        let block_size = parse_marker(&v)
            .ok_or_else(|| LunError::new(LunErrorKind::Io, "the LUN's marker is damaged: run `strata check`"))?;
        // The unit below which a write reads, modifies and writes: the file's record size.
        let record = fs.record_size(attr.ino).map_err(|e| fs_err("the LUN's record size", e))?;
        let preferred = record.clamp(block_size, 1 << 20);
        Ok(VolumeLun {
            fs,
            ino: attr.ino,
            size: AtomicU64::new(attr.size),
            block_size,
            preferred,
            read_only,
            identity,
            epoch: std::time::Instant::now(),
            times_at: AtomicU64::new(0),
        })
    }

    /// Grow the LUN to `size` bytes (shrinking is refused: it would cut data off under
    /// a client). The new size is what `size()` answers from now on.
    pub fn grow(&self, size: u64) -> LunResult<()> {
        self.writable()?;
        let now = self.size();
        if size < now || !size.is_multiple_of(self.block_size as u64) {
            return Err(LunError::new(
                LunErrorKind::Invalid,
                format!("new size {size} must be at least the current {now} and a multiple of {}", self.block_size),
            ));
        }
        self.fs
            .setattr(self.ino, SetAttr { size: Some(size), ..Default::default() })
            .map_err(|e| fs_err("grow the LUN file", e))?;
        self.fs.fsync(self.ino).map_err(|e| fs_err("sync the LUN's size", e))?;
        self.size.store(size, Ordering::Release);
        Ok(())
    }

    pub fn fs(&self) -> &Arc<VolumeFs> {
        &self.fs
    }

    fn writable(&self) -> LunResult<()> {
        if self.read_only {
            return Err(LunError::new(LunErrorKind::ReadOnly, "the LUN is read-only"));
        }
        Ok(())
    }

    /// A write of `data` at `offset`: with the inode's update when the last one is
    /// TIMES_EVERY_MS old (one caller wins it), the data only otherwise.
    fn write_file(&self, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let last = self.times_at.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= TIMES_EVERY_MS;
        if due && self.times_at.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            return self.fs.write(self.ino, offset, data);
        }
        self.fs.write_data_only(self.ino, offset, data)
    }

    fn done(&self, fua: bool) -> LunResult<()> {
        if fua {
            self.flush()?;
        }
        Ok(())
    }
}

impl Lun for VolumeLun {
    fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn preferred_block_size(&self) -> u32 {
        self.preferred
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn identity(&self) -> [u8; 16] {
        self.identity
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> LunResult<()> {
        let mut at = 0usize;
        for p in self.read_shared(offset, buf.len())? {
            let s = p.as_slice();
            buf[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        }
        Ok(())
    }

    fn read_shared(&self, offset: u64, len: usize) -> LunResult<Vec<SharedBytes>> {
        check_range(offset, len as u64, self.size())?;
        let mut out = Vec::new();
        let mut at = 0usize;
        // Reads longer than u32 do not occur (protocols cap them far lower), but loop anyway.
        while at < len {
            let want = (len - at).min(1 << 30) as u32;
            let pieces = self.fs.read_shared_file(self.ino, offset + at as u64, want).map_err(|e| fs_err("read", e))?;
            let got: usize = pieces.iter().map(SharedBytes::len).sum();
            out.extend(pieces);
            if got == 0 {
                // Past the file's end (a LUN file never shrinks; be safe): zeros.
                out.push(SharedBytes::owned(vec![0; len - at]));
                break;
            }
            at += got;
        }
        Ok(out)
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> LunResult<()> {
        self.writable()?;
        check_range(offset, data.len() as u64, self.size())?;
        self.write_file(offset, data).map_err(|e| fs_err("write", e))?;
        self.done(fua)
    }

    fn flush(&self) -> LunResult<()> {
        self.fs.fsync(self.ino).map_err(|e| fs_err("flush", e))
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> LunResult<()> {
        self.writable()?;
        check_range(offset, len, self.size())?;
        if len > 0 {
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            self.fs.fallocate(self.ino, offset, len, mode).map_err(|e| fs_err("trim", e))?;
        }
        self.done(fua)
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> LunResult<()> {
        if may_trim {
            return self.trim(offset, len, fua);
        }
        self.writable()?;
        check_range(offset, len, self.size())?;
        let zeros = vec![0u8; len.min(ZERO_CHUNK) as usize];
        let mut at = offset;
        while at < offset + len {
            let n = (offset + len - at).min(ZERO_CHUNK) as usize;
            self.write_file(at, &zeros[..n]).map_err(|e| fs_err("write zeroes", e))?;
            at += n as u64;
        }
        self.done(fua)
    }

    fn extents(&self, offset: u64, len: u64) -> LunResult<Vec<Extent>> {
        let size = self.size();
        check_range(offset, len.max(1), size)?;
        let len = len.clamp(1, EXTENTS_MAX);
        let runs = self.fs.extents(self.ino, offset, len as u32).map_err(|e| fs_err("allocation map", e))?;
        Ok(runs.into_iter().map(|(len, hole)| Extent { len, hole }).collect())
    }
}
