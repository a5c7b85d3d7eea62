#!/usr/bin/env bash
# A device that fails and works again is resynced, not rebuilt (docs/redundancy.md, "A failed
# member that works again"): a 2-way mirror of two nbdkit devices (file plugin behind its
# error filter, exposed as files by nbdfuse, as in mirror-postgres.sh) holds a 400 MiB file;
# once that is committed, member 1 starts failing every I/O while 16 MiB and 2,000 random
# 8 KiB blocks are rewritten (with fsync); it goes FAULTED. It then works again and
# `pool online --wait` must resync only what it missed (the daemon's log: "being resynced",
# far fewer bytes copied than the pool holds), a scrub must find nothing to repair, and the
# resynced device alone (the pool exported, imported from it only) must hold the file as
# written.
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME="fault-resync"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-fault-resync"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/bin/nbdkit /usr/bin/nbdfuse -- nbdkit libnbd-bin

DEV="$STRATA_E2E_DIR/devices"
MNT="$STRATA_E2E_DIR/mnt"
# shellcheck source=scripts/e2e/devset-common.sh
. scripts/e2e/devset-common.sh
SPARE=2 # the devices stop_devices stops: 1 and 2
cleanup() {
  local rc=$?
  set +e
  trap - ERR
  strata_stop
  stop_devices
  if [ "$rc" -ne 0 ]; then
    echo "---- daemon log (tail)"; tail -40 "$STRATA_E2E_DIR/daemon.log" 2>/dev/null
  fi
  exit "$rc"
}
strata_fresh
trap cleanup EXIT
mkdir -p "$DEV" "$MNT"
start_device 1
start_device 2

strata_start
"$STRATA_BIN" pool create m --layout mirror --device "$DEV/fuse1/dev" --device "$DEV/fuse2/dev"
"$STRATA_BIN" volume create m/v
"$STRATA_BIN" mount m/v "$MNT"
head -c 400M /dev/urandom >"$MNT/big"
sync -f "$MNT/big"
# Committed (the daemon's 5 s txg interval), so that what member 1 misses is only what follows.
sleep 12

touch "$DEV/m2.fail"
log "member 1 now fails every I/O with EIO; rewriting 16 MiB and 2000 random 8 KiB blocks"
python3 - "$MNT/big" <<'EOF'
import os, random, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
os.pwrite(fd, os.urandom(16 << 20), 100 << 20)
random.seed(3)
for _ in range(2000):
    os.pwrite(fd, os.urandom(8192), random.randrange(0, 400 << 20) // 8192 * 8192)
os.fsync(fd)
EOF
want="$(sha256sum <"$MNT/big")"
sleep 6
status="$("$STRATA_BIN" pool status m)"
grep -E 'fuse2/dev.* FAULTED' <<<"$status" >/dev/null || die "member 1 should be FAULTED: $status"
grep -q 'online resyncs what it missed' <<<"$status" || die "the status should say online resyncs: $status"

rm "$DEV/m2.fail"
log "member 1 works again: pool online --wait"
"$STRATA_BIN" pool online m 1 --wait
grep -q 'being resynced' "$STRATA_E2E_DIR/daemon.log" || die "member 1 was rebuilt whole, not resynced"
copied="$(grep -oE 'rebuild complete .*copied=[0-9]+' "$STRATA_E2E_DIR/daemon.log" | tail -1 | grep -oE '[0-9]+$')"
log "the resync copied $copied bytes (the pool holds over 400 MiB)"
[ "$copied" -gt 0 ] && [ "$copied" -lt $((200 << 20)) ] || die "the resync copied $copied bytes"
out="$("$STRATA_BIN" pool scrub m)"
echo "$out"
grep -q ' 0 damaged copies found' <<<"$out" || die "a scrub found damage after the resync: $out"

log "the resynced device alone: export, import from it only"
"$STRATA_BIN" unmount "$MNT"
"$STRATA_BIN" pool export m
"$STRATA_BIN" pool import m --dir "$DEV/fuse2"
status="$("$STRATA_BIN" pool status m)"
grep -q '^state *DEGRADED' <<<"$status" || die "imported from one device the pool should be DEGRADED: $status"
"$STRATA_BIN" mount m/v "$MNT"
[ "$(sha256sum <"$MNT/big")" = "$want" ] || die "the resynced device alone does not hold the file as written"
"$STRATA_BIN" unmount "$MNT"
"$STRATA_BIN" check m
log "passed"
