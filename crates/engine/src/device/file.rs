//! A device backed by a regular image file or a raw block device.
//!
//! Opens with O_DIRECT when asked and the file system allows it (tmpfs, for one, does not:
//! then it falls back to buffered I/O and says so in `describe`). Durability comes from
//! `fdatasync` in `flush` either way; O_DIRECT only keeps the page cache from holding a
//! second copy of what the engine caches itself.

use super::{AlignedBuf, BlockDevice};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
pub struct FileDeviceOptions {
    /// Use O_DIRECT where the platform allows it.
    pub direct: bool,
    /// Create (or extend) a regular image file to this many bytes.
    pub create_size: Option<u64>,
}

pub struct FileDevice {
    file: File,
    path: PathBuf,
    size: u64,
    direct: bool,
}

impl FileDevice {
    pub fn open(path: &Path, opts: &FileDeviceOptions) -> io::Result<FileDevice> {
        if let Some(size) = opts.create_size {
            let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
            if f.metadata()?.len() < size {
                f.set_len(size)?;
            }
        }
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (mut file, direct) = match opts.direct {
            true => match open(true) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(false)?, false),
                Err(e) => return Err(e),
            },
            false => (open(false)?, false),
        };
        let size = file.seek(SeekFrom::End(0))?;
        Ok(FileDevice { file, path: path.to_path_buf(), size, direct })
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }
}

impl BlockDevice for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.direct && !AlignedBuf::is_aligned(buf) {
            let mut tmp = AlignedBuf::zeroed(buf.len().next_multiple_of(4096));
            self.file.read_exact_at(&mut tmp, offset)?;
            buf.copy_from_slice(&tmp[..buf.len()]);
            return Ok(());
        }
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.direct && !AlignedBuf::is_aligned(buf) {
            let mut tmp = AlignedBuf::zeroed(buf.len().next_multiple_of(4096));
            tmp[..buf.len()].copy_from_slice(buf);
            return self.file.write_all_at(&tmp, offset);
        }
        self.file.write_all_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.direct && !AlignedBuf::is_aligned(buf) {
            let mut tmp = AlignedBuf::zeroed(buf.len().next_multiple_of(4096));
            tmp[..buf.len()].copy_from_slice(buf);
            return self.write_durable(&tmp, offset);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let rest = &buf[done..];
            let iov = libc::iovec { iov_base: rest.as_ptr() as *mut libc::c_void, iov_len: rest.len() };
            // SAFETY: iov points into `buf`, alive for the call; the fd is open.
            let n = unsafe {
                libc::pwritev2(self.file.as_raw_fd(), &iov, 1, (offset + done as u64) as libc::off_t, libc::RWF_DSYNC)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                if e.raw_os_error() == Some(libc::EOPNOTSUPP) || e.raw_os_error() == Some(libc::ENOSYS) {
                    self.write_at(rest, offset + done as u64)?;
                    return self.flush();
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev2 wrote nothing"));
            }
            done += n as usize;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("{}{}", self.path.display(), if self.direct { " (O_DIRECT)" } else { "" })
    }
}
