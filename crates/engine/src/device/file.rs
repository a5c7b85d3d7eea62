//! A device backed by a regular image file or a raw block device.
//!
//! Opens with O_DIRECT when asked and the file system allows it (tmpfs, for one, does not:
//! then it falls back to buffered I/O and says so in `describe`). Durability comes from
//! `fdatasync` in `flush` either way; O_DIRECT only keeps the page cache from holding a
//! second copy of what the engine caches itself.
//!
//! A durable write (the intent log's) is one `pwritev2(RWF_DSYNC)` on an image file and a
//! write then `fdatasync` on a block device. Measured on this kernel (6.18) with 8 KiB
//! O_DIRECT writes at a queue depth of one to a loop device: RWF_DSYNC 215–240 µs, write +
//! fdatasync 150–170 µs, the same as an asynchronous RWF_DSYNC write (`io_submit`). The
//! synchronous RWF_DSYNC path of a block device sends the write with FUA and then flushes
//! the device again (`generic_write_sync`); a write then a flush is as durable with one
//! flush. On an image file on ext4 the three take the same time (an overwrite in place
//! goes with FUA alone), so files keep the single system call.

use super::{AlignedBuf, BlockDevice};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
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
    /// A block device, not a regular file: durable writes are a write then a flush.
    block: bool,
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
        let block = file.metadata()?.file_type().is_block_device();
        Ok(FileDevice { file, path: path.to_path_buf(), size, direct, block })
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
        if self.direct && !buf.is_empty() && !AlignedBuf::is_aligned(buf) {
            let mut tmp = AlignedBuf::zeroed(AlignedBuf::padded_len(buf.len()));
            self.file.read_exact_at(&mut tmp, offset)?;
            buf.copy_from_slice(&tmp[..buf.len()]);
            return Ok(());
        }
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.direct && !buf.is_empty() && !AlignedBuf::is_aligned(buf) {
            return self.file.write_all_at(&AlignedBuf::padded_copy(buf), offset);
        }
        self.file.write_all_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn write_durable(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.direct && !buf.is_empty() && !AlignedBuf::is_aligned(buf) {
            return self.write_durable(&AlignedBuf::padded_copy(buf), offset);
        }
        if self.block {
            self.write_at(buf, offset)?;
            return self.flush();
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

    fn direct_fd(&self) -> Option<std::os::fd::RawFd> {
        self.direct.then(|| self.file.as_raw_fd())
    }
}

/// Durable writes on a loop device (root and `losetup`, as the end-to-end tests need): the
/// bytes land where asked, aligned or not, and the device is known as a block device.
#[cfg(all(test, not(strata_sim)))]
mod tests {
    use super::*;
    use std::process::Command;

    struct Loop(String);

    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }

    #[test]
    fn durable_writes_on_a_block_device_land_where_asked() {
        let dir = std::env::temp_dir().join(format!("strata-filedev-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join("d.img");
        std::fs::File::create(&img).unwrap().set_len(4 << 20).unwrap();
        let out = Command::new("losetup").args(["--find", "--show", "--direct-io=on"]).arg(&img).output().unwrap();
        assert!(out.status.success(), "losetup (run as root): {}", String::from_utf8_lossy(&out.stderr));
        let lo = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());
        let opts = FileDeviceOptions { direct: true, create_size: None };
        let dev = FileDevice::open(Path::new(&lo.0), &opts).unwrap();
        assert!(dev.block && dev.direct, "{}", dev.describe());
        let file = FileDevice::open(&img, &opts).unwrap();
        assert!(!file.block, "an image file is no block device");
        drop(file);

        let mut aligned = AlignedBuf::zeroed(8192);
        aligned.iter_mut().enumerate().for_each(|(i, b)| *b = (i % 251) as u8);
        dev.write_durable(&aligned, 1 << 20).unwrap();
        // Not aligned in memory (the intent log's buffers may not be): copied, same bytes.
        let odd: Vec<u8> = (0..4097u32).map(|i| (i % 13) as u8 + 1).collect();
        dev.write_durable(&odd[1..], 2 << 20).unwrap();
        // Empty buffers are no error (and no aligned copy of nothing).
        dev.write_at(&[], 3 << 20).unwrap();
        dev.write_durable(&[], 3 << 20).unwrap();
        dev.read_at(&mut [], 3 << 20).unwrap();
        drop(dev);

        let back = std::fs::read(&img).unwrap();
        assert_eq!(&back[1 << 20..(1 << 20) + 8192], &aligned[..]);
        assert_eq!(&back[2 << 20..(2 << 20) + 4096], &odd[1..]);
        assert!(back[..1 << 20].iter().all(|b| *b == 0), "nothing written elsewhere");
        drop(lo);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
