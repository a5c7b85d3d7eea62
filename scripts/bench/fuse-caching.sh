#!/usr/bin/env bash
# Which FUSE caching mode serves databases better? PostgreSQL 15 (pgbench) and MariaDB
# (sysbench oltp_read_write) on three storage targets, in one session, in this order:
#
#   ext4         a plain directory under /var/tmp (the reference: no Strata in the way)
#   strata-wb    a Strata volume, daemon with the FUSE writeback cache (the default)
#   strata-nowb  a Strata volume, daemon started with --no-writeback-cache
#
# Each Strata mode gets a fresh daemon (own data dir, so a fresh pool image on the same ext4)
# and a fresh volume default/bench (--size 8G); both databases live inside its mount.
#
#   cargo build --release -p strata-cli
#   scripts/bench/fuse-caching.sh                        # full run, ~10 minutes on 2 cores
#   PG_SECONDS=5 MY_SECONDS=5 SCALE=2 scripts/bench/fuse-caching.sh   # quick try
#
# Per target:
#   PostgreSQL 15: initdb in the target dir; fsync=on, synchronous_commit=on,
#     shared_buffers=128MB (the rest default, wal_sync_method=fdatasync); pgbench -i -s $SCALE;
#     then TPC-B-like pgbench -c 4 -j 2 -T $PG_SECONDS and pgbench -c 1 -j 1 -T $PG_SECONDS,
#     each after VACUUM + CHECKPOINT. Recorded: TPS, average latency, load time.
#   MariaDB (Debian 12: 10.11): datadir in the target dir; innodb_flush_log_at_trx_commit=1,
#     innodb_flush_method=O_DIRECT, innodb_log_file_buffering=OFF, doublewrite on, buffer pool
#     128M, redo log 96M, no binlog; sysbench oltp_read_write --tables=2 --table-size=10000
#     --rand-type=uniform --range_size=100, prepare, then --threads=4 and --threads=1 for
#     $MY_SECONDS s each. Recorded: TPS, QPS, average and 95th-percentile latency, prepare time.
#   Sync probe (after the databases): 8 KiB pwrite + fdatasync in a loop for $PROBE_SECONDS s,
#     1 thread and 4 threads (own files): the cost of one sync on the target, the floor under
#     every commit. Recorded: ops/s, average, p50, p99 latency.
# TPS of every 5 s interval of each database run goes to the JSON too (run-to-run noise).
#
# Output: a Markdown table on stdout (progress goes to stderr), raw results as JSON in
# $OUT_JSON. Daemons, databases and mounts are stopped and the data removed on exit, also on
# failure or Ctrl-C (logs are then kept in the work dir, which is printed).
#
# Environment (all optional):
#   PG_SECONDS / MY_SECONDS   seconds per pgbench / sysbench run (default 30 / 30)
#   SCALE                     pgbench scale factor (default 10, ~160 MB)
#   TARGETS                   subset/order of "ext4 strata-wb strata-nowb" (default: all three)
#   OUT_JSON                  raw results (default docs/benchmarks/fuse-caching.json): {"runs": [...]}
#   JSON_APPEND=1             add this run to the runs already in OUT_JSON (default: replace)
#   STRATA_BIN                default target/release/strata
#   STRATA_E2E_DIR            Strata daemon dir (default /var/tmp/strata-bench-fc); the daemon's
#                             control socket is $STRATA_E2E_DIR/strata.sock (STRATA_API is ignored)
#   EXT4_DIR                  the reference directory (default /var/tmp/strata-bench-fc-ext4)
#   PG_PORT / MY_PORT         default 55442 / 53316 (the e2e tests use 55432 / 53306)
#   PROBE_SECONDS             seconds per sync-probe run (default 3)
#   SETTLE_SECONDS            pause after deleting a target's data, before the next (default 15)
#   STEP_TIMEOUT              seconds any single step may take (default max run + 300)
#   BENCH_KEEP_WORK=1         keep the work dir (server logs, raw tool output) on success
set -euo pipefail
unset STRATA_API # the CLI would talk TCP to it instead of this run's daemon's socket
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
E2E_NAME=fuse-caching

PG_SECONDS="${PG_SECONDS:-30}"
MY_SECONDS="${MY_SECONDS:-30}"
SCALE="${SCALE:-10}"
TARGETS="${TARGETS:-ext4 strata-wb strata-nowb}"
OUT_JSON="${OUT_JSON:-$ROOT/docs/benchmarks/fuse-caching.json}"
EXT4_DIR="${EXT4_DIR:-/var/tmp/strata-bench-fc-ext4}"
PG_PORT="${PG_PORT:-55442}"
MY_PORT="${MY_PORT:-53316}"
SB_TABLES=2
SB_TABLE_SIZE=10000
VOLUME=bench
longest=$((PG_SECONDS > MY_SECONDS ? PG_SECONDS : MY_SECONDS))
: "${STEP_TIMEOUT:=$((longest + 300))}"
export STEP_TIMEOUT
export STRATA_E2E_DIR="${STRATA_E2E_DIR:-/var/tmp/strata-bench-fc}"
export STRATA_SOCKET="$STRATA_E2E_DIR/strata.sock"
export STRATA_BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
export STRATA_POOL_SIZE="${STRATA_POOL_SIZE:-16G}"
PG_BIN=/usr/lib/postgresql/15/bin
MARIADBD=/usr/sbin/mariadbd

# shellcheck source=scripts/e2e/db-common.sh
. "$ROOT/scripts/e2e/db-common.sh"
# shellcheck source=scripts/e2e/strata-env.sh
. "$ROOT/scripts/e2e/strata-env.sh"
# Progress to stderr: stdout is the Markdown table only.
log() { printf '[%s %s] %s\n' "$(e2e_ts)" "$E2E_NAME" "$*" >&2; }

T_START="$(now_s)"
for t in $TARGETS; do
  case "$t" in ext4 | strata-wb | strata-nowb) ;; *) die "unknown target $t in TARGETS" ;; esac
done
[ "$(id -u)" -eq 0 ] || die "run as root (runs the servers as users postgres and mysql, mounts FUSE)"
[ -x "$STRATA_BIN" ] || die "no strata binary at $STRATA_BIN (cargo build --release -p strata-cli)"
command -v python3 >/dev/null || die "python3 is needed for the report"
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/initdb" "$PG_BIN/pg_ctl" "$PG_BIN/pgbench" "$PG_BIN/psql" \
  -- postgresql-15 postgresql-contrib
ensure_pkgs "$MARIADBD" /usr/bin/mariadb-install-db /usr/bin/mariadb /usr/bin/mariadb-admin \
  -- mariadb-server mariadb-client
ensure_pkgs /usr/bin/sysbench /usr/share/sysbench/oltp_read_write.lua -- sysbench
id postgres >/dev/null 2>&1 || die "user postgres does not exist"
id mysql >/dev/null 2>&1 || die "user mysql does not exist"
if port_in_use "$PG_PORT"; then die "port $PG_PORT is in use (set PG_PORT)"; fi
if port_in_use "$MY_PORT"; then die "port $MY_PORT is in use (set MY_PORT)"; fi
if "$STRATA_BIN" pool list >/dev/null 2>&1; then
  die "a Strata daemon already answers on $STRATA_SOCKET (another run? set STRATA_E2E_DIR)"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/fuse-caching.XXXXXX")"
chmod 755 "$WORK"
RESULTS="$WORK/results.tsv" # target  workload  clients  metric  value
META="$WORK/meta.tsv"       # target  key  value
SERIES="$WORK/series.tsv"   # target  workload  clients  comma-separated interval TPS
: >"$RESULTS"
: >"$SERIES"
: >"$META"
cd "$WORK" # runuser keeps the cwd: make it one the database users can read
# Every daemon of the run is started from one snapshot of the binary: a rebuild of
# target/release during the run (another session, an editor's cargo check) cannot mix versions.
STRATA_BIN_ORIG="$STRATA_BIN"
STRATA_BIN_MTIME="$(date -u -r "$STRATA_BIN" +%Y-%m-%dT%H:%M:%SZ)"
cp "$STRATA_BIN" "$WORK/strata"
STRATA_BIN="$WORK/strata"
STRATA_BIN_SHA256="$(sha256sum "$STRATA_BIN" | cut -c1-16)"

MONITOR_PID=""
PGDATA=""
PG_SOCK=""
MYSQLD_PID=""
MY_SOCK=""
STRATA_UP=0
MNT="$STRATA_E2E_DIR/mnt"

pg_as() { bounded runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
psql_q() { bounded "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PG_SOCK" -p "$PG_PORT" -U postgres "$@"; }
pg_running() {
  local pid
  [ -n "$PGDATA" ] || return 1
  pid="$(head -n 1 "$PGDATA/postmaster.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && is_alive "$pid" && grep -q postgres "/proc/$pid/cmdline" 2>/dev/null
}
my_sql() { bounded mariadb --no-defaults --connect-timeout=10 -S "$MY_SOCK" -u root -N -B "$@"; }

stop_databases() {
  if pg_running; then
    log "stopping PostgreSQL"
    pg_as pg_ctl stop -D "$PGDATA" -m fast -w -t 120 >/dev/null 2>&1 ||
      pg_as pg_ctl stop -D "$PGDATA" -m immediate -w -t 30 >/dev/null 2>&1 || true
  fi
  if [ -n "$MYSQLD_PID" ] && kill -0 "$MYSQLD_PID" 2>/dev/null; then
    log "stopping mariadbd (pid $MYSQLD_PID)"
    timeout 120 mariadb-admin --no-defaults -S "$MY_SOCK" -u root shutdown >/dev/null 2>&1 || true
    wait_bg "$MYSQLD_PID" 120
  fi
  MYSQLD_PID=""
}

stop_strata() {
  [ "$STRATA_UP" = 1 ] || return 0
  timeout 60 "$STRATA_BIN" unmount "$MNT" >/dev/null 2>&1 || true
  if ! strata_stop; then
    kill -KILL "$(cat "$STRATA_E2E_DIR/daemon.pid")" 2>/dev/null || true
    umount -l "$MNT" 2>/dev/null || true
  fi
  STRATA_UP=0
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  kill_nap
  [ -z "$MONITOR_PID" ] || kill "$MONITOR_PID" 2>/dev/null
  stop_databases
  stop_strata
  rm -rf "$EXT4_DIR"
  if [ "$rc" -ne 0 ]; then
    print_failure_logs
    printf '[%s %s] FAILED (exit %s) after %ss; work dir kept: %s\n' \
      "$(e2e_ts)" "$E2E_NAME" "$rc" "$(elapsed_since "$T_START")" "$WORK" >&2
  else
    rm -rf "$STRATA_E2E_DIR"
    if [ "${BENCH_KEEP_WORK:-0}" = 1 ]; then log "work dir kept: $WORK"; else rm -rf "$WORK"; fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# What else runs on the machine: a shared machine makes the numbers noisy, so every 5 s the
# CPU used by processes that are not this run's (not descendants of this script or of its
# postmaster; kernel threads not counted) is logged, in % of one CPU, with the busiest of them.
# The report gives its average per target (meta.*.foreign_cpu_pct): judge a run by it.
cat >"$WORK/monitor.py" <<'PY'
import os, sys, time
me, pm_file, out = int(sys.argv[1]), sys.argv[2], open(sys.argv[3], "a", buffering=1)
hz = os.sysconf("SC_CLK_TCK")
def snap():
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        r = st.rfind(")")
        f = st[r + 2:].split()
        procs[int(d)] = (int(f[1]), int(f[11]) + int(f[12]), st[st.find("(") + 1:r])
    return procs
def ours(procs):
    roots = {me}
    try:
        roots.add(int(open(pm_file).read().split()[0]))
    except (OSError, ValueError, IndexError):
        pass
    kids = {}
    for p, (pp, _, _) in procs.items():
        kids.setdefault(pp, []).append(p)
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(kids.get(p, []))
    return seen
prev, t_prev = snap(), time.monotonic()
while True:
    time.sleep(5)
    cur, t = snap(), time.monotonic()
    mine, ticks = ours(cur), (t - t_prev) * hz
    foreign, own = {}, 0
    for p, (pp, cpu, comm) in cur.items():
        d = cpu - prev[p][1] if p in prev else cpu
        if p == 2 or pp == 2 or d <= 0:
            continue  # kernel threads (I/O done for anyone), idle processes
        if p in mine:
            own += d
        else:
            foreign[comm] = foreign.get(comm, 0) + d
    busiest = ",".join(f"{c}:{100 * v / ticks:.0f}" for c, v in sorted(foreign.items(), key=lambda x: -x[1])[:4] if 100 * v / ticks >= 1)
    out.write(f"{time.time():.1f} {100 * sum(foreign.values()) / ticks:.1f} {100 * own / ticks:.1f} {busiest or '-'}\n")
    prev, t_prev = cur, t
PY
: >"$WORK/postmaster.pid"
python3 "$WORK/monitor.py" "$$" "$WORK/postmaster.pid" "$WORK/monitor.log" 2>>"$WORK/monitor.err" &
MONITOR_PID=$!

result() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$RESULTS"; }
# series TARGET WORKLOAD CLIENTS "v1,v2,...": TPS of each 5 s interval of a run.
series() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$SERIES"; }
meta() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$META"; }

# ------------------------------------------------------------------------------ PostgreSQL
bench_postgres() {
  local target="$1" dir="$2" out="$WORK/$1" t0 c j
  PGDATA="$dir/pgdata"
  PG_SOCK="$out/pg-sock"
  install -d -o postgres -g postgres -m 700 "$PG_SOCK"
  install -d -o postgres -g postgres -m 700 "$PGDATA"
  local server_log="$out/postgres.log"
  install -o postgres -g postgres -m 644 /dev/null "$server_log"
  add_failure_log "$server_log"

  log "[$target] PostgreSQL: initdb in $PGDATA"
  pg_as initdb -D "$PGDATA" --auth=trust --username=postgres --encoding=UTF8 --locale=C \
    >"$out/initdb.log" 2>&1 || { cat "$out/initdb.log" >&2; die "initdb failed"; }
  cat >>"$PGDATA/postgresql.conf" <<EOF

# --- scripts/bench/fuse-caching.sh
port = $PG_PORT
listen_addresses = ''
unix_socket_directories = '$PG_SOCK'
fsync = on
synchronous_commit = on
shared_buffers = 128MB
max_connections = 20
logging_collector = off
EOF
  pg_as pg_ctl start -D "$PGDATA" -l "$server_log" -w -t 120 >"$out/pg_ctl.out" 2>&1 ||
    { cat "$out/pg_ctl.out" >&2; die "PostgreSQL did not start"; }
  wait_for "PostgreSQL to accept connections" 60 psql_q -d postgres -c 'select 1'
  head -n 1 "$PGDATA/postmaster.pid" >"$WORK/postmaster.pid" # for the monitor
  meta "$target" pg_wal_sync_method "$(psql_q -d postgres -c 'show wal_sync_method')"
  psql_q -d postgres -c 'create database bench'

  log "[$target] pgbench -i -s $SCALE"
  t0="$(now_s)"
  bounded "$PG_BIN/pgbench" -h "$PG_SOCK" -p "$PG_PORT" -U postgres -i -s "$SCALE" -q bench \
    >"$out/pgbench-init.out" 2>&1 || { cat "$out/pgbench-init.out" >&2; die "pgbench -i failed"; }
  result "$target" pgbench-init "$SCALE" seconds "$(elapsed_since "$t0")"

  for c in 4 1; do
    j=$((c < 2 ? c : 2))
    psql_q -d bench -c 'vacuum analyze'
    psql_q -d bench -c 'checkpoint'
    log "[$target] pgbench -c $c -j $j -T $PG_SECONDS"
    bounded "$PG_BIN/pgbench" -h "$PG_SOCK" -p "$PG_PORT" -U postgres -n -c "$c" -j "$j" \
      -T "$PG_SECONDS" -P 5 bench >"$out/pgbench-c$c.out" 2>&1 ||
      { cat "$out/pgbench-c$c.out" >&2; die "pgbench -c $c failed"; }
    local tps lat failed
    tps="$(awk '/^tps = / { print $3; exit }' "$out/pgbench-c$c.out")"
    lat="$(awk '/^latency average = / { print $4; exit }' "$out/pgbench-c$c.out")"
    failed="$(awk '/^number of failed transactions: / { print $5; exit }' "$out/pgbench-c$c.out")"
    if [ -z "$tps" ] || [ -z "$lat" ]; then cat "$out/pgbench-c$c.out" >&2; die "cannot parse pgbench output"; fi
    [ "${failed:-0}" = 0 ] || die "pgbench -c $c: $failed failed transactions"
    result "$target" pgbench "$c" tps "$tps"
    series "$target" pgbench "$c" "$(awk '/^progress: / { printf "%s%s", sep, $4; sep = "," }' "$out/pgbench-c$c.out")"
    result "$target" pgbench "$c" lat_avg_ms "$lat"
    log "[$target] pgbench -c $c: $tps tps, $lat ms average"
  done

  log "[$target] stopping PostgreSQL"
  pg_as pg_ctl stop -D "$PGDATA" -m fast -w -t 120 >/dev/null || die "PostgreSQL did not stop"
}

# ------------------------------------------------------------------------------ MariaDB
sb() {
  bounded sysbench "$@" --db-driver=mysql --mysql-socket="$MY_SOCK" --mysql-user=sbtest \
    --mysql-password=sbtest --mysql-db=sbtest
}
sb_oltp() {
  sb oltp_read_write --tables="$SB_TABLES" --table-size="$SB_TABLE_SIZE" --rand-type=uniform \
    --range_size=100 "$@"
}

bench_mariadb() {
  local target="$1" dir="$2" out="$WORK/$1" t0 th
  local mydata="$dir/mysql" run_dir="$out/my-run"
  install -d -o mysql -g mysql -m 750 "$run_dir"
  MY_SOCK="$run_dir/mariadbd.sock"
  local err_log="$run_dir/mariadbd.err"
  add_failure_log "$err_log"

  log "[$target] MariaDB: mariadb-install-db into $mydata"
  install -d -o mysql -g mysql -m 750 "$mydata"
  bounded mariadb-install-db --no-defaults --user=mysql --datadir="$mydata" --skip-test-db \
    --auth-root-authentication-method=socket --skip-name-resolve >"$out/install-db.log" 2>&1 ||
    { cat "$out/install-db.log" >&2; die "mariadb-install-db failed"; }
  "$MARIADBD" --no-defaults --user=mysql --datadir="$mydata" --socket="$MY_SOCK" \
    --port="$MY_PORT" --bind-address=127.0.0.1 --pid-file="$run_dir/mariadbd.pid" \
    --log-error="$err_log" --skip-log-bin --skip-name-resolve --max-connections=100 \
    --innodb-flush-log-at-trx-commit=1 --innodb-flush-method=O_DIRECT \
    --innodb-log-file-buffering=OFF --innodb-doublewrite=ON \
    --innodb-buffer-pool-size=128M --innodb-log-file-size=96M >>"$out/mariadbd.stdout" 2>&1 &
  MYSQLD_PID=$!
  local deadline=$((SECONDS + 180))
  until timeout 15 mariadb-admin --no-defaults --connect-timeout=5 -S "$MY_SOCK" -u root ping >/dev/null 2>&1; do
    is_alive "$MYSQLD_PID" || { MYSQLD_PID=""; add_failure_log "$out/mariadbd.stdout"; die "mariadbd exited during start-up"; }
    [ "$SECONDS" -lt "$deadline" ] || die "mariadbd did not accept connections within 180s"
    sleep 0.5
  done
  meta "$target" mariadb_version "$(my_sql -e 'select version()')"
  meta "$target" innodb_redo "$(grep -oE '(File system buffers for log disabled|Buffered log writes).*' "$err_log" | tail -n 1 || true)"
  meta "$target" innodb_aio "$(grep -oE 'Using (io_uring|Linux native AIO|simulated AIO)' "$err_log" | tail -n 1 || true)"
  if grep -qiE 'Failed to set O_DIRECT|O_DIRECT.*(not supported|failed)' "$err_log"; then
    warn "[$target] InnoDB could not use O_DIRECT"
    meta "$target" innodb_o_direct failed
  else
    meta "$target" innodb_o_direct ok
  fi
  my_sql -e "create database sbtest;
    create user sbtest@localhost identified by 'sbtest';
    grant all on sbtest.* to sbtest@localhost;"

  log "[$target] sysbench oltp_read_write prepare (--tables=$SB_TABLES --table-size=$SB_TABLE_SIZE)"
  t0="$(now_s)"
  sb_oltp prepare >"$out/sysbench-prepare.out" 2>&1 ||
    { cat "$out/sysbench-prepare.out" >&2; die "sysbench prepare failed"; }
  result "$target" sysbench-prepare "$SB_TABLES" seconds "$(elapsed_since "$t0")"

  for th in 4 1; do
    log "[$target] sysbench oltp_read_write --threads=$th --time=$MY_SECONDS"
    sb_oltp run --threads="$th" --time="$MY_SECONDS" --percentile=95 --report-interval=5 \
      >"$out/sysbench-t$th.out" 2>&1 ||
      { cat "$out/sysbench-t$th.out" >&2; die "sysbench --threads=$th failed"; }
    local f="$out/sysbench-t$th.out" tps qps avg p95 errs
    tps="$(awk '/^ *transactions:/ { gsub(/\(/, "", $3); print $3; exit }' "$f")"
    qps="$(awk '/^ *queries:/ && /per sec/ { gsub(/\(/, "", $3); print $3; exit }' "$f")"
    avg="$(awk '/^ *avg:/ { print $2; exit }' "$f")"
    p95="$(awk '/^ *95th percentile:/ { print $3; exit }' "$f")"
    errs="$(awk '/^ *ignored errors:/ { print $3; exit }' "$f")"
    if [ -z "$tps" ] || [ -z "$qps" ] || [ -z "$avg" ] || [ -z "$p95" ]; then
      cat "$f" >&2
      die "cannot parse sysbench output"
    fi
    result "$target" sysbench "$th" tps "$tps"
    series "$target" sysbench "$th" "$(awk '/^\[ *[0-9]+s \].* tps: / { for (i = 1; i < NF; i++) if ($i == "tps:") { printf "%s%s", sep, $(i + 1); sep = "," } }' "$f")"
    result "$target" sysbench "$th" qps "$qps"
    result "$target" sysbench "$th" lat_avg_ms "$avg"
    result "$target" sysbench "$th" lat_p95_ms "$p95"
    result "$target" sysbench "$th" ignored_errors "${errs:-0}"
    log "[$target] sysbench --threads=$th: $tps tps, $qps qps, avg $avg ms, p95 $p95 ms"
  done

  log "[$target] stopping mariadbd"
  bounded mariadb-admin --no-defaults -S "$MY_SOCK" -u root shutdown || die "mariadb-admin shutdown failed"
  wait_bg "$MYSQLD_PID" 180
  [ "$WAIT_BG_RC" -eq 0 ] || die "mariadbd did not shut down cleanly (exit $WAIT_BG_RC)"
  MYSQLD_PID=""
}

# ------------------------------------------------------------------------------ sync probe
# The floor under every commit: 8 KiB pwrite + fdatasync in a loop (a WAL-like pattern over a
# 1 MiB file), ${PROBE_SECONDS}s with 1 thread, then with 4 threads (each its own file) to see
# whether concurrent syncs share the work. Runs after the databases, so it cannot disturb them.
PROBE_SECONDS="${PROBE_SECONDS:-3}"
sync_probe() {
  local target="$1" dir="$2" th line ops avg p50 p99
  for th in 1 4; do
    log "[$target] fdatasync probe: $th thread(s), ${PROBE_SECONDS}s"
    line="$(bounded python3 - "$dir/syncprobe" "$th" "$PROBE_SECONDS" <<'PY'
import os, sys, threading, time
base, nth, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lats = [[] for _ in range(nth)]
def worker(i):
    fd = os.open(f"{base}.{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.pwrite(fd, bytes(1 << 20), 0)
    os.fsync(fd)
    buf, end, k = os.urandom(8192), time.monotonic() + secs, 0
    while time.monotonic() < end:
        t = time.perf_counter()
        os.pwrite(fd, buf, (k % 128) * 8192)
        os.fdatasync(fd)
        lats[i].append(time.perf_counter() - t)
        k += 1
    os.close(fd)
    os.unlink(f"{base}.{i}")
t0 = time.monotonic()
ts = [threading.Thread(target=worker, args=(i,)) for i in range(nth)]
for t in ts: t.start()
for t in ts: t.join()
wall = time.monotonic() - t0
allv = sorted(v for l in lats for v in l)
n = len(allv)
print(f"{n / secs:.1f} {1e6 * sum(allv) / n:.1f} {1e6 * allv[n // 2]:.1f} {1e6 * allv[min(n - 1, int(n * 0.99))]:.1f}")
PY
)" || die "fdatasync probe failed on $dir"
    read -r ops avg p50 p99 <<<"$line"
    result "$target" fdatasync-probe "$th" ops_per_s "$ops"
    result "$target" fdatasync-probe "$th" lat_avg_us "$avg"
    result "$target" fdatasync-probe "$th" lat_p50_us "$p50"
    result "$target" fdatasync-probe "$th" lat_p99_us "$p99"
    log "[$target] fdatasync probe, $th thread(s): $ops ops/s, avg $avg us, p50 $p50 us, p99 $p99 us"
  done
}

# ------------------------------------------------------------------------------ targets
run_target() {
  local target="$1" dir t0
  t0="$(now_s)"
  mkdir -p "$WORK/$target"
  meta "$target" loadavg_at_start "$(cut -d' ' -f1-3 /proc/loadavg)"
  meta "$target" start_epoch "$(date +%s.%N)"
  case "$target" in
    ext4)
      rm -rf "$EXT4_DIR"
      mkdir -p "$EXT4_DIR"
      dir="$EXT4_DIR"
      meta "$target" storage "$(findmnt -no FSTYPE,SOURCE,OPTIONS -T "$EXT4_DIR" | tr -s ' ' | cut -c1-200)"
      ;;
    strata-wb | strata-nowb)
      if [ "$target" = strata-nowb ]; then STRATA_SERVE_ARGS="--no-writeback-cache"; else STRATA_SERVE_ARGS=""; fi
      export STRATA_SERVE_ARGS
      log "[$target] fresh Strata daemon: serve $STRATA_SERVE_ARGS (pool $STRATA_POOL_SIZE in $STRATA_E2E_DIR/data)"
      strata_fresh
      add_failure_log "$STRATA_E2E_DIR/daemon.log"
      strata_start
      STRATA_UP=1
      strata_mount "$VOLUME" "$MNT" --size 8G >/dev/null
      [ "$(findmnt -no FSTYPE -M "$MNT")" = fuse ] || die "$MNT is not a FUSE mount"
      dir="$MNT"
      meta "$target" storage "$(findmnt -no FSTYPE,SOURCE,OPTIONS -T "$MNT" | tr -s ' ' | cut -c1-200)"
      meta "$target" serve_args "${STRATA_SERVE_ARGS:-(none)}"
      ;;
  esac
  DB_DIR="$dir"
  require_db_dir postgres
  require_db_dir mysql
  sync
  bench_postgres "$target" "$dir"
  sync
  bench_mariadb "$target" "$dir"
  sync_probe "$target" "$dir"
  # Space the target's data took on /var/tmp (for Strata: the allocated part of the pool image).
  if [ "$target" = ext4 ]; then
    meta "$target" data_on_disk "$(du -sh "$EXT4_DIR" | cut -f1)"
  else
    meta "$target" data_on_disk "$(du -sh "$STRATA_E2E_DIR/data" | cut -f1)"
  fi
  case "$target" in
    ext4) rm -rf "$EXT4_DIR" ;;
    *)
      cp "$STRATA_E2E_DIR/daemon.log" "$WORK/$target/daemon.log"
      stop_strata
      rm -rf "$STRATA_E2E_DIR/data"
      # fuser logs "Failed to send FUSE reply: No such file or directory" when the kernel has
      # already dropped the request (see strata_log_clean): counted, not fatal. Others: warned.
      meta "$target" daemon_log_reply_enoent "$(grep -c 'Failed to send FUSE reply: No such file or directory' "$WORK/$target/daemon.log" || true)"
      if grep -E ' ERROR ' "$WORK/$target/daemon.log" | grep -v 'Failed to send FUSE reply: No such file or directory' >&2; then
        warn "[$target] ERROR lines in the daemon log ($WORK/$target/daemon.log)"
      fi
      ;;
  esac
  meta "$target" end_epoch "$(date +%s.%N)"
  meta "$target" seconds "$(elapsed_since "$t0")"
  log "[$target] done in $(elapsed_since "$t0")s"
  settle
}

# The data of a target is deleted as soon as it is done, and the disk given time to absorb
# that (/var/tmp's ext4 may be mounted with online discard; freeing a pool image of a few GB
# slowed the next target's first minutes in trials) before the next target starts.
SETTLE_SECONDS="${SETTLE_SECONDS:-15}"
settle() {
  log "settling: sync, ${SETTLE_SECONDS}s pause"
  bounded sync
  nap "$SETTLE_SECONDS"
}

log "targets: $TARGETS; pgbench -s $SCALE, ${PG_SECONDS}s per run; sysbench ${MY_SECONDS}s per run; work dir $WORK"
settle
for t in $TARGETS; do run_target "$t"; done
rm -rf "$STRATA_E2E_DIR"

# ------------------------------------------------------------------------------ report
mkdir -p "$(dirname "$OUT_JSON")"
RESULTS="$RESULTS" META="$META" SERIES="$SERIES" MONITOR_LOG="$WORK/monitor.log" JSON_APPEND="${JSON_APPEND:-0}" OUT_JSON="$OUT_JSON" ROOT="$ROOT" TARGETS="$TARGETS" \
  PG_SECONDS="$PG_SECONDS" MY_SECONDS="$MY_SECONDS" SCALE="$SCALE" PROBE_SECONDS="$PROBE_SECONDS" \
  TOTAL_SECONDS="$(elapsed_since "$T_START")" STRATA_BIN="$STRATA_BIN_ORIG" \
  STRATA_BIN_MTIME="$STRATA_BIN_MTIME" STRATA_BIN_SHA256="$STRATA_BIN_SHA256" \
  TEST_SH_RUNNING="$(pgrep -f scripts/test.sh >/dev/null && echo yes || echo no)" \
  python3 - <<'PY'
import json, os, platform, subprocess, datetime

env = os.environ
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""

targets = env["TARGETS"].split()
res, meta = {}, {}
for line in open(env["RESULTS"]):
    t, w, c, m, v = line.rstrip("\n").split("\t")
    res.setdefault(t, {}).setdefault(w, {}).setdefault(c, {})[m] = float(v)
for line in open(env["SERIES"]):
    t, w, c, v = line.rstrip("\n").split("\t")
    res.setdefault(t, {}).setdefault(w, {}).setdefault(c, {})["tps_intervals_5s"] = [float(x) for x in v.split(",") if x]
for line in open(env["META"]):
    t, k, v = line.rstrip("\n").split("\t", 2)
    meta.setdefault(t, {})[k] = v

# Foreign CPU per target from the monitor's samples inside the target's time window.
mon = []
try:
    for line in open(env["MONITOR_LOG"]):
        f = line.split()
        if len(f) >= 4:
            mon.append((float(f[0]), float(f[1]), f[3]))
except OSError:
    pass
for t, m in meta.items():
    if "start_epoch" in m and "end_epoch" in m:
        a, b = float(m.pop("start_epoch")), float(m.pop("end_epoch"))
        inside = [x for x in mon if a + 5 <= x[0] <= b]
        if inside:
            m["foreign_cpu_pct"] = round(sum(x[1] for x in inside) / len(inside), 1)
            m["foreign_cpu_pct_max"] = round(max(x[1] for x in inside), 1)
            tot = {}
            for x in inside:
                for kv in x[2].split(","):
                    if ":" in kv:
                        c, v = kv.rsplit(":", 1)
                        tot[c] = tot.get(c, 0) + float(v)
            m["foreign_busiest"] = ", ".join(f"{c} ({v / len(inside):.0f}%)" for c, v in sorted(tot.items(), key=lambda x: -x[1])[:3]) or "-"

mem_kib = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:")), 0)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
machine = {
    "nproc": os.cpu_count(),
    "cpu": cpu,
    "mem_gib": round(mem_kib / 1024 / 1024, 1),
    "kernel": platform.release(),
    "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
    "var_tmp_fs": sh("findmnt -no FSTYPE,SOURCE -T /var/tmp"),
    "var_tmp_disk_rotational": sh("cat /sys/block/$(lsblk -no PKNAME $(findmnt -no SOURCE -T /var/tmp) 2>/dev/null || basename $(findmnt -no SOURCE -T /var/tmp))/queue/rotational 2>/dev/null"),
    "postgres": sh("/usr/lib/postgresql/15/bin/postgres --version"),
    "mariadb": sh("/usr/sbin/mariadbd --version"),
    "sysbench": sh("sysbench --version"),
}
doc = {
    "benchmark": "fuse-caching",
    "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "command": "scripts/bench/fuse-caching.sh",
    "params": {"PG_SECONDS": int(env["PG_SECONDS"]), "MY_SECONDS": int(env["MY_SECONDS"]),
               "PROBE_SECONDS": float(env["PROBE_SECONDS"]),
               "SCALE": int(env["SCALE"]), "sysbench_tables": 2, "sysbench_table_size": 10000},
    "strata": {"git": sh(f"cd {env['ROOT']} && git rev-parse --short HEAD") +
                      (" (dirty)" if sh(f"cd {env['ROOT']} && git status --porcelain --untracked-files=no") else ""),
               "binary": env["STRATA_BIN"], "binary_mtime_utc": env["STRATA_BIN_MTIME"],
               "binary_sha256_prefix": env["STRATA_BIN_SHA256"]},
    "machine": machine,
    "test_sh_running_at_end": env["TEST_SH_RUNNING"] == "yes",
    "total_seconds": float(env["TOTAL_SECONDS"]),
    "targets": targets,
    "meta": meta,
    "results": res,
}
# The file holds a list of runs: JSON_APPEND=1 adds this one to those already there.
runs = []
if env.get("JSON_APPEND") == "1" and os.path.exists(env["OUT_JSON"]):
    runs = json.load(open(env["OUT_JSON"])).get("runs", [])
with open(env["OUT_JSON"], "w") as f:
    json.dump({"benchmark": "fuse-caching", "runs": runs + [doc]}, f, indent=2, sort_keys=False)
    f.write("\n")

def get(t, w, c, m):
    return res.get(t, {}).get(w, {}).get(c, {}).get(m)

rows = [
    ("PostgreSQL pgbench TPC-B", "pgbench", "4", "tps", "TPS", 0),
    ("PostgreSQL pgbench TPC-B", "pgbench", "4", "lat_avg_ms", "avg latency ms", 2),
    ("PostgreSQL pgbench TPC-B", "pgbench", "1", "tps", "TPS", 0),
    ("PostgreSQL pgbench TPC-B", "pgbench", "1", "lat_avg_ms", "avg latency ms", 2),
    ("MariaDB sysbench oltp_read_write", "sysbench", "4", "tps", "TPS", 0),
    ("MariaDB sysbench oltp_read_write", "sysbench", "4", "qps", "QPS", 0),
    ("MariaDB sysbench oltp_read_write", "sysbench", "4", "lat_avg_ms", "avg latency ms", 2),
    ("MariaDB sysbench oltp_read_write", "sysbench", "4", "lat_p95_ms", "p95 latency ms", 2),
    ("MariaDB sysbench oltp_read_write", "sysbench", "1", "tps", "TPS", 0),
    ("MariaDB sysbench oltp_read_write", "sysbench", "1", "qps", "QPS", 0),
    ("MariaDB sysbench oltp_read_write", "sysbench", "1", "lat_avg_ms", "avg latency ms", 2),
    ("MariaDB sysbench oltp_read_write", "sysbench", "1", "lat_p95_ms", "p95 latency ms", 2),
    ("pgbench -i (load)", "pgbench-init", env["SCALE"], "seconds", "seconds", 1),
    ("sysbench prepare (load)", "sysbench-prepare", "2", "seconds", "seconds", 1),
    ("8 KiB pwrite + fdatasync probe", "fdatasync-probe", "1", "ops_per_s", "ops/s", 0),
    ("8 KiB pwrite + fdatasync probe", "fdatasync-probe", "1", "lat_p50_us", "p50 latency µs", 0),
    ("8 KiB pwrite + fdatasync probe", "fdatasync-probe", "4", "ops_per_s", "ops/s", 0),
    ("8 KiB pwrite + fdatasync probe", "fdatasync-probe", "4", "lat_p50_us", "p50 latency µs", 0),
]
def fmt(v, d):
    return "–" if v is None else f"{v:,.{d}f}"
def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}"
clients_label = {"pgbench": "clients", "sysbench": "threads", "fdatasync-probe": "threads"}
print(f"FUSE caching: PG_SECONDS={env['PG_SECONDS']} MY_SECONDS={env['MY_SECONDS']} SCALE={env['SCALE']}, "
      f"{doc['date_utc']}, total {doc['total_seconds']:.0f} s")
fc = ", ".join(f"{t} {meta[t]['foreign_cpu_pct']}% (max {meta[t]['foreign_cpu_pct_max']}%: {meta[t]['foreign_busiest']})"
              for t in targets if "foreign_cpu_pct" in meta.get(t, {}))
print(f"Other processes' CPU (% of one CPU, mean over each target): {fc or 'not measured'}")
print()
print("| workload | clients | metric | ext4 | Strata writeback | Strata no-writeback | writeback/ext4 | no-writeback/ext4 | writeback/no-writeback |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
for name, w, c, m, label, d in rows:
    e, wb, nw = (get(t, w, c, m) for t in ("ext4", "strata-wb", "strata-nowb"))
    if e is None and wb is None and nw is None:
        continue
    cl = f"{c} {clients_label[w]}" if w in clients_label else "–"
    print(f"| {name} | {cl} | {label} | {fmt(e, d)} | {fmt(wb, d)} | {fmt(nw, d)} | "
          f"{ratio(wb, e)} | {ratio(nw, e)} | {ratio(wb, nw)} |")
PY
log "raw results: $OUT_JSON; total $(elapsed_since "$T_START")s"
