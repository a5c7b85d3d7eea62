#!/usr/bin/env bash
# A synchronous mirror end to end: PostgreSQL 15 with its data and WAL on two volumes of
# pool `src`, mirrored as one group to pool `dst` of the same daemon with `--sync` (every
# fsync waits for dst's journal). Under pgbench plus a client that inserts numbered rows
# one commit at a time and notes each id once its COMMIT returned:
#   - the daemon is killed with kill -9 (PostgreSQL's files go ENOTCONN mid-commit), and
#     src's image is taken away: the source's storage is lost;
#   - the daemon restarts (src UNAVAILABLE), the mirror is broken: dst's volumes go back to
#     the last transferred snapshot and the journal's frames are replayed on top (the
#     daemon's log must say how many: the path under test);
#   - PostgreSQL started on dst recovers and holds every row whose COMMIT returned — rows
#     written after the last transfer included; TPC-B invariants, pg_amcheck and
#     `strata check dst` clean.
#
#   bash scripts/e2e/sync-mirror-postgres.sh      (root; installs postgresql-15 if missing)
#   LOAD_SECONDS (default 20): load before the kill; SCALE (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_NAME=sync-mirror-postgres
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
# shellcheck source=scripts/e2e/strata-env.sh
source scripts/e2e/strata-env.sh
export STRATA_E2E_DIR="${STRATA_E2E_DIR%/}-sync-mirror"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PORT="${PG_PORT:-55462}"
TPORT=$((PORT + 1))
SCALE="${SCALE:-5}"
LOAD_SECONDS="${LOAD_SECONDS:-20}"
[ "$(id -u)" -eq 0 ] || die "run as root"
ensure_pkgs "$PG_BIN/postgres" "$PG_BIN/pgbench" "$PG_BIN/pg_amcheck" \
  /usr/share/postgresql/15/extension/amcheck.control -- postgresql-15 postgresql-contrib

strata_fresh
M="$STRATA_E2E_DIR/mnt"
WORK="$STRATA_E2E_DIR/work"
mkdir -p "$WORK/sock" "$M"/{data,wal,tdata,twal} && chown -R postgres: "$WORK" && chmod 755 "$STRATA_E2E_DIR"
add_failure_log "$WORK/source.log"
add_failure_log "$WORK/target.log"
add_failure_log "$STRATA_E2E_DIR/daemon.log"
BENCH_PID=""
ACK_PID=""
cleanup() {
  local rc=$?
  trap - EXIT ERR
  set +e
  for p in "$BENCH_PID" "$ACK_PID"; do [ -z "$p" ] || kill "$p" 2>/dev/null; done
  for d in "$M/data/pgdata" "$M/tdata/pgdata"; do
    [ -f "$d/postmaster.pid" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$d" -m immediate -w -t 30 >/dev/null 2>&1
  done
  pkill -9 -f "$PG_BIN/postgres -D $M/data/pgdata" 2>/dev/null || true
  [ "$rc" -eq 0 ] || print_failure_logs
  strata_stop
  exit "$rc"
}
trap cleanup EXIT
# shellcheck source=scripts/e2e/pg-common.sh
. scripts/e2e/pg-common.sh

strata_start
"$STRATA_BIN" pool create src --device "$STRATA_E2E_DIR/src.img" --size 4G
"$STRATA_BIN" pool create dst --device "$STRATA_E2E_DIR/dst.img" --size 4G
"$STRATA_BIN" volume create src/pgdata --record-size 8K
"$STRATA_BIN" volume create src/pgwal
source_db src
q "$PORT" -c "create table acks (id int primary key)"

log "mirror src/pgdata + pgwal to dst, synchronous, transfers every 5 s"
"$STRATA_BIN" mirror create src/pgdata dst --group pgwal --sync --every 5s
mj() { "$STRATA_BIN" --json mirror show dst/pgdata | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
for _ in $(seq 1 100); do [ "$(mj "['sync']['state']")" = in-sync ] && break; sleep 0.2; done
[ "$(mj "['sync']['state']")" = in-sync ] || die "the sync mirror never went in sync: $(mj "")"

acked_load "$LOAD_SECONDS"
acked_before="$(grep -c '^ack ' "$WORK/acks.out" || true)"
last_common="$(mj "['common_snapshot']")"
log "killing the daemon under load ($acked_before rows acknowledged so far; last transfer $last_common)"
strata_kill
sleep 1
kill "$BENCH_PID" 2>/dev/null || true
wait "$ACK_PID" 2>/dev/null || true
BENCH_PID=""
ACK_PID=""
pkill -9 -f "$PG_BIN/postgres -D $M/data/pgdata" 2>/dev/null || true
rm -f "$M/data/pgdata/postmaster.pid" 2>/dev/null || true
acked="$(grep '^ack ' "$WORK/acks.out" | tail -1 | cut -d' ' -f2)"
[ -n "$acked" ] || die "no acknowledged row"
log "the last acknowledged row: $acked"
for m in "$M/data" "$M/wal"; do umount -l "$m" 2>/dev/null || true; done

log "src's storage is lost: its image goes away; the daemon restarts without it"
mv "$STRATA_E2E_DIR/src.img" "$STRATA_E2E_DIR/src.lost"
strata_start
"$STRATA_BIN" pool list
[ "$(mj "['sync']['state']")" = off ] || die "a link armed without the source pool: $(mj "['sync']")"

log "break the mirror on dst: back to the last transfer, then the journal's frames"
mark="$(wc -l <"$STRATA_E2E_DIR/daemon.log")"
"$STRATA_BIN" mirror break dst/pgdata
replayed="$(tail -n +"$((mark + 1))" "$STRATA_E2E_DIR/daemon.log" | grep 'sync journal replayed' | head -1)"
[ -n "$replayed" ] || die "the break replayed no journal: $(tail -n +"$((mark + 1))" "$STRATA_E2E_DIR/daemon.log")"
frames="$(echo "$replayed" | grep -o 'frames=[0-9]*' | cut -d= -f2)"
[ "${frames:-0}" -gt 0 ] || die "the break replayed no frame: $replayed"
log "break: $frames frames replayed ($(echo "$replayed" | grep -o 'operations=[0-9]*'))"

"$STRATA_BIN" mount dst/pgdata "$M/tdata"
"$STRATA_BIN" mount dst/pgwal "$M/twal"
ln -sfn "$M/twal/pg_wal" "$M/tdata/pgdata/pg_wal"
rm -f "$M/tdata/pgdata/postmaster.pid"
start "$M/tdata/pgdata" "$TPORT" "$WORK/target.log"
have="$(q "$TPORT" -c "select count(*) from acks where id <= $acked")"
[ "$have" = "$acked" ] || die "the target holds $have of the $acked acknowledged rows"
log "every acknowledged row is on the target ($acked; $(q "$TPORT" -c "select count(*) from acks") rows in all)"
invariants "$TPORT"
amcheck "$TPORT"
pg pg_ctl stop -D "$M/tdata/pgdata" -m fast -w >/dev/null
"$STRATA_BIN" unmount "$M/tdata"
"$STRATA_BIN" unmount "$M/twal"
"$STRATA_BIN" check dst
if grep -E '^[0-9TZ:.-]+ +ERROR ' "$STRATA_E2E_DIR/daemon.log" | grep -v -e 'pool UNAVAILABLE' -e 'Failed to send FUSE reply'; then
  die "unexpected ERROR lines in the daemon's log"
fi
log "PASS"
