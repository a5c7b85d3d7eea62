#!/usr/bin/env bash
# Redundancy benchmark (issue 25): PostgreSQL's pgbench (or, with DB=mariadb, MariaDB with
# sysbench oltp_read_write, TR-4722's parameters: 2 tables of SCALE rows) on
#   strata-single   a Strata pool on loop device 1
#   strata-mirror   a Strata 2-way mirror of loop devices 1 and 2
#   btrfs-raid1     btrfs -d raid1 -m raid1 on loop devices 1 and 2 (the in-kernel peer:
#                   this kernel has no md RAID and no device mapper)
# or, with LAYOUT=mirror3, three copies over three loop devices:
#   strata-mirror3  a Strata 3-way mirror of loop devices 1-3
#   btrfs-raid1c3   btrfs -d raid1c3 -m raid1c3 on loop devices 1-3
# or, with LAYOUT=parity2, double parity over four loop devices:
#   strata-parity2  a Strata parity2 pool of loop devices 1-4
#   btrfs-raid6     btrfs -d raid6 -m raid1c3 on loop devices 1-4 (metadata three-way, as
#                   Strata keeps its fixed regions mirrored)
# The same loop devices (direct I/O to image files in the work dir) for every config, fresh
# each round; rounds alternate the order of the configs. Per round and config: initdb,
# pgbench -i -s SCALE, a checkpoint, pgbench -T SECONDS (healthy). For the two redundant
# configs then: one device out (Strata: `pool offline`; btrfs: unmounted, device 2 detached,
# mounted -o degraded) and pgbench again (degraded), then the device replaced by a blank
# one and rebuilt (Strata: `pool replace` onto a spare loop device, which copies what the
# pool uses; btrfs: `btrfs replace` onto it), timed until the rebuild ends. Then the same
# failure again and the rebuild under load: pgbench runs (-P 1), the rebuild starts 3 s in
# (both: replace onto a second spare), and the TPS of the seconds the rebuild
# ran is reported with its duration. Then, with the database stopped, a scrub of the
# healthy pool is timed (Strata `pool scrub`; btrfs `btrfs scrub start -B`), and last a
# scrub under load, as the rebuild: the TPS of the seconds it ran and its duration. Prints
# every round, the medians and the ratios the issue's targets are stated in. How busy the
# CPUs were during each healthy and degraded run goes to the work dir's cpu.log.
#
#   ROUNDS=5 [LAYOUT=mirror|mirror3|parity2] [DEV_SIZE=4G] [HEALTHY_ONLY=1] scripts/bench/redundancy.sh [SCALE=10] [SECONDS=30] [CLIENTS=4]
#   DB=mariadb ROUNDS=5 LAYOUT=mirror scripts/bench/redundancy.sh [TABLE_SIZE=10000] [SECONDS=30] [THREADS=4]
#   (STRATA_BENCH_BIN=path: measure that binary instead of building this checkout;
#   DEV_SIZE: each loop device's size — with 1G and SCALE=20 the pool is ~30% full, the
#   issue's rebuild case; HEALTHY_ONLY=1: the healthy runs alone, for the TPS ratios
#   between configs in a fifth of the time)
#
# Work dir: STRATA_BENCH_DIR (/var/tmp/strata-bench-redundancy); PG_PORT (55462). Root.
set -Eeuo pipefail
shopt -s inherit_errexit
trap 'echo "redundancy.sh: line $LINENO failed (exit $?): $BASH_COMMAND" >&2' ERR
unset STRATA_API
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
scale="${1:-10}"; secs="${2:-30}"; clients="${3:-4}"; rounds="${ROUNDS:-5}"
layout="${LAYOUT:-mirror}"; db="${DB:-postgres}"; healthy_only="${HEALTHY_ONLY:-0}"
case "$healthy_only" in 0 | 1) ;; *) echo "HEALTHY_ONLY is 0 or 1, not '$healthy_only'" >&2; exit 2 ;; esac
case "$db" in postgres | mariadb) ;; *) echo "DB is postgres or mariadb, not '$db'" >&2; exit 2 ;; esac
if [ "$db" = mariadb ]; then scale="${1:-10000}"; fi
case "$layout" in
  mirror) ndev=2; peer=raid1; peer_args=(-d raid1 -m raid1); strata_layout=mirror ;;
  mirror3) ndev=3; peer=raid1c3; peer_args=(-d raid1c3 -m raid1c3); strata_layout=mirror ;;
  parity2) ndev=4; peer=raid6; peer_args=(-d raid6 -m raid1c3); strata_layout=parity2 ;;
  *) echo "LAYOUT is mirror, mirror3 or parity2, not '$layout'" >&2; exit 2 ;;
esac
for v in "$rounds" "$scale" "$secs" "$clients"; do
  case "$v" in '' | *[!0-9]* | 0) echo "ROUNDS, SCALE, SECONDS and CLIENTS are positive integers ('$v')" >&2; exit 2 ;; esac
done
[ "$(id -u)" -eq 0 ] || { echo "run as root (loop devices, mounts, PostgreSQL as user postgres)" >&2; exit 2; }
PG_BIN=/usr/lib/postgresql/15/bin
need=()
[ -x "$PG_BIN/pgbench" ] || need+=(postgresql-15 postgresql-contrib)
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
if [ "$db" = mariadb ]; then
  [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
  command -v sysbench >/dev/null || need+=(sysbench)
fi
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# STRATA_BENCH_BIN: a strata binary to measure instead of this checkout's release build.
if [ -z "${STRATA_BENCH_BIN:-}" ]; then (cd "$ROOT" && cargo build --release -p strata-cli --quiet); fi
PG_PORT="${PG_PORT:-55462}"
work="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-redundancy}"
export STRATA_E2E_DIR="$work/strata" STRATA_BIN="$work/strata-bin"
# shellcheck source=scripts/e2e/strata-env.sh
. "$ROOT/scripts/e2e/strata-env.sh"
mnt="$work/mnt"; sock="$work/pg-sock"; dev_size="${DEV_SIZE:-4G}"
case "$dev_size" in *[!0-9GMK]* | '') echo "DEV_SIZE is a size like 4G or 1024M ('$dev_size')" >&2; exit 2 ;; esac
loops=()
pg_as() { runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
pgb() { "$PG_BIN/pgbench" -h "$sock" -p "$PG_PORT" -U postgres "$@"; }

detach_loops() {
  local l
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
  loops=()
}
cleanup() {
  kill_db
  "$STRATA_BIN" unmount "$mnt" >/dev/null 2>&1 || true
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  strata_stop >/dev/null 2>&1 || true
  detach_loops
}
trap cleanup EXIT
rm -rf "$work"; mkdir -p "$work"; chmod 755 "$work"
cp "${STRATA_BENCH_BIN:-$ROOT/target/release/strata}" "$STRATA_BIN"

# Fresh loop devices over zero image files (direct I/O): the layout's and two to replace onto.
fresh_loops() {
  detach_loops
  local i
  for i in $(seq 1 $((ndev + 2))); do
    rm -f "$work/d$i.img"; truncate -s "$dev_size" "$work/d$i.img"
    loops+=("$(losetup --find --show --direct-io=on "$work/d$i.img")")
  done
}

# The database: PostgreSQL + pgbench (DB=postgres) or MariaDB + sysbench oltp_read_write
# with TR-4722's parameters (DB=mariadb: 2 tables of SCALE rows, CLIENTS threads,
# innodb_flush_log_at_trx_commit=1, O_DIRECT, a 128 MiB buffer pool).
start_pg() { # initdb when asked, then start
  if [ "$db" = mariadb ]; then start_maria "$@"; return; fi
  install -d -o postgres -g postgres -m 700 "$mnt/pgdata" "$sock"
  if [ "${1:-}" = init ]; then
    pg_as initdb -D "$mnt/pgdata" --auth=trust --username=postgres --encoding=UTF8 --locale=C >"$work/initdb.log" 2>&1
    cat >>"$mnt/pgdata/postgresql.conf" <<CONF
port = $PG_PORT
listen_addresses = ''
unix_socket_directories = '$sock'
fsync = on
synchronous_commit = on
shared_buffers = 128MB
CONF
  fi
  install -o postgres -g postgres -m 644 /dev/null "$work/pg.log"
  pg_as pg_ctl start -D "$mnt/pgdata" -l "$work/pg.log" -w -t 120 >/dev/null || { tail -5 "$work/pg.log" >&2; return 1; }
}
stop_pg() {
  if [ "$db" = mariadb ]; then stop_maria; return; fi
  pg_as pg_ctl stop -D "$mnt/pgdata" -m fast -w -t 120 >/dev/null
}
kill_db() { # stop at once, as a crash would (a degraded btrfs may not let it stop cleanly)
  if [ "$db" = mariadb ]; then
    if [ -f "$sock/pid" ]; then kill -9 "$(cat "$sock/pid")" 2>/dev/null || true; fi
    for _ in $(seq 100); do pgrep -f "mariadbd.*$sock" >/dev/null || break; sleep 0.1; done
    rm -f "$sock/pid"
    return 0
  fi
  if [ -f "$mnt/pgdata/postmaster.pid" ]; then pg_as pg_ctl stop -D "$mnt/pgdata" -m immediate -w -t 120 >/dev/null 2>&1 || true; fi
}
maria() { mariadb --no-defaults -S "$sock/sock" -u root "$@"; }
start_maria() {
  install -d -o mysql -g mysql -m 755 "$sock"
  if [ "${1:-}" = init ]; then
    install -d -o mysql -g mysql -m 750 "$mnt/mysql"
    mariadb-install-db --no-defaults --user=mysql --datadir="$mnt/mysql" >"$work/initdb.log" 2>&1
  fi
  install -o mysql -g mysql -m 644 /dev/null "$work/pg.log"
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$mnt/mysql" --socket="$sock/sock" --skip-networking \
    --pid-file="$sock/pid" --log-error="$work/pg.log" --skip-log-bin \
    --innodb-flush-log-at-trx-commit=1 --innodb-flush-method=O_DIRECT --innodb-buffer-pool-size=128M \
    >/dev/null 2>&1 &
  disown  # kill_db's kill -9 is expected: no job notice from the shell
  local _i
  for _i in $(seq 600); do
    mariadb-admin --no-defaults -S "$sock/sock" -u root ping >/dev/null 2>&1 && return 0
    pgrep -f "mariadbd.*$sock" >/dev/null || break
    sleep 0.2
  done
  tail -5 "$work/pg.log" >&2; echo "MariaDB did not start" >&2; return 1
}
stop_maria() {
  mariadb-admin --no-defaults -S "$sock/sock" -u root shutdown
  for _ in $(seq 600); do [ -e "$sock/pid" ] || return 0; sleep 0.2; done
  echo "MariaDB did not stop within 120 s" >&2; return 1
}
sb() { sysbench oltp_read_write --db-driver=mysql --mysql-socket="$sock/sock" --mysql-user=root --mysql-db=sbtest \
  --tables=2 --table-size="$scale" --threads="$clients" "$@"; }

# Appends to the work dir's cpu.log how busy the machine's CPUs were since /proc/stat's
# first line was $1 (%; all CPUs together), with the config being measured.
cpu_busy() {
  python3 - "$1" "$(head -1 /proc/stat)" "${config:-?}" >>"$work/cpu.log" <<'PY'
import sys
a, b = ([int(x) for x in l.split()[1:]] for l in sys.argv[1:3])
d = [y - x for x, y in zip(a, b)]
idle = d[3] + d[4]
print(f"{sys.argv[3]}\tbusy {100 * (sum(d) - idle) / max(sum(d), 1):.1f} %\tiowait {100 * d[4] / max(sum(d), 1):.1f} %")
PY
}

run_tps() { # prints the TPS of one pgbench (sysbench) run
  local out="$work/run.out"
  if [ "$db" = mariadb ]; then
    local c0; c0="$(head -1 /proc/stat)"
    sb --time="$secs" run >"$out" 2>&1 || { tail -3 "$out" >&2; echo "sysbench failed" >&2; return 1; }
    cpu_busy "$c0"
    python3 - "$out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
tps = re.search(r"transactions: +\d+ +\(([\d.]+) per sec", text)
errors = re.search(r"ignored errors: +(\d+)", text)
if not tps or (errors and int(errors.group(1))):
    sys.exit("sysbench: no TPS, or errors:\n" + text[-600:])
print(f"{float(tps.group(1)):.0f}", end="")
PY
    return
  fi
  local cpu0; cpu0="$(head -1 /proc/stat)"
  pgb -n -c "$clients" -j 2 -T "$secs" postgres >"$out" 2>&1 || { tail -3 "$out" >&2; echo "pgbench failed" >&2; return 1; }
  cpu_busy "$cpu0"
  local tps failed
  tps="$(awk '/^tps = / { print $3; exit }' "$out")"
  failed="$(awk '/^number of failed transactions: / { print $5; exit }' "$out")"
  if [ -z "$tps" ] || [ "${failed:-0}" != 0 ]; then cat "$out" >&2; echo "pgbench failed" >&2; return 1; fi
  printf '%.0f' "$tps"
}

# Work under load (a rebuild, a scrub): pgbench -T SECONDS with per-second progress in the
# background; 3 s in, "$@" starts the work and returns when it has ended. Prints the TPS of
# the progress seconds the work overlapped and the work's seconds.
under_load() {
  local out="$work/load.out" pid t_run t0 t1
  t_run="$(date +%s.%N)"
  if [ "$db" = mariadb ]; then
    sb --time="$secs" --report-interval=1 run >"$out" 2>&1 &
  else
    pgb -n -c "$clients" -j 2 -T "$secs" -P 1 postgres >"$out" 2>&1 &
  fi
  pid=$!
  sleep 3
  t0="$(date +%s.%N)"
  "$@"
  t1="$(date +%s.%N)"
  if ! wait "$pid"; then tail -3 "$out" >&2; echo "$db's load failed during $*" >&2; return 1; fi
  python3 - "$out" "$t_run" "$t0" "$t1" <<'PY'
import math, re, sys
text = open(sys.argv[1]).read()
run, t0, t1 = (float(x) for x in sys.argv[2:5])
a, b = t0 - run, t1 - run
failed = re.search(r"number of failed transactions: (\d+)|ignored errors: +(\d+)", text)
if failed and int(failed.group(1) or failed.group(2)):
    sys.exit("the load reported failed transactions during the work")
# pgbench's "progress: 5.0 s, 1234.5 tps, ..." and sysbench's "[ 5s ] thds: 4 tps: 812.87
# ..." cover the second before 5 s.
samples = [(float(t), float(v)) for t, v in re.findall(r"progress: ([\d.]+) s, ([\d.]+) tps", text)]
samples += [(float(t), float(v)) for t, v in re.findall(r"\[ *(\d+)s \] thds: \d+ tps: ([\d.]+)", text)]
hit = [v for t, v in samples if t > a and t - 1 < max(b, a + 1e-9)]
if not hit:
    sys.exit("no progress sample of the load overlaps the work")
print(f"{sum(hit) / len(hit):.0f} {b - a:.2f}", end="")
PY
}
strata_scrub() { # returns when the scrub has ended; fails on damage
  "$STRATA_BIN" pool scrub b >"$work/scrub.out"
  grep -q " 0 damaged" "$work/scrub.out" || { cat "$work/scrub.out" >&2; echo "the scrub found damage" >&2; return 1; }
}
strata_replace() { # $1: old device, $2: new device; returns when the rebuild has ended (as btrfs replace -B does)
  "$STRATA_BIN" pool replace b "$1" "$2" --wait >/dev/null
}
btrfs_scrub() { # returns when the scrub has ended
  btrfs scrub start -B "$mnt" >"$work/scrub.out"
}
btrfs_replace() { # $1: devid, $2: new device; returns when the replace has ended
  # A degraded btrfs raid1 that took writes may refuse `btrfs replace` with ENOSPC (seen
  # 2026-11-27 on 2 and 4 GiB devices); then its other way back: add the new device and
  # remove the missing one (which rewrites the missing device's chunks onto it). Said on
  # stderr and counted in the work dir's btrfs-fallbacks.
  if ! btrfs replace start -B -f "$1" "$2" "$mnt" >"$work/replace.err" 2>&1; then
    echo "btrfs replace failed ($(tail -1 "$work/replace.err")): device add + remove missing instead" >&2
    echo "$(date +%T) $1 $2" >>"$work/btrfs-fallbacks"
    btrfs device add -f "$2" "$mnt" >/dev/null && btrfs device remove missing "$mnt"
  fi
}

load() {
  start_pg init
  if [ "$db" = mariadb ]; then
    maria -e "create database sbtest"
    sb prepare >"$work/init.log" 2>&1 || { tail -5 "$work/init.log" >&2; return 1; }
    maria -e "flush tables" sbtest
    return
  fi
  pgb -i -s "$scale" -q postgres >"$work/init.log" 2>&1
  "$PG_BIN/psql" -X -q -h "$sock" -p "$PG_PORT" -U postgres -c checkpoint postgres
}

strata_config() { # $1 = single | mirror | parity2; prints healthy [degraded rebuild_s during_tps during_s scrub_s scrub_tps scrub_load_s]
  cleanup; fresh_loops
  rm -rf "$STRATA_E2E_DIR"; mkdir -p "$STRATA_E2E_DIR" "$mnt"
  STRATA_POOL_SIZE=1G strata_start >&2
  if [ "$1" = single ]; then
    "$STRATA_BIN" pool create b --device "${loops[0]}" >/dev/null
  else
    local devs=() i
    for i in $(seq 0 $((ndev - 1))); do devs+=(--device "${loops[$i]}"); done
    "$STRATA_BIN" pool create b --layout "$strata_layout" "${devs[@]}" >/dev/null
  fi
  "$STRATA_BIN" volume create b/pg >/dev/null
  "$STRATA_BIN" mount b/pg "$mnt" >/dev/null
  chmod 755 "$mnt"
  load
  local healthy; healthy="$(run_tps)"
  if [ "$1" = single ] || [ "$healthy_only" = 1 ]; then stop_pg; printf '%s' "$healthy"; return; fi
  "$STRATA_BIN" pool offline b "${loops[1]}" >/dev/null
  local degraded; degraded="$(run_tps)"
  stop_pg
  # Replaced by a blank device, as btrfs's is (`pool online` would copy only what the
  # device missed while offline: device/mirror/missed.rs).
  local t0; t0="$(date +%s.%N)"
  strata_replace "${loops[1]}" "${loops[$ndev]}"
  local t1; t1="$(date +%s.%N)"
  # The same failure again (the device that replaced device 2), replaced under load onto
  # the second spare.
  "$STRATA_BIN" pool offline b "${loops[$ndev]}" >/dev/null
  start_pg
  local during; during="$(under_load strata_replace "${loops[$ndev]}" "${loops[$((ndev + 1))]}")"
  stop_pg
  local s0 s1; s0="$(date +%s.%N)"
  strata_scrub
  s1="$(date +%s.%N)"
  start_pg
  local scrubbing; scrubbing="$(under_load strata_scrub)"
  stop_pg
  printf '%s %s %s %s %s %s' "$healthy" "$degraded" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$during" \
    "$(awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.2f", b - a }')" "$scrubbing"
}

btrfs_config() { # prints healthy degraded rebuild_s during_tps during_s scrub_s scrub_tps scrub_load_s
  cleanup; fresh_loops
  mkdir -p "$mnt"
  mkfs.btrfs -q -f "${peer_args[@]}" "${loops[@]:0:$ndev}" >/dev/null
  mount "${loops[0]}" "$mnt"
  chmod 755 "$mnt"
  load
  local healthy; healthy="$(run_tps)"
  stop_pg; umount "$mnt"
  if [ "$healthy_only" = 1 ]; then printf '%s' "$healthy"; return; fi
  losetup -d "${loops[1]}"
  # btrfs still knows the detached device by its path: forget every device, then scan
  # the ones left (without this a raid6 mount -o degraded fails fsync with EIO).
  btrfs device scan --forget
  btrfs device scan "${loops[0]}" "${loops[@]:2:$((ndev - 2))}" >/dev/null
  mount -o degraded "${loops[0]}" "$mnt"
  # btrfs raid6 may fail a degraded write (fsync EIO: its RAID5/6 known problems; the
  # database may not even start): that run counts as 0 TPS, the database is stopped as it
  # is, and the replace goes on.
  local degraded
  if ! start_pg || ! degraded="$(run_tps)"; then
    echo "btrfs-$peer: $db's load failed degraded (see $work/pg.log): counted as 0 TPS" >&2
    degraded=0
  fi
  kill_db
  local devid t0 t1
  devid="$(btrfs filesystem show "$mnt" | awk '/missing/ { print $2; exit }')"
  [ -n "$devid" ] || devid=2
  t0="$(date +%s.%N)"
  if ! btrfs_replace "$devid" "${loops[$ndev]}"; then
    # btrfs raid1c3 degraded on these devices: the replace fails with ENOSPC (seen
    # 2026-11-27), and so may the add + remove. Reported as 0 (failed) for the replace, the
    # rebuild under load and the scrub; the loop devices are left to cleanup.
    echo "btrfs-$peer: btrfs replace (and device add + remove missing) failed: counted as failed (0)" >&2
    umount "$mnt" 2>/dev/null || umount -l "$mnt"
    loops=("${loops[0]}" "${loops[@]:2}")
    printf '%s %s 0 0 0 0 0 0' "$healthy" "$degraded"
    return 0
  fi
  t1="$(date +%s.%N)"
  # The same failure again (the device that replaced device 2), replaced under load onto
  # the second spare.
  local fs=("${loops[0]}" "${loops[$ndev]}" "${loops[@]:2:$((ndev - 2))}")
  umount "$mnt"
  losetup -d "${fs[1]}"
  btrfs device scan --forget
  btrfs device scan "${fs[0]}" "${fs[@]:2}" >/dev/null
  mount -o degraded "${fs[0]}" "$mnt"
  local during
  devid="$(btrfs filesystem show "$mnt" | awk '/missing/ { print $2; exit }')"
  [ -n "$devid" ] || devid=2
  if ! start_pg || ! during="$(under_load btrfs_replace "$devid" "${loops[$((ndev + 1))]}")"; then
    echo "btrfs-$peer: $db's load failed during the replace (see $work/pg.log): counted as 0 TPS" >&2
    during="0 0"
  fi
  kill_db
  # Healthy again for the scrub (a replace PostgreSQL's failure kept from running runs now).
  if btrfs filesystem show "$mnt" | grep -q missing; then btrfs_replace "$devid" "${loops[$((ndev + 1))]}"; fi
  local s0 s1; s0="$(date +%s.%N)"
  btrfs scrub start -B "$mnt" >"$work/scrub.out"
  s1="$(date +%s.%N)"
  local scrubbing
  if ! start_pg || ! scrubbing="$(under_load btrfs_scrub)"; then
    echo "btrfs-$peer: $db's load failed during the scrub (see $work/pg.log): counted as 0 TPS" >&2
    scrubbing="0 0"
  fi
  kill_db
  umount "$mnt"
  # Detached above (their numbers may be reused): not ours to detach again.
  loops=("${loops[0]}" "${loops[@]:2:$((ndev - 2))}" "${loops[$((ndev + 1))]}")
  printf '%s %s %s %s %s %s' "$healthy" "$degraded" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$during" \
    "$(awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.2f", b - a }')" "$scrubbing"
}

results="$work/results.tsv"; : >"$results"
configs=(strata-single "strata-$layout" "btrfs-$peer")
for r in $(seq 1 "$rounds"); do
  order=("${configs[@]}")
  if [ $((r % 2)) -eq 0 ]; then order=("btrfs-$peer" "strata-$layout" strata-single); fi
  for c in "${order[@]}"; do
    config="$c"
    # Not in a $(...) subshell: the loop devices it attaches must be detached here.
    case "$c" in
      strata-single) strata_config single >"$work/value" ;;
      strata-*) strata_config "$layout" >"$work/value" ;;
      btrfs-*) btrfs_config >"$work/value" ;;
    esac
    v="$(cat "$work/value")"
    printf '%s\t%s\t%s\n' "$r" "$c" "$v" | tee -a "$results"
  done
done
cleanup
python3 - "$results" "$scale" "$secs" "$clients" "$layout" "$peer" "$db" "$healthy_only" <<'PY'
import statistics, sys
layout, peer, db, healthy_only = sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8] == "1"
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
by = {}
for r, c, v in rows:
    by.setdefault(c, []).append([float(x) for x in v.split()])
if db == "mariadb":
    print(f"\nsysbench oltp_read_write on MariaDB, 2 tables x {sys.argv[2]} rows, {sys.argv[4]} threads, {sys.argv[3]} s; rounds alternating; loop devices (direct I/O) over image files")
else:
    print(f"\npgbench -i -s {sys.argv[2]}; pgbench -c {sys.argv[4]} -j 2 -T {sys.argv[3]}; rounds alternating; loop devices (direct I/O) over image files")
L, P = f"strata-{layout}", f"btrfs-{peer}"
if healthy_only:
    print(f"\n| round | strata-single tps | {L} tps healthy | {P} tps healthy |")
    print("|---|---:|---:|---:|")
    for i in range(max(len(v) for v in by.values())):
        print(f"| {i+1} | " + " | ".join(f"{by[c][i][0]:.0f}" for c in ("strata-single", L, P)) + " |")
    s, m, b = (statistics.median(v[0] for v in by[c]) for c in ("strata-single", L, P))
    print(f"| median | {s:.0f} | {m:.0f} | {b:.0f} |")
    print(f"\n{layout} healthy / single: {m/s:.3f} (target >= 0.9 for a mirror)")
    print(f"{layout} healthy / btrfs {peer} healthy: {m/b:.3f} (target >= 1.0)")
    sys.exit(0)
print(f"\n| round | strata-single tps | {L} tps healthy / degraded / rebuild s / tps during rebuild / its s / scrub s / tps during scrub / its s | {P} tps healthy / degraded / replace s / tps during replace / its s / scrub s / tps during scrub / its s |")
print("|---|---|---|---|")
n = max(len(v) for v in by.values())
fmt = lambda v: " / ".join(f"{x:.0f}" if i in (0, 1, 3, 6) else f"{x:.2f}" for i, x in enumerate(v))
for i in range(n):
    print(f"| {i+1} | {fmt(by['strata-single'][i])} | {fmt(by[L][i])} | {fmt(by[P][i])} |")
med = {c: [statistics.median(col) for col in zip(*v)] for c, v in by.items()}
print(f"| median | {fmt(med['strata-single'])} | {fmt(med[L])} | {fmt(med[P])} |")
s, m, b = med["strata-single"], med[L], med[P]
q = lambda x, y: f"{x / y:.3f}" if y else "n/a (the peer failed: 0)"
print(f"\n{layout} healthy / single: {m[0]/s[0]:.3f} (target >= 0.9 for a mirror)")
print(f"{layout} healthy / btrfs {peer} healthy: {m[0]/b[0]:.3f} (target >= 1.0)")
print(f"{layout} degraded / {layout} healthy: {m[1]/m[0]:.3f} (target >= 0.9); btrfs: {b[1]/b[0]:.3f}")
print(f"rebuild time, {layout} / btrfs replace: {q(m[2], b[2])} (target <= 1.0)")
print(f"{layout} TPS during rebuild / healthy: {m[3]/m[0]:.3f} (target >= 0.7); btrfs during replace: {q(b[3], b[0])}")
print(f"rebuild time under load, {layout} / btrfs replace: {q(m[4], b[4])}")
print(f"scrub time (idle, healthy), {layout} / btrfs scrub: {q(m[5], b[5])}")
print(f"{layout} TPS during scrub / healthy: {m[6]/m[0]:.3f}; btrfs during scrub: {q(b[6], b[0])}")
print(f"scrub time under load, {layout} / btrfs scrub: {q(m[7], b[7])}")
PY
