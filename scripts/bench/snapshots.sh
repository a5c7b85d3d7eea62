#!/usr/bin/env bash
# Snapshot benchmarks (issue 5), one command, release build:
#   1. snapshot-create latency under pgbench load on a 1 GiB and a 20 GiB volume (the same
#      small range is the target: creation is O(1) in the volume's size);
#   2. pgbench TPS on the live volume with 0 and with 500 snapshots present (target ratio
#      >= 0.97), measured 0 -> 500 -> 0 so drift shows;
#   3. time from `clone create` to PostgreSQL accepting queries on a clone of a ~10 GiB
#      database (target: a few seconds, dominated by PostgreSQL's start): pgbench scale 50
#      plus a table of CLONE_GIB of rows, loaded WAL-skipping (wal_level=minimal, created and
#      filled in one transaction) because bulk loading is not what this measures.
# Prints a Markdown table and writes it to docs/benchmarks/snapshots.md (with the command).
#
#   bash scripts/bench/snapshots.sh            (root; ~30-40 min with the defaults)
#   SMALL=1 bash scripts/bench/snapshots.sh    (quick smoke: small sizes, a few minutes)
#
# Environment: FILL_SMALL_GIB / FILL_LARGE_GIB (1 / 20), SNAPS (500), PG_SECONDS (60),
# CLONE_GIB (10), LAT_SNAPS (20 snapshots per size), OUT (docs/benchmarks/snapshots.md),
# PARTS (default "1 2 3": which of the three to run). The daemon's control socket is
# /var/tmp/strata-bench-snap/strata.sock (STRATA_SOCKET); STRATA_API (TCP) is ignored.
set -euo pipefail
unset STRATA_API # the CLI would talk TCP to it instead of this run's daemon's socket
cd "$(dirname "$0")/../.."
ROOT="$PWD"
E2E_NAME=bench-snapshots
STEP_TIMEOUT=7200
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
if [ "${SMALL:-0}" = 1 ]; then
  : "${FILL_SMALL_GIB:=0.25}" "${FILL_LARGE_GIB:=2}" "${SNAPS:=50}" "${PG_SECONDS:=15}" "${CLONE_GIB:=0.5}" "${LAT_SNAPS:=8}"
fi
FILL_SMALL_GIB="${FILL_SMALL_GIB:-1}"
FILL_LARGE_GIB="${FILL_LARGE_GIB:-20}"
SNAPS="${SNAPS:-500}"
PG_SECONDS="${PG_SECONDS:-60}"
CLONE_GIB="${CLONE_GIB:-10}"
LAT_SNAPS="${LAT_SNAPS:-20}"
PARTS="${PARTS:-1 2 3}"
part() { [[ " $PARTS " == *" $1 "* ]]; }
OUT="${OUT:-$ROOT/docs/benchmarks/snapshots.md}"
PG_BIN=/usr/lib/postgresql/15/bin
export STRATA_E2E_DIR=/var/tmp/strata-bench-snap STRATA_POOL_SIZE=40G
export STRATA_SOCKET="$STRATA_E2E_DIR/strata.sock"
export STRATA_BIN="$ROOT/target/release/strata"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/pgbench" -- postgresql-15 postgresql-contrib
log "building the release binary"
cargo build --release -q -p strata-cli
# shellcheck source=scripts/e2e/strata-env.sh
source scripts/e2e/strata-env.sh
strata_fresh
trap 'trap - ERR; set +e; for d in "$STRATA_E2E_DIR"/mnt/*/pgdata; do runuser -u postgres -- $PG_BIN/pg_ctl stop -D "$d" -m immediate >/dev/null 2>&1; done; strata_stop' EXIT
strata_start
M="$STRATA_E2E_DIR/mnt"
SOCK="$STRATA_E2E_DIR/sock"
LOGS="$STRATA_E2E_DIR/logs"
mkdir -p "$SOCK" "$LOGS" && chown postgres: "$SOCK" "$LOGS" && chmod 755 "$STRATA_E2E_DIR"
RESULTS="$STRATA_E2E_DIR/results.md"
: >"$RESULTS"
row() { printf '%s\n' "$*" | tee -a "$RESULTS"; }
ms_since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }
stats() { sort -n | awk '{ v[NR] = $1 } END { printf "%.1f | %.1f | %.1f", v[int((NR + 1) / 2)], v[int(NR * 0.9 + 0.5)], v[NR] }'; }

pg_init() { # VOLUME PORT SCALE
  local dir="$M/$1/pgdata"
  install -d -o postgres -g postgres -m 700 "$dir"
  runuser -u postgres -- "$PG_BIN/initdb" -D "$dir" --auth=trust -U postgres >/dev/null
  printf "shared_buffers = 256MB\nmax_wal_size = 4GB\nsynchronous_commit = on\n" >>"$dir/postgresql.conf"
  pg_start "$1" "$2"
  "$PG_BIN/psql" -X -q -h "$SOCK" -p "$2" -U postgres -c "create database bench"
  "$PG_BIN/pgbench" -h "$SOCK" -p "$2" -U postgres -i -q -I dtGvp -s "$3" bench >/dev/null 2>&1
}
pg_start() { runuser -u postgres -- "$PG_BIN/pg_ctl" start -D "$M/$1/pgdata" -l "$LOGS/$1.log" -w -t 600 \
  -o "-p $2 -k $SOCK -c listen_addresses=''" >/dev/null; }
pg_stop() { runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$M/$1/pgdata" -m fast -w >/dev/null; }
tps() { # PORT SECONDS
  "$PG_BIN/pgbench" -h "$SOCK" -p "$1" -U postgres -c 4 -j 2 -T "$2" -n bench 2>/dev/null |
    awk '/^tps/ { printf "%.0f", $3 }'
}

# ------------------------------------------------------------------ 1. create latency vs size
if part 1; then
row "## Snapshot create latency under pgbench load (4 clients), $LAT_SNAPS snapshots each"
row ""
row "| volume size | median ms | p90 ms | max ms |"
row "|---|---:|---:|---:|"
port=55460
for gib in "$FILL_SMALL_GIB" "$FILL_LARGE_GIB"; do
  vol="size$port"
  strata_mount "$vol" "$M/$vol"
  log "[$gib GiB] filling the volume"
  mb="$(awk -v g="$gib" 'BEGIN { printf "%d", g * 1024 }')"
  head -c "$((mb * 1024 * 1024))" /dev/urandom >"$M/$vol/fill"
  sync -f "$M/$vol/fill" # data at rest: not gigabytes of dirty pages for the first syncfs
  pg_init "$vol" "$port" 10
  "$PG_BIN/psql" -X -q -h "$SOCK" -p "$port" -U postgres -c checkpoint
  "$PG_BIN/pgbench" -h "$SOCK" -p "$port" -U postgres -c 4 -j 2 -T $((LAT_SNAPS * 2 + 10)) -n bench >/dev/null 2>&1 &
  bench=$!
  sleep 5
  : >"$STRATA_E2E_DIR/lat"
  for i in $(seq 1 "$LAT_SNAPS"); do
    t0="$(now_s)"
    "$STRATA_BIN" snapshot create "default/$vol@l$i" >/dev/null
    ms_since "$t0" >>"$STRATA_E2E_DIR/lat"
    echo >>"$STRATA_E2E_DIR/lat"
    sleep 1
  done
  wait "$bench" || true
  used="$("$STRATA_BIN" --json volume show "default/$vol" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["used_bytes"] / 2**30, 1))')"
  row "| $used GiB | $(grep . "$STRATA_E2E_DIR/lat" | stats) |"
  pg_stop "$vol"
  "$STRATA_BIN" unmount "$M/$vol" >/dev/null
  "$STRATA_BIN" volume delete --recursive "default/$vol" >/dev/null # and its snapshots: room for the next part
  port=$((port + 1))
done
fi

# ------------------------------------------------------------------ 2. TPS with 0 / N snapshots
if part 2; then
log "pgbench scale 50 for the TPS runs"
strata_mount tps "$M/tps"
pg_init tps 55470 50
a="$(tps 55470 "$PG_SECONDS")"
log "0 snapshots: $a tps; taking $SNAPS snapshots under light load"
"$PG_BIN/pgbench" -h "$SOCK" -p 55470 -U postgres -c 1 -T 100000 -n -R 50 bench >/dev/null 2>&1 &
light=$!
for i in $(seq 1 "$SNAPS"); do "$STRATA_BIN" snapshot create "default/tps@n$i" >/dev/null; done
kill "$light" 2>/dev/null || true
wait "$light" 2>/dev/null || true
b="$(tps 55470 "$PG_SECONDS")"
log "$SNAPS snapshots: $b tps; deleting them"
t0="$(now_s)"
for i in $(seq 1 "$SNAPS"); do "$STRATA_BIN" snapshot delete "default/tps@n$i" >/dev/null; done
del_ms="$(ms_since "$t0")"
c="$(tps 55470 "$PG_SECONDS")"
row ""
row "## pgbench (scale 50, 4 clients, ${PG_SECONDS} s) with snapshots present"
row ""
row "| snapshots | TPS |"
row "|---:|---:|"
row "| 0 | $a |"
row "| $SNAPS | $b |"
row "| 0 (after deleting them) | $c |"
row ""
row "Ratio $SNAPS / mean(0, 0): **$(awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { printf "%.3f", b / ((a + c) / 2) }')** (target >= 0.97). Deleting the $SNAPS snapshots took $(awk -v m="$del_ms" 'BEGIN { printf "%.1f", m / 1000 }') s."
pg_stop tps
fi

# ------------------------------------------------------------------ 3. clone of a big database
if part 3; then
log "a ~$CLONE_GIB GiB database for the clone test"
strata_mount big "$M/big"
t0="$(now_s)"
pg_init big 55480 50
rows="$(awk -v g="$CLONE_GIB" 'BEGIN { printf "%d", g * 1024 * 1024 * 1024 / 1100 }')"
printf "wal_level = minimal\nmax_wal_senders = 0\n" >>"$M/big/pgdata/postgresql.conf"
pg_stop big
pg_start big 55480
"$PG_BIN/psql" -X -q -h "$SOCK" -p 55480 -U postgres -d bench -v ON_ERROR_STOP=1 <<SQL
begin;
create table pad (id bigint primary key, payload text);
insert into pad select g, repeat(md5(g::text), 30) from generate_series(1, $rows) g;
commit;
checkpoint;
SQL
pg_stop big
# Back to the default WAL level: pg_backup_start (the --quiesce below) needs replica.
printf "wal_level = replica\nmax_wal_senders = 10\n" >>"$M/big/pgdata/postgresql.conf"
pg_start big 55480
load_s="$(elapsed_since "$t0")"
dbsize="$("$PG_BIN/psql" -X -At -h "$SOCK" -p 55480 -U postgres -d bench -c "select pg_size_pretty(pg_database_size('bench'))")"
"$PG_BIN/pgbench" -h "$SOCK" -p 55480 -U postgres -c 4 -j 2 -T 30 -n bench >/dev/null 2>&1 &
bench=$!
sleep 10
# As an administrator cloning a running database would: quiesce (CHECKPOINT), so the clone
# replays seconds of WAL, not everything since the last timed checkpoint.
"$STRATA_BIN" snapshot create default/big@forclone --quiesce "postgresql://postgres@/bench?host=$SOCK&port=55480" >/dev/null
t0="$(now_s)"
"$STRATA_BIN" clone create default/big@forclone default/bigclone >/dev/null
clone_ms="$(ms_since "$t0")"
"$STRATA_BIN" mount default/bigclone "$M/bigclone"
rm -f "$M/bigclone/pgdata/postmaster.pid"
pg_start bigclone 55481
"$PG_BIN/psql" -X -q -h "$SOCK" -p 55481 -U postgres -d bench -c "select count(*) from pgbench_branches" >/dev/null
ready_s="$(elapsed_since "$t0")"
wait "$bench" || true
row ""
row "## Clone of a $dbsize database (pgbench scale 50 + $CLONE_GIB GiB table, loaded in $load_s s) under pgbench load, from a --quiesce snapshot"
row ""
row "| clone create (API) | clone create -> PostgreSQL accepting queries |"
row "|---:|---:|"
row "| $clone_ms ms | $ready_s s |"
pg_stop bigclone
pg_stop big
fi

mkdir -p "$(dirname "$OUT")"
{
  echo "# Snapshot benchmarks"
  echo
  echo "Command: \`PARTS=\"$PARTS\" bash scripts/bench/snapshots.sh\`$( [ "${SMALL:-0}" = 1 ] && echo ' with SMALL=1 (smoke sizes)')."
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -r);"
  echo "pool: sparse image on $(df -T /var/tmp | awk 'NR == 2 { print $2 }'); release build; $(date -u +%F)."
  echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: compare within a run)."
  echo
  cat "$RESULTS"
} >"$OUT"
log "written to $OUT"
