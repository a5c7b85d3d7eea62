#!/usr/bin/env bash
# PostgreSQL 15 with its data and its WAL on two Strata volumes, mirrored as one group to a
# second pool — of the same daemon (REPL_TARGET=pool), or of a second daemon on this machine
# paired as a peer (REPL_TARGET=daemon, the default: mutual TLS over its replication port) —
# every few seconds while pgbench runs:
#   - transfers go on under load (incrementals: each carries what changed since the last);
#   - the mirror is paused and broken while the source still commits; PostgreSQL started on
#     the target recovers and holds exactly the transactions of the last transferred
#     snapshot: the same content as a clone of that snapshot on the source, the TPC-B
#     invariants, pg_amcheck clean;
#   - writes on the target, then a resync: the target's writes are kept as a snapshot, the
#     next update brings the source's newer transactions;
#   - both pools check clean; the daemon's log has no unexpected error.
#
#   bash scripts/e2e/replication-postgres.sh                      (root; installs postgresql-15 if missing)
#   REPL_TARGET=pool bash scripts/e2e/replication-postgres.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=replication-postgres
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
# shellcheck source=scripts/e2e/strata-env.sh
source scripts/e2e/strata-env.sh
REPL_TARGET="${REPL_TARGET:-daemon}"
case "$REPL_TARGET" in pool | daemon) ;; *) echo "REPL_TARGET is pool or daemon, not '$REPL_TARGET'" >&2; exit 2 ;; esac
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-repl-$REPL_TARGET"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PORT="${PG_PORT:-55452}"
TPORT=$((PORT + 1)) # PostgreSQL on the target
CPORT=$((PORT + 2)) # PostgreSQL on a clone of the same snapshot on the source
SCALE="${SCALE:-10}"
LOAD_SECONDS="${LOAD_SECONDS:-30}"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/pgbench" "$PG_BIN/pg_amcheck" \
  /usr/share/postgresql/15/extension/amcheck.control -- postgresql-15 postgresql-contrib

strata_fresh
M="$STRATA_E2E_DIR/mnt"
WORK="$STRATA_E2E_DIR/work"
mkdir -p "$WORK/sock" "$M"/{data,wal,tdata,twal,cdata,cwal} && chown -R postgres: "$WORK" && chmod 755 "$STRATA_E2E_DIR"
add_failure_log "$WORK/source.log"
add_failure_log "$WORK/target.log"
add_failure_log "$WORK/clone.log"
add_failure_log "$STRATA_E2E_DIR/daemon.log"
add_failure_log "$STRATA_E2E_DIR/b/daemon.log"
BENCH_PID=""
cleanup() {
  local rc=$?
  trap - EXIT
  set +e
  [ -z "$BENCH_PID" ] || kill "$BENCH_PID" 2>/dev/null
  for d in "$M/data/pgdata" "$M/tdata/pgdata" "$M/cdata/pgdata"; do
    [ -f "$d/postmaster.pid" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$d" -m immediate -w -t 30 >/dev/null 2>&1
  done
  [ "$rc" -eq 0 ] || print_failure_logs
  if [ "$REPL_TARGET" = daemon ]; then
    for m in "$M/tdata" "$M/twal"; do mountpoint -q "$m" && sb unmount "$m" >/dev/null 2>&1; done
    strata_peer_stop
  fi
  strata_stop
  exit "$rc"
}
trap cleanup EXIT

# shellcheck source=scripts/e2e/pg-common.sh
. scripts/e2e/pg-common.sh
# The target side: `sb` is the CLI of the daemon that holds the target pool (the same one
# for REPL_TARGET=pool); SRC_NAME / DST_NAME: the mirror's name on each side.
if [ "$REPL_TARGET" = daemon ]; then
  sb() { strata_peer "$@"; }
  TPOOL=default
  SRC_NAME=site-b:default/pgdata
else
  sb() { "$STRATA_BIN" "$@"; }
  TPOOL=default2
  SRC_NAME=default2/pgdata
fi
DST_NAME="$TPOOL/pgdata"
mj() { "$STRATA_BIN" --json mirror show "$SRC_NAME" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
# start_copy DATA_MNT WAL_MNT PORT LOG: PostgreSQL on a copy of the source's volumes.
start_copy() {
  ln -sfn "$2/pg_wal" "$1/pgdata/pg_wal" # the link named the source's WAL mount
  rm -f "$1/pgdata/postmaster.pid"       # the source's, copied with the data
  start "$1/pgdata" "$3" "$4"
}

strata_start
if [ "$REPL_TARGET" = daemon ]; then
  strata_peer_start
else
  "$STRATA_BIN" pool create default2 --device "$STRATA_E2E_DIR/data/default2.img" --size "${STRATA_POOL_SIZE:-8G}"
fi
source_db

log "mirror default/pgdata + pgwal to ${SRC_NAME%/*}, every 2 s (the first transfer is full)"
t0="$(now_s)"
"$STRATA_BIN" mirror create default/pgdata "${SRC_NAME%/*}" --group pgwal --every 2s --keep 3
log "initial transfer: $(elapsed_since "$t0") s, $(mj "['last_transfer']['done_bytes']") bytes"

log "pgbench for $LOAD_SECONDS s (4 clients) while the mirror transfers every 2 s"
"$PG_BIN/pgbench" -h "$WORK/sock" -p "$PORT" -U postgres -c 4 -j 2 -T "$LOAD_SECONDS" -n bench >"$WORK/bench.log" 2>&1 &
BENCH_PID=$!
first="$(mj "['common_snapshot']")"
sleep $((LOAD_SECONDS / 2))
q "$PORT" -c "insert into marks values (1, 'committed under load')"
sleep 5
[ "$(mj "['common_snapshot']")" != "$first" ] || die "no transfer under load in $((LOAD_SECONDS / 2 + 5)) s"
log "under load: common snapshot $(mj "['common_snapshot']"), lag $(mj "['lag_seconds']") s, last transfer $(mj "['last_transfer']['done_bytes']") bytes incremental from $(mj "['last_transfer']['base']")"

log "pause the mirror on the source and break it on the target while the source still commits"
"$STRATA_BIN" mirror pause "$SRC_NAME" >/dev/null
SNAP="$(mj "['common_snapshot']")"
sb mirror break "$DST_NAME" >/dev/null
[ "$(sb --json mirror show "$DST_NAME" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['state'])")" = broken ] ||
  die "mirror not broken on the target"
[ "$(sb --json mirror show "$DST_NAME" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['common_snapshot'])")" = "$SNAP" ] ||
  die "the target's last transferred snapshot is not the source's common one ($SNAP)"
log "broken at $SNAP"
sb mount "$DST_NAME" "$M/tdata"
sb mount "$TPOOL/pgwal" "$M/twal"
t0="$(now_s)"
start_copy "$M/tdata" "$M/twal" "$TPORT" "$WORK/target.log"
log "PostgreSQL on the target recovered in $(elapsed_since "$t0") s"
invariants "$TPORT"
amcheck "$TPORT"

log "the same snapshot cloned on the source: the target holds exactly its transactions"
"$STRATA_BIN" clone create "default/pgdata@$SNAP" default/cdata --group pgwal:cwal
"$STRATA_BIN" mount default/cdata "$M/cdata"
"$STRATA_BIN" mount default/cwal "$M/cwal"
start_copy "$M/cdata" "$M/cwal" "$CPORT" "$WORK/clone.log"
TD="$(content "$TPORT")"
CD="$(content "$CPORT")"
[ "$TD" = "$CD" ] || die "the target ($TD) differs from a clone of $SNAP on the source ($CD)"
log "target = source@$SNAP (digest $TD; $(q "$TPORT" -c "select count(*) from pgbench_history") history rows)"
pg pg_ctl stop -D "$M/cdata/pgdata" -m fast -w >/dev/null

wait "$BENCH_PID" || die "pgbench on the source failed: $(tail -5 "$WORK/bench.log")"
BENCH_PID=""
log "source pgbench: $(grep -E '^tps' "$WORK/bench.log" | head -1)"
invariants "$PORT"

log "write on the target, then resync: its writes are kept as a snapshot"
q "$TPORT" -c "insert into marks values (100, 'written on the target after the break')"
q "$TPORT" -c "checkpoint"
pg pg_ctl stop -D "$M/tdata/pgdata" -m fast -w >/dev/null
sb unmount "$M/tdata"
sb unmount "$M/twal"
q "$PORT" -c "insert into marks values (2, 'committed on the source after the break')"
sb mirror resync "$DST_NAME" >/dev/null
SAVED="$(sb --json snapshot list "$DST_NAME" | /usr/bin/python3 -c "import json,sys; print([s['name'] for s in json.load(sys.stdin) if s['name'].startswith('resync-')][0])")"
log "target writes kept as $DST_NAME@$SAVED"
# The source paused it; with two daemons the source's record stays paused until resumed
# (one daemon: the resync made the only record a mirror again).
[ "$REPL_TARGET" = pool ] || "$STRATA_BIN" mirror resume "$SRC_NAME" >/dev/null
"$STRATA_BIN" mirror update "$SRC_NAME" >/dev/null
SNAP2="$(mj "['common_snapshot']")"
"$STRATA_BIN" mirror pause "$SRC_NAME" >/dev/null
sb mirror break "$DST_NAME" >/dev/null
sb mount "$DST_NAME" "$M/tdata"
sb mount "$TPOOL/pgwal" "$M/twal"
start_copy "$M/tdata" "$M/twal" "$TPORT" "$WORK/target.log"
[ "$(q "$TPORT" -c "select count(*) from marks where id = 2")" = 1 ] || die "the update after the resync did not bring the source's row"
[ "$(q "$TPORT" -c "select count(*) from marks where id = 100")" = 0 ] || die "the target's own write survived the resync in the live volume"
invariants "$TPORT"
pg pg_ctl stop -D "$M/tdata/pgdata" -m fast -w >/dev/null
log "after resync + update ($SNAP2): the source's new row is there, the target's own write only in $SAVED"

pg pg_ctl stop -D "$M/data/pgdata" -m fast -w >/dev/null
sb unmount "$M/tdata"
sb unmount "$M/twal"
"$STRATA_BIN" mirror list
sb mirror list
"$STRATA_BIN" check default
sb check "$TPOOL"
strata_log_clean
[ "$REPL_TARGET" = pool ] || strata_peer_log_clean
log "PASS"
