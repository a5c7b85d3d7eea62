#!/usr/bin/env bash
# Storage efficiency on real database data, in one session on the same disk: how much physical
# space PostgreSQL (pgbench, scale SCALE) and MariaDB (sysbench OLTP tables) take on
#
#   ext4         mkfs.ext4 on a loop device (image file of FS_SIZE, losetup --direct-io=on)
#   btrfs-zstd   mkfs.btrfs on a loop device, mounted -o compress=zstd (level 3)
#   strata-off   a Strata volume with compression off   (fresh daemon and pool of FS_SIZE)
#   strata-lz4   ... --compression lz4
#   strata-zstd  ... --compression zstd-3 (ZSTD_LEVEL)
#   strata-POLICY-SIZE  any of the three with its own record size, e.g. strata-zstd-64K
#
# and the TPS each database gets on them (pgbench -c PG_CLIENTS, sysbench oltp_read_write
# --threads MY_THREADS), so that every Strata policy is compared with Strata off measured in
# the same run. Physical space = blocks the file system (df) or the pool (allocated units)
# holds for the data, measured after the load, a checkpoint/flush and two txg commits, minus the
# empty target; apparent = `du --apparent-size` of the data directory.
#
#   cargo build --release -p strata-cli
#   scripts/bench/efficiency.sh                  # ~35 min on 2 cores
#   QUICK=1 scripts/bench/efficiency.sh          # smoke test (scale 2, small tables, 5 s runs)
#   ROUNDS=3 TARGETS="strata-off strata-lz4" scripts/bench/efficiency.sh   # TPS ratios: medians
#
# ROUNDS=N (1) measures every target N times, the order alternating (forward, backward, ...);
# the report gives medians and lists each round's TPS (single rounds swing ±20% here).
#
# Output: docs/benchmarks/efficiency.md (OUT_MD) and the raw numbers next to it (.tsv).
# Environment: TARGETS, FS_SIZE (8G), SCALE (50), PG_CLIENTS (8), PG_SECONDS (60),
# MY_TABLES (8), MY_TABLE_SIZE (200000), MY_THREADS (8), MY_SECONDS (60), ZSTD_LEVEL (3),
# STRATA_RECORD_SIZE (16K: the volumes' record size; larger records compress further, see
# docs/efficiency.md on compaction),
# PEERS_DIR (/var/tmp/strata-eff), PG_PORT (55472), MY_PORT (53346),
# STRATA_BIN (target/release/strata), STEP_TIMEOUT. The daemon's control socket is
# $PEERS_DIR/strata/strata.sock (STRATA_SOCKET); STRATA_API (TCP) is ignored.
set -euo pipefail
unset STRATA_API # the CLI would talk TCP to it instead of this run's daemon's socket
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
E2E_NAME=efficiency
CMDLINE="$(env | grep -E '^(QUICK|ROUNDS|TARGETS|FS_SIZE|SCALE|PG_[A-Z_]+|MY_[A-Z_]+|ZSTD_LEVEL|STRATA_RECORD_SIZE|OUT_MD)=' | sort | tr '\n' ' ' || true)$0 $*"
QUICK="${QUICK:-0}"
q() { if [ "$QUICK" = 1 ]; then printf '%s' "$1"; else printf '%s' "$2"; fi; }
TARGETS="${TARGETS:-ext4 btrfs-zstd strata-off strata-lz4 strata-zstd}"
ROUNDS="${ROUNDS:-1}"
case "$ROUNDS" in '' | *[!0-9]* | 0) echo "ROUNDS=$ROUNDS: use a whole number of rounds, 1 or more" >&2; exit 2 ;; esac
FS_SIZE="${FS_SIZE:-8G}"
SCALE="${SCALE:-$(q 2 50)}"
PG_CLIENTS="${PG_CLIENTS:-8}"
PG_SECONDS="${PG_SECONDS:-$(q 5 60)}"
MY_TABLES="${MY_TABLES:-$(q 2 8)}"
MY_TABLE_SIZE="${MY_TABLE_SIZE:-$(q 10000 200000)}"
MY_THREADS="${MY_THREADS:-8}"
MY_SECONDS="${MY_SECONDS:-$(q 5 60)}"
ZSTD_LEVEL="${ZSTD_LEVEL:-3}"
STRATA_RECORD_SIZE="${STRATA_RECORD_SIZE:-16K}"
PEERS_DIR="${PEERS_DIR:-/var/tmp/strata-eff}"
PG_PORT="${PG_PORT:-55472}"
MY_PORT="${MY_PORT:-53346}"
OUT_MD="${OUT_MD:-$ROOT/docs/benchmarks/efficiency.md}"
: "${STEP_TIMEOUT:=1800}"
export STEP_TIMEOUT
export STRATA_E2E_DIR="$PEERS_DIR/strata"
export STRATA_SOCKET="$STRATA_E2E_DIR/strata.sock"
export STRATA_BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
export STRATA_POOL_SIZE="$FS_SIZE"
PG_BIN=/usr/lib/postgresql/15/bin
MNT="$PEERS_DIR/mnt"
# shellcheck source=scripts/e2e/db-common.sh
. "$ROOT/scripts/e2e/db-common.sh"
# shellcheck source=scripts/e2e/strata-env.sh
. "$ROOT/scripts/e2e/strata-env.sh"

[ "$(id -u)" -eq 0 ] || die "run as root (loop devices, mounts, database servers)"
for t in $TARGETS; do
  case "$t" in
    ext4 | btrfs-zstd | strata-off | strata-lz4 | strata-zstd) ;;
    strata-off-[0-9]*K | strata-lz4-[0-9]*K | strata-zstd-[0-9]*K) ;;
    *) die "unknown target $t (ext4 btrfs-zstd strata-off strata-lz4 strata-zstd, or strata-POLICY-SIZE like strata-zstd-64K)" ;;
  esac
done
ensure_pkgs /sbin/mkfs.btrfs /usr/sbin/compsize -- btrfs-progs btrfs-compsize
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/pgbench" -- postgresql-15 postgresql-contrib
ensure_pkgs /usr/sbin/mariadbd /usr/bin/mariadb-install-db /usr/bin/sysbench -- mariadb-server mariadb-client sysbench
[ -x "$STRATA_BIN" ] || die "no strata binary at $STRATA_BIN (cargo build --release -p strata-cli)"
for p in "$PG_PORT" "$MY_PORT"; do port_in_use "$p" && die "port $p is in use"; done
findmnt -rn -o TARGET | grep -q "^$PEERS_DIR" && die "something is mounted under $PEERS_DIR"
rm -rf "$PEERS_DIR" && mkdir -p "$MNT" && chmod 755 "$PEERS_DIR"
WORK="$(mktemp -d /tmp/efficiency.XXXXXX)" && chmod 755 "$WORK"
RESULTS="$WORK/results.tsv" # target key value
: >"$RESULTS"
result() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RESULTS"; log "[$1] $2 = $3"; }
LOOP_DEV="" STRATA_UP=0 PGDATA="" MYSQLD_PID="" MY_SOCK=""
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
T0="$(now_s)"

pg_as() { bounded runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
psql_q() { bounded "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$WORK/pg" -p "$PG_PORT" -U postgres "$@"; }
my_sql() { bounded mariadb --no-defaults -S "$MY_SOCK" -u root -N -B "$@"; }
sb() {
  bounded sysbench oltp_read_write --db-driver=mysql --mysql-socket="$MY_SOCK" --mysql-user=sbtest \
    --mysql-password=sbtest --mysql-db=sbtest --tables="$MY_TABLES" --table-size="$MY_TABLE_SIZE" \
    --rand-type=uniform --range_size=100 "$@"
}

teardown() {
  # Best effort, every step: a failure here must not hide the one that got us here.
  if [ -n "$PGDATA" ]; then pg_as pg_ctl stop -D "$PGDATA" -m fast -w -t 120 >/dev/null 2>&1 || true; PGDATA=""; fi
  if [ -n "$MYSQLD_PID" ]; then
    timeout 120 mariadb-admin --no-defaults -S "$MY_SOCK" -u root shutdown >/dev/null 2>&1 || true
    wait_bg "$MYSQLD_PID" 120 || true
    MYSQLD_PID=""
  fi
  if [ "$STRATA_UP" = 1 ]; then
    timeout 60 "$STRATA_BIN" unmount "$MNT" >/dev/null 2>&1 || true
    strata_stop || kill -KILL "$(cat "$STRATA_E2E_DIR/daemon.pid")" 2>/dev/null || true
    STRATA_UP=0
  fi
  if findmnt -M "$MNT" >/dev/null 2>&1; then timeout 60 umount "$MNT" || umount -l "$MNT" || true; fi
  if [ -n "$LOOP_DEV" ]; then losetup -d "$LOOP_DEV" || true; fi
  LOOP_DEV=""
  rm -f "$PEERS_DIR"/*.img
}
cleanup() {
  local rc=$?
  trap - EXIT
  teardown
  if [ "$rc" -ne 0 ]; then print_failure_logs; echo "FAILED; work dir kept: $WORK" >&2; else rm -rf "$PEERS_DIR"; fi
  exit "$rc"
}
trap cleanup EXIT

setup() { # target
  case "$1" in
    ext4 | btrfs-zstd)
      local img="$PEERS_DIR/$1.img"
      truncate -s "$FS_SIZE" "$img"
      if [ "$1" = ext4 ]; then bounded mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$img"; else bounded mkfs.btrfs -q -f "$img" >/dev/null; fi
      LOOP_DEV="$(losetup --direct-io=on -f --show "$img")"
      if [ "$1" = ext4 ]; then mount "$LOOP_DEV" "$MNT"; else mount -o compress=zstd "$LOOP_DEV" "$MNT"; fi
      ;;
    strata-*)
      strata_fresh
      add_failure_log "$STRATA_E2E_DIR/daemon.log"
      strata_start
      STRATA_UP=1
      local spec="${1#strata-}" comp rs="$STRATA_RECORD_SIZE"
      comp="${spec%%-*}"
      [ "$spec" != "$comp" ] && rs="${spec#*-}"
      [ "$comp" = zstd ] && comp="zstd-$ZSTD_LEVEL"
      strata_mount bench "$MNT" --size "$FS_SIZE" --compression "$comp" --record-size "$rs" >/dev/null
      ;;
  esac
  chmod 755 "$MNT"
}

# Physical bytes the target holds now (after everything written so far is on disk).
physical() { # target
  sync -f "$MNT" 2>/dev/null || sync
  case "$1" in
    strata-*)
      sleep 11 # two background commits (5 s each): the pool's figures are as of the last txg
      "$STRATA_BIN" --json pool status default | python3 -c 'import json,sys; print(json.load(sys.stdin)["allocated_bytes"])'
      ;;
    *) df -B1 --output=used "$MNT" | tail -n 1 | tr -d ' ' ;;
  esac
}

measure() { # target db dir base
  local target="$1" db="$2" dir="$3" base="$4" now
  now="$(physical "$target")"
  result "$target" "$db-physical" "$((now - base))"
  result "$target" "$db-apparent" "$(du -s -B1 --apparent-size "$dir" | cut -f1)"
  case "$target" in
    btrfs-zstd) result "$target" "$db-compsize" "$(compsize -b "$dir" 2>/dev/null | awk '/^TOTAL/ { print $3 "/" $4 }')" ;;
    strata-*) result "$target" "$db-volume" "$("$STRATA_BIN" --json volume show default/bench |
      python3 -c 'import json,sys; v=json.load(sys.stdin); print(str(v["used_bytes"]) + "/" + str(v["logical_bytes"]))')" ;;
  esac
}

bench_pg() { # target
  local target="$1" base out
  base="$(physical "$target")"
  PGDATA="$MNT/pgdata"
  install -d -o postgres -g postgres -m 700 "$PGDATA" "$WORK/pg"
  install -o postgres -g postgres -m 644 /dev/null "$WORK/$target-pg.log"
  add_failure_log "$WORK/$target-pg.log"
  pg_as initdb -D "$PGDATA" --auth=trust --username=postgres --locale=C >/dev/null
  printf "port = %s\nlisten_addresses = ''\nunix_socket_directories = '%s'\nsynchronous_commit = on\nshared_buffers = 128MB\n" \
    "$PG_PORT" "$WORK/pg" >>"$PGDATA/postgresql.conf"
  pg_as pg_ctl start -D "$PGDATA" -l "$WORK/$target-pg.log" -w -t 120 >/dev/null
  psql_q -d postgres -c 'create database bench'
  log "[$target] pgbench -i -s $SCALE"
  local t0; t0="$(now_s)"
  bounded "$PG_BIN/pgbench" -h "$WORK/pg" -p "$PG_PORT" -U postgres -i -s "$SCALE" -q bench >"$WORK/$target-pgi.out" 2>&1
  result "$target" pg-load-seconds "$(elapsed_since "$t0")"
  psql_q -d bench -c 'vacuum analyze'
  psql_q -d bench -c 'checkpoint'
  measure "$target" pg "$PGDATA" "$base"
  log "[$target] pgbench -c $PG_CLIENTS -T $PG_SECONDS"
  out="$WORK/$target-pgbench.out"
  bounded "$PG_BIN/pgbench" -h "$WORK/pg" -p "$PG_PORT" -U postgres -n -c "$PG_CLIENTS" -j 2 -T "$PG_SECONDS" bench >"$out" 2>&1 ||
    { cat "$out" >&2; die "pgbench failed"; }
  result "$target" pg-tps "$(awk '/^tps = / { print $3; exit }' "$out")"
  pg_as pg_ctl stop -D "$PGDATA" -m fast -w -t 120 >/dev/null
  rm -rf "$PGDATA"
  PGDATA=""
}

bench_my() { # target
  local target="$1" base out run="$WORK/my-$1"
  base="$(physical "$target")"
  install -d -o mysql -g mysql -m 750 "$run" "$MNT/mysql"
  MY_SOCK="$run/sock"
  add_failure_log "$run/err"
  bounded mariadb-install-db --no-defaults --user=mysql --datadir="$MNT/mysql" --skip-test-db \
    --auth-root-authentication-method=socket >"$run/install.log" 2>&1
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$MNT/mysql" --socket="$MY_SOCK" --port="$MY_PORT" \
    --bind-address=127.0.0.1 --log-error="$run/err" --skip-log-bin --innodb-flush-log-at-trx-commit=1 \
    --innodb-flush-method=O_DIRECT --innodb-buffer-pool-size=128M --innodb-log-file-size=96M >/dev/null 2>&1 &
  MYSQLD_PID=$!
  wait_for "mariadbd to accept connections" 180 mariadb-admin --no-defaults -S "$MY_SOCK" -u root ping
  my_sql -e "create database sbtest; create user sbtest@localhost identified by 'sbtest'; grant all on sbtest.* to sbtest@localhost;"
  log "[$target] sysbench prepare --tables=$MY_TABLES --table-size=$MY_TABLE_SIZE"
  local t0; t0="$(now_s)"
  sb prepare --threads=2 >"$run/prepare.out" 2>&1 || { cat "$run/prepare.out" >&2; die "sysbench prepare failed"; }
  result "$target" my-load-seconds "$(elapsed_since "$t0")"
  my_sql -e "set global innodb_max_dirty_pages_pct = 0;" && sleep 5
  measure "$target" my "$MNT/mysql" "$base"
  out="$run/run.out"
  log "[$target] sysbench run --threads=$MY_THREADS --time=$MY_SECONDS"
  sb run --threads="$MY_THREADS" --time="$MY_SECONDS" >"$out" 2>&1 || { cat "$out" >&2; die "sysbench run failed"; }
  result "$target" my-tps "$(awk '/^ *transactions:/ { gsub(/\(/, "", $3); print $3; exit }' "$out")"
  bounded mariadb-admin --no-defaults -S "$MY_SOCK" -u root shutdown
  wait_bg "$MYSQLD_PID" 180
  MYSQLD_PID=""
  rm -rf "$MNT/mysql"
}

REVERSED="$(printf '%s\n' $TARGETS | tac | tr '\n' ' ')"
for round in $(seq 1 "$ROUNDS"); do
  order="$TARGETS"
  [ $((round % 2)) -eq 0 ] && order="$REVERSED"
  for t in $order; do
    log "[$t] round $round/$ROUNDS: fresh $FS_SIZE target"
    setup "$t"
    bench_pg "$t"
    bench_my "$t"
    teardown
  done
done

LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)"
ROUNDS="$ROUNDS" RESULTS="$RESULTS" OUT_MD="$OUT_MD" CMDLINE="$CMDLINE" LOAD_START="$LOAD_START" LOAD_END="$LOAD_END" \
  SECONDS_TOTAL="$(elapsed_since "$T0")" SCALE="$SCALE" PG_CLIENTS="$PG_CLIENTS" PG_SECONDS="$PG_SECONDS" \
  MY_TABLES="$MY_TABLES" MY_TABLE_SIZE="$MY_TABLE_SIZE" MY_THREADS="$MY_THREADS" MY_SECONDS="$MY_SECONDS" \
  FS_SIZE="$FS_SIZE" ZSTD_LEVEL="$ZSTD_LEVEL" STRATA_RECORD_SIZE="$STRATA_RECORD_SIZE" STRATA_REV="$(git -C "$ROOT" rev-parse --short HEAD)" \
  python3 "$ROOT/scripts/bench/efficiency_report.py"
cp "$RESULTS" "${OUT_MD%.md}.tsv"
log "done in $(elapsed_since "$T0")s: $OUT_MD"
