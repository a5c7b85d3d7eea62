//! SETATTR's rules: who may change which attribute, and what a change takes away, as
//! Linux decides them (fs/attr.c: `setattr_prepare`, `chown_ok`, `chgrp_ok`,
//! `inode_owner_or_capable`, `setattr_should_drop_sgid`; fs/nfsd/vfs.c: `nfsd_setattr`,
//! `nfsd_permission`, `nfsd_sanitize_attrs`), for the request's identity after squashing.
//! uid 0 holds what knfsd gives root (CAP_CHOWN, CAP_FOWNER, CAP_FSETID,
//! CAP_DAC_OVERRIDE); no other caller holds any capability.
//!
//! - chown: uid 0 only, but the owner may "change" the owner to himself.
//! - chgrp: uid 0, or the owner to the file's group or to a group he is in (primary or
//!   AUTH_SYS supplementary gid).
//! - chmod: the owner or uid 0. A caller who is neither root nor in the file's group (the
//!   new one when the same request changes it) loses set-group-id silently, directories
//!   included. A mode for a symlink is ignored, as knfsd ignores it.
//! - times: the client's times, the owner or uid 0 only; the server's clock alone (touch,
//!   utimes(NULL)), also anyone with write permission.
//! - size: write permission or ownership (knfsd's owner override: the client checked at
//!   open(), and ftruncate through a descriptor still works after fchmod 0).
//! - chown or chgrp of a non-directory takes set-user-id away, even by root, and
//!   set-group-id when group-executable (VolumeFs::setattr does both) or when the caller
//!   is neither root nor in the file's group (`chown_drops_sgid`).
//!
//! Refusals map as knfsd maps them: EPERM (PERM) for the ownership rules, EACCES (ACCES)
//! for the write-permission ones, in knfsd's order: file type, read-only export, write
//! permission ([`check_access`]); then the caller's ctime guard; then the ownership rules
//! ([`prepare`]). Unlike knfsd, which truncates before it checks the rest, everything is
//! checked before anything changes: a refused SETATTR changes nothing.

use super::access::{allowed, check_write_data, MAY_WRITE};
use super::attr::{Sattr, SetTime};
use super::{NfsResult, Stat};
use crate::export::Identity;
use strata_fs::{Attr, SetAttr};

fn file_type(a: &Attr) -> u32 {
    a.mode & libc::S_IFMT
}

fn is_owner_or_root(who: &Identity, a: &Attr) -> bool {
    who.uid == 0 || who.uid == a.uid
}

fn sets_client_time(s: &Sattr) -> bool {
    matches!(s.atime, SetTime::ClientTime(_)) || matches!(s.mtime, SetTime::ClientTime(_))
}

fn sets_any_time(s: &Sattr) -> bool {
    s.atime != SetTime::Keep || s.mtime != SetTime::Keep
}

/// knfsd's fh_verify, before anything else: a size change needs a regular file (ISDIR,
/// INVAL); any SETATTR a writable export (ROFS); a size change or times set to the
/// server's clock write permission or ownership (ACCES).
pub(crate) fn check_access(who: &Identity, a: &Attr, s: &Sattr, read_only: bool) -> NfsResult<()> {
    if s.size.is_some() {
        match file_type(a) {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(Stat::IsDir),
            _ => return Err(Stat::Inval),
        }
    }
    if read_only {
        return Err(Stat::RoFs);
    }
    if s.size.is_some() {
        check_write_data(who, a)?;
    }
    touch_ok(who, a, s)
}

/// Times set to the server's clock only: the owner, or anyone who may write the file
/// (notify_change's ATTR_TOUCH rule; knfsd asks NFSD_MAY_WRITE | NFSD_MAY_OWNER_OVERRIDE).
/// With a client time in the request, `set_times_ok` decides instead.
fn touch_ok(who: &Identity, a: &Attr, s: &Sattr) -> NfsResult<()> {
    if sets_any_time(s) && !sets_client_time(s) && who.uid != a.uid && !allowed(who, a, MAY_WRITE) {
        return Err(Stat::Acces);
    }
    Ok(())
}

/// The ownership rules (setattr_prepare), then what the change takes away. Returns the
/// change for VolumeFs, or `None` when nothing is left to change (an empty sattr3, or only
/// a symlink's mode): knfsd then answers OK and leaves the file, its ctime included, alone.
pub(crate) fn prepare(who: &Identity, a: &Attr, s: &Sattr) -> NfsResult<Option<SetAttr>> {
    if let Some(uid) = s.uid {
        chown_ok(who, a, uid)?;
    }
    if let Some(gid) = s.gid {
        chgrp_ok(who, a, gid)?;
    }
    let mode = match s.mode.filter(|_| file_type(a) != libc::S_IFLNK) {
        Some(mode) => Some(chmod_mode(who, a, mode, s.gid.unwrap_or(a.gid))?),
        None => chown_drops_sgid(who, a, s).then_some(a.mode & 0o7777 & !libc::S_ISGID),
    };
    set_times_ok(who, a, s)?;
    if mode.is_none() && s.uid.is_none() && s.gid.is_none() && s.size.is_none() && !sets_any_time(s) {
        return Ok(None);
    }
    Ok(Some(SetAttr {
        mode,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        atime_ns: s.atime.as_fs(),
        mtime_ns: s.mtime.as_fs(),
        // A truncate by a caller without CAP_FSETID takes set-id bits away (do_truncate).
        kill_suid: who.uid != 0,
    }))
}

/// chown_ok: CAP_CHOWN, or the owner naming himself. A non-owner naming the current owner
/// is refused too: the rule is about the caller, not about whether anything changes.
fn chown_ok(who: &Identity, a: &Attr, uid: u32) -> NfsResult<()> {
    if who.uid == 0 || (who.uid == a.uid && uid == a.uid) {
        Ok(())
    } else {
        Err(Stat::Perm)
    }
}

/// chgrp_ok: CAP_CHOWN, or the owner naming the file's group or a group he is in.
fn chgrp_ok(who: &Identity, a: &Attr, gid: u32) -> NfsResult<()> {
    if who.uid == 0 || (who.uid == a.uid && (gid == a.gid || who.in_group(gid))) {
        Ok(())
    } else {
        Err(Stat::Perm)
    }
}

/// chmod (inode_owner_or_capable): the owner or CAP_FOWNER; returns the mode to store.
/// Set-group-id needs membership of `gid` (the file's group after this request) or
/// CAP_FSETID, else it is dropped without an error (setattr_prepare).
fn chmod_mode(who: &Identity, a: &Attr, mode: u32, gid: u32) -> NfsResult<u32> {
    if !is_owner_or_root(who, a) {
        return Err(Stat::Perm);
    }
    let mode = mode & 0o7777;
    Ok(if who.uid != 0 && !who.in_group(gid) { mode & !libc::S_ISGID } else { mode })
}

/// Whether a chown or chgrp (without a mode in the same request) must also drop a
/// set-group-id bit that VolumeFs keeps: one without group-execute (VolumeFs drops it with
/// group-execute) on a non-directory, when the caller is neither root nor in the file's
/// current group (setattr_should_drop_sgid, Linux 6.2 and later).
fn chown_drops_sgid(who: &Identity, a: &Attr, s: &Sattr) -> bool {
    (s.uid.is_some() || s.gid.is_some())
        && file_type(a) != libc::S_IFDIR
        && a.mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID
        && who.uid != 0
        && !who.in_group(a.gid)
}

/// Times to the client's values (ATTR_ATIME_SET, ATTR_MTIME_SET): the owner or
/// CAP_FOWNER, even if the caller may write the file (utimes with explicit times).
fn set_times_ok(who: &Identity, a: &Attr, s: &Sattr) -> NfsResult<()> {
    if sets_client_time(s) && !is_owner_or_root(who, a) {
        return Err(Stat::Perm);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const REG: u32 = libc::S_IFREG;
    const DIR: u32 = libc::S_IFDIR;
    const LNK: u32 = libc::S_IFLNK;

    use super::super::test_support::{attr, who};

    const NONE: Sattr =
        Sattr { mode: None, uid: None, gid: None, size: None, atime: SetTime::Keep, mtime: SetTime::Keep };

    /// Both phases, as SETATTR runs them (no guard).
    fn run(w: &Identity, a: &Attr, s: Sattr) -> NfsResult<Option<SetAttr>> {
        check_access(w, a, &s, false)?;
        prepare(w, a, &s)
    }

    fn status(w: &Identity, a: &Attr, s: Sattr) -> Stat {
        run(w, a, s).err().unwrap_or(Stat::Ok)
    }

    // The file: 0644, owner 10, group 20.
    fn file() -> Attr {
        attr(REG | 0o644, 10, 20)
    }

    #[test]
    fn chown_is_root_only_but_the_owner_may_name_himself() {
        let f = file();
        assert_eq!(status(&who(11, 1, &[]), &f, Sattr { uid: Some(10), ..NONE }), Stat::Perm, "non-owner to owner");
        assert_eq!(status(&who(11, 1, &[]), &f, Sattr { uid: Some(11), ..NONE }), Stat::Perm, "to himself");
        assert_eq!(status(&who(10, 1, &[]), &f, Sattr { uid: Some(11), ..NONE }), Stat::Perm, "owner gives away");
        assert_eq!(status(&who(10, 1, &[]), &f, Sattr { uid: Some(10), ..NONE }), Stat::Ok, "owner to himself");
        assert_eq!(status(&who(0, 0, &[]), &f, Sattr { uid: Some(11), ..NONE }), Stat::Ok);
        let link = attr(LNK | 0o777, 10, 20);
        assert_eq!(status(&who(11, 1, &[]), &link, Sattr { uid: Some(10), ..NONE }), Stat::Perm, "lchown");
    }

    #[test]
    fn chgrp_needs_the_owner_and_membership() {
        let f = file();
        assert_eq!(status(&who(10, 1, &[30]), &f, Sattr { gid: Some(30), ..NONE }), Stat::Ok, "supplementary");
        assert_eq!(status(&who(10, 30, &[]), &f, Sattr { gid: Some(30), ..NONE }), Stat::Ok, "primary");
        assert_eq!(status(&who(10, 1, &[]), &f, Sattr { gid: Some(30), ..NONE }), Stat::Perm, "not a member");
        assert_eq!(status(&who(10, 1, &[]), &f, Sattr { gid: Some(20), ..NONE }), Stat::Ok, "owner, same group");
        assert_eq!(status(&who(11, 20, &[]), &f, Sattr { gid: Some(20), ..NONE }), Stat::Perm, "non-owner, same");
        assert_eq!(status(&who(11, 30, &[]), &f, Sattr { gid: Some(30), ..NONE }), Stat::Perm, "non-owner member");
        assert_eq!(status(&who(0, 0, &[]), &f, Sattr { gid: Some(30), ..NONE }), Stat::Ok);
    }

    #[test]
    fn chmod_by_owner_or_root_and_setgid_needs_the_group() {
        let f = file();
        let mode = |w: &Identity, a: &Attr, s: Sattr| run(w, a, s).expect("allowed").expect("a change").mode;
        assert_eq!(status(&who(11, 20, &[]), &f, Sattr { mode: Some(0o600), ..NONE }), Stat::Perm);
        assert_eq!(mode(&who(10, 1, &[]), &f, Sattr { mode: Some(0o600), ..NONE }), Some(0o600));
        assert_eq!(mode(&who(10, 1, &[]), &f, Sattr { mode: Some(0o2755), ..NONE }), Some(0o755), "not in 20");
        assert_eq!(mode(&who(10, 1, &[20]), &f, Sattr { mode: Some(0o2755), ..NONE }), Some(0o2755));
        assert_eq!(mode(&who(0, 0, &[]), &f, Sattr { mode: Some(0o2755), ..NONE }), Some(0o2755), "CAP_FSETID");
        let d = attr(DIR | 0o755, 10, 20);
        assert_eq!(mode(&who(10, 1, &[]), &d, Sattr { mode: Some(0o2775), ..NONE }), Some(0o775), "directories too");
        // The group that counts is the one the request sets.
        let s = Sattr { mode: Some(0o2755), gid: Some(30), ..NONE };
        assert_eq!(mode(&who(10, 1, &[30]), &f, s), Some(0o2755));
        let f30 = attr(REG | 0o644, 10, 30);
        let s = Sattr { mode: Some(0o2755), gid: Some(1), ..NONE };
        assert_eq!(mode(&who(10, 1, &[]), &f30, s), Some(0o2755), "not in group 30, but in group 1");
    }

    #[test]
    fn a_symlinks_mode_is_ignored() {
        let link = attr(LNK | 0o777, 10, 20);
        assert_eq!(run(&who(11, 1, &[]), &link, Sattr { mode: Some(0o600), ..NONE }).map(|s| s.is_none()), Ok(true));
        assert_eq!(run(&who(10, 1, &[]), &link, Sattr { mode: Some(0o600), ..NONE }).map(|s| s.is_none()), Ok(true));
        let s = run(&who(0, 0, &[]), &link, Sattr { mode: Some(0o600), uid: Some(3), ..NONE });
        assert_eq!(s.expect("allowed").expect("a change").mode, None);
    }

    #[test]
    fn chown_drops_setgid_the_volume_keeps() {
        let sgid = attr(REG | 0o2644, 10, 20);
        let mode = |w: &Identity, a: &Attr, s: Sattr| run(w, a, s).expect("allowed").expect("a change").mode;
        assert_eq!(mode(&who(10, 1, &[]), &sgid, Sattr { uid: Some(10), ..NONE }), Some(0o644), "not in group 20");
        assert_eq!(mode(&who(10, 1, &[20]), &sgid, Sattr { uid: Some(10), ..NONE }), None, "member: kept");
        assert_eq!(mode(&who(0, 0, &[]), &sgid, Sattr { uid: Some(10), ..NONE }), None, "root: kept");
        let sgid_30 = attr(REG | 0o2644, 10, 30);
        let chgrp = Sattr { gid: Some(20), ..NONE };
        assert_eq!(mode(&who(10, 1, &[20]), &sgid_30, chgrp), Some(0o644), "the group it leaves counts");
        // Group-executable: VolumeFs drops it for everyone.
        let sgid_x = attr(REG | 0o2755, 10, 20);
        assert_eq!(mode(&who(10, 1, &[]), &sgid_x, Sattr { uid: Some(10), ..NONE }), None);
        let dir = attr(DIR | 0o2755, 10, 20);
        assert_eq!(mode(&who(10, 1, &[]), &dir, Sattr { uid: Some(10), ..NONE }), None, "directories keep it");
    }

    #[test]
    fn times_client_for_owners_server_for_writers() {
        let f = attr(REG | 0o666, 10, 20);
        let stranger = who(11, 1, &[]);
        let both_now = Sattr { atime: SetTime::ServerTime, mtime: SetTime::ServerTime, ..NONE };
        assert_eq!(status(&stranger, &f, both_now), Stat::Ok, "touch with write permission");
        assert_eq!(status(&stranger, &f, Sattr { mtime: SetTime::ClientTime(5), ..NONE }), Stat::Perm);
        let mixed = Sattr { atime: SetTime::ServerTime, mtime: SetTime::ClientTime(5), ..NONE };
        assert_eq!(status(&stranger, &f, mixed), Stat::Perm, "a client time needs the owner");
        let ro = file();
        assert_eq!(status(&stranger, &ro, both_now), Stat::Acces, "touch without write permission");
        assert_eq!(status(&stranger, &ro, Sattr { mtime: SetTime::ClientTime(5), ..NONE }), Stat::Perm);
        let locked = attr(REG | 0o444, 10, 20);
        assert_eq!(status(&who(10, 1, &[]), &locked, both_now), Stat::Ok, "owner");
        assert_eq!(status(&who(10, 1, &[]), &locked, Sattr { atime: SetTime::ClientTime(5), ..NONE }), Stat::Ok);
        assert_eq!(status(&who(0, 0, &[]), &ro, Sattr { atime: SetTime::ClientTime(5), ..NONE }), Stat::Ok, "root");
        assert_eq!(status(&who(0, 0, &[]), &attr(REG, 10, 20), both_now), Stat::Ok, "root writes 0000");
    }

    #[test]
    fn size_needs_write_permission_or_ownership() {
        let f = file();
        assert_eq!(status(&who(11, 1, &[]), &f, Sattr { size: Some(0), ..NONE }), Stat::Acces);
        assert_eq!(status(&who(11, 20, &[]), &attr(REG | 0o664, 10, 20), Sattr { size: Some(0), ..NONE }), Stat::Ok);
        assert_eq!(status(&who(10, 1, &[]), &attr(REG | 0o444, 10, 20), Sattr { size: Some(0), ..NONE }), Stat::Ok);
        assert_eq!(status(&who(0, 0, &[]), &attr(REG, 10, 20), Sattr { size: Some(0), ..NONE }), Stat::Ok);
        assert_eq!(status(&who(0, 0, &[]), &attr(DIR | 0o755, 0, 0), Sattr { size: Some(0), ..NONE }), Stat::IsDir);
        assert_eq!(status(&who(11, 1, &[]), &attr(LNK | 0o777, 0, 0), Sattr { size: Some(0), ..NONE }), Stat::Inval);
        let kill =
            |uid| run(&who(uid, uid, &[]), &f, Sattr { size: Some(0), ..NONE }).ok().flatten().map(|s| s.kill_suid);
        assert_eq!((kill(10), kill(0)), (Some(true), Some(false)), "a non-root truncate takes set-id bits away");
    }

    #[test]
    fn errors_come_in_knfsds_order() {
        let f = file();
        let stranger = who(11, 1, &[]);
        // Write permission (ACCES) is checked before ownership (PERM).
        assert_eq!(status(&stranger, &f, Sattr { size: Some(0), mode: Some(0o600), ..NONE }), Stat::Acces);
        // A read-only export refuses before either.
        let s = Sattr { uid: Some(1), ..NONE };
        assert_eq!(check_access(&stranger, &f, &s, true), Err(Stat::RoFs));
        assert_eq!(check_access(&stranger, &f, &NONE, true), Err(Stat::RoFs), "even an empty SETATTR");
        assert_eq!(run(&stranger, &f, NONE).map(|s| s.is_none()), Ok(true), "an empty SETATTR changes nothing");
    }
}
