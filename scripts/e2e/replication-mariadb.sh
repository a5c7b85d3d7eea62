#!/usr/bin/env bash
# MariaDB on a Strata volume, mirrored every 2 s to a second daemon on this machine paired as
# a peer (mutual TLS over its replication port), while sysbench oltp_read_write runs:
#   - transfers go on under load (incrementals);
#   - the mirror is paused on the source and broken on the target while the source still
#     commits; mariadbd started on the target recovers (InnoDB crash recovery: the transfer
#     is a crash-consistent image) and holds exactly the data of the last transferred
#     snapshot — the same table checksums as a clone of that snapshot on the source — with
#     CHECK TABLE EXTENDED clean;
#   - both pools check clean; neither daemon's log has an unexpected error.
#
#   bash scripts/e2e/replication-mariadb.sh      (root; installs mariadb-server, sysbench)
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=replication-mariadb
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
# shellcheck source=scripts/e2e/strata-env.sh
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-repl-mariadb"
LOAD_SECONDS="${LOAD_SECONDS:-30}"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/sbin/mariadbd /usr/bin/mariadb-install-db /usr/bin/mariadb /usr/bin/sysbench -- \
  mariadb-server mariadb-client sysbench

strata_fresh
M="$STRATA_E2E_DIR/mnt"
RUN="$STRATA_E2E_DIR/run"
mkdir -p "$RUN/src" "$RUN/target" "$RUN/clone" "$M/data" "$M/target" "$M/clone" && chown -R mysql: "$RUN" &&
  chmod 755 "$STRATA_E2E_DIR"
add_failure_log "$RUN/src/err.log"
add_failure_log "$RUN/target/err.log"
add_failure_log "$RUN/clone/err.log"
add_failure_log "$STRATA_E2E_DIR/daemon.log"
add_failure_log "$STRATA_E2E_DIR/b/daemon.log"
PIDS=()
BENCH_PID=""
cleanup() {
  local rc=$?
  trap - EXIT ERR
  set +e
  [ -z "$BENCH_PID" ] || kill "$BENCH_PID" 2>/dev/null
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ "$rc" -eq 0 ] || print_failure_logs
  mountpoint -q "$M/target" && strata_peer unmount "$M/target" >/dev/null 2>&1
  strata_peer_stop
  strata_stop
  exit "$rc"
}
trap cleanup EXIT

# shellcheck source=scripts/e2e/maria-common.sh
. scripts/e2e/maria-common.sh
check_tables() {
  if sql "$1" -e "check table sbtest.sbtest1, sbtest.sbtest2, sbtest.marks extended" | grep -v "status.OK" | grep .; then
    die "CHECK TABLE on $2"
  fi
}
mj() { "$STRATA_BIN" --json mirror show site-b:default/mydata | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

strata_start
strata_peer_start
source_db 33316

log "mirror default/mydata to site-b:default every 2 s (the first transfer is full)"
t0="$(now_s)"
"$STRATA_BIN" mirror create default/mydata site-b:default --every 2s --keep 3
log "initial transfer: $(elapsed_since "$t0") s, $(mj "['last_transfer']['done_bytes']") bytes"

log "sysbench oltp_read_write for $LOAD_SECONDS s (4 threads) while the mirror transfers every 2 s"
sysbench oltp_read_write "${SB[@]}" --threads=4 --time="$LOAD_SECONDS" run >"$RUN/bench.log" 2>&1 &
BENCH_PID=$!
first="$(mj "['common_snapshot']")"
sleep $((LOAD_SECONDS / 2))
sql "$SRC" -e "insert into sbtest.marks values (1, 'committed under load')"
sleep 5
[ "$(mj "['common_snapshot']")" != "$first" ] || die "no transfer under load in $((LOAD_SECONDS / 2 + 5)) s"
log "under load: common snapshot $(mj "['common_snapshot']"), lag $(mj "['lag_seconds']") s, last transfer $(mj "['last_transfer']['done_bytes']") bytes from $(mj "['last_transfer']['base']")"

log "pause the mirror on the source and break it on the target while the source still commits"
"$STRATA_BIN" mirror pause site-b:default/mydata >/dev/null
SNAP="$(mj "['common_snapshot']")"
strata_peer mirror break default/mydata >/dev/null
log "broken at $SNAP"
strata_peer mount default/mydata "$M/target"
t0="$(now_s)"
start_db "$M/target/mysql" "$RUN/target" 33317
log "mariadbd on the target recovered in $(elapsed_since "$t0") s"
TGT="$RUN/target/sock"
check_tables "$TGT" "the target"

log "the same snapshot cloned on the source: the target holds exactly its data"
"$STRATA_BIN" clone create "default/mydata@$SNAP" default/myclone
"$STRATA_BIN" mount default/myclone "$M/clone"
start_db "$M/clone/mysql" "$RUN/clone" 33318
CL="$RUN/clone/sock"
TSUM="$(checksum "$TGT")"
CSUM="$(checksum "$CL")"
[ "$TSUM" = "$CSUM" ] || die "the target ($TSUM) differs from a clone of $SNAP on the source ($CSUM)"
log "target = source@$SNAP (checksums $TSUM; marks: $(sql "$TGT" -e "select count(*) from sbtest.marks") rows)"

wait "$BENCH_PID" || die "sysbench on the source failed: $(tail -5 "$RUN/bench.log")"
BENCH_PID=""
log "source sysbench: $(grep -E 'transactions:' "$RUN/bench.log" | xargs)"
[ "$(sql "$SRC" -e "select count(*) from sbtest.marks where id = 1")" = 1 ] || die "the source lost its own row"

for s in "$SRC" "$TGT" "$CL"; do mariadb-admin --no-defaults -S "$s" -u root shutdown; done
for p in "${PIDS[@]}"; do wait_pid_gone "$p" 120 || die "mariadbd $p did not stop"; done
PIDS=()
strata_peer unmount "$M/target" >/dev/null
"$STRATA_BIN" unmount "$M/clone" >/dev/null
"$STRATA_BIN" check default
strata_peer check default
strata_log_clean
strata_peer_log_clean
log "PASS"
