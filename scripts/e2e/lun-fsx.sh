#!/usr/bin/env bash
# fsx-style random I/O on Strata LUNs (tests/lun/blockfsx.py; Debian ships no fsx): reads,
# writes, TRIMs, WRITE_ZEROES and flushes at random unaligned offsets and lengths, every
# read checked against an in-memory model —
#   1. over NBD with libnbd directly (every operation reaches the server as its command),
#      on a LUN of 16K records (most writes are sub-record: read-modify-write in memory);
#   2. through nbdfuse (the kernel's page cache and FUSE in the path) on a second LUN;
# then the daemon is restarted and both LUNs must equal their models byte for byte (what
# was flushed survived a clean restart), `strata check` clean, no ERROR in the log.
#   OPS (default 20000 per run), SEED (default the time; printed)
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=lun-fsx
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-lunfsx"
export NBD_PORT="${NBD_PORT:-10839}"
export LUN_WORK="$STRATA_E2E_DIR/attach"
# shellcheck source=scripts/e2e/lun-common.sh
. scripts/e2e/lun-common.sh
OPS="${OPS:-20000}"
SEED="${SEED:-$(date +%s)}"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/bin/nbdfuse /usr/lib/python3/dist-packages/nbd.py -- libnbd-bin python3-libnbd
cleanup() {
  local rc=$?
  set +e
  trap - ERR
  fusermount3 -u -z "$LUN_WORK/fuse1" 2>/dev/null
  [ -f "$LUN_WORK/nbdfuse1.pid" ] && kill "$(cat "$LUN_WORK/nbdfuse1.pid")" 2>/dev/null
  strata_stop
  [ "$rc" -ne 0 ] && { echo "---- daemon log (tail)"; tail -30 "$STRATA_E2E_DIR/daemon.log"; }
  exit "$rc"
}
strata_fresh
trap cleanup EXIT
mkdir -p "$LUN_WORK"
export STRATA_SERVE_ARGS="${STRATA_SERVE_ARGS:-} --nbd-port $NBD_PORT"
strata_start
"$STRATA_BIN" volume create default/fsx1 --lun 64M --block-size 16K --compression lz4 >/dev/null
"$STRATA_BIN" volume create default/fsx2 --lun 64M --block-size 4K --sector 4096 >/dev/null
"$STRATA_BIN" export nbd default/fsx1 >/dev/null
"$STRATA_BIN" export nbd default/fsx2 >/dev/null
log "seed $SEED, $OPS operations per run"
/usr/bin/python3 tests/lun/blockfsx.py "nbd://127.0.0.1:$NBD_PORT/default/fsx1" "$OPS" "$SEED" \
  --save "$STRATA_E2E_DIR/fsx1.model"
# Through nbdfuse: a file of the LUN's size.
mkdir -p "$LUN_WORK/fuse1"
nbdfuse "$LUN_WORK/fuse1/lun" "nbd://127.0.0.1:$NBD_PORT/default/fsx2" >>"$LUN_WORK/nbdfuse1.log" 2>&1 &
echo $! >"$LUN_WORK/nbdfuse1.pid"
wait_for "nbdfuse" 20 test -e "$LUN_WORK/fuse1/lun"
/usr/bin/python3 tests/lun/blockfsx.py "$LUN_WORK/fuse1/lun" "$((OPS / 2))" "$((SEED + 1))" \
  --save "$STRATA_E2E_DIR/fsx2.model"
fusermount3 -u "$LUN_WORK/fuse1"
kill "$(cat "$LUN_WORK/nbdfuse1.pid")" 2>/dev/null || true
rm -f "$LUN_WORK/nbdfuse1.pid"
strata_stop
strata_start
/usr/bin/python3 tests/lun/blockfsx.py "nbd://127.0.0.1:$NBD_PORT/default/fsx1" 0 0 --verify-only "$STRATA_E2E_DIR/fsx1.model"
/usr/bin/python3 tests/lun/blockfsx.py "nbd://127.0.0.1:$NBD_PORT/default/fsx2" 0 0 --verify-only "$STRATA_E2E_DIR/fsx2.model"
"$STRATA_BIN" check default
strata_log_clean
log "PASS: fsx-style runs over NBD and through nbdfuse matched their models, also after a restart"
