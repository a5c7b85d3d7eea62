#!/usr/bin/env bash
# Two Strata binaries, PostgreSQL's pgbench on a FUSE-mounted volume, alternating rounds:
# for A/B measurements of an engine or daemon change (the peers are compared elsewhere:
# fuse-caching.sh, efficiency.sh). Each round starts a fresh daemon and pool, initdb on the
# mount, pgbench -i -s SCALE, a checkpoint, then pgbench -c CLIENTS -j 2 -T SECONDS, and
# prints the TPS; rounds alternate A B, B A, ... At the end: every round, the medians and
# the ratio B/A of the medians.
#
#   ROUNDS=5 scripts/bench/pgbench-ab.sh BIN_A BIN_B [SCALE=10] [SECONDS=30] [CLIENTS=4]
#
# Work dir: STRATA_BENCH_DIR (/var/tmp/strata-bench-pg-ab); PG_PORT (55452). Run as root.
set -euo pipefail
shopt -s inherit_errexit # a failure inside one round's \$(...) ends the run
unset STRATA_API
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 BIN_A BIN_B [SCALE] [SECONDS] [CLIENTS]" >&2; exit 2; }
bins=("$(realpath "$1")" "$(realpath "$2")"); scale="${3:-10}"; secs="${4:-30}"; clients="${5:-4}"
rounds="${ROUNDS:-5}"
for v in "$rounds" "$scale" "$secs" "$clients"; do
  case "$v" in '' | *[!0-9]* | 0) echo "ROUNDS, SCALE, SECONDS and CLIENTS are positive integers ('$v')" >&2; exit 2 ;; esac
done
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "$b: not an executable" >&2; exit 2; }; done
[ "$(id -u)" -eq 0 ] || { echo "run as root (PostgreSQL runs as user postgres, FUSE mounts)" >&2; exit 2; }
PG_BIN=/usr/lib/postgresql/15/bin
if [ ! -x "$PG_BIN/pgbench" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 postgresql-contrib >/dev/null
fi
PG_PORT="${PG_PORT:-55452}"
work="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-pg-ab}"
export STRATA_E2E_DIR="$work/strata"
# shellcheck source=scripts/e2e/strata-env.sh
. "$ROOT/scripts/e2e/strata-env.sh"
# Every daemon of the run starts from a copy: a rebuild meanwhile cannot mix versions.
rm -rf "$work"; mkdir -p "$work/bin"; chmod 755 "$work"
cp "${bins[0]}" "$work/bin/A"; cp "${bins[1]}" "$work/bin/B"
mnt="$work/mnt"; sock="$work/pg-sock"
pg_as() { runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
cleanup() {
  if [ -f "$mnt/pgdata/postmaster.pid" ]; then
    pg_as pg_ctl stop -D "$mnt/pgdata" -m immediate -w >/dev/null 2>&1 || true
  fi
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  strata_stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

one() { # $1 = label (A or B); prints the TPS
  local out="$work/$1-$2"
  cleanup
  rm -rf "$STRATA_E2E_DIR"; mkdir -p "$STRATA_E2E_DIR" "$mnt"
  STRATA_BIN="$work/bin/$1" STRATA_POOL_SIZE=8G strata_start >&2
  STRATA_BIN="$work/bin/$1" strata_mount pg "$mnt" >/dev/null
  install -d -o postgres -g postgres -m 700 "$mnt/pgdata" "$sock"
  pg_as initdb -D "$mnt/pgdata" --auth=trust --username=postgres --encoding=UTF8 --locale=C >"$out.initdb" 2>&1
  cat >>"$mnt/pgdata/postgresql.conf" <<CONF
port = $PG_PORT
listen_addresses = ''
unix_socket_directories = '$sock'
fsync = on
synchronous_commit = on
shared_buffers = 128MB
CONF
  install -o postgres -g postgres -m 644 /dev/null "$out.pglog"
  pg_as pg_ctl start -D "$mnt/pgdata" -l "$out.pglog" -w -t 120 >/dev/null ||
    { cat "$out.pglog" >&2; echo "PostgreSQL did not start ($1, round $2)" >&2; exit 1; }
  "$PG_BIN/pgbench" -h "$sock" -p "$PG_PORT" -U postgres -i -s "$scale" -q postgres >"$out.init" 2>&1
  "$PG_BIN/psql" -X -q -h "$sock" -p "$PG_PORT" -U postgres -c checkpoint postgres
  "$PG_BIN/pgbench" -h "$sock" -p "$PG_PORT" -U postgres -n -c "$clients" -j 2 -T "$secs" postgres >"$out.run" 2>&1
  pg_as pg_ctl stop -D "$mnt/pgdata" -m fast -w -t 120 >/dev/null
  local tps failed
  tps="$(awk '/^tps = / { print $3; exit }' "$out.run")"
  failed="$(awk '/^number of failed transactions: / { print $5; exit }' "$out.run")"
  if [ -z "$tps" ] || [ "${failed:-0}" != 0 ]; then
    cat "$out.run" >&2; echo "pgbench failed ($1, round $2)" >&2; exit 1
  fi
  printf '%s\n' "$tps"
}

results="$work/results.tsv"; : >"$results"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
  for l in $order; do
    tps="$(one "$l" "$r")"
    printf '%s\t%s\t%s\n' "$r" "$l" "$tps" | tee -a "$results"
  done
done
python3 - "$results" "${bins[0]}" "${bins[1]}" "$scale" "$secs" "$clients" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
a = [float(t) for _, l, t in rows if l == "A"]; b = [float(t) for _, l, t in rows if l == "B"]
print(f"\npgbench -i -s {sys.argv[4]}; pgbench -c {sys.argv[6]} -j 2 -T {sys.argv[5]} on a Strata FUSE volume, rounds alternating")
print(f"A = {sys.argv[2]}\nB = {sys.argv[3]}\n")
print("| round | A tps | B tps |\n|---|---|---|")
for i in range(max(len(a), len(b))):
    print(f"| {i + 1} | {a[i]:.0f} | {b[i]:.0f} |")
ma, mb = statistics.median(a), statistics.median(b)
print(f"| median | {ma:.0f} | {mb:.0f} |\n\nB/A (medians): {mb / ma:.3f}")
PY
