#!/usr/bin/env bash
# MariaDB on xfs on a Strata LUN served over NBD, the TR-4722 way (sysbench oltp_read_write,
# 2 tables x 10,000 rows): `strata volume create --lun` (16K blocks, InnoDB's page), `strata
# export nbd`, nbdfuse → loop → mkfs.xfs → mount (scripts/e2e/lun-common.sh), then the crash
# test of scripts/e2e/mariadb-crash.sh: a power failure while it commits (daemon frozen and
# kill -9'd, mariadbd kill -9'd), the daemon restarted (its intent-log replay required), the
# LUN attached again (xfs replays its log), InnoDB recovery; every acknowledged commit
# present, CHECK TABLE clean. `strata check` and no ERROR in the daemon log at the end.
#   LUN_SIZE (default 4G), NBD_PORT (10829)
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=lun-mariadb
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
source scripts/e2e/strata-env.sh
# (reattach runs in a child of the crash test, which has the suffixed directory already)
[ "${1:-}" = reattach ] || export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-lunmy"
export NBD_PORT="${NBD_PORT:-10829}"
export LUN_WORK="$STRATA_E2E_DIR/attach"
# shellcheck source=scripts/e2e/lun-common.sh
. scripts/e2e/lun-common.sh

# The crash test's RESTART_CMD: detach the dead LUN, restart the daemon (requiring its
# intent-log replay), attach the LUN again.
if [ "${1:-}" = reattach ]; then
  lun_detach 1 "$STRATA_E2E_DIR/db"
  strata_recover
  lun_attach default/mylun 1 "$STRATA_E2E_DIR/db"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/bin/nbdfuse /sbin/mkfs.xfs -- libnbd-bin xfsprogs
cleanup() {
  local rc=$?
  set +e
  trap - ERR
  lun_detach 1 "$STRATA_E2E_DIR/db"
  strata_stop
  exit "$rc"
}
strata_fresh
trap cleanup EXIT
mkdir -p "$LUN_WORK"
strata_crash_test_settings
export STRATA_SERVE_ARGS="$STRATA_SERVE_ARGS --nbd-port $NBD_PORT"
strata_start
"$STRATA_BIN" volume create default/mylun --lun "${LUN_SIZE:-4G}" --block-size 16K
"$STRATA_BIN" export nbd default/mylun
lun_attach default/mylun 1 "$STRATA_E2E_DIR/db" xfs
log "xfs on the LUN: $(df -h "$STRATA_E2E_DIR/db" | tail -1)"
env="$PWD/scripts/e2e/strata-env.sh"
# PRE_CRASH_CMD: the file system on the LUN writes back what the harness wrote without fsync
# (its additions to the database's configuration) 30 s later, as on any disk: sync it first,
# then commit the pool, so the crash tests the database's own fsyncs through the intent log.
DB_DIR="$STRATA_E2E_DIR/db" STORAGE_PID_FILE="$STRATA_E2E_DIR/daemon.pid" CRASH_CMD="$env kill" \
  RESTART_CMD="$PWD/scripts/e2e/lun-mariadb.sh reattach" PRE_CRASH_CMD="sync -f $STRATA_E2E_DIR/db && $env commit" \
  bash scripts/e2e/mariadb-crash.sh
lun_detach 1 "$STRATA_E2E_DIR/db"
"$STRATA_BIN" check default
strata_log_clean
log "PASS: MariaDB on xfs on an NBD LUN survived a daemon crash with every acknowledged commit"
