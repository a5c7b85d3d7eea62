#!/usr/bin/env bash
# Mirror transfers against `btrfs send | btrfs receive` and `rsync --inplace --no-whole-file`,
# on the same disk, same data, same changes:
#   pgdb   a pgbench database (scale SCALE; initialised once on ext4, copied into each source)
#   vol8k  one 1 GiB file of random data in an 8 KiB-record volume / an 8 KiB-page file
# Each is transferred full, then 10% of its 8 KiB pages are rewritten at random (the same
# pages and bytes on every system) and transferred again (incremental).
# Strata: two pools of one daemon (`strata mirror create` / `mirror update`); btrfs: two
# file systems on loop images (snapshot, send -p, receive); rsync: from the btrfs source
# subvolume to a directory on the target file system.
# Printed: per system and transfer, seconds, bytes sent and CPU seconds (Strata: the
# daemon's; btrfs: send + receive; rsync: both ends), as medians of ROUNDS rounds whose
# order rotates; every round below. Page caches are dropped before each transfer. A transfer
# is timed until it is durable on the target: Strata's ends with its commit and snapshot;
# btrfs receive and rsync are followed by `sync -f` of the target file system, timed too.
#
#   scripts/bench/mirror.sh [SCALE=50]
#   ROUNDS=5 scripts/bench/mirror.sh 50
# Needs root, Debian packages postgresql-15 btrfs-progs rsync (installed if missing). Takes
# the machine. Work dir: STRATA_BENCH_DIR (/var/tmp/strata-bench-mirror). STRATA_BENCH_BIN:
# a strata binary to use instead of building the release one.
set -euo pipefail
unset STRATA_API
cd "$(dirname "$0")/../.."
scale="${1:-50}"; rounds="${ROUNDS:-1}"
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
work="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-mirror}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
need=()
[ -x "$PG_BIN/pgbench" ] || need+=(postgresql-15)
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v rsync >/dev/null || need+=(rsync)
if [ ${#need[@]} -gt 0 ]; then apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; fi
if [ -n "${STRATA_BENCH_BIN:-}" ]; then bin="$STRATA_BENCH_BIN"; else
  cargo build --release -p strata-cli --quiet
  bin="$PWD/target/release/strata"
fi
loops=(); dpid=""; pgup=""
cleanup() {
  set +e
  [ -n "$pgup" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$work/pg/data" -m immediate -w >/dev/null 2>&1
  if [ -n "$dpid" ]; then "$bin" unmount "$work/mnt" >/dev/null 2>&1; kill "$dpid"; wait "$dpid" 2>/dev/null; fi
  for m in "$work/bsrc" "$work/bdst" "$work/pg"; do mountpoint -q "$m" && umount "$m"; done
  for l in "${loops[@]}"; do losetup -d "$l"; done
}
trap cleanup EXIT
for m in "$work/bsrc" "$work/bdst" "$work/pg"; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done
rm -rf "$work"; mkdir -p "$work"/{bsrc,bdst,pg,mnt,seed}
export STRATA_SOCKET="$work/strata.sock"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
cpu_of() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"; } # utime+stime, USER_HZ 100
loopfs() { # NAME SIZE MOUNTPOINT FSTYPE
  truncate -s "$2" "$work/$1.img"
  local l; l="$(losetup --find --show "$work/$1.img")"; loops+=("$l")
  "mkfs.$4" -q "$l" >/dev/null 2>&1 || "mkfs.$4" "$l" >/dev/null
  mount "$l" "$3"
}

echo "== seed data: pgbench scale $scale on ext4, and 1 GiB of random data" >&2
loopfs pg 8G "$work/pg" ext4
install -d -o postgres -g postgres "$work/pg/data" "$work/pg/sock"
runuser -u postgres -- "$PG_BIN/initdb" -D "$work/pg/data" --auth=trust -U postgres >/dev/null
runuser -u postgres -- "$PG_BIN/pg_ctl" start -D "$work/pg/data" -w -l "$work/pg/sock/log" -o "-p 55499 -k $work/pg/sock -c listen_addresses=''" >/dev/null
pgup=1
"$PG_BIN/pgbench" -h "$work/pg/sock" -p 55499 -U postgres -i -q -s "$scale" postgres >/dev/null 2>&1
runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$work/pg/data" -m fast -w >/dev/null
pgup=""
cp -a "$work/pg/data" "$work/seed/pgdb"
mkdir -p "$work/seed/vol8k"
head -c $((1 << 30)) /dev/urandom >"$work/seed/vol8k/data"
umount "$work/pg"
echo "seed: pgdb $(du -sm "$work/seed/pgdb" | cut -f1) MiB, vol8k 1024 MiB" >&2

# rewrite SEED DIR: 10% of the 8 KiB pages of every file of DIR rewritten (same pages, same bytes
# for a given seed whatever the system), then fsync.
rewrite() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import os, random, sys
seed, top = int(sys.argv[1]), sys.argv[2]
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs)
rng = random.Random(seed)
for path in files:
    size = os.path.getsize(path)
    pages = size // 8192
    if pages == 0:
        continue
    fd = os.open(path, os.O_WRONLY)
    for p in rng.sample(range(pages), max(1, pages // 10)):
        os.pwrite(fd, rng.randbytes(8192), p * 8192)
    os.fsync(fd)
    os.close(fd)
PY
}

results="$work/results.tsv"
: >"$results"
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"; } # round system data kind secs bytes cpu

run_strata() { # ROUND DATA RECORD_SIZE
  local r="$1" data="$2" rs="$3"
  rm -rf "$work/sdata"; mkdir -p "$work/sdata"
  "$bin" serve --config /dev/null --data-dir "$work/sdata" --default-pool-size 8G >"$work/daemon.log" 2>&1 &
  dpid=$!
  for _ in $(seq 100); do "$bin" pool list >/dev/null 2>&1 && break; sleep 0.1; done
  "$bin" pool create dst --device "$work/sdata/dst.img" --size 8G >/dev/null
  "$bin" volume create "default/$data" --record-size "$rs" >/dev/null
  "$bin" mount "default/$data" "$work/mnt" >/dev/null
  cp -a "$work/seed/$data/." "$work/mnt/"
  sync -f "$work/mnt"
  drop
  local c0 t0 j
  c0="$(cpu_of "$dpid")"; t0="$(now)"
  j="$("$bin" --json mirror create "default/$data" dst)"
  record "$r" strata "$data" full "$(since "$t0")" "$(jq_bytes "$j")" "$(awk -v a="$c0" -v b="$(cpu_of "$dpid")" 'BEGIN { printf "%.2f", b - a }')"
  rewrite "$r" "$work/mnt"
  drop
  c0="$(cpu_of "$dpid")"; t0="$(now)"
  j="$("$bin" --json mirror update "dst/$data")"
  record "$r" strata "$data" incremental "$(since "$t0")" "$(jq_bytes "$j")" "$(awk -v a="$c0" -v b="$(cpu_of "$dpid")" 'BEGIN { printf "%.2f", b - a }')"
  "$bin" unmount "$work/mnt" >/dev/null
  kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=""
  rm -rf "$work/sdata"
}
jq_bytes() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["last_transfer"]["done_bytes"])' "$1"; }

# timed CMD...: "seconds cpu" of a shell pipeline (CPU of every process in it).
timed() { /usr/bin/time -f "%e %U %S" bash -c "$1" 2>&1 >/dev/null | tail -1 | awk '{ printf "%s %.2f", $1, $2 + $3 }'; }

run_btrfs() { # ROUND DATA
  local r="$1" data="$2" out bytes
  loopfs bsrc 8G "$work/bsrc" btrfs
  loopfs bdst 8G "$work/bdst" btrfs
  btrfs subvolume create "$work/bsrc/$data" >/dev/null
  cp -a "$work/seed/$data/." "$work/bsrc/$data/"
  btrfs subvolume snapshot -r "$work/bsrc/$data" "$work/bsrc/s1" >/dev/null
  drop
  out="$(timed "btrfs send -q '$work/bsrc/s1' | tee >(wc -c >'$work/bytes') | btrfs receive -q '$work/bdst' && sync -f '$work/bdst'")"
  sleep 0.2; bytes="$(cat "$work/bytes")"
  record "$r" btrfs "$data" full "${out% *}" "$bytes" "${out#* }"
  rewrite "$r" "$work/bsrc/$data"
  btrfs subvolume snapshot -r "$work/bsrc/$data" "$work/bsrc/s2" >/dev/null
  drop
  out="$(timed "btrfs send -q -p '$work/bsrc/s1' '$work/bsrc/s2' | tee >(wc -c >'$work/bytes') | btrfs receive -q '$work/bdst' && sync -f '$work/bdst'")"
  sleep 0.2; bytes="$(cat "$work/bytes")"
  record "$r" btrfs "$data" incremental "${out% *}" "$bytes" "${out#* }"
  # rsync on the same file systems: the source subvolume to a plain directory on the target.
  btrfs subvolume delete "$work/bsrc/s2" >/dev/null
  mkdir -p "$work/bdst/rsync"
  # Undo the rewrite first so that rsync's full copy and incremental see the same data as the others.
  btrfs subvolume delete "$work/bsrc/$data" >/dev/null
  btrfs subvolume snapshot "$work/bsrc/s1" "$work/bsrc/$data" >/dev/null
  drop
  out="$(timed "rsync -a --inplace --no-whole-file --stats '$work/bsrc/$data/' '$work/bdst/rsync/' >'$work/rsync.log' && sync -f '$work/bdst'")"
  bytes="$(awk '/Total bytes sent/ { gsub(",", "", $4); print $4 }' "$work/rsync.log")"
  record "$r" rsync "$data" full "${out% *}" "$bytes" "${out#* }"
  rewrite "$r" "$work/bsrc/$data"
  drop
  out="$(timed "rsync -a --inplace --no-whole-file --stats '$work/bsrc/$data/' '$work/bdst/rsync/' >'$work/rsync.log' && sync -f '$work/bdst'")"
  bytes="$(awk '/Total bytes sent/ { gsub(",", "", $4); print $4 }' "$work/rsync.log")"
  record "$r" rsync "$data" incremental "${out% *}" "$bytes" "${out#* }"
  umount "$work/bsrc" "$work/bdst"
  losetup -d "${loops[-1]}"; losetup -d "${loops[-2]}"; unset 'loops[-1]' 'loops[-1]'
  rm -f "$work/bsrc.img" "$work/bdst.img"
}

for r in $(seq 1 "$rounds"); do
  for data in pgdb vol8k; do
    rs=8K
    if [ $((r % 2)) -eq 1 ]; then
      echo "round $r $data: strata, btrfs+rsync" >&2
      run_strata "$r" "$data" "$rs"; run_btrfs "$r" "$data"
    else
      echo "round $r $data: btrfs+rsync, strata" >&2
      run_btrfs "$r" "$data"; run_strata "$r" "$data" "$rs"
    fi
  done
done

/usr/bin/python3 - "$results" "$rounds" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
med = lambda xs: statistics.median(xs)
print(f"Mirror transfers, medians of {sys.argv[2]} round(s) (Strata pool to pool; btrfs send|receive; rsync --inplace)\n")
print("| data | transfer | system | seconds | MB/s | bytes sent | CPU s | time vs btrfs |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for data in ("pgdb", "vol8k"):
    for kind in ("full", "incremental"):
        base = None
        for system in ("btrfs", "strata", "rsync"):
            sel = [r for r in rows if r[1] == system and r[2] == data and r[3] == kind]
            if not sel:
                continue
            secs = med([float(r[4]) for r in sel]); b = med([int(r[5]) for r in sel]); cpu = med([float(r[6]) for r in sel])
            if system == "btrfs":
                base = secs
            ratio = f"{secs / base:.2f}" if base else "-"
            print(f"| {data} | {kind} | {system} | {secs:.2f} | {b / secs / 1e6:.0f} | {b:,} | {cpu:.2f} | {ratio} |")
print("\nEvery round (round, system, data, transfer, seconds, bytes, CPU s):\n")
for r in rows:
    print("    " + "  ".join(r))
PY
