#!/usr/bin/env bash
# PostgreSQL 15 on a Strata volume: pgbench, kill -9 of the database and of the Strata
# daemon mid-run, restart, crash recovery, every acknowledged commit present, pg_amcheck.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-pg"
strata_fresh
trap 'strata_stop || true' EXIT
strata_start
mnt="$STRATA_E2E_DIR/pg"
strata_mount pg "$mnt" --size 6G
DB_DIR="$mnt" CRASH_CMD="$PWD/scripts/e2e/strata-env.sh crash" bash scripts/e2e/postgres-crash.sh
"$STRATA_BIN" check default
strata_log_clean
