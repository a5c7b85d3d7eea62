"""POSIX behaviour suite for a mounted file system.

Runs against the directory named by ``STRATA_MOUNT`` (see conftest.py).  It
is developed against plain ext4, where every test passes; against a Strata
FUSE mount a failure is a real bug.  Where Linux picks one of several errno
values POSIX allows, the test asserts the Linux (ext4) value and says so.

Conventions: paths are ``str`` (``bytes`` where a test needs raw names); every
test works in its own fresh directory ``d`` with umask 022; randomness is
seeded, so every run does the same operations.  Data written is read back
through a fresh descriptor after fsync + POSIX_FADV_DONTNEED where possible,
so reads go to the file system and not just to the kernel page cache.
"""

import ctypes
import errno
import mmap
import os
import pickle
import random
import stat
import threading
import time

import pytest

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
REC = 16 * KiB  # Strata's record size: interesting boundaries

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02

OTHER_UID = 1234
OTHER_GID = 1234

# A tick of the coarsest kernel clock used for timestamps (jiffies, HZ >= 100),
# with margin: sleeping this long makes the next timestamp strictly larger.
TICK = 0.03

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.fallocate.restype = ctypes.c_int


# --------------------------------------------------------------------------
# helpers


def fallocate(fd, mode, offset, length):
    if _libc.fallocate(fd, mode, offset, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def fs_type(path):
    """File system type of the mount holding ``path`` (from mountinfo)."""
    path = os.path.realpath(path)
    best, best_type = "", "?"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            mnt = left.split()[4].encode().decode("unicode_escape")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, best_type = mnt, right.split()[0]
    return best_type


def skip_if_platform_lacks(err, path, feature):
    """Skip when a non-FUSE development file system genuinely lacks a
    feature; on FUSE (Strata) re-raise so the test fails."""
    t = fs_type(path)
    if not t.startswith("fuse"):
        pytest.skip(f"underlying file system {t!r} does not support {feature}: {err}")
    raise err


class ChildError(Exception):
    pass


def run_as(uid, gid, fn, *args):
    """Run ``fn(*args)`` in a forked child with uid/gid switched (no
    supplementary groups) and return its result.

    An OSError raised in the child is re-raised in the parent with the same
    errno, so ``pytest.raises(PermissionError)`` etc. work as usual; any other
    exception becomes a ChildError carrying its repr.  The child never returns
    into pytest: it always leaves through os._exit.
    """
    if os.geteuid() != 0:
        pytest.skip("switching uid/gid needs root (the suite is not running as root)")
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(rfd)
            try:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
                out = ("ok", fn(*args))
            except OSError as e:
                out = ("oserror", e.errno, e.strerror, e.filename)
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                out = ("exc", repr(e))
            data = pickle.dumps(out)
            view = memoryview(data)
            while view:
                n = os.write(wfd, view)
                view = view[n:]
            os.close(wfd)
        finally:
            os._exit(0)
    os.close(wfd)
    chunks = []
    while True:
        b = os.read(rfd, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child died: status {status:#x}"
    out = pickle.loads(b"".join(chunks))
    if out[0] == "ok":
        return out[1]
    if out[0] == "oserror":
        _, err, strerror, filename = out
        raise OSError(err, strerror, filename)
    raise ChildError(out[1])


def rbytes(seed, n):
    return random.Random(seed).randbytes(n)


def write_file(path, data, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        pwrite_all(fd, data, 0)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def pwrite_all(fd, data, off):
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, off)
        assert n > 0
        view, off = view[n:], off + n


def pread_exact(fd, n, off):
    """Read up to n bytes at off, looping over short reads until EOF."""
    parts, got = [], 0
    while got < n:
        b = os.pread(fd, min(n - got, 8 * MiB), off + got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def drop_cache(fd):
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def read_uncached(path):
    """Whole content via a fresh fd, after evicting the file's clean pages."""
    fd = os.open(path, os.O_RDONLY)
    try:
        drop_cache(fd)
        return pread_exact(fd, os.fstat(fd).st_size + 1, 0)
    finally:
        os.close(fd)


def assert_same(actual, expected, what="data"):
    """Byte comparison with a short message (no megabyte diffs)."""
    actual, expected = bytes(actual), bytes(expected)
    if actual == expected:
        return
    n = min(len(actual), len(expected))
    first = next((i for i in range(n) if actual[i] != expected[i]), n)
    raise AssertionError(
        f"{what}: lengths {len(actual)} vs expected {len(expected)}; first difference at "
        f"offset {first}: got {actual[first:first + 16]!r}, expected {expected[first:first + 16]!r}"
    )


def assert_errno(expected, fn, *args, **kwargs):
    """fn(*args) must fail with one of the errno values in ``expected``."""
    allowed = expected if isinstance(expected, (tuple, list, set)) else (expected,)
    try:
        fn(*args, **kwargs)
    except OSError as e:
        assert e.errno in allowed, (
            f"{getattr(fn, '__name__', fn)}{args}: expected "
            f"{'/'.join(errno.errorcode[x] for x in allowed)}, got "
            f"{errno.errorcode.get(e.errno, e.errno)} ({e})"
        )
        return e
    raise AssertionError(
        f"{getattr(fn, '__name__', fn)}{args} succeeded, expected "
        f"{'/'.join(errno.errorcode[x] for x in allowed)}"
    )


def open_close(path, flags, mode=0o644):
    os.close(os.open(path, flags, mode))


def touch(path, mode=0o644):
    open_close(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)


def free_bytes(path):
    s = os.statvfs(path)
    return s.f_bfree * s.f_frsize


def wait_for(pred, timeout=10.0, interval=0.1):
    """Poll pred() (calling sync between tries) until true or timeout; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        os.sync()
        time.sleep(interval)


def settled_blocks(path, pred, what):
    """st_blocks of path once pred(st_blocks) holds.  A copy-on-write file
    system may update its accounting only when its transaction group commits,
    so poll (with sync) for up to 10 s before failing."""
    ok = wait_for(lambda: pred(os.stat(path).st_blocks))
    blocks = os.stat(path).st_blocks
    assert ok, f"{what}: st_blocks is {blocks} ({blocks * 512} bytes) after waiting 10 s"
    return blocks


# --------------------------------------------------------------------------
# regular files


def test_create_write_read(d):
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        assert os.write(fd, b"hello, world\n") == 13
        assert os.pread(fd, 100, 0) == b"hello, world\n"
        st = os.fstat(fd)
    finally:
        os.close(fd)
    assert stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o644  # 0666 & ~022
    assert st.st_size == 13
    assert st.st_nlink == 1
    assert st.st_uid == os.geteuid() and st.st_gid == os.getegid()
    assert os.stat(p).st_ino == st.st_ino
    assert read_file(p) == b"hello, world\n"
    assert read_uncached(p) == b"hello, world\n"
    assert os.listdir(d) == ["f"]


def test_empty_file(d):
    p = os.path.join(d, "empty")
    touch(p)
    st = os.stat(p)
    assert st.st_size == 0 and st.st_blocks == 0
    assert read_file(p) == b""
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.pread(fd, 10, 0) == b""
        assert os.pread(fd, 10, 12345) == b""
    finally:
        os.close(fd)


def test_overwrite_in_place(d):
    p = os.path.join(d, "f")
    write_file(p, b"a" * 100)
    fd = os.open(p, os.O_WRONLY)
    try:
        assert os.pwrite(fd, b"XYZ", 10) == 3
        os.lseek(fd, 98, os.SEEK_SET)
        assert os.write(fd, b"QRST") == 4  # overwrites 2, extends by 2
    finally:
        os.close(fd)
    expected = b"a" * 10 + b"XYZ" + b"a" * 85 + b"QRST"
    assert os.stat(p).st_size == 102
    assert read_uncached(p) == expected


def test_o_trunc_truncates(d):
    p = os.path.join(d, "f")
    write_file(p, rbytes(1, 3 * REC + 5))
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    try:
        assert os.fstat(fd).st_size == 0
        os.write(fd, b"short")
    finally:
        os.close(fd)
    assert os.stat(p).st_size == 5
    assert read_uncached(p) == b"short"


def test_append(d):
    p = os.path.join(d, "f")
    write_file(p, b"abc")
    fa = os.open(p, os.O_WRONLY | os.O_APPEND)
    fw = os.open(p, os.O_WRONLY)
    try:
        os.lseek(fa, 0, os.SEEK_SET)
        os.write(fa, b"def")  # O_APPEND: goes to the end despite the seek
        assert os.lseek(fa, 0, os.SEEK_CUR) == 6
        # Another descriptor extends the file; the append fd must see the new end.
        os.pwrite(fw, b"0123456789", 6)
        os.write(fa, b"ghi")
        # Linux-specific: pwrite on an O_APPEND fd appends, ignoring the offset.
        os.pwrite(fa, b"jkl", 0)
    finally:
        os.close(fa)
        os.close(fw)
    assert read_uncached(p) == b"abcdef0123456789ghijkl"


def test_o_excl_on_existing(d):
    p = os.path.join(d, "f")
    write_file(p, b"keep")
    assert_errno(errno.EEXIST, os.open, p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.mkdir(os.path.join(d, "dir"))
    assert_errno(errno.EEXIST, os.open, os.path.join(d, "dir"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    # O_EXCL does not follow a symlink, even a dangling one.
    os.symlink("nowhere", os.path.join(d, "dangling"))
    assert_errno(errno.EEXIST, os.open, os.path.join(d, "dangling"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    assert not os.path.lexists(os.path.join(d, "nowhere"))
    assert read_file(p) == b"keep"


def test_open_missing(d):
    p = os.path.join(d, "missing")
    assert_errno(errno.ENOENT, os.open, p, os.O_RDONLY)
    assert_errno(errno.ENOENT, os.open, p, os.O_WRONLY)
    assert_errno(errno.ENOENT, os.stat, p)
    assert_errno(errno.ENOENT, os.unlink, p)
    assert_errno(errno.ENOENT, os.open, os.path.join(d, "nodir", "f"), os.O_WRONLY | os.O_CREAT, 0o644)
    assert os.listdir(d) == []


def test_name_length_limit(d):
    ok = os.path.join(d, "n" * 255)
    write_file(ok, b"255")
    assert read_file(ok) == b"255"
    assert os.listdir(d) == ["n" * 255]
    assert_errno(errno.ENAMETOOLONG, os.open, os.path.join(d, "n" * 256), os.O_WRONLY | os.O_CREAT, 0o644)
    assert_errno(errno.ENAMETOOLONG, os.mkdir, os.path.join(d, "m" * 256))
    assert_errno(errno.ENAMETOOLONG, os.stat, os.path.join(d, "n" * 256))
    assert os.listdir(d) == ["n" * 255]


def test_names_are_raw_bytes(d):
    db = os.fsencode(d)
    names = [b"space name", b"new\nline", "\u00e9t\u00e9-\u65e5\u672c".encode(), b"\xff\xfe-not-utf8", b"-", b".hidden", b"..."]
    for i, n in enumerate(names):
        write_file(os.path.join(db, n), b"%d" % i)
    assert sorted(os.listdir(db)) == sorted(names)
    for i, n in enumerate(names):
        assert read_file(os.path.join(db, n)) == b"%d" % i


@pytest.mark.parametrize("offset", [GiB + 100, 5 * GiB + 12345], ids=["1GiB", "5GiB"])
def test_sparse_file_at_large_offset(d, offset):
    p = os.path.join(d, "sparse")
    head = rbytes(2, 3000)
    tail = rbytes(3, 5000)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        pwrite_all(fd, head, 0)
        pwrite_all(fd, tail, offset)
        drop_cache(fd)
        st = os.fstat(fd)
        assert st.st_size == offset + len(tail)
        # Two small extents; the rest is a hole.  Allow generous metadata.
        assert st.st_blocks * 512 <= 2 * MiB, f"st_blocks={st.st_blocks} for a sparse file"
        assert pread_exact(fd, len(head), 0) == head
        assert pread_exact(fd, 4 * REC, len(head)) == bytes(4 * REC)  # hole right after the head
        assert pread_exact(fd, 100 * KiB, offset // 2 + 77) == bytes(100 * KiB)
        assert pread_exact(fd, 40000, offset - 40000) == bytes(40000)
        got = pread_exact(fd, len(tail) + 100, offset - 100)
        assert_same(got, bytes(100) + tail, "around the tail")
        assert os.pread(fd, 10, offset + len(tail)) == b""
    finally:
        os.close(fd)
    assert os.stat(p).st_size == offset + len(tail)
    blocks = settled_blocks(p, lambda b: b * 512 >= len(tail), "written data of a sparse file")
    assert blocks * 512 <= 2 * MiB, f"st_blocks={blocks} for a sparse file"


def test_unaligned_io_across_records(d):
    p = os.path.join(d, "f")
    size = 10 * REC + 777
    model = bytearray(rbytes(4, size))
    write_file(p, model)
    writes = [
        (REC - 5, 10),  # straddles the first boundary
        (3 * REC + 1000, 40000),  # spans three records
        (5 * REC, REC),  # exactly one aligned record
        (6 * REC + 1, REC - 2),  # inside one record, unaligned both ends
        (7 * REC - 1, 2 * REC + 2),  # one byte before to one byte after two records
        (10 * REC + 700, 500),  # crosses EOF: extends the file
        (size + 3 * REC + 11, 33),  # past EOF: leaves a gap of zeros
    ]
    fd = os.open(p, os.O_RDWR)
    try:
        for i, (off, n) in enumerate(writes):
            data = rbytes(100 + i, n)
            pwrite_all(fd, data, off)
            if off > len(model):
                model.extend(bytes(off - len(model)))
            model[off:off + n] = data
        assert os.fstat(fd).st_size == len(model)
        reads = [(0, 1), (REC - 1, 2), (REC - 7, 3 * REC + 9), (3 * REC + 999, 40002),
                 (6 * REC, REC), (size - 10, 5000), (len(model) - 40, 100), (123, len(model))]
        for off, n in reads:
            assert_same(os.pread(fd, n, off), model[off:off + n], f"cached read ({off}, {n})")
        drop_cache(fd)
        for off, n in reads:
            assert_same(pread_exact(fd, n, off), model[off:off + n], f"uncached read ({off}, {n})")
    finally:
        os.close(fd)
    assert_same(read_uncached(p), model, "whole file")


def test_random_pread_pwrite_against_model(d):
    p = os.path.join(d, "f")
    rng = random.Random(0x5EED)
    model = bytearray()
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for step in range(400):
            r = rng.random()
            limit = 20 * REC
            if r < 0.5:
                off = rng.randrange(0, limit)
                n = rng.choice([1, 7, rng.randrange(1, 2 * REC), REC, rng.randrange(1, 3 * REC)])
                data = rng.randbytes(n)
                assert os.pwrite(fd, data, off) == n
                if off > len(model):
                    model.extend(bytes(off - len(model)))
                model[off:off + n] = data
            elif r < 0.9:
                off = rng.randrange(0, limit + REC)
                n = rng.randrange(1, 3 * REC)
                assert_same(pread_exact(fd, n, off), model[off:off + n], f"step {step}: pread({n}, {off})")
            elif r < 0.97:
                n = rng.randrange(0, limit)
                os.ftruncate(fd, n)
                if n < len(model):
                    del model[n:]
                else:
                    model.extend(bytes(n - len(model)))
            else:
                drop_cache(fd)
            assert os.fstat(fd).st_size == len(model), f"step {step}: size"
    finally:
        os.close(fd)
    assert_same(read_uncached(p), model, "final content")


# --------------------------------------------------------------------------
# truncate


def test_ftruncate_shrink_then_grow_reads_zeros(d):
    p = os.path.join(d, "f")
    size = 5 * REC + 100
    data = rbytes(5, size)
    write_file(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        os.ftruncate(fd, 20000)  # inside the second record
        assert os.fstat(fd).st_size == 20000
        assert_same(pread_exact(fd, size, 0), data[:20000], "after shrink")
        os.ftruncate(fd, size)
        assert os.fstat(fd).st_size == size
        assert_same(pread_exact(fd, size + 10, 0), data[:20000] + bytes(size - 20000), "after grow")
        drop_cache(fd)
        assert_same(pread_exact(fd, size + 10, 0), data[:20000] + bytes(size - 20000), "after grow, uncached")
    finally:
        os.close(fd)


def test_truncate_path_up_and_down(d):
    p = os.path.join(d, "f")
    touch(p)
    os.truncate(p, 100000)
    assert os.stat(p).st_size == 100000
    assert read_uncached(p) == bytes(100000)
    with open(p, "r+b") as f:
        f.seek(REC - 3)
        f.write(b"abcdef")
    os.truncate(p, REC)  # cuts "abcdef" in half
    assert os.stat(p).st_size == REC
    assert read_uncached(p) == bytes(REC - 3) + b"abc"
    os.truncate(p, REC + 10)
    assert read_uncached(p) == bytes(REC - 3) + b"abc" + bytes(10)
    os.truncate(p, 0)
    assert os.stat(p).st_size == 0
    assert read_uncached(p) == b""


def test_shrink_then_write_past_eof_gap_is_zero(d):
    p = os.path.join(d, "f")
    data = rbytes(6, 3 * REC)
    write_file(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        os.ftruncate(fd, 5000)
        os.pwrite(fd, b"Z", 40000)  # old bytes 5000..40000 must not come back
        assert os.fstat(fd).st_size == 40001
        expected = data[:5000] + bytes(35000) + b"Z"
        assert_same(pread_exact(fd, 50000, 0), expected, "cached")
        drop_cache(fd)
        assert_same(pread_exact(fd, 50000, 0), expected, "uncached")
    finally:
        os.close(fd)


def test_truncate_to_zero_releases_blocks(d):
    p = os.path.join(d, "f")
    write_file(p, rbytes(7, MiB))
    fd = os.open(p, os.O_RDWR)
    try:
        os.fsync(fd)
        settled_blocks(p, lambda b: b * 512 >= MiB, "1 MiB written")
        os.ftruncate(fd, 0)
        os.fsync(fd)
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)
    settled_blocks(p, lambda b: b == 0, "truncated to 0")
    assert os.stat(p).st_size == 0


def test_truncate_errors(d):
    os.mkdir(os.path.join(d, "dir"))
    assert_errno(errno.EISDIR, os.truncate, os.path.join(d, "dir"), 0)
    p = os.path.join(d, "f")
    write_file(p, b"x")
    assert_errno(errno.EINVAL, os.truncate, p, -1)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert_errno(errno.EINVAL, os.ftruncate, fd, 0)  # not open for writing
    finally:
        os.close(fd)
    assert read_file(p) == b"x"


# --------------------------------------------------------------------------
# fallocate


def test_posix_fallocate_extends_size(d):
    p = os.path.join(d, "f")
    data = rbytes(8, 100)
    write_file(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, MiB + 3)
        assert os.fstat(fd).st_size == MiB + 3
        os.posix_fallocate(fd, 4096, 8192)  # inside: no change
        assert os.fstat(fd).st_size == MiB + 3
        drop_cache(fd)
        assert_same(pread_exact(fd, 2 * MiB, 0), data + bytes(MiB + 3 - 100))
        # the preallocated range is writable and reads back
        os.pwrite(fd, b"end", MiB)
        assert os.fstat(fd).st_size == MiB + 3
    finally:
        os.close(fd)
    assert_same(read_uncached(p), data + bytes(MiB - 100) + b"end")


def test_punch_hole_zeroes_range_and_keeps_size(d):
    p = os.path.join(d, "f")
    size = 4 * MiB
    model = bytearray(rbytes(9, size))
    write_file(p, model)
    fd = os.open(p, os.O_RDWR)
    try:
        os.fsync(fd)
        blocks_before = settled_blocks(p, lambda b: b * 512 >= size, "4 MiB written")
        ranges = [(MiB + 123, 2 * MiB), (REC - 10, 20), (5, 3)]  # unaligned, across records
        for off, n in ranges:
            try:
                fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n)
            except OSError as e:
                if e.errno != errno.EOPNOTSUPP:
                    raise
                skip_if_platform_lacks(e, d, "FALLOC_FL_PUNCH_HOLE")
            model[off:off + n] = bytes(n)
            assert os.fstat(fd).st_size == size
        # punching past EOF with KEEP_SIZE does not change the size
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, size - 100, MiB)
        model[size - 100:] = bytes(100)
        assert os.fstat(fd).st_size == size
        assert_same(pread_exact(fd, size + 1, 0), model, "cached")
        drop_cache(fd)
        assert_same(pread_exact(fd, size + 1, 0), model, "uncached")
        # the 2 MiB hole must be deallocated (at least 1.5 MiB of it)
        settled_blocks(p, lambda b: (blocks_before - b) * 512 >= 3 * MiB // 2,
                       f"punching 2 MiB out of {blocks_before} blocks")
    finally:
        os.close(fd)
    assert_same(read_uncached(p), model, "reopened")


# --------------------------------------------------------------------------
# directories


def test_mkdir_rmdir(d):
    sub = os.path.join(d, "sub")
    assert os.stat(d).st_nlink == 2
    os.mkdir(sub, 0o777)
    st = os.stat(sub)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o755  # 0777 & ~022
    assert st.st_nlink == 2
    assert st.st_uid == os.geteuid() and st.st_gid == os.getegid()
    assert os.listdir(sub) == []
    assert os.stat(os.path.join(sub, "..")).st_ino == os.stat(d).st_ino
    assert os.stat(os.path.join(sub, ".")).st_ino == st.st_ino
    assert os.stat(d).st_nlink == 3
    os.rmdir(sub)
    assert_errno(errno.ENOENT, os.stat, sub)
    assert os.stat(d).st_nlink == 2
    assert os.listdir(d) == []


def test_mkdir_errors(d):
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    f = os.path.join(d, "file")
    write_file(f, b"x")
    assert_errno(errno.EEXIST, os.mkdir, sub)
    assert_errno(errno.EEXIST, os.mkdir, f)
    os.symlink("sub", os.path.join(d, "link"))
    assert_errno(errno.EEXIST, os.mkdir, os.path.join(d, "link"))
    assert_errno(errno.ENOENT, os.mkdir, os.path.join(d, "missing", "x"))
    assert_errno(errno.ENOTDIR, os.mkdir, os.path.join(f, "x"))
    assert sorted(os.listdir(d)) == ["file", "link", "sub"]


def test_rmdir_errors(d):
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    write_file(os.path.join(sub, "f"), b"x")
    # Linux returns ENOTEMPTY (POSIX also allows EEXIST).
    assert_errno(errno.ENOTEMPTY, os.rmdir, sub)
    os.unlink(os.path.join(sub, "f"))
    os.mkdir(os.path.join(sub, "inner"))
    assert_errno(errno.ENOTEMPTY, os.rmdir, sub)
    f = os.path.join(d, "file")
    write_file(f, b"x")
    assert_errno(errno.ENOTDIR, os.rmdir, f)
    assert_errno(errno.ENOENT, os.rmdir, os.path.join(d, "missing"))
    os.symlink("sub", os.path.join(d, "link"))
    assert_errno(errno.ENOTDIR, os.rmdir, os.path.join(d, "link"))  # rmdir does not follow
    assert_errno(errno.EINVAL, os.rmdir, os.path.join(sub, "."))
    assert os.path.isdir(sub) and os.path.isdir(os.path.join(sub, "inner"))


def test_enotdir(d):
    f = os.path.join(d, "file")
    write_file(f, b"x")
    assert_errno(errno.ENOTDIR, os.listdir, f)
    assert_errno(errno.ENOTDIR, os.open, os.path.join(f, "x"), os.O_RDONLY)
    assert_errno(errno.ENOTDIR, os.open, os.path.join(f, "x"), os.O_WRONLY | os.O_CREAT, 0o644)
    assert_errno(errno.ENOTDIR, os.stat, os.path.join(f, "x"))
    assert_errno(errno.ENOTDIR, os.open, f, os.O_RDONLY | os.O_DIRECTORY)
    assert_errno(errno.ENOTDIR, os.stat, f + "/")


def test_eisdir(d):
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    assert_errno(errno.EISDIR, os.open, sub, os.O_WRONLY)
    assert_errno(errno.EISDIR, os.open, sub, os.O_RDWR)
    assert_errno(errno.EISDIR, os.open, sub, os.O_WRONLY | os.O_CREAT, 0o644)
    # Linux returns EISDIR for unlink(dir); POSIX says EPERM.
    assert_errno(errno.EISDIR, os.unlink, sub)
    fd = os.open(sub, os.O_RDONLY)
    try:
        assert_errno(errno.EISDIR, os.read, fd, 10)
    finally:
        os.close(fd)
    assert os.path.isdir(sub)


def test_listdir_exact_and_types(d):
    expected = {}
    for i in range(5):
        write_file(os.path.join(d, f"file{i}"), b"x" * i)
        expected[f"file{i}"] = "file"
    for i in range(3):
        os.mkdir(os.path.join(d, f"dir{i}"))
        expected[f"dir{i}"] = "dir"
    os.symlink("file0", os.path.join(d, "link"))
    expected["link"] = "symlink"
    os.mkfifo(os.path.join(d, "fifo"))
    expected["fifo"] = "fifo"
    names = os.listdir(d)
    assert len(names) == len(set(names)) == len(expected)
    assert set(names) == set(expected)
    with os.scandir(d) as it:
        entries = list(it)
    for e in entries:
        kind = expected[e.name]
        assert e.is_dir(follow_symlinks=False) == (kind == "dir"), e.name
        assert e.is_file(follow_symlinks=False) == (kind == "file"), e.name
        assert e.is_symlink() == (kind == "symlink"), e.name
        st = os.lstat(e.path)
        # readdir's d_ino must be the inode number stat reports
        assert e.inode() == st.st_ino, e.name
        if kind == "fifo":
            assert stat.S_ISFIFO(st.st_mode)
    inos = [os.lstat(os.path.join(d, n)).st_ino for n in names]
    assert len(set(inos)) == len(inos), "distinct files share an inode number"


def test_dir_nlink_counts_subdirectories(d):
    top = os.path.join(d, "top")
    os.mkdir(top)
    for i in range(5):
        os.mkdir(os.path.join(top, f"s{i}"))
    for i in range(3):
        write_file(os.path.join(top, f"f{i}"), b"")
    os.symlink("s0", os.path.join(top, "l"))
    assert os.stat(top).st_nlink == 2 + 5
    os.mkdir(os.path.join(top, "s0", "deeper"))  # grandchildren do not count
    assert os.stat(top).st_nlink == 7
    assert os.stat(os.path.join(top, "s0")).st_nlink == 3
    os.rmdir(os.path.join(top, "s1"))
    os.rmdir(os.path.join(top, "s2"))
    assert os.stat(top).st_nlink == 2 + 3
    os.unlink(os.path.join(top, "f0"))
    assert os.stat(top).st_nlink == 5


def test_directory_with_20000_entries(d):
    big = os.path.join(d, "big")
    os.mkdir(big)
    rng = random.Random(20000)
    n = 20000
    # varied name lengths, so entries straddle any readdir buffer boundary
    names = [f"e{i:05d}-" + "x" * (i % 61) for i in range(n)]
    for name in names:
        open_close(os.path.join(big, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    listed = os.listdir(big)
    assert len(listed) == n, f"listdir returned {len(listed)} entries"
    assert len(set(listed)) == n, "listdir returned duplicates"
    assert set(listed) == set(names)
    assert os.stat(big).st_nlink == 2
    for name in rng.sample(names, 500):
        st = os.stat(os.path.join(big, name))
        assert stat.S_ISREG(st.st_mode) and st.st_size == 0
    for i in rng.sample(range(n), 100):
        assert_errno(errno.ENOENT, os.stat, os.path.join(big, f"e{i:05d}-" + "y" * 3))
    for name in names:
        os.unlink(os.path.join(big, name))
    assert os.listdir(big) == []
    os.rmdir(big)


def test_readdir_while_deleting_sees_each_entry_once(d):
    """rm -rf pattern: unlink each entry right after readdir returns it."""
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    names = {f"entry-{i:04d}-" + "z" * (i % 37) for i in range(3000)}
    for name in names:
        touch(os.path.join(sub, name))
    seen = []
    with os.scandir(sub) as it:
        for e in it:
            seen.append(e.name)
            os.unlink(e.path)
    assert len(seen) == len(set(seen)), "an entry was returned twice"
    assert set(seen) == names, f"{len(names - set(seen))} entries never returned"
    assert os.listdir(sub) == []
    os.rmdir(sub)


# --------------------------------------------------------------------------
# rename


def test_rename_file(d):
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    write_file(a, b"content")
    ino = os.stat(a).st_ino
    os.rename(a, b)
    assert_errno(errno.ENOENT, os.stat, a)
    assert os.stat(b).st_ino == ino
    assert read_uncached(b) == b"content"
    assert os.listdir(d) == ["b"]
    os.rename(b, b)  # to itself: no-op
    assert read_file(b) == b"content"
    assert_errno(errno.ENOENT, os.rename, a, os.path.join(d, "c"))


def test_rename_across_directories(d):
    x, y = os.path.join(d, "x"), os.path.join(d, "y")
    os.mkdir(x)
    os.mkdir(y)
    write_file(os.path.join(x, "a"), b"moved")
    ino = os.stat(os.path.join(x, "a")).st_ino
    os.rename(os.path.join(x, "a"), os.path.join(y, "b"))
    assert os.listdir(x) == []
    assert os.listdir(y) == ["b"]
    assert os.stat(os.path.join(y, "b")).st_ino == ino
    assert read_uncached(os.path.join(y, "b")) == b"moved"
    assert os.stat(x).st_nlink == 2 and os.stat(y).st_nlink == 2


def test_rename_over_existing_file(d):
    src, dst = os.path.join(d, "src"), os.path.join(d, "dst")
    write_file(src, b"new content")
    write_file(dst, b"old content that is longer")
    src_ino = os.stat(src).st_ino
    old_fd = os.open(dst, os.O_RDONLY)
    try:
        os.rename(src, dst)
        assert os.stat(dst).st_ino == src_ino
        assert read_uncached(dst) == b"new content"
        assert os.listdir(d) == ["dst"]
        # the replaced inode lives on only through the open fd
        st = os.fstat(old_fd)
        assert st.st_nlink == 0
        assert os.pread(old_fd, 100, 0) == b"old content that is longer"
    finally:
        os.close(old_fd)


def test_rename_over_existing_is_atomic(d):
    """A reader opening the target by name never sees ENOENT or a mix of versions."""
    dst = os.path.join(d, "dst")
    size = 3 * REC + 1

    def version(i):
        return (b"%06d" % i) * (size // 6) + b"%01d" % (i % 10)

    write_file(dst, version(0))
    stop = threading.Event()
    errors = []
    reads = [0]

    def reader():
        while not stop.is_set():
            try:
                data = read_file(dst)
            except OSError as e:
                errors.append(f"open/read failed: {e}")
                return
            try:
                i = int(data[:6])
            except ValueError:
                i = -1
            if i < 0 or data != version(i):
                errors.append(f"torn or wrong content ({len(data)} bytes, header {data[:6]!r})")
                return
            reads[0] += 1

    t = threading.Thread(target=reader)
    t.start()
    deadline = time.monotonic() + 10
    while reads[0] == 0 and not errors and time.monotonic() < deadline:
        time.sleep(0.001)  # the reader is running before the renames start
    try:
        for i in range(1, 200):
            tmp = os.path.join(d, f"tmp{i}")
            write_file(tmp, version(i))
            os.rename(tmp, dst)
            if errors:
                break
    finally:
        stop.set()
        t.join()
    assert not errors, errors[0]
    assert reads[0] > 0
    assert read_uncached(dst) == version(199)
    assert os.listdir(d) == ["dst"]


def test_rename_directory_across_parents_updates_nlink(d):
    p1, p2 = os.path.join(d, "p1"), os.path.join(d, "p2")
    os.mkdir(p1)
    os.mkdir(p2)
    os.mkdir(os.path.join(p1, "sub"))
    write_file(os.path.join(p1, "sub", "f"), b"inside")
    os.mkdir(os.path.join(p1, "sub", "inner"))
    assert os.stat(p1).st_nlink == 3 and os.stat(p2).st_nlink == 2
    ino = os.stat(os.path.join(p1, "sub")).st_ino
    os.rename(os.path.join(p1, "sub"), os.path.join(p2, "moved"))
    assert os.stat(p1).st_nlink == 2
    assert os.stat(p2).st_nlink == 3
    moved = os.path.join(p2, "moved")
    assert os.stat(moved).st_ino == ino
    assert os.stat(moved).st_nlink == 3
    assert os.stat(os.path.join(moved, "..")).st_ino == os.stat(p2).st_ino
    assert sorted(os.listdir(moved)) == ["f", "inner"]
    assert read_file(os.path.join(moved, "f")) == b"inside"
    assert os.stat(os.path.join(moved, "inner", "..")).st_ino == ino
    assert os.listdir(p1) == []


def test_rename_directory_over_empty_directory(d):
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    os.mkdir(a)
    os.mkdir(b)
    write_file(os.path.join(a, "f"), b"from a")
    ino = os.stat(a).st_ino
    assert os.stat(d).st_nlink == 4
    os.rename(a, b)
    assert os.listdir(d) == ["b"]
    assert os.stat(b).st_ino == ino
    assert os.listdir(b) == ["f"]
    assert read_file(os.path.join(b, "f")) == b"from a"
    assert os.stat(d).st_nlink == 3


def test_rename_directory_over_nonempty_directory_fails(d):
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    os.mkdir(a)
    os.mkdir(b)
    write_file(os.path.join(b, "keep"), b"k")
    # Linux/ext4 returns ENOTEMPTY; POSIX also allows EEXIST.
    assert_errno((errno.ENOTEMPTY, errno.EEXIST), os.rename, a, b)
    assert os.listdir(a) == [] and os.listdir(b) == ["keep"]


def test_rename_type_mismatch_fails(d):
    f, sub = os.path.join(d, "f"), os.path.join(d, "sub")
    write_file(f, b"file")
    os.mkdir(sub)
    assert_errno(errno.EISDIR, os.rename, f, sub)  # file over directory
    assert_errno(errno.ENOTDIR, os.rename, sub, f)  # directory over file
    assert read_file(f) == b"file" and os.path.isdir(sub)


def test_rename_into_own_subdirectory_fails(d):
    a = os.path.join(d, "a")
    os.makedirs(os.path.join(a, "b", "c"))
    assert_errno(errno.EINVAL, os.rename, a, os.path.join(a, "x"))
    assert_errno(errno.EINVAL, os.rename, a, os.path.join(a, "b", "c", "x"))
    assert_errno(errno.EINVAL, os.rename, os.path.join(a, "b"), os.path.join(a, "b", "c", "x"))
    assert os.path.isdir(os.path.join(a, "b", "c"))
    assert os.listdir(d) == ["a"]


def test_rename_between_hard_links_is_noop(d):
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    write_file(a, b"same")
    os.link(a, b)
    os.rename(a, b)  # same inode: POSIX says do nothing, both names remain
    assert sorted(os.listdir(d)) == ["a", "b"]
    assert os.stat(a).st_nlink == 2


# --------------------------------------------------------------------------
# hard links


def test_hard_links(d):
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    os.mkdir(os.path.join(d, "other"))
    c = os.path.join(d, "other", "c")
    write_file(a, b"shared")
    os.link(a, b)
    os.link(b, c)
    sa, sb, sc = os.stat(a), os.stat(b), os.stat(c)
    assert sa.st_ino == sb.st_ino == sc.st_ino
    assert sa.st_nlink == sb.st_nlink == sc.st_nlink == 3
    with open(b, "r+b") as fb:
        fb.seek(6)
        fb.write(b" data")
    assert read_uncached(a) == b"shared data"
    assert read_uncached(c) == b"shared data"
    os.unlink(a)
    assert os.stat(b).st_nlink == 2
    assert read_file(b) == b"shared data"
    os.unlink(c)
    assert os.stat(b).st_nlink == 1
    assert read_uncached(b) == b"shared data"
    assert sorted(os.listdir(d)) == ["b", "other"]


def test_hard_link_errors(d):
    f, sub = os.path.join(d, "f"), os.path.join(d, "sub")
    write_file(f, b"x")
    os.mkdir(sub)
    assert_errno(errno.EPERM, os.link, sub, os.path.join(d, "sublink"))
    assert_errno(errno.EEXIST, os.link, f, sub)
    write_file(os.path.join(d, "g"), b"g")
    assert_errno(errno.EEXIST, os.link, f, os.path.join(d, "g"))
    assert_errno(errno.ENOENT, os.link, os.path.join(d, "missing"), os.path.join(d, "new"))
    assert os.stat(f).st_nlink == 1 and os.stat(sub).st_nlink == 2
    assert sorted(os.listdir(d)) == ["f", "g", "sub"]


# --------------------------------------------------------------------------
# symlinks


def test_symlink_basic(d):
    target = os.path.join(d, "target")
    write_file(target, b"through the link")
    link = os.path.join(d, "link")
    os.symlink("target", link)
    assert os.readlink(link) == "target"
    lst = os.lstat(link)
    assert stat.S_ISLNK(lst.st_mode)
    assert lst.st_size == len("target")  # POSIX: length of the contents
    assert stat.S_IMODE(lst.st_mode) == 0o777  # Linux: symlink permission bits are always 0777
    assert lst.st_nlink == 1
    st = os.stat(link)
    assert stat.S_ISREG(st.st_mode) and st.st_ino == os.stat(target).st_ino
    assert lst.st_ino != st.st_ino
    assert read_file(link) == b"through the link"
    assert_errno(errno.EINVAL, os.readlink, target)
    assert_errno(errno.EEXIST, os.symlink, "x", link)
    # absolute target
    alink = os.path.join(d, "abs")
    os.symlink(target, alink)
    assert os.readlink(alink) == target
    assert read_file(alink) == b"through the link"


@pytest.mark.parametrize("length", [1000, 4095])
def test_symlink_long_target(d, length):
    comps = []
    while sum(len(c) + 1 for c in comps) < length:
        comps.append("c%d-" % len(comps) + "t" * 90)
    target = "/".join(comps)[:length]
    assert len(target) == length
    link = os.path.join(d, "link")
    os.symlink(target, link)
    assert os.readlink(link) == target
    assert os.lstat(link).st_size == length


def test_dangling_symlink(d):
    link = os.path.join(d, "dangling")
    os.symlink("does-not-exist", link)
    assert stat.S_ISLNK(os.lstat(link).st_mode)
    assert os.readlink(link) == "does-not-exist"
    assert_errno(errno.ENOENT, os.stat, link)
    assert_errno(errno.ENOENT, os.open, link, os.O_RDONLY)
    assert os.path.lexists(link) and not os.path.exists(link)
    # O_CREAT without O_EXCL follows the link and creates its target
    fd = os.open(link, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"now exists")
    os.close(fd)
    assert read_file(os.path.join(d, "does-not-exist")) == b"now exists"
    assert sorted(os.listdir(d)) == ["dangling", "does-not-exist"]
    os.unlink(link)  # removes the link, not the target
    assert os.listdir(d) == ["does-not-exist"]


def test_symlink_in_path_resolution(d):
    real = os.path.join(d, "real")
    os.makedirs(os.path.join(real, "deep"))
    write_file(os.path.join(real, "deep", "f"), b"deep file")
    os.symlink("real", os.path.join(d, "alias"))
    os.symlink(os.path.join(d, "alias", "deep"), os.path.join(d, "abs-deep"))
    os.symlink("abs-deep", os.path.join(d, "chain"))
    assert read_file(os.path.join(d, "alias", "deep", "f")) == b"deep file"
    assert read_file(os.path.join(d, "chain", "f")) == b"deep file"
    assert os.listdir(os.path.join(d, "alias")) == ["deep"]
    write_file(os.path.join(d, "chain", "new"), b"via chain")
    assert read_file(os.path.join(real, "deep", "new")) == b"via chain"
    assert os.stat(os.path.join(d, "chain")).st_ino == os.stat(os.path.join(real, "deep")).st_ino
    os.symlink("loop2", os.path.join(d, "loop1"))
    os.symlink("loop1", os.path.join(d, "loop2"))
    assert_errno(errno.ELOOP, os.stat, os.path.join(d, "loop1"))
    assert_errno(errno.ELOOP, os.open, os.path.join(d, "alias"), os.O_RDONLY | os.O_NOFOLLOW)


# --------------------------------------------------------------------------
# unlink while open


def test_unlink_while_open(d):
    p = os.path.join(d, "f")
    data = rbytes(10, MiB + 17)
    write_file(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        os.unlink(p)
        assert_errno(errno.ENOENT, os.stat, p)
        assert os.listdir(d) == [], "unlinked-but-open file still visible (e.g. .fuse_hidden*)"
        st = os.fstat(fd)
        assert st.st_nlink == 0
        assert st.st_size == len(data)
        assert_same(pread_exact(fd, 2 * MiB, 0), data, "read after unlink")
        extra = rbytes(11, 3 * REC)
        pwrite_all(fd, extra, len(data))
        pwrite_all(fd, b"patch", 5)
        expected = data[:5] + b"patch" + data[10:] + extra
        drop_cache(fd)
        assert os.fstat(fd).st_size == len(expected)
        assert_same(pread_exact(fd, 3 * MiB, 0), expected, "read after unlink + write")
        os.ftruncate(fd, 100)
        assert pread_exact(fd, 200, 0) == expected[:100]
        os.fdatasync(fd)
        # a new file with the same name is a different file
        write_file(p, b"new")
        assert os.stat(p).st_ino != os.fstat(fd).st_ino
        assert pread_exact(fd, 200, 0) == expected[:100]
    finally:
        os.close(fd)
    assert read_file(p) == b"new"


def test_unlink_while_open_frees_space_after_close(d):
    p = os.path.join(d, "f")
    size = 32 * MiB
    write_file(p, rbytes(12, size))
    fd = os.open(p, os.O_RDWR)
    try:
        os.fsync(fd)
        os.unlink(p)
        os.sync()
        free_open = free_bytes(d)
        tail = pread_exact(fd, 100, size - 100)
        assert tail == rbytes(12, size)[-100:]
    finally:
        os.close(fd)
    ok = wait_for(lambda: free_bytes(d) - free_open >= size * 3 // 4)
    assert ok, (f"only {free_bytes(d) - free_open} bytes freed 10 s after closing "
                f"an unlinked {size}-byte file")


# --------------------------------------------------------------------------
# xattrs


def _setxattr(path, name, value, flags=0):
    try:
        os.setxattr(path, name, value, flags)
    except OSError as e:
        if e.errno == errno.EOPNOTSUPP:
            skip_if_platform_lacks(e, path, "user.* extended attributes")
        raise


def user_xattrs(path, **kw):
    return sorted(n for n in os.listxattr(path, **kw) if n.startswith("user."))


def test_xattr_set_get_list_remove(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    assert user_xattrs(p) == []
    _setxattr(p, "user.alpha", b"one")
    os.setxattr(p, "user.beta", b"")
    os.setxattr(p, "user.gamma", b"\x00\x01\xff binary")
    assert user_xattrs(p) == ["user.alpha", "user.beta", "user.gamma"]
    assert os.getxattr(p, "user.alpha") == b"one"
    assert os.getxattr(p, "user.beta") == b""
    assert os.getxattr(p, "user.gamma") == b"\x00\x01\xff binary"
    os.setxattr(p, "user.alpha", b"a longer replacement value")
    assert os.getxattr(p, "user.alpha") == b"a longer replacement value"
    os.setxattr(p, "user.alpha", b"s")
    assert os.getxattr(p, "user.alpha") == b"s"
    os.removexattr(p, "user.beta")
    assert user_xattrs(p) == ["user.alpha", "user.gamma"]
    assert_errno(errno.ENODATA, os.getxattr, p, "user.beta")
    assert read_file(p) == b"x"  # xattrs do not touch the data
    assert os.stat(p).st_size == 1


def test_xattr_missing_is_enodata(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    _setxattr(p, "user.present", b"1")
    assert_errno(errno.ENODATA, os.getxattr, p, "user.absent")
    assert_errno(errno.ENODATA, os.removexattr, p, "user.absent")
    assert_errno(errno.ENOENT, os.getxattr, os.path.join(d, "nofile"), "user.present")


def test_xattr_create_replace_flags(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    _setxattr(p, "user.k", b"v1", os.XATTR_CREATE)
    assert_errno(errno.EEXIST, os.setxattr, p, "user.k", b"v2", os.XATTR_CREATE)
    assert os.getxattr(p, "user.k") == b"v1"
    os.setxattr(p, "user.k", b"v3", os.XATTR_REPLACE)
    assert os.getxattr(p, "user.k") == b"v3"
    assert_errno(errno.ENODATA, os.setxattr, p, "user.none", b"v", os.XATTR_REPLACE)
    assert user_xattrs(p) == ["user.k"]


def test_xattr_values_up_to_a_few_kib(d):
    # ext4 keeps all of a file's xattrs in the inode plus one 4 KiB block, so
    # the sizes here stay within ~3.5 KiB per file.
    p = os.path.join(d, "f")
    write_file(p, b"x")
    values = {f"user.v{n}": rbytes(n, n) for n in (1, 255, 256, 1024)}
    for name, v in values.items():
        _setxattr(p, name, v)
    for name, v in values.items():
        assert os.getxattr(p, name) == v, name
    assert user_xattrs(p) == sorted(values)
    q = os.path.join(d, "g")
    write_file(q, b"y")
    big = rbytes(3000, 3000)
    os.setxattr(q, "user.big", big)
    assert os.getxattr(q, "user.big") == big
    os.setxattr(q, "user.big", big[:2000])  # shrink in place
    assert os.getxattr(q, "user.big") == big[:2000]
    os.setxattr(q, "user.big", big[::-1])  # grow again
    assert os.getxattr(q, "user.big") == big[::-1]
    assert user_xattrs(q) == ["user.big"]
    long_name = "user." + "n" * 250  # XATTR_NAME_MAX is 255
    os.setxattr(p, long_name, b"long name")
    assert os.getxattr(p, long_name) == b"long name"
    assert_errno(errno.ERANGE, os.setxattr, p, "user." + "n" * 251, b"too long")


def test_xattr_on_directory_and_inode_identity(d):
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    _setxattr(sub, "user.dir", b"on a dir")
    assert os.getxattr(sub, "user.dir") == b"on a dir"
    p = os.path.join(d, "f")
    write_file(p, b"x")
    os.setxattr(p, "user.inode", b"follows the inode")
    os.link(p, os.path.join(d, "hard"))
    assert os.getxattr(os.path.join(d, "hard"), "user.inode") == b"follows the inode"
    os.rename(p, os.path.join(sub, "moved"))
    assert os.getxattr(os.path.join(sub, "moved"), "user.inode") == b"follows the inode"
    os.setxattr(os.path.join(d, "hard"), "user.inode", b"changed")
    assert os.getxattr(os.path.join(sub, "moved"), "user.inode") == b"changed"
    os.symlink("hard", os.path.join(d, "link"))
    assert os.getxattr(os.path.join(d, "link"), "user.inode") == b"changed"  # follows
    # Linux forbids user.* xattrs on symlinks themselves
    assert_errno(errno.EPERM, os.setxattr, os.path.join(d, "link"), "user.x", b"1", follow_symlinks=False)


# --------------------------------------------------------------------------
# permissions and ownership


def test_chmod_mode_bits(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    for mode in (0o000, 0o400, 0o644, 0o755, 0o4755, 0o2755, 0o6711, 0o1644, 0o7777):
        os.chmod(p, mode)
        st = os.stat(p)
        assert stat.S_IMODE(st.st_mode) == mode, oct(mode)
        assert stat.S_ISREG(st.st_mode)
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    for mode in (0o1777, 0o2775, 0o700, 0o3755):
        os.chmod(sub, mode)
        st = os.stat(sub)
        assert stat.S_IMODE(st.st_mode) == mode, oct(mode)
        assert stat.S_ISDIR(st.st_mode)
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fchmod(fd, 0o640)
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o640
    finally:
        os.close(fd)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640


def test_umask_honoured(d):
    old = os.umask(0o027)
    try:
        write_file(os.path.join(d, "f"), b"x", mode=0o666)
        os.mkdir(os.path.join(d, "sub"), 0o777)
        os.mkfifo(os.path.join(d, "fifo"), 0o666)
        os.umask(0o077)
        write_file(os.path.join(d, "g"), b"x", mode=0o777)
        os.umask(0)
        write_file(os.path.join(d, "h"), b"x", mode=0o666)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(os.path.join(d, "f")).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(os.path.join(d, "sub")).st_mode) == 0o750
    assert stat.S_IMODE(os.stat(os.path.join(d, "fifo")).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(os.path.join(d, "g")).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(d, "h")).st_mode) == 0o666


def _need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (chown to other ids / switching uid)")


def as_other(fn, *args):
    """fn(*args) in a child process running as OTHER_UID:OTHER_GID."""
    return run_as(OTHER_UID, OTHER_GID, fn, *args)


@pytest.fixture
def other(d):
    """Root only; checks first that the other user can reach ``d`` at all
    (a FUSE mount needs allow_other for that)."""
    _need_root()
    try:
        as_other(os.listdir, d)
    except PermissionError as e:
        raise AssertionError(
            f"uid {OTHER_UID} cannot even list the 0755 test directory ({e}); "
            "a FUSE mount needs -o allow_other (and default_permissions or its own checks)"
        ) from None
    return as_other


def test_chown_as_root(d):
    _need_root()
    p = os.path.join(d, "f")
    write_file(p, b"x")
    os.chown(p, 1234, 5678)
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    os.chown(p, -1, 4321)  # -1 leaves the owner alone
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (1234, 4321)
    os.chown(p, 2**31, -1)  # large ids round-trip
    assert os.stat(p).st_uid == 2**31
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    os.chown(sub, 1, 2)
    st = os.stat(sub)
    assert (st.st_uid, st.st_gid) == (1, 2)
    link = os.path.join(d, "link")
    os.symlink("f", link)
    os.lchown(link, 777, 888)  # changes the link, not the target
    lst = os.lstat(link)
    assert (lst.st_uid, lst.st_gid) == (777, 888)
    assert os.stat(p).st_uid == 2**31
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fchown(fd, 0, 0)
    finally:
        os.close(fd)
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (0, 0)


def test_setgid_directory_inheritance(d):
    _need_root()
    sg = os.path.join(d, "sg")
    os.mkdir(sg)
    os.chown(sg, 0, 5678)
    os.chmod(sg, 0o2775)
    write_file(os.path.join(sg, "f"), b"x")
    os.mkdir(os.path.join(sg, "sub"))
    st_f = os.stat(os.path.join(sg, "f"))
    st_s = os.stat(os.path.join(sg, "sub"))
    assert st_f.st_gid == 5678, "file in a setgid dir must take the dir's group"
    assert st_s.st_gid == 5678, "subdir of a setgid dir must take the dir's group"
    assert st_s.st_mode & stat.S_ISGID, "subdir of a setgid dir must be setgid too"
    assert not st_f.st_mode & stat.S_ISGID
    assert st_f.st_uid == 0 and st_s.st_uid == 0


def _create_as_user(dirpath):
    write_file(os.path.join(dirpath, "userfile"), b"by 1234", mode=0o666)
    os.mkdir(os.path.join(dirpath, "userdir"), 0o777)
    os.symlink("userfile", os.path.join(dirpath, "userlink"))
    return os.getuid(), os.getgid()


def test_nonroot_creates_with_its_ids(d, other):
    shared = os.path.join(d, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    assert other(_create_as_user, shared) == (OTHER_UID, OTHER_GID)
    for name, mode in (("userfile", 0o644), ("userdir", 0o755)):
        st = os.stat(os.path.join(shared, name))
        assert (st.st_uid, st.st_gid) == (OTHER_UID, OTHER_GID), name
        assert stat.S_IMODE(st.st_mode) == mode, name  # umask 022 inherited
    lst = os.lstat(os.path.join(shared, "userlink"))
    assert (lst.st_uid, lst.st_gid) == (OTHER_UID, OTHER_GID)
    assert read_file(os.path.join(shared, "userfile")) == b"by 1234"
    # the owner may chmod its own file; it may not give it away
    other(os.chmod, os.path.join(shared, "userfile"), 0o600)
    assert stat.S_IMODE(os.stat(os.path.join(shared, "userfile")).st_mode) == 0o600
    with pytest.raises(PermissionError) as ei:
        other(os.chown, os.path.join(shared, "userfile"), 0, 0)
    assert ei.value.errno == errno.EPERM


def test_nonroot_eacces_writing_root_file(d, other):
    p = os.path.join(d, "rootfile")
    write_file(p, b"root data", mode=0o644)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o644 and os.stat(p).st_uid == 0
    # reading is allowed by the "other" r bit
    assert other(read_file, p) == b"root data"
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND):
        with pytest.raises(PermissionError) as ei:
            other(open_close, p, flags)
        assert ei.value.errno == errno.EACCES
    with pytest.raises(PermissionError) as ei:
        other(os.truncate, p, 0)
    assert ei.value.errno == errno.EACCES
    with pytest.raises(PermissionError) as ei:
        other(os.chmod, p, 0o666)
    assert ei.value.errno == errno.EPERM  # not the owner
    with pytest.raises(PermissionError) as ei:
        other(os.setxattr, p, "user.x", b"1")
    assert ei.value.errno == errno.EACCES
    os.chmod(p, 0o600)
    with pytest.raises(PermissionError) as ei:
        other(read_file, p)
    assert ei.value.errno == errno.EACCES
    assert read_file(p) == b"root data" and os.stat(p).st_size == 9


def test_nonroot_eacces_creating_in_root_dir(d, other):
    rd = os.path.join(d, "rootdir")
    os.mkdir(rd, 0o755)
    write_file(os.path.join(rd, "existing"), b"x")
    os.chmod(os.path.join(rd, "existing"), 0o666)
    for fn, args in (
        (open_close, (os.path.join(rd, "new"), os.O_WRONLY | os.O_CREAT)),
        (os.mkdir, (os.path.join(rd, "newdir"),)),
        (os.symlink, ("x", os.path.join(rd, "newlink"))),
        (os.mkfifo, (os.path.join(rd, "newfifo"),)),
        (os.unlink, (os.path.join(rd, "existing"),)),
        (os.rename, (os.path.join(rd, "existing"), os.path.join(rd, "renamed"))),
    ):
        with pytest.raises(PermissionError) as ei:
            other(fn, *args)
        assert ei.value.errno == errno.EACCES, fn.__name__
    assert os.listdir(rd) == ["existing"]
    # the 0666 file inside is writable even though the dir is not
    other(write_file, os.path.join(rd, "existing"), b"overwritten")
    assert read_file(os.path.join(rd, "existing")) == b"overwritten"
    # without search permission nothing inside can even be looked up
    os.chmod(rd, 0o700)
    with pytest.raises(PermissionError) as ei:
        other(os.stat, os.path.join(rd, "existing"))
    assert ei.value.errno == errno.EACCES


def test_nonroot_sticky_directory(d, other):
    tmp = os.path.join(d, "tmp")
    os.mkdir(tmp)
    os.chmod(tmp, 0o1777)
    write_file(os.path.join(tmp, "roots"), b"x", mode=0o666)
    other(write_file, os.path.join(tmp, "mine"), b"y")
    # Linux returns EPERM for deleting another user's file in a sticky directory
    with pytest.raises(PermissionError) as ei:
        other(os.unlink, os.path.join(tmp, "roots"))
    assert ei.value.errno == errno.EPERM
    other(os.unlink, os.path.join(tmp, "mine"))
    assert os.listdir(tmp) == ["roots"]


def test_root_overrides_permission_bits(d):
    _need_root()
    p = os.path.join(d, "locked")
    write_file(p, b"secret")
    os.chmod(p, 0o000)
    assert read_file(p) == b"secret"
    with open(p, "ab") as f:
        f.write(b"!")
    assert read_uncached(p) == b"secret!"
    sub = os.path.join(d, "lockeddir")
    os.mkdir(sub, 0o000)
    write_file(os.path.join(sub, "inside"), b"ok")
    assert os.listdir(sub) == ["inside"]


# --------------------------------------------------------------------------
# timestamps


def test_utime_nanosecond_precision(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    atime, mtime = 1_600_000_000_123_456_789, 1_500_000_000_987_654_321
    os.utime(p, ns=(atime, mtime))
    st = os.stat(p)
    assert st.st_atime_ns == atime and st.st_mtime_ns == mtime
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    os.utime(sub, ns=(atime + 1, mtime + 1))
    st = os.stat(sub)
    assert st.st_atime_ns == atime + 1 and st.st_mtime_ns == mtime + 1
    link = os.path.join(d, "link")
    os.symlink("f", link)
    os.utime(link, ns=(atime + 2, mtime + 2), follow_symlinks=False)
    lst = os.lstat(link)
    assert lst.st_atime_ns == atime + 2 and lst.st_mtime_ns == mtime + 2
    assert os.stat(p).st_mtime_ns == mtime  # target untouched


def test_utime_extreme_times(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    cases = [(0, 0), (-1_500_000_000, 4_102_444_800_123_456_789),  # 1969 and 2100 (past 2038)
             (-2_000_000_000_000_000_000, 999_999_999)]  # 1906
    for atime, mtime in cases:
        os.utime(p, ns=(atime, mtime))
        st = os.stat(p)
        assert (st.st_atime_ns, st.st_mtime_ns) == (atime, mtime)


def test_utime_now(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    os.utime(p, ns=(1, 1))
    before = time.time_ns()
    os.utime(p)
    after = time.time_ns()
    st = os.stat(p)
    for t in (st.st_atime_ns, st.st_mtime_ns):
        assert before - 2 * 10**9 <= t <= after + 2 * 10**9


def test_write_updates_mtime_and_ctime(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    old = time.time_ns() - 3600 * 10**9
    os.utime(p, ns=(old, old))
    c0 = os.stat(p).st_ctime_ns
    time.sleep(TICK)
    fd = os.open(p, os.O_RDWR)
    try:
        os.pread(fd, 1, 0)
        st = os.fstat(fd)
        assert st.st_mtime_ns == old and st.st_ctime_ns == c0, "a read changed mtime/ctime"
        os.pwrite(fd, b"y", 0)
    finally:
        os.close(fd)
    st = os.stat(p)
    assert st.st_mtime_ns > old + 3000 * 10**9, "write did not update mtime"
    assert abs(st.st_mtime_ns - time.time_ns()) < 5 * 10**9
    assert st.st_ctime_ns > c0, "write did not update ctime"
    # truncate updates them too
    os.utime(p, ns=(old, old))
    c1 = os.stat(p).st_ctime_ns
    time.sleep(TICK)
    os.truncate(p, 0)
    st = os.stat(p)
    assert st.st_mtime_ns > old + 3000 * 10**9 and st.st_ctime_ns > c1


def test_chmod_chown_link_update_ctime_only(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    old = time.time_ns() - 3600 * 10**9
    os.utime(p, ns=(old, old))
    ops = [lambda: os.chmod(p, 0o600), lambda: os.link(p, os.path.join(d, "hard"))]
    if _xattr_ok(d):
        ops.append(lambda: os.setxattr(p, "user.t", b"1"))
    if os.geteuid() == 0:
        ops.append(lambda: os.chown(p, 1234, 1234))
    for op in ops:
        c0 = os.stat(p).st_ctime_ns
        time.sleep(TICK)
        op()
        st = os.stat(p)
        assert st.st_ctime_ns > c0, "metadata change did not update ctime"
        assert st.st_mtime_ns == old and st.st_atime_ns == old, "metadata change touched mtime/atime"


def _xattr_ok(d):
    probe = os.path.join(d, ".xattr-probe")
    write_file(probe, b"")
    try:
        os.setxattr(probe, "user.p", b"1")
        return True
    except OSError:
        return False
    finally:
        os.unlink(probe)


def test_directory_mtime_updates_on_entry_changes(d):
    sub = os.path.join(d, "sub")
    other = os.path.join(d, "other")
    os.mkdir(sub)
    os.mkdir(other)
    write_file(os.path.join(sub, "victim"), b"x")
    write_file(os.path.join(sub, "mover"), b"x")
    old = time.time_ns() - 3600 * 10**9
    ops = [
        ("mkdir", lambda: os.mkdir(os.path.join(sub, "newdir")), [sub]),
        ("rmdir", lambda: os.rmdir(os.path.join(sub, "newdir")), [sub]),
        ("create", lambda: touch(os.path.join(sub, "newfile")), [sub]),
        ("unlink", lambda: os.unlink(os.path.join(sub, "victim")), [sub]),
        ("symlink", lambda: os.symlink("x", os.path.join(sub, "sl")), [sub]),
        ("rename-within", lambda: os.rename(os.path.join(sub, "newfile"), os.path.join(sub, "renamed")), [sub]),
        ("rename-across", lambda: os.rename(os.path.join(sub, "mover"), os.path.join(other, "mover")), [sub, other]),
    ]
    for name, op, dirs in ops:
        for x in dirs:
            os.utime(x, ns=(old, old))
        c0 = {x: os.stat(x).st_ctime_ns for x in dirs}
        time.sleep(TICK)
        op()
        for x in dirs:
            st = os.stat(x)
            assert st.st_mtime_ns > old + 3000 * 10**9, f"{name}: mtime of {os.path.basename(x)} not updated"
            assert st.st_ctime_ns > c0[x], f"{name}: ctime of {os.path.basename(x)} not updated"


# --------------------------------------------------------------------------
# statvfs


def test_statvfs_sane(d):
    s = os.statvfs(d)
    assert s.f_bsize > 0 and s.f_frsize > 0
    assert s.f_blocks > 0
    assert 0 <= s.f_bfree <= s.f_blocks
    assert 0 <= s.f_bavail <= s.f_bfree
    assert s.f_files == 0 or s.f_ffree <= s.f_files
    assert s.f_favail <= s.f_ffree or s.f_files == 0
    assert s.f_namemax >= 255
    fd = os.open(d, os.O_RDONLY)
    try:
        assert os.fstatvfs(fd).f_blocks == s.f_blocks
    finally:
        os.close(fd)


def test_statvfs_free_space_tracks_writes_and_unlink(d):
    size = 64 * MiB
    p = os.path.join(d, "big")
    before = free_bytes(d)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        chunk_rng = random.Random(64)
        for i in range(size // MiB):
            pwrite_all(fd, chunk_rng.randbytes(MiB), i * MiB)  # incompressible
        os.fsync(fd)
    finally:
        os.close(fd)
    settled_blocks(p, lambda b: b * 512 >= size, f"{size} bytes written")
    # at least 3/4 of the file must show up as used (allows for unrelated
    # activity and delayed accounting); a bounded wait for CoW commits
    ok = wait_for(lambda: before - free_bytes(d) >= size * 3 // 4)
    assert ok, f"free space dropped by only {before - free_bytes(d)} bytes after writing {size}"
    after_write = free_bytes(d)
    os.unlink(p)
    os.sync()
    ok = wait_for(lambda: free_bytes(d) - after_write >= size * 3 // 4)
    assert ok, f"only {free_bytes(d) - after_write} bytes freed 10 s after unlinking a {size}-byte file"
    s = os.statvfs(d)
    assert s.f_bavail <= s.f_bfree <= s.f_blocks


# --------------------------------------------------------------------------
# fsync


def test_fsync_fdatasync_file_and_directory(d):
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, rbytes(13, 3 * REC))
        os.fsync(fd)
        os.pwrite(fd, b"more", 10)
        os.fdatasync(fd)
        os.fsync(fd)  # nothing dirty: still succeeds
    finally:
        os.close(fd)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
        os.fdatasync(dfd)
    finally:
        os.close(dfd)
    rfd = os.open(p, os.O_RDONLY)  # fsync on a read-only fd is allowed
    try:
        os.fsync(rfd)
    finally:
        os.close(rfd)
    os.sync()
    expected = bytearray(rbytes(13, 3 * REC))
    expected[10:14] = b"more"
    assert read_uncached(p) == expected


# --------------------------------------------------------------------------
# O_DIRECT


def test_o_direct_aligned_io(d):
    p = os.path.join(d, "direct")
    try:
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        if os.path.lexists(p):
            os.unlink(p)
        skip_if_platform_lacks(e, d, "O_DIRECT")
    n = 4 * 4096
    data = rbytes(14, n)
    wbuf = mmap.mmap(-1, n)  # page-aligned
    rbuf = mmap.mmap(-1, n)
    try:
        wbuf[:] = data
        assert os.pwrite(fd, wbuf, 0) == n
        wbuf[:4096] = data[-4096:]
        assert os.pwritev(fd, [memoryview(wbuf)[:4096]], 8192) == 4096
        expected = data[:8192] + data[-4096:] + data[12288:]
        assert os.fstat(fd).st_size == n
        assert os.preadv(fd, [rbuf], 0) == n
        assert_same(rbuf[:], expected, "O_DIRECT read")
        assert os.preadv(fd, [rbuf], n) == 0  # EOF
        # coherence with buffered I/O in both directions
        assert_same(read_file(p), expected, "buffered read after O_DIRECT write")
        with open(p, "r+b") as f:
            f.seek(4096)
            f.write(b"B" * 4096)
        expected = expected[:4096] + b"B" * 4096 + expected[8192:]
        rbuf[:] = bytes(n)
        assert os.preadv(fd, [rbuf], 0) == n
        assert_same(rbuf[:], expected, "O_DIRECT read after buffered write")
        os.fsync(fd)
    finally:
        os.close(fd)
        wbuf.close()
        rbuf.close()
    assert_same(read_uncached(p), expected, "reopened")


# --------------------------------------------------------------------------
# mmap


def test_mmap_shared_write_and_read(d):
    p = os.path.join(d, "f")
    size = 3 * REC
    data = bytearray(rbytes(15, size))
    write_file(p, data)
    fd = os.open(p, os.O_RDWR)
    try:
        m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            m[REC - 8:REC + 8] = b"M" * 16
            data[REC - 8:REC + 8] = b"M" * 16
            m.flush()
            assert_same(os.pread(fd, size, 0), data, "read after mmap store")
            os.pwrite(fd, b"W" * 10, 2 * REC + 5)
            data[2 * REC + 5:2 * REC + 15] = b"W" * 10
            assert m[2 * REC + 5:2 * REC + 15] == b"W" * 10
        finally:
            m.close()
    finally:
        os.close(fd)
    assert_same(read_uncached(p), data, "reopened")


# --------------------------------------------------------------------------
# concurrency


def test_concurrent_pwrite_disjoint_regions(d):
    p = os.path.join(d, "f")
    nthreads, per_thread = 8, 16
    nchunks = nthreads * per_thread
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    barrier = threading.Barrier(nthreads)
    errors = []

    def chunk(c):
        return rbytes(1000 + c, REC)

    def worker(t):
        try:
            barrier.wait()
            # interleaved: thread t owns chunks t, t+8, t+16, ... written in reverse
            for c in reversed(range(t, nchunks, nthreads)):
                assert os.pwrite(fd, chunk(c), c * REC) == REC
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert os.fstat(fd).st_size == nchunks * REC
    finally:
        os.close(fd)
    content = read_uncached(p)
    assert len(content) == nchunks * REC
    bad = [c for c in range(nchunks) if content[c * REC:(c + 1) * REC] != chunk(c)]
    assert not bad, f"chunks with wrong content: {bad}"


def test_concurrent_appends_with_readers(d):
    nwriters, nrecords = 4, 400
    paths = [os.path.join(d, f"log{i}") for i in range(nwriters)]

    def record(w, i):
        return b"<%d:%05d:" % (w, i) + b"." * ((w * 131 + i * 17) % 300) + b">\n"

    expected = [b"".join(record(w, i) for i in range(nrecords)) for w in range(nwriters)]
    for p in paths:
        touch(p)
    done = threading.Event()
    errors = []
    reads = [0]

    def writer(w):
        try:
            fd = os.open(paths[w], os.O_WRONLY | os.O_APPEND)
            try:
                for i in range(nrecords):
                    r = record(w, i)
                    assert os.write(fd, r) == len(r)
            finally:
                os.close(fd)
        except Exception as e:  # noqa: BLE001
            errors.append(f"writer {w}: {e!r}")

    def reader():
        try:
            while not errors:
                finished = done.is_set()  # one full pass after the writers finish
                for w, p in enumerate(paths):
                    data = read_file(p)
                    if data != expected[w][:len(data)]:
                        errors.append(f"reader saw a non-prefix of log{w} ({len(data)} bytes)")
                        return
                    if finished and data != expected[w]:
                        errors.append(f"reader saw {len(data)} of {len(expected[w])} bytes of log{w} after the writers finished")
                        return
                    reads[0] += 1
                if finished:
                    return
        except Exception as e:  # noqa: BLE001
            errors.append(f"reader: {e!r}")

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(nwriters)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert not errors, errors
    assert reads[0] > 0
    for w, p in enumerate(paths):
        assert os.stat(p).st_size == len(expected[w])
        assert_same(read_uncached(p), expected[w], f"log{w}")


# --------------------------------------------------------------------------
# special files


def test_mkfifo(d):
    p = os.path.join(d, "fifo")
    os.mkfifo(p, 0o640)
    st = os.stat(p)
    assert stat.S_ISFIFO(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert st.st_size == 0 and st.st_nlink == 1
    q = os.path.join(d, "fifo2")
    os.mknod(q, stat.S_IFIFO | 0o600)
    assert stat.S_ISFIFO(os.stat(q).st_mode)
    assert_errno(errno.EEXIST, os.mkfifo, p)
    # a FIFO on this file system is a working pipe
    rfd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        wfd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(wfd, b"ping")
            assert os.read(rfd, 10) == b"ping"
        finally:
            os.close(wfd)
    finally:
        os.close(rfd)
    assert sorted(os.listdir(d)) == ["fifo", "fifo2"]
    os.unlink(p)
    assert os.listdir(d) == ["fifo2"]
