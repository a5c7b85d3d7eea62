//! `InodePhys`: the attribute record of every object that is a file, directory, symlink or
//! special file, stored as the object's engine attribute (the object size is the file size).
//!
//! ```text
//!   0  mode       u32   type (S_IFMT) and permission bits
//!   4  uid        u32
//!   8  gid        u32
//!  12  nlink      u32   names pointing here (directories: 2 + subdirectories)
//!  16  rdev       u32   device number of character / block special files
//!  20  flags      u32   (zero)
//!  24  atime_ns   i64   nanoseconds since the Unix epoch
//!  32  mtime_ns   i64
//!  40  ctime_ns   i64
//!  48  crtime_ns  i64
//!  56  parent     u64   directories: the parent directory's inode (root: itself)
//! ```
//!
//! Decoded from disk: indexing, slicing, `unwrap` and `expect` are denied here
//! (docs/failure-policy.md); a record that does not decode is `None`.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

use strata_engine::format::codec::Reader;

pub const INODE_PHYS_SIZE: usize = 64;
pub const S_IFMT: u32 = libc::S_IFMT;
pub const S_IFDIR: u32 = libc::S_IFDIR;
pub const S_IFREG: u32 = libc::S_IFREG;
pub const S_IFLNK: u32 = libc::S_IFLNK;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodePhys {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub rdev: u32,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub crtime_ns: i64,
    pub parent: u64,
}

impl InodePhys {
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    pub fn is_reg(&self) -> bool {
        self.mode & S_IFMT == S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }
    /// The DT_* type byte for directory entries.
    pub fn dtype(&self) -> u8 {
        ((self.mode & S_IFMT) >> 12) as u8
    }

    pub fn encode(&self) -> [u8; INODE_PHYS_SIZE] {
        let mut b = [0u8; INODE_PHYS_SIZE];
        b[0..4].copy_from_slice(&self.mode.to_le_bytes());
        b[4..8].copy_from_slice(&self.uid.to_le_bytes());
        b[8..12].copy_from_slice(&self.gid.to_le_bytes());
        b[12..16].copy_from_slice(&self.nlink.to_le_bytes());
        b[16..20].copy_from_slice(&self.rdev.to_le_bytes());
        b[24..32].copy_from_slice(&self.atime_ns.to_le_bytes());
        b[32..40].copy_from_slice(&self.mtime_ns.to_le_bytes());
        b[40..48].copy_from_slice(&self.ctime_ns.to_le_bytes());
        b[48..56].copy_from_slice(&self.crtime_ns.to_le_bytes());
        b[56..64].copy_from_slice(&self.parent.to_le_bytes());
        b
    }

    /// `None` if the bytes are not an inode record (corrupt or a foreign object).
    pub fn decode(b: &[u8]) -> Option<InodePhys> {
        if b.len() != INODE_PHYS_SIZE {
            return None;
        }
        let mut r = Reader::new(b, "inode record", None);
        let i64 = |r: &mut Reader<'_>| r.u64().map(|v| v as i64);
        let (mode, uid, gid, nlink, rdev, flags) =
            (r.u32().ok()?, r.u32().ok()?, r.u32().ok()?, r.u32().ok()?, r.u32().ok()?, r.u32().ok()?);
        let ino = InodePhys {
            mode,
            uid,
            gid,
            nlink,
            rdev,
            atime_ns: i64(&mut r).ok()?,
            mtime_ns: i64(&mut r).ok()?,
            ctime_ns: i64(&mut r).ok()?,
            crtime_ns: i64(&mut r).ok()?,
            parent: r.u64().ok()?,
        };
        (flags == 0 && ino.mode & S_IFMT != 0).then_some(ino)
    }
}

/// What a front end needs to answer stat().
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub crtime_ns: i64,
    /// Type and permission bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let i = InodePhys {
            mode: S_IFREG | 0o644,
            uid: 5,
            gid: 6,
            nlink: 2,
            rdev: 0,
            atime_ns: -1,
            mtime_ns: 1 << 60,
            ctime_ns: 3,
            crtime_ns: 4,
            parent: 0,
        };
        assert_eq!(InodePhys::decode(&i.encode()), Some(i));
        assert_eq!(InodePhys::decode(&[0u8; 64]), None);
        assert_eq!(InodePhys::decode(&[0u8; 10]), None);
    }
}
