"""Daemon restart (kill -9 and start, as a crash): file handles stay valid, the write
verifier changes, and a client that resends its uncommitted writes loses nothing."""

import os
import subprocess

import rpc3
from rpc3 import OK
from conftest import HOST, PORT


def restart_daemon():
    subprocess.run(["bash", "-c", os.environ["STRATA_CRASH_CMD"]], check=True, timeout=120)


def test_restart_keeps_handles_and_changes_verifier(rpc, root, workdir):
    d, dname = workdir
    st, f = rpc.create(d, "durable")
    fh = f["fh"]
    st, w = rpc.write(fh, 0, b"committed", rpc3.FILE_SYNC)
    assert st == OK
    old_verf = w["verf"]
    # An UNSTABLE write the client keeps until COMMIT confirms it.
    pending = (9, b"-and-then-some")
    st, w = rpc.write(fh, *pending, rpc3.UNSTABLE)
    assert st == OK and w["verf"] == old_verf
    rpc.close()

    restart_daemon()

    c = rpc3.Client(HOST, PORT)
    st, a = c.getattr(fh)
    assert st == OK, "a handle from before the restart is still valid"
    assert c.getattr(root)[0] == OK and c.lookup(root, dname)[1]["fh"] == d
    st, cm = c.commit(fh)
    assert st == OK and cm["verf"] != old_verf, "the verifier changed: the client must resend"
    # What a client does then: resend the uncommitted write and commit again.
    st, w = c.write(fh, *pending, rpc3.UNSTABLE)
    assert st == OK
    st, cm2 = c.commit(fh)
    assert st == OK and cm2["verf"] == cm["verf"] == w["verf"]
    st, r = c.read(fh, 0, 100)
    assert st == OK and r["data"] == b"committed-and-then-some"
    c.close()
