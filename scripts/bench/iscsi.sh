#!/usr/bin/env bash
# Strata's iSCSI target against tgt (rdwr backing store: a file on ext4 in a loop image),
# through the same initiator: scripts/bench/iscsi/iscsiload.c on libiscsi's asynchronous API
# (Debian's fio has no libiscsi engine). Rows: 4 KiB and 16 KiB random 70/30 read/write at
# queue depth 1 and 16, 1 MiB sequential write and read (QD 4), 16 KiB write + SYNCHRONIZE
# CACHE (QD 1: a database's commit). Prints a Markdown table of medians and every round.
#
#   scripts/bench/iscsi.sh [SECONDS_PER_ROW=10] [AREA_MIB=1024]
#   ROUNDS=5 scripts/bench/iscsi.sh 10 1024   # each row ROUNDS times per target, alternating
# Needs root, Debian packages tgt libiscsi-dev (installed if missing). Takes the machine.
# Work dir: STRATA_BENCH_DIR (/var/tmp/strata-bench-iscsi). STRATA_BENCH_BIN: a strata binary
# to use instead of building the release one.
set -euo pipefail
unset STRATA_API
cd "$(dirname "$0")/../.."
secs="${1:-10}"; mib="${2:-1024}"; rounds="${ROUNDS:-1}"
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
# name block read% qd mode
rows=("4k-rand-qd1 4096 70 1 rand" "4k-rand-qd16 4096 70 16 rand" "16k-rand-qd1 16384 70 1 rand"
      "16k-rand-qd16 16384 70 16 rand" "1m-seq-write-qd4 1048576 0 4 seq" "1m-seq-read-qd4 1048576 100 4 seq"
      "16k-write-flush-qd1 16384 0 1 flush")
if [ -n "${ROWS:-}" ]; then
  chosen=()
  for want in $ROWS; do
    hit=""
    for r in "${rows[@]}"; do [ "${r%% *}" = "$want" ] && { chosen+=("$r"); hit=1; }; done
    [ -n "$hit" ] || { echo "ROWS: unknown row '$want'; rows are: ${rows[*]%% *}" >&2; exit 2; }
  done
  rows=("${chosen[@]}")
fi
work="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-iscsi}"
need=()
command -v tgtd >/dev/null || need+=(tgt)
[ -f /usr/include/iscsi/iscsi.h ] || need+=(libiscsi-dev)
if [ ${#need[@]} -gt 0 ]; then apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; fi
if [ -n "${STRATA_BENCH_BIN:-}" ]; then bin="$STRATA_BENCH_BIN"; else
  cargo build --release -p strata-cli --quiet
  bin="$PWD/target/release/strata"
fi
pids=(); loopdev=""; ctl=""
cleanup() {
  # tgtd ignores SIGTERM while it has targets: delete them and the system first.
  if [ -n "$ctl" ]; then
    tgtadm -C "$ctl" --lld iscsi --op delete --mode target --tid 1 --force >/dev/null 2>&1 || true
    tgtadm -C "$ctl" --op delete --mode system >/dev/null 2>&1 || true
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if mountpoint -q "$work/ext4"; then umount "$work/ext4"; fi
  if [ -n "$loopdev" ]; then losetup -d "$loopdev" 2>/dev/null || true; fi
}
trap cleanup EXIT
if mountpoint -q "$work/ext4" 2>/dev/null; then umount "$work/ext4"; fi
rm -rf "$work"; mkdir -p "$work"
gcc -O2 -Wall -o "$work/iscsiload" scripts/bench/iscsi/iscsiload.c -liscsi
export STRATA_SOCKET="$work/strata.sock"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Strata: a 4K-block LUN in its own pool image.
sport="$(free_port)"
"$bin" serve --config /dev/null --data-dir "$work/strata" --default-pool-size 8G --iscsi-port "$sport" \
  >"$work/strata.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do "$bin" pool list >/dev/null 2>&1 && break; sleep 0.1; done
"$bin" volume create default/bench --lun "${mib}M" --block-size 4K >/dev/null
"$bin" export iscsi default/bench --iqn iqn.2026-11.io.strata:bench >/dev/null
declare -A url
url[strata]="iscsi://127.0.0.1:$sport/iqn.2026-11.io.strata:bench/0"

# Between rows, every server's writes reach its disk outside the measured windows: the
# peers' page cache by `sync`, Strata's open txg by `strata pool sync` (before 2026-11-29
# only `sync`, which left Strata's commit of a row to run into the next server's row).
settle() { sync; "$bin" pool sync default >/dev/null; }

# tgt: a file on ext4 in a loop image, rdwr backing store (pread/pwrite, fdatasync).
truncate -s 8G "$work/ext4.img"; mkfs.ext4 -q -F "$work/ext4.img"
loopdev="$(losetup -f --show "$work/ext4.img")"
mkdir -p "$work/ext4"; mount "$loopdev" "$work/ext4"
truncate -s "${mib}M" "$work/ext4/tgt.img"
tport="$(free_port)"; ctl=$((RANDOM % 1000 + 100))
tgtd -f -C "$ctl" --iscsi portal="127.0.0.1:$tport" >"$work/tgtd.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do tgtadm -C "$ctl" --lld iscsi --op show --mode target >/dev/null 2>&1 && break; sleep 0.1; done
tgtadm -C "$ctl" --lld iscsi --op new --mode target --tid 1 -T iqn.2026-11.org.tgt:bench
tgtadm -C "$ctl" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$work/ext4/tgt.img"
tgtadm -C "$ctl" --lld iscsi --op bind --mode target --tid 1 -I ALL
url[tgt]="iscsi://127.0.0.1:$tport/iqn.2026-11.org.tgt:bench/1"
targets=(strata tgt)
for t in "${targets[@]}"; do
  "$work/iscsiload" "${url[$t]}" "$mib" 4096 0 4 0 fill >/dev/null || { echo "fill of $t failed" >&2; exit 1; }
done
settle; sleep 8

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
measure() { # TARGET block read% qd mode
  local out
  out="$("$work/iscsiload" "${url[$1]}" "$mib" "$2" "$3" "$4" "$secs" "$5")" || { echo "iscsiload failed: $*" >&2; return 1; }
  settle; sleep 3
  echo "$out"
}
echo "| row | Strata IOPS | tgt IOPS | Strata / tgt | Strata p50/p99 µs | tgt p50/p99 µs |"
echo "|---|---:|---:|---:|---:|---:|"
log=()
for r in "${rows[@]}"; do
  read -r name bs rd qd mode <<<"$r"
  declare -A got=()
  for ((i = 1; i <= rounds; i++)); do
    order=(strata tgt); ((i % 2 == 0)) && order=(tgt strata)
    for t in "${order[@]}"; do
      out="$(measure "$t" "$bs" "$rd" "$qd" "$mode")" || exit 1
      for f in iops p50_us p99_us; do got[$t.$f]+="$(field "$f" "$out") "; done
    done
  done
  # shellcheck disable=SC2086 # word splitting of the collected values is the point
  m() { median ${got[$1]}; }
  si="$(m strata.iops)"; ti="$(m tgt.iops)"
  ratio="$(python3 -c "print(f'{$si/$ti:.2f}' if $ti else '-')")"
  echo "| $name | $si | $ti | $ratio | $(m strata.p50_us)/$(m strata.p99_us) | $(m tgt.p50_us)/$(m tgt.p99_us) |"
  log+=("$name: Strata ${got[strata.iops]}/ tgt ${got[tgt.iops]}")
  unset got
done
echo
echo "Medians of $rounds round(s) per target, alternating which goes first. IOPS of every round:"
printf -- '- %s\n' "${log[@]}"
