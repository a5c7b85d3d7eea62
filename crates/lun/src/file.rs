//! A LUN over a plain file: pread/pwrite, fdatasync, fallocate and SEEK_DATA/SEEK_HOLE.
//! What the peers (nbdkit's file plugin, tgt's rdwr backing store) do; used by protocol
//! tests as an implementation independent of the engine.

use crate::{check_range, Extent, Lun, LunError, LunErrorKind, LunResult};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

pub struct FileLun {
    file: File,
    size: u64,
    read_only: bool,
    identity: [u8; 16],
}

fn io_err(what: &str, e: std::io::Error) -> LunError {
    let kind = match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => LunErrorKind::NoSpace,
        Some(libc::EROFS) | Some(libc::EPERM) | Some(libc::EACCES) => LunErrorKind::ReadOnly,
        _ => LunErrorKind::Io,
    };
    LunError::new(kind, format!("{what}: {e}"))
}

impl FileLun {
    /// Serve the file at `path` (its size, rounded down to 512 bytes, is the LUN's).
    pub fn open(path: &Path, read_only: bool) -> LunResult<FileLun> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(path)
            .map_err(|e| io_err(&format!("open {}", path.display()), e))?;
        let size = file.metadata().map_err(|e| io_err("stat", e))?.len() & !511;
        let hash = fnv_identity(path.as_os_str().as_encoded_bytes());
        Ok(FileLun { file, size, read_only, identity: hash })
    }

    fn writable(&self) -> LunResult<()> {
        if self.read_only {
            return Err(LunError::new(LunErrorKind::ReadOnly, "the LUN is read-only"));
        }
        Ok(())
    }

    fn punch(&self, offset: u64, len: u64) -> LunResult<()> {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate on an open descriptor; offsets checked against the size.
        let r = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, offset as i64, len as i64) };
        if r != 0 {
            return Err(io_err("fallocate", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    fn seek(&self, offset: u64, whence: libc::c_int) -> Option<u64> {
        // SAFETY: lseek on an open descriptor; the file position is not used by pread/pwrite.
        let r = unsafe { libc::lseek(self.file.as_raw_fd(), offset as i64, whence) };
        (r >= 0).then_some(r as u64)
    }
}

/// A 16-byte identity from a name (FNV-1a, twice with different seeds): stable across runs.
fn fnv_identity(bytes: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (half, seed) in [0xcbf29ce484222325u64, 0x84222325cbf29ce4].into_iter().enumerate() {
        let mut h = seed;
        for b in bytes {
            h ^= *b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        out[half * 8..half * 8 + 8].copy_from_slice(&h.to_be_bytes());
    }
    out
}

impl Lun for FileLun {
    fn size(&self) -> u64 {
        self.size
    }
    fn block_size(&self) -> u32 {
        512
    }
    fn preferred_block_size(&self) -> u32 {
        4096
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn identity(&self) -> [u8; 16] {
        self.identity
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> LunResult<()> {
        check_range(offset, buf.len() as u64, self.size)?;
        self.file.read_exact_at(buf, offset).map_err(|e| io_err("pread", e))
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> LunResult<()> {
        self.writable()?;
        check_range(offset, data.len() as u64, self.size)?;
        self.file.write_all_at(data, offset).map_err(|e| io_err("pwrite", e))?;
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&self) -> LunResult<()> {
        self.file.sync_data().map_err(|e| io_err("fdatasync", e))
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> LunResult<()> {
        self.writable()?;
        check_range(offset, len, self.size)?;
        self.punch(offset, len)?;
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> LunResult<()> {
        self.writable()?;
        check_range(offset, len, self.size)?;
        if may_trim {
            self.punch(offset, len)?;
        } else {
            let zeros = vec![0u8; len.min(1 << 20) as usize];
            let mut at = offset;
            while at < offset + len {
                let n = (offset + len - at).min(zeros.len() as u64) as usize;
                self.file.write_all_at(&zeros[..n], at).map_err(|e| io_err("pwrite", e))?;
                at += n as u64;
            }
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    fn extents(&self, offset: u64, len: u64) -> LunResult<Vec<Extent>> {
        check_range(offset, len.max(1), self.size)?;
        let end = offset + len;
        let mut out = Vec::new();
        let mut at = offset;
        while at < end {
            let data = self.seek(at, libc::SEEK_DATA).unwrap_or(self.size).min(end);
            if data > at {
                out.push(Extent { len: data - at, hole: true });
                at = data;
                continue;
            }
            let hole = self.seek(at, libc::SEEK_HOLE).unwrap_or(self.size).min(end);
            let hole = hole.max(at + 1);
            out.push(Extent { len: hole - at, hole: false });
            at = hole;
        }
        Ok(out)
    }
}
