#!/usr/bin/env bash
# PostgreSQL 15 on a Strata volume: pgbench, then a power failure while it commits — the
# Strata daemon frozen (SIGSTOP) and kill -9'd, PostgreSQL kill -9'd — restart of the daemon,
# which must replay its intent log (the pool commits 3 s before the crash and not again,
# strata_crash_test_settings: the commits acknowledged since are in the log only), crash
# recovery, every acknowledged commit present, pg_amcheck.
#   CRASH_CMD=... (default: scripts/e2e/strata-env.sh kill) for the negative check that a
#   crash command which crashes nothing fails the run; STRATA_SERVE_ARGS adds daemon options.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-pg"
strata_fresh
trap 'strata_stop || true' EXIT
strata_crash_test_settings
strata_start
mnt="$STRATA_E2E_DIR/pg"
strata_mount pg "$mnt" --size 6G
env="$PWD/scripts/e2e/strata-env.sh"
DB_DIR="$mnt" STORAGE_PID_FILE="$STRATA_E2E_DIR/daemon.pid" CRASH_CMD="${CRASH_CMD:-$env kill}" \
  RESTART_CMD="$env recover" PRE_CRASH_CMD="$env commit" bash scripts/e2e/postgres-crash.sh
"$STRATA_BIN" check default
strata_log_clean
