#!/usr/bin/env bash
# Build libfuse's passthrough_ll example (Debian package libfuse3-dev ships its source) into
# OUT_BIN, for the "FUSE pass-through over ext4" target of scripts/bench/peers.sh.
#
#   build-passthrough.sh OUT_BIN
#
# One change to the example, applied here with a checked text substitution: the stock example
# creates every file and directory with the daemon's credentials (root), so PostgreSQL's initdb
# ("data directory has wrong ownership") and MariaDB would refuse to run on it. The patched copy
# switches the calling thread's fsuid/fsgid to the requester's (fuse_req_ctx) around the two
# calls that create inodes (openat(O_CREAT) in lo_create, mknod_wrapper in lo_mknod_symlink,
# which also serves mkdir and symlink), as a kernel file system would. setfsuid/setfsgid are
# per-thread system calls.
# Second change: O_DIRECT is not passed on to ext4 (open/create strip it). libfuse hands the
# daemon unaligned buffers, so an O_DIRECT pwrite on ext4 fails with EINVAL and fio direct=1 or
# InnoDB's O_DIRECT would not run at all. The kernel's FUSE client still honours O_DIRECT
# (no page cache on the FUSE side); the daemon's writes then go through ext4's page cache and
# reach the disk at fsync/fdatasync, which it passes through unchanged.
set -euo pipefail
out="$1"
src_dir="${FUSE_EXAMPLES_DIR:-/usr/share/doc/libfuse3-dev/examples}"
[ -f "$src_dir/passthrough_ll.c" ] || { echo "no $src_dir/passthrough_ll.c (apt-get install libfuse3-dev)" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/passthrough-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp "$src_dir/passthrough_ll.c" "$src_dir/passthrough_helpers.h" "$work/"
python3 - "$work/passthrough_ll.c" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
def sub(old, new):
    global s
    if s.count(old) != 1:
        sys.exit(f"patch anchor found {s.count(old)} times (expected 1): {old!r}")
    s = s.replace(old, new)
sub('#include "passthrough_helpers.h"\n',
    '#include "passthrough_helpers.h"\n'
    '#include <sys/fsuid.h>\n'
    '/* strata peers.sh: create inodes with the requester\'s credentials */\n'
    'static void lo_as_caller(fuse_req_t req) {\n'
    '\tconst struct fuse_ctx *c = fuse_req_ctx(req);\n'
    '\tsetfsgid(c->gid);\n\tsetfsuid(c->uid);\n}\n'
    'static void lo_as_self(void) { int e = errno; setfsuid(geteuid()); setfsgid(getegid()); errno = e; }\n')
sub('\tres = mknod_wrapper(dir->fd, name, link, mode, rdev);\n',
    '\tlo_as_caller(req);\n\tres = mknod_wrapper(dir->fd, name, link, mode, rdev);\n\tlo_as_self();\n')
sub('\tfd = openat(lo_fd(req, parent), name,\n\t\t    (fi->flags | O_CREAT) & ~O_NOFOLLOW, mode);\n',
    '\tlo_as_caller(req);\n\tfd = openat(lo_fd(req, parent), name,\n\t\t    (fi->flags | O_CREAT) & ~(O_NOFOLLOW | O_DIRECT), mode);\n\tlo_as_self();\n')
sub('\tfd = open(buf, fi->flags & ~O_NOFOLLOW);\n',
    '\tfd = open(buf, fi->flags & ~(O_NOFOLLOW | O_DIRECT));\n')
open(p, "w").write(s)
PY
# shellcheck disable=SC2046 # pkg-config prints several words on purpose
gcc -Wall -O2 -o "$out" "$work/passthrough_ll.c" $(pkg-config fuse3 --cflags --libs)
