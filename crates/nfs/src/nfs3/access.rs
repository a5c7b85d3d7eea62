//! Permission checks, as a local kernel would make them, for the identity a request acts as.
//!
//! The rules are POSIX mode bits (owner, then group — primary or supplementary — then
//! other; uid 0 passes everything but executing a file with no execute bit), plus the two
//! exceptions every NFS server makes, because the client checked at open() and the server
//! sees only the later READs and WRITEs (Linux knfsd's NFSD_MAY_OWNER_OVERRIDE):
//! - the owner of a file may read and write it whatever its mode (a process that created a
//!   file 0444 still writes through the descriptor it holds);
//! - READ is allowed with execute permission alone (a program is read to be executed).
//!
//! No POSIX ACLs: the volume file system has none. SETATTR's ownership rules (chown,
//! chgrp, chmod, times) are in setattr.rs.

use super::{NfsResult, Stat};
use crate::export::Identity;
use strata_fs::Attr;

pub(crate) const MAY_READ: u32 = 4;
pub(crate) const MAY_WRITE: u32 = 2;
pub(crate) const MAY_EXEC: u32 = 1;

/// ACCESS3 bits (RFC 1813 §3.3.4).
pub(crate) const ACCESS3_READ: u32 = 0x01;
pub(crate) const ACCESS3_LOOKUP: u32 = 0x02;
pub(crate) const ACCESS3_MODIFY: u32 = 0x04;
pub(crate) const ACCESS3_EXTEND: u32 = 0x08;
pub(crate) const ACCESS3_DELETE: u32 = 0x10;
pub(crate) const ACCESS3_EXECUTE: u32 = 0x20;

fn is_dir(a: &Attr) -> bool {
    a.mode & libc::S_IFMT == libc::S_IFDIR
}

/// Does `who` have all of `want` (MAY_* bits) on `a` by its mode?
pub(crate) fn allowed(who: &Identity, a: &Attr, want: u32) -> bool {
    if who.uid == 0 {
        return want & MAY_EXEC == 0 || is_dir(a) || a.mode & 0o111 != 0;
    }
    let bits = if who.uid == a.uid {
        a.mode >> 6
    } else if who.in_group(a.gid) {
        a.mode >> 3
    } else {
        a.mode
    } & 7;
    bits & want == want
}

pub(crate) fn check(who: &Identity, a: &Attr, want: u32) -> NfsResult<()> {
    if allowed(who, a, want) {
        Ok(())
    } else {
        Err(Stat::Acces)
    }
}

/// Create, remove or rename entries in directory `dir`.
pub(crate) fn check_dir_write(who: &Identity, dir: &Attr) -> NfsResult<()> {
    check(who, dir, MAY_WRITE | MAY_EXEC)
}

/// READ of file data: read or execute permission, or ownership.
pub(crate) fn check_read_data(who: &Identity, a: &Attr) -> NfsResult<()> {
    if who.uid == a.uid || allowed(who, a, MAY_READ) || (!is_dir(a) && allowed(who, a, MAY_EXEC)) {
        Ok(())
    } else {
        Err(Stat::Acces)
    }
}

/// WRITE of file data: write permission or ownership.
pub(crate) fn check_write_data(who: &Identity, a: &Attr) -> NfsResult<()> {
    if who.uid == a.uid || allowed(who, a, MAY_WRITE) {
        Ok(())
    } else {
        Err(Stat::Acces)
    }
}

/// The sticky bit: in a directory with S_ISVTX, only the owner of an entry, the owner of
/// the directory or root may remove or rename it.
pub(crate) fn check_sticky(who: &Identity, dir: &Attr, victim: &Attr) -> NfsResult<()> {
    if dir.mode & libc::S_ISVTX != 0 && who.uid != 0 && who.uid != dir.uid && who.uid != victim.uid {
        return Err(Stat::Acces);
    }
    Ok(())
}

/// The ACCESS procedure: which of the `requested` bits would be allowed.
pub(crate) fn access_bits(who: &Identity, a: &Attr, requested: u32, read_only: bool) -> u32 {
    let mut granted = 0;
    let dir = is_dir(a);
    if allowed(who, a, MAY_READ) {
        granted |= ACCESS3_READ;
    }
    if !read_only && allowed(who, a, MAY_WRITE) {
        granted |= ACCESS3_MODIFY | ACCESS3_EXTEND;
        if dir {
            granted |= ACCESS3_DELETE;
        }
    }
    if allowed(who, a, MAY_EXEC) {
        granted |= if dir { ACCESS3_LOOKUP } else { ACCESS3_EXECUTE };
    }
    granted & requested
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::test_support::{attr, who};

    #[test]
    fn mode_bits_owner_group_other() {
        let f = attr(libc::S_IFREG | 0o640, 10, 20);
        assert!(allowed(&who(10, 1, &[]), &f, MAY_READ | MAY_WRITE));
        assert!(allowed(&who(11, 20, &[]), &f, MAY_READ));
        assert!(!allowed(&who(11, 20, &[]), &f, MAY_WRITE));
        assert!(allowed(&who(11, 1, &[20]), &f, MAY_READ), "supplementary group");
        assert!(!allowed(&who(11, 1, &[]), &f, MAY_READ));
        assert!(allowed(&who(0, 0, &[]), &f, MAY_READ | MAY_WRITE));
        assert!(!allowed(&who(0, 0, &[]), &f, MAY_EXEC), "root needs some x bit to execute");
        // Owner class is used even if it grants less than group.
        let g = attr(libc::S_IFREG | 0o070, 10, 20);
        assert!(!allowed(&who(10, 20, &[]), &g, MAY_READ));
    }

    #[test]
    fn owner_override_and_sticky() {
        let f = attr(libc::S_IFREG | 0o444, 10, 20);
        assert!(check_write_data(&who(10, 20, &[]), &f).is_ok());
        assert_eq!(check_write_data(&who(11, 20, &[]), &f), Err(Stat::Acces));
        let tmp = attr(libc::S_IFDIR | 0o1777, 0, 0);
        assert_eq!(check_sticky(&who(11, 1, &[]), &tmp, &f), Err(Stat::Acces));
        assert!(check_sticky(&who(10, 1, &[]), &tmp, &f).is_ok());
    }

    #[test]
    fn access_procedure_bits() {
        let d = attr(libc::S_IFDIR | 0o755, 10, 20);
        let all = 0x3f;
        assert_eq!(access_bits(&who(10, 20, &[]), &d, all, false), 0x1f);
        assert_eq!(access_bits(&who(11, 1, &[]), &d, all, false), ACCESS3_READ | ACCESS3_LOOKUP);
        assert_eq!(access_bits(&who(10, 20, &[]), &d, all, true), ACCESS3_READ | ACCESS3_LOOKUP);
        let x = attr(libc::S_IFREG | 0o711, 10, 20);
        assert_eq!(access_bits(&who(11, 1, &[]), &x, all, false), ACCESS3_EXECUTE);
    }
}
