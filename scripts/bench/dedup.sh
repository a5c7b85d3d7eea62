#!/usr/bin/env bash
# Deduplication on real database files: a PostgreSQL data directory (pgbench scale SCALE),
# then a copy of it (`cp -a`: the "copy the database for a test run" case), on a Strata volume
# with dedup off and one with it on (both lz4); the physical space each step takes, read from
# the pool after the daemon's commits.
#
#   cargo build --release -p strata-cli
#   scripts/bench/dedup.sh                 # ~3 min on 2 cores
#
# Output: a Markdown table on stdout (docs/benchmarks/efficiency.md has the last one).
# Environment: SCALE (20), FS_SIZE (8G), WORK (/var/tmp/strata-dedup), PG_PORT (55473),
# STRATA_BIN (target/release/strata), STEP_TIMEOUT. The daemon's control socket is
# $WORK/strata/strata.sock (STRATA_SOCKET); STRATA_API (TCP) is ignored.
set -euo pipefail
unset STRATA_API # the CLI would talk TCP to it instead of this run's daemon's socket
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
E2E_NAME=dedup
SCALE="${SCALE:-20}"
FS_SIZE="${FS_SIZE:-8G}"
WORK="${WORK:-/var/tmp/strata-dedup}"
PG_PORT="${PG_PORT:-55473}"
: "${STEP_TIMEOUT:=900}"
export STEP_TIMEOUT
export STRATA_E2E_DIR="$WORK/strata"
export STRATA_SOCKET="$STRATA_E2E_DIR/strata.sock"
export STRATA_BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
export STRATA_POOL_SIZE="$FS_SIZE"
PG_BIN=/usr/lib/postgresql/15/bin
MNT="$WORK/mnt"
# shellcheck source=scripts/e2e/db-common.sh
. "$ROOT/scripts/e2e/db-common.sh"
# shellcheck source=scripts/e2e/strata-env.sh
. "$ROOT/scripts/e2e/strata-env.sh"

[ "$(id -u)" -eq 0 ] || die "run as root (FUSE mounts, the database server)"
case "$SCALE" in '' | *[!0-9]* | 0) die "SCALE=$SCALE: use a whole pgbench scale, 1 or more" ;; esac
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/pgbench" -- postgresql-15 postgresql-contrib
[ -x "$STRATA_BIN" ] || die "no strata binary at $STRATA_BIN (cargo build --release -p strata-cli)"
port_in_use "$PG_PORT" && die "port $PG_PORT is in use"

PGDATA="" STRATA_UP=0
pg_as() { bounded runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
cleanup() {
  local rc=$?
  trap - EXIT
  if [ -n "$PGDATA" ]; then pg_as pg_ctl stop -D "$PGDATA" -m fast -w -t 120 >/dev/null 2>&1 || true; fi
  if [ "$STRATA_UP" = 1 ]; then
    timeout 60 "$STRATA_BIN" unmount "$MNT" >/dev/null 2>&1 || true
    strata_stop || true
  fi
  [ "$rc" -ne 0 ] && print_failure_logs
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

# Bytes the pool holds, after two background commits (5 s each) made everything count.
allocated() {
  sync -f "$MNT" 2>/dev/null || sync
  sleep 11
  "$STRATA_BIN" --json pool status default | python3 -c 'import json,sys; print(json.load(sys.stdin)["allocated_bytes"])'
}
dedup_saved() {
  "$STRATA_BIN" --json pool status default | python3 -c 'import json,sys; print(json.load(sys.stdin)["dedup_saved_bytes"])'
}
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }

ROWS=()
for dedup in off on; do
  rm -rf "$WORK"
  mkdir -p "$MNT" "$WORK/pg"
  chown postgres "$WORK/pg"
  strata_fresh
  add_failure_log "$STRATA_E2E_DIR/daemon.log"
  strata_start
  STRATA_UP=1
  strata_mount bench "$MNT" --size "$FS_SIZE" --compression lz4 --dedup "$dedup" >/dev/null
  chmod 755 "$MNT"
  empty="$(allocated)"
  PGDATA="$MNT/pg1"
  install -d -o postgres -g postgres -m 700 "$PGDATA"
  pg_as initdb -D "$PGDATA" --auth=trust --username=postgres --locale=C >/dev/null
  printf "port = %s\nlisten_addresses = ''\nunix_socket_directories = '%s'\n" "$PG_PORT" "$WORK/pg" >>"$PGDATA/postgresql.conf"
  pg_as pg_ctl start -D "$PGDATA" -l "$WORK/pg/server.log" -w -t 120 >/dev/null
  add_failure_log "$WORK/pg/server.log"
  log "[dedup $dedup] pgbench -i -s $SCALE"
  bounded "$PG_BIN/pgbench" -h "$WORK/pg" -p "$PG_PORT" -U postgres -i -s "$SCALE" -q postgres >"$WORK/pgi.out" 2>&1 ||
    { cat "$WORK/pgi.out" >&2; die "pgbench -i failed"; }
  bounded "$PG_BIN/psql" -X -q -h "$WORK/pg" -p "$PG_PORT" -U postgres -c checkpoint postgres
  pg_as pg_ctl stop -D "$PGDATA" -m fast -w -t 120 >/dev/null
  PGDATA=""
  apparent="$(du -s -B1 --apparent-size "$MNT/pg1" | cut -f1)"
  loaded="$(allocated)"
  log "[dedup $dedup] cp -a pg1 pg2"
  t0="$(now_s)"
  bounded cp -a "$MNT/pg1" "$MNT/pg2"
  copy_s="$(elapsed_since "$t0")"
  copied="$(allocated)"
  # The copy must be the same bytes.
  bounded diff -r "$MNT/pg1" "$MNT/pg2" >/dev/null || die "the copy differs from the original"
  saved="$(dedup_saved)"
  ROWS+=("| $dedup | $(mib "$apparent") | $(mib $((loaded - empty))) | $(mib $((copied - loaded))) | ${copy_s} | $(mib "$saved") |")
  timeout 60 "$STRATA_BIN" unmount "$MNT" >/dev/null
  strata_stop
  STRATA_UP=0
done

echo
echo "PostgreSQL data directory (pgbench -i -s $SCALE), then \`cp -a\` of it, on a Strata lz4 volume:"
echo
echo "| dedup | data dir (apparent) | physical after load | physical the copy added | copy s | dedup saved (pool) |"
echo "|---|---:|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
