"""SETATTR's permission rules, Linux's (crates/nfs/src/nfs3/setattr.rs), through real
clients: libnfs for what its API does (chown, lchown, chmod, truncate, utimes(NULL)) and
rpc3 for the rest (exact status codes, client times, supplementary groups, the guard).
Each test checks the status a caller gets and the attributes the object has afterwards.

Objects are made by root in a fresh world-writable directory, then given their mode and
owner by root; 1000 owns them, 1001 is a stranger."""

import errno
import uuid

import pytest

import rpc3
from rpc3 import OK, PERM, ACCES, NOW
from conftest import HOST, PORT, Lib, strata

OWNER, STRANGER = 1000, 1001


def client(uid, gid=None, groups=()):
    return rpc3.Client(HOST, PORT, uid=uid, gid=uid if gid is None else gid, groups=groups)


@pytest.fixture()
def as_user():
    """as_user(uid, gid=uid, groups=()): an rpc3 client with those AUTH_SYS credentials."""
    made = []

    def make(uid, gid=None, groups=()):
        made.append(client(uid, gid, groups))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture()
def obj(rpc, workdir):
    """obj(name, mode, uid=OWNER, gid=OWNER, kind="file"|"dir"|"symlink"): its handle."""
    d, _ = workdir

    def make(name, mode, uid=OWNER, gid=OWNER, kind="file"):
        if kind == "file":
            st, r = rpc.create(d, name, mode=0o600)
        elif kind == "dir":
            st, r = rpc.mkdir(d, name, mode=0o700)
        else:
            st, r = rpc.symlink(d, name, "target")
        assert st == OK
        st, _ = rpc.setattr(r["fh"], uid=uid, gid=gid, mode=None if kind == "symlink" else mode)
        assert st == OK
        return r["fh"]

    return make


def attrs(rpc, fh):
    st, a = rpc.getattr(fh)
    assert st == OK
    return a


def owner_mode(rpc, fh):
    a = attrs(rpc, fh)
    return a["uid"], a["gid"], a["mode"] & 0o7777


def test_chown_to_the_current_owner_is_refused_to_others(rpc, obj, as_user, rw_export, workdir):
    """The issue: a stranger could chown a file, and lchown a symlink, to its owner."""
    _, dname = workdir
    f = obj("f", 0o644)
    link = obj("l", 0, kind="symlink")
    before = attrs(rpc, f)
    stranger = Lib(rw_export, uid=STRANGER, gid=STRANGER)
    assert stranger.mount_status == 0
    assert stranger.L.nfs_chown(stranger.ctx, f"/{dname}/f", OWNER, -1) == -errno.EPERM
    assert stranger.L.nfs_lchown(stranger.ctx, f"/{dname}/l", OWNER, -1) == -errno.EPERM
    s = as_user(STRANGER)
    assert s.setattr(f, uid=OWNER)[0] == PERM
    assert s.setattr(link, uid=OWNER)[0] == PERM
    assert s.setattr(f, uid=STRANGER)[0] == PERM
    assert attrs(rpc, f) == before, "a refused SETATTR changes nothing, ctime included"
    assert owner_mode(rpc, link)[:2] == (OWNER, OWNER)


def test_chown_is_for_root_and_the_owner_naming_himself(rpc, obj, as_user, rw_export, workdir):
    _, dname = workdir
    f = obj("f", 0o644)
    owner = Lib(rw_export, uid=OWNER, gid=OWNER)
    assert owner.L.nfs_chown(owner.ctx, f"/{dname}/f", STRANGER, -1) == -errno.EPERM, "giving it away"
    assert owner.L.nfs_chown(owner.ctx, f"/{dname}/f", OWNER, -1) == 0, "naming himself"
    assert as_user(OWNER).setattr(f, uid=STRANGER)[0] == PERM
    assert owner_mode(rpc, f) == (OWNER, OWNER, 0o644)
    assert rpc.setattr(f, uid=STRANGER)[0] == OK, "root (no root squash)"
    assert owner_mode(rpc, f) == (STRANGER, OWNER, 0o644)
    link = obj("l", 0, kind="symlink")
    assert rpc.setattr(link, uid=7, gid=8)[0] == OK
    assert owner_mode(rpc, link)[:2] == (7, 8)


def test_chgrp_is_for_the_owner_to_his_groups(rpc, obj, as_user):
    f = obj("f", 0o644)
    member = as_user(OWNER, OWNER, groups=[2000])
    assert member.setattr(f, gid=2000)[0] == OK, "a supplementary group"
    assert owner_mode(rpc, f) == (OWNER, 2000, 0o644)
    assert member.setattr(f, gid=OWNER)[0] == OK, "his primary group"
    assert as_user(OWNER).setattr(f, gid=3000)[0] == PERM, "not a member"
    assert as_user(OWNER).setattr(f, gid=OWNER)[0] == OK, "the group it has"
    assert owner_mode(rpc, f) == (OWNER, OWNER, 0o644)
    # Anyone else: refused, even to the group it has or to one of his own.
    assert as_user(STRANGER, OWNER).setattr(f, gid=OWNER)[0] == PERM
    assert as_user(STRANGER, 3000).setattr(f, gid=3000)[0] == PERM
    assert owner_mode(rpc, f) == (OWNER, OWNER, 0o644)
    assert rpc.setattr(f, gid=4242)[0] == OK
    assert owner_mode(rpc, f) == (OWNER, 4242, 0o644)


def test_chmod_is_for_the_owner(rpc, obj, as_user, rw_export, workdir):
    _, dname = workdir
    f = obj("f", 0o664)
    stranger = Lib(rw_export, uid=STRANGER, gid=OWNER)  # in the file's group, may write it
    assert stranger.L.nfs_chmod(stranger.ctx, f"/{dname}/f", 0o777) == -errno.EPERM
    assert as_user(STRANGER).setattr(f, mode=0o777)[0] == PERM
    assert owner_mode(rpc, f) == (OWNER, OWNER, 0o664)
    owner = Lib(rw_export, uid=OWNER, gid=OWNER)
    assert owner.L.nfs_chmod(owner.ctx, f"/{dname}/f", 0o4700) == 0
    assert owner_mode(rpc, f) == (OWNER, OWNER, 0o4700)
    assert rpc.setattr(f, mode=0o640)[0] == OK
    assert owner_mode(rpc, f) == (OWNER, OWNER, 0o640)
    # A symlink's mode is ignored (as knfsd ignores it), whoever asks; nothing changes.
    link = obj("l", 0, kind="symlink")
    before = attrs(rpc, link)
    assert as_user(STRANGER).setattr(link, mode=0o600)[0] == OK
    assert attrs(rpc, link) == before


def test_chmod_drops_setgid_outside_the_group(rpc, obj, as_user):
    f = obj("f", 0o644, gid=2000)
    assert as_user(OWNER).setattr(f, mode=0o2755)[0] == OK
    assert owner_mode(rpc, f) == (OWNER, 2000, 0o755), "the owner is not in group 2000"
    assert as_user(OWNER, OWNER, groups=[2000]).setattr(f, mode=0o2755)[0] == OK
    assert owner_mode(rpc, f) == (OWNER, 2000, 0o2755), "now he is"
    g = obj("g", 0o644, gid=2000)
    assert rpc.setattr(g, mode=0o2755)[0] == OK
    assert owner_mode(rpc, g) == (OWNER, 2000, 0o2755), "root (CAP_FSETID)"
    d = obj("d", 0o755, gid=2000, kind="dir")
    assert as_user(OWNER).setattr(d, mode=0o2775)[0] == OK
    assert owner_mode(rpc, d) == (OWNER, 2000, 0o775), "directories too"
    # The group that counts is the one the same request sets.
    h = obj("h", 0o644, gid=3000)
    assert as_user(OWNER, OWNER, groups=[2000]).setattr(h, mode=0o2745, gid=2000)[0] == OK
    assert owner_mode(rpc, h) == (OWNER, 2000, 0o2745)


def test_chown_takes_set_id_bits_away(rpc, obj, as_user, rw_export, workdir):
    _, dname = workdir
    f = obj("f", 0o6755, gid=2000)
    owner = Lib(rw_export, uid=OWNER, gid=OWNER)
    assert owner.L.nfs_chown(owner.ctx, f"/{dname}/f", OWNER, -1) == 0
    assert owner_mode(rpc, f) == (OWNER, 2000, 0o755), "set-uid, and set-gid with group-execute"
    g = obj("g", 0o6755, gid=2000)
    assert rpc.setattr(g, uid=OWNER)[0] == OK
    assert owner_mode(rpc, g) == (OWNER, 2000, 0o755), "root's chown too"
    # Set-gid without group-execute: dropped unless the caller is in the group (or root).
    h = obj("h", 0o2644, gid=2000)
    assert as_user(OWNER).setattr(h, uid=OWNER)[0] == OK
    assert owner_mode(rpc, h) == (OWNER, 2000, 0o644)
    i = obj("i", 0o2644, gid=2000)
    assert as_user(OWNER, OWNER, groups=[2000]).setattr(i, uid=OWNER)[0] == OK
    assert owner_mode(rpc, i) == (OWNER, 2000, 0o2644)
    j = obj("j", 0o2644, gid=2000)
    assert rpc.setattr(j, uid=OWNER)[0] == OK
    assert owner_mode(rpc, j) == (OWNER, 2000, 0o2644)
    k = obj("k", 0o2644, gid=3000)
    assert as_user(OWNER, OWNER, groups=[2000]).setattr(k, gid=2000)[0] == OK
    assert owner_mode(rpc, k) == (OWNER, 2000, 0o644), "the group it leaves counts"
    d = obj("d", 0o2755, gid=2000, kind="dir")
    assert as_user(OWNER, OWNER, groups=[2000]).setattr(d, uid=OWNER)[0] == OK
    assert owner_mode(rpc, d) == (OWNER, 2000, 0o2755), "directories keep theirs"


def test_times_explicit_for_the_owner_now_for_writers(rpc, obj, as_user, rw_export, workdir):
    _, dname = workdir
    shared = obj("shared", 0o666)
    private = obj("private", 0o644)
    for fh in (shared, private):
        assert rpc.setattr(fh, atime=100, mtime=100)[0] == OK
    stranger = Lib(rw_export, uid=STRANGER, gid=STRANGER)
    s = as_user(STRANGER)
    # Client times: the owner or root only, write permission or not.
    assert s.setattr(shared, atime=7, mtime=7)[0] == PERM
    assert s.setattr(shared, atime=NOW, mtime=7)[0] == PERM
    assert s.setattr(private, mtime=7)[0] == PERM
    assert attrs(rpc, shared)["mtime"] == attrs(rpc, private)["mtime"] == (100, 0)
    # The server's clock (utimes(NULL)): also anyone who may write.
    assert stranger.L.nfs_utimes(stranger.ctx, f"/{dname}/shared", None) == 0
    assert attrs(rpc, shared)["mtime"][0] > 100
    assert stranger.L.nfs_utimes(stranger.ctx, f"/{dname}/private", None) == -errno.EACCES
    assert s.setattr(private, atime=NOW, mtime=NOW)[0] == ACCES
    assert s.setattr(private, mtime=NOW)[0] == ACCES
    assert attrs(rpc, private)["mtime"] == (100, 0)
    # The owner, without write permission; root.
    locked = obj("locked", 0o444)
    o = as_user(OWNER)
    assert o.setattr(locked, atime=5, mtime=6)[0] == OK
    a = attrs(rpc, locked)
    assert (a["atime"], a["mtime"]) == ((5, 0), (6, 0))
    assert o.setattr(locked, atime=NOW, mtime=NOW)[0] == OK
    assert rpc.setattr(private, mtime=9)[0] == OK
    assert attrs(rpc, private)["mtime"] == (9, 0)


def test_truncate_needs_write_permission(rpc, obj, as_user, rw_export, workdir):
    _, dname = workdir
    f = obj("f", 0o644)
    assert rpc.write(f, 0, b"0123456789")[0] == OK
    stranger = Lib(rw_export, uid=STRANGER, gid=STRANGER)
    assert stranger.L.nfs_truncate(stranger.ctx, f"/{dname}/f", 0) == -errno.EACCES
    assert as_user(STRANGER).setattr(f, size=0)[0] == ACCES
    assert attrs(rpc, f)["size"] == 10
    writer = Lib(rw_export, uid=STRANGER, gid=OWNER)  # group write
    assert rpc.setattr(f, mode=0o664)[0] == OK
    assert writer.L.nfs_truncate(writer.ctx, f"/{dname}/f", 4) == 0
    assert attrs(rpc, f)["size"] == 4
    # The owner may, whatever the mode (knfsd: the client checked at open()).
    assert rpc.setattr(f, mode=0o444)[0] == OK
    assert as_user(OWNER).setattr(f, size=2)[0] == OK
    assert attrs(rpc, f)["size"] == 2
    d = obj("d", 0o777, kind="dir")
    assert as_user(OWNER).setattr(d, size=0)[0] == rpc3.ISDIR


def test_refusals_come_in_knfsds_order(rpc, obj, as_user):
    """Write permission (ACCES), then the ctime guard (NOT_SYNC), then ownership (PERM)."""
    f = obj("f", 0o644)
    s = as_user(STRANGER)
    stale = (1, 0)
    assert s.setattr(f, size=0, mode=0o777)[0] == ACCES
    assert s.setattr(f, guard_ctime=stale, size=0)[0] == ACCES
    assert s.setattr(f, guard_ctime=stale, mode=0o777)[0] == rpc3.NOT_SYNC
    ctime = attrs(rpc, f)["ctime"]
    assert s.setattr(f, guard_ctime=ctime, mode=0o777)[0] == PERM
    assert as_user(OWNER).setattr(f, guard_ctime=ctime, mode=0o600)[0] == OK
    assert owner_mode(rpc, f) == (OWNER, OWNER, 0o600)


def test_setattr_in_a_snapshot_is_rofs(rpc, root, rw_export, as_user):
    """A snapshot is a read-only file system: ROFS before any ownership rule, and even for a
    SETATTR that changes nothing."""
    name = "snapattr-" + uuid.uuid4().hex[:8]
    st, r = rpc.create(root, name, mode=0o644)
    assert st == OK
    snap = "sa" + uuid.uuid4().hex[:8]
    strata("snapshot", "create", f"default/{rw_export.strip('/').split('/')[-1]}@{snap}")
    st, sd = rpc.lookup(root, ".snapshot")
    assert st == OK
    st, sn = rpc.lookup(sd["fh"], snap)
    assert st == OK
    st, sf = rpc.lookup(sn["fh"], name)
    assert st == OK
    fh = sf["fh"]
    before = attrs(rpc, fh)
    assert as_user(STRANGER).setattr(fh, mode=0o777)[0] == rpc3.ROFS
    assert rpc.setattr(fh)[0] == rpc3.ROFS
    assert rpc.setattr(fh, uid=5)[0] == rpc3.ROFS
    assert attrs(rpc, fh) == before
