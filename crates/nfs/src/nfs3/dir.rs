//! Procedures on names: LOOKUP, CREATE (UNCHECKED, GUARDED, EXCLUSIVE), MKDIR, SYMLINK,
//! MKNOD, REMOVE, RMDIR, RENAME, LINK, READDIR and READDIRPLUS.
//!
//! EXCLUSIVE CREATE keeps the client's 8-byte verifier in the new file's atime and mtime
//! seconds (as knfsd does): a retransmitted CREATE finds a file with the same verifier and
//! succeeds, a different client's gets EXIST; the client then sets the real times.
//!
//! READDIR cookies are positions in the directory's sorted listing (1 = after "."), and the
//! cookie verifier is not checked: a directory changed between two calls may show an entry
//! twice or skip one, as on servers without stable cookies; a client never loops. Each call
//! lists the whole directory (VolumeFs::readdir): fine for thousands of entries, a cost for
//! millions (a readdir-from-name in VolumeFs would fix it).

use super::access::{self, check_dir_write, MAY_EXEC, MAY_READ, MAY_WRITE};
use super::attr::{dev_join, get_sattr, put_post_op_attr, put_wcc, Sattr, SetTime, FATTR3_BYTES};
use super::{name, resolve, status, NfsResult, Node, Stat, MAX_IO_BYTES};
use crate::handle::HANDLE_BYTES;
use crate::server::{Handled, Request};
use crate::xdr::{pad, Encoder, XdrError};
use strata_fs::{Attr, Caller, SetAttr, NAME_MAX, SYMLINK_MAX};

fn check_name(n: &[u8]) -> NfsResult<()> {
    if n.len() > NAME_MAX {
        return Err(Stat::NameTooLong);
    }
    if n.is_empty() || n.contains(&b'/') || n.contains(&0) {
        return Err(Stat::Inval);
    }
    Ok(())
}

fn caller(n: &Node) -> Caller {
    Caller { uid: n.who.uid, gid: n.who.gid }
}

pub(crate) fn lookup(req: &mut Request<'_>) -> Handled {
    let dir = resolve(req)?;
    let nm = name(&mut req.args)?;
    let mut e = req.reply(12 + HANDLE_BYTES + 2 * FATTR3_BYTES);
    let d = match dir {
        Ok(d) => d,
        Err(s) => {
            status(&mut e, s);
            e.bool(false);
            return Ok(e);
        }
    };
    let found = (|| {
        if d.attr.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(Stat::NotDir);
        }
        access::check(&d.who, &d.attr, MAY_EXEC)?;
        check_name(nm)?;
        Ok(d.fs().lookup(d.ino, nm)?)
    })();
    match found {
        Ok(a) => {
            status(&mut e, Stat::Ok);
            e.opaque(&d.handle_of(req.shared, &a));
            put_post_op_attr(&mut e, &d.export, Some(&a));
            put_post_op_attr(&mut e, &d.export, Some(&d.attr));
        }
        Err(s) => {
            status(&mut e, s);
            put_post_op_attr(&mut e, &d.export, Some(&d.attr));
        }
    }
    Ok(e)
}

/// Reply of CREATE, MKDIR, SYMLINK, MKNOD: OK → handle, attributes, directory wcc; an
/// error → directory wcc. `make` runs after the common checks (directory, writable export,
/// permission to add an entry, name).
fn make_reply(
    req: &mut Request<'_>,
    dir: NfsResult<Node>,
    nm: &[u8],
    make: impl FnOnce(&Node) -> NfsResult<Attr>,
) -> Encoder {
    let mut e = req.reply(16 + HANDLE_BYTES + 3 * FATTR3_BYTES);
    let d = match dir {
        Ok(d) => d,
        Err(s) => {
            status(&mut e, s);
            e.bool(false); // wcc_data: no before, no after
            e.bool(false);
            return e;
        }
    };
    let r = (|| {
        if d.attr.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(Stat::NotDir);
        }
        d.writable()?;
        check_dir_write(&d.who, &d.attr)?;
        check_name(nm)?;
        make(&d)
    })();
    let after = d.reload();
    match r {
        Ok(a) => {
            status(&mut e, Stat::Ok);
            e.bool(true);
            e.opaque(&d.handle_of(req.shared, &a));
            put_post_op_attr(&mut e, &d.export, Some(&a));
        }
        Err(s) => status(&mut e, s),
    }
    put_wcc(&mut e, &d.export, Some(&d.attr), after.as_ref());
    e
}

/// Apply what a create's sattr3 asks beyond the mode given at creation: owner (root only,
/// or the caller's own ids), size, times. Returns the final attributes.
fn apply_sattr(d: &Node, a: Attr, s: &Sattr) -> NfsResult<Attr> {
    let uid = s.uid.filter(|&u| u != a.uid && d.who.uid == 0);
    let gid = s.gid.filter(|&g| g != a.gid && (d.who.uid == 0 || d.who.in_group(g)));
    let set = SetAttr {
        mode: None,
        uid,
        gid,
        size: s.size.filter(|&n| n != a.size),
        atime_ns: s.atime.as_fs(),
        mtime_ns: s.mtime.as_fs(),
        kill_suid: d.who.uid != 0,
    };
    if set.uid.is_none()
        && set.gid.is_none()
        && set.size.is_none()
        && s.atime == SetTime::Keep
        && s.mtime == SetTime::Keep
    {
        return Ok(a);
    }
    Ok(d.fs().setattr(a.ino, set)?)
}

pub(crate) fn create(req: &mut Request<'_>) -> Handled {
    const UNCHECKED: u32 = 0;
    const GUARDED: u32 = 1;
    const EXCLUSIVE: u32 = 2;
    let dir = resolve(req)?;
    let nm = name(&mut req.args)?;
    let how = req.args.u32()?;
    let (sattr, verf) = match how {
        UNCHECKED | GUARDED => (Some(get_sattr(&mut req.args)?), None),
        EXCLUSIVE => (None, Some(req.args.fixed(8)?)),
        _ => return Err(XdrError),
    };
    Ok(make_reply(req, dir, nm, |d| {
        let existing = match d.fs().lookup(d.ino, nm) {
            Ok(a) => Some(a),
            Err(e) if e.errno == libc::ENOENT => None,
            Err(e) => return Err(e.into()),
        };
        if let Some(verf) = verf {
            let atime = u32::from_be_bytes(verf[..4].try_into().expect("4 bytes")) as i64 * 1_000_000_000;
            let mtime = u32::from_be_bytes(verf[4..].try_into().expect("4 bytes")) as i64 * 1_000_000_000;
            if let Some(a) = existing {
                // A retransmission of our own CREATE finds its verifier.
                let ours = a.mode & libc::S_IFMT == libc::S_IFREG && a.atime_ns == atime && a.mtime_ns == mtime;
                return if ours { Ok(a) } else { Err(Stat::Exist) };
            }
            let a = d.fs().mknod(caller(d), d.ino, nm, libc::S_IFREG | 0o600, 0)?;
            let times = SetAttr { atime_ns: Some(Some(atime)), mtime_ns: Some(Some(mtime)), ..Default::default() };
            return Ok(d.fs().setattr(a.ino, times)?);
        }
        let s = sattr.expect("UNCHECKED and GUARDED carry sattr3");
        if let Some(a) = existing {
            if how == GUARDED || a.mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Stat::Exist);
            }
            // UNCHECKED on an existing file: it is the file, truncated if asked.
            if s.size.is_some() {
                access::check_write_data(&d.who, &a)?;
            }
            return apply_sattr(d, a, &Sattr { mode: None, uid: None, gid: None, ..s });
        }
        let mode = s.mode.unwrap_or(0o644) & 0o7777;
        let a = match d.fs().mknod(caller(d), d.ino, nm, libc::S_IFREG | mode, 0) {
            Err(e) if e.errno == libc::EEXIST && how == UNCHECKED => d.fs().lookup(d.ino, nm)?,
            r => r?,
        };
        apply_sattr(d, a, &s)
    }))
}

pub(crate) fn mkdir(req: &mut Request<'_>) -> Handled {
    let dir = resolve(req)?;
    let nm = name(&mut req.args)?;
    let s = get_sattr(&mut req.args)?;
    Ok(make_reply(req, dir, nm, |d| {
        let a = d.fs().mkdir(caller(d), d.ino, nm, s.mode.unwrap_or(0o755) & 0o7777)?;
        apply_sattr(d, a, &Sattr { size: None, ..s })
    }))
}

pub(crate) fn symlink(req: &mut Request<'_>) -> Handled {
    let dir = resolve(req)?;
    let nm = name(&mut req.args)?;
    let s = get_sattr(&mut req.args)?;
    let target = req.args.string(2 * SYMLINK_MAX)?;
    Ok(make_reply(req, dir, nm, |d| {
        if target.len() > SYMLINK_MAX {
            return Err(Stat::NameTooLong);
        }
        let a = d.fs().symlink(caller(d), d.ino, nm, target)?;
        apply_sattr(d, a, &Sattr { size: None, mode: None, ..s })
    }))
}

pub(crate) fn mknod(req: &mut Request<'_>) -> Handled {
    let dir = resolve(req)?;
    let nm = name(&mut req.args)?;
    let ftype = req.args.u32()?;
    let (kind, s, rdev) = match ftype {
        3 | 4 => {
            let s = get_sattr(&mut req.args)?;
            let (major, minor) = (req.args.u32()?, req.args.u32()?);
            (if ftype == 3 { libc::S_IFBLK } else { libc::S_IFCHR }, Some(s), dev_join(major, minor))
        }
        6 | 7 => (if ftype == 6 { libc::S_IFSOCK } else { libc::S_IFIFO }, Some(get_sattr(&mut req.args)?), 0),
        1 | 2 | 5 => (0, None, 0),
        _ => return Err(XdrError),
    };
    Ok(make_reply(req, dir, nm, |d| {
        let Some(s) = s else { return Err(Stat::BadType) };
        if (kind == libc::S_IFBLK || kind == libc::S_IFCHR) && d.who.uid != 0 {
            return Err(Stat::Perm);
        }
        let a = d.fs().mknod(caller(d), d.ino, nm, kind | (s.mode.unwrap_or(0o644) & 0o7777), rdev)?;
        apply_sattr(d, a, &Sattr { size: None, mode: None, ..s })
    }))
}

/// Reply `status, wcc_data` for the directory of REMOVE and RMDIR.
fn dir_wcc_reply(req: &Request<'_>, dir: NfsResult<Node>, f: impl FnOnce(&Node) -> NfsResult<()>) -> Encoder {
    let mut e = req.reply(8 + 2 * FATTR3_BYTES + 24);
    match dir {
        Err(s) => {
            status(&mut e, s);
            e.bool(false);
            e.bool(false);
        }
        Ok(d) => {
            let r = f(&d);
            let after = d.reload();
            status(&mut e, r.err().unwrap_or(Stat::Ok));
            put_wcc(&mut e, &d.export, Some(&d.attr), after.as_ref());
        }
    }
    e
}

/// Checks before an entry of `d` named `nm` goes away (REMOVE, RMDIR, RENAME source and
/// replaced target): directory, writable, permission, sticky bit. `Ok(None)` if absent.
fn check_removal(d: &Node, nm: &[u8]) -> NfsResult<Option<Attr>> {
    if d.attr.mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(Stat::NotDir);
    }
    d.writable()?;
    check_dir_write(&d.who, &d.attr)?;
    if nm.len() > NAME_MAX {
        return Err(Stat::NameTooLong);
    }
    if nm == b"." || nm == b".." {
        return Ok(None);
    }
    match d.fs().lookup(d.ino, nm) {
        Ok(v) => {
            access::check_sticky(&d.who, &d.attr, &v)?;
            Ok(Some(v))
        }
        Err(e) if e.errno == libc::ENOENT => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn remove(req: &mut Request<'_>, rmdir: bool) -> Handled {
    let dir = resolve(req)?;
    let nm = name(&mut req.args)?;
    Ok(dir_wcc_reply(req, dir, |d| {
        check_removal(d, nm)?;
        if rmdir {
            d.fs().rmdir(d.ino, nm)?;
        } else {
            d.fs().unlink(d.ino, nm)?;
        }
        Ok(())
    }))
}

pub(crate) fn rename(req: &mut Request<'_>) -> Handled {
    let from = resolve(req)?;
    let from_name = name(&mut req.args)?;
    let to = resolve(req)?;
    let to_name = name(&mut req.args)?;
    let mut e = req.reply(8 + 4 * FATTR3_BYTES + 48);
    let (f, t) = match (from, to) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(s), _) | (_, Err(s)) => {
            status(&mut e, s);
            for _ in 0..4 {
                e.bool(false);
            }
            return Ok(e);
        }
    };
    let r = (|| {
        if f.export.id != t.export.id {
            return Err(Stat::XDev);
        }
        let src = check_removal(&f, from_name)?.ok_or(Stat::NoEnt)?;
        check_removal(&t, to_name)?;
        check_name(to_name)?;
        // Moving a directory to another parent rewrites its "..": it must be writable.
        if src.mode & libc::S_IFMT == libc::S_IFDIR && f.ino != t.ino {
            access::check(&f.who, &src, MAY_WRITE)?;
        }
        Ok(f.fs().rename(f.ino, from_name, t.ino, to_name, 0)?)
    })();
    let (fa, ta) = (f.reload(), t.reload());
    status(&mut e, r.err().unwrap_or(Stat::Ok));
    put_wcc(&mut e, &f.export, Some(&f.attr), fa.as_ref());
    put_wcc(&mut e, &t.export, Some(&t.attr), ta.as_ref());
    Ok(e)
}

pub(crate) fn link(req: &mut Request<'_>) -> Handled {
    let file = resolve(req)?;
    let dir = resolve(req)?;
    let nm = name(&mut req.args)?;
    let mut e = req.reply(12 + 3 * FATTR3_BYTES + 24);
    let (f, d) = match (file, dir) {
        (Ok(f), Ok(d)) => (f, d),
        (Err(s), _) | (_, Err(s)) => {
            status(&mut e, s);
            for _ in 0..3 {
                e.bool(false);
            }
            return Ok(e);
        }
    };
    let r = (|| {
        if f.export.id != d.export.id {
            return Err(Stat::XDev);
        }
        if d.attr.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(Stat::NotDir);
        }
        d.writable()?;
        check_dir_write(&d.who, &d.attr)?;
        check_name(nm)?;
        Ok(d.fs().link(f.ino, d.ino, nm)?)
    })();
    let (fa, da) = (f.reload(), d.reload());
    status(&mut e, r.err().unwrap_or(Stat::Ok));
    put_post_op_attr(&mut e, &f.export, fa.as_ref());
    put_wcc(&mut e, &d.export, Some(&d.attr), da.as_ref());
    Ok(e)
}

/// READDIR (plus = false) and READDIRPLUS (plus = true).
pub(crate) fn readdir(req: &mut Request<'_>, plus: bool) -> Handled {
    let dir = resolve(req)?;
    let cookie = req.args.u64()?;
    let _verf = req.args.fixed(8)?;
    let (dircount, maxcount) = if plus {
        (req.args.u32()?, req.args.u32()?)
    } else {
        let c = req.args.u32()?;
        (c, c)
    };
    // Bound the reply whatever the client asks.
    let maxcount = maxcount.min(MAX_IO_BYTES) as usize;
    let dircount = dircount.min(MAX_IO_BYTES) as usize;
    let d = match dir {
        Ok(d) => d,
        Err(s) => {
            let mut e = req.reply(8);
            status(&mut e, s);
            e.bool(false);
            return Ok(e);
        }
    };
    let listing = (|| {
        if d.attr.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(Stat::NotDir);
        }
        access::check(&d.who, &d.attr, MAY_READ)?;
        Ok(d.fs().readdir(d.ino)?)
    })();
    let entries = match listing {
        Ok(v) => v,
        Err(s) => {
            let mut e = req.reply(8 + FATTR3_BYTES);
            status(&mut e, s);
            put_post_op_attr(&mut e, &d.export, Some(&d.attr));
            return Ok(e);
        }
    };
    // status, dir attributes, cookie verifier, end of list, eof.
    let overhead = 4 + 4 + FATTR3_BYTES + 8 + 4 + 4;
    let mut body = Encoder::with_capacity(maxcount.min(64 << 10));
    let (mut used, mut dir_used) = (overhead, 0usize);
    let start = usize::try_from(cookie).unwrap_or(usize::MAX).min(entries.len());
    let mut eof = true;
    for (i, ent) in entries.iter().enumerate().skip(start) {
        let name_bytes = 4 + ent.name.len() + pad(ent.name.len());
        let base = 4 + 8 + name_bytes + 8;
        let attr = if plus { d.fs().getattr(ent.ino).ok() } else { None };
        let size = base
            + if plus { 4 + attr.map_or(0, |_| FATTR3_BYTES) + 4 + attr.map_or(0, |_| 4 + HANDLE_BYTES) } else { 0 };
        if used + size > maxcount || (plus && dir_used + 8 + name_bytes + 8 > dircount) {
            eof = false;
            break;
        }
        used += size;
        dir_used += 8 + name_bytes + 8;
        body.bool(true);
        body.u64(ent.ino);
        body.opaque(&ent.name);
        body.u64(i as u64 + 1);
        if plus {
            put_post_op_attr(&mut body, &d.export, attr.as_ref());
            match attr {
                Some(a) => {
                    body.bool(true);
                    body.opaque(&d.handle_of(req.shared, &a));
                }
                None => body.bool(false),
            }
        }
    }
    if body.is_empty() && !eof {
        let mut e = req.reply(8 + FATTR3_BYTES);
        status(&mut e, Stat::TooSmall);
        put_post_op_attr(&mut e, &d.export, Some(&d.attr));
        return Ok(e);
    }
    let mut e = req.reply(used);
    status(&mut e, Stat::Ok);
    put_post_op_attr(&mut e, &d.export, Some(&d.attr));
    e.fixed(&[0u8; 8]);
    e.buf.extend_from_slice(&body.buf);
    e.bool(false);
    e.bool(eof);
    Ok(e)
}
