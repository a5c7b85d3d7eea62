//! SETATTR's permission rules through the server's request path (Linux's rules, see
//! src/nfs3/setattr.rs): each rule's exact status for each kind of caller, and the
//! attributes the file has afterwards (a refused SETATTR changes nothing, ctime included).

mod common;

use common::*;
use strata_nfs::xdr::{Decoder, Encoder};

const OK: u32 = 0;
const PERM: u32 = 1;
const ACCES: u32 = 13;
const ISDIR: u32 = 21;
const NOT_SYNC: u32 = 10002;

/// AUTH_SYS credentials: (uid, gid, supplementary gids).
type Cred = (u32, u32, &'static [u32]);
const ROOT: Cred = (0, 0, &[]);
const OWNER: Cred = (1000, 1000, &[]);
/// The owner, also in group 2000.
const OWNER_2000: Cred = (1000, 1000, &[2000]);
const STRANGER: Cred = (1001, 1001, &[]);

#[derive(Clone, Copy)]
enum Time {
    Keep,
    Now,
    At(u32),
}

#[derive(Clone, Copy)]
struct Sattr {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Time,
    mtime: Time,
}

const NONE: Sattr = Sattr { mode: None, uid: None, gid: None, size: None, atime: Time::Keep, mtime: Time::Keep };

fn put_sattr(e: &mut Encoder, s: &Sattr) {
    for v in [s.mode, s.uid, s.gid] {
        e.bool(v.is_some());
        if let Some(v) = v {
            e.u32(v);
        }
    }
    e.bool(s.size.is_some());
    if let Some(n) = s.size {
        e.u64(n);
    }
    for t in [s.atime, s.mtime] {
        match t {
            Time::Keep => e.u32(0),
            Time::Now => e.u32(1),
            Time::At(sec) => {
                e.u32(2);
                e.u32(sec);
                e.u32(0);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Attrs {
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime: (u32, u32),
    mtime: (u32, u32),
    ctime: (u32, u32),
}

fn getattr(w: &World, fh: &[u8]) -> Attrs {
    let r = w.call(NFS, 1, &fh_args(fh).buf);
    let mut d = Decoder::new(&r);
    assert_eq!(d.u32(), Ok(OK), "GETATTR");
    let _type = d.u32().expect("type");
    let mode = d.u32().expect("mode");
    let _nlink = d.u32().expect("nlink");
    let (uid, gid) = (d.u32().expect("uid"), d.u32().expect("gid"));
    let size = d.u64().expect("size");
    d.fixed(8 + 8 + 8).expect("used, rdev, fsid");
    let _fileid = d.u64().expect("fileid");
    let mut time = || (d.u32().expect("seconds"), d.u32().expect("nanoseconds"));
    let (atime, mtime, ctime) = (time(), time(), time());
    Attrs { mode, uid, gid, size, atime, mtime, ctime }
}

fn setattr_guarded(w: &World, who: Cred, fh: &[u8], s: Sattr, guard: Option<(u32, u32)>) -> u32 {
    let mut a = fh_args(fh);
    put_sattr(&mut a, &s);
    a.bool(guard.is_some());
    if let Some((sec, nsec)) = guard {
        a.u32(sec);
        a.u32(nsec);
    }
    status(&w.call_cred(localhost(), NFS, 2, who, &a.buf))
}

fn setattr(w: &World, who: Cred, fh: &[u8], s: Sattr) -> u32 {
    setattr_guarded(w, who, fh, s, None)
}

/// A new object made by root in a fresh directory, then given `mode`, `uid` and `gid` by
/// root. `kind`: 8 = CREATE (a file), 9 = MKDIR, 10 = SYMLINK.
fn object(w: &World, kind: u32, mode: u32, uid: u32, gid: u32) -> Vec<u8> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!("o{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let (_, root) = w.mnt(localhost(), "/test/a");
    let mut a = fh_args(&root);
    a.opaque(name.as_bytes());
    if kind == 8 {
        a.u32(0); // UNCHECKED
    }
    put_sattr(&mut a, &NONE);
    if kind == 10 {
        a.opaque(b"target");
    }
    let r = w.call(NFS, kind, &a.buf);
    let mut d = Decoder::new(&r);
    assert_eq!(d.u32(), Ok(OK), "made {name}");
    assert!(d.bool().expect("handle follows"));
    let fh = d.opaque(64).expect("fh").to_vec();
    let mode = if kind == 10 { None } else { Some(mode) };
    assert_eq!(setattr(w, ROOT, &fh, Sattr { mode, uid: Some(uid), gid: Some(gid), ..NONE }), OK);
    fh
}

fn file(w: &World, mode: u32) -> Vec<u8> {
    object(w, 8, mode, 1000, 1000)
}

/// `who`'s SETATTR `s` on a fresh file of `mode` (owner 1000, group `gid`): the status
/// and the mode, owner and group afterwards.
fn try_on(w: &World, mode: u32, gid: u32, who: Cred, s: Sattr) -> (u32, u32, u32, u32) {
    let fh = object(w, 8, mode, 1000, gid);
    let st = setattr(w, who, &fh, s);
    let a = getattr(w, &fh);
    (st, a.mode & 0o7777, a.uid, a.gid)
}

#[test]
fn chown_is_for_root_and_for_the_owner_naming_himself() {
    let w = world();
    let f = file(&w, 0o644);
    let before = getattr(&w, &f);
    assert_eq!(setattr(&w, STRANGER, &f, Sattr { uid: Some(1000), ..NONE }), PERM, "a stranger naming the owner");
    assert_eq!(setattr(&w, STRANGER, &f, Sattr { uid: Some(1001), ..NONE }), PERM, "a stranger taking it");
    assert_eq!(setattr(&w, OWNER, &f, Sattr { uid: Some(1001), ..NONE }), PERM, "the owner giving it away");
    assert_eq!(getattr(&w, &f), before, "refusals change nothing, not even ctime");
    assert_eq!(setattr(&w, OWNER, &f, Sattr { uid: Some(1000), ..NONE }), OK, "the owner naming himself");
    assert_eq!(setattr(&w, ROOT, &f, Sattr { uid: Some(1001), ..NONE }), OK);
    assert_eq!(getattr(&w, &f).uid, 1001);
    // lchown: the same rules on a symlink.
    let l = object(&w, 10, 0, 1000, 1000);
    assert_eq!(setattr(&w, STRANGER, &l, Sattr { uid: Some(1000), ..NONE }), PERM);
    assert_eq!(setattr(&w, OWNER, &l, Sattr { uid: Some(1000), ..NONE }), OK);
    assert_eq!(setattr(&w, ROOT, &l, Sattr { uid: Some(7), gid: Some(8), ..NONE }), OK);
    assert_eq!((getattr(&w, &l).uid, getattr(&w, &l).gid), (7, 8));
}

#[test]
fn chgrp_is_for_the_owner_to_his_groups() {
    let w = world();
    let to = |gid| Sattr { gid: Some(gid), ..NONE };
    assert_eq!(try_on(&w, 0o644, 1000, OWNER_2000, to(2000)), (OK, 0o644, 1000, 2000), "supplementary group");
    assert_eq!(try_on(&w, 0o644, 2000, OWNER_2000, to(1000)), (OK, 0o644, 1000, 1000), "primary group");
    assert_eq!(try_on(&w, 0o644, 1000, OWNER, to(2000)), (PERM, 0o644, 1000, 1000), "not a member");
    assert_eq!(try_on(&w, 0o644, 3000, OWNER, to(3000)), (OK, 0o644, 1000, 3000), "the owner, to the same group");
    let member: Cred = (1001, 2000, &[3000]);
    assert_eq!(try_on(&w, 0o644, 2000, member, to(2000)), (PERM, 0o644, 1000, 2000), "a stranger, same group");
    assert_eq!(try_on(&w, 0o644, 1000, member, to(3000)), (PERM, 0o644, 1000, 1000), "a stranger, his group");
    assert_eq!(try_on(&w, 0o644, 1000, ROOT, to(4242)), (OK, 0o644, 1000, 4242));
}

#[test]
fn chmod_is_for_the_owner_and_setgid_needs_the_group() {
    let w = world();
    let chmod = |m| Sattr { mode: Some(m), ..NONE };
    assert_eq!(try_on(&w, 0o644, 1000, STRANGER, chmod(0o777)), (PERM, 0o644, 1000, 1000));
    let in_group: Cred = (1001, 1000, &[]);
    assert_eq!(
        try_on(&w, 0o664, 1000, in_group, chmod(0o777)),
        (PERM, 0o664, 1000, 1000),
        "write permission is not enough"
    );
    assert_eq!(try_on(&w, 0o644, 1000, OWNER, chmod(0o4700)), (OK, 0o4700, 1000, 1000));
    assert_eq!(try_on(&w, 0o644, 2000, OWNER, chmod(0o2755)), (OK, 0o755, 1000, 2000), "not in group 2000");
    assert_eq!(try_on(&w, 0o644, 2000, OWNER_2000, chmod(0o2755)), (OK, 0o2755, 1000, 2000), "in group 2000");
    assert_eq!(try_on(&w, 0o644, 2000, ROOT, chmod(0o2755)), (OK, 0o2755, 1000, 2000), "CAP_FSETID");
    // The group that counts is the one the same request sets (set-group-id without
    // group-execute: with it, the chgrp would take the bit away on its own).
    assert_eq!(try_on(&w, 0o644, 3000, OWNER_2000, chmod(0o2745)), (OK, 0o745, 1000, 3000));
    let both = Sattr { mode: Some(0o2745), gid: Some(2000), ..NONE };
    assert_eq!(try_on(&w, 0o644, 3000, OWNER_2000, both), (OK, 0o2745, 1000, 2000));
    let both = Sattr { mode: Some(0o2755), gid: Some(2000), ..NONE };
    assert_eq!(try_on(&w, 0o644, 3000, OWNER_2000, both), (OK, 0o755, 1000, 2000));
    // Directories too.
    let d = object(&w, 9, 0o755, 1000, 2000);
    assert_eq!(setattr(&w, OWNER, &d, chmod(0o2775)), OK);
    assert_eq!(getattr(&w, &d).mode & 0o7777, 0o775);
    // A symlink's mode is ignored, whoever asks (knfsd); nothing changes.
    let l = object(&w, 10, 0, 1000, 1000);
    let before = getattr(&w, &l);
    assert_eq!(setattr(&w, STRANGER, &l, chmod(0o600)), OK);
    assert_eq!(getattr(&w, &l), before);
}

#[test]
fn chown_takes_set_id_bits_away() {
    let w = world();
    let me = Sattr { uid: Some(1000), ..NONE };
    assert_eq!(try_on(&w, 0o6755, 2000, OWNER, me), (OK, 0o755, 1000, 2000), "set-uid, group-executable set-gid");
    assert_eq!(try_on(&w, 0o6755, 2000, ROOT, me), (OK, 0o755, 1000, 2000), "by root too");
    assert_eq!(try_on(&w, 0o2644, 2000, OWNER, me), (OK, 0o644, 1000, 2000), "caller not in the group");
    assert_eq!(try_on(&w, 0o2644, 2000, OWNER_2000, me), (OK, 0o2644, 1000, 2000), "caller in the group");
    assert_eq!(try_on(&w, 0o2644, 2000, ROOT, me), (OK, 0o2644, 1000, 2000), "root");
    let chgrp = Sattr { gid: Some(2000), ..NONE };
    assert_eq!(try_on(&w, 0o4755, 1000, OWNER_2000, chgrp), (OK, 0o755, 1000, 2000), "chgrp");
    assert_eq!(try_on(&w, 0o2644, 3000, OWNER_2000, chgrp), (OK, 0o644, 1000, 2000), "the group it leaves counts");
    // With a mode in the same request, set-uid goes from that mode.
    let both = Sattr { uid: Some(1000), mode: Some(0o4711), ..NONE };
    assert_eq!(try_on(&w, 0o644, 1000, OWNER, both), (OK, 0o711, 1000, 1000));
    // Directories keep theirs.
    let d = object(&w, 9, 0o2755, 1000, 2000);
    assert_eq!(setattr(&w, OWNER_2000, &d, me), OK);
    assert_eq!(getattr(&w, &d).mode & 0o7777, 0o2755);
}

#[test]
fn explicit_times_for_the_owner_server_time_for_writers() {
    let w = world();
    let shared = file(&w, 0o666);
    let both_now = Sattr { atime: Time::Now, mtime: Time::Now, ..NONE };
    let explicit = Sattr { atime: Time::At(7), mtime: Time::At(7), ..NONE };
    let before = getattr(&w, &shared);
    assert_eq!(setattr(&w, STRANGER, &shared, explicit), PERM, "explicit times need the owner");
    assert_eq!(setattr(&w, STRANGER, &shared, Sattr { atime: Time::Now, mtime: Time::At(7), ..NONE }), PERM);
    assert_eq!(getattr(&w, &shared), before);
    assert_eq!(setattr(&w, STRANGER, &shared, Sattr { mtime: Time::Now, ..NONE }), OK, "write permission");
    assert_eq!(setattr(&w, STRANGER, &shared, both_now), OK);

    let private = file(&w, 0o644);
    let before = getattr(&w, &private);
    assert_eq!(setattr(&w, STRANGER, &private, both_now), ACCES, "no write permission");
    assert_eq!(setattr(&w, STRANGER, &private, explicit), PERM);
    assert_eq!(getattr(&w, &private), before);
    assert_eq!(setattr(&w, OWNER, &private, explicit), OK);
    assert_eq!((getattr(&w, &private).atime, getattr(&w, &private).mtime), ((7, 0), (7, 0)));
    let locked = file(&w, 0o444);
    assert_eq!(setattr(&w, OWNER, &locked, both_now), OK, "the owner needs no write permission");
    assert_eq!(setattr(&w, ROOT, &private, Sattr { mtime: Time::At(9), ..NONE }), OK, "CAP_FOWNER");
    assert_eq!(getattr(&w, &private).mtime, (9, 0));
}

#[test]
fn size_needs_write_permission_or_ownership() {
    let w = world();
    let f = file(&w, 0o644);
    assert_eq!(setattr(&w, OWNER, &f, Sattr { size: Some(10), ..NONE }), OK);
    assert_eq!(setattr(&w, STRANGER, &f, Sattr { size: Some(0), ..NONE }), ACCES);
    assert_eq!(getattr(&w, &f).size, 10);
    let g = object(&w, 8, 0o664, 1000, 2000);
    assert_eq!(setattr(&w, (1001, 2000, &[]), &g, Sattr { size: Some(3), ..NONE }), OK, "group write");
    let locked = file(&w, 0o444);
    assert_eq!(setattr(&w, OWNER, &locked, Sattr { size: Some(5), ..NONE }), OK, "knfsd's owner override");
    assert_eq!(getattr(&w, &locked).size, 5);
    let (_, root) = w.mnt(localhost(), "/test/a");
    assert_eq!(setattr(&w, ROOT, &root, Sattr { size: Some(0), ..NONE }), ISDIR);
}

#[test]
fn refusals_come_in_knfsds_order() {
    let w = world();
    let f = file(&w, 0o644);
    // Write permission (ACCES) before ownership (PERM).
    assert_eq!(setattr(&w, STRANGER, &f, Sattr { size: Some(0), mode: Some(0o777), ..NONE }), ACCES);
    // Write permission before the guard, the guard before ownership.
    let stale = Some((1, 0));
    assert_eq!(setattr_guarded(&w, STRANGER, &f, Sattr { size: Some(0), ..NONE }, stale), ACCES);
    assert_eq!(setattr_guarded(&w, STRANGER, &f, Sattr { mode: Some(0o777), ..NONE }, stale), NOT_SYNC);
    let ctime = getattr(&w, &f).ctime;
    assert_eq!(setattr_guarded(&w, STRANGER, &f, Sattr { mode: Some(0o777), ..NONE }, Some(ctime)), PERM);
    assert_eq!(setattr_guarded(&w, OWNER, &f, Sattr { mode: Some(0o600), ..NONE }, Some(ctime)), OK);
    assert_eq!(getattr(&w, &f).mode & 0o7777, 0o600);
}
