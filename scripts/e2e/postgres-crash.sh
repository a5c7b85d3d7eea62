#!/usr/bin/env bash
# End-to-end crash test: PostgreSQL 15 on the storage under test.
#
#   DB_DIR=/mnt/strata/vol1 STORAGE_PID_FILE=... CRASH_CMD='...' RESTART_CMD='...' \
#     bash scripts/e2e/postgres-crash.sh          (scripts/e2e/postgres.sh: on Strata)
#
# What it does:
#   1. installs postgresql-15 + postgresql-contrib if missing;
#   2. initdb --data-checksums into $DB_DIR/pgdata (WAL included) and starts the postmaster
#      directly with pg_ctl (no systemd / pg_ctlcluster), as user postgres, fsync=on,
#      synchronous_commit=on, full_page_writes=on, on a private unix socket dir and port
#      $PG_PORT (TCP is not listened on);
#   3. pgbench -i -s $SCALE, then pgbench with $CLIENTS clients for $DURATION s in the background,
#      running a TPC-B-like custom script that also records every transaction in table `acked`;
#   4. after $CRASH_AFTER s, while pgbench is committing, a power failure that hits the storage
#      first (db-common.sh, power_failure): the storage process is frozen (SIGSTOP), the
#      postmaster and all its children are SIGSTOP'd and SIGKILL'd at once, `bash -c
#      "$CRASH_CMD"` kills the storage process (for Strata: kill -9 the daemon; the run FAILS
#      if it is still alive), then `bash -c "$RESTART_CMD"` brings the storage back (for
#      Strata: restart the daemon, which remounts, and require that it replayed its intent
#      log), then PostgreSQL restarts on the same data dir and does crash recovery; checks:
#        - every transaction pgbench saw COMMIT succeed for is present (see below);
#        - TPC-B invariants (sum of account = teller = branch balances = sum of history deltas,
#          one history row per acked row) i.e. no torn/partial transaction;
#        - pg_amcheck --all --heapallindexed --rootdescend reports nothing;
#        - a fresh pgbench run succeeds;
#   5. stops PostgreSQL cleanly, runs pg_checksums --check over the whole cluster, prints a
#      summary. Exit 0 on success, 1 with a "FAIL:" message (and log tails) on any failure.
#
# How acknowledged commits are recorded (client side) and mapped to rows (server side):
#   Each pgbench client keeps a private counter variable `seq` (-D seq=0, `\set seq :seq + 1` at
#   the top of every transaction) and the transaction inserts (:client_id, :seq) into `acked`
#   inside the same BEGIN..END as the TPC-B updates. pgbench's per-transaction log (-l) gets one
#   line per transaction only after the whole script, including END (= COMMIT), has returned
#   successfully; a client whose connection dies is aborted and logs nothing for that
#   transaction. pgbench is not killed (only the server is), so it exits normally and flushes its
#   logs. A client runs its transactions strictly one after another, so if client c has N
#   successful lines, transactions seq 1..N of client c were acknowledged, and seq N+1 (at most)
#   was in flight at the crash and may or may not have become durable. After recovery the rows of
#   `acked` are compared with that expected set: a missing row = a lost acknowledged commit = FAIL;
#   any row other than one in-flight row per client = FAIL.
#
# Environment (all optional except DB_DIR, STORAGE_PID_FILE, CRASH_CMD and RESTART_CMD):
#   DB_DIR            existing directory on the storage under test (required)
#   STORAGE_PID_FILE, CRASH_CMD, RESTART_CMD (required), PRE_CRASH_CMD, PRE_CRASH_LEAD
#                     (optional): the storage crash, see db-common.sh (for Strata,
#                     PRE_CRASH_CMD commits PRE_CRASH_LEAD s before it)
#   CRASH_TIMEOUT     seconds CRASH_CMD, RESTART_CMD or PRE_CRASH_CMD may take (default 180)
#   SCALE             pgbench scale factor (default 5, ~75 MB)
#   CLIENTS           pgbench clients (default 4); JOBS pgbench threads (default 2)
#   DURATION          seconds of the crashed pgbench run (default 20)
#   CRASH_AFTER       seconds into that run when the server is killed (default 10)
#   VERIFY_DURATION   seconds of the pgbench run after recovery (default 10)
#   PG_PORT           port (default 55432); PG_BIN (default /usr/lib/postgresql/15/bin)
#   START_TIMEOUT     seconds allowed for start-up incl. crash recovery (default 180)
#   STEP_TIMEOUT      seconds any other single step may take (default 600)
#   E2E_KEEP_WORK=1   keep the work dir (server log, pgbench logs) on success
#   E2E_SELFTEST_DROP_ACKED=N  negative self-test: delete the N oldest acked rows after recovery,
#                     before verification; the run must then FAIL with "LOST COMMITS".
#   E2E_SELFTEST_LATE_CRASH=N  negative self-test of the replay check (db-common.sh).
# The database server runs as user postgres, so DB_DIR must be reachable by that user (a FUSE
# mount needs allow_other) and the storage must support chown/chmod (initdb checks 0700 mode).
set -euo pipefail
E2E_NAME=postgres-crash
# shellcheck source=scripts/e2e/db-common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/db-common.sh"

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_PORT="${PG_PORT:-55432}"
SCALE="${SCALE:-5}"
CLIENTS="${CLIENTS:-4}"
JOBS="${JOBS:-2}"
DURATION="${DURATION:-20}"
CRASH_AFTER="${CRASH_AFTER:-10}"
VERIFY_DURATION="${VERIFY_DURATION:-10}"
CRASH_TIMEOUT="${CRASH_TIMEOUT:-180}"
START_TIMEOUT="${START_TIMEOUT:-180}"
E2E_SELFTEST_DROP_ACKED="${E2E_SELFTEST_DROP_ACKED:-0}"
DBNAME=e2e
[ "$JOBS" -le "$CLIENTS" ] || JOBS="$CLIENTS"
[ "$CRASH_AFTER" -lt "$DURATION" ] || die "CRASH_AFTER ($CRASH_AFTER) must be less than DURATION ($DURATION)"
require_crash_setup

T_START="$(now_s)"
[ "$(id -u)" -eq 0 ] || die "run as root (installs packages, runs the server as user postgres)"
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/initdb" "$PG_BIN/pg_ctl" "$PG_BIN/pgbench" \
  "$PG_BIN/pg_amcheck" "$PG_BIN/pg_checksums" "$PG_BIN/psql" \
  /usr/share/postgresql/15/extension/amcheck.control -- postgresql-15 postgresql-contrib
id postgres >/dev/null 2>&1 || die "user postgres does not exist (postgresql-common should create it)"

require_db_dir postgres
PGDATA="$DB_DIR/pgdata"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/pg-e2e.XXXXXX")"
chmod 755 "$WORK"
SOCK_DIR="$WORK/sock"
mkdir -m 700 "$SOCK_DIR"
chown postgres: "$SOCK_DIR"
SERVER_LOG="$WORK/postgres.log"
touch "$SERVER_LOG"
chown postgres: "$SERVER_LOG"
add_failure_log "$SERVER_LOG"
cd "$WORK" # runuser keeps the cwd; make it one user postgres can read

BENCH_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  thaw_storage
  kill_nap
  if [ -n "$BENCH_PID" ] && kill -0 "$BENCH_PID" 2>/dev/null; then
    kill -TERM "$BENCH_PID" 2>/dev/null
    wait_bg "$BENCH_PID" 10
  fi
  if pg_running; then
    log "stopping PostgreSQL (immediate)"
    pg_as pg_ctl stop -D "$PGDATA" -m immediate -w -t 30 >/dev/null 2>&1 || kill_postmaster_tree
  fi
  if [ "$rc" -ne 0 ]; then
    print_failure_logs
    printf '[%s %s] FAILED (exit %s) after %ss; work dir kept: %s; data dir left in %s\n' \
      "$(e2e_ts)" "$E2E_NAME" "$rc" "$(elapsed_since "$T_START")" "$WORK" "$PGDATA" >&2
  elif [ "${E2E_KEEP_WORK:-0}" = 1 ]; then
    log "work dir kept: $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export PGCONNECT_TIMEOUT=10
pg_as() { bounded runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
psql_q() {
  bounded "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK_DIR" -p "$PG_PORT" -U postgres "$@"
}
pgbench_() { bounded "$PG_BIN/pgbench" -h "$SOCK_DIR" -p "$PG_PORT" -U postgres "$@"; }
postmaster_pid() { head -n 1 "$PGDATA/postmaster.pid" 2>/dev/null; }
# pg_running: a live process whose pid is in postmaster.pid and that is a postgres process.
pg_running() {
  local pid
  pid="$(postmaster_pid)" || return 1
  [ -n "$pid" ] && is_alive "$pid" && grep -q postgres "/proc/$pid/cmdline" 2>/dev/null
}

# db_kill: the database's half of the power failure. Freeze the postmaster $PM_PID (so it
# cannot fork) and all its children, then SIGKILL them all in one call; no waiting (db_reap):
# in a crash a process blocked in a request to the frozen storage dies only with the storage.
# PM_PID is read from postmaster.pid beforehand, while the storage still answers.
PM_PID=""
KILLED_PIDS=()
db_kill() {
  local kids
  kill -STOP "$PM_PID" 2>/dev/null || true
  # shellcheck disable=SC2207
  kids=($(pgrep -P "$PM_PID" || true))
  [ "${#kids[@]}" -eq 0 ] || kill -STOP "${kids[@]}" 2>/dev/null || true
  kill -KILL "$PM_PID" "${kids[@]}" 2>/dev/null || true
  KILLED_PIDS=("$PM_PID" "${kids[@]}")
}
db_reap() {
  local p
  for p in "${KILLED_PIDS[@]}"; do
    wait_pid_gone "$p" 30 || die "postgres process $p survived kill -9 for 30s"
  done
  log "killed ${#KILLED_PIDS[@]} postgres processes"
}
# kill_postmaster_tree: the same at once, for a postmaster left over or in the way.
kill_postmaster_tree() {
  PM_PID="$(postmaster_pid)"
  [ -n "$PM_PID" ] || die "no postmaster.pid in $PGDATA"
  db_kill
  db_reap
}

start_pg() {
  local t0
  t0="$(now_s)"
  if ! pg_as pg_ctl start -D "$PGDATA" -l "$SERVER_LOG" -w -t "$START_TIMEOUT" >"$WORK/pg_ctl.out" 2>&1; then
    cat "$WORK/pg_ctl.out" >&2
    die "PostgreSQL did not start within ${START_TIMEOUT}s"
  fi
  wait_for "PostgreSQL to accept connections" 60 psql_q -d postgres -c 'select 1'
  [ "$(psql_q -d postgres -c 'select pg_is_in_recovery()')" = f ] || die "server is still in recovery after start"
  START_SECS="$(elapsed_since "$t0")"
}

# ---------------------------------------------------------------- 0. a fresh data directory
if [ -e "$PGDATA" ]; then
  if pg_running && grep -qF "$PGDATA" "/proc/$(postmaster_pid)/cmdline" 2>/dev/null; then
    log "a postmaster from a previous run is still running on $PGDATA; killing it"
    kill_postmaster_tree
  fi
  log "removing old $PGDATA"
  rm -rf "$PGDATA"
fi
if port_in_use "$PG_PORT"; then die "port $PG_PORT is in use (set PG_PORT)"; fi

# ---------------------------------------------------------------- 1. initdb + start
log "initdb --data-checksums in $PGDATA"
install -d -o postgres -g postgres -m 700 "$PGDATA"
pg_as initdb -D "$PGDATA" --data-checksums --auth=trust --username=postgres --encoding=UTF8 \
  --locale=C >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; die "initdb failed"; }
cat >>"$PGDATA/postgresql.conf" <<EOF

# --- strata e2e crash test
port = $PG_PORT
listen_addresses = ''
unix_socket_directories = '$SOCK_DIR'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 40
shared_buffers = 128MB
checkpoint_timeout = 30s
# small, so that WAL-volume checkpoints (and their fsyncs) happen during the crashed run
max_wal_size = 64MB
min_wal_size = 32MB
log_checkpoints = on
logging_collector = off
log_line_prefix = '%m [%p] '
EOF
start_pg
log "PostgreSQL $(psql_q -d postgres -c 'show server_version') up on port $PG_PORT (socket dir $SOCK_DIR), wal_sync_method=$(psql_q -d postgres -c 'show wal_sync_method')"
psql_q -d postgres -c "create database $DBNAME"

# ---------------------------------------------------------------- 2. load
log "pgbench -i -s $SCALE"
t0="$(now_s)"
pgbench_ -i -s "$SCALE" -q "$DBNAME" >"$WORK/pgbench-init.out" 2>&1 ||
  { cat "$WORK/pgbench-init.out" >&2; die "pgbench -i failed"; }
INIT_SECS="$(elapsed_since "$t0")"
psql_q -d "$DBNAME" -c "create table acked (client_id int not null, seq bigint not null,
  committed_at timestamptz not null default clock_timestamp(), primary key (client_id, seq))"
psql_q -d "$DBNAME" -c checkpoint

cat >"$WORK/acked.sql" <<'EOF'
\set seq :seq + 1
\set aid random(1, 100000 * :scale)
\set bid random(1, 1 * :scale)
\set tid random(1, 10 * :scale)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
INSERT INTO acked (client_id, seq) VALUES (:client_id, :seq);
END;
EOF

log "pgbench: $CLIENTS clients, $JOBS threads, ${DURATION}s, crash after ${CRASH_AFTER}s"
BENCH_T0="$(now_s)"
pgbench_ -n -c "$CLIENTS" -j "$JOBS" -T "$DURATION" -s "$SCALE" -D seq=0 -f "$WORK/acked.sql" \
  -l --log-prefix="$WORK/pgbench_log" -P 5 "$DBNAME" >"$WORK/pgbench-crash.out" 2>&1 &
BENCH_PID=$!
add_failure_log "$WORK/pgbench-crash.out"
crash_wait "$CRASH_AFTER"
is_alive "$BENCH_PID" ||
  die "pgbench ended before the crash point (see its output below)"

# ---------------------------------------------------------------- 3. crash
PM_PID="$(postmaster_pid)"
if [ -z "$PM_PID" ] || ! is_alive "$PM_PID"; then die "no running postmaster at the crash point"; fi
power_failure
wait_bg "$BENCH_PID" 60
BENCH_RC=$WAIT_BG_RC
BENCH_PID=""
LOAD_SECS="$(awk -v a="$BENCH_T0" -v b="$CRASH_T" 'BEGIN { printf "%.1f", b - a }')"
log "pgbench exited with status $BENCH_RC (2 = clients aborted by the crash, as expected)"
[ "$BENCH_RC" -ne 124 ] || warn "pgbench had to be killed; its log may miss acknowledged transactions"
[ "$BENCH_RC" -ne 0 ] || die "pgbench exited 0: the crash did not hit the running load"

run_hook RESTART_CMD
wait_for "$PGDATA to be back after RESTART_CMD" 120 test -f "$PGDATA/PG_VERSION"

# ---------------------------------------------------------------- 4. recover + verify
log "restarting PostgreSQL on the same data dir (crash recovery)"
start_pg
grep -q 'database system was not properly shut down; automatic recovery in progress' "$SERVER_LOG" ||
  die "the server log shows no crash recovery: the crash did not happen as intended"
REDO_LINE="$(grep -E 'redo done at|redo is not required' "$SERVER_LOG" | tail -n 1 | sed 's/^.*LOG: *//' || true)"
log "recovered in ${START_SECS}s: $REDO_LINE"

# Expected set from the client side: one "client seq" line per acknowledged transaction.
compgen -G "$WORK/pgbench_log.*" >/dev/null || die "pgbench wrote no per-transaction log"
cat "$WORK"/pgbench_log.* 2>/dev/null |
  awk '$3 ~ /^[0-9]+$/ { n[$1]++ }
       END { for (c in n) for (i = 1; i <= n[c]; i++) print c, i }' >"$WORK/acked.expected"
FAILED_LINES="$(cat "$WORK"/pgbench_log.* 2>/dev/null | awk '$3 !~ /^[0-9]+$/' | wc -l)"
[ "$FAILED_LINES" -eq 0 ] || log "$FAILED_LINES pgbench log lines were failed/skipped transactions (not counted)"

if [ "$E2E_SELFTEST_DROP_ACKED" -gt 0 ]; then
  warn "SELFTEST: deleting the $E2E_SELFTEST_DROP_ACKED oldest acked rows; verification must FAIL"
  psql_q -d "$DBNAME" -c "delete from acked where (client_id, seq) in
    (select client_id, seq from acked order by seq, client_id limit $E2E_SELFTEST_DROP_ACKED)"
fi
psql_q -d "$DBNAME" -F ' ' -c 'select client_id, seq from acked' >"$WORK/acked.actual" ||
  die "reading table acked after recovery failed"
verify_acked "$WORK/acked.expected" "$WORK/acked.actual"

# TPC-B invariants: a transaction is all or nothing.
psql_q -d "$DBNAME" -F ' ' -c "
  select (select sum(abalance) from pgbench_accounts), (select sum(tbalance) from pgbench_tellers),
         (select sum(bbalance) from pgbench_branches), (select coalesce(sum(delta), 0) from pgbench_history),
         (select count(*) from pgbench_history), (select count(*) from acked),
         (select count(*) from pgbench_accounts)" >"$WORK/invariants.out" ||
  die "reading the TPC-B tables after recovery failed"
read -r SUM_A SUM_T SUM_B SUM_H N_H N_ACKED N_ACC <"$WORK/invariants.out"
[ "$N_ACC" -eq $((100000 * SCALE)) ] || die "pgbench_accounts has $N_ACC rows, expected $((100000 * SCALE))"
if [ "$SUM_A" != "$SUM_T" ] || [ "$SUM_T" != "$SUM_B" ] || [ "$SUM_B" != "$SUM_H" ]; then
  die "TPC-B balances disagree after recovery (torn transaction): accounts=$SUM_A tellers=$SUM_T branches=$SUM_B history=$SUM_H"
fi
[ "$N_H" = "$N_ACKED" ] || die "pgbench_history has $N_H rows but acked has $N_ACKED (torn transaction)"
log "TPC-B invariants hold: balance sum $SUM_A, $N_H history rows = acked rows"

log "pg_amcheck --all --heapallindexed --rootdescend"
t0="$(now_s)"
AMCHECK_RC=0
bounded "$PG_BIN/pg_amcheck" -h "$SOCK_DIR" -p "$PG_PORT" -U postgres --all --install-missing \
  --heapallindexed --rootdescend >"$WORK/amcheck.out" 2>&1 || AMCHECK_RC=$?
add_failure_log "$WORK/amcheck.out"
if [ "$AMCHECK_RC" -ne 0 ] || [ -s "$WORK/amcheck.out" ]; then
  head -n 40 "$WORK/amcheck.out" >&2
  die "pg_amcheck reported corruption or errors (exit $AMCHECK_RC)"
fi
log "pg_amcheck: no corruption ($(elapsed_since "$t0")s)"

log "pgbench after recovery: ${VERIFY_DURATION}s"
pgbench_ -n -c "$CLIENTS" -j "$JOBS" -T "$VERIFY_DURATION" "$DBNAME" >"$WORK/pgbench-after.out" 2>&1 ||
  { add_failure_log "$WORK/pgbench-after.out"; die "pgbench after recovery failed"; }

# ---------------------------------------------------------------- 5. clean stop + offline checks
log "stopping PostgreSQL"
pg_as pg_ctl stop -D "$PGDATA" -m fast -w -t 120 >/dev/null || die "PostgreSQL did not stop cleanly"
log "pg_checksums --check (offline, every page)"
pg_as pg_checksums --check -D "$PGDATA" >"$WORK/checksums.out" 2>&1 ||
  { add_failure_log "$WORK/checksums.out"; die "pg_checksums found bad pages"; }

tps_of() { grep -m1 -oE 'tps = [0-9.]+' "$1" | awk '{ print $3 }'; }
TPS_CRASH="$(awk -v n="$ACKED_VERIFIED" -v s="$LOAD_SECS" 'BEGIN { printf "%.0f", n / s }')"
TPS_AFTER="$(tps_of "$WORK/pgbench-after.out" || true)"
echo
echo "================ postgres-crash: PASS ================"
echo "data dir:               $PGDATA (checksums on, scale $SCALE, pgbench -i ${INIT_SECS}s)"
echo "crashed run:            ~${TPS_CRASH} tps ($ACKED_VERIFIED commits acknowledged in ${LOAD_SECS}s, $CLIENTS clients)"
echo "acked verified:         $ACKED_VERIFIED present, 0 lost; $ACKED_INFLIGHT in-flight commit(s) durable"
echo "storage crash:          frozen ${LOAD_SECS}s into the load, CRASH_CMD ${CRASH_SECS}s; restart: $(tail -n 1 "$WORK/RESTART_CMD.out")"
echo "crash recovery:         ${START_SECS}s ($REDO_LINE)"
echo "invariants / amcheck:   OK / OK;  pg_checksums: $(grep -m1 'Bad checksums' "$WORK/checksums.out" | tr -s ' ' || true)"
echo "run after recovery:     ${TPS_AFTER} tps (${VERIFY_DURATION}s, $CLIENTS clients)"
echo "total:                  $(elapsed_since "$T_START")s"
