"""Fixtures of the NFS end-to-end suite (run by scripts/e2e/nfs.sh, which starts the daemon
with --nfs-port and sets the environment below)."""

import os
import subprocess
import uuid

import pytest

import rpc3

HOST = "127.0.0.1"
PORT = int(os.environ["STRATA_NFS_PORT"])
STRATA = os.environ["STRATA_BIN"]


def strata(*args, check=True):
    r = subprocess.run([STRATA, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"strata {' '.join(args)}: {r.stderr}")
    return r


def url(export, **params):
    q = {"nfsport": PORT, "mountport": PORT, **params}
    return f"nfs://{HOST}{export}?" + "&".join(f"{k}={v}" for k, v in q.items())


def ensure_export(volume, *flags, size=None):
    """Create default/VOLUME (if missing) and export it with FLAGS; returns its MOUNT path."""
    if strata("volume", "show", f"default/{volume}", check=False).returncode != 0:
        strata("volume", "create", f"default/{volume}", *(["--size", size] if size else []))
    import json
    exports = json.loads(strata("--json", "export", "list").stdout)
    if not any(e["volume"] == f"default/{volume}" for e in exports):
        strata("export", "nfs", f"default/{volume}", *flags)
    return f"/default/{volume}"


class Lib:
    """libnfs's synchronous API (the C library through its Python binding); calls return
    0 or a negative errno, as libnfs does."""

    def __init__(self, export, uid=0, gid=0):
        import libnfs.libnfs as L

        self.L = L
        self.ctx = L.nfs_init_context()
        u = L.nfs_parse_url_dir(self.ctx, url(export, uid=uid, gid=gid))
        self.mount_status = L.nfs_mount(self.ctx, u.server, u.path)

    def error(self):
        return self.L.nfs_get_error(self.ctx)

    def stat(self, path):
        st = self.L.nfs_stat_64()
        r = self.L.nfs_stat64(self.ctx, path, st)
        return r, st

    def write_file(self, path, data, mode=0o644, fsync=True):
        fh = self.L.new_NFSFileHandle()
        r = self.L.nfs_create(self.ctx, path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode, fh)
        if r != 0:
            return r
        f = self.L.NFSFileHandle_value(fh)
        off = 0
        while off < len(data):
            chunk = bytearray(data[off:off + (1 << 20)])
            n = self.L.nfs_pwrite(self.ctx, f, off, len(chunk), chunk)
            if n < 0:
                self.L.nfs_close(self.ctx, f)
                return n
            off += n
        r = self.L.nfs_fsync(self.ctx, f) if fsync else 0
        self.L.nfs_close(self.ctx, f)
        return r

    def read_file(self, path, size=1 << 22):
        fh = self.L.new_NFSFileHandle()
        r = self.L.nfs_open(self.ctx, path, os.O_RDONLY, fh)
        if r != 0:
            return r, None
        f = self.L.NFSFileHandle_value(fh)
        out = bytearray()
        while True:
            buf = bytearray(1 << 20)
            n = self.L.nfs_pread(self.ctx, f, len(out), len(buf), buf)
            if n < 0:
                self.L.nfs_close(self.ctx, f)
                return n, None
            if n == 0:
                break
            out += buf[:n]
        self.L.nfs_close(self.ctx, f)
        return 0, bytes(out)

    def listdir(self, path):
        d = self.L.new_NFSDirHandle()
        r = self.L.nfs_opendir(self.ctx, path, d)
        if r != 0:
            return r, None
        d = self.L.NFSDirHandle_value(d)
        names = {}
        while True:
            de = self.L.nfs_readdir(self.ctx, d)
            if de is None:
                break
            names[de.name] = de
        self.L.nfs_closedir(self.ctx, d)
        return 0, names


@pytest.fixture(scope="session")
def rw_export():
    # Trusted root (database hosts chown their data directories), this host only.
    return ensure_export("nfsrw", "--no-root-squash", "--clients", "127.0.0.1/32")


@pytest.fixture(scope="session")
def squash_export():
    return ensure_export("nfssquash", "--root-squash", "--clients", "127.0.0.0/8")


@pytest.fixture(scope="session")
def ro_export():
    return ensure_export("nfsro", "--ro", "--no-root-squash")


@pytest.fixture()
def lib(rw_export):
    return Lib(rw_export)


@pytest.fixture()
def rpc():
    c = rpc3.Client(HOST, PORT)
    yield c
    c.close()


@pytest.fixture()
def root(rpc, rw_export):
    st, fh = rpc.mnt(rw_export)
    assert st == rpc3.OK
    return fh


@pytest.fixture()
def workdir(rpc, root):
    """A fresh directory (world-writable, so other uids can create in it): (handle, name)."""
    name = "t-" + uuid.uuid4().hex[:10]
    st, r = rpc.mkdir(root, name, mode=0o777)
    assert st == rpc3.OK
    return r["fh"], name
