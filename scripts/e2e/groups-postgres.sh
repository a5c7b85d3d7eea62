#!/usr/bin/env bash
# Device groups end to end: PostgreSQL 15 (pgbench, every acknowledged commit recorded) on a
# 2-way mirror pool of image files that grows by a second mirror while pgbench commits
# (`strata pool add`, PRE_CRASH_CMD), followed by a `pool set` commit; then, still under
# load, the power failure of postgres-crash.sh: the daemon frozen and kill -9'd, PostgreSQL
# kill -9'd. The daemon restarts, assembles both groups from the state file and must replay
# its intent log (the commits acknowledged after the addition are in the log only, their
# large writes placed by reference — now also on the new group); crash recovery, every
# acknowledged commit present, pg_amcheck. Then: the new group's images hold database
# blocks, the pool is ONLINE with four devices, `strata check` and a scrub are clean, the
# daemon's log has no ERROR line.
#   DURATION (default 40), CRASH_AFTER (default 25), PRE_CRASH_LEAD (default 8: the group is
#   added 8 s before the crash), SCALE, CLIENTS as in postgres-crash.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-groups"
strata_fresh
trap 'strata_stop || true' EXIT
strata_crash_test_settings
strata_start
img="$STRATA_E2E_DIR/img"
mkdir -p "$img"
"$STRATA_BIN" pool create g --layout mirror --device "$img/a0" --device "$img/a1" --size 6G
"$STRATA_BIN" volume create g/pg
mnt="$STRATA_E2E_DIR/pg"
mkdir -p "$mnt"
"$STRATA_BIN" mount g/pg "$mnt"
env="$PWD/scripts/e2e/strata-env.sh"
add="$STRATA_BIN pool add g --device $img/b0 --device $img/b1 --size 6G && $env commit g"
DB_DIR="$mnt" STORAGE_PID_FILE="$STRATA_E2E_DIR/daemon.pid" CRASH_CMD="$env kill" RESTART_CMD="$env recover g" \
  PRE_CRASH_CMD="$add" PRE_CRASH_LEAD="${PRE_CRASH_LEAD:-8}" DURATION="${DURATION:-40}" CRASH_AFTER="${CRASH_AFTER:-25}" \
  bash scripts/e2e/postgres-crash.sh
status="$("$STRATA_BIN" pool status g --json)"
grep -q '"state": *"ONLINE"' <<<"$status" || { echo "FAIL: pool g is not ONLINE: $status"; exit 1; }
[ "$(grep -o '"group": *1' <<<"$status" | wc -l)" -eq 2 ] || { echo "FAIL: pool g does not show two members of group 1: $status"; exit 1; }
# The new group holds blocks: its images grew (sparse files; the member labels and the
# group's space map region are a few MiB).
used=$(($(stat -c %b "$img/b0") * 512))
[ "$used" -gt $((32 << 20)) ] || { echo "FAIL: the added group holds only $used bytes"; exit 1; }
echo "added group holds $((used >> 20)) MiB of pool g's blocks"
"$STRATA_BIN" check g
scrub="$("$STRATA_BIN" pool scrub g --json)"
/usr/bin/python3 -c 'import json, sys
s = json.loads(sys.argv[1])
assert s["check"]["clean"] is True and s["checksum_errors"] == 0, s
print("scrub of g: %d blocks verified, clean" % s["blocks_verified"])' "$scrub" ||
  { echo "FAIL: scrub of g: $scrub"; exit 1; }
strata_log_clean
echo "PASS: pool g grew by a mirror under pgbench, survived a power failure after it (intent log replayed), amcheck and scrub clean"
