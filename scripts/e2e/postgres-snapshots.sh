#!/usr/bin/env bash
# PostgreSQL 15 with its data and its WAL on two Strata volumes: a group snapshot of both
# taken under pgbench load, writing goes on, then
#   - a clone of the group comes up as an independent database while the source keeps
#     running (timed: clone create -> accepting queries),
#   - the source is stopped and both volumes are restored to the snapshot: it comes up
#     consistent, with exactly the snapshot's committed data (same content as the clone,
#     the row committed just before the snapshot present, the one just after absent),
#   - pg_amcheck and the TPC-B invariants hold on both; the checker finds the pool clean.
#
#   bash scripts/e2e/postgres-snapshots.sh      (root; installs postgresql-15 if missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=postgres-snapshots
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
# shellcheck source=scripts/e2e/strata-env.sh
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-pgsnap"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PORT="${PG_PORT:-55442}"
CPORT=$((PORT + 1))
SCALE="${SCALE:-5}"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/pgbench" "$PG_BIN/pg_amcheck" \
  /usr/share/postgresql/15/extension/amcheck.control -- postgresql-15 postgresql-contrib

strata_fresh
M="$STRATA_E2E_DIR/mnt"
WORK="$STRATA_E2E_DIR/work"
mkdir -p "$WORK/sock" && chown -R postgres: "$WORK" && chmod 755 "$STRATA_E2E_DIR"
add_failure_log "$WORK/source.log"
add_failure_log "$WORK/clone.log"
add_failure_log "$STRATA_E2E_DIR/daemon.log"
BENCH_PID=""
cleanup() {
  local rc=$?
  trap - EXIT
  set +e
  [ -z "$BENCH_PID" ] || kill "$BENCH_PID" 2>/dev/null
  for d in "$M/data/pgdata" "$M/cdata/pgdata"; do
    [ -f "$d/postmaster.pid" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$d" -m immediate -w -t 30 >/dev/null 2>&1
  done
  [ "$rc" -eq 0 ] || print_failure_logs
  strata_stop
  exit "$rc"
}
trap cleanup EXIT

# shellcheck source=scripts/e2e/pg-common.sh
. scripts/e2e/pg-common.sh

strata_start
source_db

log "pgbench load (4 clients) while the group snapshot is taken"
"$PG_BIN/pgbench" -h "$WORK/sock" -p "$PORT" -U postgres -c 4 -j 2 -T 25 -n bench >"$WORK/bench.log" 2>&1 &
BENCH_PID=$!
sleep 5
q "$PORT" -c "insert into marks values (1, 'before the snapshot')"
t0="$(now_s)"
"$STRATA_BIN" snapshot create default/pgdata@s1 --group pgwal
log "group snapshot under load: $(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.0f", (b - a) * 1000 }') ms (CLI round trip)"
q "$PORT" -c "insert into marks values (2, 'after the snapshot')"
log "an application-consistent snapshot: CHECKPOINT + pg_backup_start/stop around it"
"$STRATA_BIN" snapshot create default/pgdata@q1 --group pgwal \
  --quiesce "postgresql://postgres@/bench?host=$WORK/sock&port=$PORT"
grep -q "checkpoint complete" "$WORK/source.log" || die "no checkpoint in the server log after --quiesce"
[ "$(q "$PORT" -c "select count(*) from pg_stat_activity where pid <> pg_backend_pid() and query like '%pg_backup%'")" = 0 ] ||
  die "the backup session was left behind"
sleep 3

log "clone the group and start a second PostgreSQL on it while the source runs"
t0="$(now_s)"
"$STRATA_BIN" clone create default/pgdata@s1 default/cdata --group pgwal:cwal # one txg
"$STRATA_BIN" mount default/cdata "$M/cdata"
"$STRATA_BIN" mount default/cwal "$M/cwal"
# The clone's pg_wal link still names the source's WAL volume; point it at the clone's.
ln -sfn "$M/cwal/pg_wal" "$M/cdata/pgdata/pg_wal"
rm -f "$M/cdata/pgdata/postmaster.pid" # the source's, copied by the snapshot
start "$M/cdata/pgdata" "$CPORT" "$WORK/clone.log"
CLONE_SECS="$(elapsed_since "$t0")"
log "clone create -> PostgreSQL accepting queries: $CLONE_SECS s"
[ "$(q "$CPORT" -c "select count(*) from marks where id = 1")" = 1 ] || die "clone lacks the row committed before the snapshot"
[ "$(q "$CPORT" -c "select count(*) from marks where id = 2")" = 0 ] || die "clone has a row committed after the snapshot"
invariants "$CPORT"
amcheck "$CPORT"
CLONE_DIGEST="$(content "$CPORT")"

wait "$BENCH_PID" || die "pgbench on the source failed while the snapshot and clone were made: $(tail -5 "$WORK/bench.log")"
BENCH_PID=""
log "source pgbench: $(grep -E '^tps' "$WORK/bench.log" | head -1)"
q "$CPORT" -c "insert into marks values (3, 'only in the clone')"
[ "$(q "$PORT" -c "select count(*) from marks where id = 3")" = 0 ] || die "a clone write reached the source"
[ "$(q "$PORT" -c "select count(*) from marks where id = 2")" = 1 ] || die "the source lost a row"
invariants "$PORT"

log "stop the source and restore both volumes to the snapshot"
pg pg_ctl stop -D "$M/data/pgdata" -m fast -w >/dev/null
"$STRATA_BIN" restore default/pgdata@s1 --group pgwal # both volumes in one txg
rm -f "$M/data/pgdata/postmaster.pid"
start "$M/data/pgdata" "$PORT" "$WORK/source.log"
[ "$(q "$PORT" -c "select count(*) from marks where id = 1")" = 1 ] || die "restored database lacks the row committed before the snapshot"
[ "$(q "$PORT" -c "select count(*) from marks where id = 2")" = 0 ] || die "restored database has a row committed after the snapshot"
invariants "$PORT"
amcheck "$PORT"
[ "$(content "$PORT")" = "$CLONE_DIGEST" ] || die "restored database differs from the clone of the same snapshot"
log "restored database = the snapshot's committed data (digest $CLONE_DIGEST)"
bounded "$PG_BIN/pgbench" -h "$WORK/sock" -p "$PORT" -U postgres -c 2 -T 3 -n bench >/dev/null 2>&1 ||
  die "pgbench fails on the restored database"

pg pg_ctl stop -D "$M/data/pgdata" -m fast -w >/dev/null
pg pg_ctl stop -D "$M/cdata/pgdata" -m fast -w >/dev/null
"$STRATA_BIN" snapshot list default
"$STRATA_BIN" check default
strata_log_clean
log "PASS (clone ready in $CLONE_SECS s)"
