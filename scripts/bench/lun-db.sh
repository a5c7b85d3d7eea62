#!/usr/bin/env bash
# PostgreSQL on ext4 on a block device served over NBD: a Strata LUN (8K blocks) against
# nbdkit's file plugin (a file on ext4 in a loop image), each reached the same way — nbdfuse
# → loop device → mkfs.ext4 → mount (scripts/e2e/lun-common.sh; this kernel has no NBD
# client). pgbench scale SCALE, CLIENTS clients, SECONDS per round; rounds alternate which
# server goes first; prints every round, the medians and the ratio.
#
#   ROUNDS=5 scripts/bench/lun-db.sh [SECONDS=30] [SCALE=10] [CLIENTS=4]
#   DB=mariadb ROUNDS=5 scripts/bench/lun-db.sh [SECONDS=30] [TABLE_SIZE=10000] [THREADS=4]
# DB=mariadb: MariaDB + sysbench oltp_read_write with TR-4722's parameters (2 tables of
# TABLE_SIZE rows, THREADS threads), the LUN with 16K blocks (InnoDB's page).
# Needs root, Debian packages nbdkit libnbd-bin postgresql-15 (mariadb-server sysbench for
# DB=mariadb). Takes the machine.
# STRATA_BENCH_BIN: a strata binary instead of building the release one. STRATA_SERVE_ARGS:
# more options for Strata's `serve` (e.g. "--nbd-poll-us 0").
set -euo pipefail
unset STRATA_API
cd "$(dirname "$0")/../.."
secs="${1:-30}"; scale="${2:-10}"; clients="${3:-4}"; rounds="${ROUNDS:-1}"; db="${DB:-postgres}"
case "$db" in postgres | mariadb) ;; *) echo "DB=$db: postgres or mariadb" >&2; exit 2 ;; esac
if [ "$db" = mariadb ]; then scale="${2:-10000}"; fi
E2E_NAME="lun-db-bench"
# shellcheck source=scripts/e2e/db-common.sh
. scripts/e2e/db-common.sh
work="${STRATA_BENCH_DIR:-/var/tmp/strata-bench-lundb}"
PG_BIN=/usr/lib/postgresql/15/bin
ensure_pkgs /usr/bin/nbdkit /usr/bin/nbdfuse "$PG_BIN/pgbench" -- nbdkit libnbd-bin postgresql-15
if [ "$db" = mariadb ]; then ensure_pkgs /usr/sbin/mariadbd /usr/bin/sysbench -- mariadb-server sysbench; fi
if [ -n "${STRATA_BENCH_BIN:-}" ]; then bin="$STRATA_BENCH_BIN"; else
  cargo build --release -p strata-cli --quiet
  bin="$PWD/target/release/strata"
fi
export LUN_WORK="$work/attach"
# shellcheck source=scripts/e2e/lun-common.sh
. scripts/e2e/lun-common.sh
pids=(); loopdev=""
cleanup() {
  set +e
  [ -f "$work/run/pid" ] && kill -9 "$(cat "$work/run/pid")" 2>/dev/null && sleep 1
  [ -f "$work/db/pgdata/postmaster.pid" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$work/db/pgdata" -m immediate -w >/dev/null 2>&1
  lun_detach 1 "$work/db"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  if mountpoint -q "$work/ext4"; then umount "$work/ext4"; fi
  if [ -n "$loopdev" ]; then losetup -d "$loopdev"; fi
}
trap cleanup EXIT
if mountpoint -q "$work/ext4" 2>/dev/null; then umount "$work/ext4"; fi
rm -rf "$work"; mkdir -p "$work" "$LUN_WORK" "$work/logs"
chmod 755 "$work"; chown postgres: "$work/logs"
export STRATA_SOCKET="$work/strata.sock"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sport="$(free_port)"; kport="$(free_port)"
# shellcheck disable=SC2086 # STRATA_SERVE_ARGS is a list of options
"$bin" serve --config /dev/null --data-dir "$work/strata" --default-pool-size 8G --nbd-port "$sport" \
  ${STRATA_SERVE_ARGS:-} >"$work/strata.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do "$bin" pool list >/dev/null 2>&1 && break; sleep 0.1; done
if [ "$db" = mariadb ]; then lun=default/my; bs=16K; else lun=default/pg; bs=8K; fi
"$bin" volume create "$lun" --lun 4G --block-size "$bs" >/dev/null
"$bin" export nbd "$lun" >/dev/null
truncate -s 8G "$work/ext4.img"; mkfs.ext4 -q -F "$work/ext4.img"
loopdev="$(losetup -f --show "$work/ext4.img")"
mkdir -p "$work/ext4"; mount "$loopdev" "$work/ext4"
truncate -s 4G "$work/ext4/nbdkit.img"
nbdkit -f -i 127.0.0.1 -p "$kport" file "$work/ext4/nbdkit.img" >"$work/nbdkit.log" 2>&1 &
pids+=($!)
sleep 1

# One MariaDB round on the file system at $work/db: install, sysbench prepare, run; prints TPS.
maria_round() {
  local server="$1" run="$work/run" tps
  mkdir -p "$run"; chown mysql: "$run"
  install -d -o mysql -g mysql -m 750 "$work/db/mysql"
  mariadb-install-db --no-defaults --user=mysql --datadir="$work/db/mysql" >"$work/logs/install-$server.log" 2>&1
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$work/db/mysql" --socket="$run/sock" --skip-networking \
    --pid-file="$run/pid" --log-error="$work/logs/maria-$server.log" --skip-log-bin \
    --innodb-flush-log-at-trx-commit=1 --innodb-flush-method=O_DIRECT --innodb-buffer-pool-size=128M \
    >/dev/null 2>&1 &
  for _ in $(seq 600); do mariadb-admin --no-defaults -S "$run/sock" -u root ping >/dev/null 2>&1 && break; sleep 0.2; done
  mariadb --no-defaults -S "$run/sock" -u root -e "create database sbtest"
  local sb=(--db-driver=mysql --mysql-socket="$run/sock" --mysql-user=root --mysql-db=sbtest --tables=2
    --table-size="$scale" --threads="$clients")
  sysbench oltp_read_write "${sb[@]}" prepare >/dev/null
  sysbench oltp_read_write "${sb[@]}" --time="$secs" run >"$work/logs/sysbench-$server.log"
  tps="$(grep -m1 -oE 'transactions: +[0-9]+ +\([0-9.]+ per sec' "$work/logs/sysbench-$server.log" |
    grep -oE '[0-9.]+ per' | awk '{ print $1 }')"
  mariadb-admin --no-defaults -S "$run/sock" -u root shutdown
  for _ in $(seq 300); do [ -e "$run/pid" ] || break; sleep 0.2; done
  rm -rf "${work:?}/db/mysql" "$run"
  echo "$tps"
}

# Between rounds, every server's writes reach its disk outside the measured windows: nbdkit's
# page cache by `sync`, Strata's open txg by `strata pool sync` (since 2026-11-29).
settle() { sync; "$bin" pool sync default >/dev/null; }

# One round on SERVER: attach a fresh file system, then the database's round; prints TPS.
round() {
  local server="$1" port name tps
  case "$server" in strata) port="$sport"; name="$lun" ;; nbdkit) port="$kport"; name="" ;; esac
  NBD_PORT="$port" lun_attach "$name" 1 "$work/db" ext4 >/dev/null
  if [ "$db" = mariadb ]; then
    tps="$(maria_round "$server")"
    lun_detach 1 "$work/db"
    if [ "$server" = strata ]; then nbdinfo --size "nbd://127.0.0.1:$sport/$lun" >/dev/null; fi
    settle; sleep 3
    echo "$tps"
    return
  fi
  mkdir -p "$work/db/pgdata" "$work/sock"
  chown postgres: "$work/db/pgdata" "$work/sock"; chmod 700 "$work/db/pgdata"; chmod 755 "$work/db"
  runuser -u postgres -- "$PG_BIN/initdb" -D "$work/db/pgdata" -A trust -U postgres >/dev/null
  runuser -u postgres -- "$PG_BIN/pg_ctl" start -D "$work/db/pgdata" -w -t 120 -l "$work/logs/pg-$server.log" \
    -o "-k $work/sock -c listen_addresses='' -c fsync=on -c synchronous_commit=on -c shared_buffers=128MB" >/dev/null
  "$PG_BIN/pgbench" -h "$work/sock" -U postgres -i -q -s "$scale" postgres >/dev/null 2>&1
  "$PG_BIN/psql" -h "$work/sock" -U postgres -qc checkpoint postgres
  tps="$("$PG_BIN/pgbench" -h "$work/sock" -U postgres -c "$clients" -j 2 -T "$secs" postgres 2>/dev/null |
    sed -n 's/^tps = \([0-9.]*\) .*/\1/p')"
  runuser -u postgres -- "$PG_BIN/pg_ctl" stop -D "$work/db/pgdata" -m fast -w >/dev/null
  rm -rf "${work:?}/db/pgdata"
  lun_detach 1 "$work/db"
  # Give the device back its space between rounds (a fresh file system each round).
  if [ "$server" = strata ]; then nbdinfo --size "nbd://127.0.0.1:$sport/default/pg" >/dev/null; fi
  settle; sleep 3
  echo "$tps"
}
declare -A got=()
for ((i = 1; i <= rounds; i++)); do
  order=(strata nbdkit); ((i % 2 == 0)) && order=(nbdkit strata)
  for s in "${order[@]}"; do
    t="$(round "$s")" || exit 1
    [ -n "$t" ] || { echo "round $i of $s gave no TPS (see $work/logs/)" >&2; exit 1; }
    got[$s]+="$t "
    echo "round $i $s: $t tps" >&2
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# shellcheck disable=SC2086 # word splitting of the collected values is the point
{ ms="$(median ${got[strata]})"; mk="$(median ${got[nbdkit]})"; }
if [ "$db" = mariadb ]; then
  what="sysbench oltp_read_write on MariaDB on ext4 over NBD, 2 × $scale rows, $clients threads, ${secs} s"
else
  what="pgbench on ext4 over NBD, scale $scale, $clients clients, ${secs} s"
fi
echo "| $what | Strata LUN | nbdkit file | Strata / nbdkit |"
echo "|---|---:|---:|---:|"
echo "| TPS (median of $rounds) | $ms | $mk | $(python3 -c "print(f'{$ms/$mk:.2f}')") |"
echo
echo "Every round: Strata ${got[strata]}/ nbdkit ${got[nbdkit]}"
