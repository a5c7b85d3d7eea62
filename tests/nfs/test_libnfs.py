"""The real client: libnfs (its C library through the Python binding, and the libnfs-utils
tools) against the Strata NFS server."""

import errno
import os
import subprocess
import uuid

from conftest import Lib, url, strata, ensure_export, HOST, PORT


def test_mount_negotiates_1mib_transfers(lib):
    assert lib.mount_status == 0
    assert lib.L.nfs_get_readmax(lib.ctx) == 1 << 20
    assert lib.L.nfs_get_writemax(lib.ctx) == 1 << 20


def test_large_file_round_trip(lib):
    data = os.urandom(3 * (1 << 20) + 12345)
    assert lib.write_file("/big-" + uuid.uuid4().hex, data) == 0
    name = "/big2-" + uuid.uuid4().hex
    assert lib.write_file(name, data) == 0
    r, back = lib.read_file(name)
    assert r == 0 and back == data
    r, st = lib.stat(name)
    assert r == 0 and st.nfs_size == len(data)


def test_namespace_operations(lib):
    L, c = lib.L, lib.ctx
    d = "/ns-" + uuid.uuid4().hex[:8]
    assert L.nfs_mkdir(c, d) == 0
    assert L.nfs_mkdir(c, d) == -errno.EEXIST
    assert lib.write_file(d + "/a", b"alpha") == 0
    assert L.nfs_symlink(c, "a", d + "/sl") == 0
    buf = bytearray(64)
    assert L.nfs_readlink(c, d + "/sl", buf, 64) == 0 and bytes(buf).rstrip(b"\0") == b"a"
    assert L.nfs_link(c, d + "/a", d + "/hard") == 0
    r, st = lib.stat(d + "/a")
    assert r == 0 and st.nfs_nlink == 2
    assert L.nfs_rename(c, d + "/hard", d + "/moved") == 0
    assert L.nfs_mknod(c, d + "/fifo", 0o10644, 0) == 0
    r, names = lib.listdir(d)
    assert r == 0 and {"a", "sl", "moved", "fifo"} <= set(names)
    assert names["fifo"].type == 0o10000 or names["fifo"].mode & 0o170000 == 0o10000
    assert L.nfs_chmod(c, d + "/a", 0o600) == 0
    assert L.nfs_truncate(c, d + "/a", 2) == 0
    r, st = lib.stat(d + "/a")
    assert (st.nfs_mode & 0o7777, st.nfs_size) == (0o600, 2)
    assert L.nfs_rmdir(c, d) == -errno.ENOTEMPTY
    assert L.nfs_unlink(c, d + "/missing") == -errno.ENOENT
    for n in ("a", "sl", "moved", "fifo"):
        assert L.nfs_unlink(c, f"{d}/{n}") == 0
    assert L.nfs_rmdir(c, d) == 0
    assert lib.stat(d)[0] == -errno.ENOENT


def test_many_entries_listing(lib):
    d = "/many-" + uuid.uuid4().hex[:8]
    assert lib.L.nfs_mkdir(lib.ctx, d) == 0
    for i in range(600):
        assert lib.write_file(f"{d}/entry-with-a-longish-name-{i:04d}", b"", fsync=False) == 0
    r, names = lib.listdir(d)
    assert r == 0
    assert len([n for n in names if n.startswith("entry-")]) == 600


def test_permissions_follow_auth_sys(lib, rw_export):
    d = "/perm-" + uuid.uuid4().hex[:8]
    assert lib.L.nfs_mkdir(lib.ctx, d) == 0
    assert lib.L.nfs_chmod(lib.ctx, d, 0o777) == 0
    assert lib.write_file(d + "/root-only", b"secret", mode=0o600) == 0
    user = Lib(rw_export, uid=1000, gid=1000)
    assert user.mount_status == 0
    assert user.read_file(d + "/root-only")[0] == -errno.EACCES
    assert user.L.nfs_access(user.ctx, d + "/root-only", os.R_OK) == -errno.EACCES
    assert user.write_file(d + "/mine", b"ok") == 0
    r, st = user.stat(d + "/mine")
    assert (st.nfs_uid, st.nfs_gid) == (1000, 1000)
    assert user.L.nfs_chown(user.ctx, d + "/mine", 0, 0) == -errno.EPERM
    assert user.L.nfs_mkdir(user.ctx, "/not-allowed-" + uuid.uuid4().hex[:6]) == -errno.EACCES


def test_read_only_export(ro_export):
    ro = Lib(ro_export)
    assert ro.mount_status == 0
    assert ro.L.nfs_mkdir(ro.ctx, "/x") == -errno.EROFS
    assert ro.write_file("/f", b"x") == -errno.EROFS


def test_client_outside_the_networks_is_refused():
    export = ensure_export("nfsdenied", "--clients", "10.254.0.0/16")
    refused = Lib(export)
    assert refused.mount_status != 0
    assert "ACCES" in refused.error() or "denied" in refused.error().lower()
    log = open(os.environ["STRATA_DAEMON_LOG"]).read()
    assert "NFS client refused" in log and "/default/nfsdenied" in log


def test_libnfs_utils_tools(rw_export, tmp_path):
    src = tmp_path / "src.bin"
    data = os.urandom(200_000)
    src.write_bytes(data)
    name = "tool-" + uuid.uuid4().hex[:8]
    run = lambda *a: subprocess.run(a, capture_output=True, timeout=60)
    target = f"nfs://{HOST}{rw_export}/{name}?nfsport={PORT}&mountport={PORT}"
    r = run("nfs-cp", str(src), target)
    assert r.returncode == 0, r.stderr
    back = tmp_path / "back.bin"
    r = run("nfs-cp", target, str(back))
    assert r.returncode == 0, r.stderr
    assert back.read_bytes() == data
    r = run("nfs-ls", f"nfs://{HOST}{rw_export}?nfsport={PORT}&mountport={PORT}")
    assert r.returncode == 0 and name.encode() in r.stdout
    r = run("nfs-cat", f"nfs://{HOST}{rw_export}/no-such-file?nfsport={PORT}&mountport={PORT}")
    assert r.returncode != 0


def test_nfs_cp_many_times(rw_export, tmp_path):
    """Fresh connections each sending one 200 KB WRITE at once: the server's reader once
    slept in a blocking recv with the socket's low-water mark set and the WRITE's tail
    queued (docs/nfs.md, "Receiving large records"); 1 nfs-cp in 5 hung."""
    src = tmp_path / "src.bin"
    data = os.urandom(200_000)
    src.write_bytes(data)
    for i in range(30):
        name = f"cp-{i}-" + uuid.uuid4().hex[:8]
        target = f"nfs://{HOST}{rw_export}/{name}?nfsport={PORT}&mountport={PORT}"
        r = subprocess.run(("nfs-cp", str(src), target), capture_output=True, timeout=20)
        assert r.returncode == 0, (i, r.stderr)


def test_export_list_and_mount_list(rw_export):
    import json
    exports = json.loads(strata("--json", "export", "list").stdout)
    mine = [e for e in exports if e["path"] == rw_export]
    assert mine and mine[0]["active"] and mine[0]["nfs_port"] == PORT


def test_snapshots_are_read_only_under_dot_snapshot(lib, rw_export):
    """Snapshots are reachable through the export's hidden .snapshot directory, read-only."""
    name = "/snapfile-" + uuid.uuid4().hex[:8]
    assert lib.write_file(name, b"before") == 0
    snap = "nfs" + uuid.uuid4().hex[:8]
    strata("snapshot", "create", f"default/{rw_export.strip('/').split('/')[-1]}@{snap}")
    assert lib.write_file(name, b"after!") == 0
    r, data = lib.read_file(f"/.snapshot/{snap}{name}")
    assert r == 0 and data == b"before"
    r, data = lib.read_file(name)
    assert r == 0 and data == b"after!"
    r, names = lib.listdir("/.snapshot")
    assert r == 0 and snap in names
    r, top = lib.listdir("/")
    assert r == 0 and ".snapshot" not in top, "hidden from the root's listing"
    assert lib.write_file(f"/.snapshot/{snap}{name}", b"no") == -errno.EROFS
    assert lib.L.nfs_unlink(lib.ctx, f"/.snapshot/{snap}{name}") == -errno.EROFS
