//! Attribute encodings of NFSv3: fattr3 (84 bytes), post_op_attr, wcc_data (weak cache
//! consistency: size and times before a change, full attributes after) and sattr3.

use crate::export::Export;
use crate::xdr::{Decoder, Encoder, XdrError, XdrResult};
use strata_fs::Attr;

pub(crate) const FATTR3_BYTES: usize = 84;

/// ftype3 of a mode.
pub(crate) fn ftype(mode: u32) -> u32 {
    match mode & libc::S_IFMT {
        libc::S_IFREG => 1,
        libc::S_IFDIR => 2,
        libc::S_IFBLK => 3,
        libc::S_IFCHR => 4,
        libc::S_IFLNK => 5,
        libc::S_IFSOCK => 6,
        libc::S_IFIFO => 7,
        _ => 1,
    }
}

/// Linux's dev_t split (as stored in InodePhys.rdev, 32 bits).
pub(crate) fn dev_split(rdev: u32) -> (u32, u32) {
    ((rdev >> 8) & 0xfff, (rdev & 0xff) | ((rdev >> 12) & 0xfff00))
}

pub(crate) fn dev_join(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// nfstime3 from nanoseconds since the epoch (times before 1970 clamp to 0: the field is
/// unsigned).
fn put_time(e: &mut Encoder, ns: i64) {
    let ns = ns.max(0);
    e.u32((ns / 1_000_000_000).min(u32::MAX as i64) as u32);
    e.u32((ns % 1_000_000_000) as u32);
}

pub(crate) fn get_time(d: &mut Decoder<'_>) -> XdrResult<i64> {
    let (sec, nsec) = (d.u32()?, d.u32()?);
    if nsec >= 1_000_000_000 {
        return Err(XdrError);
    }
    Ok(sec as i64 * 1_000_000_000 + nsec as i64)
}

/// fsid: the export's volume, as a number the client uses to tell file systems apart.
pub(crate) fn fsid(export: &Export) -> u64 {
    export.pool_guid ^ export.volume_id().rotate_left(32)
}

pub(crate) fn put_fattr(e: &mut Encoder, export: &Export, a: &Attr) {
    e.u32(ftype(a.mode));
    e.u32(a.mode & 0o7777);
    e.u32(a.nlink);
    e.u32(a.uid);
    e.u32(a.gid);
    e.u64(a.size);
    e.u64(a.blocks.saturating_mul(512));
    let (major, minor) = dev_split(a.rdev);
    e.u32(major);
    e.u32(minor);
    e.u64(fsid(export));
    e.u64(a.ino);
    put_time(e, a.atime_ns);
    put_time(e, a.mtime_ns);
    put_time(e, a.ctime_ns);
}

pub(crate) fn put_post_op_attr(e: &mut Encoder, export: &Export, a: Option<&Attr>) {
    match a {
        Some(a) => {
            e.bool(true);
            put_fattr(e, export, a);
        }
        None => e.bool(false),
    }
}

/// wcc_data: `before` as the object was when the procedure started, `after` as it is now.
pub(crate) fn put_wcc(e: &mut Encoder, export: &Export, before: Option<&Attr>, after: Option<&Attr>) {
    match before {
        Some(b) => {
            e.bool(true);
            e.u64(b.size);
            put_time(e, b.mtime_ns);
            put_time(e, b.ctime_ns);
        }
        None => e.bool(false),
    }
    put_post_op_attr(e, export, after);
}

/// How sattr3 sets a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetTime {
    Keep,
    ServerTime,
    ClientTime(i64),
}

impl SetTime {
    /// As VolumeFs::SetAttr wants it: `Some(None)` = now.
    pub fn as_fs(self) -> Option<Option<i64>> {
        match self {
            SetTime::Keep => None,
            SetTime::ServerTime => Some(None),
            SetTime::ClientTime(t) => Some(Some(t)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sattr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

fn opt_u32(d: &mut Decoder<'_>) -> XdrResult<Option<u32>> {
    Ok(if d.bool()? { Some(d.u32()?) } else { None })
}

fn set_time(d: &mut Decoder<'_>) -> XdrResult<SetTime> {
    match d.u32()? {
        0 => Ok(SetTime::Keep),
        1 => Ok(SetTime::ServerTime),
        2 => Ok(SetTime::ClientTime(get_time(d)?)),
        _ => Err(XdrError),
    }
}

pub(crate) fn get_sattr(d: &mut Decoder<'_>) -> XdrResult<Sattr> {
    Ok(Sattr {
        mode: opt_u32(d)?,
        uid: opt_u32(d)?,
        gid: opt_u32(d)?,
        size: if d.bool()? { Some(d.u64()?) } else { None },
        atime: set_time(d)?,
        mtime: set_time(d)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_round_trip() {
        for (ma, mi) in [(0, 0), (8, 1), (259, 0x12345), (0xfff, 0xfffff)] {
            assert_eq!(dev_split(dev_join(ma, mi)), (ma, mi));
        }
    }

    #[test]
    fn sattr_decodes_every_arm() {
        let mut e = Encoder::with_capacity(64);
        e.bool(true);
        e.u32(0o640);
        e.bool(false);
        e.bool(true);
        e.u32(7);
        e.bool(true);
        e.u64(4096);
        e.u32(1);
        e.u32(2);
        e.u32(5);
        e.u32(6);
        let s = get_sattr(&mut Decoder::new(&e.buf)).expect("sattr3");
        assert_eq!(s.mode, Some(0o640));
        assert_eq!(s.uid, None);
        assert_eq!(s.gid, Some(7));
        assert_eq!(s.size, Some(4096));
        assert_eq!(s.atime, SetTime::ServerTime);
        assert_eq!(s.mtime, SetTime::ClientTime(5_000_000_006));
        // An unknown time_how is malformed.
        let bad = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        assert!(get_sattr(&mut Decoder::new(&bad)).is_err());
    }
}
