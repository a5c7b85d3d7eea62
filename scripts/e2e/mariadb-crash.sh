#!/usr/bin/env bash
# End-to-end crash test: MariaDB (Debian 12: 10.11) + sysbench on the storage under test.
#
#   DB_DIR=/mnt/strata/vol1 STORAGE_PID_FILE=... CRASH_CMD='...' RESTART_CMD='...' \
#     bash scripts/e2e/mariadb-crash.sh           (scripts/e2e/mariadb.sh: on Strata)
#
# What it does:
#   1. installs mariadb-server + sysbench if missing;
#   2. mariadb-install-db into $DB_DIR/mysql (datadir, InnoDB system tablespace, undo and redo
#      logs all inside it), starts mariadbd directly (no systemd) as user mysql with its own
#      socket and port $MY_PORT on 127.0.0.1, innodb_flush_log_at_trx_commit=1,
#      innodb_flush_method=O_DIRECT, innodb_log_file_buffering=OFF (O_DIRECT redo where the
#      storage allows it), doublewrite on, buffer pool $BUFFER_POOL, redo log $REDO_LOG_SIZE;
#   3. sysbench oltp_read_write, NetApp TR-4722 parameters (--tables=2 --table-size=10000):
#      prepare, then a $DURATION s run with $THREADS threads in the background, and next to it a
#      small acknowledged-commit writer (sysbench Lua script, $ACK_THREADS threads, see below);
#   4. after $CRASH_AFTER s, while the load is committing, a power failure that hits the
#      storage first (db-common.sh, power_failure): the storage process is frozen (SIGSTOP),
#      mariadbd is SIGSTOP'd and SIGKILL'd, `bash -c "$CRASH_CMD"` kills the storage process
#      (for Strata: kill -9 the daemon; the run FAILS if it is still alive), then `bash -c
#      "$RESTART_CMD"` brings the storage back (for Strata: restart the daemon, which
#      remounts, and require that it replayed its intent log), then mariadbd restarts on the
#      same datadir and does InnoDB crash recovery; checks:
#        - every commit the ack writer saw succeed is present (lost commit = FAIL);
#        - CHECK TABLE ... EXTENDED on every sysbench table, and mariadb-check --all-databases
#          --extended: anything but OK = FAIL;
#        - each sbtest table still has exactly --table-size rows (oltp_read_write's delete+insert
#          pair is one transaction, so a torn transaction shows up as a wrong count);
#        - a second short sysbench oltp_read_write run succeeds;
#   5. stops mariadbd cleanly (mariadb-admin shutdown), runs innochecksum over every tablespace
#      offline, prints a summary. Exit 0 on success, 1 with a "FAIL:" message and log tails.
#
# Acknowledged commits: each ack-writer thread t runs BEGIN; INSERT INTO acked (t, seq); COMMIT
# in a loop and only after COMMIT has returned OK appends "t seq" to its own file and flushes it
# (sysbench itself is not killed, only the server). Threads run one transaction at a time, so
# after recovery every logged (t, seq) must be in `acked`, and the only rows allowed beyond them
# are one in-flight commit per thread (COMMIT durable, reply lost in the crash).
#
# Environment (all optional except DB_DIR, STORAGE_PID_FILE, CRASH_CMD and RESTART_CMD):
#   DB_DIR            existing directory on the storage under test (required)
#   STORAGE_PID_FILE, CRASH_CMD, RESTART_CMD (required), PRE_CRASH_CMD, PRE_CRASH_LEAD
#                     (optional): the storage crash, see db-common.sh (for Strata,
#                     PRE_CRASH_CMD commits PRE_CRASH_LEAD s before it, which also makes
#                     durable what mariadb-install-db wrote without fsync: the Aria tables)
#   CRASH_TIMEOUT     seconds CRASH_CMD, RESTART_CMD or PRE_CRASH_CMD may take (default 180)
#   TABLES / TABLE_SIZE   sysbench tables and rows per table (default 2 / 10000, TR-4722)
#   THREADS           sysbench oltp_read_write threads (default 4)
#   ACK_THREADS       acknowledged-commit writer threads (default 2)
#   DURATION          seconds of the crashed sysbench run (default 20)
#   CRASH_AFTER       seconds into that run when mariadbd is killed (default 10)
#   VERIFY_DURATION   seconds of the sysbench run after recovery (default 10)
#   MY_PORT           TCP port on 127.0.0.1 (default 53306)
#   BUFFER_POOL       innodb_buffer_pool_size (default 128M)
#   REDO_LOG_SIZE     innodb_log_file_size (default 8M: small, so that checkpoints, i.e. page
#                     flushes through the doublewrite buffer, happen during the crashed run)
#   REQUIRE_O_DIRECT  1 (default): FAIL if InnoDB reports it could not set O_DIRECT, or if any
#                     InnoDB data file open in mariadbd during the load lacks O_DIRECT (checked
#                     in /proc/PID/fdinfo); 0: only warn
#   MARIADB_EXTRA_ARGS  extra mariadbd options (word-split), e.g. "--innodb-use-native-aio=0"
#   START_TIMEOUT     seconds allowed for start-up incl. crash recovery (default 180)
#   STEP_TIMEOUT      seconds any other single step may take (default 600)
#   E2E_KEEP_WORK=1   keep the work dir (error log, sysbench output, ack logs) on success
#   E2E_SELFTEST_DROP_ACKED=N  negative self-test: delete the N oldest acked rows after recovery,
#                     before verification; the run must then FAIL with "LOST COMMITS".
#   E2E_SELFTEST_LATE_CRASH=N  negative self-test of the replay check (db-common.sh).
# mariadbd runs as user mysql, so DB_DIR must be reachable by that user (a FUSE mount needs
# allow_other) and the storage must support chown.
set -euo pipefail
E2E_NAME=mariadb-crash
# shellcheck source=scripts/e2e/db-common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/db-common.sh"

TABLES="${TABLES:-2}"
TABLE_SIZE="${TABLE_SIZE:-10000}"
THREADS="${THREADS:-4}"
ACK_THREADS="${ACK_THREADS:-2}"
DURATION="${DURATION:-20}"
CRASH_AFTER="${CRASH_AFTER:-10}"
VERIFY_DURATION="${VERIFY_DURATION:-10}"
MY_PORT="${MY_PORT:-53306}"
BUFFER_POOL="${BUFFER_POOL:-128M}"
REDO_LOG_SIZE="${REDO_LOG_SIZE:-8M}"
REQUIRE_O_DIRECT="${REQUIRE_O_DIRECT:-1}"
MARIADB_EXTRA_ARGS="${MARIADB_EXTRA_ARGS:-}"
CRASH_TIMEOUT="${CRASH_TIMEOUT:-180}"
START_TIMEOUT="${START_TIMEOUT:-180}"
E2E_SELFTEST_DROP_ACKED="${E2E_SELFTEST_DROP_ACKED:-0}"
MARIADBD=/usr/sbin/mariadbd
[ "$CRASH_AFTER" -lt "$DURATION" ] || die "CRASH_AFTER ($CRASH_AFTER) must be less than DURATION ($DURATION)"
require_crash_setup

T_START="$(now_s)"
[ "$(id -u)" -eq 0 ] || die "run as root (installs packages, starts mariadbd as user mysql)"
ensure_pkgs "$MARIADBD" /usr/bin/mariadb-install-db /usr/bin/mariadb /usr/bin/mariadb-admin \
  /usr/bin/mariadb-check /usr/bin/innochecksum -- mariadb-server mariadb-client
ensure_pkgs /usr/bin/sysbench /usr/share/sysbench/oltp_read_write.lua -- sysbench
id mysql >/dev/null 2>&1 || die "user mysql does not exist (mariadb-server should create it)"

require_db_dir mysql
MYDATA="$DB_DIR/mysql"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/mariadb-e2e.XXXXXX")"
chmod 755 "$WORK"
RUN_DIR="$WORK/run" # socket, pid file, error log: written by mariadbd as user mysql
install -d -o mysql -g mysql -m 750 "$RUN_DIR"
SOCK="$RUN_DIR/mariadbd.sock"
ERR_LOG="$RUN_DIR/mariadbd.err"
ACK_DIR="$WORK/acks"
mkdir "$ACK_DIR"
add_failure_log "$ERR_LOG"
cd "$WORK"

MYSQLD_PID=""
SB_PID=""
ACK_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  thaw_storage
  kill_nap
  local p
  for p in "$SB_PID" "$ACK_PID"; do
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p" 2>/dev/null
      wait_bg "$p" 10
    fi
  done
  if [ -n "$MYSQLD_PID" ] && kill -0 "$MYSQLD_PID" 2>/dev/null; then
    log "stopping mariadbd (kill -9, pid $MYSQLD_PID)"
    { kill -KILL "$MYSQLD_PID"; wait_bg "$MYSQLD_PID" 30; } 2>/dev/null
  fi
  if [ "$rc" -ne 0 ]; then
    print_failure_logs
    printf '[%s %s] FAILED (exit %s) after %ss; work dir kept: %s; data dir left in %s\n' \
      "$(e2e_ts)" "$E2E_NAME" "$rc" "$(elapsed_since "$T_START")" "$WORK" "$MYDATA" >&2
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

# Admin client: root over the private socket (unix_socket authentication, we are OS root).
sql() { bounded mariadb --no-defaults --connect-timeout=10 -S "$SOCK" -u root -N -B "$@"; }
sb() {
  bounded sysbench "$@" --db-driver=mysql --mysql-socket="$SOCK" --mysql-user=sbtest \
    --mysql-password=sbtest --mysql-db=sbtest
}
sb_oltp() { sb oltp_read_write --tables="$TABLES" --table-size="$TABLE_SIZE" "$@"; }

start_mariadbd() {
  local t0 deadline
  t0="$(now_s)"
  # shellcheck disable=SC2086
  "$MARIADBD" --no-defaults --user=mysql --datadir="$MYDATA" --socket="$SOCK" \
    --port="$MY_PORT" --bind-address=127.0.0.1 --pid-file="$RUN_DIR/mariadbd.pid" \
    --log-error="$ERR_LOG" --skip-log-bin --skip-name-resolve --max-connections=100 \
    --innodb-flush-log-at-trx-commit=1 --innodb-flush-method=O_DIRECT \
    --innodb-log-file-buffering=OFF --innodb-doublewrite=ON \
    --innodb-buffer-pool-size="$BUFFER_POOL" --innodb-log-file-size="$REDO_LOG_SIZE" \
    $MARIADB_EXTRA_ARGS >>"$WORK/mariadbd.stdout" 2>&1 &
  MYSQLD_PID=$!
  deadline=$((SECONDS + START_TIMEOUT))
  until timeout 15 mariadb-admin --no-defaults --connect-timeout=5 -S "$SOCK" -u root ping >/dev/null 2>&1; do
    if ! is_alive "$MYSQLD_PID"; then
      wait "$MYSQLD_PID" 2>/dev/null || true
      MYSQLD_PID=""
      add_failure_log "$WORK/mariadbd.stdout"
      die "mariadbd exited during start-up"
    fi
    [ "$SECONDS" -lt "$deadline" ] || die "mariadbd did not accept connections within ${START_TIMEOUT}s"
    sleep 0.5
  done
  START_SECS="$(elapsed_since "$t0")"
}

stop_mariadbd() {
  bounded mariadb-admin --no-defaults -S "$SOCK" -u root shutdown || die "mariadb-admin shutdown failed"
  wait_bg "$MYSQLD_PID" 180
  [ "$WAIT_BG_RC" -eq 0 ] || die "mariadbd did not shut down cleanly (exit $WAIT_BG_RC)"
  MYSQLD_PID=""
}

check_o_direct() {
  if grep -qiE 'Failed to set O_DIRECT|O_DIRECT.*(not supported|failed)' "$ERR_LOG"; then
    grep -iE 'O_DIRECT' "$ERR_LOG" | tail -n 5 >&2
    if [ "$REQUIRE_O_DIRECT" = 1 ]; then
      die "InnoDB could not use O_DIRECT on the storage under test"
    fi
    warn "InnoDB could not use O_DIRECT on the storage under test"
  fi
}

# check_fd_o_direct: look at the open files of the running mariadbd (/proc/PID/fdinfo flags)
# and report which InnoDB files really are open with O_DIRECT. Data files (ibdata*, *.ibd,
# undo*) without it fail the run when REQUIRE_O_DIRECT=1; the redo log is only reported, since
# InnoDB itself decides to buffer it when it cannot learn the storage's block size.
check_fd_o_direct() {
  local fd target flags n_data=0 n_direct=0 redo="not open" not_direct=()
  for fd in /proc/"$MYSQLD_PID"/fd/*; do
    target="$(readlink "$fd" 2>/dev/null)" || continue
    case "$target" in "$MYDATA"/*) ;; *) continue ;; esac
    flags="$(awk '/^flags:/ { print $2 }' "/proc/$MYSQLD_PID/fdinfo/${fd##*/}" 2>/dev/null)" || continue
    [ -n "$flags" ] || continue
    case "$target" in
      */ib_logfile0)
        if (((8#$flags & 8#40000) != 0)); then redo="O_DIRECT"; else redo="buffered"; fi ;;
      *.ibd | */ibdata* | */undo[0-9]*)
        n_data=$((n_data + 1))
        if (((8#$flags & 8#40000) != 0)); then n_direct=$((n_direct + 1)); else not_direct+=("$target"); fi ;;
    esac
  done
  log "open InnoDB files: $n_direct of $n_data data files with O_DIRECT; redo log: $redo"
  if [ "${#not_direct[@]}" -gt 0 ]; then
    printf '  without O_DIRECT: %s\n' "${not_direct[@]}" >&2
    [ "$REQUIRE_O_DIRECT" != 1 ] || die "InnoDB data files are not open with O_DIRECT on the storage under test"
  fi
  [ "$n_data" -gt 0 ] || warn "found no open InnoDB data file under $MYDATA in /proc/$MYSQLD_PID/fd"
}

# ---------------------------------------------------------------- 0. a fresh data directory
if [ -e "$MYDATA" ]; then
  # A mariadbd left over from an interrupted earlier run on this datadir: kill it by pid.
  for p in $(pgrep -x mariadbd || true); do
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "--datadir=$MYDATA "; then
      log "a mariadbd from a previous run ($p) is still running on $MYDATA; killing it"
      kill -KILL "$p" 2>/dev/null || true
      wait_pid_gone "$p" 30 || die "old mariadbd $p does not die"
    fi
  done
  log "removing old $MYDATA"
  rm -rf "$MYDATA"
fi
if port_in_use "$MY_PORT"; then die "port $MY_PORT is in use (set MY_PORT)"; fi

# ---------------------------------------------------------------- 1. install db + start
log "mariadb-install-db into $MYDATA"
install -d -o mysql -g mysql -m 750 "$MYDATA"
bounded mariadb-install-db --no-defaults --user=mysql --datadir="$MYDATA" --skip-test-db \
  --auth-root-authentication-method=socket --skip-name-resolve >"$WORK/install-db.log" 2>&1 ||
  { cat "$WORK/install-db.log" >&2; die "mariadb-install-db failed"; }
start_mariadbd
check_o_direct
log "InnoDB: $(grep -oE '(File system buffers for log disabled|Buffered log writes).*' "$ERR_LOG" | tail -n 1 || true); $(grep -oE 'Using (io_uring|Linux native AIO|simulated AIO).*' "$ERR_LOG" | tail -n 1 || true)"
log "$(sql -e 'select version()') up on port $MY_PORT (socket $SOCK): flush_method=$(sql -e 'select @@innodb_flush_method'), log_file_buffering=$(sql -e 'select @@innodb_log_file_buffering'), flush_log_at_trx_commit=$(sql -e 'select @@innodb_flush_log_at_trx_commit')"
sql -e "create database sbtest;
  create user sbtest@localhost identified by 'sbtest';
  grant all on sbtest.* to sbtest@localhost;
  create table sbtest.acked (thread_id int not null, seq bigint not null,
    committed_at timestamp(6) not null default current_timestamp(6),
    pad char(120) not null default '', primary key (thread_id, seq)) engine=InnoDB;"

# ---------------------------------------------------------------- 2. load
log "sysbench oltp_read_write prepare: --tables=$TABLES --table-size=$TABLE_SIZE"
t0="$(now_s)"
sb_oltp prepare >"$WORK/sysbench-prepare.out" 2>&1 ||
  { add_failure_log "$WORK/sysbench-prepare.out"; die "sysbench prepare failed"; }
PREPARE_SECS="$(elapsed_since "$t0")"

cat >"$WORK/acked.lua" <<'EOF'
-- Acknowledged-commit writer: one transaction at a time per thread; a line "tid seq" is written
-- (and flushed to the kernel) only after COMMIT returned OK.
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
  seq = 0
  f = assert(io.open(string.format("%s/acked.%d", os.getenv("ACK_DIR"), sysbench.tid), "w"))
end

function event()
  local s = seq + 1
  con:query("BEGIN")
  con:query(string.format("INSERT INTO acked (thread_id, seq, pad) VALUES (%d, %d, '%s')",
                          sysbench.tid, s, string.rep("x", 100)))
  con:query("COMMIT")
  seq = s
  f:write(sysbench.tid, " ", s, "\n")
  f:flush()
end

function thread_done()
  f:close()
  con:disconnect()
end
EOF

log "sysbench oltp_read_write run: $THREADS threads + $ACK_THREADS ack writers, ${DURATION}s, crash after ${CRASH_AFTER}s"
LOAD_T0="$(now_s)"
sb_oltp run --threads="$THREADS" --time="$DURATION" --report-interval=5 \
  >"$WORK/sysbench-crash.out" 2>&1 &
SB_PID=$!
ACK_DIR="$ACK_DIR" sb "$WORK/acked.lua" run --threads="$ACK_THREADS" --time="$DURATION" \
  >"$WORK/ackwriter-crash.out" 2>&1 &
ACK_PID=$!
add_failure_log "$WORK/sysbench-crash.out"
add_failure_log "$WORK/ackwriter-crash.out"
crash_wait "$CRASH_AFTER"
for p in "$SB_PID" "$ACK_PID"; do
  is_alive "$p" ||
    die "a sysbench process ended before the crash point (see its output below)"
done

check_fd_o_direct

# ---------------------------------------------------------------- 3. crash
# db_kill: the database's half of the power failure, without waiting (db_reap): in a crash,
# a mariadbd thread blocked in a request to the frozen storage dies only with the storage.
db_kill() {
  kill -STOP "$MYSQLD_PID" 2>/dev/null || true
  kill -KILL "$MYSQLD_PID" 2>/dev/null || true
}
db_reap() {
  # (stderr hidden: bash's "Killed" job notice for its own child)
  { wait_pid_gone "$MYSQLD_PID" 30; } 2>/dev/null || die "mariadbd survived kill -9 for 30s"
  log "killed mariadbd $MYSQLD_PID"
  MYSQLD_PID=""
}
is_alive "$MYSQLD_PID" || die "mariadbd is not running at the crash point"
power_failure
wait_bg "$SB_PID" 60
SB_RC=$WAIT_BG_RC
SB_PID=""
wait_bg "$ACK_PID" 60
ACK_RC=$WAIT_BG_RC
ACK_PID=""
LOAD_SECS="$(awk -v a="$LOAD_T0" -v b="$CRASH_T" 'BEGIN { printf "%.1f", b - a }')"
log "sysbench exited with status $SB_RC, ack writer with $ACK_RC (non-zero = lost connection, as expected)"
if [ "$SB_RC" -eq 0 ] || [ "$ACK_RC" -eq 0 ]; then
  die "a sysbench run exited 0: the crash did not hit the running load"
fi
[ "$ACK_RC" -ne 124 ] || warn "the ack writer had to be killed"

run_hook RESTART_CMD
wait_for "$MYDATA to be back after RESTART_CMD" 120 test -f "$MYDATA/ibdata1"

# ---------------------------------------------------------------- 4. recover + verify
log "restarting mariadbd on the same datadir (crash recovery)"
ERR_LOG_LINES_BEFORE=$(wc -l <"$ERR_LOG")
start_mariadbd
check_o_direct
RECOVERY_LOG="$(tail -n +"$((ERR_LOG_LINES_BEFORE + 1))" "$ERR_LOG")"
printf '%s\n' "$RECOVERY_LOG" | grep -q 'Starting crash recovery' ||
  die "the error log shows no InnoDB crash recovery: the crash did not happen as intended"
log "recovered in ${START_SECS}s: $(printf '%s\n' "$RECOVERY_LOG" | grep -m1 -oE 'Starting crash recovery.*' || true)"

cat "$ACK_DIR"/acked.* >"$WORK/acked.expected"
if [ "$E2E_SELFTEST_DROP_ACKED" -gt 0 ]; then
  warn "SELFTEST: deleting the $E2E_SELFTEST_DROP_ACKED oldest acked rows; verification must FAIL"
  sql -e "delete from sbtest.acked order by seq, thread_id limit $E2E_SELFTEST_DROP_ACKED"
fi
sql -e 'select thread_id, seq from sbtest.acked' >"$WORK/acked.actual" ||
  die "reading table acked after recovery failed"
verify_acked "$WORK/acked.expected" "$WORK/acked.actual"

log "CHECK TABLE ... EXTENDED on every sbtest table"
SB_TABLES=()
for i in $(seq 1 "$TABLES"); do SB_TABLES+=("sbtest$i"); done
for t in "${SB_TABLES[@]}" acked; do
  out="$(sql -e "check table sbtest.$t extended")" || die "CHECK TABLE sbtest.$t failed to run"
  # Rows: Table Op Msg_type Msg_text. Only "status OK" is acceptable.
  if [ "$(printf '%s\n' "$out" | awk -F'\t' '{ print $3 " " $4 }')" != "status OK" ]; then
    printf '%s\n' "$out" >&2
    die "CHECK TABLE sbtest.$t is not OK"
  fi
  n="$(sql -e "select count(*) from sbtest.$t")" || die "counting rows of sbtest.$t failed"
  if [ "$t" != acked ] && [ "$n" -ne "$TABLE_SIZE" ]; then
    die "sbtest.$t has $n rows after recovery, expected $TABLE_SIZE (torn delete+insert transaction)"
  fi
done
log "CHECK TABLE: all OK; every sbtest table has $TABLE_SIZE rows"

log "mariadb-check --all-databases --extended"
MC_RC=0
bounded mariadb-check --no-defaults -S "$SOCK" -u root --all-databases --extended >"$WORK/mariadb-check.out" 2>&1 || MC_RC=$?
add_failure_log "$WORK/mariadb-check.out"
# Each table prints "db.table   OK"; anything else (error/warning lines, other statuses) fails.
MC_BAD="$(grep -vE '^[^ ]+\.[^ ]+ +OK$' "$WORK/mariadb-check.out" || true)"
if [ "$MC_RC" -ne 0 ] || [ -n "$MC_BAD" ]; then
  printf '%s\n' "$MC_BAD" | head -n 40 >&2
  die "mariadb-check reported problems (exit $MC_RC)"
fi
MC_TABLES=$(wc -l <"$WORK/mariadb-check.out")
log "mariadb-check: $MC_TABLES tables OK"

log "sysbench oltp_read_write after recovery: ${VERIFY_DURATION}s"
sb_oltp run --threads="$THREADS" --time="$VERIFY_DURATION" >"$WORK/sysbench-after.out" 2>&1 ||
  { add_failure_log "$WORK/sysbench-after.out"; die "sysbench after recovery failed"; }

# ---------------------------------------------------------------- 5. clean stop + offline checks
log "stopping mariadbd"
stop_mariadbd
log "innochecksum over every tablespace (offline)"
# ibdata1 pages 64..191 are the doublewrite buffer (two 64-page extents at the fixed place
# InnoDB puts them for 16 KiB pages): scratch copies of other tablespaces' pages, which
# innochecksum reports as "invalid" because their page number and space id are not their own.
# Those are skipped; every other page of every tablespace is checked.
innochecksum_or_die() {
  bounded innochecksum "$@" >"$WORK/innochecksum.out" 2>&1 ||
    { add_failure_log "$WORK/innochecksum.out"; die "innochecksum: bad pages in $*"; }
}
N_TS=0
while IFS= read -r -d '' f; do
  if [ "$(basename "$f")" = ibdata1 ]; then
    innochecksum_or_die -s 0 -e 63 "$f"
    innochecksum_or_die -s 192 "$f"
  else
    innochecksum_or_die "$f"
  fi
  N_TS=$((N_TS + 1))
done < <(find "$MYDATA" -type f \( -name '*.ibd' -o -name 'ibdata*' -o -name 'undo[0-9]*' \) -print0)

tps_of() { grep -m1 -oE 'transactions: +[0-9]+ +\([0-9.]+ per sec' "$1" | grep -oE '[0-9.]+ per' | awk '{ print $1 }'; }
# The crashed run prints no final summary: average its interval reports instead.
TPS_CRASH="$(awk '/^\[ *[0-9]+s \].* tps: / { for (i = 1; i < NF; i++) if ($i == "tps:") { s += $(i + 1); n++ } }
  END { if (n) printf "%.0f", s / n }' "$WORK/sysbench-crash.out")"
TPS_AFTER="$(tps_of "$WORK/sysbench-after.out" || true)"
echo
echo "================ mariadb-crash: PASS ================"
echo "data dir:               $MYDATA (O_DIRECT, flush_log_at_trx_commit=1, prepare ${PREPARE_SECS}s)"
echo "crashed run:            ${TPS_CRASH:-?} tps (interval reports), killed after ${LOAD_SECS}s; ack writer: $ACKED_VERIFIED commits"
echo "acked verified:         $ACKED_VERIFIED present, 0 lost; $ACKED_INFLIGHT in-flight commit(s) durable"
echo "storage crash:          frozen ${LOAD_SECS}s into the load, CRASH_CMD ${CRASH_SECS}s; restart: $(tail -n 1 "$WORK/RESTART_CMD.out")"
echo "crash recovery:         ${START_SECS}s"
echo "CHECK TABLE / check:    OK ($TABLES sbtest tables + acked; mariadb-check $MC_TABLES tables); innochecksum: $N_TS tablespaces OK"
echo "run after recovery:     ${TPS_AFTER} tps (${VERIFY_DURATION}s, $THREADS threads, $TABLES x $TABLE_SIZE rows)"
echo "total:                  $(elapsed_since "$T_START")s"
