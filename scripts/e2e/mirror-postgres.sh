#!/usr/bin/env bash
# Redundancy end to end: PostgreSQL 15 with pgbench on a 3-way mirror pool (LAYOUT=parity2:
# a parity2 pool of four devices; the last one is "member 3" below) whose devices are
# real user-space block devices — nbdkit's file plugin behind its error filter, each exposed
# as a file by nbdfuse (this kernel has no NBD client and no device mapper). Under load:
#   1. bit rot: random 4 KiB spots of member 3's image are overwritten (behind the daemon's
#      back); reads repair what they meet, then `strata pool scrub` (under load) must find
#      damaged copies, repair them all, and a second scrub must find none;
#   2. member 1 starts returning EIO to every I/O (the error filter's trigger file);
#   3. member 2's image disappears (its nbdkit is killed: ECONNABORTED / ENOTCONN / EIO);
#   4. member 1 is replaced by a fourth device under a second pgbench run: rebuilt in the
#      background at its bounded rate, ONLINE at the end, a scrub finds nothing to repair;
# pgbench must finish without one failed transaction; the pool must show DEGRADED with
# member 1 FAULTED and member 2 REMOVED; pg_amcheck and `strata check` must be clean; the
# daemon's log must have no ERROR line. Then the daemon restarts and the pool opens degraded
# from the one member left, with the database intact.
#   DURATION (default 220: the faults come at 10 s, after two scrubs — each ~50 s, running in
#   the background beside pgbench, paced, on these FUSE-backed devices — and 10 s apart)
#   seconds of pgbench; SCALE (default 10); CLIENTS (default 4)
set -euo pipefail
cd "$(dirname "$0")/../.."
LAYOUT="${LAYOUT:-mirror}"
E2E_NAME="$LAYOUT-postgres"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
source scripts/e2e/strata-env.sh
# shellcheck source=scripts/e2e/devset-common.sh
. scripts/e2e/devset-common.sh
devset_layout
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-$LAYOUT"
PG_BIN=/usr/lib/postgresql/15/bin
PG_PORT="${PG_PORT:-55441}"
DURATION="${DURATION:-220}"
SCALE="${SCALE:-10}"
CLIENTS="${CLIENTS:-4}"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/bin/nbdkit /usr/bin/nbdfuse "$PG_BIN/postgres" "$PG_BIN/pgbench" "$PG_BIN/pg_amcheck" \
  /usr/share/postgresql/15/extension/amcheck.control -- nbdkit libnbd-bin postgresql-15 postgresql-contrib

DEV="$STRATA_E2E_DIR/devices"
cleanup() {
  local rc=$?
  set +e
  trap - ERR
  [ -n "${BENCH_PID:-}" ] && kill "$BENCH_PID" 2>/dev/null
  [ -f "${PGDATA:-/nonexistent}/postmaster.pid" ] &&
    runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$PGDATA" -m immediate -w -t 30 >/dev/null 2>&1
  strata_stop
  stop_devices
  if [ "$rc" -ne 0 ]; then
    echo "---- daemon log (tail)"; tail -40 "$STRATA_E2E_DIR/daemon.log" 2>/dev/null
    echo "---- postgres log (tail)"; tail -20 "$STRATA_E2E_DIR/postgres.log" 2>/dev/null
  fi
  exit "$rc"
}
strata_fresh
trap cleanup EXIT
mkdir -p "$DEV"

strata_start
create_devset m
"$STRATA_BIN" volume create m/pg --record-size 8K
mnt="$STRATA_E2E_DIR/pg"
mkdir -p "$mnt"
"$STRATA_BIN" mount m/pg "$mnt"
chmod 755 "$STRATA_E2E_DIR" "$mnt"

PGDATA="$mnt/pgdata"
SOCK="$STRATA_E2E_DIR/sock"
mkdir -p "$PGDATA" "$SOCK"
chown postgres: "$PGDATA" "$SOCK"
chmod 700 "$PGDATA"
touch "$STRATA_E2E_DIR/postgres.log" && chown postgres: "$STRATA_E2E_DIR/postgres.log"
runuser -u postgres -- "$PG_BIN/initdb" -D "$PGDATA" --data-checksums -A trust -U postgres >/dev/null
runuser -u postgres -- "$PG_BIN/pg_ctl" start -D "$PGDATA" -w -t 120 -l "$STRATA_E2E_DIR/postgres.log" \
  -o "-k $SOCK -p $PG_PORT -c listen_addresses='' -c fsync=on -c synchronous_commit=on -c shared_buffers=128MB" >/dev/null
pg() { "$PG_BIN/$1" -h "$SOCK" -p "$PG_PORT" -U postgres "${@:2}"; }
pg pgbench -i -q -s "$SCALE" postgres 2>&1 | tail -1
pg psql -q -c 'create extension if not exists amcheck' postgres
log "pgbench: $CLIENTS clients for $DURATION s on a $LAYOUT pool of $MEMBERS devices"
pg pgbench -c "$CLIENTS" -j 2 -T "$DURATION" -P 5 postgres >"$STRATA_E2E_DIR/pgbench.out" 2>&1 &
BENCH_PID=$!

bench_running() { kill -0 "$BENCH_PID" 2>/dev/null || die "pgbench ended before the fault ($1); raise DURATION"; }
# 1. Bit rot on the last member under load: 3000 random 4 KiB spots in its first 512 MiB.
sleep 10
bench_running "bit rot"
rot_member "$MEMBERS"
log "rotted 3000 spots of member $MEMBERS; scrubbing under load"
scrub_repairs m "$MEMBERS"

# 2. Member 1 returns EIO to everything; 3. member 2 disappears.
fail_members m bench_running

wait "$BENCH_PID" || die "pgbench failed: $(tail -5 "$STRATA_E2E_DIR/pgbench.out")"
BENCH_PID=""
tail -12 "$STRATA_E2E_DIR/pgbench.out"
grep -q 'number of failed transactions: 0' "$STRATA_E2E_DIR/pgbench.out" ||
  die "pgbench saw failed transactions: $(grep -E 'failed|aborted' "$STRATA_E2E_DIR/pgbench.out")"
assert_degraded m

# 4. Member 1 is replaced by a new device while pgbench runs again: the rebuild copies what
#    the pool uses, at its bounded rate, and the new member comes ONLINE.
start_device "$SPARE"
pg pgbench -c "$CLIENTS" -j 2 -T 40 -P 10 postgres >"$STRATA_E2E_DIR/pgbench2.out" 2>&1 &
BENCH_PID=$!
sleep 3
replace_member1 m
wait "$BENCH_PID" || die "pgbench during the rebuild failed: $(tail -5 "$STRATA_E2E_DIR/pgbench2.out")"
BENCH_PID=""
grep -E '^tps|failed transactions' "$STRATA_E2E_DIR/pgbench2.out"
grep -q 'number of failed transactions: 0' "$STRATA_E2E_DIR/pgbench2.out" || die "pgbench failed transactions during the rebuild"
scrub_clean m

pg pg_amcheck -d postgres --heapallindexed >"$STRATA_E2E_DIR/amcheck.out" 2>&1 ||
  die "pg_amcheck failed: $(cat "$STRATA_E2E_DIR/amcheck.out")"
[ ! -s "$STRATA_E2E_DIR/amcheck.out" ] || die "pg_amcheck found problems: $(cat "$STRATA_E2E_DIR/amcheck.out")"
"$STRATA_BIN" check m
runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$PGDATA" -m fast -w -t 60 >/dev/null
strata_log_clean

# The daemon restarts with member 2 still gone: the pool opens DEGRADED without it.
strata_stop
strata_start
assert_degraded_after_restart m
runuser -u postgres -- "$PG_BIN/pg_ctl" start -D "$PGDATA" -w -t 120 -l "$STRATA_E2E_DIR/postgres.log" \
  -o "-k $SOCK -p $PG_PORT -c listen_addresses=''" >/dev/null
rows="$(pg psql -At -c 'select count(*) from pgbench_accounts' postgres)"
[ "$rows" -eq $((SCALE * 100000)) ] || die "pgbench_accounts has $rows rows"
pg pg_amcheck -d postgres --heapallindexed >"$STRATA_E2E_DIR/amcheck2.out" 2>&1 ||
  die "pg_amcheck after the restart failed: $(cat "$STRATA_E2E_DIR/amcheck2.out")"
[ ! -s "$STRATA_E2E_DIR/amcheck2.out" ] || die "pg_amcheck after the restart: $(cat "$STRATA_E2E_DIR/amcheck2.out")"
runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$PGDATA" -m fast -w -t 60 >/dev/null
"$STRATA_BIN" check m
strata_log_clean
log "PASS: pgbench carried on through bit rot, an EIO device, a vanished device and a rebuild; scrub repaired; amcheck clean"
