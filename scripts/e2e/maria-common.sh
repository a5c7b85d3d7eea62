# MariaDB helpers shared by the snapshot and replication end-to-end tests (sourced after
# db-common.sh): start_db DATADIR RUNDIR PORT (a mariadbd whose pid goes into PIDS), sql
# SOCKET ARGS..., checksum SOCKET (of the sysbench tables and the marks table), source_db
# PORT [POOL] (the source database on volume default/mydata — or POOL/mydata, which must
# exist — at $M/data, run dir $RUN/src: sets SRC and SB, the sysbench arguments).
# shellcheck shell=bash

start_db() { # DATADIR RUNDIR PORT
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$1" --socket="$2/sock" --port="$3" \
    --bind-address=127.0.0.1 --pid-file="$2/pid" --log-error="$2/err.log" --skip-log-bin \
    --innodb-flush-log-at-trx-commit=1 --innodb-flush-method=O_DIRECT --innodb-buffer-pool-size=64M \
    >>"$2/stdout" 2>&1 &
  PIDS+=($!)
  wait_for "mariadbd on $1" 120 mariadb-admin --no-defaults -S "$2/sock" -u root ping
}
sql() { local sock="$1"; shift; bounded mariadb --no-defaults -S "$sock" -u root -N -B "$@"; }
checksum() { sql "$1" -e "checksum table sbtest.sbtest1, sbtest.sbtest2, sbtest.marks extended" | awk '{print $2}' | tr '\n' ' '; }
source_db() { # PORT [POOL]
  if [ -n "${2:-}" ]; then "$STRATA_BIN" mount "$2/mydata" "$M/data"; else strata_mount mydata "$M/data"; fi
  install -d -o mysql -g mysql -m 750 "$M/data/mysql"
  mariadb-install-db --no-defaults --user=mysql --datadir="$M/data/mysql" --auth-root-authentication-method=normal \
    >"$RUN/install.log" 2>&1 || die "mariadb-install-db failed: $(tail -5 "$RUN/install.log")"
  start_db "$M/data/mysql" "$RUN/src" "$1"
  SRC="$RUN/src/sock"
  sql "$SRC" -e "create database sbtest; create table sbtest.marks (id int primary key, note text) engine=innodb"
  SB=(--db-driver=mysql --mysql-socket="$SRC" --mysql-user=root --mysql-db=sbtest --tables=2 --table-size=10000)
  bounded sysbench oltp_read_write "${SB[@]}" prepare >"$RUN/prepare.log"
}
