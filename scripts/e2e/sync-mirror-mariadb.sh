#!/usr/bin/env bash
# A synchronous mirror between two daemons end to end: MariaDB on volume default/mydata of
# the first daemon, in a `--sync` mirror to pool default of a second daemon on this machine
# paired as a peer (mutual TLS over its replication port: the journal lives there). Under
# sysbench oltp_read_write plus a client committing numbered rows one at a time (each id
# noted once its COMMIT returned):
#   - the source daemon is killed with kill -9 (the source host is lost);
#   - the mirror is broken on the second daemon: its volume goes back to the last
#     transferred snapshot and its journal's frames are replayed (its log must say how
#     many: the path under test);
#   - mariadbd started there recovers (InnoDB crash recovery) and holds every row whose
#     COMMIT returned — rows after the last transfer included; CHECK TABLE EXTENDED clean;
#     `strata check` clean.
#
# FAILOVER=1: the mirror has failover through a real etcd (`--etcd`, a 5 s lease): nobody
# breaks it — the second daemon takes over by itself once the source's lease ran out
# (breaks, replays, mounts at --failover-mount; its log must say so), and the old source,
# restarted, is fenced (its volume not mounted again).
#
#   bash scripts/e2e/sync-mirror-mariadb.sh      (root; installs mariadb-server, sysbench)
#   LOAD_SECONDS (default 20); FAILOVER=1 (installs etcd-server)
set -euo pipefail
cd "$(dirname "$0")/../.."
FAILOVER="${FAILOVER:-0}"
E2E_NAME=sync-mirror-mariadb
[ "$FAILOVER" = 1 ] && E2E_NAME=failover-mariadb
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
# shellcheck source=scripts/e2e/strata-env.sh
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-sync-mariadb"
LOAD_SECONDS="${LOAD_SECONDS:-20}"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs /usr/sbin/mariadbd /usr/bin/mariadb-install-db /usr/bin/mariadb /usr/bin/sysbench -- \
  mariadb-server mariadb-client sysbench
[ "$FAILOVER" = 1 ] && ensure_pkgs /usr/bin/etcd /usr/bin/etcdctl -- etcd-server etcd-client

strata_fresh
# Where the target mounts on takeover (FAILOVER=1): a path the source names, so one where an
# operator may mount (/mnt, /srv, ...: the target daemon refuses others).
SERVED="/srv/strata-e2e-failover-mariadb"
umount -l "$SERVED/mydata" 2>/dev/null || true
rm -rf "$SERVED"
M="$STRATA_E2E_DIR/mnt"
RUN="$STRATA_E2E_DIR/run"
mkdir -p "$RUN/src" "$RUN/target" "$M/data" "$M/target" && chown -R mysql: "$RUN" && chmod 755 "$STRATA_E2E_DIR"
add_failure_log "$RUN/src/err.log"
add_failure_log "$RUN/target/err.log"
add_failure_log "$STRATA_E2E_DIR/daemon.log"
add_failure_log "$STRATA_E2E_DIR/b/daemon.log"
PIDS=()
BENCH_PID=""
ACK_PID=""
cleanup() {
  local rc=$?
  trap - EXIT ERR
  set +e
  for p in "$BENCH_PID" "$ACK_PID"; do [ -z "$p" ] || kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ "$rc" -eq 0 ] || print_failure_logs
  mountpoint -q "$M/target" && strata_peer unmount "$M/target" >/dev/null 2>&1
  mountpoint -q "$SERVED/mydata" && { strata_peer unmount "$SERVED/mydata" >/dev/null 2>&1 || umount -l "$SERVED/mydata"; }
  strata_peer_stop
  strata_stop
  [ "$FAILOVER" = 1 ] && etcd_stop
  mountpoint -q "$SERVED/mydata" || rm -rf "$SERVED"
  exit "$rc"
}
trap cleanup EXIT
# shellcheck source=scripts/e2e/maria-common.sh
. scripts/e2e/maria-common.sh
mj() { "$STRATA_BIN" --json mirror show site-b:default/mydata | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

tj() { strata_peer --json mirror show default/mydata | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

failover_args=()
if [ "$FAILOVER" = 1 ]; then
  etcd_start
  failover_args=(--etcd "$ETCD_URL" --failover-ttl 5s --failover-mount "$SERVED")
fi
strata_start
strata_peer_start
source_db 33326
sql "$SRC" -e "create table sbtest.acks (id int primary key) engine=innodb"

log "mirror default/mydata to site-b:default, synchronous, transfers every 5 s ${failover_args[*]}"
"$STRATA_BIN" mirror create default/mydata site-b:default --sync --every 5s "${failover_args[@]}"
for _ in $(seq 1 150); do [ "$(mj "['sync']['state']")" = in-sync ] && break; sleep 0.2; done
[ "$(mj "['sync']['state']")" = in-sync ] || die "the sync mirror never went in sync: $(mj "")"

log "sysbench oltp_read_write (4 threads) and a client committing numbered rows, for $LOAD_SECONDS s"
sysbench oltp_read_write "${SB[@]}" --threads=4 --time=600 run >"$RUN/bench.log" 2>&1 &
BENCH_PID=$!
# One session: each insert commits (autocommit), then "ack N" is printed — only after the
# COMMIT returned. Output the client keeps buffered makes the check weaker, never wrong.
/usr/bin/python3 -c "
for i in range(1, 10**7):
    print(f'insert into sbtest.acks values ({i}); select \"ack {i}\";')
" | mariadb --no-defaults -S "$SRC" -u root -N -B 2>"$RUN/acks.err" | cat >"$RUN/acks.out" &
ACK_PID=$!
sleep "$LOAD_SECONDS"
acked_before="$(grep -c '^ack ' "$RUN/acks.out" || true)"
[ "$acked_before" -gt 50 ] || die "only $acked_before rows committed in $LOAD_SECONDS s"
mark="$(wc -l <"$STRATA_E2E_DIR/b/daemon.log")"
log "killing the source daemon under load ($acked_before rows acknowledged so far; last transfer $(mj "['common_snapshot']"))"
killed="$(now_s)"
strata_kill
sleep 1
kill "$BENCH_PID" 2>/dev/null || true
wait "$ACK_PID" 2>/dev/null || true
BENCH_PID=""
ACK_PID=""
for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
PIDS=()
umount -l "$M/data" 2>/dev/null || true
acked="$(grep '^ack ' "$RUN/acks.out" | tail -1 | cut -d' ' -f2)"
[ -n "$acked" ] || die "no acknowledged row"
log "the last acknowledged row: $acked"

if [ "$FAILOVER" = 1 ]; then
  log "waiting for the second daemon to take over (no break by hand)"
  for _ in $(seq 1 300); do
    [ "$(tj "['state']")" = broken ] && [ "$(tj "['failover']['role']")" = serving ] && break
    sleep 0.2
  done
  [ "$(tj "['state']")" = broken ] || die "no takeover: $(tj "")"
  blog="$(tail -n +"$((mark + 1))" "$STRATA_E2E_DIR/b/daemon.log")"
  grep -q "taking over" <<<"$blog" || die "the target's log does not show the takeover"
  log "taken over $(elapsed_since "$killed") s after the kill"
  DB_DIR="$SERVED/mydata"
  mountpoint -q "$DB_DIR" || die "the target did not mount the volume at $DB_DIR"
else
  log "break the mirror on the second daemon: the last transfer, then the journal's frames"
  strata_peer mirror break default/mydata
  DB_DIR="$M/target"
  strata_peer mount default/mydata "$DB_DIR"
fi
replayed="$(tail -n +"$((mark + 1))" "$STRATA_E2E_DIR/b/daemon.log" | grep 'sync journal replayed' | head -1)"
[ -n "$replayed" ] || die "the break replayed no journal"
frames="$(echo "$replayed" | grep -o 'frames=[0-9]*' | cut -d= -f2)"
[ "${frames:-0}" -gt 0 ] || die "the break replayed no frame: $replayed"
log "break: $frames frames replayed ($(echo "$replayed" | grep -o 'operations=[0-9]*'))"

start_db "$DB_DIR/mysql" "$RUN/target" 33327
TGT="$RUN/target/sock"
have="$(sql "$TGT" -e "select count(*) from sbtest.acks where id <= $acked")"
[ "$have" = "$acked" ] || die "the target holds $have of the $acked acknowledged rows"
log "every acknowledged row is on the target ($acked; $(sql "$TGT" -e "select count(*) from sbtest.acks") rows in all)"
if sql "$TGT" -e "check table sbtest.sbtest1, sbtest.sbtest2, sbtest.acks extended" | grep -v "status.OK" | grep .; then
  die "CHECK TABLE on the target"
fi
mariadb-admin --no-defaults -S "$TGT" -u root shutdown
for p in "${PIDS[@]}"; do wait_pid_gone "$p" 120 || die "mariadbd $p did not stop"; done
PIDS=()
strata_peer unmount "$DB_DIR" >/dev/null
if [ "$FAILOVER" = 1 ]; then
  log "the old source daemon comes back: fenced, not serving"
  strata_start
  [ "$(mj "['state']")" = fenced ] || die "the old source is not fenced: $(mj "")"
  mounts="$("$STRATA_BIN" mount)"
  grep -q "default/mydata" <<<"$mounts" && die "the old source mounted its volume again"
  log "fenced: $(mj "['failover']['message']")"
fi
strata_peer check default
strata_peer_log_clean
log "PASS"
