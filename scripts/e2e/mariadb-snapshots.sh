#!/usr/bin/env bash
# MariaDB on a Strata volume: an application-consistent snapshot (--quiesce: FLUSH TABLES
# WITH READ LOCK held across it) under sysbench oltp_read_write load, writing goes on, then
#   - a clone starts as a second, independent mariadbd while the source keeps running,
#   - the source is stopped and the volume restored: it starts with exactly the snapshot's
#     committed data (same table checksums as the clone; the row committed just before the
#     snapshot present, the one just after absent), CHECK TABLE EXTENDED clean;
#   - a failing quiesce takes no snapshot and leaves no lock behind.
#
#   bash scripts/e2e/mariadb-snapshots.sh      (root; installs mariadb-server, sysbench)
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=mariadb-snapshots
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
# shellcheck source=scripts/e2e/strata-env.sh
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-mysnap"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/sbin/mariadbd /usr/bin/mariadb-install-db /usr/bin/mariadb /usr/bin/sysbench -- \
  mariadb-server mariadb-client sysbench

strata_fresh
M="$STRATA_E2E_DIR/mnt"
RUN="$STRATA_E2E_DIR/run"
mkdir -p "$RUN/src" "$RUN/clone" && chown -R mysql: "$RUN" && chmod 755 "$STRATA_E2E_DIR"
add_failure_log "$RUN/src/err.log"
add_failure_log "$RUN/clone/err.log"
add_failure_log "$STRATA_E2E_DIR/daemon.log"
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
  exit "$rc"
}
trap cleanup EXIT

# shellcheck source=scripts/e2e/maria-common.sh
. scripts/e2e/maria-common.sh

strata_start
source_db 33306

log "sysbench oltp_read_write (4 threads) while the snapshots are taken"
sysbench oltp_read_write "${SB[@]}" --threads=4 --time=25 run >"$RUN/bench.log" 2>&1 &
BENCH_PID=$!
sleep 4

log "a quiesce that cannot connect: no snapshot, and nothing locked"
if "$STRATA_BIN" snapshot create default/mydata@bad --quiesce "mysql://root@/?socket=$RUN/nosuch.sock" 2>"$RUN/bad.err"; then
  die "a snapshot was taken although the database could not be quiesced"
fi
grep -q "could not quiesce" "$RUN/bad.err" || die "unclear error: $(cat "$RUN/bad.err")"
! "$STRATA_BIN" snapshot show default/mydata@bad >/dev/null 2>&1 || die "snapshot bad exists"

sql "$SRC" -e "insert into sbtest.marks values (1, 'before the snapshot')"
"$STRATA_BIN" snapshot create default/mydata@s1 --quiesce "mysql://root@/?socket=$SRC"
# A write succeeds at once: the global read lock was released after the snapshot.
sql "$SRC" -e "set session lock_wait_timeout = 10; insert into sbtest.marks values (2, 'after the snapshot')" ||
  die "writes still blocked after the snapshot: the global read lock was left behind"

log "clone: a second mariadbd on it while the source keeps running"
t0="$(now_s)"
"$STRATA_BIN" clone create default/mydata@s1 default/myclone
"$STRATA_BIN" mount default/myclone "$M/clone"
start_db "$M/clone/mysql" "$RUN/clone" 33307
log "clone create -> mariadbd answering: $(elapsed_since "$t0") s"
CL="$RUN/clone/sock"
[ "$(sql "$CL" -e "select count(*) from sbtest.marks where id = 1")" = 1 ] || die "clone lacks the row committed before"
[ "$(sql "$CL" -e "select count(*) from sbtest.marks where id = 2")" = 0 ] || die "clone has the row committed after"
CLONE_SUM="$(checksum "$CL")"
sql "$CL" -e "check table sbtest.sbtest1, sbtest.sbtest2 extended" | grep -v "status.OK" | grep . && die "CHECK TABLE on the clone"
sql "$CL" -e "insert into sbtest.marks values (3, 'only in the clone')"

wait "$BENCH_PID" || die "sysbench on the source failed: $(tail -5 "$RUN/bench.log")"
BENCH_PID=""
log "source sysbench: $(grep -E 'transactions:' "$RUN/bench.log" | xargs)"
[ "$(sql "$SRC" -e "select count(*) from sbtest.marks where id = 3")" = 0 ] || die "a clone write reached the source"

log "stop the source, restore the volume to the snapshot, start it"
mariadb-admin --no-defaults -S "$SRC" -u root shutdown
wait_pid_gone "${PIDS[0]}" 120 || die "mariadbd did not stop"
"$STRATA_BIN" restore default/mydata@s1
start_db "$M/data/mysql" "$RUN/src" 33306
[ "$(sql "$SRC" -e "select count(*) from sbtest.marks where id = 1")" = 1 ] || die "restored lacks the row committed before"
[ "$(sql "$SRC" -e "select count(*) from sbtest.marks where id = 2")" = 0 ] || die "restored has the row committed after"
[ "$(checksum "$SRC")" = "$CLONE_SUM" ] || die "restored tables differ from the clone of the same snapshot"
sql "$SRC" -e "check table sbtest.sbtest1, sbtest.sbtest2 extended" | grep -v "status.OK" | grep . && die "CHECK TABLE after restore"
log "restored = the snapshot's committed data (checksums $CLONE_SUM)"

mariadb-admin --no-defaults -S "$SRC" -u root shutdown
mariadb-admin --no-defaults -S "$CL" -u root shutdown
for p in "${PIDS[@]:1}"; do wait_pid_gone "$p" 120 || die "mariadbd $p did not stop"; done
"$STRATA_BIN" check default
strata_log_clean
log "PASS"
