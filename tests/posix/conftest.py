"""Fixtures for the POSIX behaviour suite.

The suite runs against any directory named by the environment variable
``STRATA_MOUNT`` (a fresh, empty, writable directory: a Strata FUSE mount, or
a plain ext4/tmpfs directory while developing the suite).  Every test gets its
own fresh subdirectory of it (fixture ``d``), removed again afterwards.

    STRATA_MOUNT=$(mktemp -d /var/tmp/px.XXXX) python3 -m pytest -q tests/posix
"""

import os
import shutil
import stat
import uuid

import pytest


def _mount_root():
    root = os.environ.get("STRATA_MOUNT")
    if not root:
        pytest.exit(
            "STRATA_MOUNT is not set: point it at an empty, writable directory "
            "(a Strata FUSE mount, or e.g. $(mktemp -d /var/tmp/px.XXXX))",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        pytest.exit(f"STRATA_MOUNT={root} is not a directory", returncode=pytest.ExitCode.USAGE_ERROR)
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
