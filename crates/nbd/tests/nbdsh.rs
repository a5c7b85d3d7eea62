//! Every command and the errors the spec asks for, through libnbd's Python bindings
//! (nbdsh), with libnbd's own client-side checks switched off where the point is to see
//! the server refuse.

mod common;
use common::*;

/// Shared by the scripts: a connected handle with base:allocation, and a helper that
/// expects a failure with a given errno.
const PRELUDE: &str = r#"
import errno
def connect(name, structured=True):
    h = nbd.NBD()
    h.set_request_structured_replies(structured)
    h.add_meta_context("base:allocation")
    h.connect_uri(uri + name)
    return h
def fails(want, f, *args, **kw):
    try:
        f(*args, **kw)
    except nbd.Error as e:
        assert e.errnum == want, "%s: errno %d, wanted %d (%s)" % (f.__name__, e.errnum, want, e.string)
        return
    raise AssertionError("%s succeeded, wanted errno %d" % (f.__name__, want))
def chunks(h, count, offset, flags=0):
    got = []
    def chunk(buf, off, status, err):
        got.append((off, len(buf), status))
        return 0
    h.pread_structured(count, offset, chunk, flags)
    return sorted(got)
def status(h, count, offset, flags=0):
    got = []
    def ext(meta, off, entries, err):
        assert meta == "base:allocation", meta
        got.extend(entries)
        return 0
    h.block_status(count, offset, ext, flags)
    return got
M = 1024 * 1024
"#;

const COMMANDS: &str = r#"
h = connect("lun")
size = h.get_size()
assert size == 8 * M
assert h.can_meta_context("base:allocation")
# WRITE (plain, FUA) and READ back; FLUSH; CACHE.
h.pwrite(b"\xaa" * 65536, 0)
h.pwrite(b"\xbb" * 4096, M, nbd.CMD_FLAG_FUA)
assert h.pread(65536, 0) == b"\xaa" * 65536
assert h.pread(4096, M) == b"\xbb" * 4096
h.flush()
h.cache(65536, 0)
# Structured reads: data and hole chunks follow the map; DF makes one chunk.
c = chunks(h, 2 * M, 0)
assert (0, 65536, nbd.READ_DATA) in c, c
assert any(s == nbd.READ_HOLE for (_, _, s) in c), c
assert sum(n for (_, n, _) in c) == 2 * M, c
c = chunks(h, 2 * M, 0, nbd.CMD_FLAG_DF)
assert c == [(0, 2 * M, nbd.READ_DATA)], c
c = chunks(h, M, 4 * M, nbd.CMD_FLAG_DF)
assert c == [(4 * M, M, nbd.READ_HOLE)], c
# BLOCK_STATUS: data, then hole|zero; REQ_ONE gives one extent within the request.
e = status(h, 2 * M, 0)
assert e[0:2] == [65536, 0] or e[1] == 0, e
assert 3 in e[1::2], e
assert sum(e[0::2]) == 2 * M, e
e = status(h, 2 * M, 0, nbd.CMD_FLAG_REQ_ONE)
assert len(e) == 2 and e[1] == 0 and e[0] <= 2 * M, e
e = status(h, M, 5 * M)
assert e == [M, 3], e
# TRIM and WRITE_ZEROES (may trim, NO_HOLE, FUA) read back as zeros and map as holes.
h.trim(65536, 0)
assert h.pread(65536, 0) == bytes(65536)
assert status(h, 65536, 0) == [65536, 3]
h.pwrite(b"\xcc" * 65536, 2 * M)
h.zero(65536, 2 * M, nbd.CMD_FLAG_FUA)
assert h.pread(65536, 2 * M) == bytes(65536)
assert status(h, 65536, 2 * M) == [65536, 3]
h.pwrite(b"\xdd" * 65536, 3 * M)
h.zero(65536, 3 * M, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(65536, 3 * M) == bytes(65536)
h.zero(65536, 3 * M, nbd.CMD_FLAG_FAST_ZERO)
# FAST_ZERO with NO_HOLE cannot be fast.
fails(errno.ENOTSUP, h.zero, 65536, 3 * M, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE)
h.trim(65536, M, nbd.CMD_FLAG_FUA)
assert h.pread(4096, M) == bytes(4096)
h.pwrite(b"\xee" * 4096, 6 * M)
# Errors, past libnbd's own checks.
h.set_strict_mode(0)
fails(errno.EINVAL, h.pread, 4096, size - 512)
fails(errno.EINVAL, h.pread, 4096, size)
fails(errno.ENOSPC, h.pwrite, b"x" * 4096, size - 512)
fails(errno.EINVAL, h.trim, 4096, size)
fails(errno.ENOSPC, h.zero, 4096, size)
fails(errno.EINVAL, h.cache, 4096, size)
fails(errno.EINVAL, h.block_status, 4096, size, lambda *a: 0)
fails(errno.EINVAL, h.pread, 0, 0)
fails(errno.EINVAL, h.pread, 512, 0, nbd.CMD_FLAG_REQ_ONE)
fails(errno.EINVAL, h.trim, 512, 0, nbd.CMD_FLAG_NO_HOLE)
fails(errno.EINVAL, h.pread, 33 * M, 0)
fails(errno.EOVERFLOW, h.pread, 33 * M, 0, nbd.CMD_FLAG_DF)
assert h.pread(4096, 4096) == bytes(4096), "the connection still works after errors"
h.shutdown()
# A read-only export refuses writes with EPERM and still reads.
r = connect("ro")
assert r.is_read_only()
r.set_strict_mode(0)
fails(errno.EPERM, r.pwrite, b"x" * 512, 0)
fails(errno.EPERM, r.trim, 512, 0)
fails(errno.EPERM, r.zero, 512, 0)
assert r.pread(4096, 6 * M) == b"\xee" * 4096
r.flush()
r.shutdown()
# Without structured replies: simple replies, and no block status.
s = connect("lun", structured=False)
assert not s.get_structured_replies_negotiated()
assert s.pread(4096, 6 * M) == b"\xee" * 4096
s.set_strict_mode(0)
fails(errno.EINVAL, s.pread, 4096, size)
s.shutdown()
# An unknown export is refused in the handshake.
try:
    connect("nosuch")
    raise AssertionError("connected to an unknown export")
except nbd.Error as e:
    assert "unknown" in e.string.lower() or "export" in e.string.lower(), e.string
print("ok")
"#;

#[test]
fn every_command_and_error() {
    for (kind, _b, lun) in luns(8 * MIB) {
        let (server, _e) = serve(lun);
        let out = nbdsh(&format!("nbd://{}/", server.local_addr()), &format!("{PRELUDE}{COMMANDS}"));
        assert_eq!(out.trim(), "ok", "{kind}");
        server.shutdown();
    }
}

const MULTI_CONN: &str = r#"
import threading
hs = [connect("lun") for _ in range(4)]
assert all(h.can_multi_conn() for h in hs)
def writer(i):
    h = hs[i]
    for j in range(16):
        h.pwrite(bytes([i * 16 + j + 1]) * 65536, (i * 16 + j) * 65536)
    h.flush()
ts = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
# Every connection sees every connection's writes.
for h in hs:
    for k in range(64):
        assert h.pread(65536, k * 65536) == bytes([k + 1]) * 65536, k
# Many requests in flight on one connection, replies matched by cookie.
h = hs[0]
bufs = [nbd.Buffer(65536) for _ in range(64)]
cookies = [h.aio_pread(bufs[k], k * 65536) for k in range(64)]
while h.aio_in_flight() > 0:
    h.poll(-1)
for k in range(64):
    assert h.aio_command_completed(cookies[k])
    assert bufs[k].to_bytearray() == bytes([k + 1]) * 65536, k
print("ok")
"#;

#[test]
fn several_connections_write_disjoint_regions_and_read_all_back() {
    for (kind, _b, lun) in luns(8 * MIB) {
        let (server, _e) = serve(lun);
        let out = nbdsh(&format!("nbd://{}/", server.local_addr()), &format!("{PRELUDE}{MULTI_CONN}"));
        assert_eq!(out.trim(), "ok", "{kind}");
        server.shutdown();
    }
}
