"""Fixtures for the POSIX behaviour suite.

The suite runs against any directory named by the environment variable
``STRATA_MOUNT`` (a fresh, empty, writable directory: a Strata FUSE mount, or
a plain ext4/tmpfs directory while developing the suite).  Every test gets its
own fresh subdirectory of it (fixture ``d``), removed again afterwards.

    STRATA_MOUNT=$(mktemp -d /var/tmp/px.XXXX) python3 -m pytest -q tests/posix
"""

import os
import pickle
import shutil
import stat
import uuid

import pytest


def _mount_root():
    root = os.environ.get("STRATA_MOUNT")
    if not root:
        raise pytest.UsageError(
            "STRATA_MOUNT is not set: point it at an empty, writable directory "
            "(a Strata FUSE mount, or e.g. $(mktemp -d /var/tmp/px.XXXX))"
        )
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise pytest.UsageError(f"STRATA_MOUNT={root} is not a directory")
    return root


@pytest.fixture(scope="session")
def mount_root():
    """The directory under test.

    Tests that switch to a non-root uid must be able to search it, so if it is
    not searchable by "other" (``mktemp -d`` makes it 0700) the search bit is
    added for the session and the original mode restored at the end.
    """
    root = _mount_root()
    old_mode = stat.S_IMODE(os.stat(root).st_mode)
    if not old_mode & stat.S_IXOTH:
        os.chmod(root, old_mode | stat.S_IXGRP | stat.S_IXOTH)
    yield root
    if not old_mode & stat.S_IXOTH:
        os.chmod(root, old_mode)


@pytest.fixture
def d(mount_root, request):
    """A fresh, empty 0755 directory for one test, with umask 022; removed afterwards."""
    name = "t-" + request.node.name[:80].translate(str.maketrans("[]/ ", "____")) + "-" + uuid.uuid4().hex[:8]
    path = os.path.join(mount_root, name)
    old_umask = os.umask(0o022)
    try:
        os.mkdir(path, 0o755)
        os.chmod(path, 0o755)
        yield path
    finally:
        os.umask(old_umask)
    # Teardown: a failure to remove the tree (e.g. ENOTEMPTY from a readdir
    # bug) is reported as an error of the test.
    if os.path.lexists(path):
        shutil.rmtree(path)
    assert not os.path.lexists(path), f"cleanup left {path} behind"


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


@pytest.fixture
def as_user():
    """``as_user(uid, gid, fn, *args)``: see run_as."""
    return run_as
