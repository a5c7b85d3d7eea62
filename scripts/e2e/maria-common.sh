# MariaDB helpers shared by the snapshot and replication end-to-end tests (sourced after
# db-common.sh): start_db DATADIR RUNDIR PORT (a mariadbd whose pid goes into PIDS), sql
# SOCKET ARGS..., checksum SOCKET (of the sysbench tables and the marks table).
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
