#!/usr/bin/env bash
# MariaDB on a Strata volume: sysbench oltp_read_write (TR-4722: 2 tables x 10,000 rows),
# kill -9 of mariadbd and of the Strata daemon mid-run, restart, recovery, CHECK TABLE.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-my"
strata_fresh
trap 'strata_stop || true' EXIT
strata_start
mnt="$STRATA_E2E_DIR/mysql"
strata_mount mysql "$mnt" --size 6G
DB_DIR="$mnt" CRASH_CMD="$PWD/scripts/e2e/strata-env.sh crash" bash scripts/e2e/mariadb-crash.sh
"$STRATA_BIN" check default
strata_log_clean
