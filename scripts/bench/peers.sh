#!/usr/bin/env bash
# Strata next to the file systems a database admin would pick instead of it, in one session,
# on the same disk: each target is a freshly made file system of the same size (FS_SIZE), its
# image file under PEERS_DIR, made, measured and destroyed one after the other:
#
#   ext4              mkfs.ext4 on a loop device (image file, losetup --direct-io=on)
#   xfs               mkfs.xfs on a loop device
#   btrfs             mkfs.btrfs on a loop device
#   btrfs-zstd        the same, mounted -o compress=zstd
#   fuse-passthrough  libfuse's passthrough_ll example (-o writeback) over a directory on the
#                     ext4 loop mount: what FUSE alone costs (see peers/build-passthrough.sh)
#   strata            a Strata volume (default/bench), daemon target/release/strata with a
#                     fresh pool image of FS_SIZE (the daemon opens it O_DIRECT)
#
# Workloads per target, each in its own directory inside the target's mount:
#   fio       4 KiB random 75/25 read/write at iodepth 1 and 16 (libaio, direct=1 where the
#             target takes O_DIRECT, else buffered); sequential 4 KiB and 16 KiB overwrites with
#             fdatasync after each write (psync, buffered: the redo-log/WAL pattern); 16 KiB
#             random read (libaio, iodepth 1). IOPS and completion/fdatasync latency percentiles.
#   pgbench   PostgreSQL 15, scale SCALE, synchronous_commit=on, shared_buffers=128MB,
#             TPC-B-like runs with PG_CLIENTS clients (-j min(clients,2)), PG_SECONDS each.
#   sysbench  MariaDB 10.11 + sysbench oltp_read_write with NetApp TR-4722's parameters
#             (--tables=2 --table-size=10000 --range_size=100 --rand-type=uniform), MY_THREADS,
#             MY_SECONDS each; innodb_flush_log_at_trx_commit=1, innodb_flush_method=O_DIRECT,
#             buffer pool 128M; then one run on a data set larger than the buffer pool
#             (MY_LARGE_TABLES x MY_LARGE_TABLE_SIZE rows, MY_LARGE_THREADS threads).
#
#   cargo build --release -p strata-cli
#   scripts/bench/peers.sh                 # full run, ~40 min on 2 cores (PG_SECONDS=60 MY_SECONDS=30: ~65 min)
#   QUICK=1 scripts/bench/peers.sh         # smoke test: everything, a few seconds each
#   ROUNDS=3 TARGETS="ext4 btrfs fuse-passthrough strata" scripts/bench/peers.sh
#                                          # each target 3 times, in alternating order; medians
#
# Output (OUT_DIR, default docs/benchmarks/peers): results.json (raw numbers, machine, versions,
# command line), results.md (tables, ratios, target summary), *.png charts. Progress goes to
# stderr and to OUT_DIR/run.log. Everything is unmounted/stopped/removed on exit (also on failure
# or Ctrl-C); the work dir with tool output and server logs is kept on failure or KEEP_WORK=1.
#
# Environment (all optional; QUICK=1 changes the defaults marked *):
#   TARGETS          subset/order of the targets above (default: all six)
#   ROUNDS           times every target is set up and measured (default 1). Rounds alternate the
#                    order (forward, backward, ...) so that a drift of the machine (other tenants'
#                    load, steal time) spreads over all targets; the report gives the median of
#                    the rounds and results.json every value.
#   WORKLOADS        subset of "fio pgbench sysbench" (default: all)
#   PEERS_DIR        where images, mount points and the Strata daemon dir go (/var/tmp/strata-peers)
#   FS_SIZE          size of every file system / the Strata pool and volume (8G)
#   LOOP_DIRECT_IO   losetup --direct-io=on|off (on: the loop device does not cache in the host's
#                    page cache, as Strata's O_DIRECT pool image does not)
#   FIO_SECONDS*     seconds per fio job (15; QUICK 3)      FIO_RAMP* ramp seconds (2; QUICK 0)
#   FIO_SIZE*        random-I/O file size (1G; QUICK 128M)  FIO_SYNC_SIZE* fdatasync file (256M; QUICK 32M)
#   SCALE*           pgbench scale (50; QUICK 2)            PG_SECONDS* (30; QUICK 3)
#   PG_CLIENTS       "1 8 32"
#   MY_SECONDS*      (15; QUICK 3)                          MY_THREADS "1 4 8 16 32 64"
#   MY_LARGE_TABLES (4) MY_LARGE_TABLE_SIZE* (500000; QUICK 20000) MY_LARGE_THREADS (8)
#   MY_LARGE_SECONDS* (MY_SECONDS)
#   PG_PORT / MY_PORT   55462 / 53336       (Strata's control socket: PEERS_DIR/strata/strata.sock)
#   STRATA_BIN       target/release/strata  OUT_DIR  docs/benchmarks/peers
#   LABEL            free text put at the top of results.md (e.g. "PRELIMINARY ...")
#   STEP_TIMEOUT     seconds any single step may take (default: longest run + 600)
#   KEEP_WORK=1      keep the work dir on success too
set -euo pipefail
unset STRATA_API # the CLI would talk TCP to it instead of this run's daemon's socket
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/scripts/bench/peers"
E2E_NAME=peers
CMDLINE="$0 $*"
ENV_CMDLINE="$(env | grep -E '^(QUICK|ROUNDS|TARGETS|WORKLOADS|PEERS_DIR|FS_SIZE|LOOP_DIRECT_IO|FIO_[A-Z_]+|SCALE|PG_[A-Z_]+|MY_[A-Z_]+|OUT_DIR|STRATA_[A-Z_]+|STEP_TIMEOUT|LABEL)=' | sort | tr '\n' ' ' || true)"

QUICK="${QUICK:-0}"
if [ "$QUICK" = 1 ]; then
  q() { printf '%s' "$1"; }
else
  q() { printf '%s' "$2"; }
fi
TARGETS="${TARGETS:-ext4 xfs btrfs btrfs-zstd fuse-passthrough strata}"
ROUNDS="${ROUNDS:-1}"
case "$ROUNDS" in '' | *[!0-9]* | 0*) echo "peers.sh: ROUNDS must be a positive number, not '$ROUNDS'" >&2; exit 2 ;; esac
WORKLOADS="${WORKLOADS:-fio pgbench sysbench}"
PEERS_DIR="${PEERS_DIR:-/var/tmp/strata-peers}"
FS_SIZE="${FS_SIZE:-8G}"
LOOP_DIRECT_IO="${LOOP_DIRECT_IO:-on}"
FIO_SECONDS="${FIO_SECONDS:-$(q 3 15)}"
FIO_RAMP="${FIO_RAMP:-$(q 0 2)}"
FIO_SIZE="${FIO_SIZE:-$(q 128M 1G)}"
FIO_SYNC_SIZE="${FIO_SYNC_SIZE:-$(q 32M 256M)}"
SCALE="${SCALE:-$(q 2 50)}"
PG_SECONDS="${PG_SECONDS:-$(q 3 30)}"
PG_CLIENTS="${PG_CLIENTS:-1 8 32}"
MY_SECONDS="${MY_SECONDS:-$(q 3 15)}"
MY_THREADS="${MY_THREADS:-1 4 8 16 32 64}"
MY_LARGE_TABLES="${MY_LARGE_TABLES:-4}"
MY_LARGE_TABLE_SIZE="${MY_LARGE_TABLE_SIZE:-$(q 20000 500000)}"
MY_LARGE_THREADS="${MY_LARGE_THREADS:-8}"
MY_LARGE_SECONDS="${MY_LARGE_SECONDS:-$MY_SECONDS}"
OUT_DIR="${OUT_DIR:-$ROOT/docs/benchmarks/peers}"
PG_PORT="${PG_PORT:-55462}"
MY_PORT="${MY_PORT:-53336}"
LABEL="${LABEL:-}"
SB_TABLES=2
SB_TABLE_SIZE=10000
longest=$((PG_SECONDS > MY_SECONDS ? PG_SECONDS : MY_SECONDS))
longest=$((longest > FIO_SECONDS ? longest : FIO_SECONDS))
: "${STEP_TIMEOUT:=$((longest + 600))}"
export STEP_TIMEOUT
export STRATA_E2E_DIR="${STRATA_E2E_DIR:-$PEERS_DIR/strata}"
export STRATA_SOCKET="$STRATA_E2E_DIR/strata.sock"
export STRATA_BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
export STRATA_POOL_SIZE="$FS_SIZE"
export STRATA_SERVE_ARGS="${STRATA_SERVE_ARGS:-}"
PG_BIN=/usr/lib/postgresql/15/bin
MARIADBD=/usr/sbin/mariadbd
MNT="$PEERS_DIR/mnt"     # the target's mount point (every target, one at a time)
LOWER="$PEERS_DIR/lower" # the ext4 mount under the FUSE pass-through

# shellcheck source=scripts/e2e/db-common.sh
. "$ROOT/scripts/e2e/db-common.sh"
# shellcheck source=scripts/e2e/strata-env.sh
. "$ROOT/scripts/e2e/strata-env.sh"
RUN_LOG=/dev/null
log() { printf '[%s %s] %s\n' "$(e2e_ts)" "$E2E_NAME" "$*" | tee -a "$RUN_LOG" >&2; }

T_START="$(now_s)"
for t in $TARGETS; do
  case "$t" in ext4 | xfs | btrfs | btrfs-zstd | fuse-passthrough | strata) ;; *) die "unknown target $t in TARGETS" ;; esac
done
for w in $WORKLOADS; do
  case "$w" in fio | pgbench | sysbench) ;; *) die "unknown workload $w in WORKLOADS" ;; esac
done
[ "$(id -u)" -eq 0 ] || die "run as root (loop devices, mounts, database servers as postgres/mysql)"

# ------------------------------------------------------------------------------ packages
ensure_pkgs /usr/bin/fio -- fio
ensure_pkgs /sbin/mkfs.xfs -- xfsprogs
ensure_pkgs /sbin/mkfs.btrfs -- btrfs-progs
ensure_pkgs /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c /usr/bin/pkg-config /usr/bin/gcc \
  /usr/bin/fusermount3 -- libfuse3-dev pkg-config gcc fuse3
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/initdb" "$PG_BIN/pg_ctl" "$PG_BIN/pgbench" "$PG_BIN/psql" \
  -- postgresql-15 postgresql-contrib
ensure_pkgs "$MARIADBD" /usr/bin/mariadb-install-db /usr/bin/mariadb /usr/bin/mariadb-admin \
  -- mariadb-server mariadb-client
ensure_pkgs /usr/bin/sysbench /usr/share/sysbench/oltp_read_write.lua -- sysbench
ensure_pkgs /usr/bin/python3 /sbin/losetup /usr/bin/findmnt -- python3 mount util-linux
command -v python3 >/dev/null || die "python3 is needed"
if ! python3 -c 'import matplotlib' 2>/dev/null; then
  log "installing matplotlib with pip"
  timeout 600 python3 -m pip install -q matplotlib >/dev/null 2>&1 ||
    timeout 600 python3 -m pip install -q --break-system-packages matplotlib >/dev/null 2>&1 ||
    warn "matplotlib did not install: no charts"
fi
id postgres >/dev/null 2>&1 || die "user postgres does not exist"
id mysql >/dev/null 2>&1 || die "user mysql does not exist"
case " $TARGETS " in *" strata "*)
  [ -x "$STRATA_BIN" ] || die "no strata binary at $STRATA_BIN (cargo build --release -p strata-cli)" ;;
esac

# ------------------------------------------------------------------------------ refuse if busy
if port_in_use "$PG_PORT"; then die "port $PG_PORT is in use (set PG_PORT)"; fi
if port_in_use "$MY_PORT"; then die "port $MY_PORT is in use (set MY_PORT)"; fi
if findmnt -rn -o TARGET | grep -q "^$PEERS_DIR\(/\|$\)"; then
  die "something is mounted under $PEERS_DIR: $(findmnt -rn -o TARGET | grep "^$PEERS_DIR" | tr '\n' ' ')"
fi
if losetup -n -O BACK-FILE -l 2>/dev/null | grep -q "^$PEERS_DIR/"; then
  die "a loop device still uses an image under $PEERS_DIR: $(losetup -l | grep "$PEERS_DIR")"
fi
mkdir -p "$PEERS_DIR"
exec 9>"$PEERS_DIR/.lock"
flock -n 9 || die "another peers.sh holds $PEERS_DIR/.lock"
find "$PEERS_DIR" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
chmod 755 "$PEERS_DIR"
mkdir -p "$OUT_DIR"
RUN_LOG="$OUT_DIR/run.log"
: >"$RUN_LOG"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/peers.XXXXXX")"
chmod 755 "$WORK"
RESULTS="$WORK/results.tsv" # target  workload  key  metric  value
META="$WORK/meta.tsv"       # target  key  value
: >"$RESULTS"
: >"$META"
cd "$WORK" # runuser keeps the cwd: make it one the database users can read

PGDATA=""
PG_SOCK=""
MYSQLD_PID=""
MY_SOCK=""
STRATA_UP=0
PT_PID=""
LOOP_DEV=""
LOOP_MNT=""

result() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$RESULTS"; }
meta() { printf '%s\t%s\t%s\n' "$1" "$2" "$(printf '%s' "$3" | tr '\t\n' '  ')" >>"$META"; }

# ------------------------------------------------------------------------------ databases
pg_as() { bounded runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
psql_q() { bounded "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PG_SOCK" -p "$PG_PORT" -U postgres "$@"; }
pg_running() {
  local pid
  [ -n "$PGDATA" ] || return 1
  pid="$(head -n 1 "$PGDATA/postmaster.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && is_alive "$pid" && grep -q postgres "/proc/$pid/cmdline" 2>/dev/null
}
my_sql() { bounded mariadb --no-defaults --connect-timeout=10 -S "$MY_SOCK" -u root -N -B "$@"; }

stop_databases() {
  if pg_running; then
    log "stopping PostgreSQL"
    pg_as pg_ctl stop -D "$PGDATA" -m fast -w -t 120 >/dev/null 2>&1 ||
      pg_as pg_ctl stop -D "$PGDATA" -m immediate -w -t 30 >/dev/null 2>&1 || true
  fi
  PGDATA=""
  if [ -n "$MYSQLD_PID" ] && kill -0 "$MYSQLD_PID" 2>/dev/null; then
    log "stopping mariadbd (pid $MYSQLD_PID)"
    timeout 120 mariadb-admin --no-defaults -S "$MY_SOCK" -u root shutdown >/dev/null 2>&1 || true
    wait_bg "$MYSQLD_PID" 120
  fi
  MYSQLD_PID=""
}

# ------------------------------------------------------------------------------ targets
umount_bounded() { # DIR: unmount, lazily if it will not go in 60 s
  local d="$1"
  findmnt -M "$d" >/dev/null 2>&1 || return 0
  timeout 60 umount "$d" 2>/dev/null || { warn "umount $d failed; lazy unmount"; umount -l "$d" 2>/dev/null || true; }
}

stop_passthrough() {
  [ -n "$PT_PID" ] || return 0
  timeout 60 fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
  wait_bg "$PT_PID" 30
  PT_PID=""
}

stop_strata() {
  [ "$STRATA_UP" = 1 ] || return 0
  timeout 60 "$STRATA_BIN" unmount "$MNT" >/dev/null 2>&1 || true
  if ! strata_stop; then
    kill -KILL "$(cat "$STRATA_E2E_DIR/daemon.pid")" 2>/dev/null || true
  fi
  umount -l "$MNT" 2>/dev/null || true
  STRATA_UP=0
}

stop_loop() {
  [ -n "$LOOP_MNT" ] && umount_bounded "$LOOP_MNT"
  LOOP_MNT=""
  if [ -n "$LOOP_DEV" ]; then
    timeout 60 losetup -d "$LOOP_DEV" 2>/dev/null || warn "losetup -d $LOOP_DEV failed"
  fi
  LOOP_DEV=""
}

teardown_target() {
  stop_databases
  stop_passthrough
  stop_strata
  stop_loop
  rm -f "$PEERS_DIR"/*.img
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  kill_nap
  teardown_target
  if [ "$rc" -ne 0 ]; then
    print_failure_logs
    printf '[%s %s] FAILED (exit %s) after %ss; work dir kept: %s\n' \
      "$(e2e_ts)" "$E2E_NAME" "$rc" "$(elapsed_since "$T_START")" "$WORK" | tee -a "$RUN_LOG" >&2
  else
    rm -rf "$STRATA_E2E_DIR"
    if [ "${KEEP_WORK:-0}" = 1 ]; then log "work dir kept: $WORK"; else rm -rf "$WORK"; fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# make_loop FSTYPE DIR [mount options]: fresh image of FS_SIZE, mkfs, loop device, mount at DIR.
make_loop() {
  local fs="$1" dir="$2" opts="${3:-}" img="$PEERS_DIR/$1.img"
  rm -f "$img"
  truncate -s "$FS_SIZE" "$img"
  case "$fs" in
    ext4) bounded mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$img" ;;
    xfs) bounded mkfs.xfs -q -f "$img" ;;
    btrfs) bounded mkfs.btrfs -q -f "$img" >/dev/null ;;
  esac
  LOOP_DEV="$(losetup --direct-io="$LOOP_DIRECT_IO" -f --show "$img")"
  mkdir -p "$dir"
  if [ -n "$opts" ]; then mount -o "$opts" "$LOOP_DEV" "$dir"; else mount "$LOOP_DEV" "$dir"; fi
  LOOP_MNT="$dir"
  chmod 755 "$dir"
}

setup_target() {
  local target="$1"
  mkdir -p "$MNT"
  case "$target" in
    ext4) make_loop ext4 "$MNT" ;;
    xfs) make_loop xfs "$MNT" ;;
    btrfs) make_loop btrfs "$MNT" ;;
    btrfs-zstd) make_loop btrfs "$MNT" compress=zstd ;;
    fuse-passthrough)
      make_loop ext4 "$LOWER"
      mkdir -p "$LOWER/src"
      chmod 755 "$LOWER/src"
      PT_OPTS="source=$LOWER/src,writeback,allow_other"
      "$PT_BIN" -f -o "$PT_OPTS" "$MNT" >>"$WORK/passthrough.log" 2>&1 &
      PT_PID=$!
      add_failure_log "$WORK/passthrough.log"
      wait_for "passthrough_ll to mount $MNT" 30 findmnt -M "$MNT"
      meta "$target" passthrough_options "-f -o $PT_OPTS (multi-threaded session loop; example patched: see scripts/bench/peers/build-passthrough.sh)"
      meta "$target" lower "$(findmnt -no FSTYPE,SOURCE,OPTIONS -M "$LOWER" | tr -s ' ')"
      ;;
    strata)
      strata_fresh
      add_failure_log "$STRATA_E2E_DIR/daemon.log"
      strata_start
      STRATA_UP=1
      strata_mount bench "$MNT" --size "$FS_SIZE" >/dev/null
      [ "$(findmnt -no FSTYPE -M "$MNT")" = fuse ] || die "$MNT is not a FUSE mount"
      meta "$target" serve_args "--default-pool-size $FS_SIZE ${STRATA_SERVE_ARGS}"
      meta "$target" volume "$("$STRATA_BIN" volume show default/bench 2>/dev/null | tr '\n' ' ' | tr -s ' ')"
      ;;
  esac
  meta "$target" mount "$(findmnt -no FSTYPE,SOURCE,OPTIONS -M "$MNT" | tr -s ' ')"
  [ -n "$LOOP_DEV" ] && meta "$target" loop "$LOOP_DEV direct-io=$LOOP_DIRECT_IO image $PEERS_DIR/*.img size $FS_SIZE"
  # O_DIRECT probe (fio's direct=1 needs it)
  if dd if=/dev/zero of="$MNT/.odirect-probe" bs=4096 count=1 oflag=direct status=none 2>/dev/null; then
    TARGET_DIRECT=1
  else
    TARGET_DIRECT=0
    warn "[$target] O_DIRECT open/write failed: fio runs buffered (direct=0)"
  fi
  rm -f "$MNT/.odirect-probe"
  meta "$target" o_direct "$TARGET_DIRECT"
  chmod 755 "$MNT"
}

# ------------------------------------------------------------------------------ fio
fio_job() { # target name args...: one fio run, JSON parsed into results
  local target="$1" name="$2" out="$WORK/$1/fio-$2.json"
  shift 2
  log "[$target] fio $name"
  bounded fio --output-format=json --output="$out" --name="$name" "$@" >"$WORK/$target/fio-$name.stderr" 2>&1 ||
    { cat "$WORK/$target/fio-$name.stderr" "$out" >&2 2>/dev/null; die "fio $name failed"; }
  python3 "$HERE/fio_parse.py" "$target" "$name" "$out" >>"$RESULTS" || die "cannot parse fio output $out"
  printf '%s\t%s\n' "$name" "fio --name=$name $*" >>"$WORK/$target/fio-commands.tsv"
}

bench_fio() {
  local target="$1" d="$MNT/fio"
  mkdir -p "$d"
  local common=(--time_based --runtime="$FIO_SECONDS" --ramp_time="$FIO_RAMP" --group_reporting
    --percentile_list=50:90:99:99.9 --lat_percentiles=1)
  local rnd=(--filename="$d/random.dat" --size="$FIO_SIZE" --ioengine=libaio --direct="$TARGET_DIRECT")
  fio_job "$target" randrw75-4k-qd1 "${common[@]}" "${rnd[@]}" --rw=randrw --rwmixread=75 --bs=4k --iodepth=1
  fio_job "$target" randrw75-4k-qd16 "${common[@]}" "${rnd[@]}" --rw=randrw --rwmixread=75 --bs=4k --iodepth=16
  fio_job "$target" randread-16k-qd1 "${common[@]}" "${rnd[@]}" --rw=randread --bs=16k --iodepth=1
  local bs
  for bs in 4k 16k; do
    fio_job "$target" seqwrite-$bs-fdatasync "${common[@]}" --filename="$d/log-$bs.dat" --size="$FIO_SYNC_SIZE" \
      --overwrite=1 --ioengine=psync --direct=0 --rw=write --bs="$bs" --fdatasync=1
  done
  rm -rf "$d"
}

# ------------------------------------------------------------------------------ PostgreSQL
bench_pgbench() {
  local target="$1" out="$WORK/$1" t0 c j
  PGDATA="$MNT/pgdata"
  PG_SOCK="$out/pg-sock"
  install -d -o postgres -g postgres -m 700 "$PG_SOCK"
  install -d -o postgres -g postgres -m 700 "$PGDATA"
  local server_log="$out/postgres.log"
  install -o postgres -g postgres -m 644 /dev/null "$server_log"
  add_failure_log "$server_log"

  log "[$target] PostgreSQL: initdb in $PGDATA"
  pg_as initdb -D "$PGDATA" --auth=trust --username=postgres --encoding=UTF8 --locale=C \
    >"$out/initdb.log" 2>&1 || { cat "$out/initdb.log" >&2; die "initdb failed"; }
  cat >>"$PGDATA/postgresql.conf" <<EOF

# --- scripts/bench/peers.sh
port = $PG_PORT
listen_addresses = ''
unix_socket_directories = '$PG_SOCK'
fsync = on
synchronous_commit = on
full_page_writes = on
shared_buffers = 128MB
max_connections = 64
logging_collector = off
EOF
  pg_as pg_ctl start -D "$PGDATA" -l "$server_log" -w -t 120 >"$out/pg_ctl.out" 2>&1 ||
    { cat "$out/pg_ctl.out" >&2; die "PostgreSQL did not start"; }
  wait_for "PostgreSQL to accept connections" 60 psql_q -d postgres -c 'select 1'
  meta "$target" pg_wal_sync_method "$(psql_q -d postgres -c 'show wal_sync_method')"
  psql_q -d postgres -c 'create database bench'

  log "[$target] pgbench -i -s $SCALE"
  t0="$(now_s)"
  bounded "$PG_BIN/pgbench" -h "$PG_SOCK" -p "$PG_PORT" -U postgres -i -s "$SCALE" -q bench \
    >"$out/pgbench-init.out" 2>&1 || { cat "$out/pgbench-init.out" >&2; die "pgbench -i failed"; }
  result "$target" pgbench-init "$SCALE" seconds "$(elapsed_since "$t0")"

  for c in $PG_CLIENTS; do
    j=$((c < 2 ? c : 2))
    psql_q -d bench -c 'vacuum analyze'
    psql_q -d bench -c 'checkpoint'
    log "[$target] pgbench -c $c -j $j -T $PG_SECONDS"
    bounded "$PG_BIN/pgbench" -h "$PG_SOCK" -p "$PG_PORT" -U postgres -n -c "$c" -j "$j" \
      -T "$PG_SECONDS" bench >"$out/pgbench-c$c.out" 2>&1 ||
      { cat "$out/pgbench-c$c.out" >&2; die "pgbench -c $c failed"; }
    local tps lat failed
    tps="$(awk '/^tps = / { print $3; exit }' "$out/pgbench-c$c.out")"
    lat="$(awk '/^latency average = / { print $4; exit }' "$out/pgbench-c$c.out")"
    failed="$(awk '/^number of failed transactions: / { print $5; exit }' "$out/pgbench-c$c.out")"
    if [ -z "$tps" ] || [ -z "$lat" ]; then cat "$out/pgbench-c$c.out" >&2; die "cannot parse pgbench output"; fi
    [ "${failed:-0}" = 0 ] || die "pgbench -c $c: $failed failed transactions"
    result "$target" pgbench "$c" tps "$tps"
    result "$target" pgbench "$c" lat_avg_ms "$lat"
    log "[$target] pgbench -c $c: $tps tps, $lat ms average"
  done

  log "[$target] stopping PostgreSQL"
  pg_as pg_ctl stop -D "$PGDATA" -m fast -w -t 120 >/dev/null || die "PostgreSQL did not stop"
  rm -rf "$PGDATA"
  PGDATA=""
}

# ------------------------------------------------------------------------------ MariaDB
sb() {
  bounded sysbench "$@" --db-driver=mysql --mysql-socket="$MY_SOCK" --mysql-user=sbtest \
    --mysql-password=sbtest --mysql-db=sbtest
}
sb_oltp() { # tables table_size args...
  local tables="$1" size="$2"
  shift 2
  sb oltp_read_write --tables="$tables" --table-size="$size" --rand-type=uniform --range_size=100 "$@"
}
sb_run() { # target key tables table_size threads seconds
  local target="$1" key="$2" tables="$3" size="$4" th="$5" secs="$6" f="$WORK/$1/sysbench-$2.out"
  log "[$target] sysbench oltp_read_write $key: --tables=$tables --table-size=$size --threads=$th --time=$secs"
  sb_oltp "$tables" "$size" run --threads="$th" --time="$secs" --percentile=95 >"$f" 2>&1 ||
    { cat "$f" >&2; die "sysbench $key failed"; }
  local tps qps mn avg mx p95 errs
  tps="$(awk '/^ *transactions:/ { gsub(/\(/, "", $3); print $3; exit }' "$f")"
  qps="$(awk '/^ *queries:/ && /per sec/ { gsub(/\(/, "", $3); print $3; exit }' "$f")"
  mn="$(awk '/^ *min:/ { print $2; exit }' "$f")"
  avg="$(awk '/^ *avg:/ { print $2; exit }' "$f")"
  mx="$(awk '/^ *max:/ { print $2; exit }' "$f")"
  p95="$(awk '/^ *95th percentile:/ { print $3; exit }' "$f")"
  errs="$(awk '/^ *ignored errors:/ { print $3; exit }' "$f")"
  if [ -z "$tps" ] || [ -z "$qps" ] || [ -z "$avg" ] || [ -z "$p95" ] || [ -z "$mn" ] || [ -z "$mx" ]; then
    cat "$f" >&2
    die "cannot parse sysbench output"
  fi
  local w=sysbench
  [ "$key" = large ] && w=sysbench-large
  result "$target" "$w" "$th" tps "$tps"
  result "$target" "$w" "$th" qps "$qps"
  result "$target" "$w" "$th" lat_min_ms "$mn"
  result "$target" "$w" "$th" lat_avg_ms "$avg"
  result "$target" "$w" "$th" lat_max_ms "$mx"
  result "$target" "$w" "$th" lat_p95_ms "$p95"
  result "$target" "$w" "$th" ignored_errors "${errs:-0}"
  log "[$target] sysbench $key --threads=$th: $tps tps, $qps qps, min/avg/max $mn/$avg/$mx ms, p95 $p95 ms"
}

bench_sysbench() {
  local target="$1" out="$WORK/$1" t0 th
  local mydata="$MNT/mysql" run_dir="$out/my-run"
  install -d -o mysql -g mysql -m 750 "$run_dir"
  MY_SOCK="$run_dir/mariadbd.sock"
  local err_log="$run_dir/mariadbd.err"
  add_failure_log "$err_log"

  log "[$target] MariaDB: mariadb-install-db into $mydata"
  install -d -o mysql -g mysql -m 750 "$mydata"
  bounded mariadb-install-db --no-defaults --user=mysql --datadir="$mydata" --skip-test-db \
    --auth-root-authentication-method=socket --skip-name-resolve >"$out/install-db.log" 2>&1 ||
    { cat "$out/install-db.log" >&2; die "mariadb-install-db failed"; }
  "$MARIADBD" --no-defaults --user=mysql --datadir="$mydata" --socket="$MY_SOCK" \
    --port="$MY_PORT" --bind-address=127.0.0.1 --pid-file="$run_dir/mariadbd.pid" \
    --log-error="$err_log" --skip-log-bin --skip-name-resolve --max-connections=200 \
    --innodb-flush-log-at-trx-commit=1 --innodb-flush-method=O_DIRECT \
    --innodb-log-file-buffering=OFF --innodb-doublewrite=ON \
    --innodb-buffer-pool-size=128M --innodb-log-file-size=96M >>"$out/mariadbd.stdout" 2>&1 &
  MYSQLD_PID=$!
  local deadline=$((SECONDS + 180))
  until timeout 15 mariadb-admin --no-defaults --connect-timeout=5 -S "$MY_SOCK" -u root ping >/dev/null 2>&1; do
    is_alive "$MYSQLD_PID" || { MYSQLD_PID=""; add_failure_log "$out/mariadbd.stdout"; die "mariadbd exited during start-up"; }
    [ "$SECONDS" -lt "$deadline" ] || die "mariadbd did not accept connections within 180s"
    sleep 0.5
  done
  meta "$target" mariadb_version "$(my_sql -e 'select version()')"
  meta "$target" innodb_redo "$(grep -oE '(File system buffers for log disabled|Buffered log writes).*' "$err_log" | tail -n 1 || true)"
  meta "$target" innodb_aio "$(grep -oE 'Using (io_uring|Linux native AIO|simulated AIO)' "$err_log" | tail -n 1 || true)"
  if grep -qiE 'Failed to set O_DIRECT|O_DIRECT.*(not supported|failed)' "$err_log"; then
    warn "[$target] InnoDB could not use O_DIRECT"
    meta "$target" innodb_o_direct failed
  else
    meta "$target" innodb_o_direct ok
  fi
  my_sql -e "create database sbtest;
    create user sbtest@localhost identified by 'sbtest';
    grant all on sbtest.* to sbtest@localhost;"

  log "[$target] sysbench prepare (--tables=$SB_TABLES --table-size=$SB_TABLE_SIZE)"
  t0="$(now_s)"
  sb_oltp "$SB_TABLES" "$SB_TABLE_SIZE" prepare >"$out/sysbench-prepare.out" 2>&1 ||
    { cat "$out/sysbench-prepare.out" >&2; die "sysbench prepare failed"; }
  result "$target" sysbench-prepare "$SB_TABLES" seconds "$(elapsed_since "$t0")"
  for th in $MY_THREADS; do
    sb_run "$target" "t$th" "$SB_TABLES" "$SB_TABLE_SIZE" "$th" "$MY_SECONDS"
  done
  sb_oltp "$SB_TABLES" "$SB_TABLE_SIZE" cleanup >>"$out/sysbench-prepare.out" 2>&1 || die "sysbench cleanup failed"

  if [ "${MY_LARGE_TABLE_SIZE}" -gt 0 ]; then
    log "[$target] sysbench prepare, large (--tables=$MY_LARGE_TABLES --table-size=$MY_LARGE_TABLE_SIZE)"
    t0="$(now_s)"
    sb_oltp "$MY_LARGE_TABLES" "$MY_LARGE_TABLE_SIZE" prepare --threads=2 >"$out/sysbench-prepare-large.out" 2>&1 ||
      { cat "$out/sysbench-prepare-large.out" >&2; die "sysbench prepare (large) failed"; }
    result "$target" sysbench-prepare-large "$MY_LARGE_TABLES" seconds "$(elapsed_since "$t0")"
    meta "$target" sysbench_large_data_mb "$(du -sm "$mydata/sbtest" 2>/dev/null | cut -f1)"
    sb_run "$target" large "$MY_LARGE_TABLES" "$MY_LARGE_TABLE_SIZE" "$MY_LARGE_THREADS" "$MY_LARGE_SECONDS"
  fi

  log "[$target] stopping mariadbd"
  bounded mariadb-admin --no-defaults -S "$MY_SOCK" -u root shutdown || die "mariadb-admin shutdown failed"
  wait_bg "$MYSQLD_PID" 180
  [ "$WAIT_BG_RC" -eq 0 ] || die "mariadbd did not shut down cleanly (exit $WAIT_BG_RC)"
  MYSQLD_PID=""
  rm -rf "$mydata"
}

# ------------------------------------------------------------------------------ main
run_target() {
  local target="$1" t0 w
  t0="$(now_s)"
  mkdir -p "$WORK/$target"
  log "[$target] setting up (fresh $FS_SIZE file system)"
  setup_target "$target"
  DB_DIR="$MNT"
  require_db_dir postgres
  require_db_dir mysql
  for w in $WORKLOADS; do
    sync
    "bench_$w" "$target"
  done
  if [ "$target" = strata ]; then
    cp "$STRATA_E2E_DIR/daemon.log" "$WORK/$target/daemon.log"
    # fuser logs "Failed to send FUSE reply: No such file or directory" when the kernel has
    # already dropped the request (see strata_log_clean in scripts/e2e/strata-env.sh): counted.
    meta "$target" daemon_log_reply_enoent "$(grep -c 'Failed to send FUSE reply: No such file or directory' "$WORK/$target/daemon.log" || true)"
    meta "$target" daemon_log_other_errors "$(grep ' ERROR ' "$WORK/$target/daemon.log" | grep -vc 'Failed to send FUSE reply: No such file or directory' || true)"
  fi
  teardown_target
  meta "$target" seconds "$(elapsed_since "$t0")"
  log "[$target] done in $(elapsed_since "$t0")s"
}

n_t=$(echo "$TARGETS" | wc -w)
est=0
case " $WORKLOADS " in *" fio "*) est=$((est + 5 * (FIO_SECONDS + FIO_RAMP) + 20)) ;; esac
case " $WORKLOADS " in *" pgbench "*) est=$((est + $(echo "$PG_CLIENTS" | wc -w) * PG_SECONDS + SCALE + 20)) ;; esac
case " $WORKLOADS " in *" sysbench "*) est=$((est + $(echo "$MY_THREADS" | wc -w) * MY_SECONDS + MY_LARGE_SECONDS + MY_LARGE_TABLES * MY_LARGE_TABLE_SIZE / 20000 + 40)) ;; esac
log "targets: $TARGETS; workloads: $WORKLOADS; rounds: $ROUNDS; FS_SIZE=$FS_SIZE; rough estimate $((ROUNDS * n_t * est / 60)) min; work dir $WORK"

PT_BIN="$WORK/passthrough_ll"
case " $TARGETS " in *" fuse-passthrough "*)
  log "building libfuse passthrough_ll into $PT_BIN"
  "$HERE/build-passthrough.sh" "$PT_BIN" >"$WORK/passthrough-build.log" 2>&1 ||
    { cat "$WORK/passthrough-build.log" >&2; die "building passthrough_ll failed"; } ;;
esac

for round in $(seq 1 "$ROUNDS"); do
  order="$TARGETS"
  [ $((round % 2)) = 0 ] && order="$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')"
  [ "$ROUNDS" = 1 ] || log "round $round of $ROUNDS: $order"
  for t in $order; do run_target "$t"; done
done

# ------------------------------------------------------------------------------ report
log "writing the report into $OUT_DIR"
RESULTS="$RESULTS" META="$META" OUT_DIR="$OUT_DIR" ROOT="$ROOT" TARGETS="$TARGETS" WORKLOADS="$WORKLOADS" \
  CMDLINE="$CMDLINE" ENV_CMDLINE="$ENV_CMDLINE" WORK="$WORK" LABEL="$LABEL" QUICK="$QUICK" \
  FS_SIZE="$FS_SIZE" LOOP_DIRECT_IO="$LOOP_DIRECT_IO" FIO_SECONDS="$FIO_SECONDS" FIO_RAMP="$FIO_RAMP" \
  FIO_SIZE="$FIO_SIZE" FIO_SYNC_SIZE="$FIO_SYNC_SIZE" SCALE="$SCALE" PG_SECONDS="$PG_SECONDS" \
  PG_CLIENTS="$PG_CLIENTS" MY_SECONDS="$MY_SECONDS" MY_THREADS="$MY_THREADS" \
  MY_LARGE_TABLES="$MY_LARGE_TABLES" MY_LARGE_TABLE_SIZE="$MY_LARGE_TABLE_SIZE" \
  MY_LARGE_THREADS="$MY_LARGE_THREADS" MY_LARGE_SECONDS="$MY_LARGE_SECONDS" PEERS_DIR="$PEERS_DIR" \
  TOTAL_SECONDS="$(elapsed_since "$T_START")" ROUNDS="$ROUNDS" STRATA_BIN="$STRATA_BIN" \
  OTHER_LOAD="$(pgrep -fa 'scripts/test.sh|fuse-caching.sh|cargo |rustc ' | grep -v pgrep | cut -c1-120 | head -5 | tr '\n' ';' || true)" \
  bounded python3 "$HERE/report.py" || die "report failed"
log "done in $(elapsed_since "$T_START")s: $OUT_DIR/results.md"
