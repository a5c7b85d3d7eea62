#!/usr/bin/env bash
# PostgreSQL helpers shared by the snapshot and replication end-to-end tests (sourced after
# db-common.sh): run a PostgreSQL tool as postgres, query a server on $WORK/sock, start one,
# check the TPC-B invariants, digest the data pgbench and the test wrote, run pg_amcheck.
# Needs PG_BIN, WORK (and for source_db M, PORT, SCALE) set by the caller.

pg() { runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
q() { local port="$1"; shift; bounded "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$WORK/sock" -p "$port" -U postgres -d bench "$@"; }
start() { # DATADIR PORT LOG
  pg pg_ctl start -D "$1" -l "$3" -w -t 300 -o "-p $2 -k $WORK/sock -c listen_addresses=''" >/dev/null ||
    die "PostgreSQL on $1 did not start"
}
invariants() { # PORT -> "sum_a sum_t sum_b sum_h" must all be equal
  local r
  r="$(q "$1" -F ' ' -c "select (select sum(abalance) from pgbench_accounts), (select sum(tbalance) from pgbench_tellers),
      (select sum(bbalance) from pgbench_branches), (select coalesce(sum(delta),0) from pgbench_history)")"
  read -r a t b h <<<"$r"
  [ "$a" = "$t" ] && [ "$t" = "$b" ] && [ "$b" = "$h" ] || die "TPC-B invariants broken on port $1: $r"
  log "TPC-B invariants hold on port $1 (balance sum $a)"
}
content() { # PORT -> a digest of everything pgbench and the test wrote
  q "$1" -c "select md5(string_agg(x, ',' order by x)) from (
      select 'a'||aid||':'||abalance x from pgbench_accounts union all
      select 'h'||tid||':'||bid||':'||aid||':'||delta||':'||mtime from pgbench_history union all
      select 'm'||id||':'||note from marks) s"
}
amcheck() { bounded "$PG_BIN/pg_amcheck" -h "$WORK/sock" -p "$1" -U postgres --all --install-missing --heapallindexed --rootdescend >/dev/null ||
  die "pg_amcheck found corruption on port $1"; }
# source_db [POOL]: PostgreSQL with its data on default/pgdata ($M/data) and its WAL on
# default/pgwal ($M/wal) — or on POOL/pgdata and POOL/pgwal, which must exist — started on
# $PORT, a pgbench database `bench` of scale $SCALE and the test's own table `marks`.
source_db() {
  local pool="${1:-default}"
  if [ -n "${1:-}" ]; then
    "$STRATA_BIN" mount "$pool/pgdata" "$M/data"
    "$STRATA_BIN" mount "$pool/pgwal" "$M/wal"
  else
    strata_mount pgdata "$M/data"
    strata_mount pgwal "$M/wal"
  fi
  install -d -o postgres -g postgres -m 700 "$M/data/pgdata" "$M/wal/pg_wal"
  log "initdb: data on $pool/pgdata, WAL on $pool/pgwal"
  pg initdb -D "$M/data/pgdata" --waldir="$M/wal/pg_wal" --data-checksums --auth=trust -U postgres >"$WORK/initdb.log"
  cat >>"$M/data/pgdata/postgresql.conf" <<CONF
fsync = on
synchronous_commit = on
full_page_writes = on
shared_buffers = 64MB
checkpoint_timeout = 30s
CONF
  start "$M/data/pgdata" "$PORT" "$WORK/source.log"
  q "$PORT" -d postgres -c "create database bench"
  bounded "$PG_BIN/pgbench" -h "$WORK/sock" -p "$PORT" -U postgres -i -q -s "$SCALE" bench >"$WORK/init.log" 2>&1
  q "$PORT" -c "create table marks (id int primary key, note text)"
}
# acked_load SECONDS: pgbench (4 clients) on $PORT plus one psql session inserting numbered
# rows into table acks, one commit each, printing "ack N" to $WORK/acks.out only after the
# COMMIT returned (psql may buffer its output: an ack lost that way makes a check weaker,
# never wrong; it flushes when the server's death ends it, ON_ERROR_STOP). Runs them in the
# background (BENCH_PID, ACK_PID) for SECONDS, then requires 100 acknowledged rows.
acked_load() {
  log "pgbench (4 clients) and a client committing numbered rows, for $1 s"
  "$PG_BIN/pgbench" -h "$WORK/sock" -p "$PORT" -U postgres -c 4 -j 2 -T 600 -n bench >"$WORK/bench.log" 2>&1 &
  # shellcheck disable=SC2034  # the caller's (it stops them)
  BENCH_PID=$!
  /usr/bin/python3 -c "
for i in range(1, 10**7):
    print(f'insert into acks values ({i});'); print(f'\\\\echo ack {i}')
" | "$PG_BIN/psql" -X -q -At -h "$WORK/sock" -p "$PORT" -U postgres -d bench -v ON_ERROR_STOP=1 2>"$WORK/acks.err" |
    cat >"$WORK/acks.out" &
  # shellcheck disable=SC2034
  ACK_PID=$!
  sleep "$1"
  local n; n="$(grep -c '^ack ' "$WORK/acks.out" || true)"
  [ "$n" -gt 100 ] || die "only $n rows committed in $1 s"
}
