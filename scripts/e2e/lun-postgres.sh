#!/usr/bin/env bash
# Block LUNs end to end, the TR-4722 way: PostgreSQL 15 on ext4 on a Strata LUN served over
# NBD — `strata volume create --lun`, `strata export nbd`, then nbdfuse (this kernel has no
# NBD client) → a loop device → mkfs.ext4 (its discards are NBD TRIMs) → mount.
#   1. The crash test of scripts/e2e/postgres-crash.sh on it: pgbench, a power failure while
#      it commits (daemon frozen and kill -9'd, PostgreSQL kill -9'd), the daemon restarted
#      (its intent-log replay required, from its log), the LUN attached again (ext4 replays
#      its journal), PostgreSQL's crash recovery; every acknowledged commit present,
#      pg_amcheck clean.
#   2. Under pgbench: a snapshot of the LUN, a clone of it exported as a second NBD export,
#      attached and mounted, a second PostgreSQL started on it (crash recovery from the
#      snapshot's image), pg_amcheck clean; the snapshot itself exported read-only (nbdinfo
#      says so, and its size); the LUN grown under the database (nbdinfo sees the new size).
#   3. Restore of the LUN to the snapshot (export deleted first, as the daemon requires),
#      exported again: the database holds the snapshot's history rows, pg_amcheck clean.
# `strata check` and no ERROR in the daemon log at the end.
#   SCALE (default 5), CLIENTS (4), DURATION (20, of the crashed run), LUN_SIZE (4G),
#   NBD_PORT (10819), PG_PORT (55451)
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=lun-postgres
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
source scripts/e2e/strata-env.sh
# (reattach runs in a child of the crash test, which has the suffixed directory already)
[ "${1:-}" = reattach ] || export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-lun"
export NBD_PORT="${NBD_PORT:-10819}"
PG_BIN=/usr/lib/postgresql/15/bin
export PG_PORT="${PG_PORT:-55451}"

export LUN_WORK="$STRATA_E2E_DIR/attach"
# shellcheck source=scripts/e2e/lun-common.sh
. scripts/e2e/lun-common.sh

# The crash test's RESTART_CMD: detach the dead LUN, restart the daemon (requiring its
# intent-log replay), attach the LUN again.
if [ "${1:-}" = reattach ]; then
  lun_detach 1 "$STRATA_E2E_DIR/db"
  strata_recover
  lun_attach default/pglun 1 "$STRATA_E2E_DIR/db"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/bin/nbdfuse /usr/bin/nbdinfo /sbin/mkfs.ext4 "$PG_BIN/postgres" "$PG_BIN/pgbench" "$PG_BIN/pg_amcheck" \
  /usr/share/postgresql/15/extension/amcheck.control -- libnbd-bin e2fsprogs postgresql-15 postgresql-contrib

cleanup() {
  local rc=$?
  set +e
  trap - ERR
  [ -n "${BENCH_PID:-}" ] && kill "$BENCH_PID" 2>/dev/null
  for d in "$STRATA_E2E_DIR/db/pgdata" "$STRATA_E2E_DIR/clone/pgdata"; do
    [ -f "$d/postmaster.pid" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$d" -m immediate -w -t 30 >/dev/null 2>&1
  done
  lun_detach 2 "$STRATA_E2E_DIR/clone"
  lun_detach 1 "$STRATA_E2E_DIR/db"
  strata_stop
  if [ "$rc" -ne 0 ]; then
    echo "---- daemon log (tail)"; tail -40 "$STRATA_E2E_DIR/daemon.log" 2>/dev/null
  fi
  exit "$rc"
}
strata_fresh
trap cleanup EXIT
mkdir -p "$LUN_WORK"
strata_crash_test_settings
export STRATA_SERVE_ARGS="$STRATA_SERVE_ARGS --nbd-port $NBD_PORT"
strata_start

"$STRATA_BIN" volume create default/pglun --lun "${LUN_SIZE:-4G}" --block-size 8K
"$STRATA_BIN" export nbd default/pglun
nbdinfo "nbd://127.0.0.1:$NBD_PORT/default/pglun" | grep -E 'export-size|is_read_only|can_trim|can_flush|can_fua|can_multi_conn|block_size' || true
lun_attach default/pglun 1 "$STRATA_E2E_DIR/db" ext4
log "ext4 on the LUN: $(df -h "$STRATA_E2E_DIR/db" | tail -1)"

# 1. The crash test.
env="$PWD/scripts/e2e/strata-env.sh"
# PRE_CRASH_CMD: the file system on the LUN writes back what the harness wrote without fsync
# (its additions to the database's configuration) 30 s later, as on any disk: sync it first,
# then commit the pool, so the crash tests the database's own fsyncs through the intent log.
DB_DIR="$STRATA_E2E_DIR/db" STORAGE_PID_FILE="$STRATA_E2E_DIR/daemon.pid" CRASH_CMD="$env kill" \
  RESTART_CMD="$PWD/scripts/e2e/lun-postgres.sh reattach" PRE_CRASH_CMD="sync -f $STRATA_E2E_DIR/db && $env commit" \
  SCALE="${SCALE:-5}" CLIENTS="${CLIENTS:-4}" DURATION="${DURATION:-20}" \
  bash scripts/e2e/postgres-crash.sh

# 2. Snapshot and clone under load (the crash test's database is e2e).
PGDATA="$STRATA_E2E_DIR/db/pgdata"
SOCK="$STRATA_E2E_DIR/sock"
mkdir -p "$SOCK" && chown postgres: "$SOCK"
touch "$STRATA_E2E_DIR/postgres.log" "$STRATA_E2E_DIR/postgres-clone.log"
chown postgres: "$STRATA_E2E_DIR/postgres.log" "$STRATA_E2E_DIR/postgres-clone.log"
pg_start() { # DATA PORT LOG
  runuser -u postgres -- "$PG_BIN/pg_ctl" start -D "$1" -w -t 180 -l "$3" \
    -o "-k $SOCK -p $2 -c listen_addresses='' -c fsync=on -c synchronous_commit=on" >/dev/null
}
pg() { local port="$1"; shift; "$PG_BIN/$1" -h "$SOCK" -p "$port" -U postgres "${@:2}"; }
pg_start "$PGDATA" "$PG_PORT" "$STRATA_E2E_DIR/postgres.log"
pg "$PG_PORT" pgbench -c 4 -j 2 -T 30 e2e >"$STRATA_E2E_DIR/pgbench-snap.out" 2>&1 &
BENCH_PID=$!
sleep 8
"$STRATA_BIN" snapshot create default/pglun@s1
log "snapshot of the LUN taken under pgbench"
"$STRATA_BIN" clone create default/pglun@s1 default/pgclone
"$STRATA_BIN" export nbd default/pgclone
lun_attach default/pgclone 2 "$STRATA_E2E_DIR/clone"
CLONE="$STRATA_E2E_DIR/clone/pgdata"
rm -f "$CLONE/postmaster.pid" # the live instance's, copied by the snapshot
pg_start "$CLONE" $((PG_PORT + 1)) "$STRATA_E2E_DIR/postgres-clone.log"
clone_history="$(pg $((PG_PORT + 1)) psql -At -c 'select count(*) from pgbench_history' e2e)"
pg $((PG_PORT + 1)) pg_amcheck -d e2e --heapallindexed >"$STRATA_E2E_DIR/amcheck-clone.out" 2>&1 ||
  die "pg_amcheck on the clone failed: $(cat "$STRATA_E2E_DIR/amcheck-clone.out")"
[ ! -s "$STRATA_E2E_DIR/amcheck-clone.out" ] || die "pg_amcheck on the clone: $(cat "$STRATA_E2E_DIR/amcheck-clone.out")"
log "clone of the LUN mounted and recovered by a second PostgreSQL: $clone_history history rows, amcheck clean"
runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$CLONE" -m fast -w -t 60 >/dev/null

# The snapshot itself, read-only; the live LUN grown under the database.
"$STRATA_BIN" export nbd default/pglun@s1
snapinfo="$(nbdinfo --json "nbd://127.0.0.1:$NBD_PORT/default/pglun@s1")"
python3 - "$snapinfo" "${LUN_SIZE:-4G}" <<'PY' || die "the snapshot's export: $snapinfo"
import json, sys
d = json.loads(sys.argv[1])
e = d["exports"][0]
size = {"G": 1 << 30, "M": 1 << 20}[sys.argv[2][-1]] * int(sys.argv[2][:-1])
assert e["is_read_only"], "the snapshot's export must be read-only"
assert e["export-size"] == size, (e["export-size"], size)
PY
"$STRATA_BIN" volume set default/pglun --lun-size 5G
grown="$(nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/default/pglun")"
[ "$grown" -eq $((5 << 30)) ] || die "after the grow a new connection sees $grown bytes"
wait "$BENCH_PID" || die "pgbench during the snapshot failed: $(tail -5 "$STRATA_E2E_DIR/pgbench-snap.out")"
BENCH_PID=""
grep -q 'number of failed transactions: 0' "$STRATA_E2E_DIR/pgbench-snap.out" || die "pgbench saw failed transactions"
grep -E '^tps' "$STRATA_E2E_DIR/pgbench-snap.out"

# 3. Restore the LUN to the snapshot.
runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$PGDATA" -m fast -w -t 60 >/dev/null
lun_detach 1 "$STRATA_E2E_DIR/db"
ids="$("$STRATA_BIN" export list --json | python3 -c 'import json,sys; print(" ".join(str(e["id"]) for e in json.load(sys.stdin) if e["volume"]=="default/pglun"))')"
for id in $ids; do "$STRATA_BIN" export delete "$id"; done
"$STRATA_BIN" restore default/pglun@s1
"$STRATA_BIN" export nbd default/pglun
lun_attach default/pglun 1 "$STRATA_E2E_DIR/db"
rm -f "$PGDATA/postmaster.pid"
pg_start "$PGDATA" "$PG_PORT" "$STRATA_E2E_DIR/postgres.log"
restored_history="$(pg "$PG_PORT" psql -At -c 'select count(*) from pgbench_history' e2e)"
[ "$restored_history" = "$clone_history" ] ||
  die "after the restore the LUN holds $restored_history history rows, the snapshot's clone $clone_history"
pg "$PG_PORT" pg_amcheck -d e2e --heapallindexed >"$STRATA_E2E_DIR/amcheck-restored.out" 2>&1 ||
  die "pg_amcheck after the restore failed: $(cat "$STRATA_E2E_DIR/amcheck-restored.out")"
runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$PGDATA" -m fast -w -t 60 >/dev/null
lun_detach 2 "$STRATA_E2E_DIR/clone"
lun_detach 1 "$STRATA_E2E_DIR/db"
"$STRATA_BIN" check default
strata_log_clean
log "PASS: PostgreSQL on ext4 on an NBD LUN survived a daemon crash with every acknowledged commit; snapshot, clone, grow and restore under a running database"
