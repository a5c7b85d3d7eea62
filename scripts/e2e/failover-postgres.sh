#!/usr/bin/env bash
# Failover end to end: PostgreSQL 15 with its data and WAL on two volumes of the first
# daemon, mirrored as one group with `--sync` to a second daemon on this machine (paired
# peers), with failover through a real etcd (`--etcd`, a 5 s lease, `--failover-mount`).
# Under pgbench plus a client that inserts numbered rows one commit at a time and notes
# each id once its COMMIT returned:
#   - the source daemon is killed with kill -9 while PostgreSQL is committing;
#   - nobody runs `mirror break`: the second daemon sees the lease run out, takes it, breaks
#     the mirror, replays its journal and mounts the volumes by itself (its log must say
#     so: the path under test), not before the source's lease could have run out;
#   - PostgreSQL started on those mounts recovers and holds every row whose COMMIT
#     returned; TPC-B invariants, pg_amcheck, `strata check` clean;
#   - the old source daemon, restarted, finds the lease taken: fenced (its volumes are not
#     mounted again), then by itself the mirror of the new source — a reverse: only what
#     changed since the common snapshot travels (an incremental transfer), while
#     PostgreSQL keeps committing on the new source.
#
#   bash scripts/e2e/failover-postgres.sh      (root; installs postgresql-15, etcd-server)
#   LOAD_SECONDS (default 20): load before the kill; SCALE (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=failover-postgres
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
# shellcheck source=scripts/e2e/strata-env.sh
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-failover-pg"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PORT="${PG_PORT:-55472}"
TPORT=$((PORT + 1))
SCALE="${SCALE:-5}"
LOAD_SECONDS="${LOAD_SECONDS:-20}"
TTL=5
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/pgbench" "$PG_BIN/pg_amcheck" \
  /usr/share/postgresql/15/extension/amcheck.control /usr/bin/etcd /usr/bin/etcdctl -- \
  postgresql-15 postgresql-contrib etcd-server etcd-client

# Where the target mounts on takeover: a path the source names, so one where an operator
# may mount (/mnt, /srv, ...: the target daemon refuses others).
SERVED="/srv/strata-e2e-failover-pg"
strata_fresh
for m in "$SERVED/pgdata" "$SERVED/pgwal"; do umount -l "$m" 2>/dev/null || true; done
rm -rf "$SERVED"
M="$STRATA_E2E_DIR/mnt"
WORK="$STRATA_E2E_DIR/work"
mkdir -p "$WORK/sock" "$M"/{data,wal} && chown -R postgres: "$WORK" && chmod 755 "$STRATA_E2E_DIR"
add_failure_log "$WORK/source.log"
add_failure_log "$WORK/target.log"
add_failure_log "$STRATA_E2E_DIR/daemon.log"
add_failure_log "$STRATA_E2E_DIR/b/daemon.log"
BENCH_PID=""
ACK_PID=""
cleanup() {
  local rc=$?
  trap - EXIT ERR
  set +e
  for p in "$BENCH_PID" "$ACK_PID"; do [ -z "$p" ] || kill "$p" 2>/dev/null; done
  for d in "$M/data/pgdata" "$SERVED/pgdata/pgdata"; do
    [ -f "$d/postmaster.pid" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$d" -m immediate -w -t 30 >/dev/null 2>&1
  done
  pkill -9 -f "$PG_BIN/postgres -D $M/data/pgdata" 2>/dev/null || true
  [ "$rc" -eq 0 ] || print_failure_logs
  for m in "$SERVED/pgdata" "$SERVED/pgwal"; do mountpoint -q "$m" && { strata_peer unmount "$m" >/dev/null 2>&1 || umount -l "$m"; }; done
  strata_peer_stop
  strata_stop
  etcd_stop
  mountpoint -q "$SERVED/pgdata" || mountpoint -q "$SERVED/pgwal" || rm -rf "$SERVED"
  exit "$rc"
}
trap cleanup EXIT
# shellcheck source=scripts/e2e/pg-common.sh
. scripts/e2e/pg-common.sh
sj() { "$STRATA_BIN" --json mirror show site-b:default/pgdata | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
tj() { strata_peer --json mirror show default/pgdata | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

etcd_start
# A replication listener here too: after the failover the second daemon mirrors back to it.
A_REPL_PORT="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export STRATA_SERVE_ARGS="--repl-port $A_REPL_PORT"
strata_start
strata_peer_start
"$STRATA_BIN" volume create default/pgdata --record-size 8K
"$STRATA_BIN" volume create default/pgwal
source_db default
q "$PORT" -c "create table acks (id int primary key)"

log "mirror default/pgdata + pgwal to site-b:default, synchronous, failover through etcd ($ETCD_URL, ${TTL}s lease)"
"$STRATA_BIN" mirror create default/pgdata site-b:default --group pgwal --sync --every 5s \
  --etcd "$ETCD_URL" --failover-ttl "${TTL}s" --failover-mount "$SERVED"
for _ in $(seq 1 150); do [ "$(sj "['sync']['state']")" = in-sync ] && break; sleep 0.2; done
[ "$(sj "['sync']['state']")" = in-sync ] || die "the sync mirror never went in sync: $(sj "")"
[ "$(sj "['failover']['role']")" = serving ] || die "the source does not serve: $(sj "['failover']")"
for _ in $(seq 1 50); do [ "$(tj "['failover']['role']")" = standby ] && break; sleep 0.2; done
[ "$(tj "['failover']['role']")" = standby ] || die "the target is not standing by: $(tj "['failover']")"
key="$(sj "['failover']['key']")"
log "the source holds $key: $(ETCDCTL_API=3 etcdctl --endpoints "$ETCD_URL" get "$key" --print-value-only)"

acked_load "$LOAD_SECONDS"
acked_before="$(grep -c '^ack ' "$WORK/acks.out" || true)"
mark="$(wc -l <"$STRATA_E2E_DIR/b/daemon.log")"
log "killing the source daemon under load ($acked_before rows acknowledged so far; last transfer $(sj "['common_snapshot']"))"
killed="$(now_s)"
strata_kill
sleep 1
kill "$BENCH_PID" 2>/dev/null || true
wait "$ACK_PID" 2>/dev/null || true
BENCH_PID=""
ACK_PID=""
pkill -9 -f "$PG_BIN/postgres -D $M/data/pgdata" 2>/dev/null || true
acked="$(grep '^ack ' "$WORK/acks.out" | tail -1 | cut -d' ' -f2)"
[ -n "$acked" ] || die "no acknowledged row"
log "the last acknowledged row: $acked"
for m in "$M/data" "$M/wal"; do umount -l "$m" 2>/dev/null || true; done

log "waiting for the second daemon to take over (no break by hand)"
for _ in $(seq 1 300); do
  [ "$(tj "['state']")" = broken ] && [ "$(tj "['failover']['role']")" = serving ] && break
  sleep 0.2
done
[ "$(tj "['state']")" = broken ] || die "no takeover: $(tj "")"
took="$(elapsed_since "$killed")"
newlog="$(tail -n +"$((mark + 1))" "$STRATA_E2E_DIR/b/daemon.log")"
# Here-strings and captured outputs, not `cmd | grep -q`: grep -q quits at the first match,
# and under pipefail the writer's SIGPIPE would fail the check (or hide a match).
grep -q "taking over" <<<"$newlog" || die "the target's log does not show the takeover"
replayed="$(grep -m1 'sync journal replayed' <<<"$newlog" || true)"
frames="$(echo "$replayed" | grep -o 'frames=[0-9]*' | cut -d= -f2)"
[ "${frames:-0}" -gt 0 ] || die "the takeover replayed no frame: $replayed"
awk -v t="$took" -v min="$((TTL / 2))" 'BEGIN { exit !(t >= min) }' || die "taken over after $took s: before the source's lease could run out"
log "taken over $took s after the kill: $frames frames replayed ($(echo "$replayed" | grep -o 'operations=[0-9]*'))"
mountpoint -q "$SERVED/pgdata" && mountpoint -q "$SERVED/pgwal" || die "the target did not mount the volumes at $SERVED"

ln -sfn "$SERVED/pgwal/pg_wal" "$SERVED/pgdata/pgdata/pg_wal"
rm -f "$SERVED/pgdata/pgdata/postmaster.pid"
start "$SERVED/pgdata/pgdata" "$TPORT" "$WORK/target.log"
have="$(q "$TPORT" -c "select count(*) from acks where id <= $acked")"
[ "$have" = "$acked" ] || die "the target holds $have of the $acked acknowledged rows"
log "every acknowledged row is on the target ($acked; $(q "$TPORT" -c "select count(*) from acks") rows in all)"
invariants "$TPORT"
amcheck "$TPORT"
q "$TPORT" -c "insert into acks values (-1)"  # the new side acknowledges commits

log "the old source daemon comes back: fenced, then the mirror of the new source"
amark="$(wc -l <"$STRATA_E2E_DIR/daemon.log")"
strata_start
mounts="$("$STRATA_BIN" mount)"
grep -q "default/pgdata" <<<"$mounts" && die "the old source mounted its volumes again"
alog="$(tail -n +"$((amark + 1))" "$STRATA_E2E_DIR/daemon.log")"
grep -q "failover: fenced" <<<"$alog" || die "the old source did not fence itself"
"$PG_BIN/pgbench" -h "$WORK/sock" -p "$TPORT" -U postgres -c 2 -j 2 -T 8 -n bench >"$WORK/bench2.log" 2>&1 &
BENCH_PID=$!
rj() { strata_peer --json mirror show site-a:default/pgdata 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
for _ in $(seq 1 300); do [ "$(rj "['sync']['state']" 2>/dev/null)" = in-sync ] && break; sleep 0.2; done
[ "$(rj "['sync']['state']")" = in-sync ] || die "the old source did not become the mirror: $(strata_peer mirror list)"
base="$(rj "['last_transfer']['base']")"
sent="$(rj "['last_transfer']['done_bytes']")"
[ "$base" != None ] || die "the reverse resent everything: $(rj "['last_transfer']")"
# What the new source changed since the common snapshot (the journal's replay, recovery,
# pgbench) must travel: megabytes, not nothing.
[ "$sent" -gt 1000000 ] || die "the transfer after the reverse sent $sent bytes"
grep -q "this snapshot was received already" "$STRATA_E2E_DIR/daemon.log" && die "a transfer ran on the target"
log "reversed: the old source is the mirror now; first transfer $sent bytes from $base (incremental)"
snaps="$("$STRATA_BIN" snapshot list default/pgdata)"
grep -q "reverse-" <<<"$snaps" || die "the old source's own writes were not kept: $snaps"
"$STRATA_BIN" mount default/pgdata "$M/data" 2>/dev/null && die "a mount of the mirror's target was allowed"
wait "$BENCH_PID" || die "pgbench on the new source failed: $(tail -5 "$WORK/bench2.log")"
BENCH_PID=""

pg pg_ctl stop -D "$SERVED/pgdata/pgdata" -m fast -w >/dev/null
strata_peer unmount "$SERVED/pgdata"
strata_peer unmount "$SERVED/pgwal"
strata_peer check default
strata_peer_log_clean
log "PASS"
