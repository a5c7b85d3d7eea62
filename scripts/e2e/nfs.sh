#!/usr/bin/env bash
# The NFS end-to-end suite (tests/nfs): a daemon serving NFSv3 on a free port, exports made
# through the CLI, and real clients — libnfs (C library through its Python binding, and the
# libnfs-utils tools) plus a plain RPC client for what libnfs hides — covering every
# procedure, the error codes, client-network refusal and a kill -9 restart.
#
# Needs (Debian): libnfs-utils libnfs-dev python3-venv python3-dev build-essential; the
# Python binding (PyPI `libnfs`) and pytest are installed into a venv under the work dir.
set -euo pipefail
cd "$(dirname "$0")/../.."
export STRATA_E2E_DIR="${STRATA_E2E_DIR:-/var/tmp/strata-e2e-nfs}"
source scripts/e2e/strata-env.sh

venv="${STRATA_NFS_VENV:-/var/tmp/strata-nfs-venv}"
if ! "$venv/bin/python" -c 'import libnfs, pytest' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet pytest libnfs
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
STRATA_NFS_PORT="$(free_port)"
export STRATA_NFS_PORT
export STRATA_SERVE_ARGS="--nfs-port $STRATA_NFS_PORT --nfs-bind 127.0.0.1"
export STRATA_DAEMON_LOG="$STRATA_E2E_DIR/daemon.log"
export STRATA_CRASH_CMD="$PWD/scripts/e2e/strata-env.sh crash"

strata_fresh
trap 'strata_stop || true' EXIT
STRATA_POOL_SIZE=4G strata_start
# A small second pool, to run out of space on (NOSPC).
"$STRATA_BIN" pool create small --device "$STRATA_E2E_DIR/small.img" --size 96M >/dev/null

PYTHONPATH=tests/nfs "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/nfs "$@"
strata_stop
trap - EXIT
strata_start
"$STRATA_BIN" check default
"$STRATA_BIN" check small
strata_stop
strata_log_clean
