#!/usr/bin/env bash
# Redundancy end to end with MariaDB: sysbench oltp_read_write (NetApp TR-4722's parameters:
# 2 tables x 10,000 rows; 4 threads) on a 3-way mirror pool (LAYOUT=parity2: a parity2 pool
# of four devices) of nbdkit devices exposed by nbdfuse (scripts/e2e/devset-common.sh).
# Under load, as in mirror-postgres.sh:
#   1. bit rot on the last member; a scrub under load finds and repairs it, a second finds
#      nothing;
#   2. member 1 starts returning EIO to every I/O; 3. member 2's device disappears;
#   4. member 1 is replaced by a fifth device under a second sysbench run and rebuilt;
# sysbench must end without an error (an I/O error reaching InnoDB stops mariadbd, and
# sysbench with it); the pool shows DEGRADED; a scrub after the rebuild is clean; CHECK
# TABLE EXTENDED is clean and a row committed before the faults is there; `strata check`
# clean, no ERROR in the daemon log. Then the daemon restarts: the pool opens DEGRADED and
# mariadbd recovers with the same table checksums as before the restart.
#   DURATION (default 200) seconds of the first sysbench run; MY_PORT (default 33320)
set -euo pipefail
cd "$(dirname "$0")/../.."
LAYOUT="${LAYOUT:-mirror}"
E2E_NAME="$LAYOUT-mariadb"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
source scripts/e2e/strata-env.sh
# shellcheck source=scripts/e2e/devset-common.sh
. scripts/e2e/devset-common.sh
devset_layout
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-$LAYOUT-my"
DURATION="${DURATION:-200}"
MY_PORT="${MY_PORT:-33320}"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/bin/nbdkit /usr/bin/nbdfuse /usr/sbin/mariadbd /usr/bin/mariadb-install-db /usr/bin/mariadb \
  /usr/bin/sysbench -- nbdkit libnbd-bin mariadb-server mariadb-client sysbench

DEV="$STRATA_E2E_DIR/devices"
M="$STRATA_E2E_DIR/mnt"
RUN="$STRATA_E2E_DIR/run"
PIDS=()
BENCH_PID=""
cleanup() {
  local rc=$?
  trap - EXIT ERR
  set +e
  [ -z "$BENCH_PID" ] || kill "$BENCH_PID" 2>/dev/null
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ "$rc" -eq 0 ] || print_failure_logs
  strata_stop
  stop_devices
  exit "$rc"
}
strata_fresh
trap cleanup EXIT
mkdir -p "$DEV" "$RUN/src" "$M/data" && chown -R mysql: "$RUN" && chmod 755 "$STRATA_E2E_DIR"
add_failure_log "$RUN/src/err.log"
add_failure_log "$RUN/bench.log"
add_failure_log "$STRATA_E2E_DIR/daemon.log"

strata_start
create_devset m
# shellcheck source=scripts/e2e/maria-common.sh
. scripts/e2e/maria-common.sh
# InnoDB's page is 16 KiB: the record size of its volume.
"$STRATA_BIN" volume create m/mydata --record-size 16K
source_db "$MY_PORT" m
check_tables() {
  if sql "$SRC" -e "check table sbtest.sbtest1, sbtest.sbtest2, sbtest.marks extended" | grep -v "status.OK" | grep .; then
    die "CHECK TABLE $1"
  fi
}
sql "$SRC" -e "insert into sbtest.marks values (1, 'committed before the faults')"

log "sysbench oltp_read_write: 4 threads for $DURATION s on a $LAYOUT pool of $MEMBERS devices"
sysbench oltp_read_write "${SB[@]}" --threads=4 --time="$DURATION" --report-interval=10 run >"$RUN/bench.log" 2>&1 &
BENCH_PID=$!
bench_running() { kill -0 "$BENCH_PID" 2>/dev/null || die "sysbench ended before the fault ($1); raise DURATION"; }
bench_ok() { # LOG
  wait "$BENCH_PID" || die "sysbench failed: $(tail -5 "$1")"
  BENCH_PID=""
  grep -E 'transactions:|ignored errors:' "$1"
  if grep -E 'FATAL|ERROR' "$1"; then die "sysbench met an error"; fi
}

# 1. Bit rot on the last member under load.
sleep 10
bench_running "bit rot"
rot_member "$MEMBERS"
log "rotted 3000 spots of member $MEMBERS; scrubbing under load"
scrub_repairs m "$MEMBERS"
# 2. Member 1 returns EIO to everything; 3. member 2 disappears.
fail_members m bench_running
bench_ok "$RUN/bench.log"
assert_degraded m

# 4. Member 1 replaced by a new device while sysbench runs again.
start_device "$SPARE"
sysbench oltp_read_write "${SB[@]}" --threads=4 --time=40 --report-interval=10 run >"$RUN/bench2.log" 2>&1 &
BENCH_PID=$!
sleep 3
replace_member1 m
bench_ok "$RUN/bench2.log"
scrub_clean m

check_tables "after the faults and the rebuild"
[ "$(sql "$SRC" -e "select note from sbtest.marks where id = 1")" = "committed before the faults" ] ||
  die "the row committed before the faults is not there"
before="$(checksum "$SRC")"
"$STRATA_BIN" check m
mariadb-admin --no-defaults -S "$SRC" -u root shutdown
wait_for "mariadbd to stop" 60 sh -c "! mariadb-admin --no-defaults -S '$SRC' -u root ping >/dev/null 2>&1"
strata_log_clean

# The daemon restarts with member 2 still gone: the pool opens DEGRADED without it.
strata_stop
strata_start
assert_degraded_after_restart m
start_db "$M/data/mysql" "$RUN/src" "$MY_PORT"
after="$(checksum "$SRC")"
[ "$after" = "$before" ] || die "table checksums changed across the restart: $before -> $after"
check_tables "after the restart"
mariadb-admin --no-defaults -S "$SRC" -u root shutdown
wait_for "mariadbd to stop" 60 sh -c "! mariadb-admin --no-defaults -S '$SRC' -u root ping >/dev/null 2>&1"
"$STRATA_BIN" check m
strata_log_clean
log "PASS: sysbench carried on through bit rot, an EIO device, a vanished device and a rebuild; scrub repaired; CHECK TABLE clean"
