//! The file system's layout in its volume's key-value space (see the crate comment):
//! directory entries `D ++ parent ++ name` → `child ++ type`, per-inode keys
//! `prefix ++ ino [++ more]` (symlink targets `L`, xattrs `X`, orphans `O`) and the
//! superblock `S` → `version u32 ++ root u64` (little-endian).
//!
//! These bytes come from disk: decoding them never indexes or slices (the lints below, as on
//! the engine's decoders, docs/failure-policy.md), and anything malformed is a typed
//! corruption error — EIO to the caller, with what was wrong in the detail.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

use crate::{FsError, FsResult};
use strata_engine::{Corruption, Error};

pub(crate) const KEY_SUPER: &[u8] = b"S";
pub(crate) const FS_VERSION: u32 = 1;
/// Bytes of a directory entry's value: child inode (big-endian) and DT_* type.
const ENTRY_BYTES: usize = 9;
const SUPER_BYTES: usize = 12;

/// A typed corruption error for the front ends (EIO, with the detail).
pub(crate) fn corrupt(what: &'static str, detail: String) -> FsError {
    FsError::from(Error::Corruption(Corruption::new(what, None, detail)))
}

pub(crate) fn dir_key(parent: u64, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + name.len());
    k.push(b'D');
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name);
    k
}

pub(crate) fn ino_key(prefix: u8, ino: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(prefix);
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

/// The inode a key of the form `prefix ++ ino ++ rest` names, and its rest (a directory
/// entry's name, an xattr's name, a symlink part). A key too short to hold an inode is
/// damage: the range scans that find these keys stop at the prefix, not at the length.
pub(crate) fn key_parts(k: &[u8]) -> FsResult<(u64, &[u8])> {
    let parts = k.split_first().and_then(|(_, rest)| rest.split_first_chunk::<8>());
    let (ino, rest) = parts.ok_or_else(|| corrupt("file system key", format!("key {k:02x?} holds no inode number")))?;
    Ok((u64::from_be_bytes(*ino), rest))
}

pub(crate) fn encode_entry(ino: u64, dtype: u8) -> [u8; ENTRY_BYTES] {
    let mut v = [0u8; ENTRY_BYTES];
    let (child, kind) = v.split_at_mut(8);
    child.copy_from_slice(&ino.to_be_bytes());
    kind.fill(dtype);
    v
}

/// A directory entry's value: (child inode, DT_* type).
pub(crate) fn decode_entry(v: &[u8]) -> FsResult<(u64, u8)> {
    match <&[u8; ENTRY_BYTES]>::try_from(v) {
        Ok(&[a, b, c, d, e, f, g, h, dtype]) => Ok((u64::from_be_bytes([a, b, c, d, e, f, g, h]), dtype)),
        Err(_) => Err(corrupt("directory entry", format!("{} bytes, expected {ENTRY_BYTES}", v.len()))),
    }
}

pub(crate) fn encode_super(root: u64) -> Vec<u8> {
    let mut sb = FS_VERSION.to_le_bytes().to_vec();
    sb.extend_from_slice(&root.to_le_bytes());
    sb
}

/// The version a superblock records (`None`: not a superblock of this layout).
pub(crate) fn super_version(v: &[u8]) -> Option<u32> {
    let v: &[u8; SUPER_BYTES] = v.try_into().ok()?;
    v.first_chunk::<4>().map(|b| u32::from_le_bytes(*b))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_entries_round_trip_and_short_ones_are_corruption() {
        let k = dir_key(7, b"name");
        assert_eq!(key_parts(&k).unwrap(), (7, &b"name"[..]));
        assert_eq!(key_parts(&ino_key(b'O', 9)).unwrap(), (9, &b""[..]));
        for short in [&b""[..], b"D", b"D\0\0\0\0\0\0\x07"] {
            assert_eq!(key_parts(short).unwrap_err().errno, libc::EIO, "{short:?}");
        }
        assert_eq!(decode_entry(&encode_entry(12, 4)).unwrap(), (12, 4));
        for bad in [&b""[..], &[0u8; 8], &[0u8; 10]] {
            let e = decode_entry(bad).unwrap_err();
            assert_eq!(e.errno, libc::EIO);
            assert!(e.detail.unwrap().contains("corrupt directory entry"));
        }
        assert_eq!(super_version(&encode_super(1)), Some(FS_VERSION));
        assert_eq!(super_version(&encode_super(1)[..11]), None);
    }
}
