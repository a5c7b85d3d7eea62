#!/usr/bin/env bash
# Strata's NBD server against nbdkit (file plugin) and qemu-nbd (raw file), through the same
# client: fio's nbd engine (libnbd). Peers serve a file on ext4 in a loop image on the same
# disk; Strata serves a LUN (block size 4K) of its pool image on the same disk.
# Rows: 4 KiB and 16 KiB random 70/30 read/write at queue depth 1 and 16, 1 MiB sequential
# write and read (QD 4), 16 KiB writes each followed by a flush (QD 1: a database's commit).
# Prints a Markdown table (IOPS, p50/p99 latency, ratio to the best peer) of medians; the
# write+flush row's latency is the write's plus the flush's (what a commit waits for).
#
#   scripts/bench/lun.sh [SECONDS_PER_ROW=10] [FILE_MIB=1024]
#   ROUNDS=5 scripts/bench/lun.sh 10 1024   # each row ROUNDS times per server, the order
#                                           # rotating; medians in the table, every round below
#   ROWS="16k-rand-qd16" scripts/bench/lun.sh   # only these rows
# Needs root, Debian packages fio nbdkit qemu-utils (installed if missing). Takes the machine.
# Work dir: STRATA_BENCH_DIR (/var/tmp/strata-bench-lun). STRATA_BENCH_BIN: a strata binary
# to use instead of building the release one.
set -euo pipefail
unset STRATA_API
cd "$(dirname "$0")/../.."
secs="${1:-10}"; mib="${2:-1024}"; rounds="${ROUNDS:-1}"
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
# name bs rwmixread iodepth rw extra
rows=("4k-rand-qd1 4k 70 1 randrw" "4k-rand-qd16 4k 70 16 randrw" "16k-rand-qd1 16k 70 1 randrw"
      "16k-rand-qd16 16k 70 16 randrw" "1m-seq-write-qd4 1m 0 4 write" "1m-seq-read-qd4 1m 100 4 read"
      "16k-write-flush-qd1 16k 0 1 randwrite")
if [ -n "${ROWS:-}" ]; then
  chosen=()
  for want in $ROWS; do
    hit=""
    for r in "${rows[@]}"; do [ "${r%% *}" = "$want" ] && { chosen+=("$r"); hit=1; }; done
    [ -n "$hit" ] || { echo "ROWS: unknown row '$want'; rows are: ${rows[*]%% *}" >&2; exit 2; }
  done
  rows=("${chosen[@]}")
fi
work="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-lun}"
need=()
command -v fio >/dev/null || need+=(fio)
command -v nbdkit >/dev/null || need+=(nbdkit)
command -v qemu-nbd >/dev/null || need+=(qemu-utils)
if [ ${#need[@]} -gt 0 ]; then apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; fi
if [ -n "${STRATA_BENCH_BIN:-}" ]; then bin="$STRATA_BENCH_BIN"; else
  cargo build --release -p strata-cli --quiet
  bin="$PWD/target/release/strata"
fi
fio --enghelp 2>/dev/null | grep -qw nbd || { echo "this fio has no nbd engine" >&2; exit 1; }
pids=(); loopdev=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  mountpoint -q "$work/ext4" && umount "$work/ext4"
  if [ -n "$loopdev" ]; then losetup -d "$loopdev" 2>/dev/null || true; fi
}
trap cleanup EXIT
mountpoint -q "$work/ext4" 2>/dev/null && umount "$work/ext4"
rm -rf "$work"; mkdir -p "$work"
export STRATA_SOCKET="$work/strata.sock"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Strata: a 4K-block LUN in its own pool image.
sport="$(free_port)"
"$bin" serve --config /dev/null --data-dir "$work/strata" --default-pool-size 8G --nbd-port "$sport" \
  >"$work/strata.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do "$bin" pool list >/dev/null 2>&1 && break; sleep 0.1; done
"$bin" volume create default/bench --lun "${mib}M" --block-size 4K >/dev/null
"$bin" export nbd default/bench >/dev/null
declare -A uri
uri[strata]="nbd://127.0.0.1:$sport/default/bench"

# Between rows, every server's writes reach its disk outside the measured windows: the
# peers' page cache by `sync`, Strata's open txg by `strata pool sync` (before 2026-11-29
# only `sync`, which left Strata's commit of a row to run into the next server's row).
settle() { sync; "$bin" pool sync default >/dev/null; }

# The peers: one file on ext4 in a loop image, served by nbdkit and by qemu-nbd in turn.
truncate -s 8G "$work/ext4.img"; mkfs.ext4 -q -F "$work/ext4.img"
loopdev="$(losetup -f --show "$work/ext4.img")"
mkdir -p "$work/ext4"; mount "$loopdev" "$work/ext4"
truncate -s "${mib}M" "$work/ext4/nbdkit.img" "$work/ext4/qemu.img"
kport="$(free_port)"; qport="$(free_port)"
nbdkit -f -i 127.0.0.1 -p "$kport" file "$work/ext4/nbdkit.img" >"$work/nbdkit.log" 2>&1 &
pids+=($!)
qemu-nbd -f raw -b 127.0.0.1 -p "$qport" -x bench -t --cache=none --aio=native --discard=unmap -e 16 \
  "$work/ext4/qemu.img" >"$work/qemu-nbd.log" 2>&1 &
pids+=($!)
uri[nbdkit]="nbd://127.0.0.1:$kport/"
uri[qemu-nbd]="nbd://127.0.0.1:$qport/bench"
servers=(strata nbdkit qemu-nbd)
for s in "${servers[@]}"; do
  for _ in $(seq 100); do nbdinfo --size "${uri[$s]}" >/dev/null 2>&1 && break; sleep 0.2; done
  # Fill (not measured): every server reads and writes allocated data.
  fio --name=fill --ioengine=nbd --uri="${uri[$s]}" --rw=write --bs=1m --iodepth=4 --size="${mib}M" \
    --output-format=terse >/dev/null
done
settle; sleep 8

# fio terse v3: field 8 read IOPS, 49 write IOPS; completion-latency percentiles in fields
# 17.. (read) and 58.. (write) as "p=value"; we take 50 and 99 from the JSON instead.
measure() { # SERVER bs mix qd rw
  local s="$1" extra=()
  [ "$2" = 16k ] && [ "$5" = randwrite ] && extra=(--fsync=1)
  fio --name=row --ioengine=nbd --uri="${uri[$s]}" --rw="$5" --rwmixread="$3" --bs="$2" --iodepth="$4" \
    --size="${mib}M" --time_based --runtime="$secs" --random_generator=tausworthe64 --randrepeat=0 \
    "${extra[@]}" --output-format=json --output="$work/row.json" >/dev/null || { echo "fio failed: $s $*" >&2; return 1; }
  python3 - "$work/row.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
iops = j["read"]["iops"] + j["write"]["iops"]
def pct(side, p):
    c = j[side].get("clat_ns", {}).get("percentile", {})
    return c.get(p, 0) / 1000
side = "write" if j["write"]["iops"] >= j["read"]["iops"] else "read"
p50, p99 = pct(side, "50.000000"), pct(side, "99.000000")
sync = j.get("sync", {}).get("lat_ns", {})
if sync.get("N", 0) > 0:
    # write + flush: the latency a commit waits is the write's plus the flush's.
    sp = sync.get("percentile", {})
    p50 += sp.get("50.000000", 0) / 1000
    p99 += sp.get("99.000000", 0) / 1000
print(f"iops={iops:.0f} p50={p50:.0f} p99={p99:.0f}")
PY
  settle; sleep 3
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "| row | Strata IOPS | nbdkit IOPS | qemu-nbd IOPS | Strata / best peer | Strata p50/p99 µs | nbdkit p50/p99 µs | qemu-nbd p50/p99 µs |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
log=()
for r in "${rows[@]}"; do
  read -r name bs mix qd rw <<<"$r"
  declare -A got=()
  for ((i = 0; i < rounds; i++)); do
    order=("${servers[@]:i%3}" "${servers[@]:0:i%3}")
    for s in "${order[@]}"; do
      out="$(measure "$s" "$bs" "$mix" "$qd" "$rw")" || exit 1
      for f in iops p50 p99; do got[$s.$f]+="$(field "$f" "$out") "; done
    done
  done
  # shellcheck disable=SC2086 # word splitting of the collected values is the point
  m() { median ${got[$1]}; }
  si="$(m strata.iops)"; ki="$(m nbdkit.iops)"; qi="$(m qemu-nbd.iops)"
  best="$(python3 -c "print(max($ki, $qi))")"
  ratio="$(python3 -c "print(f'{$si/$best:.2f}' if $best else '-')")"
  echo "| $name | $si | $ki | $qi | $ratio | $(m strata.p50)/$(m strata.p99) | $(m nbdkit.p50)/$(m nbdkit.p99) | $(m qemu-nbd.p50)/$(m qemu-nbd.p99) |"
  log+=("$name: Strata ${got[strata.iops]}/ nbdkit ${got[nbdkit.iops]}/ qemu-nbd ${got[qemu-nbd.iops]}")
  unset got
done
echo
echo "Medians of $rounds round(s) per server, the order rotating each round. IOPS of every round:"
printf -- '- %s\n' "${log[@]}"
