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
case "$LAYOUT" in
  mirror) MEMBERS=3 ;;
  parity2) MEMBERS=4 ;;
  *) echo "LAYOUT is mirror or parity2, not $LAYOUT" >&2; exit 2 ;;
esac
SPARE=$((MEMBERS + 1))
E2E_NAME="$LAYOUT-postgres"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
source scripts/e2e/strata-env.sh
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
  for i in $(seq 1 "$SPARE"); do
    fusermount3 -u -z "$DEV/fuse$i" 2>/dev/null
    [ -f "$DEV/nbdkit$i.pid" ] && kill "$(cat "$DEV/nbdkit$i.pid")" 2>/dev/null
  done
  if [ "$rc" -ne 0 ]; then
    echo "---- daemon log (tail)"; tail -40 "$STRATA_E2E_DIR/daemon.log" 2>/dev/null
    echo "---- postgres log (tail)"; tail -20 "$STRATA_E2E_DIR/postgres.log" 2>/dev/null
  fi
  exit "$rc"
}
strata_fresh
trap cleanup EXIT
mkdir -p "$DEV"

# Device i: $DEV/fuse$i/dev, a 3 GiB image $DEV/m$i.img served by nbdkit (failing every I/O
# while $DEV/m$i.fail exists) and exposed as a file by nbdfuse.
start_device() {
  local i="$1"
  truncate -s 3G "$DEV/m$i.img"
  mkdir -p "$DEV/fuse$i"
  nbdkit -P "$DEV/nbdkit$i.pid" -U "$DEV/nbd$i.sock" --filter=error file "$DEV/m$i.img" \
    error-rate=100% error-file="$DEV/m$i.fail"
  nbdfuse "$DEV/fuse$i/dev" --unix "$DEV/nbd$i.sock" &
  wait_for "nbdfuse device $i" 20 test -e "$DEV/fuse$i/dev"
}
devices=()
for i in $(seq 1 "$MEMBERS"); do
  start_device "$i"
  devices+=(--device "$DEV/fuse$i/dev")
done

strata_start
"$STRATA_BIN" pool create m --layout "$LAYOUT" "${devices[@]}"
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
python3 - "$DEV/m$MEMBERS.img" <<'EOF'
import os, random, sys
random.seed(7)
with open(sys.argv[1], "r+b") as f:
    for _ in range(3000):
        f.seek(random.randrange(16 << 20, 512 << 20) // 4096 * 4096)
        f.write(os.urandom(4096))
EOF
log "rotted 3000 spots of member $MEMBERS; scrubbing under load"
scrub1="$("$STRATA_BIN" pool scrub m)"
echo "$scrub1"
damaged="$(grep -oE '[0-9]+ damaged copies found' <<<"$scrub1" | grep -oE '^[0-9]+')"
[ "$damaged" -gt 0 ] || die "the scrub found none of the rot on member $MEMBERS: $scrub1"
cksum3="$("$STRATA_BIN" pool status m --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][int(sys.argv[1]) - 1]["checksum_errors"])' "$MEMBERS")"
[ "$cksum3" -ge "$damaged" ] || die "member $MEMBERS counts $cksum3 checksum errors, the scrub found $damaged"
scrub2="$("$STRATA_BIN" pool scrub m)"
echo "$scrub2"
grep -q ' 0 damaged copies found' <<<"$scrub2" || die "a second scrub still found damage: $scrub2"

# 2. Member 1 returns EIO to everything; 3. member 2 disappears.
sleep 5
bench_running "EIO"
touch "$DEV/m1.fail"
log "member 1 now fails every I/O with EIO"
sleep 10
bench_running "device gone"
kill -9 "$(cat "$DEV/nbdkit2.pid")"
log "member 2's device is gone (nbdkit killed)"
sleep 5
bench_running "after the device went"

wait "$BENCH_PID" || die "pgbench failed: $(tail -5 "$STRATA_E2E_DIR/pgbench.out")"
BENCH_PID=""
tail -12 "$STRATA_E2E_DIR/pgbench.out"
grep -q 'number of failed transactions: 0' "$STRATA_E2E_DIR/pgbench.out" ||
  die "pgbench saw failed transactions: $(grep -E 'failed|aborted' "$STRATA_E2E_DIR/pgbench.out")"
status="$("$STRATA_BIN" pool status m)"
echo "$status" | sed -n '/^state/p;/^layout/,/^guid/p'
grep -q '^state *DEGRADED' <<<"$status" || die "the pool should be DEGRADED: $status"
grep -E 'fuse1/dev.* FAULTED' <<<"$status" >/dev/null || die "member 1 should be FAULTED: $status"
grep -E 'fuse2/dev.* (REMOVED|FAULTED)' <<<"$status" >/dev/null || die "member 2 should be REMOVED: $status"
for i in $(seq 3 "$MEMBERS"); do
  grep -E "fuse$i/dev.* (ONLINE|DEGRADED)" <<<"$status" >/dev/null || die "member $i should be in use: $status"
done

# 4. Member 1 is replaced by a new device while pgbench runs again: the rebuild copies what
#    the pool uses, at its bounded rate, and the new member comes ONLINE.
start_device "$SPARE"
pg pgbench -c "$CLIENTS" -j 2 -T 40 -P 10 postgres >"$STRATA_E2E_DIR/pgbench2.out" 2>&1 &
BENCH_PID=$!
sleep 3
"$STRATA_BIN" pool replace m "$DEV/fuse1/dev" "$DEV/fuse$SPARE/dev"
rebuilt=""
for i in $(seq 1 240); do
  json="$("$STRATA_BIN" pool status m --json)"
  if python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d.get("rebuild") is None and d["devices"][0]["state"]=="ONLINE" else 1)' <<<"$json"; then
    rebuilt=1; break
  fi
  [ $((i % 10)) -eq 1 ] && "$STRATA_BIN" pool status m | grep '^rebuild' || true
  sleep 0.5
done
[ -n "$rebuilt" ] || die "the rebuild did not finish in 120 s: $("$STRATA_BIN" pool status m)"
log "member 1 replaced and rebuilt"
wait "$BENCH_PID" || die "pgbench during the rebuild failed: $(tail -5 "$STRATA_E2E_DIR/pgbench2.out")"
BENCH_PID=""
grep -E '^tps|failed transactions' "$STRATA_E2E_DIR/pgbench2.out"
grep -q 'number of failed transactions: 0' "$STRATA_E2E_DIR/pgbench2.out" || die "pgbench failed transactions during the rebuild"
scrub3="$("$STRATA_BIN" pool scrub m)"
echo "$scrub3"
grep -q ' 0 damaged copies found' <<<"$scrub3" || die "the rebuilt member holds damaged copies: $scrub3"
grep -q 'rebuild complete' "$STRATA_E2E_DIR/daemon.log" || die "the daemon did not log the rebuild's end"

pg pg_amcheck -d postgres --heapallindexed >"$STRATA_E2E_DIR/amcheck.out" 2>&1 ||
  die "pg_amcheck failed: $(cat "$STRATA_E2E_DIR/amcheck.out")"
[ ! -s "$STRATA_E2E_DIR/amcheck.out" ] || die "pg_amcheck found problems: $(cat "$STRATA_E2E_DIR/amcheck.out")"
"$STRATA_BIN" check m
runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$PGDATA" -m fast -w -t 60 >/dev/null
strata_log_clean

# The daemon restarts with member 2 still gone: the pool opens DEGRADED without it.
strata_stop
strata_start
status="$("$STRATA_BIN" pool status m)"
grep -q '^state *DEGRADED' <<<"$status" || die "after a restart the pool should open DEGRADED: $status"
grep -E "fuse$SPARE/dev.* ONLINE" <<<"$status" >/dev/null || die "the replacement should be ONLINE after a restart: $status"
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
