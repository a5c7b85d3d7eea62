//! Block LUNs: what the block front ends (NBD, iSCSI) serve.
//!
//! A LUN is a volume holding one fixed-size file, `lun`, in its root directory (DESIGN.md
//! §4): snapshots, clones, restores, compression, dedup and redundancy work on it as on
//! any file, and a snapshot's LUN is the same file in the snapshot's read-only file system.
//! [`Lun`] is the interface the protocol servers use; [`VolumeLun`] implements it over the
//! volume file system, [`FileLun`] over a plain file (the peers' setup, and protocol tests
//! that want a second, independent implementation).
//!
//! Durability follows the protocols: a write returns once it is in the open txg (a crash
//! may lose it); `flush` and a write with `fua` return once the data is in the intent log
//! (one log write and a device flush, `VolumeFs::fsync`).

mod file;
mod volume;
pub mod work;

pub use file::FileLun;
pub use strata_fs::SharedBytes;
pub use volume::{VolumeLun, LUN_FILE, LUN_XATTR};

/// Why a LUN operation failed, in the terms the protocols map to their error codes
/// (NBD errno values, SCSI sense keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LunErrorKind {
    /// The device or the pool failed a read or write (EIO; MEDIUM ERROR).
    Io,
    /// No space left in the pool or under the volume's quota (ENOSPC; SPACE ALLOCATION FAILED).
    NoSpace,
    /// The LUN is read-only: a snapshot, a read-only export (EPERM; DATA PROTECT).
    ReadOnly,
    /// Offset or length beyond the end of the LUN (EINVAL/ENOSPC per protocol; LBA OUT OF RANGE).
    OutOfRange,
    /// A request the LUN cannot carry out as asked (EINVAL; INVALID FIELD IN CDB).
    Invalid,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LunError {
    pub kind: LunErrorKind,
    pub message: String,
}

impl LunError {
    pub fn new(kind: LunErrorKind, message: impl Into<String>) -> LunError {
        LunError { kind, message: message.into() }
    }

    /// The errno an NBD reply carries (NBD_EIO = 5, NBD_EPERM = 1, NBD_ENOSPC = 28,
    /// NBD_EINVAL = 22: the protocol uses Linux's numbers).
    pub fn errno(&self) -> u32 {
        match self.kind {
            LunErrorKind::Io => 5,
            LunErrorKind::NoSpace => 28,
            LunErrorKind::ReadOnly => 1,
            LunErrorKind::OutOfRange | LunErrorKind::Invalid => 22,
        }
    }
}

impl std::fmt::Display for LunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for LunError {}

pub type LunResult<T> = Result<T, LunError>;

/// A run of the allocation map: `len` bytes that are either data or a hole (reads as
/// zeros, takes no space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub len: u64,
    pub hole: bool,
}

/// A block device served by a protocol front end. Every method may be called from many
/// threads at once; none holds a lock across calls. Offsets and lengths are in bytes and
/// are checked against `size()` by the implementation (`OutOfRange`).
pub trait Lun: Send + Sync {
    /// Size in bytes (a multiple of `block_size`); it may grow while served.
    fn size(&self) -> u64;
    /// The logical block size the LUN advertises (SCSI's block length, NBD's minimum
    /// block size): 512 or 4096.
    fn block_size(&self) -> u32;
    /// The unit below which a write reads, modifies and writes in memory: the volume's
    /// record size (NBD's preferred block size, SCSI's optimal transfer granularity).
    fn preferred_block_size(&self) -> u32;
    fn read_only(&self) -> bool;
    /// A stable identity (SCSI VPD 0x80/0x83 serial and designator).
    fn identity(&self) -> [u8; 16];
    fn read(&self, offset: u64, buf: &mut [u8]) -> LunResult<()>;
    /// Read `len` bytes at `offset` as pieces of the buffers that hold them (cached and
    /// dirty records, shared zeros): a server sends them from there instead of copying
    /// them into its reply first. The default reads into one new buffer.
    fn read_shared(&self, offset: u64, len: usize) -> LunResult<Vec<strata_fs::SharedBytes>> {
        let mut buf = vec![0u8; len];
        self.read(offset, &mut buf)?;
        Ok(vec![strata_fs::SharedBytes::owned(buf)])
    }
    /// Write `data` at `offset`; with `fua`, durable when it returns.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> LunResult<()>;
    /// Make every write that returned before this call durable.
    fn flush(&self) -> LunResult<()>;
    /// Deallocate the range (it reads as zeros afterwards; NBD TRIM, SCSI UNMAP).
    fn trim(&self, offset: u64, len: u64, fua: bool) -> LunResult<()>;
    /// Make the range read as zeros; with `may_trim` by deallocating it, else by writing
    /// zero data that keeps its space (NBD_CMD_FLAG_NO_HOLE).
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> LunResult<()>;
    /// The allocation map from `offset`, covering at least one byte and at most `len`
    /// bytes (an implementation may answer less than asked, never past the end).
    fn extents(&self, offset: u64, len: u64) -> LunResult<Vec<Extent>>;
}

/// Check `offset..offset+len` against `size`.
pub fn check_range(offset: u64, len: u64, size: u64) -> LunResult<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(LunError::new(
            LunErrorKind::OutOfRange,
            format!("range {offset}+{len} is past the end of the LUN ({size} bytes)"),
        )),
    }
}
