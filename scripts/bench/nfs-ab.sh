#!/usr/bin/env bash
# Two Strata binaries, one NFS row, alternating: for A/B measurements of a change to the
# server or the engine without ganesha in between (scripts/bench/nfs.sh compares with it).
# Each round starts a fresh daemon on a fresh pool, fills the file, lets the fill's commit
# settle, measures the row, and prints IOPS, latency, the vCPU steal and the daemon's commit
# figures.
#
#   scripts/bench/nfs-ab.sh BIN_A BIN_B [ROW=1m-seq-write-qd4] [SECONDS=20] [FILE_MIB=1024]
#   ROUNDS=3 scripts/bench/nfs-ab.sh /var/tmp/strata-base target/release/strata
# Rows: as nfs.sh (4k-rand-qd1 ... 1m-seq-read-qd4). Needs libnfs-dev (installed if missing).
# Work dir: STRATA_BENCH_DIR (/var/tmp/strata-bench-nfs-ab); each daemon's control socket is
# strata.sock in it (STRATA_SOCKET; STRATA_API, TCP, is ignored).
set -euo pipefail
unset STRATA_API # the CLI would talk TCP to it instead of the daemon's socket
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 BIN_A BIN_B [ROW] [SECONDS] [FILE_MIB]" >&2; exit 2; }
bins=("$(realpath "$1")" "$(realpath "$2")"); row="${3:-1m-seq-write-qd4}"; secs="${4:-20}"; mib="${5:-1024}"
rounds="${ROUNDS:-3}"
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "$b: not an executable" >&2; exit 2; }; done
case "$row" in
  4k-rand-qd1) spec="4096 70 1 rand" ;; 4k-rand-qd16) spec="4096 70 16 rand" ;;
  16k-rand-qd1) spec="16384 70 1 rand" ;; 16k-rand-qd16) spec="16384 70 16 rand" ;;
  1m-seq-write-qd4) spec="1048576 0 4 seq" ;; 1m-seq-read-qd4) spec="1048576 100 4 seq" ;;
  *) echo "unknown row '$row' (see nfs.sh's rows)" >&2; exit 2 ;;
esac
[ -f /usr/include/nfsc/libnfs.h ] ||
  { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnfs-dev >/dev/null; }
work="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-nfs-ab}"
rm -rf "$work"; mkdir -p "$work"
export STRATA_SOCKET="$work/strata.sock" # serve listens on it, the CLI calls go to it
gcc -O2 -Wall -o "$work/nfsload" scripts/bench/nfs/nfsload.c -lnfs
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; true' EXIT

one() { # $1 = label, $2 = binary
  local sport url out t0 t1
  rm -rf "$work/strata"; sport="$(free_port)"
  "$2" serve --config /dev/null --data-dir "$work/strata" --default-pool-size 8G --nfs-port "$sport" \
    >"$work/strata-$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do "$2" pool list >/dev/null 2>&1 && break; sleep 0.1; done
  "$2" volume create default/bench >/dev/null
  "$2" export nfs default/bench --no-root-squash >/dev/null
  url="nfs://127.0.0.1/default/bench?nfsport=$sport&mountport=$sport"
  "$work/nfsload" "$url" /bench.dat "$mib" 1048576 0 4 0.1 seq >/dev/null
  sleep 10
  t0="$(cpu_ticks)"
  local bs rd qd mode
  read -r bs rd qd mode <<<"$spec"
  out="$("$work/nfsload" "$url" /bench.dat "$mib" "$bs" "$rd" "$qd" "$secs" "$mode")"
  t1="$(cpu_ticks)"
  local commits
  commits="$("$2" pool status default 2>/dev/null | grep -iE 'commit' | tr -s ' ' | paste -sd ';' || true)"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  printf '%s: %s steal=%s%% | %s\n' "$1" "$out" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { split(a, x); split(b, y);
    d = y[2] - x[2]; printf "%.1f", (d > 0 ? 100 * (y[1] - x[1]) / d : 0) }')" "$commits"
}

echo "row $row, $secs s, file $mib MiB; A = ${bins[0]}, B = ${bins[1]}"
for ((i = 1; i <= rounds; i++)); do
  if ((i % 2 == 1)); then one A "${bins[0]}"; one B "${bins[1]}"; else one B "${bins[1]}"; one A "${bins[0]}"; fi
done
