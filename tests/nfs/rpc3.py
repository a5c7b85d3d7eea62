"""A small NFSv3 + MOUNT v3 client over TCP, for the procedures and details that libnfs's
high-level API does not expose (write verifiers, EXCLUSIVE create, MKNOD of devices,
PATHCONF, raw error codes, forged handles). Written from RFC 1813 / RFC 5531, independent
of the server's code. Each call returns (status, dict of decoded results)."""

import random
import socket
import struct

NFS, MOUNT = 100003, 100005
OK, PERM, NOENT, IO, ACCES, EXIST, NOTDIR, ISDIR, INVAL = 0, 1, 2, 5, 13, 17, 20, 21, 22
NOSPC, ROFS, NAMETOOLONG, NOTEMPTY, DQUOT, STALE = 28, 30, 63, 66, 69, 70
BADHANDLE, NOTSUPP, BADTYPE = 10001, 10004, 10007
UNSTABLE, DATA_SYNC, FILE_SYNC = 0, 1, 2
NOT_SYNC = 10002
NOW = object()  # a sattr3 time set to the server's clock


class Packer:
    def __init__(self):
        self.b = bytearray()

    def u32(self, v):
        self.b += struct.pack(">I", v & 0xFFFFFFFF)
        return self

    def u64(self, v):
        self.b += struct.pack(">Q", v)
        return self

    def opaque(self, data, fixed=False):
        if isinstance(data, str):
            data = data.encode()
        if not fixed:
            self.u32(len(data))
        self.b += data + b"\0" * ((4 - len(data) % 4) % 4)
        return self

    def sattr(self, mode=None, uid=None, gid=None, size=None, atime=None, mtime=None):
        """Times: None = DONT_CHANGE, NOW = SET_TO_SERVER_TIME, seconds = SET_TO_CLIENT_TIME."""
        for v in (mode, uid, gid):
            self.u32(0) if v is None else self.u32(1).u32(v)
        self.u32(0) if size is None else self.u32(1).u64(size)
        for t in (atime, mtime):
            if t is None:
                self.u32(0)
            elif t is NOW:
                self.u32(1)
            else:
                self.u32(2).u32(t).u32(0)
        return self


class Unpacker:
    def __init__(self, b):
        self.b, self.p = b, 0

    def u32(self):
        v = struct.unpack_from(">I", self.b, self.p)[0]
        self.p += 4
        return v

    def u64(self):
        v = struct.unpack_from(">Q", self.b, self.p)[0]
        self.p += 8
        return v

    def opaque(self, n=None):
        if n is None:
            n = self.u32()
        v = bytes(self.b[self.p:self.p + n])
        self.p += n + (4 - n % 4) % 4
        return v

    def fattr(self):
        keys = ("type", "mode", "nlink", "uid", "gid")
        a = {k: self.u32() for k in keys}
        a["size"], a["used"] = self.u64(), self.u64()
        a["rdev"] = (self.u32(), self.u32())
        a["fsid"], a["fileid"] = self.u64(), self.u64()
        for t in ("atime", "mtime", "ctime"):
            a[t] = (self.u32(), self.u32())
        return a

    def post_op_attr(self):
        return self.fattr() if self.u32() else None

    def wcc(self):
        pre = None
        if self.u32():
            pre = {"size": self.u64(), "mtime": (self.u32(), self.u32()), "ctime": (self.u32(), self.u32())}
        return pre, self.post_op_attr()


class Client:
    def __init__(self, host, port, uid=0, gid=0, groups=()):
        self.sock = socket.create_connection((host, port), timeout=30)
        # A random first xid, as real clients pick: the server's reply cache keys on (client
        # address, xid, arguments), so two clients of this host starting at the same xid
        # would get each other's replies to identical calls.
        self.xid = random.randrange(1 << 31)
        self.uid, self.gid, self.groups = uid, gid, list(groups)

    def close(self):
        self.sock.close()

    def _recv(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("server closed the connection")
            out += chunk
        return bytes(out)

    def call(self, prog, proc, args=b"", vers=3):
        self.xid += 1
        cred = Packer().u32(0).opaque("pytest").u32(self.uid).u32(self.gid).u32(len(self.groups))
        for g in self.groups:
            cred.u32(g)
        p = Packer().u32(self.xid).u32(0).u32(2).u32(prog).u32(vers).u32(proc)
        p.u32(1).opaque(bytes(cred.b)).u32(0).u32(0)
        body = bytes(p.b) + bytes(args)
        self.sock.sendall(struct.pack(">I", 0x80000000 | len(body)) + body)
        rec = b""
        while True:
            mark = struct.unpack(">I", self._recv(4))[0]
            rec += self._recv(mark & 0x7FFFFFFF)
            if mark & 0x80000000:
                break
        u = Unpacker(rec)
        assert u.u32() == self.xid
        assert u.u32() == 1, "a reply"
        if u.u32() != 0:
            raise RuntimeError("call denied")
        u.u32()
        u.opaque()
        stat = u.u32()
        if stat != 0:
            raise RuntimeError(f"accept_stat {stat}")
        return u

    # MOUNT
    def mnt(self, path):
        u = self.call(MOUNT, 1, Packer().opaque(path).b)
        st = u.u32()
        return st, (u.opaque() if st == OK else None)

    # NFSv3
    def getattr(self, fh):
        u = self.call(NFS, 1, Packer().opaque(fh).b)
        st = u.u32()
        return st, (u.fattr() if st == OK else None)

    def setattr(self, fh, guard_ctime=None, **sattr):
        p = Packer().opaque(fh).sattr(**sattr)
        p.u32(0) if guard_ctime is None else p.u32(1).u32(guard_ctime[0]).u32(guard_ctime[1])
        u = self.call(NFS, 2, p.b)
        st = u.u32()
        return st, {"wcc": u.wcc()}

    def lookup(self, dirfh, name):
        u = self.call(NFS, 3, Packer().opaque(dirfh).opaque(name).b)
        st = u.u32()
        if st != OK:
            return st, {"dir": u.post_op_attr()}
        fh = u.opaque()
        return st, {"fh": fh, "attr": u.post_op_attr(), "dir": u.post_op_attr()}

    def access(self, fh, bits):
        u = self.call(NFS, 4, Packer().opaque(fh).u32(bits).b)
        st = u.u32()
        attr = u.post_op_attr()
        return st, {"attr": attr, "access": u.u32() if st == OK else None}

    def readlink(self, fh):
        u = self.call(NFS, 5, Packer().opaque(fh).b)
        st = u.u32()
        u.post_op_attr()
        return st, {"target": u.opaque() if st == OK else None}

    def read(self, fh, offset, count):
        u = self.call(NFS, 6, Packer().opaque(fh).u64(offset).u32(count).b)
        st = u.u32()
        u.post_op_attr()
        if st != OK:
            return st, {}
        n, eof = u.u32(), u.u32()
        return st, {"count": n, "eof": bool(eof), "data": u.opaque()}

    def write(self, fh, offset, data, stable=UNSTABLE):
        u = self.call(NFS, 7, Packer().opaque(fh).u64(offset).u32(len(data)).u32(stable).opaque(data).b)
        st = u.u32()
        wcc = u.wcc()
        if st != OK:
            return st, {"wcc": wcc}
        return st, {"wcc": wcc, "count": u.u32(), "committed": u.u32(), "verf": u.opaque(8)}

    def _made(self, u):
        st = u.u32()
        if st != OK:
            return st, {"dir_wcc": u.wcc()}
        fh = u.opaque() if u.u32() else None
        return st, {"fh": fh, "attr": u.post_op_attr(), "dir_wcc": u.wcc()}

    def create(self, dirfh, name, how=0, mode=0o644, verf=b"\0" * 8, **sattr):
        p = Packer().opaque(dirfh).opaque(name).u32(how)
        if how == 2:
            p.opaque(verf, fixed=True)
        else:
            p.sattr(mode=mode, **sattr)
        return self._made(self.call(NFS, 8, p.b))

    def mkdir(self, dirfh, name, mode=0o755):
        return self._made(self.call(NFS, 9, Packer().opaque(dirfh).opaque(name).sattr(mode=mode).b))

    def symlink(self, dirfh, name, target):
        return self._made(self.call(NFS, 10, Packer().opaque(dirfh).opaque(name).sattr().opaque(target).b))

    def mknod(self, dirfh, name, ftype, mode=0o644, major=0, minor=0):
        p = Packer().opaque(dirfh).opaque(name).u32(ftype)
        if ftype in (3, 4):
            p.sattr(mode=mode).u32(major).u32(minor)
        elif ftype in (6, 7):
            p.sattr(mode=mode)
        return self._made(self.call(NFS, 11, p.b))

    def remove(self, dirfh, name):
        u = self.call(NFS, 12, Packer().opaque(dirfh).opaque(name).b)
        return u.u32(), {"dir_wcc": u.wcc()}

    def rmdir(self, dirfh, name):
        u = self.call(NFS, 13, Packer().opaque(dirfh).opaque(name).b)
        return u.u32(), {"dir_wcc": u.wcc()}

    def rename(self, fromfh, fromname, tofh, toname):
        u = self.call(NFS, 14, Packer().opaque(fromfh).opaque(fromname).opaque(tofh).opaque(toname).b)
        return u.u32(), {"from_wcc": u.wcc(), "to_wcc": u.wcc()}

    def link(self, fh, dirfh, name):
        u = self.call(NFS, 15, Packer().opaque(fh).opaque(dirfh).opaque(name).b)
        st = u.u32()
        return st, {"attr": u.post_op_attr(), "dir_wcc": u.wcc()}

    def readdir(self, dirfh, plus=False, count=4096, cookie=0):
        """All entries, following cookies: [(name, fileid, attr, fh)]."""
        out = []
        while True:
            p = Packer().opaque(dirfh).u64(cookie).opaque(b"\0" * 8, fixed=True)
            p.u32(count)
            if plus:
                p.u32(count * 4)
            u = self.call(NFS, 17 if plus else 16, p.b)
            st = u.u32()
            u.post_op_attr()
            if st != OK:
                return st, out
            u.opaque(8)
            while u.u32():
                fileid, name, cookie = u.u64(), u.opaque(), u.u64()
                attr = fh = None
                if plus:
                    attr = u.post_op_attr()
                    fh = u.opaque() if u.u32() else None
                out.append((name.decode(), fileid, attr, fh))
            if u.u32():
                return OK, out

    def _info(self, proc, fh):
        u = self.call(NFS, proc, Packer().opaque(fh).b)
        st = u.u32()
        u.post_op_attr()
        return st, u

    def fsstat(self, fh):
        st, u = self._info(18, fh)
        if st != OK:
            return st, {}
        keys = ("tbytes", "fbytes", "abytes", "tfiles", "ffiles", "afiles")
        return st, {k: u.u64() for k in keys}

    def fsinfo(self, fh):
        st, u = self._info(19, fh)
        if st != OK:
            return st, {}
        keys = ("rtmax", "rtpref", "rtmult", "wtmax", "wtpref", "wtmult", "dtpref")
        r = {k: u.u32() for k in keys}
        r["maxfilesize"] = u.u64()
        r["time_delta"] = (u.u32(), u.u32())
        r["properties"] = u.u32()
        return st, r

    def pathconf(self, fh):
        st, u = self._info(20, fh)
        if st != OK:
            return st, {}
        r = {"linkmax": u.u32(), "name_max": u.u32()}
        for k in ("no_trunc", "chown_restricted", "case_insensitive", "case_preserving"):
            r[k] = bool(u.u32())
        return st, r

    def commit(self, fh, offset=0, count=0):
        u = self.call(NFS, 21, Packer().opaque(fh).u64(offset).u32(count).b)
        st = u.u32()
        u.wcc()
        return st, {"verf": u.opaque(8) if st == OK else None}
