#!/usr/bin/env bash
# A/B of a mirror's idle rebuild time between strata binaries (not a peer benchmark: that is
# scripts/bench/redundancy.sh). Per round and binary: a 2-way mirror pool of two fresh loop
# devices (direct I/O over 4 GiB image files), a 400 MB file written, 160 MB of 8 KiB random
# rewrites (fio, the same sequence every time), member 2 taken offline, 8 MB written, then
# `pool replace --wait` onto a third loop device timed (a full rebuild; until 2026-11-28
# this was `pool online`, which now copies only what the member missed); prints the wall
# time and the daemon's own copied bytes and seconds. Rounds alternate the binaries.
#
#   ROUNDS=3 scripts/bench/rebuild-ab.sh BIN_A [BIN_B ...]
# Work dir: STRATA_BENCH_DIR (/var/tmp/strata-bench-rebuild-ab). Root; takes the machine.
set -euo pipefail
[ "$#" -ge 1 ] || { echo "usage: ROUNDS=3 $0 BIN_A [BIN_B ...]" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (loop devices, mounts)" >&2; exit 2; }
command -v fio >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null; }
w="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-rebuild-ab}"; rounds="${ROUNDS:-3}"
loops=(); pid=""
cleanup() {
  set +e
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  umount -l "$w/mnt" 2>/dev/null
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
}
trap cleanup EXIT
for r in $(seq "$rounds"); do
  for bin in "$@"; do
    rm -rf "$w"; mkdir -p "$w"
    loops=()
    for i in 1 2 3; do truncate -s 4G "$w/d$i.img"; loops+=("$(losetup --find --show --direct-io=on "$w/d$i.img")"); done
    export STRATA_SOCKET="$w/s.sock"
    "$bin" serve --config /dev/null --data-dir "$w/data" --default-pool-size 1G >"$w/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do "$bin" pool list >/dev/null 2>&1 && break; sleep 0.1; done
    "$bin" pool create m --layout mirror --device "${loops[0]}" --device "${loops[1]}" >/dev/null
    "$bin" volume create m/v >/dev/null
    mkdir -p "$w/mnt"; "$bin" mount m/v "$w/mnt" >/dev/null
    fio --name=a --filename="$w/mnt/f" --size=400M --rw=write --bs=1M --end_fsync=1 >/dev/null
    fio --name=b --filename="$w/mnt/f" --size=400M --rw=randwrite --bs=8k --io_size=160M --fsync=32 >/dev/null
    "$bin" pool offline m "${loops[1]}" >/dev/null
    dd if=/dev/urandom of="$w/mnt/g" bs=1M count=8 conv=fsync status=none
    sleep 6
    t0=$(date +%s.%N)
    "$bin" pool replace m "${loops[1]}" "${loops[2]}" --wait >/dev/null
    t1=$(date +%s.%N)
    echo "round $r $bin: $(python3 -c "print(f'{$t1-$t0:.2f}')") s; $(grep -o 'rebuild complete.*' "$w/log" | grep -o 'copied=.*')"
    "$bin" unmount "$w/mnt" >/dev/null
    kill "$pid"; wait "$pid" || true; pid=""
    for l in "${loops[@]}"; do losetup -d "$l"; done
    loops=()
  done
done
