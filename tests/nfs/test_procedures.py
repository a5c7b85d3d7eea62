"""Every NFSv3 procedure and the error codes, through a plain RPC client (rpc3.py) that
shows what libnfs hides: verifiers, stability levels, handles, raw status codes."""

import json
import os
import uuid

import pytest

import rpc3
from rpc3 import OK
from conftest import HOST, PORT, strata, ensure_export


def test_null_and_fs_information(rpc, root):
    rpc.call(rpc3.NFS, 0)
    rpc.call(rpc3.MOUNT, 0)
    st, a = rpc.getattr(root)
    assert st == OK and a["type"] == 2
    st, info = rpc.fsinfo(root)
    assert st == OK and info["rtmax"] == info["wtmax"] == 1 << 20 and info["properties"] & 0x1b == 0x1b
    st, fs = rpc.fsstat(root)
    assert st == OK and fs["tbytes"] >= fs["fbytes"] > 0
    st, pc = rpc.pathconf(root)
    assert st == OK and pc["name_max"] == 255 and pc["no_trunc"] and not pc["case_insensitive"]


def test_write_stability_read_and_commit(rpc, workdir):
    d, _ = workdir
    st, f = rpc.create(d, "data")
    assert st == OK
    fh = f["fh"]
    st, w = rpc.write(fh, 0, b"a" * 5000, rpc3.UNSTABLE)
    assert st == OK and w["committed"] == rpc3.UNSTABLE and w["count"] == 5000
    verf = w["verf"]
    for stable in (rpc3.DATA_SYNC, rpc3.FILE_SYNC):
        st, w = rpc.write(fh, 5000, b"b" * 100, stable)
        assert st == OK and w["committed"] == rpc3.FILE_SYNC and w["verf"] == verf
    st, c = rpc.commit(fh)
    assert st == OK and c["verf"] == verf
    st, r = rpc.read(fh, 4990, 1000)
    assert st == OK and r["data"] == b"a" * 10 + b"b" * 100 and r["eof"]
    st, r = rpc.read(fh, 0, 10)
    assert st == OK and not r["eof"]
    big = os.urandom(1 << 20)
    st, w = rpc.write(fh, 1 << 20, big, rpc3.FILE_SYNC)
    assert st == OK and w["count"] == 1 << 20
    st, r = rpc.read(fh, 1 << 20, 1 << 20)
    assert st == OK and r["data"] == big
    # wcc_data: size before and after.
    st, w = rpc.write(fh, 3 << 20, b"z")
    pre, post = w["wcc"]
    assert pre["size"] == 2 << 20 and post["size"] == (3 << 20) + 1


def test_create_modes(rpc, workdir):
    d, _ = workdir
    assert rpc.create(d, "g", how=1)[0] == OK
    assert rpc.create(d, "g", how=1)[0] == rpc3.EXIST
    st, w = rpc.create(d, "g", how=0, size=0)
    assert st == OK
    v = b"\x01\x02\x03\x04\x05\x06\x07\x08"
    st, first = rpc.create(d, "x", how=2, verf=v)
    assert st == OK
    st, again = rpc.create(d, "x", how=2, verf=v)
    assert st == OK and again["fh"] == first["fh"], "a retransmitted EXCLUSIVE create succeeds"
    assert rpc.create(d, "x", how=2, verf=b"\x09" * 8)[0] == rpc3.EXIST
    assert rpc.create(d, "n" * 256)[0] == rpc3.NAMETOOLONG


def test_setattr_and_guard(rpc, workdir):
    d, _ = workdir
    st, f = rpc.create(d, "s")
    fh = f["fh"]
    st, w = rpc.setattr(fh, mode=0o640, size=100, mtime=1_000_000)
    assert st == OK
    st, a = rpc.getattr(fh)
    assert (a["mode"], a["size"], a["mtime"][0]) == (0o640, 100, 1_000_000)
    assert rpc.setattr(fh, guard_ctime=(1, 0), mode=0o600)[0] == 10002  # NOT_SYNC
    assert rpc.setattr(fh, guard_ctime=a["ctime"], mode=0o600)[0] == OK


def test_lookup_access_readlink(rpc, workdir):
    d, _ = workdir
    assert rpc.lookup(d, "nothing")[0] == rpc3.NOENT
    st, s = rpc.symlink(d, "link", "some/where")
    assert st == OK
    st, r = rpc.readlink(s["fh"])
    assert st == OK and r["target"] == b"some/where"
    st, f = rpc.create(d, "file")
    assert rpc.readlink(f["fh"])[0] == rpc3.INVAL
    st, l = rpc.lookup(d, "file")
    assert st == OK and l["fh"] == f["fh"]
    st, a = rpc.access(f["fh"], 0x3f)
    assert st == OK and a["access"] == 0x01 | 0x04 | 0x08  # root: read, modify, extend (no x bit)
    other = rpc3.Client(HOST, PORT, uid=4242, gid=4242)
    st, a = other.access(f["fh"], 0x3f)
    assert st == OK and a["access"] == 0x01  # 0644: read only
    other.close()


def test_mknod_kinds(rpc, workdir):
    d, _ = workdir
    st, c = rpc.mknod(d, "null", 4, mode=0o666, major=1, minor=3)
    assert st == OK and c["attr"]["type"] == 4 and c["attr"]["rdev"] == (1, 3)
    assert rpc.mknod(d, "fifo", 7)[0] == OK
    assert rpc.mknod(d, "sock", 6)[0] == OK
    assert rpc.mknod(d, "reg", 1)[0] == rpc3.BADTYPE
    user = rpc3.Client(HOST, PORT, uid=1000, gid=1000)
    assert user.mknod(d, "dev", 3, major=8, minor=0)[0] == rpc3.PERM
    user.close()


def test_remove_rmdir_rename_link(rpc, workdir):
    d, _ = workdir
    st, sub = rpc.mkdir(d, "sub")
    st, f = rpc.create(sub["fh"], "f")
    assert rpc.rmdir(d, "sub")[0] == rpc3.NOTEMPTY
    assert rpc.remove(d, "sub")[0] == rpc3.ISDIR
    assert rpc.rmdir(sub["fh"], "f")[0] == rpc3.NOTDIR
    st, l = rpc.link(f["fh"], d, "hard")
    assert st == OK and l["attr"]["nlink"] == 2
    assert rpc.link(f["fh"], d, "hard")[0] == rpc3.EXIST
    assert rpc.link(sub["fh"], d, "dirlink")[0] == rpc3.PERM
    st, r = rpc.rename(sub["fh"], "f", d, "renamed")
    assert st == OK and r["from_wcc"][1] is not None and r["to_wcc"][1] is not None
    assert rpc.rename(sub["fh"], "f", d, "again")[0] == rpc3.NOENT
    assert rpc.remove(d, "renamed")[0] == OK
    assert rpc.remove(d, "renamed")[0] == rpc3.NOENT
    assert rpc.getattr(f["fh"])[0] == OK, "one name is left"
    assert rpc.remove(d, "hard")[0] == OK
    assert rpc.getattr(f["fh"])[0] == rpc3.STALE
    assert rpc.rmdir(d, "sub")[0] == OK
    assert rpc.getattr(sub["fh"])[0] == rpc3.STALE


def test_readdir_and_readdirplus_paging(rpc, workdir):
    d, _ = workdir
    names = {f"f{i:03d}-" + "x" * 40 for i in range(150)}
    for n in names:
        assert rpc.create(d, n)[0] == OK
    for plus in (False, True):
        st, ents = rpc.readdir(d, plus=plus, count=1024)
        assert st == OK
        got = [e[0] for e in ents]
        assert len(got) == len(set(got)) == 152 and set(got) - {".", ".."} == names
        if plus:
            for name, fileid, attr, fh in ents:
                assert attr is not None and attr["fileid"] == fileid and fh
            sample = [e for e in ents if e[0] in names][0]
            assert rpc.lookup(d, sample[0])[1]["fh"] == sample[3]
    assert rpc.readdir(d, count=40)[0] == 10005  # TOOSMALL


def test_handles_are_checked(rpc, root, workdir):
    d, _ = workdir
    st, f = rpc.create(d, "h")
    forged = bytearray(f["fh"])
    forged[27] ^= 1  # the inode number
    assert rpc.getattr(bytes(forged))[0] == rpc3.BADHANDLE
    assert rpc.getattr(b"\0" * 8)[0] == rpc3.BADHANDLE
    # A handle of one export relabelled with another export's id: BADHANDLE.
    ro = ensure_export("nfsro", "--ro", "--no-root-squash")
    st, ro_root = rpc.mnt(ro)
    relabelled = bytearray(f["fh"])
    relabelled[4:8] = ro_root[4:8]
    assert rpc.getattr(bytes(relabelled))[0] == rpc3.BADHANDLE


def test_deleted_export_handles_are_stale(rpc):
    export = ensure_export("nfstmp", "--no-root-squash")
    st, fh = rpc.mnt(export)
    assert st == OK and rpc.getattr(fh)[0] == OK
    exports = json.loads(strata("--json", "export", "list").stdout)
    eid = [e["id"] for e in exports if e["path"] == export][0]
    strata("export", "delete", str(eid))
    assert rpc.getattr(fh)[0] == rpc3.STALE
    assert rpc.mnt(export)[0] == rpc3.NOENT
    # Exported again: a new id, and the old handle stays STALE.
    strata("export", "nfs", "default/nfstmp", "--no-root-squash")
    assert rpc.getattr(fh)[0] == rpc3.STALE
    assert rpc.mnt(export)[0] == OK


def test_root_squash_and_errors_by_policy(rpc, squash_export, ro_export):
    st, sroot = rpc.mnt(squash_export)
    assert st == OK
    # root is squashed to nobody: the root directory (0755, root) refuses it.
    assert rpc.create(sroot, "by-root")[0] == rpc3.ACCES
    st, rroot = rpc.mnt(ro_export)
    assert rpc.create(rroot, "f")[0] == rpc3.ROFS
    assert rpc.mkdir(rroot, "d")[0] == rpc3.ROFS
    assert rpc.setattr(rroot, mode=0o700)[0] == rpc3.ROFS
    assert rpc.getattr(rroot)[0] == OK


def test_quota_gives_dquot(rpc):
    export = ensure_export("nfsquota", "--no-root-squash", size="8M")
    st, root = rpc.mnt(export)
    st, f = rpc.create(root, "fill-" + uuid.uuid4().hex[:6])
    chunk = os.urandom(1 << 20)
    codes = set()
    for i in range(16):
        st, _ = rpc.write(f["fh"], i << 20, chunk, rpc3.FILE_SYNC)
        codes.add(st)
        if st != OK:
            break
    assert rpc3.DQUOT in codes


def test_full_pool_gives_nospc(rpc):
    if strata("pool", "status", "small", check=False).returncode != 0:
        pytest.skip("no pool 'small' (made by scripts/e2e/nfs.sh)")
    if strata("volume", "show", "small/fill", check=False).returncode != 0:
        strata("volume", "create", "small/fill")
        strata("export", "nfs", "small/fill", "--no-root-squash")
    st, root = rpc.mnt("/small/fill")
    assert st == OK
    st, f = rpc.create(root, "fill")
    chunk = os.urandom(1 << 20)
    status = OK
    for i in range(400):
        status, _ = rpc.write(f["fh"], i << 20, chunk, rpc3.UNSTABLE)
        if status != OK:
            break
    assert status == rpc3.NOSPC
    # Freed space comes back: removing the file lets a small write through.
    assert rpc.remove(root, "fill")[0] == OK
    st, g = rpc.create(root, "after")
    assert st == OK
    assert rpc.write(g["fh"], 0, b"ok", rpc3.FILE_SYNC)[0] == OK
