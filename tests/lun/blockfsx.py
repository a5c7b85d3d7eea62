#!/usr/bin/python3
"""blockfsx: an fsx-style random exerciser for a block device (a file of fixed size), checked
against an in-memory model after every read and at the end.

    blockfsx.py PATH|nbd://URI OPS SEED [--save MODEL | --verify-only MODEL]

PATH is a file (an nbdfuse file: the whole path through FUSE and the kernel); an nbd:// URI
is driven with libnbd directly (python3-libnbd; run with /usr/bin/python3), every operation
reaching the server as the matching NBD command.

Operations (fsx's mix, block-device flavour): pread and pwrite at random offsets and lengths
(unaligned, crossing record boundaries, up to 256 KiB), fallocate PUNCH_HOLE (NBD TRIM
through nbdfuse) and ZERO_RANGE (NBD WRITE_ZEROES), fdatasync (NBD FLUSH). Every read is
compared with the model; the first difference prints the operation log tail and fails.
With --save MODEL the model is written at the end (after an fdatasync) so that a second run
with --verify-only MODEL checks the whole device against it — after a restart of the server.
"""
import ctypes
import ctypes.util
import os
import random
import sys

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"fallocate(mode={mode:#x}, {off}, {length}): {os.strerror(e)}")


class File:
    # nbdfuse passes every request to libnbd, which wants it aligned to the export's
    # minimum block size (up to 4 KiB).
    align = trim_align = 4096

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR)
        self.size = os.fstat(self.fd).st_size

    def pread(self, n, off):
        return os.pread(self.fd, n, off)

    def pwrite(self, data, off):
        assert os.pwrite(self.fd, data, off) == len(data)

    def punch(self, off, n):
        fallocate(self.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n)

    def zero(self, off, n):
        fallocate(self.fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off, n)

    def sync(self):
        os.fdatasync(self.fd)


class Nbd:
    def __init__(self, uri):
        import nbd
        self.h = nbd.NBD()
        self.h.connect_uri(uri)
        self.size = self.h.get_size()
        # libnbd refuses requests not aligned to the export's minimum block size.
        self.align = self.trim_align = max(1, self.h.get_block_size(nbd.SIZE_MINIMUM))

    def pread(self, n, off):
        return self.h.pread(n, off)

    def pwrite(self, data, off):
        self.h.pwrite(data, off)

    def punch(self, off, n):
        self.h.trim(n, off)

    def zero(self, off, n):
        self.h.zero(n, off)

    def sync(self):
        self.h.flush()


def main():
    args = sys.argv[1:]
    save = verify_only = None
    if "--save" in args:
        i = args.index("--save")
        save = args[i + 1]
        del args[i:i + 2]
    if "--verify-only" in args:
        i = args.index("--verify-only")
        verify_only = args[i + 1]
        del args[i:i + 2]
    path, ops, seed = args[0], int(args[1]), int(args[2])
    dev = Nbd(path) if path.startswith("nbd://") else File(path)
    size = dev.size
    if verify_only:
        model = open(verify_only, "rb").read()
        assert len(model) == size, f"model of {len(model)} bytes for a device of {size}"
        for off in range(0, size, 1 << 20):
            got = dev.pread(min(1 << 20, size - off), off)
            want = model[off:off + len(got)]
            if got != want:
                bad = next(i for i in range(len(got)) if got[i] != want[i])
                sys.exit(f"blockfsx: after the restart byte {off + bad} differs from the model")
        print(f"blockfsx: {size} bytes equal the model after the restart")
        return
    rng = random.Random(seed)
    if size > (256 << 20):
        sys.exit("device too large (at most 256 MiB: the model is in memory)")
    model = bytearray()
    for o in range(0, size, 1 << 20):
        model += dev.pread(min(1 << 20, size - o), o)
    log = []
    counts = {}
    for n in range(ops):
        op = rng.choices(["read", "write", "punch", "zero", "sync"], [40, 40, 8, 8, 4])[0]
        length = rng.choice([1, 511, 512, 4096, 8192, 16384, 65536, 262144, rng.randrange(1, 262144)])
        off = rng.randrange(0, size - 1)
        if rng.random() < 0.5:
            off -= off % 512
        a = dev.trim_align if op in ("punch", "zero") else dev.align
        off -= off % a
        length = max(a, min(length, size - off) // a * a)
        log.append(f"{n}: {op} {off}+{length}")
        counts[op] = counts.get(op, 0) + 1
        if op == "read":
            got = bytes(dev.pread(length, off))
            if got != model[off:off + length]:
                bad = next(i for i in range(length) if got[i] != model[off + i])
                print("\n".join(log[-20:]), file=sys.stderr)
                sys.exit(f"blockfsx: seed {seed} op {n}: read {off}+{length} differs at byte {off + bad}: "
                         f"got {got[bad]:#x}, model {model[off + bad]:#x}")
        elif op == "write":
            data = rng.randbytes(length)
            dev.pwrite(data, off)
            model[off:off + length] = data
        elif op in ("punch", "zero"):
            (dev.punch if op == "punch" else dev.zero)(off, length)
            model[off:off + length] = bytes(length)
        else:
            dev.sync()
    got = bytearray()
    for o in range(0, size, 1 << 20):
        got += dev.pread(min(1 << 20, size - o), o)
    if got != model:
        bad = next(i for i in range(size) if got[i] != model[i])
        sys.exit(f"blockfsx: seed {seed}: at the end byte {bad} differs from the model")
    dev.sync()
    if save:
        with open(save, "wb") as f:
            f.write(model)
    print(f"blockfsx: seed {seed}: {ops} operations ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}), "
          f"{size} bytes equal the model")


if __name__ == "__main__":
    main()
